import { ConflictError } from '../errors.ts';
import { CheckpointRefused, finishCancel, transition, type CheckpointRef, type Job, type JobEvent, type TransitionResult } from '../job.ts';
import type { AttemptGpuUse } from '../gpu-use.ts';
import type { CheckpointStore, JobStore } from '../ports.ts';

export type UpdateOutcome =
  | { readonly status: 'changed'; readonly job: Job }
  | { readonly status: 'unchanged'; readonly job: Job }
  | { readonly status: 'not-found' }
  | { readonly status: 'refused'; readonly job: Job; readonly error: string };

/**
 * Applies an event to a stored job with a conditional write, re-reading and re-deciding when
 * another writer got there first. Idempotent: an event already applied (or for an older
 * attempt) leaves the job unchanged. Throws ConflictError only if the job keeps moving under it.
 */
export async function applyJobEvent(
  jobs: JobStore,
  jobId: string,
  event: JobEvent | ((job: Job) => JobEvent | undefined),
  nowMs: number,
  maxTries = 5,
): Promise<UpdateOutcome> {
  return applyTransition(
    jobs,
    jobId,
    (job) => {
      const ev = typeof event === 'function' ? event(job) : event;
      return ev === undefined ? undefined : transition(job, ev, nowMs);
    },
    maxTries,
  );
}

/**
 * A machine's agent attaching a checkpoint its attempt saved: only while that attempt is the job's
 * and the job is placed on the machine. Once the job moved on (reconcile gave up on the save and
 * requeued it), the index keeps the checkpoint, the next attempt resumes from the index, and the
 * machine writes nothing to a job it no longer holds (the agent API would refuse it).
 */
export function attachWhileHeld(attempt: number, nodeId: string, checkpoint: CheckpointRef): (job: Job) => JobEvent | undefined {
  return (job) =>
    job.attempt === attempt && job.placement?.nodes.some((n) => n.nodeId === nodeId) ? { type: 'checkpoint-done', checkpoint } : undefined;
}

/** What became of a save whose part is in the store. */
export type LandedSave =
  /** The index took it; `complete` once every rank's part is in (the job then names the index's newest). */
  | { readonly kind: 'recorded'; readonly complete: boolean }
  /** The index refused it (its progress is behind the newest complete one): saved, never resumed from. */
  | { readonly kind: 'refused'; readonly why: string };

/**
 * A save's part landed in the store: the index is told (a gang's save is complete with its last
 * rank's part), and a complete save is attached to the job while this attempt holds it, as the
 * index's newest complete checkpoint (this save as the index recorded it, or a newer one). The
 * one verdict after an upload, for the real agent and the simulated machines alike.
 */
export async function recordLandedSave(
  ports: { readonly checkpoints: Pick<CheckpointStore, 'markComplete' | 'latest'>; readonly jobs: JobStore },
  saved: CheckpointRef,
  where: { readonly rank: number; readonly attempt: number; readonly nodeId: string },
  nowMs: number,
): Promise<LandedSave> {
  let complete: boolean;
  try {
    complete = await ports.checkpoints.markComplete(saved, where.rank);
  } catch (error) {
    if (error instanceof CheckpointRefused) return { kind: 'refused', why: error.message };
    throw error;
  }
  if (complete) {
    const newest = (await ports.checkpoints.latest(saved.jobId)) ?? saved;
    await applyJobEvent(ports.jobs, saved.jobId, attachWhileHeld(where.attempt, where.nodeId, newest), nowMs);
  }
  return { kind: 'recorded', complete };
}

/** Records a job whose cancel was asked for as cancelled, once its process is gone (the leader's report). */
export function finishCancelled(jobs: JobStore, jobId: string, nowMs: number, gpuUse?: AttemptGpuUse): Promise<UpdateOutcome> {
  return applyTransition(jobs, jobId, (job) => finishCancel(job, nowMs, gpuUse));
}

/** The conditional-write loop under every job update: decide on the stored job, write if it is still that version, else again. */
async function applyTransition(
  jobs: JobStore,
  jobId: string,
  decide: (job: Job) => TransitionResult | undefined,
  maxTries = 5,
): Promise<UpdateOutcome> {
  for (let attempt = 0; attempt < maxTries; attempt++) {
    const job = await jobs.get(jobId);
    if (!job) return { status: 'not-found' };
    const result = decide(job);
    if (result === undefined) return { status: 'unchanged', job };
    if (!result.ok) return { status: 'refused', job, error: result.error };
    if (!result.changed) return { status: 'unchanged', job };
    const written = await jobs.update(result.job, job.version);
    if (written.ok) return { status: 'changed', job: written.job };
  }
  throw new ConflictError(`job ${jobId} kept changing during ${maxTries} attempts to apply an update`);
}
