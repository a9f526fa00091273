/**
 * The one planning state every phase reads and writes, and the few verbs they share. The state
 * is explicit: a phase gets it as its argument, and nothing else is kept between phases.
 *
 * What lives here: the snapshot, the capacity indexes (ready, booting and bought-in-this-plan
 * machines), the groups with the room they have left, the job classes, each team's GPUs and
 * budget left, and the plan being written (actions, waiting jobs). The caches are derived facts
 * (a class's cheapest pools, the pools of an index it may search), never decisions.
 */
import type { InstanceType, Offering } from '../catalog.ts';
import { remainingWorkSec } from '../cost-model.ts';
import type { NodeGroup } from '../fleet.ts';
import type { GpuRequest } from '../gpu.ts';
import type { Job, NodeAssignment, Placement } from '../job.ts';
import type { JobSpec } from '../job-spec.ts';
import { priorRatePerHour } from '../risk.ts';
import { SAVE_MIB_PER_SEC, saveCadence, type SaveCadence } from '../save-price.ts';
import { checkpointSizeMiB } from '../services/node-rules.ts';
import {
  defaultNetworkLayout,
  movedUsage,
  priceBytes,
  saveSizeOf,
  siteKey,
  siteOfOffering,
  storeKindAt,
  storeSiteFor,
  storeSiteOf,
} from '../bytes.ts';
import type { PlanAction, WaitingJob } from '../plan.ts';
import type { Reason } from '../reason.ts';
import type { Snapshot } from '../snapshot.ts';
import type { BudgetState, Team } from '../team.ts';
import type { NodeCapacity, NodeKind } from './capacity.ts';
import type { HostNetWall } from './host-net.ts';
import { CapacityIndex } from './capacity-index.ts';

export interface OfferingInfo {
  /** Offering id plus GPU mode (see poolKeyOf). */
  readonly key: string;
  readonly offering: Offering;
  readonly type: InstanceType;
  readonly price: number;
  readonly onDemandPrice: number;
  readonly riskPerHour: number;
  /** For a reserved offering: when its reservation takes its machines away (a block's end less 30 min), if ever. */
  readonly terminationMs?: number;
  /** For a reserved offering: its owner may take the machines back (an interruptible reservation). */
  readonly interruptible?: boolean;
  /** Groups that can launch it, with room left. */
  readonly groups: GroupState[];
  readonly migEnabled: boolean;
}

export interface GroupState {
  readonly group: NodeGroup;
  /** Machines the group may still add in this plan. */
  room: number;
  readonly added: NodeCapacity[];
}

/** Which capacity types a job may use in this plan. */
export type CapacityChoice = 'any' | 'spot' | 'on-demand';

export interface JobClass {
  readonly key: string;
  readonly request: GpuRequest;
  readonly nodes: number;
  readonly milli: number;
  /** Ports of the machine its members listen on (a service's port): a machine that holds one cannot take them. */
  readonly ports: readonly number[];
  /** For work on the host's network, its team's side of the wall (capacity.ts `HostNetWall`); the class is that team's alone. */
  readonly wall?: HostNetWall;
  /** Offerings that may hold this class, with the expected cost factor on each. */
  readonly eligible: Map<string, number>;
  /** Why no offering is eligible, when none is. */
  readonly noFit?: Reason;
}

/** A pending job as the phases after classification see it. */
export interface Entry {
  readonly job: Job;
  readonly cls: JobClass;
  readonly team: string;
}

export type Fit = { node: NodeCapacity; assignment: NodeAssignment };

/** The offering new capacity for a job is bought from, and why it won. */
export interface OfferingChoice {
  readonly ok: true;
  readonly info: OfferingInfo;
  readonly gs: GroupState;
  readonly factor: number;
  readonly why: string;
}

export interface TeamBudget {
  readonly state: BudgetState;
  readonly team: Team | undefined;
  /** What new work may still commit, µUSD, for a team whose budget action is hold or stop; undefined when not limited so. */
  leftMicroUsd: number | undefined;
}

export class PlanningState {
  // ---- indexing: what exists and what may be bought
  readonly offerings = new Map<string, OfferingInfo>();
  /** Every offering info, groups' and live nodes' (set once by indexing). */
  allOfferings: readonly OfferingInfo[] = [];
  readonly groups = new Map<string, GroupState>();
  readonly ready = new CapacityIndex();
  /** Machines launching or booting: already paid for, so any work may claim them. */
  readonly booting = new CapacityIndex();
  /** Machines bought in this plan: shared only by work whose cheapest home they are. */
  readonly planned = new CapacityIndex();
  readonly nodeById = new Map<string, NodeCapacity>();
  /** Live machines in service per group (a machine a hook holds while it drains is not). */
  readonly liveByGroup = new Map<string, number>();
  readonly holders = new Map<string, { job: Job; assignment: NodeAssignment }[]>();
  // ---- launch cancellation
  /** Groups whose launches in flight were cancelled, with the desired size they were set to. */
  readonly cancelled = new Map<string, number>();
  /** Groups whose launches in flight will not be delivered (every offering failing): nothing waits for them. */
  readonly undeliverable = new Set<string>();
  // ---- classification and limits
  readonly classes = new Map<string, JobClass>();
  /** Interruptions per hour a spot pool is expected to show over a horizon, by "pool|seconds" (the spot model's survival). */
  readonly survivalRisk = new Map<string, number>();
  readonly teamUsedMilli = new Map<string, number>();
  readonly teamBudgets = new Map<string, TeamBudget>();
  /** Whether the waiting work exceeds what live machines and group room can hold. */
  scarce = false;
  // ---- the plan being written
  readonly actions: PlanAction[] = [];
  readonly waiting: WaitingJob[] = [];
  /** Machines whose stored GPU report cannot be read: left out of the plan, and named in it. */
  readonly unreadable: { nodeId: string; problem: string }[] = [];
  /** Attempts a job moved on from whose GPUs their node still holds (indexing.ts `indexStaleHolds`). */
  readonly staleHolds: { nodeId: string; jobId: string; attempt: number }[] = [];
  /** Where each waiting job's entry is in `waiting` (the last one written for it); a job is waiting when it has one. */
  readonly waitingAt = new Map<string, number>();
  readonly preempted = new Set<string>();
  plannedCount = 0;
  /**
   * Expected hourly cost of the capacity this plan adds for waiting work, rework on spot included,
   * µUSD (not rounded). Machines bought for moves to spot are left out: each replaces on-demand.
   */
  addedExpected = 0;
  /** For each machine bought in this plan, the kinds of work its purchase counted on. */
  readonly fillers = new Map<NodeCapacity, ReadonlySet<unknown>>();
  /** Per job class, the highest priority for which preemption found no room: lower or equal ones will not find any either. */
  readonly noPreemptRoom = new Map<JobClass, number>();
  // ---- derived-fact caches
  readonly homeCache = new Map<JobClass, Set<string>>();
  readonly obtainableCache = new Map<JobClass, boolean>();
  /** Per class, its cheapest expected price per GPU-thousandth to buy (see byBuyCost). */
  readonly buyCostCache = new Map<JobClass, number>();
  readonly searchCache = new Map<CapacityIndex, Map<ReadonlyMap<string, number>, { version: number; keys: string[] }>>();
  readonly reasonCache = new Map<unknown, Reason>();
  /**
   * Searches (see searchKeys) that found no fit in the ready or the booting index. Room there only shrinks while a plan is made (machines are filed once, at
   * indexing, and every later step only takes room), so a class that found none finds none later.
   */
  readonly noFitIn = new Map<CapacityIndex, Set<number>>();
  /** The same for searches kept to the machines at one site (where a job's newest save is), by "search@site". */
  readonly noFitAt = new Map<CapacityIndex, Set<string>>();
  /** How many sites (cloud and region) the fleet's machines and offerings are at (worked out once, see saveSiteToKeep). */
  siteCount: number | undefined;
  /**
   * Per class, what a fit search depends on (the request and the pools searched), as a number:
   * classes that differ only in cost factors share it. Numbered through `searchIds` so that a
   * lookup never compares the long keys themselves.
   */
  readonly searchKeys = new Map<JobClass, { readonly any: number; readonly homes: number }>();
  readonly searchIds = new Map<string, number>();
  /** Per class, the pools it may buy from, cheapest per GPU first (see new-capacity.ts). */
  readonly buyable = new Map<
    JobClass,
    { readonly pools: readonly { key: string; factor: number; info: OfferingInfo; floor: number }[]; readonly sawUnavailable: boolean }
  >();
  /** The last offering chosen for a class, valid while the waiting demand's epoch stands. */
  readonly choiceCache = new Map<JobClass, { epoch: number; choice: OfferingChoice }>();

  constructor(readonly s: Snapshot) {}

  /** The index that files a node of this kind. */
  indexOf(kind: NodeKind): CapacityIndex {
    return kind === 'ready' ? this.ready : kind === 'booting' ? this.booting : this.planned;
  }
}

/** Records that a job waits, and why. A hold is written as an action when it starts or its reason changes; a hold that ends is released. */
export function wait(st: PlanningState, job: Job, why: Reason, isHold = false): void {
  st.waitingAt.set(job.id, st.waiting.length);
  st.waiting.push({ jobId: job.id, reason: why });
  if (isHold) {
    // Written when the hold starts or its reason changes, not when a figure in its message moves (the decision has the figures).
    if (job.hold?.code !== why.code) st.actions.push({ kind: 'hold', jobId: job.id, reason: why });
  } else if (job.hold) {
    st.actions.push({ kind: 'release-hold', jobId: job.id });
  }
}

/** Adds actions to the plan; a preempted job is marked so that no later step asks it again. */
export function emit(st: PlanningState, actions: readonly PlanAction[]): void {
  for (const a of actions) {
    if (a.kind === 'preempt') st.preempted.add(a.jobId);
    st.actions.push(a);
  }
}

/** Jobs waiting for the same thing share one (immutable) reason object. */
export function sharedReason(st: PlanningState, key: unknown, make: () => Reason): Reason {
  let r = st.reasonCache.get(key);
  if (!r) {
    r = make();
    st.reasonCache.set(key, r);
  }
  return r;
}

/** Expected price per thousandth of a GPU per hour on a pool, rework included. */
export function perMilli(info: OfferingInfo, factor: number): number {
  return (info.price * factor) / (info.type.gpuCount * 1000);
}

/** Thousandths of a GPU one member of the class takes when filling a machine (a whole request counts its GPUs). */
export function unitOf(cls: Pick<JobClass, 'request' | 'milli'>): number {
  return cls.request.kind === 'whole' ? cls.request.count * 1000 : cls.milli;
}

/** The hourly price share of a node that `milli` thousandths of a GPU on each of `nodes` machines take. */
export function shareOf(node: NodeCapacity, milli: number, nodes: number): number {
  return (node.priceMicroUsdPerHour * milli * nodes) / Math.max(1, node.gpus.length * 1000);
}

/** Interruptions per hour expected of an offering: spot pools and interruptible reservations carry a risk, the rest none. */
export function riskOf(s: Snapshot, offeringId: string, capacityType: string, reservationId: string | undefined): number {
  if (capacityType === 'spot') return s.poolRiskPerHour.get(offeringId) ?? priorRatePerHour(undefined);
  if (capacityType === 'reserved' && reservationId !== undefined && s.reservations?.get(reservationId)?.interruptible)
    return s.poolRiskPerHour.get(offeringId) ?? priorRatePerHour(undefined);
  return 0;
}

/**
 * A placement with what it holds and costs, for per-job accounting (the planner's and the
 * baseline's alike): the job's GPU-thousandths and its share of its machine's price, billed at a
 * reservation's rate on reserved capacity, and the same share at on-demand prices.
 */
export function pricedPlacement(
  s: Snapshot,
  node: NodeCapacity,
  milli: number,
  nodes: number,
  assignments: readonly NodeAssignment[],
  reservationId: string | undefined,
  spec?: JobSpec,
): Placement {
  const quote = s.prices.get(node.offeringId);
  const od = quote?.onDemandMicroUsdPerHour;
  const fraction = (milli * nodes) / Math.max(1, node.gpus.length * 1000);
  // A reserved machine costs nothing at the margin but bills its reservation's rate: the job's share is of that.
  const price =
    quote?.billedMicroUsdPerHour !== undefined
      ? Math.round(quote.billedMicroUsdPerHour * fraction)
      : Math.round(shareOf(node, milli, nodes));
  const saves = spec ? placedCadence(s, node, spec, assignments, price, reservationId) : undefined;
  return {
    nodes: [...assignments],
    capacityType: node.capacityType,
    ...(reservationId !== undefined ? { reservationId } : {}),
    milliGpu: milli * nodes,
    priceMicroUsdPerHour: price,
    onDemandMicroUsdPerHour: od !== undefined ? Math.round(od * fraction) : price,
    ...(saves ? { saves } : {}),
  };
}

/**
 * What resuming a job on a machine of `offeringId` costs in bytes moved, when its newest save is
 * kept at another site (another cloud, or another region): the save read back across, priced on
 * the deployment's path (the sender's egress, the machine's NAT). 0 where the save is at the
 * machine's site, or its size or the price table is not known. The planner counts it when it
 * buys capacity for a job (a job moved between clouds pays the egress of its newest save).
 */
export function resumeMoveMicroUsd(s: Snapshot, job: Job, offeringId: string): { microUsd: number; from?: string } {
  const save = job.checkpoint;
  const where = s.saveBytes;
  const machine = siteOfOffering(offeringId);
  if (!save?.size || !where || !machine) return { microUsd: 0 };
  const store = storeSiteOf(where, save.location);
  if (store.cloud === machine.cloud && store.region === machine.region) return { microUsd: 0 };
  const parts = save.ranks ?? 1;
  const usage = movedUsage({
    machine,
    store,
    layout: where.layout,
    bytes: save.size.bytes * parts,
    requests: save.size.readRequests * parts,
    direction: 'down',
  });
  return { microUsd: priceBytes(usage, where.rates).totalMicroUsd, from: siteKey(store) };
}

/**
 * The site of a job's newest save, when placing the job elsewhere would read it back across
 * (the fleet's machines are at more than one site, and the snapshot knows where saves are kept
 * and the save's size): machines already paid for at that site are tried first.
 */
export function saveSiteToKeep(st: PlanningState, job: Job): string | undefined {
  const where = st.s.saveBytes;
  if (!job.checkpoint?.size || !where) return undefined;
  st.siteCount ??= new Set(st.allOfferings.map((o) => siteKeyOfOffering(o.offering.id))).size;
  return st.siteCount > 1 ? siteKey(storeSiteOf(where, job.checkpoint.location)) : undefined;
}

/** The site key of an offering's machines ("" when it names none). */
export function siteKeyOfOffering(offeringId: string): string {
  const site = siteOfOffering(offeringId);
  return site ? siteKey(site) : '';
}

/**
 * How often a checkpointing job placed on `node` is asked to save (core/save-price.ts): its save's
 * price there (the stall at the assumed write speed, on its share of the machines; its bytes on the
 * deployment's path, when the snapshot has the price table) against the take-backs the capacity
 * expects. Undefined for a job that does not checkpoint.
 */
function placedCadence(
  s: Snapshot,
  node: NodeCapacity,
  spec: JobSpec,
  assignments: readonly NodeAssignment[],
  priceMicroUsdPerHour: number,
  reservationId: string | undefined,
): SaveCadence | undefined {
  if (!spec.checkpoint) return undefined;
  const perNodeMiB = checkpointSizeMiB({ spec, placement: { nodes: assignments } }, node.gpus);
  const files = perNodeMiB > 0 ? Array.from({ length: spec.nodes }, () => perNodeMiB * 2 ** 20) : [];
  const machine = siteOfOffering(node.offeringId) ?? { cloud: 'sim' as const, region: 'sim' };
  const where = s.saveBytes ?? { store: machine, layout: defaultNetworkLayout([]), rates: new Map() };
  // The machine saves into its own site's bucket where the fleet keeps one there (a GCP region's), else the fleet's own.
  const store = storeSiteFor(where, machine);
  return saveCadence({
    size: saveSizeOf(files, storeKindAt(store)),
    stallSec: perNodeMiB / SAVE_MIB_PER_SEC,
    gpuMicroUsdPerHour: priceMicroUsdPerHour,
    machine,
    layout: where.layout,
    rates: where.rates,
    store,
    hazardPerHour: riskOf(s, node.offeringId, node.capacityType, reservationId),
    longestSec: spec.checkpoint.intervalSec,
  });
}

/** Seconds of work a running job would lose if stopped now: since its newest checkpoint of this attempt (or its start). */
export function lostWorkSec(s: Snapshot, job: Job): number {
  const started = job.startedAtMs ?? job.placedAtMs ?? s.nowMs;
  const cp = job.checkpoint && job.checkpoint.attempt === job.attempt ? Math.max(job.checkpoint.completedAtMs, started) : started;
  return Math.max(0, (s.nowMs - cp) / 1000) + s.policy.restoreSec;
}

/** Work left of a running attempt: its expected total less its checkpoint and its time running since. */
export function workLeftSec(s: Snapshot, job: Job): number {
  const elapsedSec = Math.max(0, (s.nowMs - (job.startedAtMs ?? s.nowMs)) / 1000);
  return Math.max(0, remainingWorkSec(job, s.policy) - elapsedSec);
}

/** Whether an offering failed to launch or was interrupted recently (and is avoided for now). */
export function unavailable(s: Snapshot, offeringId: string): boolean {
  return (s.unavailableUntilMs.get(offeringId) ?? 0) > s.nowMs;
}
