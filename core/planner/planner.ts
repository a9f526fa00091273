import { budgetStatus } from '../budget.ts';
import type { InstanceType, Offering } from '../catalog.ts';
import { jobSpotFactor, remainingWorkSec } from '../cost-model.ts';
import { deadlineChoice } from '../deadline.ts';
import type { NodeGroup } from '../fleet.ts';
import { milliGpusUsed, type GpuRequest } from '../gpu.ts';
import type { Job, NodeAssignment } from '../job.ts';
import { migProfile } from '../mig.ts';
import type { Plan, PlanAction, WaitingJob } from '../plan.ts';
import { reason, type Reason } from '../reason.ts';
import { priorRatePerHour } from '../risk.ts';
import type { Snapshot } from '../snapshot.ts';
import type { BudgetState, Team } from '../team.ts';
import { CapacityIndex, commitFit, countFreeWhole, isEmpty, makeGpus, tryFit, typeCanHold, usedMilli, type NodeCapacity } from './capacity.ts';
import { describeRequest, fairShareOrder } from './ordering.ts';

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

interface OfferingInfo {
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
  private readonly coming = new CapacityIndex();
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

  constructor(snapshot: Snapshot) {
    this.s = snapshot;
  }

  run(): Plan {
    this.indexOfferings();
    this.indexNodes();
    const entries = this.classify();
    const unplaced: Entry[] = [];
    for (const e of entries) if (!this.placeOnReady(e)) unplaced.push(e);
    const toBuy: Entry[] = [];
    for (const e of unplaced) if (!this.waitForComing(e)) toBuy.push(e);
    const stuck: { entry: Entry; why: Reason }[] = [];
    const demand = new Demand(toBuy);
    for (const e of toBuy) {
      const why = this.buy(e, demand);
      demand.take(e);
      if (why) stuck.push({ entry: e, why });
    }
    for (const { entry, why } of stuck) this.preemptFor(entry, why);
    this.scaleUps();
    this.scaleIn();
    return {
      actions: this.actions,
      waiting: this.waiting,
      addedCostMicroUsdPerHour: [...this.groups.values()].reduce((sum, g) => sum + g.added.reduce((a, n) => a + n.priceMicroUsdPerHour, 0), 0),
      addedExpectedCostMicroUsdPerHour: Math.round(this.addedExpected),
    };
  }

  // ---- set-up ---------------------------------------------------------------------------

  private indexOfferings(): void {
    const s = this.s;
    for (const group of [...s.groups].sort((a, b) => (a.id < b.id ? -1 : 1))) {
      const gs: GroupState = { group, room: Math.max(0, group.maxSize - group.desiredCapacity), added: [] };
      this.groups.set(group.id, gs);
      for (const o of group.offerings) {
        const existing = this.offerings.get(o.id);
        if (existing) {
          existing.groups.push(gs);
          continue;
        }
        const type = s.instanceTypes.get(o.instanceType);
        const quote = s.prices.get(o.id);
        if (!type || !quote) continue;
        this.offerings.set(o.id, {
          offering: o,
          type,
          price: quote.priceMicroUsdPerHour,
          onDemandPrice: quote.onDemandMicroUsdPerHour,
          riskPerHour: o.capacityType === 'spot' ? (s.poolRiskPerHour.get(o.id) ?? priorRatePerHour(undefined)) : 0,
          groups: [gs],
          migEnabled: group.migEnabled ?? false,
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
      if (inst.state === 'terminated' || inst.state === 'stopping') continue;
      liveByGroup.set(inst.groupId, (liveByGroup.get(inst.groupId) ?? 0) + 1);
      if (fleetNode.record?.draining) continue;
      const type = s.instanceTypes.get(inst.instanceType);
      if (!type) continue;
      const offeringId = `${inst.cloud}/${inst.zone}/${inst.instanceType}/${inst.capacityType}`;
      const reported = fleetNode.record?.gpus ?? [];
      const migMode = reported.length > 0 ? reported.some((g) => g.migEnabled) : (groupOf.get(inst.groupId)?.migEnabled ?? false);
      const gpus = makeGpus(type, migMode);
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
        offeringId,
        kind: kind ?? 'booting',
        priceMicroUsdPerHour: s.prices.get(offeringId)?.priceMicroUsdPerHour ?? 0,
        gpus,
        freeWhole: countFreeWhole(gpus),
      };
      this.nodeById.set(node.id, node);
      if (kind === 'ready') this.ready.add(node);
      else if (kind === 'booting') this.coming.add(node);
    }
    for (const job of s.activeJobs) {
      for (const a of job.placement?.nodes ?? []) {
        const node = this.nodeById.get(a.nodeId);
        if (!node) continue;
        commitFit(node, a);
        this.ready.update(node);
        this.coming.update(node);
        const list = this.holders.get(node.id) ?? [];
        list.push({ job, assignment: a });
        this.holders.set(node.id, list);
      }
      this.teamUsedMilli.set(job.team, (this.teamUsedMilli.get(job.team) ?? 0) + this.milliOf(job.spec.gpu) * job.spec.nodes);
    }
    // Launches in flight: the group wants more machines than it has reported so far.
    for (const gs of this.groups.values()) {
      const inFlight = gs.group.desiredCapacity - (liveByGroup.get(gs.group.id) ?? 0);
      const o = this.cheapestOfGroup(gs.group);
      if (!o || inFlight <= 0) continue;
      for (let i = 0; i < inFlight; i++) {
        const gpus = makeGpus(o.type, o.migEnabled);
        const node: NodeCapacity = { ...this.nodeShape(o, gs.group.id), id: `inflight:${gs.group.id}:${i}`, kind: 'booting', gpus, freeWhole: countFreeWhole(gpus) };
        this.coming.add(node);
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
      priceMicroUsdPerHour: o.price,
    };
  }

  private cheapestOfGroup(group: NodeGroup): OfferingInfo | undefined {
    let best: OfferingInfo | undefined;
    for (const o of group.offerings) {
      const info = this.offerings.get(o.id);
      if (info && (!best || info.price < best.price || (info.price === best.price && o.id < best.offering.id))) best = info;
    }
    return best;
  }

  private milliOf(request: GpuRequest): number {
    if (request.kind !== 'mig') return milliGpusUsed(request);
    const slices = Number(/^(\d)g/.exec(request.profile)?.[1] ?? 1);
    return milliGpusUsed(request, slices);
  }

  // ---- classification -------------------------------------------------------------------

  private budget(teamId: string) {
    let t = this.teamState.get(teamId);
    if (!t) {
      const team = this.s.teams.get(teamId);
      const spent = this.s.spendMicroUsd.get(teamId) ?? 0;
      const state = team ? budgetStatus(team, spent).state : 'hold';
      const leftMicroUsd = team?.budget && team.budget.action === 'hold' ? Math.max(0, team.budget.amountMicroUsd - spent) : undefined;
      t = { state, team, leftMicroUsd };
      this.teamState.set(teamId, t);
    }
    return t;
  }

  private classify(): Entry[] {
    const entries: Entry[] = [];
    for (const job of this.s.pendingJobs) {
      const b = this.budget(job.team);
      if (b.state === 'hold') {
        const status = b.team ? budgetStatus(b.team, this.s.spendMicroUsd.get(job.team) ?? 0) : undefined;
        this.wait(job, reason('budget-hold', status?.message ?? `team ${job.team} has no budget; new work is held`), true);
        continue;
      }
      if (b.state === 'spot-only' && !job.spec.interruptible) {
        this.wait(job, reason('budget-spot-only', `team ${job.team} spent its budget (action spot-only) and this job is not interruptible, so it cannot run on spot`), true);
        continue;
      }
      let capacity: 'any' | 'spot' | 'on-demand' = job.spec.interruptible ? 'any' : 'on-demand';
      if (b.state === 'spot-only') capacity = 'spot';
      const deadline = deadlineChoice(job, this.s.nowMs, this.s.policy);
      if (deadline.mode === 'on-demand' && capacity !== 'spot') capacity = 'on-demand';
      entries.push({ job, team: job.team, cls: this.classOf(job, capacity) });
    }
    return fairShareOrder(entries, this.teamUsedMilli, (team) => this.s.teams.get(team)?.weight ?? 1, (e) => e.cls.milli * e.cls.nodes);
  }

  /** Jobs that ask the same thing in the same way share one class and one eligibility computation. */
  private classOf(job: Job, capacity: 'any' | 'spot' | 'on-demand'): JobClass {
    const spec = job.spec;
    const work = remainingWorkSec(job, this.s.policy);
    // Spot factors depend on remaining work and checkpointing; bucket the work (×2 steps) so classes stay few.
    const workBucket = Math.ceil(Math.log2(Math.max(60, work)));
    const key = JSON.stringify([spec.gpu, spec.nodes, capacity, spec.placement ?? null, spec.checkpoint?.intervalSec ?? 0, workBucket]);
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
        if (!Number.isFinite(factor) || (capacity !== 'spot' && info.onDemandPrice > 0 && info.price * factor > info.onDemandPrice)) continue;
      }
      eligible.set(o.id, factor);
    }
    const cls: JobClass = {
      key,
      request: spec.gpu,
      nodes: spec.nodes,
      milli: this.milliOf(spec.gpu),
      eligible,
      ...(eligible.size === 0
        ? {
            noFit: sawType
              ? reason('no-offering-fits', `no offering allowed for it (${capacity === 'any' ? 'spot or on-demand' : capacity}${spec.placement ? ', placement limits' : ''}) can hold ${describeRequest(job)}`)
              : reason('no-offering-fits', `no node group offers a machine that can hold ${describeRequest(job)}`),
          }
        : {}),
    };
    this.classes.set(key, cls);
    return cls;
  }

  private offeringInfoCache: OfferingInfo[] | undefined;
  /** Offerings of groups and of live nodes (a node's offering may have left every group's list). */
  private allOfferingInfos(): OfferingInfo[] {
    if (this.offeringInfoCache) return this.offeringInfoCache;
    const list = [...this.offerings.values()];
    for (const node of this.nodeById.values()) {
      if (this.offerings.has(node.offeringId)) continue;
      const type = this.s.instanceTypes.get(node.instanceType);
      if (!type) continue;
      const offering: Offering = { id: node.offeringId, cloud: node.cloud, region: node.region, zone: node.zone, instanceType: node.instanceType, capacityType: node.capacityType };
      const quote = this.s.prices.get(node.offeringId);
      const info: OfferingInfo = {
        offering,
        type,
        price: quote?.priceMicroUsdPerHour ?? node.priceMicroUsdPerHour,
        onDemandPrice: quote?.onDemandMicroUsdPerHour ?? 0,
        riskPerHour: node.capacityType === 'spot' ? (this.s.poolRiskPerHour.get(node.offeringId) ?? priorRatePerHour(undefined)) : 0,
        groups: [],
        migEnabled: node.gpus.some((g) => g.mig !== undefined),
      };
      this.offerings.set(node.offeringId, info);
      list.push(info);
    }
    list.sort((a, b) => (a.offering.id < b.offering.id ? -1 : 1));
    this.offeringInfoCache = list;
    return list;
  }

  // ---- placement ------------------------------------------------------------------------

  private wait(job: Job, why: Reason, isHold = false): void {
    this.waiting.push({ jobId: job.id, reason: why });
    if (isHold) {
      if (job.hold?.code !== why.code || job.hold.message !== why.message) this.actions.push({ kind: 'hold', jobId: job.id, reason: why });
    } else if (job.hold) {
      this.actions.push({ kind: 'hold', jobId: job.id, reason: undefined });
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
        return reason('budget-hold', `its expected cost ($${(expected / 1e6).toFixed(2)}) is more than what is left of team ${e.team}'s budget ($${(b.leftMicroUsd / 1e6).toFixed(2)}; action hold)`);
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

  private placeOnReady(e: Entry): boolean {
    if (e.cls.eligible.size === 0) return false;
    const fits = this.findFits(this.ready, e);
    if (!fits) return false;
    const factor = e.cls.eligible.get(fits[0]!.node.offeringId) ?? 1;
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
    if (e.job.hold) this.actions.push({ kind: 'hold', jobId: e.job.id, reason: undefined });
    const where = fits.map((f) => `${f.node.id} (${f.node.instanceType}, ${f.node.capacityType}, ${f.node.zone})`).join(', ');
    this.actions.push({
      kind: 'place',
      jobId: e.job.id,
      attempt: e.job.attempt,
      placement: { nodes: fits.map((f) => f.assignment), capacityType: fits[0]!.node.capacityType },
      reason: reason('placed-on-free-capacity', `fits on free GPUs of ${where}; the fullest node that fits, keeping bigger holes for bigger jobs`),
    });
    return true;
  }

  private waitForComing(e: Entry): boolean {
    if (e.cls.eligible.size === 0) return false;
    const fits = this.findFits(this.coming, e);
    if (!fits) return false;
    const factor = e.cls.eligible.get(fits[0]!.node.offeringId) ?? 1;
    const held = this.limits(e, this.shareOf(fits[0]!.node, e), factor);
    if (held) {
      this.wait(e.job, held, true);
      return true;
    }
    for (const f of fits) {
      commitFit(f.node, f.assignment);
      this.coming.update(f.node);
    }
    this.commitLimits(e, this.shareOf(fits[0]!.node, e), factor);
    const planned = fits[0]!.node.kind === 'planned';
    if (planned) this.addExpected(fits[0]!.node, e, factor);
    this.wait(
      e.job,
      planned
        ? reason('waiting-for-capacity', `shares a new ${fits[0]!.node.instanceType} (${fits[0]!.node.capacityType}, ${fits[0]!.node.zone}) ordered in this plan`)
        : reason('waiting-for-boot', `capacity for it is starting: ${[...new Set(fits.map((f) => `${f.node.instanceType} (${f.node.capacityType}, ${f.node.zone})`))].join(', ')}`),
    );
    return true;
  }

  /**
   * Best fit among the index's nodes that the job's class may use: for one node, the fullest
   * that fits (ties: cheapest, then by id); for a gang, that many distinct nodes in one zone.
   */
  private findFits(index: CapacityIndex, e: Entry): Fit[] | undefined {
    const { request } = e.cls;
    const need = e.cls.nodes;
    if (need === 1) {
      let best: { fit: Fit; free: number; price: number } | undefined;
      for (const poolId of index.poolIds()) {
        if (!e.cls.eligible.has(poolId)) continue;
        const pool = index.pool(poolId)!;
        const candidate = this.bestInPool(pool, request);
        if (!candidate) continue;
        const free = freeAfter(candidate.node, candidate.assignment);
        const price = candidate.node.priceMicroUsdPerHour * (e.cls.eligible.get(poolId) ?? 1);
        if (!best || free < best.free || (free === best.free && (price < best.price || (price === best.price && candidate.node.id < best.fit.node.id)))) {
          best = { fit: candidate, free, price };
        }
      }
      return best ? [best.fit] : undefined;
    }
    // Gangs: per zone, collect nodes that each hold one member; take the fullest ones.
    const byZone = new Map<string, Fit[]>();
    for (const poolId of index.poolIds()) {
      if (!e.cls.eligible.has(poolId)) continue;
      const pool = index.pool(poolId)!;
      const list = byZone.get(pool.zone) ?? [];
      for (const node of pool.withFree(request.kind === 'whole' ? request.count : 1)) {
        const assignment = tryFit(node, request);
        if (assignment) list.push({ node, assignment });
      }
      byZone.set(pool.zone, list);
    }
    let best: { fits: Fit[]; score: number } | undefined;
    for (const zone of [...byZone.keys()].sort()) {
      const list = byZone.get(zone)!;
      if (list.length < need) continue;
      list.sort((a, b) => freeAfter(a.node, a.assignment) - freeAfter(b.node, b.assignment) || a.node.priceMicroUsdPerHour - b.node.priceMicroUsdPerHour || (a.node.id < b.node.id ? -1 : 1));
      const fits = list.slice(0, need);
      const score = fits.reduce((s, f) => s + freeAfter(f.node, f.assignment), 0);
      if (!best || score < best.score) best = { fits, score };
    }
    return best?.fits;
  }

  private bestInPool(pool: NonNullable<ReturnType<CapacityIndex['pool']>>, request: GpuRequest): Fit | undefined {
    if (request.kind === 'whole') {
      for (const node of pool.withFree(request.count)) {
        const assignment = tryFit(node, request);
        if (assignment) return { node, assignment };
      }
      return undefined;
    }
    // Shares and MIG slices: partly used GPUs first (best fit), then a node with a free GPU.
    let best: { fit: Fit; score: number } | undefined;
    for (const node of pool.partialNodes()) {
      const assignment = tryFit(node, request);
      if (!assignment) continue;
      const score = freeAfter(node, assignment);
      if (!best || score < best.score || (score === best.score && node.id < best.fit.node.id)) best = { fit: { node, assignment }, score };
    }
    if (best) return best.fit;
    for (const node of pool.withFree(1)) {
      const assignment = tryFit(node, request);
      if (assignment) return { node, assignment };
    }
    // MIG GPUs that are empty have no free whole GPU (they are in MIG mode); try every node.
    if (request.kind === 'mig') {
      for (const node of pool.nodes()) {
        const assignment = tryFit(node, request);
        if (assignment) return { node, assignment };
      }
    }
    return undefined;
  }

  // ---- buying ---------------------------------------------------------------------------

  private buy(e: Entry, demand: Demand): Reason | undefined {
    if (e.cls.noFit) {
      this.wait(e.job, e.cls.noFit);
      return undefined;
    }
    // Machines already bought in this plan first.
    if (this.waitForComing(e)) return undefined;
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
      const node: NodeCapacity = { ...this.nodeShape(info, gs.group.id), id: `planned:${gs.group.id}:${this.plannedCount++}`, kind: 'planned', gpus, freeWhole: countFreeWhole(gpus) };
      const assignment = tryFit(node, e.cls.request);
      if (!assignment) break;
      commitFit(node, assignment);
      gs.added.push(node);
      gs.room--;
      this.coming.add(node);
      this.addedExpected += node.priceMicroUsdPerHour;
      opened.push({ node, assignment });
    }
    this.commitLimits(e, (info.price * e.cls.milli * e.cls.nodes) / (info.type.gpuCount * 1000), factor);
    for (const f of opened) this.addExpected(f.node, e, factor, 1 / e.cls.nodes);
    this.wait(e.job, reason('waiting-for-capacity', `new ${info.offering.instanceType} (${info.offering.capacityType}, ${info.offering.zone}) ordered for it: ${choice.why}`));
    return undefined;
  }

  /** Adds a job's expected rework on spot to the plan's expected cost. */
  private addExpected(node: NodeCapacity, e: Entry, factor: number, perNode = 1): void {
    if (factor <= 1) return;
    this.addedExpected += (node.priceMicroUsdPerHour * e.cls.milli * e.cls.nodes * perNode * (factor - 1)) / (node.gpus.length * 1000);
  }

  private chooseOffering(e: Entry, demand: Demand): { ok: true; info: OfferingInfo; gs: GroupState; factor: number; why: string } | { ok: false; reason: Reason } {
    let best: { info: OfferingInfo; gs: GroupState; factor: number; eff: number; fill: number } | undefined;
    let sawAtMax = false;
    let sawUnavailable = false;
    for (const [offeringId, factor] of e.cls.eligible) {
      const info = this.offerings.get(offeringId);
      if (!info || info.groups.length === 0) continue;
      if ((this.s.unavailableUntilMs.get(offeringId) ?? 0) > this.s.nowMs) {
        sawUnavailable = true;
        continue;
      }
      const gs = info.groups.find((g) => g.room >= e.cls.nodes);
      if (!gs) {
        sawAtMax = true;
        continue;
      }
      const { eff, fill } = demand.efficiency(info, e, factor, this.classes);
      if (
        !best ||
        eff < best.eff - 1e-9 ||
        (Math.abs(eff - best.eff) <= 1e-9 && (info.price < best.info.price || (info.price === best.info.price && offeringId < best.info.offering.id)))
      ) {
        best = { info, gs, factor, eff, fill };
      }
    }
    if (!best) {
      const what = describeRequest(e.job);
      if (sawAtMax) return { ok: false, reason: reason('group-at-max', `every node group that could hold ${what} is at its maximum size`) };
      if (sawUnavailable) return { ok: false, reason: reason('offering-unavailable', `the offerings that could hold ${what} failed to launch or were interrupted recently and are avoided for now`) };
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
      this.actions.push({
        kind: 'scale-up',
        groupId: gs.group.id,
        fromDesired: gs.group.desiredCapacity,
        toDesired: gs.group.desiredCapacity + gs.added.length,
        expected: [...byOffering.entries()].map(([offeringId, count]) => ({ offeringId, count })),
        reason: reason('scale-up-for-pending', `${gs.added.length} more ${first.instanceType} (${first.capacityType}) for waiting jobs that fit nowhere else, the cheapest capacity for them`),
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
    if (picked.length < e.cls.nodes || picked.length === 0) return;
    const victims = picked.flatMap((c) => c.victims);
    for (const v of victims) {
      this.preempted.add(v.id);
      this.actions.push({
        kind: 'preempt',
        jobId: v.id,
        attempt: v.attempt,
        reason: reason('preempt-for-priority', `checkpointed and requeued to make room for ${e.job.id} (priority ${priority} over ${v.spec.priority}); it resumes from its checkpoint`),
      });
    }
    // Reserve the room so no later job in this plan takes it.
    for (const c of picked) {
      commitFit(c.node, c.assignment);
      this.ready.update(c.node);
    }
    const last = this.waiting.findIndex((w) => w.jobId === e.job.id);
    const note = victims.length > 0 ? `${victims.length} lower-priority job(s) are being checkpointed to make room for it` : 'room is being freed by jobs already checkpointing';
    const w = { jobId: e.job.id, reason: reason('waiting-for-capacity', `groups are at their maximum; ${note}`) };
    if (last >= 0) this.waiting[last] = w;
  }

  private fitWithout(node: NodeCapacity, holders: readonly { job: Job; assignment: NodeAssignment }[], without: readonly string[], request: GpuRequest): NodeAssignment | undefined {
    if (without.length === 0) return undefined;
    const type = this.s.instanceTypes.get(node.instanceType);
    if (!type) return undefined;
    const gpus = makeGpus(type, node.gpus.some((g) => g.mig !== undefined));
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
    for (const g of s.groups) removable.set(g.id, g.desiredCapacity - g.minSize);
    const records = new Map(s.nodes.map((n) => [n.instance.id, n]));
    const readyNodes = this.ready.allNodes();
    const idle = readyNodes
      .filter((n) => isEmpty(n))
      .map((n) => ({ node: n, since: records.get(n.id)?.record?.idleSinceMs }))
      .filter((c): c is { node: NodeCapacity; since: number } => c.since !== undefined && s.nowMs - c.since >= cooldownMs)
      .sort((a, b) => a.since - b.since || (a.node.id < b.node.id ? -1 : 1));
    const removed = new Set<string>();
    for (const { node, since } of idle) {
      const left = removable.get(node.groupId) ?? 0;
      if (left <= 0) continue;
      removable.set(node.groupId, left - 1);
      removed.add(node.id);
      this.actions.push({
        kind: 'scale-in',
        groupId: node.groupId,
        instanceId: node.id,
        reason: reason('scale-in-idle', `${node.id} (${node.instanceType}, ${node.capacityType}) has been empty for ${Math.round((s.nowMs - since) / 60_000)} min, past the ${Math.round(s.policy.idleCooldownSec / 60)} min cool-down`),
      });
    }
    if (s.policy.consolidate) this.consolidate(readyNodes.filter((n) => !removed.has(n.id)));
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
      if (holders.some((h) => h.job.state !== 'running' || !h.job.spec.interruptible || !h.job.spec.checkpoint || h.job.spec.nodes > 1 || this.preempted.has(h.job.id))) continue;
      if (holders.some((h) => (h.job.startedAtMs ?? s.nowMs) > s.nowMs - s.policy.idleCooldownSec * 1000)) continue; // let new work settle
      // Would each job fit elsewhere, on ready nodes other than this one?
      const others = this.ready.allNodes().filter((n) => n.id !== node.id && n.zone !== '' && !isEmpty(n));
      const trial = others.map((n) => ({ n, clone: cloneNode(n, s.instanceTypes.get(n.instanceType)) }));
      let allFit = true;
      for (const h of holders) {
        const target = trial.find((t) => t.clone && h.job.spec.interruptible && (t.n.capacityType === 'on-demand' || h.job.spec.interruptible) && tryFit(t.clone, h.job.spec.gpu));
        if (!target || !target.clone) {
          allFit = false;
          break;
        }
        commitFit(target.clone, tryFit(target.clone, h.job.spec.gpu)!);
      }
      if (!allFit) continue;
      const remainingSec = Math.min(...holders.map((h) => remainingWorkSec(h.job, s.policy) - Math.max(0, (s.nowMs - (h.job.startedAtMs ?? s.nowMs)) / 1000)));
      const savingMicroUsd = (node.priceMicroUsdPerHour * Math.max(0, remainingSec)) / 3600;
      const restartMicroUsd = holders.reduce((sum, h) => sum + ((this.lostWorkSec(h.job) + s.policy.restoreSec) * this.shareOf(node, { job: h.job, team: h.job.team, cls: { milli: this.milliOf(h.job.spec.gpu), nodes: 1 } as JobClass })) / 3600, 0);
      if (savingMicroUsd <= restartMicroUsd) continue;
      for (const h of holders) {
        this.preempted.add(h.job.id);
        this.actions.push({
          kind: 'preempt',
          jobId: h.job.id,
          attempt: h.job.attempt,
          reason: reason(
            'scale-in-consolidate',
            `moved off underused ${node.id} (${Math.round(usedMilli(node) / 10) / 100} of ${node.gpus.length} GPUs used): freeing it saves about $${(savingMicroUsd / 1e6).toFixed(2)} against $${(restartMicroUsd / 1e6).toFixed(2)} of restart cost; it resumes from its checkpoint on another node`,
          ),
        });
      }
      return;
    }
  }
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

/**
 * The demand still waiting for new capacity, by class, for judging offerings: an offering's
 * efficiency is its expected cost divided by the GPU-thousandths that waiting jobs would fill
 * on one machine of it. Choices are cached per class and recomputed only when the demand has
 * shrunk enough to change the fill (in the tail of the queue).
 */
class Demand {
  private readonly counts = new Map<JobClass, number>();
  private total = 0;
  private readonly cache = new Map<string, { totalAt: number; results: Map<string, { eff: number; fill: number }> }>();

  constructor(entries: readonly Entry[]) {
    for (const e of entries) {
      this.counts.set(e.cls, (this.counts.get(e.cls) ?? 0) + 1);
      this.total += e.cls.milli * e.cls.nodes;
    }
  }

  take(e: Entry): void {
    const n = this.counts.get(e.cls) ?? 0;
    if (n <= 1) this.counts.delete(e.cls);
    else this.counts.set(e.cls, n - 1);
    this.total -= e.cls.milli * e.cls.nodes;
  }

  efficiency(info: OfferingInfo, e: Entry, factor: number, _classes: Map<string, JobClass>): { eff: number; fill: number } {
    const capacity = info.type.gpuCount * 1000;
    const key = e.cls.key;
    let cached = this.cache.get(key);
    // While plenty of demand waits, fills are full and choices do not change; recompute in the tail or after a large drop.
    if (!cached || (this.total < 4 * 16_000 && cached.totalAt !== this.total) || this.total < cached.totalAt * 0.75) {
      cached = { totalAt: this.total, results: new Map() };
      this.cache.set(key, cached);
    }
    const hit = cached.results.get(info.offering.id);
    if (hit) return hit;
    const result = this.compute(info, e, factor, capacity);
    cached.results.set(info.offering.id, result);
    return result;
  }

  private compute(info: OfferingInfo, e: Entry, factor: number, capacity: number): { eff: number; fill: number } {
    // The job itself (each gang member takes one node of its own).
    const own = e.cls.request.kind === 'whole' ? e.cls.request.count * 1000 : e.cls.milli;
    let room = capacity - own;
    let fill = own;
    let penalty = own * (factor - 1);
    // Then waiting single-node work that may use this offering, biggest first.
    const others = [...this.counts.entries()]
      .filter(([c]) => c.nodes === 1 && c.eligible.has(info.offering.id))
      .sort(([a], [b]) => b.milli - a.milli || (a.key < b.key ? -1 : 1));
    let ownLeft = (this.counts.get(e.cls) ?? 1) - 1; // the job itself is already counted
    for (const [c, n] of others) {
      if (room <= 0) break;
      const available = c === e.cls ? ownLeft : n;
      if (available <= 0) continue;
      const unit = c.request.kind === 'whole' ? c.request.count * 1000 : c.milli;
      if (unit > room) continue;
      const take = Math.min(available, Math.floor(room / unit));
      room -= take * unit;
      fill += take * unit;
      penalty += take * unit * ((c.eligible.get(info.offering.id) ?? 1) - 1);
      if (c === e.cls) ownLeft -= take;
    }
    const hourly = info.price * (1 + penalty / capacity);
    return { eff: hourly / fill, fill };
  }
}
