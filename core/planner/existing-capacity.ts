/**
 * Existing capacity: puts classified jobs on capacity that is already paid for. First on free
 * GPUs of ready machines (placements), then on machines still booting or launching (the job
 * waits for them instead of buying more). When capacity is not scarce, each job first tries only
 * its cheapest kind of machine, so scarce expensive GPUs stay for the jobs that need them; what
 * is left goes to the work that would cost most to buy for. Decides only placements and waits on
 * existing machines; it must not buy, preempt or scale anything.
 */
import type { Placement } from '../job.ts';
import type { NodeCapacity } from './capacity.ts';
import { withRendezvousPort } from './host-net.ts';
import type { CapacityIndex } from './capacity-index.ts';
import { findFits, homes } from './fits.ts';
import { commitPlacement } from './indexing.ts';
import { commitLimits, limitProblem } from './limits.ts';
import { placedOnFree, sharesNewMachine, waitsForStarting } from './reasons.ts';
import { remainingWorkSec } from '../cost-model.ts';
import type { Reason } from '../reason.ts';
import {
  perMilli,
  pricedPlacement,
  resumeMoveMicroUsd,
  saveSiteToKeep,
  siteKeyOfOffering,
  shareOf,
  sharedReason,
  wait,
  type Entry,
  type Fit,
  type JobClass,
  type PlanningState,
} from './state.ts';

/** Places or parks each job it can on existing capacity; returns the jobs left to buy for, in planning order. */
export function useExistingCapacity(st: PlanningState, entries: readonly Entry[]): Entry[] {
  if (st.scarce) {
    const unplaced = entries.filter((e) => !placeOnReady(st, e));
    return unplaced.filter((e) => !claim(st, st.booting, e, false) && !st.waitingAt.has(e.job.id));
  }
  // Free capacity that is nobody's cheapest kind goes to the work that would cost most per GPU to
  // buy for: the order is worked out once; a subset taken in it is that subset sorted the same way.
  const buyOrder = byBuyCost(st, entries);
  const inBuyOrder = (subset: readonly Entry[]) => {
    const members = new Set(subset);
    return buyOrder.filter((e) => members.has(e));
  };
  // First each job on free capacity of its cheapest kind, so that scarce expensive GPUs stay
  // for the jobs that need them; then what is left on any free capacity (it is paid for).
  const second = entries.filter((e) => !placeOnReady(st, e, true));
  const unplaced = inBuyOrder(second).filter((e) => !placeOnReady(st, e));
  // The same two passes over machines still booting; unplaced is already in buy-cost order.
  const secondBooting = unplaced.filter((e) => !claim(st, st.booting, e, true));
  const left = new Set(secondBooting.filter((e) => !claim(st, st.booting, e, false)));
  // Buying follows the planning order again (priority, then size).
  return entries.filter((e) => left.has(e) && !st.waitingAt.has(e.job.id));
}

function placeOnReady(st: PlanningState, e: Entry, homeOnly = false): boolean {
  const found = siteFirst(st, st.ready, e, homeOnly);
  if (!found || found === 'held') return found === 'held';
  const { share, factor } = found;
  // A gang's ranks meet at a port of its first machine: the placement names it, and the machine holds it.
  const fits = withRendezvousPort(found.fits);
  commitPlacement(st, fits, e.job);
  commitLimits(st, e, share, factor);
  if (e.job.hold) st.actions.push({ kind: 'release-hold', jobId: e.job.id });
  st.actions.push({
    kind: 'place',
    jobId: e.job.id,
    attempt: e.job.attempt,
    placement: placementOf(st, e, fits),
    reason: withMove(st, e, fits[0]!.node, placedOnFree(fits.map((f) => f.node))),
  });
  return true;
}

/**
 * The best fit on capacity already paid for, nearest the job's newest save first: where the
 * fleet spans sites, a job is placed beside its save when a machine there fits (in the pass for
 * its cheapest kind, only there). Elsewhere only when none does, and only when reading its save
 * across costs no more than buying its work's hours at the save's site would (the reason names
 * that price, as a purchase's does); otherwise it is left to be bought for, where the purchase
 * weighs the same price.
 */
function siteFirst(st: PlanningState, index: CapacityIndex, e: Entry, homeOnly: boolean): ReturnType<typeof fitWithinLimits> {
  const at = saveSiteToKeep(st, e.job);
  if (at === undefined) return fitWithinLimits(st, index, e, homeOnly);
  const near = fitWithinLimits(st, index, e, homeOnly, (node) => siteKeyOfOffering(node.offeringId) === at, at);
  if (near || homeOnly) return near;
  const buyNear = buyAtSiteMicroUsd(st, e, at);
  return fitWithinLimits(st, index, e, false, (node) => resumeMoveMicroUsd(st.s, e.job, node.offeringId).microUsd <= buyNear);
}

/**
 * What buying for the job's remaining work at `site` is expected to cost: its share of the
 * cheapest machine there per GPU-thousandth, rework on spot counted, over the hours of work it has
 * left (Infinity when nothing there may be bought for it).
 */
function buyAtSiteMicroUsd(st: PlanningState, e: Entry, site: string): number {
  let best = Infinity;
  for (const [key, factor] of e.cls.eligible) {
    const info = st.offerings.get(key);
    if (info && info.groups.length > 0 && siteKeyOfOffering(info.offering.id) === site) best = Math.min(best, perMilli(info, factor));
  }
  return best * e.cls.milli * e.cls.nodes * Math.max(1, remainingWorkSec(e.job, st.s.policy) / 3600);
}

/** A reason with the price of reading the job's newest save across to `node`, when that is not nothing. */
function withMove(st: PlanningState, e: Entry, node: NodeCapacity, why: Reason): Reason {
  if (!e.job.checkpoint) return why;
  const moved = resumeMoveMicroUsd(st.s, e.job, node.offeringId);
  return moved.microUsd > 0
    ? { ...why, message: `${why.message}; $${(moved.microUsd / 1e6).toFixed(2)} to read its newest save from ${moved.from} (another site)` }
    : why;
}

/**
 * Claims room on a booting machine, or on one bought in this plan (optionally only of the job's
 * cheapest kind, and only machines `accept` allows); the job waits for it. True when the job is
 * dealt with (claimed, or held by a limit).
 */
export function claim(
  st: PlanningState,
  index: CapacityIndex,
  e: Entry,
  homeOnly: boolean,
  accept?: (node: NodeCapacity) => boolean,
): boolean {
  const found = accept ? fitWithinLimits(st, index, e, homeOnly, accept) : siteFirst(st, index, e, homeOnly);
  if (!found || found === 'held') return found === 'held';
  const { fits, share, factor } = found;
  const node = fits[0]!.node;
  commitPlacement(st, fits, undefined, e.cls.wall?.team);
  commitLimits(st, e, share, factor);
  const planned = node.kind === 'planned';
  if (planned) addExpected(st, node, e, factor);
  const why =
    planned && fits.length === 1
      ? sharedReason(st, `share:${node.poolKey}`, () => sharesNewMachine(node))
      : waitsForStarting(
          planned,
          fits.map((f) => f.node),
        );
  wait(st, e.job, planned ? why : withMove(st, e, node, why));
  return true;
}

/**
 * The best fit for the job in the index and what it would cost the team; 'held' (and the job
 * waits held) when a limit refuses it; undefined when nothing fits. `site` names what `accept`
 * keeps to, when it keeps to one site's machines (the misses are kept per site then); an
 * `accept` without it is searched afresh each time.
 */
function fitWithinLimits(
  st: PlanningState,
  index: CapacityIndex,
  e: Entry,
  homeOnly: boolean,
  accept?: (node: NodeCapacity) => boolean,
  site?: string,
): { fits: Fit[]; share: number; factor: number } | 'held' | undefined {
  if (e.cls.eligible.size === 0) return undefined;
  // Machines bought in this plan are added as it goes: only the ready and booting indexes keep the misses.
  const cached = index !== st.planned && (accept === undefined || site !== undefined);
  const key = cached ? searchKey(st, e.cls, homeOnly) : -1;
  const misses = cached && site === undefined ? missesOf(st.noFitIn, index) : undefined;
  const siteMisses = cached && site !== undefined ? missesOf(st.noFitAt, index) : undefined;
  const atKey = siteMisses ? `${key}@${site}` : '';
  if (misses?.has(key) || siteMisses?.has(atKey)) return undefined;
  const fits = findFits(st, index, e, homeOnly ? homes(st, e.cls) : undefined, accept);
  if (!fits) {
    misses?.add(key);
    siteMisses?.add(atKey);
    return undefined;
  }
  const node = fits[0]!.node;
  const factor = e.cls.eligible.get(node.poolKey) ?? 1;
  const share = shareOf(node, e.cls.milli, e.cls.nodes);
  const held = limitProblem(st, e, share, factor);
  if (!held) return { fits, share, factor };
  wait(st, e.job, held, true);
  return 'held';
}

function missesOf<K>(byIndex: Map<CapacityIndex, Set<K>>, index: CapacityIndex): Set<K> {
  let m = byIndex.get(index);
  if (!m) {
    m = new Set();
    byIndex.set(index, m);
  }
  return m;
}

/** What a fit search for the class depends on: its request, its gang size and the pools searched. */
function searchKey(st: PlanningState, cls: JobClass, homeOnly: boolean): number {
  let k = st.searchKeys.get(cls);
  if (!k) {
    const what = `${JSON.stringify(cls.request)}|${cls.nodes}|${cls.ports.join('+')}|`;
    const id = (key: string) => {
      let n = st.searchIds.get(key);
      if (n === undefined) {
        n = st.searchIds.size;
        st.searchIds.set(key, n);
      }
      return n;
    };
    k = { any: id(`${what}${[...cls.eligible.keys()].join(',')}`), homes: id(`${what}h:${[...homes(st, cls)].join(',')}`) };
    st.searchKeys.set(cls, k);
  }
  return homeOnly ? k.homes : k.any;
}

/** Adds a job's expected rework on spot to the plan's expected cost. */
export function addExpected(st: PlanningState, node: NodeCapacity, e: Entry, factor: number, perNode = 1): void {
  if (factor <= 1) return;
  st.addedExpected += (node.priceMicroUsdPerHour * e.cls.milli * e.cls.nodes * perNode * (factor - 1)) / (node.gpus.length * 1000);
}

/** The placement with what it holds and costs, for per-job accounting. */
function placementOf(st: PlanningState, e: Entry, fits: readonly Fit[]): Placement {
  const node = fits[0]!.node;
  const reservationId = st.offerings.get(node.poolKey)?.offering.reservationId;
  return pricedPlacement(
    st.s,
    node,
    e.cls.milli,
    e.cls.nodes,
    fits.map((f) => f.assignment),
    reservationId,
    e.job.spec,
  );
}

/**
 * The work whose cheapest new capacity costs most per GPU first: every GPU-thousandth of free
 * room saves what the work on it would cost to buy for, so the room goes first to the work
 * that is dearest per unit of room (the greedy order of a fractional knapsack). Among equals,
 * the work with the fewest pools to go to first: the more flexible work can still use room
 * elsewhere. Used only when capacity is not scarce, when every job gets a machine within a boot
 * time and the order decides cost, not who runs; priority breaks the remaining ties.
 */
function byBuyCost(st: PlanningState, entries: readonly Entry[]): Entry[] {
  const cost = (e: Entry) => {
    let c = st.buyCostCache.get(e.cls);
    if (c === undefined) {
      let best = Infinity;
      for (const [key, factor] of e.cls.eligible) {
        const info = st.offerings.get(key);
        if (info && info.groups.length > 0) best = Math.min(best, perMilli(info, factor));
      }
      c = Number.isFinite(best) ? best : 0;
      st.buyCostCache.set(e.cls, c);
    }
    return c;
  };
  const keyed = entries.map((e, i) => ({ e, i, c: cost(e), pools: e.cls.eligible.size }));
  keyed.sort((a, b) => b.c - a.c || a.pools - b.pools || b.e.job.spec.priority - a.e.job.spec.priority || a.i - b.i);
  return keyed.map((k) => k.e);
}
