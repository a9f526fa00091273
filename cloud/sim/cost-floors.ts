import type { Offering } from '../../core/catalog.ts';
import { gpuModelMatches, type GpuModel } from '../../core/gpu.ts';
import type { Job } from '../../core/job.ts';
import type { MicroUsd } from '../../core/money.ts';
import type { SimEnvironment } from './environment.ts';
import { groupOfferings, type SimGroupConfig } from './sim-cloud.ts';

/**
 * The yardsticks a replay's cost is read against. Both price only useful work (no idle machine,
 * no boot, no rework), per GPU, at the cheapest pool of the run's node groups the job may use
 * (its GPU models; spot only for interruptible work):
 *
 * - the **spot floor** prices all of it at the cheapest spot price, whether or not spot capacity
 *   could be had then: a floor no policy can reach on a market with outages;
 * - the **lower bound** prices each tick of a job's run at the cheapest pool that could give a
 *   machine at that tick: spot only while some spot pool the job may use has capacity (the
 *   market's availability, not injected faults), else on-demand. A job's useful work is spread
 *   over its running ticks in proportion. No policy running the same jobs when they ran pays less.
 */

export interface FloorPool {
  readonly offering: Offering;
  readonly model: GpuModel;
  readonly spot: boolean;
  /** µUSD per GPU-hour. */
  readonly perGpu: number;
}

/** The pools of the run's node groups, each with its price per GPU-hour. */
export function floorPools(env: SimEnvironment, groups: readonly SimGroupConfig[]): FloorPool[] {
  const out: FloorPool[] = [];
  for (const g of groups) {
    for (const offering of groupOfferings(g)) {
      const it = env.catalog.instanceTypes.get(offering.instanceType);
      const p = it ? env.priceOf(offering) : undefined;
      if (it && p) out.push({ offering, model: it.gpuModel, spot: g.capacityType === 'spot', perGpu: p.price / it.gpuCount });
    }
  }
  return out;
}

function usable(job: Job, pool: FloorPool): boolean {
  const models = job.spec.gpu.models;
  return (job.spec.interruptible || !pool.spot) && (!models || models.some((m) => gpuModelMatches(m, pool.model)));
}

function cheapest(job: Job, pools: readonly FloorPool[], open: (p: FloorPool) => boolean): number | undefined {
  let best: number | undefined;
  for (const p of pools) if (usable(job, p) && open(p) && (best === undefined || p.perGpu < best)) best = p.perGpu;
  return best;
}

/** Every GPU-hour of useful work at the cheapest price that job could use, whatever the market. */
export function spotFloorCost(pools: readonly FloorPool[], jobs: readonly Job[], useful: ReadonlyMap<string, number>): MicroUsd {
  let total = 0;
  for (const j of jobs) {
    const work = useful.get(j.id) ?? 0;
    const price = work > 0 ? cheapest(j, pools, () => true) : undefined;
    if (price !== undefined) total += (price * work) / 3_600_000;
  }
  return Math.round(total);
}

/** The availability-aware lower bound, noted tick by tick over the jobs that run. */
export class AvailabilityLowerBound {
  /** Per job: running ms noted, and Σ (ms × cheapest obtainable price then). */
  private readonly noted = new Map<string, { ms: number; priced: number }>();

  constructor(
    private readonly pools: readonly FloorPool[],
    /** Whether a spot pool has capacity at a time (the market's traces; always, without a market). */
    private readonly obtainable: (offering: Offering, atMs: number) => boolean,
  ) {}

  /** One tick of `tickMs` at `atMs` with these jobs running. */
  note(atMs: number, tickMs: number, running: readonly Job[]): void {
    if (running.length === 0) return;
    const open = new Map<FloorPool, boolean>();
    const isOpen = (p: FloorPool) => {
      let v = open.get(p);
      if (v === undefined) open.set(p, (v = !p.spot || this.obtainable(p.offering, atMs)));
      return v;
    };
    const byClass = new Map<string, number | undefined>();
    for (const j of running) {
      const key = `${j.spec.interruptible ? 1 : 0}|${j.spec.gpu.models?.join(',') ?? '*'}`;
      if (!byClass.has(key)) byClass.set(key, cheapest(j, this.pools, isOpen));
      const price = byClass.get(key);
      if (price === undefined) continue;
      const n = this.noted.get(j.id) ?? { ms: 0, priced: 0 };
      n.ms += tickMs;
      n.priced += price * tickMs;
      this.noted.set(j.id, n);
    }
  }

  /** The bound: each job's useful work at the mean cheapest obtainable price over its running ticks (the spot floor's price for one never seen running). */
  cost(jobs: readonly Job[], useful: ReadonlyMap<string, number>): MicroUsd {
    let total = 0;
    for (const j of jobs) {
      const work = useful.get(j.id) ?? 0;
      if (work <= 0) continue;
      const n = this.noted.get(j.id);
      const price = n && n.ms > 0 ? n.priced / n.ms : cheapest(j, this.pools, () => true);
      if (price !== undefined) total += (price * work) / 3_600_000;
    }
    return Math.round(total);
  }
}
