/**
 * Indexing: turns the snapshot into planning capacity. Decides nothing: it files the offerings
 * the groups may buy (with price, on-demand price and interruption risk), the live machines
 * (ready, booting, or neither) with the GPUs their running work already holds, the launches in
 * flight of groups that will deliver them, and what each team holds. It emits no action;
 * `commitPlacement` is the one way any phase takes room on a machine.
 */
import { offeringId, type Offering } from '../catalog.ts';
import { inService, type FleetNode, type NodeGroup } from '../fleet.ts';
import { gpuReportProblem, milliGpusUsed } from '../gpu.ts';
import type { Job } from '../job.ts';
import { hostPortsOf } from '../job-spec.ts';
import { placementMask } from '../mig.ts';
import { reservationRoom, reservationTerminationMs } from '../reservation.ts';
import type { Snapshot } from '../snapshot.ts';
import {
  commitFit,
  countFreeWhole,
  isMigModel,
  machineInMigMode,
  makeGpus,
  poolKeyOf,
  type NodeCapacity,
  type NodeKind,
} from './capacity.ts';
import { hostNetTeamOf } from './host-net.ts';
import { riskOf, type Fit, type GroupState, type OfferingInfo, type PlanningState } from './state.ts';

/** Takes the room of each fit on its machine (re-filing it in its index) and, for a job that holds it, records the holder. */
export function commitPlacement(
  st: PlanningState,
  fits: readonly Fit[],
  holder: Job | undefined,
  hostNetTeam = holder ? hostNetTeamOf(holder) : undefined,
): void {
  for (const f of fits) {
    commitFit(f.node, f.assignment, hostNetTeam);
    st.indexOf(f.node.kind).update(f.node);
    if (!holder) continue;
    const list = st.holders.get(f.node.id) ?? [];
    list.push({ job: holder, assignment: f.assignment });
    st.holders.set(f.node.id, list);
  }
}

/** The groups and the offerings they may launch (one info per offering and GPU mode). */
export function indexOfferings(st: PlanningState): void {
  const s = st.s;
  const minRunMs = (s.policy.expectedBootSec + RESERVED_MIN_RUN_SEC) * 1000;
  for (const group of [...s.groups].sort((a, b) => (a.id < b.id ? -1 : 1))) {
    const gs: GroupState = { group, room: Math.max(0, group.maxSize - group.desiredCapacity), added: [] };
    st.groups.set(group.id, gs);
    // A group launching into reservations adds no more than they still hold free (less its launches under way).
    const reserved = group.offerings.filter((o) => o.capacityType === 'reserved');
    if (reserved.length > 0) {
      const live = s.nodes.filter((n) => n.instance.groupId === group.id && inService(n.instance.state)).length;
      const inFlight = group.desiredCapacity - live;
      let free = 0;
      for (const o of reserved) {
        const r = o.reservationId !== undefined ? s.reservations?.get(o.reservationId) : undefined;
        if (r) free += reservationRoom(r, inFlight, s.nowMs, minRunMs);
      }
      gs.room = Math.min(gs.room, free);
    }
    for (const o of group.offerings) {
      const type = s.instanceTypes.get(o.instanceType);
      const migEnabled = (group.migEnabled ?? false) && isMigModel(type?.gpuModel ?? 'T4');
      const key = poolKeyOf(o.id, migEnabled);
      const existing = st.offerings.get(key);
      if (existing) {
        existing.groups.push(gs);
        continue;
      }
      const quote = s.prices.get(o.id);
      if (!type || !quote) continue;
      st.offerings.set(key, {
        key,
        offering: o,
        type,
        price: quote.priceMicroUsdPerHour,
        onDemandPrice: quote.onDemandMicroUsdPerHour,
        riskPerHour: riskOf(s, o.id, o.capacityType, o.reservationId),
        ...reservationFacts(s, o.reservationId),
        groups: [gs],
        migEnabled,
      });
    }
  }
}

/** A reserved machine that stays up this long after boot is worth launching into a reservation that ends. */
const RESERVED_MIN_RUN_SEC = 600;

/** When a reservation takes its machines away, and whether its owner may take them back, for a reserved offering. */
function reservationFacts(s: Snapshot, reservationId: string | undefined): { terminationMs?: number; interruptible?: boolean } {
  const r = reservationId !== undefined ? s.reservations?.get(reservationId) : undefined;
  if (!r) return {};
  const terminationMs = reservationTerminationMs(r);
  return { ...(terminationMs !== undefined ? { terminationMs } : {}), ...(r.interruptible ? { interruptible: true } : {}) };
}

/** The reservation of a reserved machine (from its offering id, `…/reserved/<id>`); undefined for any other. */
function reservationIdOf(node: { readonly capacityType: string; readonly offeringId: string }): string | undefined {
  if (node.capacityType !== 'reserved') return undefined;
  const at = node.offeringId.lastIndexOf('/reserved/');
  return at < 0 ? undefined : node.offeringId.slice(at + '/reserved/'.length);
}

/** Live machines, with the room their running work holds; and what each team holds. */
export function indexNodes(st: PlanningState): void {
  const s = st.s;
  const groupOf = new Map(s.groups.map((g) => [g.id, g]));
  for (const fleetNode of [...s.nodes].sort((a, b) => (a.instance.id < b.instance.id ? -1 : 1))) {
    const inst = fleetNode.instance;
    if (!inService(inst.state)) continue; // a machine a hook holds while it drains is no longer the group's capacity
    st.liveByGroup.set(inst.groupId, (st.liveByGroup.get(inst.groupId) ?? 0) + 1);
    if (fleetNode.record?.draining) continue;
    // Ready: schedulable now. Booting: launching, or up but its agent not registered yet.
    // A registered node that is unhealthy or silent is neither: it takes no work and is not counted on.
    const kind = fleetNode.schedulable ? 'ready' : inst.state === 'pending' || !fleetNode.record ? 'booting' : undefined;
    // A record whose GPU report cannot be read (stored before the agent API checked it, or by a hostile machine) is left
    // out, named in the plan: one such record must not stop the plan for the whole fleet.
    const problem = fleetNode.record ? gpuReportProblem(fleetNode.record.gpus) : undefined;
    if (problem !== undefined) {
      st.unreadable.push({ nodeId: inst.id, problem });
      continue;
    }
    const node = machineCapacity(s, fleetNode, groupOf.get(inst.groupId)?.migEnabled ?? false, kind ?? 'booting');
    if (!node) continue;
    st.nodeById.set(node.id, node);
    if (kind) st.indexOf(kind).add(node);
  }
  for (const job of s.activeJobs) {
    for (const a of job.placement?.nodes ?? []) {
      const node = st.nodeById.get(a.nodeId);
      // A replica placed before placements named their ports holds its service's port all the same.
      if (node) commitPlacement(st, [{ node, assignment: a.ports ? a : { ...a, ports: hostPortsOf(job.spec) } }], job);
    }
    st.teamUsedMilli.set(job.team, (st.teamUsedMilli.get(job.team) ?? 0) + milliGpusUsed(job.spec.gpu) * job.spec.nodes);
  }
  indexStaleHolds(st);
}

/**
 * GPUs an attempt the job has moved on from may still hold: its node's record still assigns it
 * (the agent unassigns an attempt only once its process is gone), so its GPUs are not free until
 * that node reports it stopped, its lease has certainly lapsed (silent past Policy
 * `silentRequeueSec`: the agent's fence or the machine's watchdog has stopped it), or the machine
 * is gone. Otherwise a requeued attempt, a gang's above all, could be placed on GPUs its previous
 * attempt still runs on. The GPUs come from the job's record of its ended attempts (`heldAttempts`).
 */
export function indexStaleHolds(st: PlanningState): void {
  const s = st.s;
  const jobs = new Map([...s.pendingJobs, ...s.activeJobs].map((j) => [j.id, j]));
  for (const fleetNode of s.nodes) {
    const record = fleetNode.record;
    const node = st.nodeById.get(fleetNode.instance.id);
    if (!record?.assigned || !node) continue;
    if (s.nowMs - record.lastHeartbeatAtMs > s.policy.silentRequeueSec * 1000) continue;
    for (const [jobId, attempt] of Object.entries(record.assigned)) {
      const job = jobs.get(jobId);
      if (!job || (job.attempt === attempt && job.placement?.nodes.some((n) => n.nodeId === node.id))) continue;
      const held = job.heldAttempts?.find((h) => h.attempt === attempt)?.nodes.filter((n) => n.nodeId === node.id) ?? [];
      for (const h of held) {
        if (!h.gpuIndices) continue; // a record from before holdings named their GPUs
        commitFit(node, {
          nodeId: node.id,
          gpuIndices: h.gpuIndices,
          ...(h.mig ? { mig: h.mig } : {}),
          ...(h.share ? { share: h.share } : {}),
        });
        st.staleHolds.push({ nodeId: node.id, jobId, attempt });
      }
    }
  }
}

/**
 * A live machine as planning capacity, or undefined for an unknown instance type: its GPUs in the
 * mode its agent reports (else its group's), with the MIG instances the driver reports taken
 * (the driver's layout, not the planner's memory of it: taken whether or not a job accounts for them).
 */
export function machineCapacity(s: Snapshot, fleetNode: FleetNode, groupMigEnabled: boolean, kind: NodeKind): NodeCapacity | undefined {
  const inst = fleetNode.instance;
  const type = s.instanceTypes.get(inst.instanceType);
  if (!type) return undefined;
  const offerId = offeringId(inst);
  const reported = fleetNode.record?.gpus ?? [];
  const gpus = makeGpus(type, machineInMigMode(reported, groupMigEnabled));
  for (const r of reported) {
    const slot = gpus.find((g) => g.index === r.index);
    if (!slot?.mig) continue;
    for (const d of r.migDevices ?? [])
      if (d.startSlice !== undefined && d.slices !== undefined) slot.mig.mask |= placementMask(d.startSlice, d.slices);
  }
  return {
    id: inst.id,
    groupId: inst.groupId,
    cloud: inst.cloud,
    region: inst.region,
    zone: inst.zone,
    instanceType: inst.instanceType,
    capacityType: inst.capacityType,
    offeringId: offerId,
    poolKey: poolKeyOf(
      offerId,
      gpus.some((g) => g.mig !== undefined),
    ),
    kind,
    priceMicroUsdPerHour: s.prices.get(offerId)?.priceMicroUsdPerHour ?? 0,
    gpus,
    freeWhole: countFreeWhole(gpus),
    ports: [],
    hostNetTeams: [],
    ...(fleetNode.record?.images ? { images: fleetNode.record.images } : {}),
  };
}

/**
 * Launches in flight: the group wants more machines than it has reported so far. They are filed
 * as booting machines of the group's cheapest offering, so waiting work counts on them instead
 * of buying more; not for a group whose launches will not be delivered (see launch cancellation).
 */
export function indexInFlight(st: PlanningState): void {
  for (const gs of st.groups.values()) {
    if (st.undeliverable.has(gs.group.id)) continue;
    const inFlight = gs.group.desiredCapacity - (st.liveByGroup.get(gs.group.id) ?? 0);
    const o = cheapestOfGroup(st, gs.group);
    if (!o || inFlight <= 0) continue;
    for (let i = 0; i < inFlight; i++) st.booting.add(newMachine(o, gs.group.id, `inflight:${gs.group.id}:${i}`, 'booting'));
  }
}

/**
 * Every offering the plan may meet, sorted by key: the groups', and those of live nodes whose
 * offering has left every group's list (they hold work and free room, but cannot be bought).
 */
export function indexAllOfferings(st: PlanningState): void {
  const s = st.s;
  const list = [...st.offerings.values()];
  for (const node of st.nodeById.values()) {
    if (st.offerings.has(node.poolKey)) continue;
    const type = s.instanceTypes.get(node.instanceType);
    if (!type) continue;
    const reservationId = reservationIdOf(node);
    const offering: Offering = {
      id: node.offeringId,
      cloud: node.cloud,
      region: node.region,
      zone: node.zone,
      instanceType: node.instanceType,
      capacityType: node.capacityType,
      ...(reservationId !== undefined ? { reservationId } : {}),
    };
    const quote = s.prices.get(node.offeringId);
    const info: OfferingInfo = {
      key: node.poolKey,
      offering,
      type,
      price: quote?.priceMicroUsdPerHour ?? node.priceMicroUsdPerHour,
      onDemandPrice: quote?.onDemandMicroUsdPerHour ?? 0,
      riskPerHour: riskOf(s, node.offeringId, node.capacityType, reservationId),
      ...reservationFacts(s, reservationId),
      groups: [],
      migEnabled: node.gpus.some((g) => g.mig !== undefined),
    };
    st.offerings.set(node.poolKey, info);
    list.push(info);
  }
  list.sort((a, b) => (a.key < b.key ? -1 : 1));
  st.allOfferings = list;
}

/**
 * A machine of this offering in this group that is not up yet (launching, or bought in this
 * plan), with all its GPUs free. Its fields are written in the order `machineCapacity` writes a
 * live machine's, so the planner's hot paths see one object shape.
 */
export function newMachine(o: OfferingInfo, groupId: string, id: string, kind: NodeKind): NodeCapacity {
  const gpus = makeGpus(o.type, o.migEnabled);
  return {
    id,
    groupId,
    cloud: o.offering.cloud,
    region: o.offering.region,
    zone: o.offering.zone,
    instanceType: o.offering.instanceType,
    capacityType: o.offering.capacityType,
    offeringId: o.offering.id,
    poolKey: o.key,
    kind,
    priceMicroUsdPerHour: o.price,
    gpus,
    freeWhole: countFreeWhole(gpus),
    ports: [],
    hostNetTeams: [],
  };
}

function cheapestOfGroup(st: PlanningState, group: NodeGroup): OfferingInfo | undefined {
  let best: OfferingInfo | undefined;
  for (const o of group.offerings) {
    const key = poolKeyOf(o.id, group.migEnabled ?? false);
    const found = st.offerings.get(key) ?? st.offerings.get(o.id);
    if (found && (!best || found.price < best.price || (found.price === best.price && found.key < best.key))) best = found;
  }
  return best;
}
