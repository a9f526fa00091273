/**
 * Where a service's replicas run, tick by tick, across failure domains (zones, regions, clouds):
 * how many spot replicas to hold in each zone and how many on-demand ones beside them. Pure: the
 * caller keeps the memory between ticks and supplies the random choice (seeded), so the same
 * decision serves the simulator, the benchmarks and the control loop.
 *
 * The policies are those of SkyServe's evaluation (Mao et al., EuroSys'25), as its artifact
 * (MaoZiming/spothedge_ae) runs them:
 * - `on-demand`: every replica on-demand.
 * - `even-spread`: spot only, spread evenly over every zone, no fallback.
 * - `round-robin`: spot only, each new replica in the next zone in turn, no fallback.
 * - `spothedge`: target + N_extra spot replicas, each new one in an "active" zone (one that has
 *   not taken a replica back or refused one since it last gave one) holding none yet if there is
 *   such a zone; all zones are active again when too few are; on-demand replicas cover the spot
 *   replicas that are not ready, at most the target (dynamic fallback).
 * - `gpu-fleet`: ours, below (GPU_FLEET_SERVING).
 * - `gpu-fleet-model`: a candidate, measured in bench:serve and not yet in the control loop: gpu-fleet's
 *   rules with each zone's risk read from the spot model (core/spot-model.ts) and failure domains
 *   learned (GPU_FLEET_MODEL_SERVING).
 */
import { emptySpotModel, observe, survival, unseen, upProbability, type SpotModelState } from '../spot-model.ts';

export type ServingPolicyName = 'on-demand' | 'even-spread' | 'round-robin' | 'spothedge' | 'gpu-fleet' | 'gpu-fleet-model';

export const SERVING_POLICIES: readonly ServingPolicyName[] = [
  'on-demand',
  'even-spread',
  'round-robin',
  'spothedge',
  'gpu-fleet',
  'gpu-fleet-model',
];

/** What a policy sees at a tick. */
export interface ServingView {
  /** Ready replicas the service needs. */
  readonly target: number;
  /** Spot replicas held in each zone now (what the zones gave of what was asked, after take-backs). */
  readonly spotHeld: readonly number[];
  /** Spot replicas ready now (past their cold start). */
  readonly spotReady: number;
}

/** What a policy asks for at a tick: spot replicas per zone, and on-demand replicas. */
export interface ServingPlan {
  readonly spot: readonly number[];
  readonly onDemand: number;
}

/** What a policy remembers between ticks. */
export interface ServingMemory {
  /** Round robin: the zone the next replica goes to. */
  readonly next: number;
  /** SpotHedge: zones that last gave what was asked, and zones that took back or refused. */
  readonly active: readonly number[];
  readonly preempted: readonly number[];
  /** What was asked per zone at the last tick. */
  readonly asked?: readonly number[];
  /** gpu-fleet: ticks seen, per zone the replicas it took back or refused and the replica-ticks it held, and the tick of the last loss anywhere. */
  readonly tick?: number;
  readonly losses?: readonly number[];
  readonly exposure?: readonly number[];
  readonly lastLoss?: number;
  /** gpu-fleet-model: the spot model of its zones (pools by zone name, see `zoneNames`). */
  readonly model?: SpotModelState;
}

export interface ServingOptions {
  /** Spot replicas beyond the target (SpotHedge's N_extra). */
  readonly nExtra: number;
  /** A random index below `n` (seeded by the caller). */
  readonly pick: (n: number) => number;
  /** gpu-fleet: spare spot replicas, a fixed number or chosen from the pools' risk (the default). */
  readonly spare?: number | 'risk';
  /** gpu-fleet: seconds between decisions, and ticks from launch to ready (defaults 30 s and 120 s's worth). */
  readonly tickSec?: number;
  readonly coldStartTicks?: number;
  /** gpu-fleet-model: the zones' names, the spot model's pools (default "zone-0", "zone-1", … in zone order). */
  readonly zoneNames?: readonly string[];
}

export function initialMemory(zones: number): ServingMemory {
  return { next: 0, active: range(zones), preempted: [] };
}

export function planServing(
  policy: ServingPolicyName,
  view: ServingView,
  memory: ServingMemory,
  options: ServingOptions,
): { plan: ServingPlan; memory: ServingMemory } {
  const zones = view.spotHeld.length;
  switch (policy) {
    case 'on-demand':
      return { plan: { spot: new Array<number>(zones).fill(0), onDemand: view.target }, memory };
    case 'even-spread': {
      const { spot, toPlace } = keepOrRestart(view.spotHeld, view.target);
      // Each new replica goes to a zone with the fewest, in zone order.
      for (let level = 0; toPlace.n > 0; level++)
        for (let z = 0; z < zones && toPlace.n > 0; z++)
          if (spot[z] === level) {
            spot[z] = spot[z]! + 1;
            toPlace.n--;
          }
      return { plan: { spot, onDemand: 0 }, memory };
    }
    case 'round-robin': {
      const { spot, toPlace } = keepOrRestart(view.spotHeld, view.target);
      let next = memory.next;
      for (; toPlace.n > 0; toPlace.n--) {
        spot[next]!++;
        next = (next + 1) % zones;
      }
      return { plan: { spot, onDemand: 0 }, memory: { ...memory, next } };
    }
    case 'spothedge':
      return spotHedge(view, memory, options);
    case 'gpu-fleet':
      return gpuFleet(view, memory, options);
    case 'gpu-fleet-model':
      return gpuFleetModel(view, memory, options);
  }
}

function spotHedge(view: ServingView, memory: ServingMemory, options: ServingOptions): { plan: ServingPlan; memory: ServingMemory } {
  const zones = view.spotHeld.length;
  const provision = view.target + options.nExtra;
  let active = [...memory.active];
  let preempted = [...memory.preempted];
  // A zone that gave less than was asked goes to the preempted list; one that gave all of it (some) comes back.
  if (memory.asked)
    for (let z = 0; z < zones; z++) {
      const asked = memory.asked[z] ?? 0;
      const held = view.spotHeld[z] ?? 0;
      if (asked > held && active.includes(z)) {
        active = active.filter((x) => x !== z);
        preempted = [...preempted, z];
      } else if (asked > 0 && asked === held && preempted.includes(z)) {
        preempted = preempted.filter((x) => x !== z);
        active = [...active, z];
      }
    }
  const { spot, toPlace } = keepOrRestart(view.spotHeld, provision);
  // Too few active zones to spread over: every zone is tried again.
  if (active.length <= Math.min(1, zones - 3)) {
    active = range(zones);
    preempted = [];
  }
  for (; toPlace.n > 0; toPlace.n--) {
    const empty = active.filter((z) => spot[z] === 0);
    const from = empty.length > 0 ? empty : active;
    const z = from[options.pick(from.length)]!;
    spot[z] = (spot[z] ?? 0) + 1;
  }
  // Dynamic fallback: on-demand replicas for the spot replicas that are not ready, at most the target.
  const onDemand = provision > view.spotReady ? Math.min(view.target, provision - view.spotReady) : 0;
  return { plan: { spot, onDemand }, memory: { ...memory, active, preempted, asked: spot } };
}

/**
 * gpu-fleet's serving policy. What it changes from SpotHedge, each measured by bench:serve:
 * - Zones are ranked by their observed risk, not by the last thing they did: each zone's losses
 *   (replicas taken back or refused) per replica-tick held, with a prior of one loss per
 *   `priorReplicaHours` so an unseen zone is neither trusted nor shunned; a new replica goes to the
 *   zone with the least risk × (1 + replicas it already holds), so a calm zone takes a second
 *   replica before a stormy one takes its first.
 * - The spare spot replica is kept only while the pools are risky: when the replicas held are
 *   expected to lose more than `spareAboveExpectedLosses` between them within one cold start.
 * - On-demand covers what ready spot replicas lack of the target, plus one replica for
 *   `hedgeSec` after any loss (a lost zone often loses again while its replacement boots).
 */
export const GPU_FLEET_SERVING = { priorReplicaHours: 2, spareAboveExpectedLosses: 0.1, hedgeSec: 600 } as const;

function gpuFleet(view: ServingView, memory: ServingMemory, options: ServingOptions): { plan: ServingPlan; memory: ServingMemory } {
  const k = GPU_FLEET_SERVING;
  const tickSec = options.tickSec ?? 30;
  const coldStartTicks = options.coldStartTicks ?? Math.round(120 / tickSec);
  const zones = view.spotHeld.length;
  const tick = (memory.tick ?? 0) + 1;
  const losses = [...(memory.losses ?? new Array<number>(zones).fill(0))];
  const exposure = [...(memory.exposure ?? new Array<number>(zones).fill(0))];
  let lastLoss = memory.lastLoss ?? -Infinity;
  for (let z = 0; z < zones; z++) {
    const asked = memory.asked?.[z] ?? 0;
    const held = view.spotHeld[z] ?? 0;
    exposure[z] = exposure[z]! + held;
    if (asked > held) {
      losses[z] = losses[z]! + (asked - held);
      lastLoss = tick;
    }
  }
  const prior = (k.priorReplicaHours * 3600) / tickSec;
  const risk = (z: number) => (losses[z]! + 1) / (exposure[z]! + prior);
  let expectedLosses = 0;
  for (let z = 0; z < zones; z++) expectedLosses += view.spotHeld[z]! * risk(z) * (coldStartTicks + 1);
  const spare = typeof options.spare === 'number' ? options.spare : expectedLosses > k.spareAboveExpectedLosses ? 1 : 0;
  const { spot, toPlace } = keepOrRestart(view.spotHeld, view.target + spare);
  for (; toPlace.n > 0; toPlace.n--) {
    let best = 0;
    for (let z = 1; z < zones; z++) if (risk(z) * (1 + spot[z]!) < risk(best) * (1 + spot[best]!) - 1e-15) best = z;
    spot[best] = spot[best]! + 1;
  }
  const hedge = (tick - lastLoss) * tickSec <= k.hedgeSec ? 1 : 0;
  const onDemand = Math.min(view.target, Math.max(0, view.target + hedge - view.spotReady));
  return {
    plan: { spot, onDemand },
    memory: { ...memory, asked: spot, tick, losses, exposure, ...(Number.isFinite(lastLoss) ? { lastLoss } : {}) },
  };
}

/**
 * The candidate: gpu-fleet's rules, with each zone's risk from the spot model. A replica held is
 * a sighting of its zone up; one taken back or refused, of it down. A new replica goes to the zone
 * where it costs the spread least: (the chance it is refused or lost within a cold start, plus a
 * floor) × the replicas its failure domain would then hold, a failure domain being the zone and
 * the zones seen to drop with it most of the time. Fewer wanted than held: one goes from where it
 * costs the spread most, the rest stay. The spare and the on-demand hedge are gpu-fleet's.
 */
export const GPU_FLEET_MODEL_SERVING = {
  spareAboveExpectedLosses: 0.015,
  hedgeSec: 600,
  togetherShare: 0.5,
  togetherMinDrops: 2,
  riskFloor: 0.01,
} as const;

function gpuFleetModel(view: ServingView, memory: ServingMemory, options: ServingOptions): { plan: ServingPlan; memory: ServingMemory } {
  const k = GPU_FLEET_MODEL_SERVING;
  const tickSec = options.tickSec ?? 30;
  const coldStartTicks = options.coldStartTicks ?? Math.round(120 / tickSec);
  const zones = view.spotHeld.length;
  const tick = (memory.tick ?? 0) + 1;
  const nowMs = tick * tickSec * 1000;
  const zonePool = (z: number) => options.zoneNames?.[z] ?? `zone-${z}`;
  const model: SpotModelState = structuredClone(memory.model ?? emptySpotModel());
  let lastLoss = memory.lastLoss ?? -Infinity;
  for (let z = 0; z < zones; z++) {
    const asked = memory.asked?.[z] ?? 0;
    const held = view.spotHeld[z] ?? 0;
    if (asked > held) {
      observe(model, zonePool(z), false, nowMs);
      lastLoss = tick;
    } else if (held > 0) observe(model, zonePool(z), true, nowMs);
    else unseen(model, zonePool(z), nowMs);
  }
  const horizonSec = (coldStartTicks + 1) * tickSec;
  // Refused (last seen down, not likely back yet) or taken back within a cold start.
  const risks = range(zones).map(
    (z) => 1 - upProbability(model, zonePool(z), nowMs) * survival(model, zonePool(z), nowMs, horizonSec).survival,
  );
  const together = (a: number, b: number) => {
    if (a === b) return true;
    const c = model.peers[`${zonePool(a)}|${zonePool(b)}`];
    return c !== undefined && c.peerDrops >= k.togetherMinDrops && c.together / c.peerDrops >= k.togetherShare;
  };
  let expectedLosses = 0;
  for (let z = 0; z < zones; z++) expectedLosses += view.spotHeld[z]! * risks[z]!;
  const spare = typeof options.spare === 'number' ? options.spare : expectedLosses > k.spareAboveExpectedLosses ? 1 : 0;
  const spot = [...view.spotHeld];
  const domainHolds = (z: number) => spot.reduce((n, held, w) => n + (together(z, w) ? held : 0), 0);
  const cost = (z: number, extra: number) => (risks[z]! + k.riskFloor) * (domainHolds(z) + extra);
  let toPlace = view.target + spare - spot.reduce((a, b) => a + b, 0);
  for (; toPlace < 0; toPlace++) {
    let worst = -1;
    for (let z = 0; z < zones; z++) if (spot[z]! > 0 && (worst < 0 || cost(z, 0) > cost(worst, 0) + 1e-15)) worst = z;
    spot[worst] = spot[worst]! - 1;
  }
  for (; toPlace > 0; toPlace--) {
    let best = 0;
    for (let z = 1; z < zones; z++) if (cost(z, 1) < cost(best, 1) - 1e-15) best = z;
    spot[best] = spot[best]! + 1;
  }
  const hedge = (tick - lastLoss) * tickSec <= k.hedgeSec ? 1 : 0;
  const onDemand = Math.min(view.target, Math.max(0, view.target + hedge - view.spotReady));
  return {
    plan: { spot, onDemand },
    memory: { ...memory, asked: spot, tick, model, ...(Number.isFinite(lastLoss) ? { lastLoss } : {}) },
  };
}

/** Keeps what the zones hold when asking for at least as many, else starts the spread again from nothing. */
function keepOrRestart(held: readonly number[], wanted: number): { spot: number[]; toPlace: { n: number } } {
  const total = held.reduce((a, b) => a + b, 0);
  if (wanted >= total) return { spot: [...held], toPlace: { n: wanted - total } };
  return { spot: new Array<number>(held.length).fill(0), toPlace: { n: wanted } };
}

function range(n: number): number[] {
  return Array.from({ length: n }, (_, i) => i);
}
