/**
 * Lost work and the control plane's health: which machines are lost (gone, draining past their
 * notice, or silent past the agent's lease and fence), and the attempts requeued from their
 * newest checkpoints for it; and which silences are the control plane's own fault (most of a
 * zone silent together while their cloud lists them running), for which nothing is requeued.
 * It writes job records only (requeues); it never touches machines or node records.
 */
import { correlatedSilence, type Instance, type NodeRecord } from '../fleet.ts';
import type { Job } from '../job.ts';
import { reason, type Reason } from '../reason.ts';
import { checkpointSizeMiB, checkpointTimeoutSec } from '../services/node-rules.ts';
import { jobsOnInstance, requeueAttempt } from '../services/requeue.ts';
import type { WorldView } from '../services/snapshot-reader.ts';
import type { Policy } from '../snapshot.ts';
import { reread, type ReconcileContext, type ReconcilePorts } from './context.ts';

/** Judges the control plane's health on the world as first read: which machines fell silent together. */
export function judgeSilence(ctx: ReconcileContext): void {
  ctx.silence = silenceOf(ctx.world, ctx.nowMs, ctx.policy);
}

/** The step: requeues the work of lost machines, and reads the world again if any was. */
export async function requeueLost(ctx: ReconcileContext): Promise<void> {
  ctx.lostJobsRequeued = await requeueLostWork(ctx.ports, ctx.world, ctx.nowMs, ctx.policy);
  if (ctx.lostJobsRequeued > 0) await reread(ctx);
}

/** Correlated silence over the world as read (core/fleet.ts correlatedSilence). */
export function silenceOf(world: Pick<WorldView, 'instances' | 'records'>, nowMs: number, policy: Policy) {
  const records = new Map(world.records.map((r) => [r.instanceId, r]));
  return correlatedSilence(
    world.instances.map((instance) => ({ instance, ...(records.has(instance.id) ? { record: records.get(instance.id)! } : {}) })),
    nowMs,
    policy,
  );
}

/**
 * Finds nodes that are gone or silent and requeues the attempts that ran there, from their
 * newest checkpoint. Lost means: the cloud says the machine is stopping or terminated; or its
 * agent's heartbeats stopped for longer than `silentRequeueSec` (past the agent's lease and fence); or
 * it was draining and its notice ran out.
 */
export async function requeueLostWork(
  ports: Pick<ReconcilePorts, 'jobs' | 'checkpoints'>,
  world: WorldView,
  nowMs: number,
  policy: Policy,
): Promise<number> {
  const instances = new Map(world.instances.map((i) => [i.id, i]));
  const records = new Map(world.records.map((r) => [r.instanceId, r]));
  const nodeIds = new Set(world.activeJobs.flatMap((j) => j.placement?.nodes.map((n) => n.nodeId) ?? []));
  const knownGroups = new Set(world.groups.map((g) => g.id));
  const silence = silenceOf(world, nowMs, policy);
  let requeued = 0;
  for (const nodeId of [...nodeIds].sort()) {
    // While a cloud is degraded, a machine missing from the view may be one of its own: kept as it is, never called lost.
    const record = records.get(nodeId);
    if ((world.degraded ?? []).length > 0 && !instances.has(nodeId) && !(record && knownGroups.has(record.groupId))) continue;
    const why = lostReason(instances.get(nodeId), records.get(nodeId), nowMs, policy);
    if (!why) continue;
    // Silent with many others of its zone, and running: its work is most likely running still; nothing is requeued for it.
    if (silence.machines.has(nodeId) && instances.get(nodeId)?.state === 'running' && why.code === 'node-lost') continue;
    for (const job of jobsOnInstance(world.activeJobs, nodeId)) {
      const out = await requeueAttempt(ports, { jobId: job.id, attempt: job.attempt, reason: why, nowMs });
      if (out.status === 'changed') requeued++;
    }
  }
  // A checkpoint asked for that its node has not saved within every allowance: stop waiting.
  for (const job of world.activeJobs) {
    const why = checkpointOverdue(job, records.get(job.placement?.nodes[0]?.nodeId ?? '')?.gpus, nowMs, policy);
    if (!why) continue;
    const out = await requeueAttempt(ports, { jobId: job.id, attempt: job.attempt, reason: why, nowMs });
    if (out.status === 'changed') requeued++;
  }
  return requeued;
}

/**
 * Why a job in `checkpointing` is given up on: its node has not ended the attempt within the
 * checkpoint's grace, the upload's allowance and a margin (the agent itself ends it within the
 * first two; past them the node is stuck or gone without a word).
 */
export function checkpointOverdue(job: Job, gpus: NodeRecord['gpus'] | undefined, nowMs: number, policy: Policy): Reason | undefined {
  if (job.state !== 'checkpointing' || job.checkpointRequestedAtMs === undefined) return undefined;
  const limitSec = checkpointTimeoutSec(job, checkpointSizeMiB(job, gpus), {
    uploadMiBPerSec: policy.uploadMiBPerSec,
    uploadMarginSec: policy.uploadMarginSec,
  });
  const waitedSec = (nowMs - job.checkpointRequestedAtMs) / 1000;
  if (waitedSec <= limitSec) return undefined;
  return reason(
    'checkpoint-timed-out',
    `its node did not save the checkpoint asked for ${Math.round(waitedSec)} s ago within ${limitSec} s (grace, upload allowance and margin); requeued from its newest saved checkpoint`,
  );
}

export function lostReason(
  instance: Instance | undefined,
  record: NodeRecord | undefined,
  nowMs: number,
  policy: Policy,
): Reason | undefined {
  if (instance && (instance.state === 'terminated' || instance.state === 'stopping')) {
    return reason('node-lost', `machine ${instance.id} is ${instance.state}`);
  }
  if (record?.draining && nowMs >= record.draining.deadlineMs) {
    return reason('interrupted', `machine ${record.instanceId} was draining (${record.draining.reason}) and its notice ran out`);
  }
  // Silent past the agent's lease and fence (Policy.silentRequeueSec): its agent, if it lives, has stopped its work itself.
  if (record && nowMs - record.lastHeartbeatAtMs > policy.silentRequeueSec * 1000) {
    const silentSec = Math.round((nowMs - record.lastHeartbeatAtMs) / 1000);
    return reason(
      'node-lost',
      `the agent on ${record.instanceId} has sent no heartbeat for ${silentSec} s (requeued after ${policy.silentRequeueSec} s, past its lease)`,
    );
  }
  if (!instance && !record) {
    return reason('node-lost', 'the machine is no longer reported by its cloud and its agent never registered');
  }
  return undefined;
}
