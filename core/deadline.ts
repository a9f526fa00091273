import { remainingWorkSec } from './cost-model.ts';
import type { Job } from './job.ts';
import { reason, type Reason } from './reason.ts';
import type { Policy } from './snapshot.ts';
import { decideSpot, type SpotMode } from './spot-policy.ts';

export type DeadlineChoice =
  /** No deadline: the usual cost rules decide. */
  | { readonly mode: 'free' }
  /** The deadline needs capacity that will not be taken away (or spot will not supply enough in time). */
  | { readonly mode: 'on-demand'; readonly reason: Reason; readonly commit: boolean }
  /** Spot can be had and the deadline allows it. */
  | { readonly mode: 'spot-ok'; readonly reason: Reason }
  /** No spot now, and the deadline allows waiting for it rather than paying for on-demand. */
  | { readonly mode: 'wait-for-spot'; readonly reason: Reason };

export interface DeadlineMarket {
  /** Whether spot that fits the job can be had now. */
  readonly spotAvailable: boolean;
  /** What the job runs on now. */
  readonly mode: SpotMode;
  /** Work left, when the caller knows better than the checkpoint (a running attempt's progress). */
  readonly workLeftSec?: number;
  /** On-demand ÷ spot price for the job's offerings (3 when unknown). */
  readonly priceRatio?: number;
}

/**
 * For a job with a deadline, gpu-fleet's spot policy (core/spot-policy.ts, measured in
 * bench:spot): spot, on-demand, or wait for spot. The changeover is a boot and a restore; the job's
 * clock starts at submission, and it aims to finish `deadlineMarginSec` before the deadline. The live system has no per-pool availability series yet, so the
 * policy works from its prior.
 */
export function deadlineChoice(job: Job, nowMs: number, policy: Policy, market: DeadlineMarket): DeadlineChoice {
  if (!job.spec.deadline) return { mode: 'free' };
  const deadlineMs = Date.parse(job.spec.deadline);
  const total = job.spec.expectedRuntimeSec ?? policy.defaultRuntimeSec;
  const workLeft = Math.max(0, market.workLeftSec ?? remainingWorkSec(job, policy));
  const decision = decideSpot('gpu-fleet', {
    elapsedSec: Math.max(0, (nowMs - job.submittedAtMs) / 1000),
    // The policy plans to finish a margin early: boots and restores vary, the deadline does not.
    deadlineSec: Math.max(0, (deadlineMs - policy.deadlineMarginSec * 1000 - job.submittedAtMs) / 1000),
    totalWorkSec: Math.max(total, workLeft),
    doneWorkSec: Math.max(0, Math.max(total, workLeft) - workLeft),
    mode: market.mode,
    pendingChangeoverSec: 0,
    spotAvailable: market.spotAvailable,
    changeoverSec: policy.expectedBootSec + policy.restoreSec,
    // A decision holds until the next reconcile, and an interruption warning may come that much before.
    intervalSec: policy.reconcileIntervalSec + policy.noticeMarginSec,
    priceRatio: market.priceRatio ?? 3,
    committedOnDemand: false,
    observed: { availableSec: 0, unavailableSec: 0, outages: 0, currentRunSec: Number.MAX_SAFE_INTEGER },
  });
  const why = reason(decision.reason.code, `deadline ${job.spec.deadline}: ${decision.reason.message}`);
  switch (decision.kind) {
    case 'on-demand':
      return { mode: 'on-demand', reason: why, commit: decision.commit };
    case 'spot':
      return { mode: 'spot-ok', reason: why };
    case 'wait':
      return { mode: 'wait-for-spot', reason: why };
  }
}
