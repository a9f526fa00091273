import type { AttemptGpuUse } from '../gpu-use.ts';
import type { Reason } from '../reason.ts';
import type { CheckpointStore, JobStore } from '../ports.ts';
import { applyJobEvent, finishCancelled, type UpdateOutcome } from './job-updates.ts';
import { exitReport, type CheckpointResult } from './node-rules.ts';
import { requeueAttempt } from './requeue.ts';

/**
 * Writing down what a node's rank decided about its attempt, for the real agent and the simulated
 * one alike: what the rules say (core/services/node-rules.ts) becomes a job event here, once.
 */

type Ports = { readonly jobs: JobStore; readonly checkpoints: CheckpointStore };

/**
 * How a checkpoint asked for ended: any rank's failure fails the job; the leader records success,
 * the cancel or the requeue. `gpuUse` is what the rank measured its attempt using (it goes with the event).
 */
export async function recordCheckpointResult(
  ports: Ports,
  input: { jobId: string; attempt: number; rank: number; result: CheckpointResult; nowMs: number; gpuUse?: AttemptGpuUse },
): Promise<UpdateOutcome | undefined> {
  const { jobId, attempt, rank, result, nowMs } = input;
  const gpuUse = input.gpuUse ? { gpuUse: input.gpuUse } : {};
  if (result.event === 'fail')
    return applyJobEvent(ports.jobs, jobId, { type: 'fail', attempt, exitCode: result.exitCode, ...gpuUse }, nowMs);
  if (rank !== 0) return undefined;
  switch (result.event) {
    case 'succeed':
      return applyJobEvent(ports.jobs, jobId, { type: 'succeed', attempt, ...gpuUse }, nowMs);
    case 'cancel':
      return finishCancelled(ports.jobs, jobId, nowMs, input.gpuUse);
    case 'requeue':
      return requeueAttempt(ports, { jobId, attempt, reason: result.reason, nowMs, ...gpuUse });
  }
}

/** A process that ended by itself: the leader's success ends the job, any rank's failure fails it (see exitReport). */
export async function recordExit(
  jobs: JobStore,
  input: { jobId: string; attempt: number; rank: number; exitCode: number; nowMs: number; gpuUse?: AttemptGpuUse; failure?: Reason },
): Promise<UpdateOutcome | undefined> {
  const report = exitReport(input.rank, input.exitCode);
  if (!report) return undefined;
  const gpuUse = input.gpuUse ? { gpuUse: input.gpuUse } : {};
  const event =
    report.event === 'succeed'
      ? ({ type: 'succeed', attempt: input.attempt, ...gpuUse } as const)
      : ({
          type: 'fail',
          attempt: input.attempt,
          exitCode: report.exitCode,
          ...gpuUse,
          ...(input.failure ? { failure: input.failure } : {}),
        } as const);
  return applyJobEvent(jobs, input.jobId, event, input.nowMs);
}
