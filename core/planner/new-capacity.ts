/**
 * New capacity: buys machines for the jobs existing capacity could not take, in planning order.
 * A job first shares a machine bought earlier in this plan whose purchase counted on work like
 * it; otherwise it opens the offering with the lowest expected cost per GPU actually used,
 * judged by filling the machine from the demand still waiting (so an 8-GPU machine is not bought
 * for two 1-GPU jobs when 1-GPU machines are cheaper for them), within each group's maximum.
 * The machines bought become the plan's scale-ups. Decides only purchases; it must not place on
 * or take from live machines.
 */
import type { NodeGroup } from '../fleet.ts';
import type { PlanAction } from '../plan.ts';
import { reason, type Reason } from '../reason.ts';
import { commitFit, tryFit } from './capacity.ts';
import { spotHorizonSec, workBucketOf } from './classification.ts';
import { survival } from '../spot-model.ts';
import { Demand } from './demand.ts';
import { addExpected, claim } from './existing-capacity.ts';
import { newMachine } from './indexing.ts';
import { commitLimits, limitProblem } from './limits.ts';
import { cheapestPerGpu, groupsAtMax, noGroupLaunches, offeringsAvoided, ordered, scaleUp } from './reasons.ts';
import { remainingWorkSec } from '../cost-model.ts';
import {
  perMilli,
  resumeMoveMicroUsd,
  sharedReason,
  unavailable,
  wait,
  type Entry,
  type Fit,
  type OfferingChoice,
  type OfferingInfo,
  type PlanningState,
} from './state.ts';

/** A job that could not be bought for, and why (the preemption phase may still make room for it). */
export interface Stuck {
  readonly entry: Entry;
  readonly why: Reason;
}

/** Buys for each job in turn; returns the jobs no offering could take. */
export function buyNewCapacity(st: PlanningState, toBuy: readonly Entry[]): Stuck[] {
  const stuck: Stuck[] = [];
  const demand = new Demand(toBuy, st.offerings);
  for (const e of toBuy) {
    const why = buy(st, e, demand);
    demand.take(e);
    if (why) stuck.push({ entry: e, why });
  }
  return stuck;
}

function buy(st: PlanningState, e: Entry, demand: Demand): Reason | undefined {
  if (e.cls.noFit) {
    wait(st, e.job, e.cls.noFit);
    return undefined;
  }
  // Machines already bought in this plan first: those whose purchase counted on work like this.
  const group = demand.groupFor(e);
  if (claim(st, st.planned, e, false, (node) => st.fillers.get(node)?.has(group) ?? false)) return undefined;
  const choice = chooseOffering(st, e, demand);
  if (!choice.ok) {
    wait(st, e.job, choice.reason);
    return choice.reason;
  }
  const { info, gs, factor } = choice;
  const share = (info.price * e.cls.milli * e.cls.nodes) / (info.type.gpuCount * 1000);
  const held = limitProblem(st, e, share, factor);
  if (held) {
    wait(st, e.job, held, true);
    return undefined;
  }
  const opened: Fit[] = [];
  for (let i = 0; i < e.cls.nodes; i++) {
    const node = newMachine(info, gs.group.id, `planned:${gs.group.id}:${st.plannedCount++}`, 'planned');
    const assignment = tryFit(node, e.cls.request, e.cls.ports);
    if (!assignment) break;
    commitFit(node, assignment, e.cls.wall?.team); // before it is filed: a new machine
    gs.added.push(node);
    gs.room--;
    st.planned.add(node);
    st.fillers.set(node, demand.fillers(info.key, e));
    st.addedExpected += node.priceMicroUsdPerHour;
    opened.push({ node, assignment });
  }
  commitLimits(st, e, share, factor);
  for (const f of opened) addExpected(st, f.node, e, factor, 1 / e.cls.nodes);
  wait(
    st,
    e.job,
    sharedReason(st, choice, () => ordered(info.offering, choice.why)),
  );
  return undefined;
}

function chooseOffering(st: PlanningState, e: Entry, demand: Demand): OfferingChoice | { ok: false; reason: Reason } {
  // A job that would resume from a save of known size is judged on its own: where its save is changes what a pool costs it.
  if (e.job.checkpoint?.size && st.s.saveBytes) return chooseOfferingNow(st, e, demand);
  // While the demand has not shrunk enough to change any fill, the last choice for this kind stands (if it still has room).
  const cached = st.choiceCache.get(e.cls);
  if (cached && cached.epoch === demand.epoch && cached.choice.gs.room >= e.cls.nodes) return cached.choice;
  const fresh = chooseOfferingNow(st, e, demand);
  if (fresh.ok) st.choiceCache.set(e.cls, { epoch: demand.epoch, choice: fresh });
  return fresh;
}

function chooseOfferingNow(st: PlanningState, e: Entry, demand: Demand): OfferingChoice | { ok: false; reason: Reason } {
  let best:
    | { info: OfferingChoice['info']; gs: OfferingChoice['gs']; factor: number; eff: number; fill: number; move: number; from?: string }
    | undefined;
  // A job whose newest save is at another site pays to read it across: spread over its work left, per GPU-thousandth it holds.
  const perMilliHour = 1 / (Math.max(1, remainingWorkSec(e.job, st.s.policy) / 3600) * Math.max(1, e.cls.milli * e.cls.nodes));
  let sawAtMax = false;
  let sawZoneSpan = false;
  const { pools, sawUnavailable } = buyablePools(st, e.cls);
  for (const { key, factor, info, floor } of pools) {
    // A machine's expected cost per GPU-thousandth used is at least its price per GPU-thousandth
    // (fill ≤ capacity, rework ≥ 0): past a floor above the best, nothing can win.
    if (best && floor > best.eff + 1e-9) break;
    // A job limited to some zones is bought for only from a group whose zones all fit: a group spanning several zones
    // launches in the zone it picks (the cheapest, or the next in balance), not the one the plan named.
    const zones = e.job.spec.placement?.zones;
    const fitting = zones ? info.groups.filter((g) => zonesFit(g.group, zones)) : info.groups;
    if (fitting.length === 0) {
      sawZoneSpan = true;
      continue;
    }
    const gs = fitting.find((g) => g.room >= e.cls.nodes);
    if (!gs) {
      sawAtMax = true;
      continue;
    }
    const { eff: machineEff, fill } = demand.efficiency(info, e, factor);
    // The move's price only adds (it is ≥ 0), so the floor above still bounds what a pool can cost.
    const moved = e.job.checkpoint ? resumeMoveMicroUsd(st.s, e.job, info.offering.id) : { microUsd: 0 };
    const eff = machineEff + moved.microUsd * perMilliHour;
    if (
      !best ||
      eff < best.eff - 1e-9 ||
      (Math.abs(eff - best.eff) <= 1e-9 && (info.price < best.info.price || (info.price === best.info.price && key < best.info.key)))
    ) {
      best = { info, gs, factor, eff, fill, move: moved.microUsd, ...(moved.from ? { from: moved.from } : {}) };
    }
  }
  if (!best) {
    if (sawAtMax) return { ok: false, reason: groupsAtMax(e.job) };
    if (sawUnavailable) return { ok: false, reason: offeringsAvoided(e.job) };
    if (sawZoneSpan)
      return {
        ok: false,
        reason: reason(
          'no-offering-fits',
          `its zones (${e.job.spec.placement?.zones?.join(', ') ?? ''}) are offered only by groups that also launch elsewhere, and such a group picks the zone itself; a group within its zones is needed`,
        ),
      };
    return { ok: false, reason: noGroupLaunches(e.job) };
  }
  let why = cheapestPerGpu(best.eff, best.factor, best.fill, best.info.type.gpuCount);
  if (best.move > 0) why += `; counting $${(best.move / 1e6).toFixed(2)} to read its newest save from ${best.from} (another site)`;
  // The decision record says what the spot model made of the pool: the survival it priced the rework from, and why.
  const model = st.s.spotModel;
  if (model && best.info.offering.capacityType === 'spot')
    why += `; ${survival(model, best.info.offering.id, st.s.nowMs, spotHorizonSec(st.s, e.job.spec, 2 ** workBucketOf(e.job, st.s.policy))).why}`;
  return { ok: true, info: best.info, gs: best.gs, factor: best.factor, why };
}

/**
 * The pools a class may buy from (groups can launch them and they are not avoided), cheapest
 * per GPU first, each with its price floor per GPU-thousandth; and whether some were avoided.
 * Fixed for the plan (offerings and avoidance do not change while it is made), so worked out once.
 */
function buyablePools(st: PlanningState, cls: Entry['cls']) {
  let found = st.buyable.get(cls);
  if (!found) {
    const pools: { key: string; factor: number; info: OfferingInfo; floor: number }[] = [];
    let sawUnavailable = false;
    for (const [key, factor] of cls.eligible) {
      const info = st.offerings.get(key);
      if (!info || info.groups.length === 0) continue;
      if (unavailable(st.s, info.offering.id)) {
        sawUnavailable = true;
        continue;
      }
      pools.push({ key, factor, info, floor: perMilli(info, 1) });
    }
    pools.sort((a, b) => a.floor - b.floor || (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
    found = { pools, sawUnavailable };
    st.buyable.set(cls, found);
  }
  return found;
}

/** Every zone the group launches in is one the job allows. */
function zonesFit(group: NodeGroup, zones: readonly string[]): boolean {
  return group.offerings.every((o) => zones.includes(o.zone));
}

/** One scale-up per group that had machines bought for it, from its desired size (or what a cancellation set it to). */
export function scaleUps(st: PlanningState): PlanAction[] {
  const actions: PlanAction[] = [];
  for (const gs of st.groups.values()) {
    if (gs.added.length === 0) continue;
    const byOffering = new Map<string, number>();
    for (const n of gs.added) byOffering.set(n.offeringId, (byOffering.get(n.offeringId) ?? 0) + 1);
    const first = gs.added[0]!;
    const from = st.cancelled.get(gs.group.id) ?? gs.group.desiredCapacity;
    actions.push({
      kind: 'scale-up',
      groupId: gs.group.id,
      fromDesired: from,
      toDesired: from + gs.added.length,
      expected: [...byOffering.entries()].map(([offeringId, count]) => ({ offeringId, count })),
      reason: scaleUp(gs.added.length, first.instanceType, first.capacityType),
    });
  }
  return actions;
}
