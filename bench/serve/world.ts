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
  const readyDemand = (t: number) => {
    if (t < c) return 0;
    let m = Infinity;
    for (let u = t - c; u <= t; u++) m = Math.min(m, demand[u]!);
    return m;
  };
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
    cost += spot[t]!.reduce((a, b) => a + b, 0) + run.priceRatio * demand[t]!;
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
