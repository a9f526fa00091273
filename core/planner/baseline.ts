import { budgetStatus } from '../budget.ts';
import { offeringId, type CapacityType, type Offering } from '../catalog.ts';
import { jobSpotFactor } from '../cost-model.ts';
import { gpuReportProblem, milliGpusUsed } from '../gpu.ts';
import { inService, type NodeGroup } from '../fleet.ts';
import type { Job, NodeAssignment } from '../job.ts';
import type { Plan, PlanAction, WaitingJob } from '../plan.ts';
import { reason } from '../reason.ts';
import { earlierAttemptsOnMachines } from './classification.ts';
import { priorRatePerHour } from '../risk.ts';
import { reservationRoom } from '../reservation.ts';
import type { Policy, Snapshot } from '../snapshot.ts';
import { commitFit, countFreeWhole, isEmpty, makeGpus, poolKeyOf, tryFit, typeCanHold, type NodeCapacity } from './capacity.ts';
import { hostNetTeamOf, hostNetWall, withRendezvousPort } from './host-net.ts';
import { hostPortsOf } from '../job-spec.ts';
import { machineCapacity } from './indexing.ts';
import { describeRequest, previousAttemptStillRuns } from './reasons.ts';
import { pricedPlacement } from './state.ts';

/**
 * The baseline: a planner of the kind Karpenter uses, for comparison in benchmarks and as the
 * `cheapest-fit` policy of the simulator. Jobs largest first; each goes on the first node that
 * fits (existing, then bought in this plan); otherwise the cheapest offering that can hold the
 * job is opened. It knows nothing of spot risk, fair share or lookahead. It honours the same
 * hard rules as the planner (models, non-interruptible work off spot, budget holds, group
 * maxima) so that the two are compared on cost, not on correctness.
 */
export function planBaseline(snapshot: Snapshot): Plan {
  const s = snapshot;
  const nodes: NodeCapacity[] = [];
  // A group launching into a reservation has no more room than the reservation has free (less its launches under way), as Karpenter counts it.
  const live = new Map<string, number>();
  for (const n of s.nodes) if (inService(n.instance.state)) live.set(n.instance.groupId, (live.get(n.instance.groupId) ?? 0) + 1);
  const reservedRoom = (g: NodeGroup) => {
    let free = 0;
    for (const o of g.offerings) {
      const r = o.reservationId !== undefined ? s.reservations?.get(o.reservationId) : undefined;
      if (r) free += reservationRoom(r, g.desiredCapacity - (live.get(g.id) ?? 0), s.nowMs, 0);
    }
    return free;
  };
  const groupRoom = new Map(
    s.groups.map((g) => {
      const room = Math.max(0, g.maxSize - g.desiredCapacity);
      return [g.id, g.offerings.some((o) => o.capacityType === 'reserved') ? Math.min(room, reservedRoom(g)) : room];
    }),
  );
  const added = new Map<string, NodeCapacity[]>();
  const byId = new Map<string, NodeCapacity>();
  for (const f of [...s.nodes].sort((a, b) => (a.instance.id < b.instance.id ? -1 : 1))) {
    const inst = f.instance;
    if (!inService(inst.state) || f.record?.draining) continue;
    const group = s.groups.find((g) => g.id === inst.groupId);
    if (f.record && gpuReportProblem(f.record.gpus) !== undefined) continue; // unreadable: left out, as the planner does
    const node = machineCapacity(s, f, group?.migEnabled ?? false, f.schedulable ? 'ready' : 'booting');
    if (!node) continue;
    nodes.push(node);
    byId.set(node.id, node);
  }
  for (const job of s.activeJobs)
    for (const a of job.placement?.nodes ?? [])
      if (byId.has(a.nodeId)) commitFit(byId.get(a.nodeId)!, a.ports ? a : { ...a, ports: hostPortsOf(job.spec) }, hostNetTeamOf(job));

  const reservationByOffering = new Map(s.groups.flatMap((g) => g.offerings.map((o) => [offeringId(o), o.reservationId] as const)));
  const reservationOf = (id: string) => reservationByOffering.get(id);
  const actions: PlanAction[] = [];
  const waiting: WaitingJob[] = [];
  let expectedExtra = 0;
  const restartSec = s.policy.expectedBootSec + s.policy.restoreSec;
  const costPolicy = { defaultRuntimeSec: s.policy.defaultRuntimeSec, restartSec };
  const size = (j: Job) => milliGpusUsed(j.spec.gpu) * j.spec.nodes;
  const pending = [...s.pendingJobs].sort((a, b) => size(b) - size(a) || b.spec.priority - a.spec.priority || (a.id < b.id ? -1 : 1));

  // Two attempts never run at once, whatever the policy: as the planner does (classification.ts).
  const stillOn = earlierAttemptsOnMachines(s);
  for (const job of pending) {
    const earlier = stillOn.get(job.id);
    if (earlier && earlier.attempt < job.attempt) {
      waiting.push({ jobId: job.id, reason: previousAttemptStillRuns(earlier.attempt, earlier.instanceId, earlier.fencedByMs) });
      continue;
    }
    const team = s.teams.get(job.team);
    const state = team ? budgetStatus(team, s.spendMicroUsd.get(job.team) ?? 0).state : 'hold';
    if (state === 'hold' || (state === 'spot-only' && !job.spec.interruptible)) {
      waiting.push({
        jobId: job.id,
        reason: reason(state === 'hold' ? 'budget-hold' : 'budget-spot-only', `team ${job.team} budget: ${state}`),
      });
      continue;
    }
    // Reserved capacity counts as on-demand for work that may not be interrupted, and as prepaid under a spot-only budget.
    const capacityOk = (c: CapacityType) => (job.spec.interruptible || c !== 'spot') && (state !== 'spot-only' || c !== 'on-demand');
    const placementOk = (o: { cloud: string; region: string; zone: string }) => {
      const p = job.spec.placement;
      return (
        !p ||
        ((!p.clouds || p.clouds.includes(o.cloud as 'aws')) &&
          (!p.regions || p.regions.includes(o.region)) &&
          (!p.zones || p.zones.includes(o.zone)))
      );
    };
    const usable = (n: NodeCapacity) => capacityOk(n.capacityType) && placementOk(n);
    const found = firstFit(nodes, job, usable, s.policy.hostNetworkSharing);
    if (found) {
      const fits = withRendezvousPort(found);
      fits.forEach((f) => commitFit(f.node, f.assignment, hostNetTeamOf(job)));
      const node = fits[0]!.node;
      if (node.kind === 'planned') {
        expectedExtra += extraFor(node, job);
        waiting.push({ jobId: job.id, reason: reason('waiting-for-capacity', `shares a ${node.instanceType} ordered in this plan`) });
      } else if (node.kind === 'booting') {
        waiting.push({ jobId: job.id, reason: reason('waiting-for-boot', `fits on starting ${node.instanceType}`) });
      } else {
        actions.push({
          kind: 'place',
          jobId: job.id,
          attempt: job.attempt,
          // Priced as the planner prices its placements: the services' and jobs' own costs are counted for this baseline too.
          placement: pricedPlacement(
            s,
            node,
            milliGpusUsed(job.spec.gpu),
            job.spec.nodes,
            fits.map((f) => f.assignment),
            reservationOf(node.offeringId),
            job.spec,
          ),
          reason: reason('placed-on-free-capacity', `first node that fits: ${node.id}`),
        });
      }
      continue;
    }
    // The cheapest offering that can hold the job, in a group with room.
    let best: { o: Offering; groupId: string; price: number } | undefined;
    for (const g of s.groups) {
      if ((groupRoom.get(g.id) ?? 0) < job.spec.nodes) continue;
      for (const o of g.offerings) {
        const type = s.instanceTypes.get(o.instanceType);
        const price = s.prices.get(o.id)?.priceMicroUsdPerHour;
        if (
          !type ||
          price === undefined ||
          !typeCanHold(type, job.spec.gpu, g.migEnabled ?? false) ||
          !capacityOk(o.capacityType) ||
          !placementOk(o)
        )
          continue;
        if ((s.unavailableUntilMs.get(o.id) ?? 0) > s.nowMs) continue;
        if (!best || price < best.price || (price === best.price && o.id < best.o.id)) best = { o, groupId: g.id, price };
      }
    }
    if (!best) {
      waiting.push({ jobId: job.id, reason: reason('no-offering-fits', `nothing can be bought for ${describeRequest(job)}`) });
      continue;
    }
    const type = s.instanceTypes.get(best.o.instanceType)!;
    const migMode = s.groups.find((g) => g.id === best.groupId)?.migEnabled ?? false;
    const opened: NodeCapacity[] = [];
    for (let i = 0; i < job.spec.nodes; i++) {
      const gpus = makeGpus(type, migMode);
      const node: NodeCapacity = {
        id: `planned:${best.groupId}:${nodes.length}`,
        groupId: best.groupId,
        cloud: best.o.cloud,
        region: best.o.region,
        zone: best.o.zone,
        instanceType: best.o.instanceType,
        capacityType: best.o.capacityType,
        offeringId: best.o.id,
        poolKey: poolKeyOf(best.o.id, migMode),
        kind: 'planned',
        priceMicroUsdPerHour: best.price,
        gpus,
        freeWhole: countFreeWhole(gpus),
        ports: [],
        hostNetTeams: [],
      };
      commitFit(node, tryFit(node, job.spec.gpu, hostPortsOf(job.spec))!, hostNetTeamOf(job));
      nodes.push(node);
      opened.push(node);
      expectedExtra += extraFor(node, job, 1 / job.spec.nodes);
    }
    groupRoom.set(best.groupId, (groupRoom.get(best.groupId) ?? 0) - job.spec.nodes);
    added.set(best.groupId, [...(added.get(best.groupId) ?? []), ...opened]);
    waiting.push({
      jobId: job.id,
      reason: reason('waiting-for-capacity', `cheapest offering that fits: ${best.o.instanceType} (${best.o.capacityType})`),
    });
  }

  function extraFor(node: NodeCapacity, job: Job, perNode = 1): number {
    if (node.capacityType !== 'spot') return 0;
    const f = jobSpotFactor(job, s.poolRiskPerHour.get(node.offeringId) ?? priorRatePerHour(undefined), costPolicy);
    const share = (size(job) * perNode) / (node.gpus.length * 1000);
    return Number.isFinite(f) ? node.priceMicroUsdPerHour * share * (f - 1) : node.priceMicroUsdPerHour * 1000;
  }

  let addedCost = 0;
  for (const [groupId, list] of [...added.entries()].sort(([a], [b]) => (a < b ? -1 : 1))) {
    const group = s.groups.find((g) => g.id === groupId)!;
    addedCost += list.reduce((a, n) => a + n.priceMicroUsdPerHour, 0);
    actions.push({
      kind: 'scale-up',
      groupId,
      fromDesired: group.desiredCapacity,
      toDesired: group.desiredCapacity + list.length,
      expected: [{ offeringId: list[0]!.offeringId, count: list.length }],
      reason: reason('scale-up-for-pending', `${list.length} × cheapest fitting ${list[0]!.instanceType}`),
    });
  }
  const cooldownMs = s.policy.idleCooldownSec * 1000;
  for (const f of s.nodes) {
    const n = byId.get(f.instance.id);
    const since = f.record?.idleSinceMs;
    const group = s.groups.find((g) => g.id === f.instance.groupId);
    if (
      !n ||
      n.kind !== 'ready' ||
      !isEmpty(n) ||
      since === undefined ||
      s.nowMs - since < cooldownMs ||
      !group ||
      group.desiredCapacity <= group.minSize
    )
      continue;
    actions.push({
      kind: 'scale-in',
      groupId: n.groupId,
      instanceId: n.id,
      reason: reason('scale-in-idle', `${n.id} idle past the cool-down`),
    });
  }
  return { actions, waiting, addedCostMicroUsdPerHour: addedCost, addedExpectedCostMicroUsdPerHour: Math.round(addedCost + expectedExtra) };
}

/** The first nodes (in order) that fit; full nodes are skipped cheaply. */
function firstFit(
  nodes: readonly NodeCapacity[],
  job: Job,
  usable: (n: NodeCapacity) => boolean,
  hostNetworkSharing: Policy['hostNetworkSharing'],
): { node: NodeCapacity; assignment: NodeAssignment }[] | undefined {
  const g = job.spec.gpu;
  const ports = hostPortsOf(job.spec);
  const team = hostNetTeamOf(job);
  const wall = team !== undefined ? hostNetWall(team, hostNetworkSharing) : undefined;
  const mightFit = (n: NodeCapacity) => (g.kind === 'whole' ? n.freeWhole >= g.count : !isFull(n)) && usable(n);
  if (job.spec.nodes === 1) {
    for (const node of nodes) {
      if (!mightFit(node)) continue;
      const assignment = tryFit(node, g, ports, wall);
      if (assignment) return [{ node, assignment }];
    }
    return undefined;
  }
  const byZone = new Map<string, { node: NodeCapacity; assignment: NodeAssignment }[]>();
  for (const node of nodes) {
    if (!mightFit(node)) continue;
    const assignment = tryFit(node, g, ports, wall);
    if (!assignment) continue;
    const list = byZone.get(node.zone) ?? [];
    list.push({ node, assignment });
    if (list.length === job.spec.nodes) return list;
    byZone.set(node.zone, list);
  }
  return undefined;
}

function isFull(n: NodeCapacity): boolean {
  return n.freeWhole === 0 && n.gpus.every((g) => (g.mig ? g.mig.mask === 0xff : g.whole || g.freeMilli === 0));
}
