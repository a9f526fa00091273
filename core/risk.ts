import { HOURS_PER_MONTH } from './period.ts';
/**
 * Interruption risk of a spot pool, learned from what gpu-fleet observed with a prior from the
 * AWS Spot Instance Advisor's interruption-frequency band.
 *
 * The Advisor publishes, per region and instance type, the share of spot instances interrupted
 * over the trailing month in bands (<5%, 5-10%, 10-15%, 15-20%, >20%). Read as a monthly
 * probability p of one interruption, the prior rate is λ0 = −ln(1 − p) / 730 h. The posterior
 * is Gamma–Poisson: with prior weight H0 instance-hours, k interruptions observed over E
 * instance-hours give λ = (λ0·H0 + k) / (H0 + E).
 */

/** Monthly interruption probability for each Advisor band (the band's middle; ">20%" read as 25%). */
export const ADVISOR_BAND_MONTHLY: Readonly<Record<string, number>> = {
  '<5%': 0.025,
  '5-10%': 0.075,
  '10-15%': 0.125,
  '15-20%': 0.175,
  '>20%': 0.25,
};

/** Prior for pools with no Advisor data: the worst band, so unknown never looks safe. */
export const UNKNOWN_BAND_MONTHLY = ADVISOR_BAND_MONTHLY['>20%']!;

export function priorRatePerHour(band: string | undefined): number {
  const p = (band !== undefined ? ADVISOR_BAND_MONTHLY[band] : undefined) ?? UNKNOWN_BAND_MONTHLY;
  return -Math.log(1 - p) / HOURS_PER_MONTH;
}

export interface PoolObservations {
  readonly interruptions: number;
  /** Instance-hours gpu-fleet has held in the pool. */
  readonly exposureHours: number;
}

/**
 * Posterior interruptions per instance-hour. `priorWeightHours` says how many instance-hours of
 * evidence the prior counts for (default one instance-month).
 */
export function poolRatePerHour(
  band: string | undefined,
  observed: PoolObservations | undefined,
  priorWeightHours = HOURS_PER_MONTH,
): number {
  const prior = priorRatePerHour(band);
  if (!observed) return prior;
  const k = Math.max(0, observed.interruptions);
  const e = Math.max(0, observed.exposureHours);
  return (prior * priorWeightHours + k) / (priorWeightHours + e);
}

/** What the pool history holds for one machine: when it was first and last noted, and when it was interrupted. */
export interface MachineHistory {
  readonly offeringId: string;
  readonly firstMs?: number;
  readonly lastMs?: number;
  readonly interruptedAtMs?: number;
}

/**
 * Per pool, since `sinceMs`: the machine-hours of exposure and the interruptions. A machine's
 * span runs to its last note, or to its interruption when that came later (notes are minutes
 * apart, the interruption is its end).
 */
export function poolStatsOf(
  machines: Iterable<MachineHistory>,
  sinceMs: number,
): Map<string, { interruptions: number; exposureHours: number; lastInterruptedAtMs?: number }> {
  const out = new Map<string, { interruptions: number; exposureHours: number; lastInterruptedAtMs?: number }>();
  const entry = (o: string) => {
    let e = out.get(o);
    if (!e) {
      e = { interruptions: 0, exposureHours: 0 };
      out.set(o, e);
    }
    return e;
  };
  for (const m of machines) {
    if (m.firstMs !== undefined && m.lastMs !== undefined) {
      const last = Math.max(m.lastMs, m.interruptedAtMs ?? 0);
      if (last >= sinceMs) entry(m.offeringId).exposureHours += (last - Math.max(m.firstMs, sinceMs)) / 3_600_000;
    }
    const at = m.interruptedAtMs;
    if (at !== undefined && at >= sinceMs) {
      const e = entry(m.offeringId);
      e.interruptions++;
      e.lastInterruptedAtMs = Math.max(e.lastInterruptedAtMs ?? 0, at);
    }
  }
  return out;
}
