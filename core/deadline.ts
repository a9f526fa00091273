import { remainingWorkSec } from './cost-model.ts';
import type { Job } from './job.ts';
import { reason, type Reason } from './reason.ts';
import type { Policy } from './snapshot.ts';

export type DeadlineChoice =
  /** No deadline pressure: the job may use spot if it is interruptible. */
  | { readonly mode: 'free' }
  /** The deadline can only be met on capacity that will not be taken away. */
  | { readonly mode: 'on-demand'; readonly reason: Reason }
  /** There is slack for spot, and the job should use it. */
  | { readonly mode: 'spot-ok'; readonly reason: Reason };

/**
 * For a job with a deadline: may it still take the risk of spot? It may while the time left
 * exceeds its remaining work plus one changeover (boot and restore) plus a safety margin;
 * after that it must run on on-demand to the end. (The deadline policy in core/spot-policy.ts
 * refines this with the spot market's availability.)
 */
export function deadlineChoice(job: Job, nowMs: number, policy: Policy): DeadlineChoice {
  if (!job.spec.deadline) return { mode: 'free' };
  const deadlineMs = Date.parse(job.spec.deadline);
  const work = remainingWorkSec(job, policy);
  const changeover = policy.expectedBootSec + policy.restoreSec;
  const slackSec = (deadlineMs - nowMs) / 1000 - work - changeover;
  if (slackSec <= policy.deadlineMarginSec) {
    return {
      mode: 'on-demand',
      reason: reason('deadline-on-demand', `deadline ${job.spec.deadline} leaves ${Math.round(slackSec / 60)} min of slack beyond ${Math.round(work / 60)} min of work: only on-demand can still meet it`),
    };
  }
  return { mode: 'spot-ok', reason: reason('deadline-spot-safe', `deadline ${job.spec.deadline} leaves ${Math.round(slackSec / 60)} min of slack: spot is safe for now`) };
}
