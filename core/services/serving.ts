/**
 * The services step of reconcile: for each service, read its replicas (jobs labelled with its
 * id), the machines they are on and its load; decide (core/serving/service.ts); start the new
 * replicas as pending jobs and cancel the ones given up; write the record. Runs before the
 * planner reads its snapshot, so replicas started here are placed in the same reconcile.
 * Idempotent: replica job ids come from the record's counter, written with the record; a
 * repeated run after a crash creates nothing twice (create is idempotent by id), and a lost race
 * on the record leaves it for the next run.
 */
import type { InstanceTypeCatalog } from '../catalog.ts';
import type { Instance, NodeGroup, NodeRecord } from '../fleet.ts';
import { jobIdFor, newPendingJob, type Job } from '../job.ts';
import type { JobSpec } from '../job-spec.ts';
import { machineInMigMode, whyNoGroupHolds } from '../planner/capacity.ts';
import { milliGpusUsed } from '../gpu.ts';
import type {
  CatalogSource,
  DecisionLog,
  FrontDoor,
  FrontDoorTarget,
  JobStore,
  NodeStore,
  ServiceLoadSource,
  ServiceStore,
  TeamInForce,
} from '../ports.ts';
import { applyJobEvent } from './job-updates.ts';
import { imagesToPrefetch, prefetchChanged } from '../serving/prefetch.ts';
import {
  AGENT_HEARD_SEC,
  agentFoundAnswering,
  decideReplicas,
  replicaSpec,
  SERVICE_LABEL,
  servesThroughNotice,
  type ReplicaView,
  type ServiceRecord,
} from '../serving/service.ts';
import type { WorldView } from './snapshot-reader.ts';

export interface ServicePorts {
  readonly services: ServiceStore;
  /** Where the last decision's budgets in force are read (for the team's limit). */
  readonly decisions?: Pick<DecisionLog, 'recent'>;
  readonly serviceLoad?: ServiceLoadSource;
  /** The services' load balancer; without it (or for a service it does not front) nothing is registered. */
  readonly frontDoor?: FrontDoor;
  readonly jobs: JobStore;
  readonly catalog: CatalogSource;
  /** Where each machine's images to pull ahead are written; without it none are. */
  readonly nodes?: Pick<NodeStore, 'setPrefetch'>;
}

export interface ServiceStepResult {
  readonly started: number;
  readonly cancelled: number;
  /** Targets registered with and deregistered from the services' load balancers. */
  readonly registered: number;
  readonly deregistered: number;
  /** Machines whose list of images to pull ahead was written (changed) this step. */
  readonly prefetchWritten?: number;
  readonly decisions: readonly {
    readonly service: string;
    readonly target: number;
    readonly ready: number;
    readonly reason: string;
    /** Replicas given up for not answering their readiness path past the spec's limit, and why. */
    readonly replaced?: readonly { readonly jobId: string; readonly why: string }[];
  }[];
}

/** The most replicas the team's budget and GPU cap allow the service now, and why; undefined when nothing limits it. */
export function replicaLimit(
  record: ServiceRecord,
  team: TeamInForce | undefined,
  jobs: readonly Job[],
): { replicas: number; why: string } | undefined {
  if (!team) return undefined;
  if (team.state === 'hold' || team.state === 'stop')
    return { replicas: record.target, why: `team ${team.id}'s budget is spent (action ${team.state})` };
  if (team.maxGpus === undefined) return undefined;
  const perReplica = milliGpusUsed(record.spec.gpu) / 1000;
  // GPUs the team's other work holds now count against the cap.
  const others = jobs
    .filter((j) => j.team === record.team && j.spec.labels?.[SERVICE_LABEL] !== record.id && j.state !== 'pending')
    .reduce((a, j) => a + (milliGpusUsed(j.spec.gpu) * j.spec.nodes) / 1000, 0);
  const replicas = Math.max(0, Math.floor((team.maxGpus - others) / perReplica + 1e-9));
  return { replicas, why: `team ${team.id}'s GPU cap of ${team.maxGpus} (its other work holds ${others})` };
}

/** The replica jobs of a service among the jobs read. */
export function replicasOf(serviceId: string, jobs: readonly Job[]): Job[] {
  return jobs.filter((j) => j.spec.labels?.[SERVICE_LABEL] === serviceId);
}

export async function reconcileServices(
  ports: ServicePorts,
  world: WorldView,
  nowMs: number,
  options: { readonly intervalSec: number; readonly bootSec: number },
): Promise<ServiceStepResult> {
  const services = await ports.services.list();
  if (services.length === 0) {
    const prefetchWritten = await writePrefetch(ports, world, [], new Map());
    return { started: 0, cancelled: 0, registered: 0, deregistered: 0, decisions: [], ...(prefetchWritten > 0 ? { prefetchWritten } : {}) };
  }
  // The budgets in force as the last reconcile read them: a team whose budget holds its work, or whose GPU cap is
  // reached, gets no more replicas (the planner would hold them pending anyway; the decision says why).
  const teams = new Map(((await ports.decisions?.recent(1))?.[0]?.teams ?? []).map((t) => [t.id, t]));
  const typeNames = [...new Set(world.groups.flatMap((g) => g.offerings.map((o) => o.instanceType)))];
  const types = await ports.catalog.instanceTypes(typeNames);
  const instances = new Map(world.instances.map((i) => [i.id, i]));
  const records = new Map(world.records.map((r) => [r.instanceId, r]));
  const jobs = [...world.pendingJobs, ...world.activeJobs];
  let started = 0;
  let cancelled = 0;
  let registered = 0;
  let deregistered = 0;
  const decisions: ServiceStepResult['decisions'][number][] = [];
  for (const record of services) {
    const replicas = replicasOf(record.id, jobs);
    if (record.state === 'cancelled' && replicas.length === 0) continue;
    const spotZones = spotZonesFor(record.spec, world.groups, types);
    // Whether each replica answers its readiness path: its target's health where a front door checks it, else its agent's probe.
    const door = ports.frontDoor?.fronts(record.id) ? ports.frontDoor : undefined;
    const targets = door ? await door.targets(record.id) : [];
    const health = new Map(targets.map((t) => [`${t.target.ip}:${t.target.port}`, t.state]));
    const port = record.spec.service?.port ?? 0;
    const views: ReplicaView[] = replicas.map((job) => {
      const nodeId = job.placement?.nodes[0]?.nodeId;
      const inst = nodeId ? instances.get(nodeId) : undefined;
      const pinned = job.spec.placement?.zones ? [...job.spec.placement.zones].sort().join('+') : undefined;
      const zone = inst ? (domainOfZone(inst.zone, spotZones) ?? inst.zone) : pinned;
      const leaving = inst !== undefined && (inst.state === 'terminating-wait' || records.get(inst.id)?.draining !== undefined);
      const address = records.get(nodeId ?? '')?.address;
      const answering = door ? address !== undefined && health.get(`${address}:${port}`) === 'healthy' : agentFoundAnswering(job);
      return { job, leaving, answering, ...(zone ? { zone } : {}) };
    });
    const load = ports.serviceLoad ? await ports.serviceLoad.read(record, replicas, nowMs) : {};
    const coldStartSec = options.bootSec + (record.spec.service?.readiness.initialDelaySec ?? 0);
    const limit = replicaLimit(record, teams.get(record.team), jobs);
    const decision = decideReplicas({
      nowMs,
      record,
      replicas: views,
      spotZones,
      load,
      intervalSec: options.intervalSec,
      coldStartSec,
      ...(limit ? { limit } : {}),
    });
    // The record first: its counter reserves the new replicas' ids, so a crash after it starts nothing twice.
    const written = await ports.services.update(decision.record, record.version);
    if (!written.ok) continue;
    for (const [k, r] of decision.start.entries()) {
      const n = record.nextReplica + k;
      const spec = replicaSpec({ ...record, nextReplica: n }, r);
      const job = newPendingJob({ id: jobIdFor(record.team, `${record.name}-r${n}`), team: record.team, spec, submittedAtMs: nowMs });
      if ((await ports.jobs.create(job)).created) started++;
    }
    // The front door first: a replica leaves the load balancer before it is stopped or its machine goes.
    // A replica still in the target group (registered, or draining for the deregistration delay) is
    // stopped only once it has left it: its cancel waits for a later reconcile, so no request it holds is cut.
    let stillFronted = new Set<string>();
    if (door) {
      const out = await reconcileFrontDoor(door, record, views, decision.cancel, records, instances, targets, nowMs, options);
      registered += out.registered;
      deregistered += out.deregistered;
      stillFronted = out.stillFronted;
    }
    // Why each replica goes is in the record's reason; the cancel itself is the one people use.
    for (const c of decision.cancel) {
      if (stillFronted.has(c.jobId)) continue;
      const out = await applyJobEvent(ports.jobs, c.jobId, { type: 'cancel' }, nowMs);
      if (out.status === 'changed') cancelled++;
    }
    decisions.push({
      service: record.id,
      target: decision.record.target,
      ready: decision.ready,
      reason: decision.record.reason ?? '',
      ...(decision.record.objectiveNow ? { objectiveNow: decision.record.objectiveNow } : {}),
      ...(decision.replaced.length > 0 ? { replaced: decision.replaced } : {}),
    });
  }
  const prefetchWritten = await writePrefetch(ports, world, services, types);
  return { started, cancelled, registered, deregistered, decisions, ...(prefetchWritten > 0 ? { prefetchWritten } : {}) };
}

/**
 * Each live machine's images to pull ahead (core/serving/prefetch.ts), written where they changed:
 * in steady state nothing is written. A machine's GPU mode is what its agent reports, else its group's.
 */
async function writePrefetch(
  ports: Pick<ServicePorts, 'nodes'>,
  world: WorldView,
  services: readonly ServiceRecord[],
  types: InstanceTypeCatalog,
): Promise<number> {
  if (!ports.nodes) return 0;
  const instances = new Map(world.instances.map((i) => [i.id, i]));
  const groups = new Map(world.groups.map((g) => [g.id, g]));
  let written = 0;
  for (const r of world.records) {
    const inst = instances.get(r.instanceId);
    if (!inst || inst.state === 'terminated' || r.endedAtMs !== undefined) continue;
    const mig = machineInMigMode(r.gpus, groups.get(inst.groupId)?.migEnabled === true);
    const wanted = imagesToPrefetch(inst, mig, services, types);
    if (!prefetchChanged(r.prefetchImages, wanted)) continue;
    if (await ports.nodes.setPrefetch(r.instanceId, wanted)) written++;
  }
  return written;
}

/**
 * Brings the service's target group in line with its replicas: a running replica (machine not
 * leaving, not being cancelled) is registered, and the target group's health check on the
 * readiness path (`service.readiness`) lets traffic reach it only once it answers, as the
 * readiness probe does. A replica on a warned machine stays while it can still drain before the
 * machine stops ({@link servesThroughNotice}: its agent takes it out on time, or reconcile does
 * while it has the time); it is never registered again. Then it, one being cancelled, and a
 * target no live replica stands behind any more are deregistered (they drain for the group's
 * deregistration delay).
 */
async function reconcileFrontDoor(
  door: FrontDoor,
  record: ServiceRecord,
  views: readonly ReplicaView[],
  cancel: readonly { readonly jobId: string }[],
  records: ReadonlyMap<string, NodeRecord>,
  instances: ReadonlyMap<string, Instance>,
  /** The group's targets as read before the decision (one DescribeTargetHealth per service and reconcile). */
  now: readonly { readonly target: FrontDoorTarget; readonly state: string }[],
  nowMs: number,
  options: { readonly intervalSec: number },
): Promise<{ registered: number; deregistered: number; stillFronted: Set<string> }> {
  const port = record.spec.service?.port ?? 0;
  const going = new Set(cancel.map((c) => c.jobId));
  const targetOf = (v: ReplicaView): FrontDoorTarget | undefined => {
    const address = records.get(v.job.placement?.nodes[0]?.nodeId ?? '')?.address;
    return address ? { ip: address, port } : undefined;
  };
  const want = new Map<string, FrontDoorTarget>();
  const keep = new Set<string>();
  const leave = new Map<string, FrontDoorTarget>();
  for (const v of views) {
    const t = targetOf(v);
    if (!t) continue;
    const key = `${t.ip}:${t.port}`;
    // A warned machine's replica keeps serving through the notice, and leaves in time to drain before it stops:
    // its agent takes it out, when it answers (not for a machine a terminate hook holds, which goes when reconcile says).
    const nodeId = v.job.placement?.nodes[0]?.nodeId ?? '';
    const node = records.get(nodeId);
    const agentHeard =
      node !== undefined && instances.get(nodeId)?.state !== 'terminating-wait' && nowMs - node.lastHeartbeatAtMs <= AGENT_HEARD_SEC * 1000;
    const leavesNow =
      v.leaving &&
      !servesThroughNotice(node?.draining?.deadlineMs, nowMs, {
        drainSec: door.deregistrationDelaySec,
        intervalSec: options.intervalSec,
        agentHeard,
      });
    if (leavesNow || going.has(v.job.id) || v.job.cancelRequested) leave.set(key, t);
    else if (v.job.state === 'running' && v.leaving) keep.add(key);
    else if (v.job.state === 'running') want.set(key, t);
  }
  const live = new Set(now.filter((t) => t.state !== 'draining').map((t) => `${t.target.ip}:${t.target.port}`));
  const register = [...want.entries()].filter(([k]) => !live.has(k)).map(([, t]) => t);
  // Replicas being cancelled whose address the group still holds (before this step's deregistration, or draining).
  const held = new Set(now.map((t) => `${t.target.ip}:${t.target.port}`));
  const stillFronted = new Set(
    views
      .filter((v) => going.has(v.job.id))
      .filter((v) => {
        const t = targetOf(v);
        return t !== undefined && held.has(`${t.ip}:${t.port}`);
      })
      .map((v) => v.job.id),
  );
  // Stale targets too: a replica that ended, or a machine that went without a notice.
  const deregister = now
    .filter((t) => t.state !== 'draining')
    .map((t) => t.target)
    .filter((t) => leave.has(`${t.ip}:${t.port}`) || (!want.has(`${t.ip}:${t.port}`) && !keep.has(`${t.ip}:${t.port}`)));
  await door.deregister(record.id, deregister);
  await door.register(record.id, register);
  return { registered: register.length, deregistered: deregister.length, stillFronted };
}

/**
 * The failure domains a spot replica of the spec can be placed in, each as the zones it spans
 * joined by "+": a spot group in one zone is that zone; a group spanning several zones launches
 * in whichever it picks, so its zones are one domain (the service cannot choose between them),
 * unless single-zone groups already cover each of them. Only groups of the machine size the
 * planner gives a replica count: the smallest that holds it (core/planner/classification.ts).
 */
export function spotZonesFor(spec: JobSpec, groups: readonly NodeGroup[], types: InstanceTypeCatalog): string[] {
  const candidates: { zones: string[]; gpus: number }[] = [];
  for (const g of groups) {
    const spot = g.offerings.filter((o) => o.capacityType === 'spot' && (!spec.placement?.zones || spec.placement.zones.includes(o.zone)));
    if (spot.length === 0 || spot.length !== g.offerings.length) continue;
    const zones = [...new Set(spot.map((o) => o.zone))].sort();
    if (whyNoGroupHolds({ ...spec, interruptible: true, placement: { ...spec.placement, zones } }, [g], types) !== undefined) continue;
    const gpus = Math.min(...spot.map((o) => types.get(o.instanceType)?.gpuCount ?? Infinity));
    candidates.push({ zones, gpus });
  }
  const smallest = Math.min(...candidates.map((c) => c.gpus));
  const sized = candidates.filter((c) => c.gpus === smallest);
  const single = new Set(sized.filter((c) => c.zones.length === 1).map((c) => c.zones[0]!));
  const domains = new Set<string>();
  for (const c of sized) if (c.zones.length === 1 || !c.zones.every((z) => single.has(z))) domains.add(c.zones.join('+'));
  return [...domains].sort();
}

/** The domain (of `domains`) a zone belongs to. */
export function domainOfZone(zone: string, domains: readonly string[]): string | undefined {
  return domains.find((d) => d.split('+').includes(zone));
}
