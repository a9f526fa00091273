import { ACTIVE_STATES, type Job } from '../job.ts';
import type { AttemptGpuUse } from '../gpu-use.ts';
import type { CheckpointStore, JobStore } from '../ports.ts';
import type { Reason } from '../reason.ts';
import { applyJobEvent, type UpdateOutcome } from './job-updates.ts';

/**
 * Puts one attempt of a job back in the queue, resuming from its newest complete checkpoint
 * (attempt + 1, priority kept; the checkpoint is attached while that attempt is still the job's). Idempotent by attempt: requeueing an attempt that already
 * ended or was already requeued changes nothing, so every path that notices a lost node
 * (interruption warning, state change, missed heartbeats, the agent's own notice) can call it.
 */
export async function requeueAttempt(
  ports: { jobs: JobStore; checkpoints: CheckpointStore },
  input: { jobId: string; attempt: number; reason: Reason; nowMs: number; gpuUse?: AttemptGpuUse },
): Promise<UpdateOutcome> {
  const latest = await ports.checkpoints.latest(input.jobId);
  if (latest) {
    const attached = await applyJobEvent(
      ports.jobs,
      input.jobId,
      // Only while the attempt being requeued is the job's: once it moved on, the next attempt resumes from the index
      // anyway, and a machine that ran the old attempt holds no job it may write.
      (job) => (job.attempt === input.attempt && isNewer(latest, job) ? { type: 'checkpoint-done', checkpoint: latest } : undefined),
      input.nowMs,
    );
    if (attached.status === 'not-found') return attached;
  }
  return applyJobEvent(
    ports.jobs,
    input.jobId,
    { type: 'requeue', attempt: input.attempt, reason: input.reason, ...(input.gpuUse ? { gpuUse: input.gpuUse } : {}) },
    input.nowMs,
  );
}

function isNewer(cp: NonNullable<Job['checkpoint']>, job: Job): boolean {
  if (!ACTIVE_STATES.includes(job.state) && job.state !== 'pending') return false;
  return (
    !job.checkpoint ||
    cp.completedAtMs > job.checkpoint.completedAtMs ||
    (cp.completedAtMs === job.checkpoint.completedAtMs && cp.progressSec > job.checkpoint.progressSec)
  );
}

/** The jobs an instance holds (placed, running or checkpointing there), from a list of active jobs. */
export function jobsOnInstance(activeJobs: readonly Job[], instanceId: string): Job[] {
  return activeJobs.filter((j) => j.placement?.nodes.some((n) => n.nodeId === instanceId));
}
