/**
 * A service in the control loop: one record per service (id `team.name`) and one job per replica.
 * Each reconcile decides, from the record and the replicas' jobs, how many replicas the service
 * wants (autoscale.ts, HPA semantics) and where they run (spot-placement.ts, gpu-fleet's policy
 * unless the spec fixes the spare), then which replica jobs to start and which to cancel. Pure:
 * the caller reads the jobs, the machines and the load, and writes what this returns.
 *
 * A replica is a job of its own (no checkpoints; the usual attempts, placement and billing). A
 * spot replica is pinned to the zone the policy chose and may run on spot only; an on-demand one
 * may run anywhere its spec allows. A replica that its zone took back (interrupted, its machine
 * warned or lost) or never gave (still pending after `SPOT_GIVE_UP_MS`) is a loss of that zone:
 * the policy learns from it, and the job is cancelled rather than put back in the queue, since
 * the policy starts its replacement wherever it now judges best, at once.
 */
import type { Job } from '../job.ts';
import type { JobSpec } from '../job-spec.ts';
import { HPA_BEHAVIOUR, scale, type Recommendation, type ScalingBehaviour, type ServiceMetric } from './autoscale.ts';
import { initialMemory, planServing, type ServingMemory } from './spot-placement.ts';
import { shareWithinObjective } from './latency.ts';

/** How long a spot replica may wait for its zone to give a machine before the zone counts as refusing. */
export const SPOT_GIVE_UP_MS = 10 * 60_000;

/** The label every replica job carries: the id of its service. */
export const SERVICE_LABEL = 'gpu-fleet/service';

/**
 * Seconds a target deregistered from a service's target group keeps its connections (the group's
 * deregistration delay): the stack sets it on every target group, and a replica leaves its group
 * at least this long before it stops.
 */
export const SERVICE_DEREGISTRATION_DELAY_SEC = 30;

/**
 * When a replica on a warned machine leaves its target group, at the latest: its machine's drain
 * mark `deadlineMs` (its agent stops what runs there then; the machine itself goes a margin later)
 * less the group's deregistration delay `drainSec`, so its connections have drained as it stops.
 * Until then it takes requests: the notice's minutes are capacity while its replacement starts.
 */
export function frontDoorLeaveAtMs(deadlineMs: number, drainSec: number): number {
  return deadlineMs - drainSec * 1000;
}

/**
 * Seconds since a machine's last heartbeat within which reconcile counts on its agent to take its
 * replicas out of their target groups on time ({@link agentLeavesFrontDoorNow}): three of the
 * agent's 15 s heartbeats.
 */
export const AGENT_HEARD_SEC = 45;

/**
 * The agent's side: whether, at this look, the replicas of its warned machine leave their target
 * groups. At the last look before {@link frontDoorLeaveAtMs} (the next, `lookSec` away, would be
 * late), so they leave a little early rather than late.
 */
export function agentLeavesFrontDoorNow(deadlineMs: number, nowMs: number, drainSec: number, lookSec: number): boolean {
  return nowMs + lookSec * 1000 > frontDoorLeaveAtMs(deadlineMs, drainSec);
}

/**
 * Reconcile's side: whether a replica on a warned machine stays in its target group for now. Its
 * agent, when it answers (`agentHeard`: heard within {@link AGENT_HEARD_SEC}), takes it out at its
 * last look before {@link frontDoorLeaveAtMs}; reconcile keeps it until then and is the backstop
 * after. With the agent silent, reconcile alone: it leaves when the next look, `intervalSec` away,
 * would leave its connections too little time to drain before the drain mark. A machine leaving
 * with no deadline known (no notice was seen) leaves at once.
 */
export function servesThroughNotice(
  deadlineMs: number | undefined,
  nowMs: number,
  timing: { readonly drainSec: number; readonly intervalSec: number; readonly agentHeard: boolean },
): boolean {
  if (deadlineMs === undefined) return false;
  if (timing.agentHeard) return nowMs < frontDoorLeaveAtMs(deadlineMs, timing.drainSec);
  return deadlineMs - nowMs > (timing.drainSec + timing.intervalSec) * 1000;
}

export interface ServiceRecord {
  /** `team.name`. */
  readonly id: string;
  readonly team: string;
  readonly name: string;
  /** The spec as submitted (with its `service` section); each replica runs it. */
  readonly spec: JobSpec;
  /** When the message that gave this spec was sent (SQS SentTimestamp): an older message never replaces it. */
  readonly specSentAtMs?: number;
  readonly state: 'active' | 'cancelled';
  /** Bumped on every write (conditional writes, as for jobs). */
  readonly version: number;
  readonly createdAtMs: number;
  readonly updatedAtMs: number;
  /** The replicas the service wants now (the autoscaler's last decision). */
  readonly target: number;
  /** The autoscaler's recent recommendations (its delays and stabilisation window read them). */
  readonly history: readonly Recommendation[];
  /** The placement policy's memory, over `zones` (their order is the memory's). */
  readonly zones: readonly string[];
  readonly memory: ServingMemory;
  /** The next replica's number (replica job ids are `<service id>.r<n>`). */
  readonly nextReplica: number;
  /** Why the service has the replicas it has, as of the last decision. */
  readonly reason?: string;
  /**
   * When each live replica was last seen answering its readiness path (replica job id → time of the
   * decision that saw it): how long one has gone without answering is counted from it.
   */
  readonly answeredAtMs?: Readonly<Record<string, number>>;
  /**
   * With an objective and a request rate read: at the last decision, the requests per second and the
   * share of them the ready replicas serve within the objective (core/serving/latency.ts).
   */
  readonly objectiveNow?: { readonly requestsPerSec: number; readonly withinPct: number };
}

export function serviceId(team: string, name: string): string {
  return `${team}.${name}`;
}

/**
 * A service someone cancelled: its record says so (the services step then takes every replica out
 * of the load balancer, drains it and stops it; a record left with no replicas changes no more).
 * Already cancelled: unchanged.
 */
export function cancelledService(record: ServiceRecord, nowMs: number): ServiceRecord | undefined {
  if (record.state === 'cancelled') return undefined;
  return { ...record, state: 'cancelled', reason: 'cancelled on request', updatedAtMs: nowMs, version: record.version + 1 };
}

/** A new service's record: it starts at its minimum (at least one replica while it has load to read). */
export function newServiceRecord(team: string, spec: JobSpec, nowMs: number): ServiceRecord {
  const name = spec.name ?? 'service';
  return {
    id: serviceId(team, name),
    team,
    name,
    spec,
    state: 'active',
    version: 1,
    createdAtMs: nowMs,
    updatedAtMs: nowMs,
    target: spec.service?.replicas.min ?? 0,
    history: [],
    zones: [],
    memory: initialMemory(0),
    nextReplica: 1,
  };
}

/** What the caller knows of one replica job beyond the job itself. */
export interface ReplicaView {
  readonly job: Job;
  /** The zone its machine is in (placed or running), or the zone it is pinned to (pending). */
  readonly zone?: string;
  /** Its machine was warned (spot notice, rebalance, drain): it still serves, but is on its way out. */
  readonly leaving: boolean;
  /**
   * Whether its readiness path answers now: its target is healthy at the service's front door, or,
   * for a service without one, its agent found it answering (`job.replicaHealth`). Only then is it ready.
   */
  readonly answering: boolean;
}

export interface ReplicaDecisionInput {
  readonly nowMs: number;
  readonly record: ServiceRecord;
  /** The service's replica jobs that have not ended. */
  readonly replicas: readonly ReplicaView[];
  /** Failure domains with spot capacity the replicas may use: a zone, or the zones one node group spans joined by "+". */
  readonly spotZones: readonly string[];
  /** Observed load, each the total over the service (the caller does not divide). */
  readonly load: Partial<Record<ServiceMetric, number>>;
  /** Seconds between decisions (the reconcile interval). */
  readonly intervalSec: number;
  /** Seconds from a replica's launch until it is ready (a machine's boot plus the readiness delay), as the policy assumes. */
  readonly coldStartSec: number;
  readonly limit?: { readonly replicas: number; readonly why: string };
}

export interface ReplicaToStart {
  readonly capacity: 'spot' | 'on-demand';
  /** The zone a spot replica is pinned to. */
  readonly zone?: string;
}

export interface ReplicaDecision {
  readonly record: ServiceRecord;
  readonly start: readonly ReplicaToStart[];
  readonly cancel: readonly { readonly jobId: string; readonly why: string }[];
  /** Replicas ready now (running and answering their readiness path, machine not leaving). */
  readonly ready: number;
  /** Replicas given up for not answering their readiness path past the spec's limit (also in `cancel`), and why. */
  readonly replaced: readonly { readonly jobId: string; readonly why: string }[];
}

/** A replica serves once it runs and its readiness path answers (its target is healthy, or its agent found it answering). */
export function replicaReady(job: Job, answering: boolean): boolean {
  return job.state === 'running' && answering;
}

/** Whether the replica's agent last found its readiness path answering, for its current attempt. */
export function agentFoundAnswering(job: Job): boolean {
  return job.replicaHealth?.attempt === job.attempt && job.replicaHealth.answering;
}

/**
 * The capacity a replica was asked for (its spec), not where a planner put it: a planner that puts
 * spot replicas on on-demand (the all-on-demand baseline) must not make them look lost and asked again.
 */
function capacityOf(job: Job): 'spot' | 'on-demand' {
  return job.spec.interruptible ? 'spot' : 'on-demand';
}

/**
 * One decision for one service: its target, the replicas to start, and the ones to cancel, with
 * the reason. Never cancels a ready replica when that would leave fewer ready than the target.
 */
export function decideReplicas(input: ReplicaDecisionInput): ReplicaDecision {
  const { nowMs, record } = input;
  const spec = record.spec;
  const svc = spec.service;
  if (!svc) throw new Error(`service ${record.id} has no service section`);
  const cancel: { jobId: string; why: string }[] = [];
  if (record.state === 'cancelled') {
    for (const r of input.replicas) cancel.push({ jobId: r.job.id, why: `service ${record.id} was cancelled` });
    // Written like any decision (its version moves), so the services step goes on to take the replicas out.
    const reason = `cancelled: ${input.replicas.length} replica(s) leaving`;
    return {
      record: { ...record, target: 0, reason, updatedAtMs: nowMs, version: record.version + 1 },
      start: [],
      cancel,
      ready: 0,
      replaced: [],
    };
  }

  // The zones the policy spreads over: the ones it has memory of first (their order is its memory's), then new ones.
  const zones = [...record.zones.filter((z) => input.spotZones.includes(z)), ...input.spotZones.filter((z) => !record.zones.includes(z))];
  const memory = remapMemory(record.memory, record.zones, zones);

  // Each replica: lost (its zone took it back or never gave it), held, ready.
  const live: ReplicaView[] = [];
  for (const r of input.replicas) {
    const j = r.job;
    const spot = capacityOf(j) === 'spot';
    if (j.cancelRequested) continue;
    if (j.state === 'pending' && j.attempt > 1) {
      cancel.push({
        jobId: j.id,
        why: `replica ${j.id} lost its machine (${j.requeueReason?.message ?? 'requeued'}): a replacement is started instead`,
      });
      continue;
    }
    if (spot && j.state === 'pending' && nowMs - j.queuedAtMs > SPOT_GIVE_UP_MS) {
      cancel.push({
        jobId: j.id,
        why: `spot replica ${j.id} waited ${Math.round((nowMs - j.queuedAtMs) / 60_000)} min for ${r.zone ?? 'its zone'} to give a machine: asked elsewhere`,
      });
      continue;
    }
    live.push(r);
  }
  // A running replica that has not answered its readiness path for longer than the spec allows (counted from the end
  // of its initial delay, or from when it last answered) is hung: it is given up, and the policy starts another.
  const answeredAtMs: Record<string, number> = {};
  for (const r of live) {
    const before = record.answeredAtMs?.[r.job.id];
    if (r.answering && r.job.state === 'running') answeredAtMs[r.job.id] = nowMs;
    else if (before !== undefined) answeredAtMs[r.job.id] = before;
  }
  const replaced: { jobId: string; why: string }[] = [];
  const { path, initialDelaySec, unhealthyLimitSec } = svc.readiness;
  for (const r of [...live]) {
    if (r.job.state !== 'running' || r.answering || r.leaving || r.job.startedAtMs === undefined) continue;
    const since = Math.max(r.job.startedAtMs + initialDelaySec * 1000, answeredAtMs[r.job.id] ?? 0);
    const silentSec = Math.floor((nowMs - since) / 1000);
    if (silentSec <= unhealthyLimitSec) continue;
    const why = `replica ${r.job.id} has not answered ${path} for ${silentSec} s (${answeredAtMs[r.job.id] === undefined ? 'never since it started' : 'since it last did'}; the limit is ${unhealthyLimitSec} s): a replacement is started`;
    replaced.push({ jobId: r.job.id, why });
    cancel.push({ jobId: r.job.id, why });
    live.splice(live.indexOf(r), 1);
    delete answeredAtMs[r.job.id];
  }
  const ready = (r: ReplicaView) => !r.leaving && replicaReady(r.job, r.answering);
  const readyCount = live.filter(ready).length;

  // How many replicas: HPA semantics on the observed load, per ready replica.
  const behaviour: ScalingBehaviour = {
    ...HPA_BEHAVIOUR,
    minReplicas: svc.replicas.min,
    maxReplicas: svc.replicas.max,
    scaleUpDelaySec: svc.scaleUpDelaySec,
    scaleDownWindowSec: svc.scaleDownWindowSec,
    // With scaleAhead, a rising load is met a cold start ahead: a replica asked for now is ready when the load arrives.
    ...(svc.scaleAhead ? { aheadSec: input.coldStartSec } : {}),
  };
  // A total over the service (requests, waiting or running requests) is spread over the replicas it has asked for,
  // as HPA counts a replica that is not ready yet at the average rather than leaving it out (which would multiply
  // the count again at every decision while new replicas boot): desired = ceil(total ÷ per-replica target).
  const observed: Partial<Record<ServiceMetric, number>> = {};
  for (const [metric, total] of Object.entries(input.load) as [ServiceMetric, number][])
    observed[metric] = metric === 'gpu-utilization' || metric === 'gpu-memory' ? total : total / Math.max(1, record.target);
  const scaled = scale(
    svc.targets.map((t) => ({ metric: t.metric, perReplica: t.perReplica })),
    behaviour,
    { nowMs, current: record.target, observed, history: record.history, ...(input.limit ? { limit: input.limit } : {}) },
  );
  const target = scaled.replicas;

  // Where: spot per zone and on-demand, from the placement policy (or all on-demand for work that may not be interrupted).
  const spotLive = live.filter((r) => capacityOf(r.job) === 'spot');
  const odLive = live.filter((r) => capacityOf(r.job) === 'on-demand');
  const held = zones.map((z) => spotLive.filter((r) => r.zone === z && !r.leaving).length);
  const spotReady = spotLive.filter(ready).length;
  const base = Math.min(svc.onDemandBase, target);
  let wantSpot = zones.map(() => 0);
  let wantOd = target;
  let nextMemory = memory;
  if (spec.interruptible && zones.length > 0) {
    const out = planServing('gpu-fleet', { target: target - base, spotHeld: held, spotReady }, memory, {
      nExtra: 0,
      pick: () => 0,
      spare: svc.spareSpot ?? 'risk',
      tickSec: input.intervalSec,
      coldStartTicks: Math.max(1, Math.ceil(input.coldStartSec / input.intervalSec)),
    });
    wantSpot = [...out.plan.spot];
    wantOd = base + out.plan.onDemand;
    nextMemory = out.memory;
  }

  // Keep ready replicas first, then those starting, newest cancelled first; never take ready below the target.
  let readyLeft = readyCount;
  const order = (a: ReplicaView, b: ReplicaView) =>
    Number(ready(b)) - Number(ready(a)) || a.job.submittedAtMs - b.job.submittedAtMs || (a.job.id < b.job.id ? -1 : 1);
  const trim = (pool: ReplicaView[], keep: number, what: string) => {
    const sorted = [...pool].sort(order);
    for (const r of sorted.slice(keep).reverse()) {
      if (ready(r)) {
        if (readyLeft - 1 < target) continue;
        readyLeft--;
      }
      cancel.push({ jobId: r.job.id, why: `${what}: ${scaled.reason}` });
    }
  };
  const start: ReplicaToStart[] = [];
  zones.forEach((z, i) => {
    const inZone = spotLive.filter((r) => r.zone === z && !r.leaving);
    if (inZone.length > wantSpot[i]!) trim(inZone, wantSpot[i]!, `fewer spot replicas in ${z}`);
    for (let n = inZone.length; n < wantSpot[i]!; n++) start.push({ capacity: 'spot', zone: z });
  });
  // Spot replicas in zones no longer offered are trimmed like any surplus.
  const elsewhere = spotLive.filter((r) => !r.leaving && (r.zone === undefined || !zones.includes(r.zone)));
  if (elsewhere.length > 0) trim(elsewhere, 0, 'spot replicas outside the zones offered');
  const odKept = odLive.filter((r) => !r.leaving);
  if (odKept.length > wantOd) trim(odKept, wantOd, 'fewer on-demand replicas');
  for (let n = odKept.length; n < wantOd; n++) start.push({ capacity: 'on-demand' });

  const spotWanted = wantSpot.reduce((a, b) => a + b, 0);
  // The requests served within the objective now, by the queueing model of the ready replicas at the load read.
  const rps = input.load['requests-per-second'];
  const objectiveNow =
    svc.objective && rps !== undefined
      ? { requestsPerSec: rps, withinPct: Math.floor(10_000 * shareWithinObjective(readyCount, rps, svc.objective)) / 100 }
      : undefined;
  const objectiveText = objectiveNow
    ? `; ${objectiveNow.withinPct}% of ${Math.round(rps! * 100) / 100} requests/s within a ${svc.objective!.waitSec} s wait`
    : '';
  const reason = `${scaled.reason}; ${spotWanted} on spot${zones.length > 0 ? ` (${zones.map((z, i) => `${z} ${wantSpot[i]}`).join(', ')})` : ''}, ${wantOd} on-demand; ${readyCount} ready${objectiveText}${replaced.length > 0 ? `; ${replaced.map((r) => r.why).join('; ')}` : ''}`;
  // The last decision's objective figure goes with it: none is kept from an older one.
  const { objectiveNow: _before, ...kept } = record;
  return {
    record: {
      ...kept,
      target,
      history: scaled.history,
      zones,
      memory: nextMemory,
      nextReplica: record.nextReplica + start.length,
      reason,
      answeredAtMs,
      ...(objectiveNow ? { objectiveNow } : {}),
      updatedAtMs: nowMs,
      version: record.version + 1,
    },
    start,
    cancel,
    ready: readyCount,
    replaced,
  };
}

/** The spec of a replica job: the service's, pinned to a zone and kept off on-demand for a spot replica. */
export function replicaSpec(record: ServiceRecord, replica: ReplicaToStart): JobSpec {
  const spec = record.spec;
  return {
    ...spec,
    name: `${record.name}-r${record.nextReplica}`,
    interruptible: replica.capacity === 'spot',
    labels: { ...spec.labels, [SERVICE_LABEL]: record.id },
    // A failure domain is a zone, or zones one node group spans ("us-west-2a+us-west-2b").
    ...(replica.zone ? { placement: { ...spec.placement, zones: replica.zone.split('+') } } : {}),
  };
}

/** Reorders per-zone memory from one zone list to another (zones that left are dropped, new ones start fresh). */
function remapMemory(memory: ServingMemory, from: readonly string[], to: readonly string[]): ServingMemory {
  if (from.length === to.length && from.every((z, i) => to[i] === z)) return memory;
  const pick = <T>(xs: readonly T[] | undefined, fresh: T): T[] | undefined =>
    xs === undefined ? undefined : to.map((z) => (from.includes(z) ? (xs[from.indexOf(z)] ?? fresh) : fresh));
  const losses = pick(memory.losses, 0);
  const exposure = pick(memory.exposure, 0);
  const asked = pick(memory.asked, 0);
  return {
    ...initialMemory(to.length),
    ...(memory.tick !== undefined ? { tick: memory.tick } : {}),
    ...(memory.lastLoss !== undefined ? { lastLoss: memory.lastLoss } : {}),
    ...(losses ? { losses } : {}),
    ...(exposure ? { exposure } : {}),
    ...(asked ? { asked } : {}),
  };
}
