import { budgetStatus } from '../budget.ts';
import { offeringId, type InstanceType, type Offering } from '../catalog.ts';
import { jobSpotFactor, remainingWorkSec } from '../cost-model.ts';
import { deadlineChoice } from '../deadline.ts';
import { inService, type NodeGroup } from '../fleet.ts';
import { milliGpusUsed, type GpuRequest } from '../gpu.ts';
import type { Job, NodeAssignment, Placement } from '../job.ts';
import { migProfile, placementMask } from '../mig.ts';
import type { Plan, PlanAction, WaitingJob } from '../plan.ts';
import { reason, type Reason } from '../reason.ts';
import { priorRatePerHour } from '../risk.ts';
import type { Snapshot } from '../snapshot.ts';
import type { BudgetState, Team } from '../team.ts';
import {
  CapacityIndex,
  commitFit,
  countFreeWhole,
  isEmpty,
  isMigModel,
  makeGpus,
  poolKeyOf,
  popcount,
  tryFit,
  typeCanHold,
  usedMilli,
  type NodeCapacity,
} from './capacity.ts';
import { describeRequest, fairShareOrder } from './ordering.ts';

/** Holds and their releases go last in a plan (after every placement they could have let through). */
const isHoldAction = (a: PlanAction): boolean => a.kind === 'hold' || a.kind === 'release-hold';

/**
 * The planner: one snapshot in, one plan out, with a reason for every action and every job
 * left waiting. Pure and deterministic.
 *
 * 1. Classify: budget holds, team caps, allowed capacity types (interruptible, spot-only budget,
 *    deadline slack), and for each class of job the offerings that may hold it (GPU model and
 *    memory, MIG profile, zone and cloud limits, and spot only where its expected cost, rework
 *    included, is below on-demand).
 * 2. Order: priority first; within a priority, weighted fair share of GPUs between teams.
 * 3. Place on free GPUs of ready nodes, best fit (the fullest node that fits), gangs in one zone.
 * 4. Count capacity already on the way (booting machines, launches in flight): jobs that fit
 *    there wait for it instead of buying more.
 * 5. Buy for the rest: fill machines bought in this plan first; otherwise open the offering with
 *    the lowest expected cost per GPU actually used, judged by filling it from the demand still
 *    waiting (so an 8-GPU machine is not bought for two 1-GPU jobs when 1-GPU machines are
 *    cheaper for them). Within each group's maximum.
 * 6. Preempt: a job that still cannot run because groups are at their maximum may take the
 *    place of strictly lower-priority interruptible jobs: the fewest, then cheapest, victims.
 * 7. Scale in: nodes empty for the cool-down, never below a group's minimum; and, where the
 *    saving beats the restart cost, move checkpointable work off an underused node.
 */
export function plan(snapshot: Snapshot): Plan {
  return new Planner(snapshot).run();
}

/** The new-capacity problem of a snapshot as the planner sees it, for lower bounds in benchmarks. */
export interface CapacityProblem {
  /** Waiting work that some pool could hold, aggregated: each unit is one job (a gang counts each member). */
  readonly classes: readonly {
    readonly kind: GpuRequest['kind'];
    /** Whole GPUs per job for whole requests; 0 otherwise. */
    readonly wholeGpus: number;
    readonly unitMilli: number;
    readonly memoryMiB: number;
    readonly count: number;
    readonly eligible: ReadonlyMap<string, number>;
  }[];
  /** Pools that may be bought from. */
  readonly pools: readonly {
    readonly key: string;
    readonly priceMicroUsdPerHour: number;
    readonly gpuCount: number;
    readonly gpuMemoryMiB: number;
    readonly room: number;
  }[];
  /**
   * Free room on ready live machines, in bins: `whole` bins are machines of a pool with exactly
   * `freeWhole` untouched GPUs (`machines` of them); `shared` bins hold the free time and memory
   * of partly used GPUs (shares only); `mig` bins the free memory slices of MIG GPUs (MIG only).
   */
  readonly live: readonly {
    readonly pool: string;
    readonly kind: 'whole' | 'shared' | 'mig';
    readonly freeWhole: number;
    readonly machines: number;
    readonly freeMilli: number;
    readonly freeMemoryMiB: number;
  }[];
}

export function capacityProblem(snapshot: Snapshot): CapacityProblem {
  return new Planner(snapshot).problem();
}

interface OfferingInfo {
  /** Offering id plus GPU mode (see poolKeyOf). */
  readonly key: string;
  readonly offering: Offering;
  readonly type: InstanceType;
  readonly price: number;
  readonly onDemandPrice: number;
  readonly riskPerHour: number;
  /** Groups that can launch it, with room left. */
  readonly groups: GroupState[];
  readonly migEnabled: boolean;
}

interface GroupState {
  readonly group: NodeGroup;
  /** Machines the group may still add in this plan. */
  room: number;
  readonly added: NodeCapacity[];
}

interface JobClass {
  readonly key: string;
  readonly request: GpuRequest;
  readonly nodes: number;
  readonly milli: number;
  /** Offerings that may hold this class, with the expected cost factor on each. */
  readonly eligible: Map<string, number>;
  /** Why no offering is eligible, when none is. */
  readonly noFit?: Reason;
}

interface Entry {
  readonly job: Job;
  readonly cls: JobClass;
  readonly team: string;
  /** Remaining budget of a team whose budget action is hold, µUSD; undefined when not limited so. */
}

type Fit = { node: NodeCapacity; assignment: NodeAssignment };

class Planner {
  private readonly s: Snapshot;
  private readonly offerings = new Map<string, OfferingInfo>();
  private readonly groups = new Map<string, GroupState>();
  private readonly ready = new CapacityIndex();
  /** Machines launching or booting: already paid for, so any work may claim them. */
  private readonly booting = new CapacityIndex();
  /** Machines bought in this plan: shared only by work whose cheapest home they are. */
  private readonly planned = new CapacityIndex();
  private readonly nodeById = new Map<string, NodeCapacity>();
  private readonly holders = new Map<string, { job: Job; assignment: NodeAssignment }[]>();
  private readonly classes = new Map<string, JobClass>();
  private readonly teamUsedMilli = new Map<string, number>();
  private readonly teamState = new Map<string, { state: BudgetState; team: Team | undefined; leftMicroUsd: number | undefined }>();
  private readonly actions: PlanAction[] = [];
  private readonly waiting: WaitingJob[] = [];
  private readonly preempted = new Set<string>();
  private plannedCount = 0;
  private addedExpected = 0;
  /** Groups whose launches in flight were cancelled, with the desired size they were set to. */
  private readonly cancelled = new Map<string, number>();
  /** Set by classify(): whether the waiting work exceeds what live machines and group room can hold. */
  private scarce = false;

  constructor(snapshot: Snapshot) {
    this.s = snapshot;
  }

  run(): Plan {
    this.indexOfferings();
    this.indexNodes();
    const entries = this.classify();
    const unplaced: Entry[] = [];
    if (this.scarce) {
      for (const e of entries) if (!this.placeOnReady(e)) unplaced.push(e);
    } else {
      // First each job on free capacity of its cheapest kind, so that scarce expensive GPUs stay
      // for the jobs that need them; then what is left on any free capacity (it is paid for).
      const second: Entry[] = [];
      for (const e of entries) if (!this.placeOnReady(e, true)) second.push(e);
      // Free capacity that is nobody's cheapest kind goes to the work that would cost most to buy for.
      for (const e of this.byBuyCost(second)) if (!this.placeOnReady(e)) unplaced.push(e);
    }
    let toBuy: Entry[] = [];
    if (this.scarce) {
      for (const e of unplaced) if (!this.waitForBooting(e)) toBuy.push(e);
    } else {
      const second: Entry[] = [];
      for (const e of unplaced) if (!this.waitForBooting(e, true)) second.push(e);
      for (const e of this.byBuyCost(second)) if (!this.waitForBooting(e)) toBuy.push(e);
      // Buying follows the planning order again (priority, then size).
      const rank = new Map(entries.map((e, i) => [e, i]));
      toBuy.sort((a, b) => rank.get(a)! - rank.get(b)!);
    }
    toBuy = toBuy.filter((e) => !this.waitingIds.has(e.job.id));
    const stuck: { entry: Entry; why: Reason }[] = [];
    const demand = new Demand(toBuy, this.offerings);
    for (const e of toBuy) {
      const why = this.buy(e, demand);
      demand.take(e);
      if (why) stuck.push({ entry: e, why });
    }
    for (const { entry, why } of stuck) this.preemptFor(entry, why);
    this.stopSpentTeams();
    this.scaleUps();
    this.scaleIn();
    return {
      // Capacity first: the job records of holds are written after every scale-up, launch and placement.
      actions: [...this.actions.filter((a) => !isHoldAction(a)), ...this.actions.filter(isHoldAction)],
      waiting: this.waiting,
      addedCostMicroUsdPerHour: [...this.groups.values()].reduce(
        (sum, g) => sum + g.added.reduce((a, n) => a + n.priceMicroUsdPerHour, 0),
        0,
      ),
      addedExpectedCostMicroUsdPerHour: Math.round(this.addedExpected),
    };
  }

  problem(): CapacityProblem {
    this.indexOfferings();
    this.indexNodes();
    const entries = this.classify();
    const classes = new Map<
      string,
      { kind: GpuRequest['kind']; wholeGpus: number; unitMilli: number; memoryMiB: number; count: number; eligible: Map<string, number> }
    >();
    for (const e of entries) {
      if (e.cls.eligible.size === 0) continue;
      const memoryMiB = e.cls.request.kind === 'fraction' ? e.cls.request.memoryMiB : 0;
      const unitMilli = unitOf(e.cls);
      const wholeGpus = e.cls.request.kind === 'whole' ? e.cls.request.count : 0;
      const key = `${e.cls.request.kind}|${unitMilli}|${memoryMiB}|${[...e.cls.eligible].map(([k, f]) => `${k}=${f.toFixed(6)}`).join(',')}`;
      const c = classes.get(key) ?? {
        kind: e.cls.request.kind,
        wholeGpus,
        unitMilli,
        memoryMiB,
        count: 0,
        eligible: e.cls.eligible as Map<string, number>,
      };
      c.count += e.cls.nodes;
      classes.set(key, c);
    }
    const bins = new Map<
      string,
      { pool: string; kind: 'whole' | 'shared' | 'mig'; freeWhole: number; machines: number; freeMilli: number; freeMemoryMiB: number }
    >();
    const bin = (pool: string, kind: 'whole' | 'shared' | 'mig', freeWhole: number) => {
      const k = `${pool}|${kind}|${freeWhole}`;
      let b = bins.get(k);
      if (!b) {
        b = { pool, kind, freeWhole, machines: 0, freeMilli: 0, freeMemoryMiB: 0 };
        bins.set(k, b);
      }
      return b;
    };
    for (const n of this.ready.allNodes()) {
      if (n.freeWhole > 0) {
        const b = bin(n.poolKey, 'whole', n.freeWhole);
        b.machines++;
        b.freeMilli += n.freeWhole * 1000;
        for (const g of n.gpus) if (!g.mig && !g.whole && g.freeMilli === 1000) b.freeMemoryMiB += g.memoryMiB;
      }
      for (const g of n.gpus) {
        if (g.mig) {
          if (g.mig.mask !== 0xff) bin(n.poolKey, 'mig', 0).freeMilli += Math.round(((8 - popcount(g.mig.mask)) * 1000) / 8);
        } else if (!g.whole && g.freeMilli > 0 && g.freeMilli < 1000) {
          const b = bin(n.poolKey, 'shared', 0);
          b.freeMilli += g.freeMilli;
          b.freeMemoryMiB += g.freeMemoryMiB;
        }
      }
    }
    const pools = this.allOfferingInfos().map((info) => ({
      key: info.key,
      priceMicroUsdPerHour: info.price,
      gpuCount: info.type.gpuCount,
      gpuMemoryMiB: info.type.gpuMemoryMiB,
      room: (this.s.unavailableUntilMs.get(info.offering.id) ?? 0) > this.s.nowMs ? 0 : info.groups.reduce((sum, g) => sum + g.room, 0),
    }));
    return { classes: [...classes.values()], pools, live: [...bins.values()] };
  }

  // ---- set-up ---------------------------------------------------------------------------

  private indexOfferings(): void {
    const s = this.s;
    for (const group of [...s.groups].sort((a, b) => (a.id < b.id ? -1 : 1))) {
      const gs: GroupState = { group, room: Math.max(0, group.maxSize - group.desiredCapacity), added: [] };
      this.groups.set(group.id, gs);
      for (const o of group.offerings) {
        const type = s.instanceTypes.get(o.instanceType);
        const migEnabled = (group.migEnabled ?? false) && isMigModel(type?.gpuModel ?? 'T4');
        const key = poolKeyOf(o.id, migEnabled);
        const existing = this.offerings.get(key);
        if (existing) {
          existing.groups.push(gs);
          continue;
        }
        const quote = s.prices.get(o.id);
        if (!type || !quote) continue;
        this.offerings.set(key, {
          key,
          offering: o,
          type,
          price: quote.priceMicroUsdPerHour,
          onDemandPrice: quote.onDemandMicroUsdPerHour,
          riskPerHour: o.capacityType === 'spot' ? (s.poolRiskPerHour.get(o.id) ?? priorRatePerHour(undefined)) : 0,
          groups: [gs],
          migEnabled,
        });
      }
    }
  }

  private indexNodes(): void {
    const s = this.s;
    const liveByGroup = new Map<string, number>();
    const groupOf = new Map(s.groups.map((g) => [g.id, g]));
    for (const fleetNode of [...s.nodes].sort((a, b) => (a.instance.id < b.instance.id ? -1 : 1))) {
      const inst = fleetNode.instance;
      if (!inService(inst.state)) continue; // a machine a hook holds while it drains is no longer the group's capacity
      liveByGroup.set(inst.groupId, (liveByGroup.get(inst.groupId) ?? 0) + 1);
      if (fleetNode.record?.draining) continue;
      const type = s.instanceTypes.get(inst.instanceType);
      if (!type) continue;
      const offerId = offeringId(inst);
      const reported = fleetNode.record?.gpus ?? [];
      const migMode = reported.length > 0 ? reported.some((g) => g.migEnabled) : (groupOf.get(inst.groupId)?.migEnabled ?? false);
      const gpus = makeGpus(type, migMode);
      // The GPU instances the node reports are where they are (the driver's layout, not the planner's memory of it):
      // their slices are taken whether or not a job here accounts for them.
      for (const r of reported) {
        const slot = gpus.find((g) => g.index === r.index);
        if (!slot?.mig) continue;
        for (const d of r.migDevices ?? [])
          if (d.startSlice !== undefined && d.slices !== undefined) slot.mig.mask |= placementMask(d.startSlice, d.slices);
      }
      const poolKey = poolKeyOf(
        offerId,
        gpus.some((g) => g.mig !== undefined),
      );
      // Ready: schedulable now. Booting: launching, or up but its agent not registered yet.
      // A registered node that is unhealthy or silent is neither: it takes no work and is not counted on.
      const kind = fleetNode.schedulable ? 'ready' : inst.state === 'pending' || !fleetNode.record ? 'booting' : undefined;
      const node: NodeCapacity = {
        id: inst.id,
        groupId: inst.groupId,
        cloud: inst.cloud,
        region: inst.region,
        zone: inst.zone,
        instanceType: inst.instanceType,
        capacityType: inst.capacityType,
        offeringId: offerId,
        poolKey,
        kind: kind ?? 'booting',
        priceMicroUsdPerHour: s.prices.get(offerId)?.priceMicroUsdPerHour ?? 0,
        gpus,
        freeWhole: countFreeWhole(gpus),
      };
      this.nodeById.set(node.id, node);
      if (kind === 'ready') this.ready.add(node);
      else if (kind === 'booting') this.booting.add(node);
    }
    for (const job of s.activeJobs) {
      for (const a of job.placement?.nodes ?? []) {
        const node = this.nodeById.get(a.nodeId);
        if (!node) continue;
        commitFit(node, a);
        this.ready.update(node);
        this.booting.update(node);
        const list = this.holders.get(node.id) ?? [];
        list.push({ job, assignment: a });
        this.holders.set(node.id, list);
      }
      this.teamUsedMilli.set(job.team, (this.teamUsedMilli.get(job.team) ?? 0) + milliGpusUsed(job.spec.gpu) * job.spec.nodes);
    }
    // Launches in flight: the group wants more machines than it has reported so far. A group
    // whose every offering failed to launch (or was interrupted) recently will not deliver them:
    // its launches are cancelled and the work is bought elsewhere.
    for (const gs of this.groups.values()) {
      const live = liveByGroup.get(gs.group.id) ?? 0;
      const inFlight = gs.group.desiredCapacity - live;
      if (inFlight > 0 && gs.group.offerings.every((o) => (s.unavailableUntilMs.get(o.id) ?? 0) > s.nowMs)) {
        const to = Math.max(gs.group.minSize, live);
        if (to < gs.group.desiredCapacity) {
          this.actions.push({
            kind: 'cancel-launches',
            groupId: gs.group.id,
            fromDesired: gs.group.desiredCapacity,
            toDesired: to,
            reason: reason(
              'offering-unavailable',
              `${gs.group.desiredCapacity - to} launch(es) of ${gs.group.id} cannot be fulfilled: every offering of the group failed to launch or was interrupted recently`,
            ),
          });
          this.cancelled.set(gs.group.id, to);
        }
        continue;
      }
      const o = this.cheapestOfGroup(gs.group);
      if (!o || inFlight <= 0) continue;
      for (let i = 0; i < inFlight; i++) {
        const gpus = makeGpus(o.type, o.migEnabled);
        const node: NodeCapacity = {
          ...this.nodeShape(o, gs.group.id),
          id: `inflight:${gs.group.id}:${i}`,
          kind: 'booting',
          gpus,
          freeWhole: countFreeWhole(gpus),
        };
        this.booting.add(node);
      }
    }
  }

  private nodeShape(o: OfferingInfo, groupId: string) {
    return {
      groupId,
      cloud: o.offering.cloud,
      region: o.offering.region,
      zone: o.offering.zone,
      instanceType: o.offering.instanceType,
      capacityType: o.offering.capacityType,
      offeringId: o.offering.id,
      poolKey: o.key,
      priceMicroUsdPerHour: o.price,
    };
  }

  private cheapestOfGroup(group: NodeGroup): OfferingInfo | undefined {
    let best: OfferingInfo | undefined;
    for (const o of group.offerings) {
      const key = poolKeyOf(o.id, group.migEnabled ?? false);
      const found = this.offerings.get(key) ?? this.offerings.get(o.id);
      if (found && (!best || found.price < best.price || (found.price === best.price && found.key < best.key))) best = found;
    }
    return best;
  }

  /** Asks a running attempt to checkpoint and go back to the queue (once per plan). */
  private preempt(job: Job, why: Reason): void {
    this.preempted.add(job.id);
    this.actions.push({ kind: 'preempt', jobId: job.id, attempt: job.attempt, reason: why });
  }

  /** A team whose budget (action stop) is spent: each of its running attempts is checkpointed and requeued, and then waits held. */
  private stopSpentTeams(): void {
    for (const job of this.s.activeJobs) {
      if (job.state === 'checkpointing' || this.preempted.has(job.id) || this.budget(job.team).state !== 'stop') continue;
      const status = budgetStatus(this.budget(job.team).team!, this.s.spendMicroUsd.get(job.team) ?? 0);
      this.preempt(
        job,
        reason(
          'budget-stop',
          `${status.message}: ${job.spec.checkpoint ? 'checkpointed and requeued, it resumes from its checkpoint' : 'it cannot checkpoint, so it is stopped and requeued from the start'}`,
        ),
      );
    }
  }

  // ---- classification -------------------------------------------------------------------

  private budget(teamId: string) {
    let t = this.teamState.get(teamId);
    if (!t) {
      const team = this.s.teams.get(teamId);
      const spent = this.s.spendMicroUsd.get(teamId) ?? 0;
      const committed = this.s.committedMicroUsd?.get(teamId) ?? 0;
      const state = team ? budgetStatus(team, spent, committed).state : 'hold';
      // What new work may still commit: the budget less what was spent and what running work will still cost.
      const leftMicroUsd =
        team?.budget && (team.budget.action === 'hold' || team.budget.action === 'stop')
          ? Math.max(0, team.budget.amountMicroUsd - spent - committed)
          : undefined;
      t = { state, team, leftMicroUsd };
      this.teamState.set(teamId, t);
    }
    return t;
  }

  private classify(): Entry[] {
    const entries: Entry[] = [];
    for (const job of this.s.pendingJobs) {
      const b = this.budget(job.team);
      if (b.state === 'hold' || b.state === 'stop') {
        const status = b.team
          ? budgetStatus(b.team, this.s.spendMicroUsd.get(job.team) ?? 0, this.s.committedMicroUsd?.get(job.team) ?? 0)
          : undefined;
        this.wait(
          job,
          reason(b.state === 'stop' ? 'budget-stop' : 'budget-hold', status?.message ?? `team ${job.team} has no budget; new work is held`),
          true,
        );
        continue;
      }
      if (b.state === 'spot-only' && !job.spec.interruptible) {
        this.wait(
          job,
          reason(
            'budget-spot-only',
            `team ${job.team} spent its budget (action spot-only) and this job is not interruptible, so it cannot run on spot`,
          ),
          true,
        );
        continue;
      }
      let capacity: 'any' | 'spot' | 'on-demand' = job.spec.interruptible ? 'any' : 'on-demand';
      if (b.state === 'spot-only') capacity = 'spot';
      const deadline = job.spec.deadline
        ? deadlineChoice(job, this.s.nowMs, this.s.policy, {
            mode: 'none',
            spotAvailable: job.spec.interruptible && this.spotObtainable(this.classOf(job, 'spot')),
          })
        : ({ mode: 'free' } as const);
      if (deadline.mode === 'on-demand' && capacity !== 'spot') capacity = 'on-demand';
      // The deadline allows waiting for spot rather than paying for on-demand now.
      if (deadline.mode === 'wait-for-spot' && capacity === 'any') capacity = 'spot';
      // A job moved off on-demand to save money waits a while for spot, so it does not land back where it was.
      const waitedMs = this.s.nowMs - job.queuedAtMs;
      if (capacity === 'any' && job.requeueReason?.code === 'rebalance-to-spot' && waitedMs < this.s.policy.moveToSpotPatienceSec * 1000)
        capacity = 'spot';
      let cls = this.classOf(job, capacity);
      // Interruptible work without deadline pressure waits a while for spot when none can be had now:
      // up to half its remaining work (at least a boot time), capped by the policy.
      if (capacity === 'any' && deadline.mode !== 'on-demand' && this.s.policy.spotPatienceSec > 0 && !this.spotObtainable(cls)) {
        const patienceSec = Math.min(
          this.s.policy.spotPatienceSec,
          Math.max(this.s.policy.expectedBootSec, remainingWorkSec(job, this.s.policy) / 2),
        );
        if (waitedMs < patienceSec * 1000) {
          const spotOnly = this.classOf(job, 'spot');
          if (spotOnly.eligible.size > 0) cls = spotOnly;
        }
      }
      entries.push({ job, team: job.team, cls });
    }
    const fair = fairShareOrder(
      entries,
      this.teamUsedMilli,
      (team) => this.s.teams.get(team)?.weight ?? 1,
      (e) => e.cls.milli * e.cls.nodes,
    );
    this.scarce = this.capacityIsScarce(entries);
    if (!this.scarce) {
      // Everyone will get capacity within a boot time: pack well (largest first within a
      // priority, first-fit decreasing); fair-share order still breaks ties between equal sizes.
      const rank = new Map(fair.map((e, i) => [e, i]));
      fair.sort(
        (a, b) =>
          b.job.spec.priority - a.job.spec.priority || b.cls.milli * b.cls.nodes - a.cls.milli * a.cls.nodes || rank.get(a)! - rank.get(b)!,
      );
    }
    return fair;
  }

  /**
   * Capacity is scarce when the waiting work could not all be held by the free GPUs of live
   * machines plus what the groups may still add. Then the order decides who runs, and it is
   * priority and fair share; otherwise it only decides packing.
   */
  private capacityIsScarce(entries: readonly Entry[]): boolean {
    let demand = 0;
    for (const e of entries) demand += e.cls.milli * e.cls.nodes;
    let supply = 0;
    for (const n of this.nodeById.values()) supply += n.gpus.length * 1000 - usedMilli(n);
    for (const gs of this.groups.values()) {
      let biggest = 0;
      for (const o of gs.group.offerings) biggest = Math.max(biggest, this.s.instanceTypes.get(o.instanceType)?.gpuCount ?? 0);
      supply += gs.room * biggest * 1000;
      if (supply > demand) return false;
    }
    return supply < demand;
  }

  /** Jobs that ask the same thing in the same way share one class and one eligibility computation. */
  private classOf(job: Job, capacity: 'any' | 'spot' | 'on-demand'): JobClass {
    const spec = job.spec;
    const work = remainingWorkSec(job, this.s.policy);
    // Spot factors depend on remaining work and checkpointing; bucket the work (×2 steps) so classes stay few.
    const workBucket = Math.ceil(Math.log2(Math.max(60, work)));
    const g = spec.gpu;
    const shape =
      g.kind === 'whole' ? `w${g.count}/${g.minMemoryMiB ?? 0}` : g.kind === 'fraction' ? `f${g.milliGpu}/${g.memoryMiB}` : `m${g.profile}`;
    const where = spec.placement
      ? `${spec.placement.clouds?.join('+') ?? ''}/${spec.placement.regions?.join('+') ?? ''}/${spec.placement.zones?.join('+') ?? ''}`
      : '';
    const key = `${shape}|${g.models?.join('+') ?? ''}|${spec.nodes}|${capacity}|${where}|${spec.checkpoint?.intervalSec ?? 0}|${workBucket}`;
    const cached = this.classes.get(key);
    if (cached) return cached;
    const eligible = new Map<string, number>();
    let sawType = false;
    const restartSec = this.s.policy.expectedBootSec + this.s.policy.restoreSec;
    const representative = { ...job, spec: { ...spec, expectedRuntimeSec: 2 ** workBucket }, checkpoint: undefined } as Job;
    for (const info of this.allOfferingInfos()) {
      const o = info.offering;
      if (!typeCanHold(info.type, spec.gpu, info.migEnabled)) continue;
      sawType = true;
      if (capacity === 'spot' && o.capacityType !== 'spot') continue;
      if (capacity === 'on-demand' && o.capacityType !== 'on-demand') continue;
      if (!placementAllowed(spec.placement, o)) continue;
      let factor = 1;
      if (o.capacityType === 'spot') {
        factor = jobSpotFactor(representative, info.riskPerHour, { defaultRuntimeSec: this.s.policy.defaultRuntimeSec, restartSec });
        // Spot is not chosen when its expected cost, rework included, is higher than on-demand.
        if (!Number.isFinite(factor) || (capacity !== 'spot' && info.onDemandPrice > 0 && info.price * factor > info.onDemandPrice))
          continue;
      }
      eligible.set(info.key, factor);
    }
    const cls: JobClass = {
      key,
      request: spec.gpu,
      nodes: spec.nodes,
      milli: milliGpusUsed(spec.gpu),
      eligible,
      ...(eligible.size === 0
        ? {
            noFit: sawType
              ? reason(
                  'no-offering-fits',
                  `no offering allowed for it (${capacity === 'any' ? 'spot or on-demand' : capacity}${spec.placement ? ', placement limits' : ''}) can hold ${describeRequest(job)}`,
                )
              : this.s.degraded && this.s.degraded.length > 0
                ? reason(
                    'provider-degraded',
                    `no healthy node group offers a machine that can hold ${describeRequest(job)}; ${this.s.degraded.map((d) => `${d.scope ? `${d.cloud} ${d.scope}` : d.cloud} is left out (its calls fail: ${d.error})`).join('; ')}`,
                  )
                : reason('no-offering-fits', `no node group offers a machine that can hold ${describeRequest(job)}`),
          }
        : {}),
    };
    this.classes.set(key, cls);
    return cls;
  }

  /**
   * The work whose cheapest new capacity costs most per job first: free capacity left after
   * every job had its cheapest kind goes where it saves the most. Used only when capacity is
   * not scarce, when every job gets a machine within a boot time and the order decides cost,
   * not who runs; priority breaks ties.
   */
  private readonly buyCostCache = new Map<JobClass, number>();
  private byBuyCost(entries: readonly Entry[]): Entry[] {
    const cost = (e: Entry) => {
      let c = this.buyCostCache.get(e.cls);
      if (c === undefined) {
        let best = Infinity;
        for (const [key, factor] of e.cls.eligible) {
          const info = this.offerings.get(key);
          if (info && info.groups.length > 0) best = Math.min(best, perMilli(info, factor));
        }
        c = Number.isFinite(best) ? best * unitOf(e.cls) * e.cls.nodes : 0;
        this.buyCostCache.set(e.cls, c);
      }
      return c;
    };
    const keyed = entries.map((e, i) => ({ e, i, c: cost(e) }));
    keyed.sort((a, b) => b.c - a.c || b.e.job.spec.priority - a.e.job.spec.priority || a.i - b.i);
    return keyed.map((k) => k.e);
  }

  private readonly obtainableCache = new Map<JobClass, boolean>();
  /**
   * Whether some spot pool the class may use has free capacity now or could launch a machine.
   * True when the class has no spot pool at all (there is nothing to wait for).
   */
  private spotObtainable(cls: JobClass): boolean {
    let ok = this.obtainableCache.get(cls);
    if (ok === undefined) {
      ok = true;
      let sawSpot = false;
      for (const key of cls.eligible.keys()) {
        const info = this.offerings.get(key);
        if (!info || info.offering.capacityType !== 'spot') continue;
        if (!sawSpot) {
          sawSpot = true;
          ok = false;
        }
        if (info.groups.some((g) => g.room > 0) && (this.s.unavailableUntilMs.get(info.offering.id) ?? 0) <= this.s.nowMs) {
          ok = true;
          break;
        }
        if (this.ready.pool(key)?.hasFree() || this.booting.pool(key)?.hasFree()) {
          ok = true;
          break;
        }
      }
      this.obtainableCache.set(cls, ok);
    }
    return ok;
  }

  private readonly homeCache = new Map<JobClass, Set<string>>();
  /** The pools that are a class's cheapest per GPU (within 0.01%): where it is best placed. */
  private homes(cls: JobClass): Set<string> {
    let set = this.homeCache.get(cls);
    if (!set) {
      let best = Infinity;
      for (const [key, factor] of cls.eligible) {
        const info = this.offerings.get(key);
        if (info) best = Math.min(best, perMilli(info, factor));
      }
      set = new Set(
        [...cls.eligible]
          .filter(([key, factor]) => {
            const info = this.offerings.get(key);
            return info !== undefined && perMilli(info, factor) <= best * 1.0001;
          })
          .map(([key]) => key),
      );
      this.homeCache.set(cls, set);
    }
    return set;
  }

  private offeringInfoCache: OfferingInfo[] | undefined;
  /** Offerings of groups and of live nodes (a node's offering may have left every group's list). */
  private allOfferingInfos(): OfferingInfo[] {
    if (this.offeringInfoCache) return this.offeringInfoCache;
    const list = [...this.offerings.values()];
    for (const node of this.nodeById.values()) {
      if (this.offerings.has(node.poolKey)) continue;
      const type = this.s.instanceTypes.get(node.instanceType);
      if (!type) continue;
      const offering: Offering = {
        id: node.offeringId,
        cloud: node.cloud,
        region: node.region,
        zone: node.zone,
        instanceType: node.instanceType,
        capacityType: node.capacityType,
      };
      const quote = this.s.prices.get(node.offeringId);
      const info: OfferingInfo = {
        key: node.poolKey,
        offering,
        type,
        price: quote?.priceMicroUsdPerHour ?? node.priceMicroUsdPerHour,
        onDemandPrice: quote?.onDemandMicroUsdPerHour ?? 0,
        riskPerHour: node.capacityType === 'spot' ? (this.s.poolRiskPerHour.get(node.offeringId) ?? priorRatePerHour(undefined)) : 0,
        groups: [],
        migEnabled: node.gpus.some((g) => g.mig !== undefined),
      };
      this.offerings.set(node.poolKey, info);
      list.push(info);
    }
    list.sort((a, b) => (a.key < b.key ? -1 : 1));
    this.offeringInfoCache = list;
    return list;
  }

  // ---- placement ------------------------------------------------------------------------

  private readonly reasons = new Map<unknown, Reason>();
  /** Jobs waiting for the same thing share one (immutable) reason object. */
  private sharedReason(key: unknown, make: () => Reason): Reason {
    let r = this.reasons.get(key);
    if (!r) {
      r = make();
      this.reasons.set(key, r);
    }
    return r;
  }

  private readonly waitingIds = new Set<string>();
  /** Where each waiting job's entry is in `waiting` (the last one written for it). */
  private readonly waitingAt = new Map<string, number>();
  /** Per job class, the highest priority for which preemption found no room: lower or equal ones will not find any either. */
  private readonly noPreemptRoom = new Map<JobClass, number>();
  /** For each machine bought in this plan, the kinds of work its purchase counted on. */
  private readonly fillers = new Map<NodeCapacity, ReadonlySet<FillGroup | undefined>>();
  private wait(job: Job, why: Reason, isHold = false): void {
    this.waitingIds.add(job.id);
    this.waitingAt.set(job.id, this.waiting.length);
    this.waiting.push({ jobId: job.id, reason: why });
    if (isHold) {
      // Written when the hold starts or its reason changes, not when a figure in its message moves (the decision has the figures).
      if (job.hold?.code !== why.code) this.actions.push({ kind: 'hold', jobId: job.id, reason: why });
    } else if (job.hold) {
      this.actions.push({ kind: 'release-hold', jobId: job.id });
    }
  }

  /** Team GPU cap and hold-budget checks for placing this job at this hourly price share. Returns a reason to hold, or undefined. */
  private limits(e: Entry, priceShareMicroUsdPerHour: number, factor: number): Reason | undefined {
    const team = this.s.teams.get(e.team);
    const milli = e.cls.milli * e.cls.nodes;
    if (team?.maxGpus !== undefined && (this.teamUsedMilli.get(e.team) ?? 0) + milli > team.maxGpus * 1000) {
      return reason('team-gpu-cap', `team ${e.team} would hold more than its cap of ${team.maxGpus} GPUs (gpu-fleet:max-gpus)`);
    }
    const b = this.budget(e.team);
    if (b.leftMicroUsd !== undefined) {
      const hours = remainingWorkSec(e.job, this.s.policy) / 3600;
      const expected = Math.round(priceShareMicroUsdPerHour * hours * factor);
      if (expected > b.leftMicroUsd) {
        return reason(
          'budget-hold',
          `its expected cost ($${(expected / 1e6).toFixed(2)}) is more than what is left of team ${e.team}'s budget ($${(b.leftMicroUsd / 1e6).toFixed(2)}; action hold)`,
        );
      }
    }
    return undefined;
  }

  private commitLimits(e: Entry, priceShareMicroUsdPerHour: number, factor: number): void {
    this.teamUsedMilli.set(e.team, (this.teamUsedMilli.get(e.team) ?? 0) + e.cls.milli * e.cls.nodes);
    const b = this.budget(e.team);
    if (b.leftMicroUsd !== undefined) {
      const hours = remainingWorkSec(e.job, this.s.policy) / 3600;
      b.leftMicroUsd -= Math.round(priceShareMicroUsdPerHour * hours * factor);
    }
  }

  private shareOf(node: NodeCapacity, e: Entry): number {
    return (node.priceMicroUsdPerHour * e.cls.milli * e.cls.nodes) / Math.max(1, node.gpus.length * 1000);
  }

  /** The placement with what it holds and costs, for per-job accounting. */
  private placementOf(e: Entry, fits: readonly { node: NodeCapacity; assignment: NodeAssignment }[]): Placement {
    const node = fits[0]!.node;
    const price = Math.round(this.shareOf(node, e));
    const od = this.s.prices.get(node.offeringId)?.onDemandMicroUsdPerHour;
    const fraction = (e.cls.milli * e.cls.nodes) / Math.max(1, node.gpus.length * 1000);
    return {
      nodes: fits.map((f) => f.assignment),
      capacityType: node.capacityType,
      milliGpu: e.cls.milli * e.cls.nodes,
      priceMicroUsdPerHour: price,
      onDemandMicroUsdPerHour: od !== undefined ? Math.round(od * fraction) : price,
    };
  }

  private placeOnReady(e: Entry, homeOnly = false): boolean {
    if (e.cls.eligible.size === 0) return false;
    const fits = this.findFits(this.ready, e, homeOnly ? this.homes(e.cls) : undefined);
    if (!fits) return false;
    const factor = e.cls.eligible.get(fits[0]!.node.poolKey) ?? 1;
    const held = this.limits(e, this.shareOf(fits[0]!.node, e), factor);
    if (held) {
      this.wait(e.job, held, true);
      return true;
    }
    for (const f of fits) {
      commitFit(f.node, f.assignment);
      this.ready.update(f.node);
      const list = this.holders.get(f.node.id) ?? [];
      list.push({ job: e.job, assignment: f.assignment });
      this.holders.set(f.node.id, list);
    }
    this.commitLimits(e, this.shareOf(fits[0]!.node, e), factor);
    if (e.job.hold) this.actions.push({ kind: 'release-hold', jobId: e.job.id });
    const where = fits.map((f) => `${f.node.id} (${f.node.instanceType}, ${f.node.capacityType}, ${f.node.zone})`).join(', ');
    this.actions.push({
      kind: 'place',
      jobId: e.job.id,
      attempt: e.job.attempt,
      placement: this.placementOf(e, fits),
      reason: reason(
        'placed-on-free-capacity',
        `fits on free GPUs of ${where}; the fullest node that fits, keeping bigger holes for bigger jobs`,
      ),
    });
    return true;
  }

  /** Claims room on a booting machine (optionally only of the job's cheapest kind); the job waits for it. */
  private waitForBooting(e: Entry, homeOnly = false): boolean {
    return this.claim(this.booting, e, homeOnly);
  }

  private claim(index: CapacityIndex, e: Entry, homeOnly: boolean, accept?: (node: NodeCapacity) => boolean): boolean {
    if (e.cls.eligible.size === 0) return false;
    const fits = this.findFits(index, e, homeOnly ? this.homes(e.cls) : undefined, accept);
    if (!fits) return false;
    const factor = e.cls.eligible.get(fits[0]!.node.poolKey) ?? 1;
    const held = this.limits(e, this.shareOf(fits[0]!.node, e), factor);
    if (held) {
      this.wait(e.job, held, true);
      return true;
    }
    for (const f of fits) {
      commitFit(f.node, f.assignment);
      index.update(f.node);
    }
    this.commitLimits(e, this.shareOf(fits[0]!.node, e), factor);
    const node = fits[0]!.node;
    const planned = node.kind === 'planned';
    if (planned) this.addExpected(node, e, factor);
    const why =
      planned && fits.length === 1
        ? this.sharedReason(`share:${node.poolKey}`, () =>
            reason('waiting-for-capacity', `shares a new ${node.instanceType} (${node.capacityType}, ${node.zone}) ordered in this plan`),
          )
        : reason(
            planned ? 'waiting-for-capacity' : 'waiting-for-boot',
            `${planned ? 'shares new capacity ordered in this plan' : 'capacity for it is starting'}: ${[...new Set(fits.map((f) => `${f.node.instanceType} (${f.node.capacityType}, ${f.node.zone})`))].join(', ')}`,
          );
    this.wait(e.job, why);
    return true;
  }

  /**
   * Best fit among the index's nodes that the job's class may use: for one node, the fullest
   * that fits (ties: cheapest, then by id); for a gang, that many distinct nodes in one zone.
   */
  private findFits(
    index: CapacityIndex,
    e: Entry,
    only?: ReadonlySet<string>,
    accept?: (node: NodeCapacity) => boolean,
  ): Fit[] | undefined {
    const { request } = e.cls;
    const need = e.cls.nodes;
    if (need === 1) {
      let best: { fit?: Fit; node: NodeCapacity; free: number; price: number } | undefined;
      for (const poolId of this.poolsToSearch(index, e.cls.eligible)) {
        if (only && !only.has(poolId)) continue;
        const pool = index.pool(poolId)!;
        const price = pool.priceHint * (e.cls.eligible.get(poolId) ?? 1);
        if (request.kind === 'whole') {
          // Fullest node with room: decided on counts; the assignment is built for the winner only.
          const node = pool.fullestWithFree(request.count, accept);
          if (!node) continue;
          const free = freeMilliOf(node) - request.count * 1000;
          if (!best || free < best.free || (free === best.free && (price < best.price || (price === best.price && node.id < best.node.id))))
            best = { node, free, price };
          continue;
        }
        const candidate = this.bestInPool(pool, request, accept);
        if (!candidate) continue;
        const free = freeAfter(candidate.node, candidate.assignment);
        if (
          !best ||
          free < best.free ||
          (free === best.free && (price < best.price || (price === best.price && candidate.node.id < best.node.id)))
        ) {
          best = { fit: candidate, node: candidate.node, free, price };
        }
      }
      if (!best) return undefined;
      if (best.fit) return [best.fit];
      const assignment = tryFit(best.node, request);
      return assignment ? [{ node: best.node, assignment }] : undefined;
    }
    // Gangs: per zone, collect nodes that each hold one member; take the fullest ones.
    const byZone = new Map<string, Fit[]>();
    for (const poolId of this.poolsToSearch(index, e.cls.eligible)) {
      if (only && !only.has(poolId)) continue;
      const pool = index.pool(poolId)!;
      const list = byZone.get(pool.zone) ?? [];
      for (const node of pool.withFree(request.kind === 'whole' ? request.count : 1)) {
        if (accept && !accept(node)) continue;
        const assignment = tryFit(node, request);
        if (assignment) list.push({ node, assignment });
      }
      byZone.set(pool.zone, list);
    }
    let best: { fits: Fit[]; score: number } | undefined;
    for (const zone of [...byZone.keys()].sort()) {
      const list = byZone.get(zone)!;
      if (list.length < need) continue;
      list.sort(
        (a, b) =>
          freeAfter(a.node, a.assignment) - freeAfter(b.node, b.assignment) ||
          a.node.priceMicroUsdPerHour - b.node.priceMicroUsdPerHour ||
          (a.node.id < b.node.id ? -1 : 1),
      );
      const fits = list.slice(0, need);
      const score = fits.reduce((s, f) => s + freeAfter(f.node, f.assignment), 0);
      if (!best || score < best.score) best = { fits, score };
    }
    return best?.fits;
  }

  private readonly searchCache = new Map<CapacityIndex, Map<ReadonlyMap<string, number>, { version: number; keys: string[] }>>();
  /** The pools of an index a class may use (cached until the index gains a pool). */
  private poolsToSearch(index: CapacityIndex, eligible: ReadonlyMap<string, number>): readonly string[] {
    let byClass = this.searchCache.get(index);
    if (!byClass) {
      byClass = new Map();
      this.searchCache.set(index, byClass);
    }
    const hit = byClass.get(eligible);
    if (hit && hit.version === index.version) return hit.keys;
    const keys: string[] = [];
    if (eligible.size < index.size) {
      for (const key of eligible.keys()) if (index.pool(key)) keys.push(key);
    } else {
      for (const key of index.poolIds()) if (eligible.has(key)) keys.push(key);
    }
    byClass.set(eligible, { version: index.version, keys });
    return keys;
  }

  private bestInPool(
    pool: NonNullable<ReturnType<CapacityIndex['pool']>>,
    request: GpuRequest,
    accept?: (node: NodeCapacity) => boolean,
  ): Fit | undefined {
    if (request.kind === 'whole') {
      for (const node of pool.withFree(request.count)) {
        if (accept && !accept(node)) continue;
        const assignment = tryFit(node, request);
        if (assignment) return { node, assignment };
      }
      return undefined;
    }
    if (request.kind === 'fraction') {
      // Partly shared GPUs first, tightest first; then a node with an untouched GPU.
      for (const node of pool.sharedWithRoom(request.milliGpu)) {
        if (accept && !accept(node)) continue;
        const assignment = tryFit(node, request);
        if (assignment) return { node, assignment };
      }
      for (const node of pool.withFree(1)) {
        if (accept && !accept(node)) continue;
        const assignment = tryFit(node, request);
        if (assignment) return { node, assignment };
      }
      return undefined;
    }
    // MIG slices: GPUs already partly used first (tryFit prefers the fullest GPU of a node), then any node.
    let best: { fit: Fit; score: number } | undefined;
    for (const node of pool.migNodes()) {
      if (accept && !accept(node)) continue;
      const assignment = tryFit(node, request);
      if (!assignment) continue;
      const score = freeAfter(node, assignment);
      if (!best || score < best.score || (score === best.score && node.id < best.fit.node.id)) best = { fit: { node, assignment }, score };
    }
    return best?.fit;
  }

  // ---- buying ---------------------------------------------------------------------------

  private buy(e: Entry, demand: Demand): Reason | undefined {
    if (e.cls.noFit) {
      this.wait(e.job, e.cls.noFit);
      return undefined;
    }
    // Machines already bought in this plan first: those whose purchase counted on work like this.
    const group = demand.groupFor(e);
    if (this.claim(this.planned, e, false, (node) => this.fillers.get(node)?.has(group) ?? false)) return undefined;
    const choice = this.chooseOffering(e, demand);
    if (!choice.ok) {
      this.wait(e.job, choice.reason);
      return choice.reason;
    }
    const { info, gs, factor } = choice;
    const held = this.limits(e, (info.price * e.cls.milli * e.cls.nodes) / (info.type.gpuCount * 1000), factor);
    if (held) {
      this.wait(e.job, held, true);
      return undefined;
    }
    const opened: Fit[] = [];
    for (let i = 0; i < e.cls.nodes; i++) {
      const gpus = makeGpus(info.type, info.migEnabled);
      const node: NodeCapacity = {
        ...this.nodeShape(info, gs.group.id),
        id: `planned:${gs.group.id}:${this.plannedCount++}`,
        kind: 'planned',
        gpus,
        freeWhole: countFreeWhole(gpus),
      };
      const assignment = tryFit(node, e.cls.request);
      if (!assignment) break;
      commitFit(node, assignment);
      gs.added.push(node);
      gs.room--;
      this.planned.add(node);
      this.fillers.set(node, demand.fillers(info.key, e));
      this.addedExpected += node.priceMicroUsdPerHour;
      opened.push({ node, assignment });
    }
    this.commitLimits(e, (info.price * e.cls.milli * e.cls.nodes) / (info.type.gpuCount * 1000), factor);
    for (const f of opened) this.addExpected(f.node, e, factor, 1 / e.cls.nodes);
    this.wait(
      e.job,
      this.sharedReason(choice, () =>
        reason(
          'waiting-for-capacity',
          `new ${info.offering.instanceType} (${info.offering.capacityType}, ${info.offering.zone}) ordered for it: ${choice.why}`,
        ),
      ),
    );
    return undefined;
  }

  /** Adds a job's expected rework on spot to the plan's expected cost. */
  private addExpected(node: NodeCapacity, e: Entry, factor: number, perNode = 1): void {
    if (factor <= 1) return;
    this.addedExpected += (node.priceMicroUsdPerHour * e.cls.milli * e.cls.nodes * perNode * (factor - 1)) / (node.gpus.length * 1000);
  }

  private readonly choiceCache = new Map<
    JobClass,
    { epoch: number; choice: { ok: true; info: OfferingInfo; gs: GroupState; factor: number; why: string } }
  >();

  private chooseOffering(
    e: Entry,
    demand: Demand,
  ): { ok: true; info: OfferingInfo; gs: GroupState; factor: number; why: string } | { ok: false; reason: Reason } {
    // While the demand has not shrunk enough to change any fill, the last choice for this kind stands (if it still has room).
    const cached = this.choiceCache.get(e.cls);
    if (cached && cached.epoch === demand.epoch && cached.choice.gs.room >= e.cls.nodes) return cached.choice;
    const fresh = this.chooseOfferingNow(e, demand);
    if (fresh.ok) this.choiceCache.set(e.cls, { epoch: demand.epoch, choice: fresh });
    return fresh;
  }

  private chooseOfferingNow(
    e: Entry,
    demand: Demand,
  ): { ok: true; info: OfferingInfo; gs: GroupState; factor: number; why: string } | { ok: false; reason: Reason } {
    let best: { info: OfferingInfo; gs: GroupState; factor: number; eff: number; fill: number } | undefined;
    let sawAtMax = false;
    let sawUnavailable = false;
    for (const [key, factor] of e.cls.eligible) {
      const info = this.offerings.get(key);
      if (!info || info.groups.length === 0) continue;
      if ((this.s.unavailableUntilMs.get(info.offering.id) ?? 0) > this.s.nowMs) {
        sawUnavailable = true;
        continue;
      }
      const gs = info.groups.find((g) => g.room >= e.cls.nodes);
      if (!gs) {
        sawAtMax = true;
        continue;
      }
      const { eff, fill } = demand.efficiency(info, e, factor);
      if (
        !best ||
        eff < best.eff - 1e-9 ||
        (Math.abs(eff - best.eff) <= 1e-9 && (info.price < best.info.price || (info.price === best.info.price && key < best.info.key)))
      ) {
        best = { info, gs, factor, eff, fill };
      }
    }
    if (!best) {
      const what = describeRequest(e.job);
      if (sawAtMax) return { ok: false, reason: reason('group-at-max', `every node group that could hold ${what} is at its maximum size`) };
      if (sawUnavailable)
        return {
          ok: false,
          reason: reason(
            'offering-unavailable',
            `the offerings that could hold ${what} failed to launch or were interrupted recently and are avoided for now`,
          ),
        };
      return { ok: false, reason: reason('no-offering-fits', `no node group can launch a machine for ${what}`) };
    }
    const perGpu = (best.eff * 1000) / 1e6;
    const why = `the lowest expected cost per GPU used ($${perGpu.toFixed(3)}/GPU-h${best.factor > 1.0001 ? `, spot rework included ×${best.factor.toFixed(3)}` : ''}; ${Math.round(best.fill / 1000)} of its ${best.info.type.gpuCount} GPUs wanted by waiting work)`;
    return { ok: true, info: best.info, gs: best.gs, factor: best.factor, why };
  }

  private scaleUps(): void {
    for (const gs of this.groups.values()) {
      if (gs.added.length === 0) continue;
      const byOffering = new Map<string, number>();
      for (const n of gs.added) byOffering.set(n.offeringId, (byOffering.get(n.offeringId) ?? 0) + 1);
      const first = gs.added[0]!;
      const from = this.cancelled.get(gs.group.id) ?? gs.group.desiredCapacity;
      this.actions.push({
        kind: 'scale-up',
        groupId: gs.group.id,
        fromDesired: from,
        toDesired: from + gs.added.length,
        expected: [...byOffering.entries()].map(([offeringId, count]) => ({ offeringId, count })),
        reason: reason(
          'scale-up-for-pending',
          `${gs.added.length} more ${first.instanceType} (${first.capacityType}) for waiting jobs that fit nowhere else, the cheapest capacity for them`,
        ),
      });
    }
  }

  // ---- preemption -----------------------------------------------------------------------

  /**
   * A job that cannot run because its groups are at their maximum may displace strictly
   * lower-priority, interruptible, running work: on one node (or one zone for a gang), the
   * fewest victims, then the least work lost. Victims are checkpointed and requeued.
   */
  private preemptFor(e: Entry, why: Reason): void {
    if (why.code !== 'group-at-max' && why.code !== 'offering-unavailable') return;
    const priority = e.job.spec.priority;
    // Room only shrinks as this plan goes on: a class that found none at a priority finds none below it.
    if ((this.noPreemptRoom.get(e.cls) ?? -1) >= priority) return;
    type Choice = { node: NodeCapacity; victims: Job[]; lost: number; assignment: NodeAssignment };
    const choices: Choice[] = [];
    for (const poolId of this.ready.poolIds()) {
      if (!e.cls.eligible.has(poolId)) continue;
      for (const node of this.ready.pool(poolId)!.nodes()) {
        const holders = (this.holders.get(node.id) ?? []).filter((h) => !this.preempted.has(h.job.id));
        // Capacity already being freed (checkpointing jobs) counts first: no new victims needed for it.
        const leaving = holders.filter((h) => h.job.state === 'checkpointing');
        const candidates = holders
          .filter((h) => h.job.state === 'running' && h.job.spec.interruptible && h.job.spec.priority < priority && h.job.spec.nodes === 1)
          .map((h) => ({ h, lost: this.lostWorkSec(h.job) }))
          .sort((a, b) => a.lost - b.lost || (a.h.job.id < b.h.job.id ? -1 : 1));
        const chosen: typeof candidates = [];
        let fit = this.fitWithout(node, holders, [...leaving.map((h) => h.job.id)], e.cls.request);
        for (const c of candidates) {
          if (fit) break;
          chosen.push(c);
          fit = this.fitWithout(node, holders, [...leaving.map((h) => h.job.id), ...chosen.map((x) => x.h.job.id)], e.cls.request);
        }
        if (!fit) continue;
        choices.push({ node, victims: chosen.map((c) => c.h.job), lost: chosen.reduce((s, c) => s + c.lost, 0), assignment: fit });
      }
    }
    choices.sort((a, b) => a.victims.length - b.victims.length || a.lost - b.lost || (a.node.id < b.node.id ? -1 : 1));
    let picked: Choice[] = [];
    if (e.cls.nodes === 1) picked = choices.slice(0, 1);
    else {
      const byZone = new Map<string, Choice[]>();
      for (const c of choices) byZone.set(c.node.zone, [...(byZone.get(c.node.zone) ?? []), c]);
      let bestScore = Infinity;
      for (const zone of [...byZone.keys()].sort()) {
        const list = byZone.get(zone)!;
        if (list.length < e.cls.nodes) continue;
        const set = list.slice(0, e.cls.nodes);
        const score = set.reduce((s, c) => s + c.victims.length * 1e9 + c.lost, 0);
        if (score < bestScore) {
          bestScore = score;
          picked = set;
        }
      }
    }
    if (picked.length < e.cls.nodes || picked.length === 0) {
      this.noPreemptRoom.set(e.cls, Math.max(priority, this.noPreemptRoom.get(e.cls) ?? -1));
      return;
    }
    const victims = picked.flatMap((c) => c.victims);
    for (const v of victims) {
      this.preempt(
        v,
        reason(
          'preempt-for-priority',
          `checkpointed and requeued to make room for ${e.job.id} (priority ${priority} over ${v.spec.priority}); it resumes from its checkpoint`,
        ),
      );
    }
    // Reserve the room so no later job in this plan takes it.
    for (const c of picked) {
      commitFit(c.node, c.assignment);
      this.ready.update(c.node);
    }
    const last = this.waitingAt.get(e.job.id) ?? -1;
    const note =
      victims.length > 0
        ? `${victims.length} lower-priority job(s) are being checkpointed to make room for it`
        : 'room is being freed by jobs already checkpointing';
    const w = { jobId: e.job.id, reason: reason('waiting-for-capacity', `groups are at their maximum; ${note}`) };
    if (last >= 0) this.waiting[last] = w;
  }

  private fitWithout(
    node: NodeCapacity,
    holders: readonly { job: Job; assignment: NodeAssignment }[],
    without: readonly string[],
    request: GpuRequest,
  ): NodeAssignment | undefined {
    if (without.length === 0) return undefined;
    const type = this.s.instanceTypes.get(node.instanceType);
    if (!type) return undefined;
    const gpus = makeGpus(
      type,
      node.gpus.some((g) => g.mig !== undefined),
    );
    const clone: NodeCapacity = { ...node, gpus, freeWhole: countFreeWhole(gpus) };
    for (const h of holders) if (!without.includes(h.job.id)) commitFit(clone, h.assignment);
    return tryFit(clone, request);
  }

  /** Seconds of work a running job would lose if stopped now: since its newest checkpoint of this attempt (or its start). */
  private lostWorkSec(job: Job): number {
    const started = job.startedAtMs ?? job.placedAtMs ?? this.s.nowMs;
    const cp = job.checkpoint && job.checkpoint.attempt === job.attempt ? Math.max(job.checkpoint.completedAtMs, started) : started;
    return Math.max(0, (this.s.nowMs - cp) / 1000) + this.s.policy.restoreSec;
  }

  // ---- scale-in -------------------------------------------------------------------------

  private scaleIn(): void {
    const s = this.s;
    const cooldownMs = s.policy.idleCooldownSec * 1000;
    const removable = new Map<string, number>();
    for (const g of s.groups) removable.set(g.id, (this.cancelled.get(g.id) ?? g.desiredCapacity) - g.minSize);
    const records = new Map(s.nodes.map((n) => [n.instance.id, n]));
    const readyNodes = this.ready.allNodes();
    const idle = readyNodes
      .filter((n) => isEmpty(n))
      .map((n) => ({ node: n, since: records.get(n.id)?.record?.idleSinceMs }))
      .filter((c): c is { node: NodeCapacity; since: number } => c.since !== undefined && s.nowMs - c.since >= cooldownMs)
      .sort((a, b) => a.since - b.since || (a.node.id < b.node.id ? -1 : 1));
    const removed = new Set<string>();
    // Draining machines that have no work left go at once: they take no new work and may be taken anyway.
    const busy = new Set(s.activeJobs.flatMap((j) => j.placement?.nodes.map((a) => a.nodeId) ?? []));
    for (const f of [...s.nodes].sort((a, b) => (a.instance.id < b.instance.id ? -1 : 1))) {
      const d = f.record?.draining;
      if (!d || busy.has(f.instance.id) || !inService(f.instance.state)) continue;
      const left = removable.get(f.instance.groupId) ?? 0;
      if (left <= 0) continue;
      removable.set(f.instance.groupId, left - 1);
      removed.add(f.instance.id);
      this.actions.push({
        kind: 'scale-in',
        groupId: f.instance.groupId,
        instanceId: f.instance.id,
        reason: reason('scale-in-idle', `${f.instance.id} is draining (${d.reason}) and has no work left`),
      });
    }
    // Machines whose agent went silent (or never registered) and hold no work still cost money:
    // their work was requeued as lost, so they go (the group replaces them if capacity is needed).
    const registerLimitMs = Math.max(600_000, 3 * s.policy.expectedBootSec * 1000);
    for (const f of [...s.nodes].sort((a, b) => (a.instance.id < b.instance.id ? -1 : 1))) {
      if (f.instance.state !== 'running' || removed.has(f.instance.id) || busy.has(f.instance.id) || f.record?.draining) continue;
      const silentMs = f.record ? s.nowMs - f.record.lastHeartbeatAtMs : s.nowMs - f.instance.launchedAtMs;
      if (silentMs <= (f.record ? s.policy.heartbeatTimeoutSec * 1000 : registerLimitMs)) continue;
      const left = removable.get(f.instance.groupId) ?? 0;
      if (left <= 0) continue;
      removable.set(f.instance.groupId, left - 1);
      removed.add(f.instance.id);
      const why = f.record
        ? `its agent has sent no heartbeat for ${Math.round(silentMs / 1000)} s`
        : `its agent never registered in the ${Math.round(silentMs / 60_000)} min since it launched`;
      this.actions.push({
        kind: 'scale-in',
        groupId: f.instance.groupId,
        instanceId: f.instance.id,
        reason: reason('scale-in-unhealthy', `${f.instance.id}: ${why}; it holds no work and is let go`),
      });
    }
    for (const { node, since } of idle) {
      if (removed.has(node.id)) continue;
      const left = removable.get(node.groupId) ?? 0;
      if (left <= 0) continue;
      removable.set(node.groupId, left - 1);
      removed.add(node.id);
      this.actions.push({
        kind: 'scale-in',
        groupId: node.groupId,
        instanceId: node.id,
        reason: reason(
          'scale-in-idle',
          `${node.id} (${node.instanceType}, ${node.capacityType}) has been empty for ${Math.round((s.nowMs - since) / 60_000)} min, past the ${Math.round(s.policy.idleCooldownSec / 60)} min cool-down`,
        ),
      });
    }
    if (s.policy.consolidate) this.consolidate(readyNodes.filter((n) => !removed.has(n.id)));
    if (s.policy.moveToSpot && !this.scarce) this.moveToSpot();
    this.deadlineToOnDemand();
  }

  /** Work left of a running attempt: its expected total less its checkpoint and its time running since. */
  private workLeftSec(job: Job): number {
    const elapsedSec = Math.max(0, (this.s.nowMs - (job.startedAtMs ?? this.s.nowMs)) / 1000);
    return Math.max(0, remainingWorkSec(job, this.s.policy) - elapsedSec);
  }

  /**
   * A deadline job on on-demand may move to spot only if, after paying the move (a changeover),
   * the spot policy would still let it wait out a preemption: otherwise it stays where it is sure.
   */
  private deadlineAllowsSpotMove(job: Job): boolean {
    const s = this.s;
    const changeover = s.policy.expectedBootSec + s.policy.restoreSec;
    const choice = deadlineChoice(job, s.nowMs, s.policy, {
      mode: 'none',
      spotAvailable: false,
      workLeftSec: this.workLeftSec(job) + changeover,
    });
    return choice.mode === 'wait-for-spot' || choice.mode === 'spot-ok';
  }

  /**
   * Deadline work running on spot whose slack has run out: one more interruption would leave no
   * time to finish on on-demand. It is checkpointed and requeued now, while on-demand can still
   * make it (the spot policy then places it on on-demand). Work that cannot checkpoint would lose
   * everything by moving, so it stays.
   */
  private deadlineToOnDemand(): void {
    const s = this.s;
    const changeover = s.policy.expectedBootSec + s.policy.restoreSec;
    for (const node of this.ready.allNodes()) {
      if (node.capacityType !== 'spot') continue;
      for (const h of this.holders.get(node.id) ?? []) {
        const job = h.job;
        if (!job.spec.deadline || job.state !== 'running' || !job.spec.checkpoint || this.preempted.has(job.id)) continue;
        const workLeft = this.workLeftSec(job);
        const timeLeft = (Date.parse(job.spec.deadline) - s.nowMs) / 1000;
        // Moving is only worth it while on-demand can still finish: time for the work and one changeover.
        if (timeLeft < workLeft + changeover) continue;
        const choice = deadlineChoice(job, s.nowMs, s.policy, { mode: 'none', spotAvailable: false, workLeftSec: workLeft });
        if (choice.mode !== 'on-demand' || !choice.commit) continue;
        this.preempt(
          job,
          reason(
            'deadline-on-demand',
            `its slack on spot has run out (${Math.round((timeLeft - workLeft) / 60)} min for ${Math.round(workLeft / 60)} min of work before ${job.spec.deadline}): checkpointed and moved to on-demand while that can still make it`,
          ),
        );
      }
    }
  }

  /**
   * Moves long, checkpointable, interruptible work from on-demand machines to spot when a spot
   * pool that could hold it is available now and the expected saving over its remaining time
   * (on-demand price less spot price with rework) is more than twice the cost of the move: the
   * restart on a new machine and the idle tail of the machine it leaves. The job is checkpointed
   * and requeued with a preference for spot.
   */
  private moveToSpot(): void {
    const s = this.s;
    const restartSec = s.policy.expectedBootSec + s.policy.restoreSec;
    const settleMs = s.policy.idleCooldownSec * 1000;
    const candidates: { job: Job; node: NodeCapacity; saving: number; cost: number; target: OfferingInfo }[] = [];
    for (const node of this.ready.allNodes()) {
      if (node.capacityType !== 'on-demand') continue;
      for (const h of this.holders.get(node.id) ?? []) {
        const job = h.job;
        if (job.state !== 'running' || !job.spec.interruptible || !job.spec.checkpoint || job.spec.nodes > 1 || this.preempted.has(job.id))
          continue;
        if ((job.startedAtMs ?? s.nowMs) > s.nowMs - settleMs) continue;
        if (job.spec.deadline && !this.deadlineAllowsSpotMove(job)) continue;
        const team = this.budget(job.team);
        if (team.state === 'hold') continue;
        const cls = this.classOf(job, 'spot');
        let best: { info: OfferingInfo; perHour: number } | undefined;
        for (const [key, factor] of cls.eligible) {
          const info = this.offerings.get(key);
          if (!info || info.groups.every((g) => g.room < 1) || (s.unavailableUntilMs.get(info.offering.id) ?? 0) > s.nowMs) continue;
          const perHour = perMilli(info, factor) * unitOf(cls);
          if (!best || perHour < best.perHour) best = { info, perHour };
        }
        if (!best) continue;
        const odShare = this.shareOf(node, { job, team: job.team, cls: { milli: cls.milli, nodes: 1 } as JobClass });
        const elapsedSec = Math.max(0, (s.nowMs - (job.startedAtMs ?? s.nowMs)) / 1000);
        const remainingSec = Math.max(0, remainingWorkSec(job, s.policy) - elapsedSec);
        const saving = ((odShare - best.perHour) * remainingSec) / 3600;
        const cost = (best.perHour * restartSec + odShare * s.policy.idleCooldownSec + odShare * this.lostWorkSec(job)) / 3600;
        if (saving > 2 * cost) candidates.push({ job, node, saving, cost, target: best.info });
      }
    }
    candidates.sort((a, b) => b.saving - a.saving || (a.job.id < b.job.id ? -1 : 1));
    for (const c of candidates.slice(0, s.policy.moveToSpotPerPlan)) {
      this.preempt(
        c.job,
        reason(
          'rebalance-to-spot',
          `moved from on-demand ${c.node.id} to spot (${c.target.offering.instanceType}, ${c.target.offering.zone}): about $${(c.saving / 1e6).toFixed(2)} saved over its remaining run against $${(c.cost / 1e6).toFixed(2)} for the move; it resumes from its checkpoint`,
        ),
      );
    }
  }

  /**
   * Moves checkpointable work off one underused node when it all fits on other ready nodes and
   * the node's price over the work's remaining time beats the cost of restarting that work.
   * One node per plan, so the fleet never churns.
   */
  private consolidate(candidates: NodeCapacity[]): void {
    const s = this.s;
    const pendingWaiting = this.waiting.some((w) => w.reason.code === 'waiting-for-capacity' || w.reason.code === 'waiting-for-boot');
    if (pendingWaiting) return; // capacity is short: moving work would only add restarts
    const sorted = candidates
      .filter((n) => !isEmpty(n) && usedMilli(n) * 2 <= n.gpus.length * 1000)
      .sort((a, b) => b.priceMicroUsdPerHour - a.priceMicroUsdPerHour || usedMilli(a) - usedMilli(b) || (a.id < b.id ? -1 : 1));
    for (const node of sorted) {
      const holders = this.holders.get(node.id) ?? [];
      if (
        holders.some(
          (h) =>
            h.job.state !== 'running' ||
            !h.job.spec.interruptible ||
            !h.job.spec.checkpoint ||
            h.job.spec.nodes > 1 ||
            this.preempted.has(h.job.id),
        )
      )
        continue;
      if (holders.some((h) => (h.job.startedAtMs ?? s.nowMs) > s.nowMs - s.policy.idleCooldownSec * 1000)) continue; // let new work settle
      // Would each job fit elsewhere, on ready nodes other than this one?
      const others = this.ready.allNodes().filter((n) => n.id !== node.id && n.zone !== '' && !isEmpty(n));
      const trial = others.map((n) => ({ n, clone: cloneNode(n, s.instanceTypes.get(n.instanceType)) }));
      let allFit = true;
      for (const h of holders) {
        const target = trial.find(
          (t) =>
            t.clone &&
            h.job.spec.interruptible &&
            (t.n.capacityType === 'on-demand' || h.job.spec.interruptible) &&
            tryFit(t.clone, h.job.spec.gpu),
        );
        if (!target || !target.clone) {
          allFit = false;
          break;
        }
        commitFit(target.clone, tryFit(target.clone, h.job.spec.gpu)!);
      }
      if (!allFit) continue;
      const remainingSec = Math.min(
        ...holders.map((h) => remainingWorkSec(h.job, s.policy) - Math.max(0, (s.nowMs - (h.job.startedAtMs ?? s.nowMs)) / 1000)),
      );
      const savingMicroUsd = (node.priceMicroUsdPerHour * Math.max(0, remainingSec)) / 3600;
      const restartMicroUsd = holders.reduce(
        (sum, h) =>
          sum +
          ((this.lostWorkSec(h.job) + s.policy.restoreSec) *
            this.shareOf(node, { job: h.job, team: h.job.team, cls: { milli: milliGpusUsed(h.job.spec.gpu), nodes: 1 } as JobClass })) /
            3600,
        0,
      );
      if (savingMicroUsd <= restartMicroUsd) continue;
      for (const h of holders) {
        this.preempt(
          h.job,
          reason(
            'scale-in-consolidate',
            `moved off underused ${node.id} (${Math.round(usedMilli(node) / 10) / 100} of ${node.gpus.length} GPUs used): freeing it saves about $${(savingMicroUsd / 1e6).toFixed(2)} against $${(restartMicroUsd / 1e6).toFixed(2)} of restart cost; it resumes from its checkpoint on another node`,
          ),
        );
      }
      return;
    }
  }
}

/** Thousandths of GPUs still free on a node. */
function freeMilliOf(node: NodeCapacity): number {
  return node.gpus.length * 1000 - usedMilli(node);
}

function cloneNode(node: NodeCapacity, type: InstanceType | undefined): NodeCapacity | undefined {
  if (!type) return undefined;
  return {
    ...node,
    gpus: node.gpus.map((g) => ({ ...g, ...(g.mig ? { mig: { mask: g.mig.mask, counts: new Map(g.mig.counts) } } : {}) })),
  };
}

/** How much would be left free on the node after the assignment, in thousandths of GPUs (smaller is a better fit). */
function freeAfter(node: NodeCapacity, a: NodeAssignment): number {
  const total = node.gpus.length * 1000 - usedMilli(node);
  if (a.share) return total - a.share.milliGpu;
  if (a.mig) {
    const g = node.gpus[a.gpuIndices[0]!];
    const p = g ? migProfile(g.model, a.mig.profile) : undefined;
    return total - Math.round(((p?.memorySlices ?? 1) * 1000) / 8);
  }
  return total - a.gpuIndices.length * 1000;
}

function placementAllowed(limits: Job['spec']['placement'], o: Offering): boolean {
  if (!limits) return true;
  if (limits.clouds && !limits.clouds.includes(o.cloud as 'aws' | 'gcp')) return false;
  if (limits.regions && !limits.regions.includes(o.region)) return false;
  if (limits.zones && !limits.zones.includes(o.zone)) return false;
  return true;
}

/** Jobs that fill a machine the same way: one unit size and one set of pools they may use. */
interface FillGroup {
  readonly id: number;
  /** Thousandths of a GPU one job takes (a whole GPU request counts its GPUs). */
  readonly unit: number;
  readonly eligible: ReadonlyMap<string, number>;
  count: number;
  /** The lowest expected price per GPU-thousandth among its pools: it only helps fill pools that good. */
  bestPerMilli: number;
}

/**
 * The demand still waiting for new capacity, for judging offerings: an offering's efficiency is
 * its expected hourly cost divided by the GPU-thousandths that waiting jobs would fill on one
 * machine of it. Jobs are grouped by how they fill (unit size × allowed pools); each pool keeps
 * its groups sorted by size once. Results are cached per (group, pool) and recomputed only when
 * the demand has shrunk enough to change a fill (a quarter less, or the tail of the queue).
 */
class Demand {
  private readonly groups: FillGroup[] = [];
  private readonly groupOf = new Map<JobClass, FillGroup>();
  private readonly byPool = new Map<string, FillGroup[]>();
  private total = 0;
  private readonly cache = new Map<number, { totalAt: number; results: Map<string, { eff: number; fill: number }> }>();
  /** Changes whenever cached fills may have gone stale: a quarter of the demand is gone, or in the tail. */
  epoch = 0;
  private epochTotal = 0;

  constructor(
    entries: readonly Entry[],
    private readonly offerings: ReadonlyMap<string, OfferingInfo>,
  ) {
    const bySignature = new Map<string, FillGroup>();
    for (const e of entries) {
      this.total += e.cls.milli * e.cls.nodes;
      this.epochTotal = this.total;
      if (e.cls.nodes !== 1 || e.cls.eligible.size === 0) continue; // gangs take machines of their own
      let g = this.groupOf.get(e.cls);
      if (!g) {
        const unit = unitOf(e.cls);
        const signature = `${unit}|${[...e.cls.eligible.keys()].join(',')}`;
        g = bySignature.get(signature);
        if (!g) {
          g = { id: this.groups.length, unit, eligible: e.cls.eligible, count: 0, bestPerMilli: this.bestPerMilli(e.cls.eligible) };
          this.groups.push(g);
          bySignature.set(signature, g);
        }
        this.groupOf.set(e.cls, g);
      }
      g.count++;
    }
  }

  /** The kinds of work a machine of this pool, bought for `e`, is expected to be filled with. */
  private readonly fillerSets = new Map<string, Set<FillGroup | undefined>>();
  fillers(key: string, e: Entry): ReadonlySet<FillGroup | undefined> {
    const own = this.groupOf.get(e.cls);
    const k = `${key}|${own?.id ?? -1}`;
    let set = this.fillerSets.get(k);
    if (!set) {
      set = new Set<FillGroup | undefined>([...this.poolGroups(key), own]);
      this.fillerSets.set(k, set);
    }
    return set;
  }

  groupFor(e: Entry): FillGroup | undefined {
    return this.groupOf.get(e.cls);
  }

  take(e: Entry): void {
    this.total -= e.cls.milli * e.cls.nodes;
    const g = this.groupOf.get(e.cls);
    if (g) g.count--;
    if (this.total < 64_000 || this.total < this.epochTotal * 0.75) {
      this.epoch++;
      this.epochTotal = this.total;
    }
  }

  efficiency(info: OfferingInfo, e: Entry, factor: number): { eff: number; fill: number } {
    const own = this.groupOf.get(e.cls);
    const cacheKey = own?.id ?? -1;
    let cached = this.cache.get(cacheKey);
    // While plenty of demand waits, fills are full and choices do not change; recompute in the tail or after a large drop.
    if (!cached || cached.totalAt !== this.epoch) {
      cached = { totalAt: this.epoch, results: new Map() };
      this.cache.set(cacheKey, cached);
    }
    if (own) {
      const hit = cached.results.get(info.key);
      if (hit) return hit;
    }
    const result = this.compute(info, e, own, factor);
    if (own) cached.results.set(info.key, result);
    return result;
  }

  private bestPerMilli(eligible: ReadonlyMap<string, number>): number {
    let best = Infinity;
    for (const [key, factor] of eligible) {
      const info = this.offerings.get(key);
      if (info && info.groups.length > 0) best = Math.min(best, perMilli(info, factor));
    }
    return best;
  }

  /**
   * The waiting work that would help fill a machine of this pool: groups that may use it and
   * have nothing cheaper per GPU elsewhere (work with a cheaper home would go there instead).
   */
  private poolGroups(key: string): FillGroup[] {
    let list = this.byPool.get(key);
    if (!list) {
      const info = this.offerings.get(key);
      list = this.groups
        .filter((g) => g.eligible.has(key) && info !== undefined && perMilli(info, g.eligible.get(key)!) <= g.bestPerMilli * 1.0001)
        .sort((a, b) => b.unit - a.unit || a.id - b.id);
      this.byPool.set(key, list);
    }
    return list;
  }

  private compute(info: OfferingInfo, e: Entry, own: FillGroup | undefined, factor: number): { eff: number; fill: number } {
    const capacity = info.type.gpuCount * 1000;
    // The job itself (each gang member takes one node of its own), then waiting work, biggest first.
    const first = unitOf(e.cls);
    let room = capacity - first;
    let fill = first;
    let penalty = first * (factor - 1);
    const groups = this.poolGroups(info.key);
    // The job's own kind always counts, even where this pool is not its cheapest home.
    const withOwn = own && !groups.includes(own) ? [...groups, own].sort((a, b) => b.unit - a.unit || a.id - b.id) : groups;
    for (const g of withOwn) {
      if (room <= 0) break;
      const available = g === own ? g.count - 1 : g.count;
      if (available <= 0 || g.unit > room) continue;
      const take = Math.min(available, Math.floor(room / g.unit));
      room -= take * g.unit;
      fill += take * g.unit;
      penalty += take * g.unit * ((g.eligible.get(info.key) ?? 1) - 1);
    }
    const hourly = info.price * (1 + penalty / capacity);
    return { eff: hourly / fill, fill };
  }
}

/** Expected price per thousandth of a GPU per hour on a pool, rework included. */
function perMilli(info: OfferingInfo, factor: number): number {
  return (info.price * factor) / (info.type.gpuCount * 1000);
}

function unitOf(cls: JobClass): number {
  return cls.request.kind === 'whole' ? cls.request.count * 1000 : cls.milli;
}
