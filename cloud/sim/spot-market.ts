import { readFileSync } from 'node:fs';
import type { Offering } from '../../core/catalog.ts';
import { inService } from '../../core/fleet.ts';
import type { SeededRandom } from './clock.ts';
import type { CapacityModel, SimInstance } from './sim-cloud.ts';
import { GpuFleetError } from '../../core/errors.ts';

/**
 * The simulated spot market: whether a pool can give a machine now, and which running spot
 * machines it takes back. On-demand pools always have capacity.
 */
export interface SpotMarket extends CapacityModel {
  /** Spot machines the market takes back at this time (each is warned two minutes ahead by the caller). */
  reclaims(instances: readonly SimInstance[], atMs: number): SimInstance[];
  describe(): string;
}

/** An availability trace in the format of SkyPilot's spot-traces: one value per tick, > 0 when spot capacity could be had. */
export interface AvailabilityTrace {
  readonly name: string;
  readonly gapSec: number;
  readonly data: readonly number[];
}

export function loadAvailabilityTrace(file: string | URL): AvailabilityTrace {
  const raw = JSON.parse(readFileSync(file, 'utf8')) as { metadata?: { gap_seconds?: number }; data?: unknown };
  const gapSec = raw.metadata?.gap_seconds;
  if (typeof gapSec !== 'number' || gapSec <= 0) throw new GpuFleetError(`${String(file)}: metadata.gap_seconds must be a positive number`);
  if (!Array.isArray(raw.data) || raw.data.some((v) => typeof v !== 'number'))
    throw new GpuFleetError(`${String(file)}: data must be an array of numbers`);
  return {
    name: String(file)
      .split('/')
      .pop()!
      .replace(/\.json$/, ''),
    gapSec,
    data: raw.data as number[],
  };
}

/**
 * Spot capacity from real availability traces, one per pool (zone × instance type). When a
 * pool's trace says 0, launches there fail and every spot machine in it is taken back; the
 * machines launched after it comes back are safe until the next drop. All pools read their
 * traces from the same offset (in ticks), chosen from the seed, so every policy run with the
 * same seed meets the same market.
 */
export class TraceSpotMarket implements SpotMarket {
  private readonly reclaimed = new Set<string>();

  constructor(
    private readonly traceOf: (offering: Pick<Offering, 'zone' | 'instanceType'>) => AvailabilityTrace | undefined,
    private readonly startMs: number,
    private readonly offsetTicks: number,
  ) {}

  /** A seeded offset that leaves `horizonSec` of trace after it (or 0 when the trace is shorter). */
  static offsetFor(trace: AvailabilityTrace, horizonSec: number, random: SeededRandom): number {
    const spare = trace.data.length - Math.ceil(horizonSec / trace.gapSec) - 1;
    return spare > 0 ? random.int(0, spare) : 0;
  }

  private valueAt(trace: AvailabilityTrace, atMs: number): number {
    const tick = this.offsetTicks + Math.floor((atMs - this.startMs) / (trace.gapSec * 1000));
    return trace.data[((tick % trace.data.length) + trace.data.length) % trace.data.length] ?? 1;
  }

  obtainable(offering: Offering, atMs: number): boolean {
    if (offering.capacityType !== 'spot') return true;
    const trace = this.traceOf(offering);
    return trace === undefined || this.valueAt(trace, atMs) > 0;
  }

  reclaims(instances: readonly SimInstance[], atMs: number): SimInstance[] {
    const out: SimInstance[] = [];
    for (const inst of instances) {
      if (!reclaimable(inst, this.reclaimed)) continue;
      const trace = this.traceOf(inst.offering);
      if (trace && this.valueAt(trace, atMs) <= 0) {
        this.reclaimed.add(inst.id);
        out.push(inst);
      }
    }
    return out;
  }

  describe(): string {
    return `availability traces from tick ${this.offsetTicks}`;
  }
}

/** Spot interruptions at a fixed rate per machine-hour (a Poisson process per machine), seeded. */
export class RateSpotMarket implements SpotMarket {
  private lastMs: number | undefined;
  private readonly reclaimed = new Set<string>();

  constructor(
    private readonly ratePerHour: (offering: Offering) => number,
    private readonly random: SeededRandom,
  ) {}

  obtainable(): boolean {
    return true;
  }

  reclaims(instances: readonly SimInstance[], atMs: number): SimInstance[] {
    const dtHours = this.lastMs === undefined ? 0 : (atMs - this.lastMs) / 3_600_000;
    this.lastMs = atMs;
    const out: SimInstance[] = [];
    for (const inst of instances) {
      if (!reclaimable(inst, this.reclaimed)) continue;
      const p = 1 - Math.exp(-this.ratePerHour(inst.offering) * dtHours);
      if (this.random.next() < p) {
        this.reclaimed.add(inst.id);
        out.push(inst);
      }
    }
    return out;
  }

  describe(): string {
    return 'interruptions at fixed rates per pool';
  }
}

/** A spot machine the market may still take: running (or held by a hook) and not already reclaimed. */
function reclaimable(inst: SimInstance, reclaimed: ReadonlySet<string>): boolean {
  return inst.offering.capacityType === 'spot' && (inService(inst.state) || inst.state === 'terminating-wait') && !reclaimed.has(inst.id);
}
