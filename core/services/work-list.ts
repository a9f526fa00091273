import { ACTIVE_STATES, type Job } from '../job.ts';

/**
 * What a node agent does with one entry of its work list (job id → attempt). Reconcile writes the
 * entry just before it places the attempt, so the job record decides:
 * - `run`: the attempt is placed on this node (placed, running or checkpointing): run it here.
 * - `stale`: the job moved on (finished, a newer attempt, or placed elsewhere): drop the entry.
 * - `wait`: the placement has not landed (yet): keep the entry and look again next time.
 */
export type WorkVerdict = 'run' | 'stale' | 'wait';

export function judgeWorkEntry(job: Job | undefined, nodeId: string, attempt: number): WorkVerdict {
  if (!job || job.attempt > attempt) return 'stale';
  if (job.attempt < attempt) return 'wait';
  if (ACTIVE_STATES.includes(job.state)) return job.placement?.nodes.some((n) => n.nodeId === nodeId) ? 'run' : 'stale';
  return job.state === 'pending' ? 'wait' : 'stale';
}

/** This node's part of a gang: its rank (0 leads and reports the job's outcome) and how many nodes take part. */
export function gangRank(job: Job, nodeId: string): { rank: number; size: number } | undefined {
  const nodes = job.placement?.nodes ?? [];
  const rank = nodes.findIndex((n) => n.nodeId === nodeId);
  return rank < 0 ? undefined : { rank, size: nodes.length };
}
