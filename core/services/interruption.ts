import { offeringId, type Cloud } from '../catalog.ts';
import type { Draining, Instance, NodeRecord } from '../fleet.ts';
import { ACTIVE_STATES, type Job } from '../job.ts';
import type { CheckpointStore, Clock, JobStore, NodeGroupProvider, NodeStore, PoolHistory } from '../ports.ts';
import { reason } from '../reason.ts';
import type { Policy } from '../snapshot.ts';
import { applyJobEvent } from './job-updates.ts';
import { checkpointSizeMiB, checkpointTimeoutSec } from './node-rules.ts';
import { requeueAttempt } from './requeue.ts';
import { CloudError, messageOf } from '../errors.ts';

/**
 * What a cloud (or the node's own agent) says is about to happen, or has happened, to a machine.
 * Adapters translate EventBridge events, GCP preemption operations and the agent's local
 * metadata notices into these; the service below handles all of them the same way.
 */
export type NodeNotice =
  /** The machine will be taken at `deadlineMs` (AWS: two minutes after the warning; GCP: about 30 s). */
  | {
      readonly kind: 'interruption-warning';
      readonly eventId: string;
      readonly instanceId: string;
      readonly atMs: number;
      readonly deadlineMs: number;
      /** What takes the machine, when it is not spot: "reservation cr-… ends", "interruptible reservation cr-… reclaimed". */
      readonly cause?: string;
    }
  /**
   * A capacity reservation takes its machines away at `terminationMs` (a Capacity Block's end less
   * 30 min, announced 10 min before): every machine in it is handled as an interruption warning.
   */
  | {
      readonly kind: 'reservation-ending';
      readonly eventId: string;
      readonly reservationId: string;
      readonly atMs: number;
      readonly terminationMs: number;
    }
  /** A reservation's capacity became usable (a Capacity Block delivered): plan now rather than at the next minute. */
  | { readonly kind: 'reservation-delivered'; readonly eventId: string; readonly reservationId: string; readonly atMs: number }
  /** The machine is at higher risk of interruption: move work early, let a replacement start. */
  | { readonly kind: 'rebalance'; readonly eventId: string; readonly instanceId: string; readonly atMs: number }
  /** The cloud reports a new state for the machine. */
  | { readonly kind: 'state-change'; readonly eventId: string; readonly instanceId: string; readonly atMs: number; readonly state: string }
  /** A terminate lifecycle hook holds the machine until the action is completed (or its timeout). */
  | {
      readonly kind: 'lifecycle-terminate';
      readonly eventId: string;
      readonly instanceId: string;
      readonly atMs: number;
      readonly groupName: string;
      readonly hookName: string;
      readonly token?: string;
      /** When the hook times out and the machine goes anyway. */
      readonly deadlineMs: number;
    }
  /** Planned maintenance (AWS Health scheduled change) for machines. */
  | {
      readonly kind: 'scheduled-change';
      readonly eventId: string;
      readonly instanceIds: readonly string[];
      readonly atMs: number;
      readonly startMs?: number;
    }
  /** The machine was preempted and is gone (GCP `compute.instances.preempted`). */
  | { readonly kind: 'preempted'; readonly eventId: string; readonly instanceId: string; readonly atMs: number };

export interface InterruptionPorts {
  readonly clock: Clock;
  readonly jobs: JobStore;
  readonly nodes: NodeStore;
  readonly checkpoints: CheckpointStore;
  readonly pools: PoolHistory;
  readonly providers: readonly NodeGroupProvider[];
}

export type NoticeOutcome =
  | { readonly status: 'ignored'; readonly why: string }
  | {
      readonly status: 'handled';
      /** What was done, for logs. */
      readonly summary: string;
      readonly checkpointsRequested: readonly string[];
      readonly requeued: readonly string[];
      /** Replacement capacity should be chosen now rather than at the next minute. */
      readonly reconcileSoon: boolean;
      /** The lifecycle action was completed now (no work was left on the machine). */
      readonly lifecycleCompleted: boolean;
    };

const GONE_STATES = new Set(['shutting-down', 'terminated', 'stopping', 'stopped']);
/** A rebalance recommendation or planned maintenance sets no hard deadline: work without checkpoints finishes where it is. */
const NO_DEADLINE_MS = 7 * 86_400_000;

/**
 * Handles one notice about one machine. Idempotent and order-independent: every job change
 * names the attempt it acts on (a repeated or late notice changes nothing); a draining mark only
 * tightens (an earlier deadline, a lifecycle hook), never loosens; an interruption is counted once per machine. A `terminated` state change that
 * arrives before (or without) the warning still requeues each job exactly once.
 */
export async function handleNotice(ports: InterruptionPorts, notice: NodeNotice, policy: Policy): Promise<NoticeOutcome> {
  if (notice.kind === 'scheduled-change') {
    let last: NoticeOutcome = { status: 'ignored', why: 'no managed machine in the scheduled change' };
    const parts: NoticeOutcome[] = [];
    for (const instanceId of notice.instanceIds) {
      parts.push(
        await handleNotice(ports, { kind: 'rebalance', eventId: `${notice.eventId}/${instanceId}`, instanceId, atMs: notice.atMs }, policy),
      );
    }
    const handled = parts.filter((p): p is Extract<NoticeOutcome, { status: 'handled' }> => p.status === 'handled');
    if (handled.length > 0) {
      last = {
        status: 'handled',
        summary: `scheduled maintenance: ${handled.map((h) => h.summary).join('; ')}`,
        checkpointsRequested: handled.flatMap((h) => h.checkpointsRequested),
        requeued: handled.flatMap((h) => h.requeued),
        reconcileSoon: true,
        lifecycleCompleted: false,
      };
    }
    return last;
  }

  if (notice.kind === 'reservation-delivered') {
    if (!(await launchesInto(ports.providers, notice.reservationId)))
      return { status: 'ignored', why: `reservation ${notice.reservationId} is not one a node group of gpu-fleet launches into` };
    return {
      status: 'handled',
      summary: `reservation ${notice.reservationId} delivered: its capacity is planned for now`,
      checkpointsRequested: [],
      requeued: [],
      reconcileSoon: true,
      lifecycleCompleted: false,
    };
  }
  if (notice.kind === 'reservation-ending') {
    const instances = await instancesIn(ports.providers, notice.reservationId);
    const parts: NoticeOutcome[] = [];
    for (const i of instances) {
      parts.push(
        await handleNotice(
          ports,
          {
            kind: 'interruption-warning',
            eventId: `${notice.eventId}/${i.id}`,
            instanceId: i.id,
            atMs: notice.atMs,
            deadlineMs: notice.terminationMs,
            cause: `reservation ${notice.reservationId} ends`,
          },
          policy,
        ),
      );
    }
    const handled = parts.filter((p): p is Extract<NoticeOutcome, { status: 'handled' }> => p.status === 'handled');
    if (handled.length === 0) return { status: 'ignored', why: `no managed machine runs in reservation ${notice.reservationId}` };
    return {
      status: 'handled',
      summary: `reservation ${notice.reservationId} ends at ${new Date(notice.terminationMs).toISOString()}: ${handled.map((h) => h.summary).join('; ')}`,
      checkpointsRequested: handled.flatMap((h) => h.checkpointsRequested),
      requeued: handled.flatMap((h) => h.requeued),
      reconcileSoon: true,
      lifecycleCompleted: false,
    };
  }

  const nowMs = ports.clock.nowMs();
  const record = await ports.nodes.get(notice.instanceId);
  const instance = await describe(ports.providers, notice.instanceId);
  if (!record && !instance) {
    return { status: 'ignored', why: `instance ${notice.instanceId} is not in a node group gpu-fleet manages` };
  }
  const onNode = await jobsOn(ports.jobs, notice.instanceId);
  const offerId = instance ? offeringId(instance) : undefined;
  const groupId = instance?.groupId ?? record?.groupId;

  switch (notice.kind) {
    case 'interruption-warning':
    case 'lifecycle-terminate': {
      const why =
        notice.kind === 'interruption-warning'
          ? (notice.cause ?? 'spot interruption warning')
          : `terminate lifecycle hook ${notice.hookName}`;
      // A hook holds the machine as long as its jobs' checkpoints asked for now may take (reconcile's heartbeats keep it).
      const holdUntilMs =
        notice.kind === 'lifecycle-terminate' ? lifecycleHoldUntilMs(notice, onNode, notice.instanceId, record?.gpus, policy) : undefined;
      const mark = await ports.nodes.markDraining(notice.instanceId, drainingFor(notice, policy, groupId, holdUntilMs)!);
      const deadlineMs = mark.draining?.deadlineMs ?? notice.deadlineMs;
      if (notice.kind === 'interruption-warning' && offerId && instance?.capacityType === 'spot')
        await ports.pools.noteInterrupted(notice.instanceId, offerId, notice.atMs);
      const { requested, requeued } = await askCheckpoints(ports, onNode, nowMs, why);
      let lifecycleCompleted = false;
      if (notice.kind === 'lifecycle-terminate' && onNode.length === 0) {
        lifecycleCompleted = await completeLifecycle(ports.providers, instance?.cloud, {
          groupId: groupId ?? notice.groupName,
          instanceId: notice.instanceId,
          hookName: notice.hookName,
          ...(notice.token ? { token: notice.token } : {}),
        });
      }
      return {
        status: 'handled',
        summary: `${why} for ${notice.instanceId}: ${requested.length} checkpoint(s) requested, ${requeued.length} job(s) requeued, machine draining until ${new Date(deadlineMs).toISOString()}`,
        checkpointsRequested: requested,
        requeued,
        reconcileSoon: true,
        lifecycleCompleted,
      };
    }
    case 'rebalance': {
      await ports.nodes.markDraining(notice.instanceId, drainingFor(notice, policy, groupId)!);
      const checkpointable = onNode.filter((j) => j.spec.checkpoint !== undefined);
      const { requested, requeued } = await askCheckpoints(ports, checkpointable, nowMs, 'rebalance recommendation');
      return {
        status: 'handled',
        summary: `rebalance recommendation for ${notice.instanceId}: no new work; ${requested.length} checkpointable job(s) asked to move early; a replacement will be chosen`,
        checkpointsRequested: requested,
        requeued,
        reconcileSoon: true,
        lifecycleCompleted: false,
      };
    }
    case 'state-change':
    case 'preempted': {
      if (notice.kind === 'state-change' && !GONE_STATES.has(notice.state)) {
        return { status: 'ignored', why: `state ${notice.state} of ${notice.instanceId} needs no action` };
      }
      const what = notice.kind === 'preempted' ? 'preempted' : notice.state;
      await ports.nodes.markDraining(notice.instanceId, drainingFor(notice, policy, groupId)!);
      // The machine's bill ends here: spend accrual charges its time up to this moment, not to when reconcile next looks.
      await ports.nodes.noteEnded(notice.instanceId, notice.atMs);
      if (offerId && instance?.capacityType === 'spot' && (notice.kind === 'preempted' || onNode.length > 0))
        await ports.pools.noteInterrupted(notice.instanceId, offerId, notice.atMs);
      const requeued: string[] = [];
      for (const job of onNode) {
        const out = await requeueAttempt(ports, {
          jobId: job.id,
          attempt: job.attempt,
          reason: reason(notice.kind === 'preempted' ? 'interrupted' : 'node-lost', `machine ${notice.instanceId} is ${what}`),
          nowMs,
        });
        if (out.status === 'changed') requeued.push(job.id);
      }
      return {
        status: 'handled',
        summary: `${notice.instanceId} ${what}: ${requeued.length} job(s) requeued from their newest checkpoint`,
        checkpointsRequested: [],
        requeued,
        reconcileSoon: requeued.length > 0,
        lifecycleCompleted: false,
      };
    }
  }
}

/**
 * The draining mark a notice puts on its machine (undefined for one that sets none: a state that
 * needs no action, planned maintenance, which is handled per machine as a rebalance). The store
 * merges it into the mark the machine has (core/fleet.ts mergeDraining), so the earliest deadline
 * and a lifecycle hook survive whatever order the notices come in.
 */
export function drainingFor(
  notice: NodeNotice,
  policy: Pick<Policy, 'noticeMarginSec'>,
  groupId?: string,
  /** For a terminate hook: how long heartbeats will hold the machine (lifecycleHoldUntilMs); the hook's own timeout otherwise. */
  holdUntilMs?: number,
): (Draining & { groupId?: string }) | undefined {
  const group = groupId ? { groupId } : {};
  switch (notice.kind) {
    case 'interruption-warning':
    case 'lifecycle-terminate': {
      const endMs = notice.kind === 'lifecycle-terminate' && holdUntilMs !== undefined ? holdUntilMs : notice.deadlineMs;
      const deadlineMs = Math.max(notice.atMs, endMs - policy.noticeMarginSec * 1000);
      if (notice.kind === 'interruption-warning')
        return { sinceMs: notice.atMs, reason: notice.cause ?? 'spot interruption warning', deadlineMs, ...group };
      const lifecycle = {
        groupId: groupId ?? notice.groupName,
        hookName: notice.hookName,
        ...(notice.token ? { token: notice.token } : {}),
      };
      return { sinceMs: notice.atMs, reason: `terminate lifecycle hook ${notice.hookName}`, deadlineMs, lifecycle, ...group };
    }
    case 'rebalance':
      return { sinceMs: notice.atMs, reason: 'rebalance recommendation', deadlineMs: notice.atMs + NO_DEADLINE_MS, ...group };
    case 'state-change':
    case 'preempted':
      if (notice.kind === 'state-change' && !GONE_STATES.has(notice.state)) return undefined;
      return {
        sinceMs: notice.atMs,
        reason: `machine ${notice.kind === 'preempted' ? 'preempted' : notice.state}`,
        deadlineMs: notice.atMs,
        ...group,
      };
    case 'scheduled-change':
    case 'reservation-ending':
    case 'reservation-delivered':
      return undefined;
  }
}

/** Whether some managed group launches into the reservation (a provider that fails counts as yes: better a plan too many). */
async function launchesInto(providers: readonly NodeGroupProvider[], reservationId: string): Promise<boolean> {
  for (const p of providers) {
    try {
      if ((await p.listGroups()).some((g) => g.offerings.some((o) => o.reservationId === reservationId))) return true;
    } catch {
      return true;
    }
  }
  return false;
}

/** The managed machines running in a reservation, as the clouds list them (a provider that fails is skipped). */
async function instancesIn(providers: readonly NodeGroupProvider[], reservationId: string): Promise<Instance[]> {
  const out: Instance[] = [];
  for (const p of providers) {
    try {
      for (const i of await p.listInstances()) if (i.reservationId === reservationId && !GONE_STATES.has(i.state)) out.push(i);
    } catch {
      // Its machines are found by reconcile's own look at the reservation's end (reconcile drains them then).
    }
  }
  return out.sort((a, b) => (a.id < b.id ? -1 : 1));
}

/**
 * Asks every job on a machine to checkpoint (its agent then saves and requeues it). A job placed
 * but not started yet loses nothing and is requeued at once; a job that cannot checkpoint keeps
 * running and is requeued when the machine goes (or finishes first).
 */
async function askCheckpoints(
  ports: InterruptionPorts,
  jobs: readonly Job[],
  nowMs: number,
  why: string,
): Promise<{ requested: string[]; requeued: string[] }> {
  const requested: string[] = [];
  const requeued: string[] = [];
  for (const job of jobs) {
    if (job.state === 'placed') {
      const out = await requeueAttempt(ports, {
        jobId: job.id,
        attempt: job.attempt,
        reason: reason('interrupted', `its machine got a ${why} before it started`),
        nowMs,
      });
      if (out.status === 'changed') requeued.push(job.id);
    } else if (job.state === 'running' && job.spec.checkpoint) {
      const out = await applyJobEvent(
        ports.jobs,
        job.id,
        {
          type: 'checkpoint-requested',
          attempt: job.attempt,
          reason: reason('interrupted', `its machine got a ${why}; checkpointed and requeued`),
        },
        nowMs,
      );
      if (out.status === 'changed') requested.push(job.id);
    }
  }
  return { requested, requeued };
}

async function jobsOn(jobs: JobStore, instanceId: string): Promise<Job[]> {
  return (await jobs.listByState(ACTIVE_STATES)).filter((j) => j.placement?.nodes.some((n) => n.nodeId === instanceId));
}

async function describe(providers: readonly NodeGroupProvider[], instanceId: string): Promise<Instance | undefined> {
  for (const p of providers) {
    const found = await p.describeInstance(instanceId);
    if (found) return found;
  }
  return undefined;
}

async function completeLifecycle(
  providers: readonly NodeGroupProvider[],
  cloud: Cloud | undefined,
  input: { groupId: string; instanceId: string; hookName: string; token?: string },
): Promise<boolean> {
  const provider = providers.find((p) => cloud === undefined || p.cloud === cloud);
  if (!provider) return false;
  await provider.completeLifecycleAction(input);
  return true;
}

/**
 * The longest a terminate hook with heartbeat timeout `heartbeatMs` holds a machine, however many
 * heartbeats it gets: its global timeout, 100 heartbeat timeouts or 48 hours, whichever is smaller
 * (Auto Scaling's RecordLifecycleActionHeartbeat).
 */
export function hookGlobalTimeoutMs(heartbeatMs: number): number {
  return Math.min(100 * heartbeatMs, 172_800_000);
}

/**
 * Until when a terminate hook should hold the machine `instanceId`: until the checkpoints asked
 * of its jobs now are written and uploaded (each job's grace, upload allowance and margin, for
 * its own part's size), never less than the hook's own timeout, and never past its global
 * timeout (100 heartbeat timeouts, at most 48 hours), which no heartbeat can pass.
 */
export function lifecycleHoldUntilMs(
  notice: Extract<NodeNotice, { kind: 'lifecycle-terminate' }>,
  jobs: readonly Job[],
  instanceId: string,
  gpus: NodeRecord['gpus'] | undefined,
  policy: Pick<Policy, 'uploadMiBPerSec' | 'uploadMarginSec'>,
): number {
  const heartbeatMs = Math.max(0, notice.deadlineMs - notice.atMs);
  const globalMs = hookGlobalTimeoutMs(heartbeatMs);
  const timing = { uploadMiBPerSec: policy.uploadMiBPerSec, uploadMarginSec: policy.uploadMarginSec };
  const needMs = Math.max(
    0,
    ...jobs
      .filter((j) => j.spec.checkpoint !== undefined)
      .map((j) => {
        const rank = Math.max(0, j.placement?.nodes.findIndex((n) => n.nodeId === instanceId) ?? 0);
        return checkpointTimeoutSec(j, checkpointSizeMiB(j, gpus, rank), timing) * 1000;
      }),
  );
  return notice.atMs + Math.min(globalMs, Math.max(heartbeatMs, needMs));
}

/**
 * Lets go of machines held by a terminate lifecycle hook once their work has left them, or
 * their time is up; a machine whose jobs are still checkpointing (writing, uploading) within
 * their time gets a heartbeat instead, so the hook holds it until they are done. Called by every reconcile; idempotent (completing twice is harmless).
 */
export async function completeDrainedLifecycles(
  ports: Pick<InterruptionPorts, 'providers'>,
  records: readonly NodeRecord[],
  activeJobs: readonly Job[],
  nowMs: number,
): Promise<number> {
  let completed = 0;
  const busy = new Set(activeJobs.flatMap((j) => j.placement?.nodes.map((n) => n.nodeId) ?? []));
  for (const r of records) {
    const lc = r.draining?.lifecycle;
    if (!lc) continue;
    if (busy.has(r.instanceId) && nowMs < r.draining!.deadlineMs) {
      // Each reconcile (every minute, well within the hook's heartbeat timeout) extends the hook while work remains.
      // Only a cloud with terminate hooks (AWS) has heartbeats; each provider leaves groups not its own alone.
      for (const provider of ports.providers)
        try {
          await provider.recordLifecycleHeartbeat?.({
            groupId: lc.groupId,
            instanceId: r.instanceId,
            hookName: lc.hookName,
            ...(lc.token ? { token: lc.token } : {}),
          });
        } catch (error) {
          // The next reconcile tries again; the hook's own timeout leaves minutes for it.
          if (!(error instanceof CloudError)) throw error;
        }
      continue;
    }
    try {
      if (
        await completeLifecycle(ports.providers, undefined, {
          groupId: lc.groupId,
          instanceId: r.instanceId,
          hookName: lc.hookName,
          ...(lc.token ? { token: lc.token } : {}),
        })
      )
        completed++;
    } catch (error) {
      // The cloud refused or failed the call: the next reconcile completes it (completing twice is harmless).
      if (!(error instanceof CloudError)) throw error;
    }
  }
  return completed;
}

/**
 * A cloud whose interruptions are found by looking rather than pushed as events (GCP: preemption
 * operations, and spot machines found stopped). `poll` returns what it has seen since its last
 * look, with some overlap: a notice may come again, and handling it again changes nothing.
 */
export interface NoticeSource {
  readonly cloud: Cloud;
  poll(): Promise<NodeNotice[]>;
}

export interface PolledNotices {
  readonly seen: number;
  readonly handled: number;
  readonly requeued: readonly string[];
  /** Sources that could not be read, and why (the next poll tries again). */
  readonly errors: readonly string[];
}

/** Polls each source and hands every notice to the same service as pushed events, oldest first. */
export async function pollNotices(ports: InterruptionPorts, sources: readonly NoticeSource[], policy: Policy): Promise<PolledNotices> {
  let seen = 0;
  let handled = 0;
  const requeued: string[] = [];
  const errors: string[] = [];
  for (const source of sources) {
    let notices: NodeNotice[];
    try {
      notices = await source.poll();
    } catch (error) {
      errors.push(`${source.cloud}: ${messageOf(error)}`);
      continue;
    }
    for (const notice of [...notices].sort((a, b) => a.atMs - b.atMs)) {
      seen++;
      try {
        const out = await handleNotice(ports, notice, policy);
        if (out.status === 'handled') {
          handled++;
          requeued.push(...out.requeued);
        }
      } catch (error) {
        errors.push(`${source.cloud} notice ${notice.eventId}: ${messageOf(error)}`);
      }
    }
  }
  return { seen, handled, requeued, errors };
}
