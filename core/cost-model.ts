import type { Job } from './job.ts';
import { costForDuration, type MicroUsd } from './money.ts';

/**
 * The cost model: what a job is expected to cost on an offering.
 *
 * On-demand, a job of expected runtime T costs price × T (its share of the machine's price).
 * On spot it costs more than the sticker price says, because an interruption throws away the
 * work since the last checkpoint (the whole run when there is none) and the restart takes
 * time. With interruptions arriving at rate λ, and work saved every c seconds (c = T without
 * checkpoints), the expected time to finish each segment of c seconds is (1/λ + r)(e^{λc} − 1),
 * where r is the restart time (boot, restore) — the classic result for checkpointed work under
 * exponential failures (Young 1974; Daly 2006). Over T/c segments the expected run time is
 *   E[T'] = (T/c)(1/λ + r)(e^{λc} − 1),
 * which tends to T as λ → 0. The ratio E[T']/T is the job's *spot factor* on that pool.
 */

export interface SpotFactorInput {
  /** Remaining work, seconds. */
  readonly workSec: number;
  /** Seconds between checkpoints; undefined when the job does not checkpoint. */
  readonly checkpointIntervalSec?: number;
  /** Expected interruptions per hour on the pool. */
  readonly interruptionsPerHour: number;
  /** Seconds lost to each restart (new machine, restore from checkpoint). */
  readonly restartSec: number;
}

/** E[run time on spot] / work. 1 when the pool is never interrupted; Infinity when the job would practically never finish. */
export function spotFactor(input: SpotFactorInput): number {
  const { workSec, interruptionsPerHour, restartSec } = input;
  if (workSec <= 0) return 1;
  const lambda = interruptionsPerHour / 3600;
  if (lambda <= 0) return 1;
  const c = Math.min(workSec, input.checkpointIntervalSec ?? workSec);
  const x = lambda * c;
  if (x > 50) return Infinity;
  // (1/λ + r)(e^{λc} − 1)/c, written with expm1 for accuracy when λc is small.
  return ((1 / lambda + restartSec) * Math.expm1(x)) / c;
}

export interface CostPolicy {
  /** Runtime assumed for a job that gives none, seconds. */
  readonly defaultRuntimeSec: number;
  /** Restart cost of an interruption: a new machine's boot plus restoring a checkpoint, seconds. */
  readonly restartSec: number;
}

/** The work a job still has to do, in seconds, from its estimate less its newest checkpoint. */
export function remainingWorkSec(job: Job, policy: Pick<CostPolicy, 'defaultRuntimeSec'>): number {
  const total = job.spec.expectedRuntimeSec ?? policy.defaultRuntimeSec;
  return Math.max(60, total - (job.checkpoint?.progressSec ?? 0));
}

/** The job's spot factor on a pool with the given interruption rate. */
export function jobSpotFactor(job: Job, interruptionsPerHour: number, policy: CostPolicy): number {
  return spotFactor({
    workSec: remainingWorkSec(job, policy),
    ...(job.spec.checkpoint ? { checkpointIntervalSec: job.spec.checkpoint.intervalSec } : {}),
    interruptionsPerHour,
    restartSec: policy.restartSec,
  });
}

/**
 * What each team's running work will still cost: every active attempt's price share (as placed)
 * times its expected remaining runtime. The runtime is the spec's `expectedRuntimeSec`, or the
 * policy's `defaultRuntimeSec` (one hour) for a job without one; the work done is its newest
 * checkpoint's progress plus the time the current attempt has run; a job past its estimate is
 * counted for `minRemainingSec` more (one reconcile interval).
 */
export function committedCostMicroUsd(
  activeJobs: readonly Job[],
  nowMs: number,
  policy: Pick<CostPolicy, 'defaultRuntimeSec'>,
  minRemainingSec: number,
): Map<string, MicroUsd> {
  const out = new Map<string, MicroUsd>();
  for (const job of activeJobs) {
    const price = job.placement?.priceMicroUsdPerHour;
    if (!price) continue;
    const total = job.spec.expectedRuntimeSec ?? policy.defaultRuntimeSec;
    const ranSec = job.startedAtMs !== undefined ? Math.max(0, nowMs - job.startedAtMs) / 1000 : 0;
    const leftSec = Math.max(minRemainingSec, total - (job.checkpoint?.progressSec ?? 0) - ranSec);
    out.set(job.team, (out.get(job.team) ?? 0) + costForDuration(price, leftSec * 1000));
  }
  return out;
}
