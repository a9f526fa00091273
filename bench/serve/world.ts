/**
 * The serving world of SkyServe's simulation, tick by tick: each zone gives at most as many spot
 * replicas as its availability trace says at that tick (a replica beyond that is taken back, and
 * one asked for is refused); a replica is ready once it has been held for the whole cold start;
 * on-demand replicas are always given. Cost counts every replica held at every tick (spot 1,
 * on-demand `priceRatio`), relative to all on-demand; availability is the share of ticks, after
 * the first cold start, with at least `target` ready replicas. The policy decides
 * (core/serving/spot-placement.ts); this only plays the world.
 */
import { SeededRandom } from '../../cloud/sim/clock.ts';
import { initialMemory, planServing, type ServingPolicyName } from '../../core/serving/spot-placement.ts';

export interface ServingRun {
  /** Availability per zone per tick (obtainable spot replicas), all at the run's tick length. */
  readonly zones: readonly (readonly number[])[];
  readonly ticks: number;
  readonly tickSec: number;
  readonly offset: number;
  readonly coldStartTicks: number;
  readonly target: number;
  readonly nExtra: number;
  readonly priceRatio: number;
  readonly seed: number;
  /**
   * A warm pool for the on-demand fallback: `size` machines prepared ahead, an on-demand replica
   * started on one ready in `coldStartTicks` (its own, shorter) instead of the run's; a machine used
   * is prepared again in the run's cold start. Each waiting machine costs `volumeCost` a tick (its
   * volume, in units of a spot replica's tick).
   */
  readonly warmPool?: { readonly size: number; readonly coldStartTicks: number; readonly volumeCost: number };
}

export interface ServingResult {
  readonly availabilityPct: number;
  /** Cost ÷ all on-demand (on-demand = 1). */
  readonly costRatio: number;
  readonly shortReplicaMinutes: number;
  readonly coldStarts: number;
  /** Ready replicas at each scored tick. */
  readonly ready: readonly number[];
}

export function replayServing(policy: ServingPolicyName, run: ServingRun): ServingResult {
  const random = new SeededRandom(run.seed);
  const nz = run.zones.length;
  const c = run.coldStartTicks;
  const spot: number[][] = [];
  const demand: number[] = [];
  let memory = initialMemory(nz);
  const readySpot = (t: number) => {
    if (t < c) return 0;
    let n = 0;
    for (let z = 0; z < nz; z++) {
      let m = Infinity;
      for (let u = t - c; u <= t; u++) m = Math.min(m, spot[u]![z]!);
      n += m;
    }
    return n;
  };
  // On-demand replicas by when they were started and how soon they are ready (a warm machine's sooner).
  const odStarts: { atTick: number; readyTick: number }[] = [];
  const warmFreeAt: number[] = new Array<number>(run.warmPool?.size ?? 0).fill(0);
  // Ready on-demand replicas at each tick, counted as the tick is played (the holdings change after it).
  const odReady: number[] = [];
  const readyDemand = (t: number) => odReady[t] ?? 0;
  let coldStarts = 0;
  for (let t = 0; t < run.ticks; t++) {
    const held = t > 0 ? spot[t - 1]! : new Array<number>(nz).fill(0);
    const out = planServing(policy, { target: run.target, spotHeld: held, spotReady: t > 0 ? readySpot(t - 1) : 0 }, memory, {
      nExtra: policy === 'spothedge' ? run.nExtra : 0,
      pick: (n) => random.int(0, n - 1),
      tickSec: run.tickSec,
      coldStartTicks: run.coldStartTicks,
    });
    memory = out.memory;
    const given = out.plan.spot.map((want, z) => {
      const trace = run.zones[z]!;
      return Math.min(want, trace[(t + run.offset) % trace.length]!);
    });
    spot.push(given);
    demand.push(out.plan.onDemand);
    // Fewer on-demand replicas: the newest go first; more: each new one on a prepared warm machine if one is free.
    while (odStarts.length > out.plan.onDemand) odStarts.pop();
    while (odStarts.length < out.plan.onDemand) {
      const w = warmFreeAt.findIndex((free) => free <= t);
      if (w >= 0) {
        warmFreeAt[w] = t + c; // prepared again in a cold start
        odStarts.push({ atTick: t, readyTick: t + run.warmPool!.coldStartTicks });
      } else odStarts.push({ atTick: t, readyTick: t + c });
    }
    odReady.push(odStarts.filter((s) => s.readyTick <= t).length);
    for (let z = 0; z < nz; z++) coldStarts += Math.max(0, given[z]! - held[z]!);
    coldStarts += Math.max(0, out.plan.onDemand - (t > 0 ? demand[t - 1]! : 0));
  }
  let met = 0;
  let cost = 0;
  let short = 0;
  const ready: number[] = [];
  for (let t = c; t < run.ticks; t++) {
    const r = readySpot(t) + readyDemand(t);
    ready.push(r);
    if (r >= run.target) met++;
    short += Math.max(0, run.target - r);
    cost +=
      spot[t]!.reduce((a, b) => a + b, 0) + run.priceRatio * demand[t]! + (run.warmPool ? run.warmPool.size * run.warmPool.volumeCost : 0);
  }
  const scored = Math.max(1, run.ticks - c);
  return {
    availabilityPct: (100 * met) / scored,
    costRatio: cost / (run.target * run.priceRatio * scored),
    shortReplicaMinutes: (short * run.tickSec) / 60,
    coldStarts,
    ready,
  };
}
