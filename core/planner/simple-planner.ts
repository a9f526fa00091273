import { budgetStatus } from '../budget.ts';
import type { Offering } from '../catalog.ts';
import type { Job, NodeAssignment } from '../job.ts';
import type { Plan, PlanAction, WaitingJob } from '../plan.ts';
import { reason, type Reason } from '../reason.ts';
import type { Snapshot } from '../snapshot.ts';
import type { BudgetState } from '../team.ts';
import { commitFit, emptyGpus, isEmpty, tryFit, typeCanHold, type NodeCapacity } from './capacity.ts';

/**
 * The first planner: whole and fractional GPUs, gangs in one zone, best fit on free capacity,
 * otherwise the cheapest offering that fits; idle nodes removed after the cool-down; budgets
 * respected. Pure and deterministic: the same snapshot gives the same plan.
 */
export function planSimple(snapshot: Snapshot): Plan {
  const state = buildCapacity(snapshot);
  const actions: PlanAction[] = [];
  const waiting: WaitingJob[] = [];
  const addedByGroup = new Map<string, NodeCapacity[]>();
  const budgetStates = new Map<string, BudgetState>();
  const stateOf = (team: string): BudgetState => {
    let s = budgetStates.get(team);
    if (s === undefined) {
      const t = snapshot.teams.get(team);
      s = t ? budgetStatus(t, snapshot.spendMicroUsd.get(team) ?? 0).state : 'hold';
      budgetStates.set(team, s);
    }
    return s;
  };

  const pending = [...snapshot.pendingJobs].sort(jobOrder);
  for (const job of pending) {
    const budget = stateOf(job.team);
    const hold = holdReason(job, budget, snapshot);
    if (hold) {
      if (job.hold?.code !== hold.code || job.hold.message !== hold.message) actions.push({ kind: 'hold', jobId: job.id, reason: hold });
      waiting.push({ jobId: job.id, reason: hold });
      continue;
    }
    if (job.hold) actions.push({ kind: 'hold', jobId: job.id, reason: undefined });
    const spotOnly = budget === 'spot-only';
    const allowed = (n: NodeCapacity) => capacityAllowed(job, n.capacityType, spotOnly) && zoneAllowed(job, n);

    const onReady = fitGang(job, state.nodes.filter((n) => n.kind === 'ready' && allowed(n)));
    if (onReady) {
      onReady.forEach(({ node, assignment }) => commitFit(node, assignment));
      actions.push({
        kind: 'place',
        jobId: job.id,
        attempt: job.attempt,
        placement: { nodes: onReady.map((f) => f.assignment), capacityType: onReady[0]!.node.capacityType },
        reason: reason('placed-on-free-capacity', `fits on free GPUs of ${onReady.map((f) => `${f.node.id} (${f.node.instanceType}, ${f.node.capacityType})`).join(', ')}`),
      });
      continue;
    }
    const onBooting = fitGang(job, state.nodes.filter((n) => n.kind !== 'ready' && allowed(n)));
    if (onBooting) {
      onBooting.forEach(({ node, assignment }) => commitFit(node, assignment));
      waiting.push({ jobId: job.id, reason: reason('waiting-for-boot', `capacity for it is starting: ${onBooting.map((f) => f.node.instanceType).join(', ')}`) });
      continue;
    }
    const bought = buyFor(job, snapshot, state, addedByGroup, spotOnly);
    if (bought.ok) {
      waiting.push({ jobId: job.id, reason: bought.reason });
    } else {
      waiting.push({ jobId: job.id, reason: bought.reason });
    }
  }

  let addedCost = 0;
  for (const [groupId, added] of [...addedByGroup.entries()].sort(([a], [b]) => a.localeCompare(b))) {
    const group = snapshot.groups.find((g) => g.id === groupId)!;
    const byOffering = new Map<string, number>();
    for (const n of added) {
      byOffering.set(n.offeringId, (byOffering.get(n.offeringId) ?? 0) + 1);
      addedCost += n.priceMicroUsdPerHour;
    }
    actions.push({
      kind: 'scale-up',
      groupId,
      fromDesired: group.desiredCapacity,
      toDesired: group.desiredCapacity + added.length,
      expected: [...byOffering.entries()].map(([offeringId, count]) => ({ offeringId, count })),
      reason: reason('scale-up-for-pending', `${added.length} more ${added[0]!.instanceType} (${added[0]!.capacityType}) for pending jobs that fit nowhere else; the cheapest offering that fits`),
    });
  }

  actions.push(...scaleIn(snapshot, state.nodes));
  return { actions, waiting, addedCostMicroUsdPerHour: addedCost };
}

/** Higher priority first, then the longest waiting, then by id for determinism. */
export function jobOrder(a: Job, b: Job): number {
  return b.spec.priority - a.spec.priority || a.queuedAtMs - b.queuedAtMs || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0);
}

function holdReason(job: Job, budget: BudgetState, snapshot: Snapshot): Reason | undefined {
  const team = snapshot.teams.get(job.team);
  if (budget === 'hold') {
    const status = team ? budgetStatus(team, snapshot.spendMicroUsd.get(job.team) ?? 0) : undefined;
    return reason('budget-hold', status?.message ?? `team ${job.team} has no budget; new work is held`);
  }
  if (budget === 'spot-only' && !job.spec.interruptible) {
    return reason('budget-spot-only', `team ${job.team} spent its budget (action spot-only) and this job is not interruptible, so it cannot run on spot`);
  }
  return undefined;
}

function capacityAllowed(job: Job, capacityType: 'spot' | 'on-demand', spotOnly: boolean): boolean {
  if (!job.spec.interruptible && capacityType === 'spot') return false;
  if (spotOnly && capacityType !== 'spot') return false;
  return true;
}

function zoneAllowed(job: Job, where: { cloud: string; region: string; zone: string }): boolean {
  const p = job.spec.placement;
  if (!p) return true;
  if (p.clouds && !p.clouds.includes(where.cloud as 'aws' | 'gcp')) return false;
  if (p.regions && !p.regions.includes(where.region)) return false;
  if (p.zones && !p.zones.includes(where.zone)) return false;
  return true;
}

interface Fit {
  node: NodeCapacity;
  assignment: NodeAssignment;
}

/**
 * Places every member of the job's gang on a distinct node, all in one zone, choosing for each
 * the node left fullest (best fit, to keep big holes for big jobs). All or nothing.
 */
function fitGang(job: Job, nodes: readonly NodeCapacity[]): Fit[] | undefined {
  const byZone = new Map<string, NodeCapacity[]>();
  for (const n of nodes) {
    const list = byZone.get(n.zone) ?? [];
    list.push(n);
    byZone.set(n.zone, list);
  }
  for (const zone of [...byZone.keys()].sort()) {
    const candidates: Fit[] = [];
    for (const node of byZone.get(zone)!) {
      const assignment = tryFit(node, job.spec.gpu);
      if (assignment) candidates.push({ node, assignment });
    }
    if (candidates.length < job.spec.nodes) continue;
    candidates.sort((a, b) => freeAfter(a) - freeAfter(b) || a.node.priceMicroUsdPerHour - b.node.priceMicroUsdPerHour || (a.node.id < b.node.id ? -1 : 1));
    return candidates.slice(0, job.spec.nodes);
  }
  return undefined;
}

function freeAfter(fit: Fit): number {
  const free = fit.node.gpus.reduce((sum, g) => sum + (g.whole ? 0 : g.freeMilli), 0);
  const used = fit.assignment.share ? fit.assignment.share.milliGpu : fit.assignment.gpuIndices.length * 1000;
  return free - used;
}

type BuyResult = { ok: true; reason: Reason } | { ok: false; reason: Reason };

function buyFor(job: Job, snapshot: Snapshot, state: CapacityState, addedByGroup: Map<string, NodeCapacity[]>, spotOnly: boolean): BuyResult {
  let best: { offering: Offering; groupId: string; price: number } | undefined;
  let sawFit = false;
  let sawAtMax = false;
  let sawUnavailable = false;
  for (const group of snapshot.groups) {
    const room = group.maxSize - group.desiredCapacity - (addedByGroup.get(group.id)?.length ?? 0);
    for (const offering of group.offerings) {
      const type = snapshot.instanceTypes.get(offering.instanceType);
      if (!type || !typeCanHold(type, job.spec.gpu)) continue;
      if (!capacityAllowed(job, offering.capacityType, spotOnly) || !zoneAllowed(job, offering)) continue;
      const quote = snapshot.prices.get(offering.id);
      if (!quote) continue;
      sawFit = true;
      if ((snapshot.unavailableUntilMs.get(offering.id) ?? 0) > snapshot.nowMs) {
        sawUnavailable = true;
        continue;
      }
      if (room < job.spec.nodes) {
        sawAtMax = true;
        continue;
      }
      const price = quote.priceMicroUsdPerHour * job.spec.nodes;
      if (!best || price < best.price || (price === best.price && offering.id < best.offering.id)) best = { offering, groupId: group.id, price };
    }
  }
  if (!best) {
    if (!sawFit) return { ok: false, reason: reason('no-offering-fits', `no node group offers a machine that can hold ${describeRequest(job)}`) };
    if (sawAtMax) return { ok: false, reason: reason('group-at-max', `every node group that could hold ${describeRequest(job)} is at its maximum size`) };
    if (sawUnavailable) return { ok: false, reason: reason('offering-unavailable', `the offerings that could hold ${describeRequest(job)} failed to launch recently and are avoided for now`) };
    return { ok: false, reason: reason('no-offering-fits', `no priced offering can hold ${describeRequest(job)}`) };
  }
  const type = snapshot.instanceTypes.get(best.offering.instanceType)!;
  const added = addedByGroup.get(best.groupId) ?? [];
  for (let i = 0; i < job.spec.nodes; i++) {
    const node: NodeCapacity = {
      id: `planned:${best.groupId}:${added.length}`,
      groupId: best.groupId,
      cloud: best.offering.cloud,
      region: best.offering.region,
      zone: best.offering.zone,
      instanceType: best.offering.instanceType,
      capacityType: best.offering.capacityType,
      offeringId: best.offering.id,
      kind: 'planned',
      priceMicroUsdPerHour: best.price / job.spec.nodes,
      gpus: emptyGpus(type),
    };
    const assignment = tryFit(node, job.spec.gpu);
    if (assignment) commitFit(node, assignment);
    added.push(node);
    state.nodes.push(node);
  }
  addedByGroup.set(best.groupId, added);
  return { ok: true, reason: reason('waiting-for-capacity', `new ${best.offering.instanceType} (${best.offering.capacityType}, ${best.offering.zone}) ordered for it: the cheapest offering that fits`) };
}

export function describeRequest(job: Job): string {
  const g = job.spec.gpu;
  const models = g.models ? ` ${g.models.join('/')}` : '';
  const what = g.kind === 'whole' ? `${g.count}${models} GPU${g.count > 1 ? 's' : ''}` : g.kind === 'fraction' ? `${g.milliGpu / 1000} of a${models} GPU with ${g.memoryMiB} MiB` : `a ${g.profile}${models} MIG slice`;
  return job.spec.nodes > 1 ? `${job.spec.nodes} nodes × ${what}` : what;
}

interface CapacityState {
  nodes: NodeCapacity[];
}

/** Free capacity of every live node: its GPUs less what active jobs hold, plus launches in flight. */
export function buildCapacity(snapshot: Snapshot): CapacityState {
  const nodes: NodeCapacity[] = [];
  const byId = new Map<string, NodeCapacity>();
  const liveByGroup = new Map<string, number>();
  for (const fleetNode of snapshot.nodes) {
    const inst = fleetNode.instance;
    if (inst.state === 'terminated' || inst.state === 'stopping') continue;
    liveByGroup.set(inst.groupId, (liveByGroup.get(inst.groupId) ?? 0) + 1);
    if (fleetNode.record?.draining) continue;
    const type = snapshot.instanceTypes.get(inst.instanceType);
    if (!type) continue;
    const id = `${inst.cloud}/${inst.zone}/${inst.instanceType}/${inst.capacityType}`;
    const cap: NodeCapacity = {
      id: inst.id,
      groupId: inst.groupId,
      cloud: inst.cloud,
      region: inst.region,
      zone: inst.zone,
      instanceType: inst.instanceType,
      capacityType: inst.capacityType,
      offeringId: id,
      kind: fleetNode.schedulable ? 'ready' : 'booting',
      priceMicroUsdPerHour: snapshot.prices.get(id)?.priceMicroUsdPerHour ?? 0,
      gpus: fleetNode.record?.gpus.length
        ? fleetNode.record.gpus.map((g) => ({ index: g.index, model: g.model, memoryMiB: g.memoryMiB, freeMilli: 1000, freeMemoryMiB: g.memoryMiB, whole: false }))
        : emptyGpus(type),
    };
    nodes.push(cap);
    byId.set(cap.id, cap);
  }
  for (const job of snapshot.activeJobs) {
    for (const a of job.placement?.nodes ?? []) {
      const node = byId.get(a.nodeId);
      if (node) commitFit(node, a);
    }
  }
  // Launches in flight: the group wants more machines than it has reported so far.
  for (const group of snapshot.groups) {
    const inFlight = group.desiredCapacity - (liveByGroup.get(group.id) ?? 0);
    const offering = cheapestOffering(snapshot, group.offerings);
    if (!offering) continue;
    const type = snapshot.instanceTypes.get(offering.instanceType);
    if (!type) continue;
    for (let i = 0; i < inFlight; i++) {
      nodes.push({
        id: `inflight:${group.id}:${i}`,
        groupId: group.id,
        cloud: offering.cloud,
        region: offering.region,
        zone: offering.zone,
        instanceType: offering.instanceType,
        capacityType: offering.capacityType,
        offeringId: offering.id,
        kind: 'booting',
        priceMicroUsdPerHour: snapshot.prices.get(offering.id)?.priceMicroUsdPerHour ?? 0,
        gpus: emptyGpus(type),
      });
    }
  }
  return { nodes };
}

function cheapestOffering(snapshot: Snapshot, offerings: readonly Offering[]): Offering | undefined {
  let best: Offering | undefined;
  let bestPrice = Infinity;
  for (const o of offerings) {
    const p = snapshot.prices.get(o.id)?.priceMicroUsdPerHour;
    if (p !== undefined && (p < bestPrice || (p === bestPrice && best && o.id < best.id))) {
      best = o;
      bestPrice = p;
    }
  }
  return best ?? offerings[0];
}

/** Removes nodes that have been empty for the cool-down, never below a group's minimum. */
function scaleIn(snapshot: Snapshot, nodes: readonly NodeCapacity[]): PlanAction[] {
  const actions: PlanAction[] = [];
  const cooldownMs = snapshot.policy.idleCooldownSec * 1000;
  const removable = new Map<string, number>();
  for (const g of snapshot.groups) removable.set(g.id, g.desiredCapacity - g.minSize);
  const records = new Map(snapshot.nodes.map((n) => [n.instance.id, n]));
  const candidates = nodes
    .filter((n) => n.kind === 'ready' && isEmpty(n))
    .map((n) => ({ node: n, idleSince: records.get(n.id)?.record?.idleSinceMs }))
    .filter((c): c is { node: NodeCapacity; idleSince: number } => c.idleSince !== undefined && snapshot.nowMs - c.idleSince >= cooldownMs)
    .sort((a, b) => a.idleSince - b.idleSince || (a.node.id < b.node.id ? -1 : 1));
  for (const { node, idleSince } of candidates) {
    const left = removable.get(node.groupId) ?? 0;
    if (left <= 0) continue;
    removable.set(node.groupId, left - 1);
    const idleMin = Math.round((snapshot.nowMs - idleSince) / 60_000);
    actions.push({
      kind: 'scale-in',
      groupId: node.groupId,
      instanceId: node.id,
      reason: reason('scale-in-idle', `${node.id} (${node.instanceType}, ${node.capacityType}) has been empty for ${idleMin} min, past the ${snapshot.policy.idleCooldownSec / 60} min cool-down`),
    });
  }
  return actions;
}
