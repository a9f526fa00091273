/**
 * What the people who submit jobs feel, over a run's jobs: how long they waited before their
 * first start and in all (every attempt's wait), how many attempts they took, and how much later
 * they finished than the same job under another policy (the all-on-demand baseline). The
 * figures per job come from core (firstWaitMs, waitMsSoFar, attemptsRun), as `status` shows them.
 */
import { attemptsRun, firstWaitMs, waitMsSoFar, type Job } from '../../core/job.ts';

export interface Spread {
  readonly p50: number;
  readonly p95: number;
  readonly p99: number;
  readonly max: number;
}

export interface JobTimes {
  /** Submission to first start, seconds. */
  readonly firstWaitSec: Spread;
  /** Time pending over all attempts, seconds (a job still pending counts its wait so far). */
  readonly totalWaitSec: Spread;
  /** Attempts started per job, over the jobs that started at least once. */
  readonly attempts: Spread;
}

export function jobTimes(jobs: readonly Job[], endMs: number): JobTimes {
  const accepted = jobs.filter((j) => j.state !== 'rejected');
  return {
    firstWaitSec: spread(accepted.map((j) => firstWaitMs(j, endMs) / 1000)),
    totalWaitSec: spread(accepted.map((j) => waitMsSoFar(j, endMs) / 1000)),
    attempts: spread(accepted.map(attemptsRun).filter((n) => n > 0)),
  };
}

export interface Slowdown {
  /** Jobs that finished under both policies. */
  readonly jobs: number;
  readonly mean: number;
  readonly p95: number;
  readonly p99: number;
}

/**
 * Each job's completion time (submission to success) over the same job's under the baseline,
 * over the jobs that succeeded under both; undefined when none did.
 */
export function slowdown(jobs: readonly Job[], baseline: readonly Job[]): Slowdown | undefined {
  const before = new Map(baseline.filter((j) => j.state === 'succeeded').map((j) => [j.id, completionMs(j)]));
  const ratios: number[] = [];
  for (const j of jobs) {
    const b = before.get(j.id);
    if (j.state !== 'succeeded' || b === undefined || b <= 0) continue;
    ratios.push(completionMs(j) / b);
  }
  if (ratios.length === 0) return undefined;
  const s = spread(ratios);
  return { jobs: ratios.length, mean: ratios.reduce((a, b) => a + b, 0) / ratios.length, p95: s.p95, p99: s.p99 };
}

function completionMs(j: Job): number {
  return (j.endedAtMs ?? j.submittedAtMs) - j.submittedAtMs;
}

/** Nearest-rank percentiles (0 for no values). */
export function spread(values: readonly number[]): Spread {
  const sorted = [...values].sort((a, b) => a - b);
  return {
    p50: percentile(sorted, 0.5),
    p95: percentile(sorted, 0.95),
    p99: percentile(sorted, 0.99),
    max: sorted[sorted.length - 1] ?? 0,
  };
}

/** Nearest-rank percentile of sorted values (0 for none). */
export function percentile(sorted: readonly number[], q: number): number {
  if (sorted.length === 0) return 0;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))]!;
}

/**
 * The runs of one trace and seed under several policies, each given its slowdown against the
 * all-on-demand run among them (the on-demand run itself and a set without one are unchanged).
 */
export function withSlowdowns<
  R extends { readonly summary: { readonly policy: string; readonly slowdownVsOnDemand?: Slowdown }; readonly jobs: readonly Job[] },
>(runs: readonly R[]): R[] {
  const od = runs.find((r) => r.summary.policy === 'on-demand');
  return runs.map((r) => {
    if (!od || r === od) return r;
    const s = slowdown(r.jobs, od.jobs);
    return s ? { ...r, summary: { ...r.summary, slowdownVsOnDemand: s } } : r;
  });
}
