import type { Placement } from './job.ts';
import type { Reason } from './reason.ts';

/** One thing the reconciler will do. Every action says why. */
export type PlanAction =
  | { readonly kind: 'place'; readonly jobId: string; readonly attempt: number; readonly placement: Placement; readonly reason: Reason }
  | {
      readonly kind: 'scale-up';
      readonly groupId: string;
      readonly fromDesired: number;
      readonly toDesired: number;
      /** The offerings the planner expects the group to launch, and how many of each. */
      readonly expected: readonly { readonly offeringId: string; readonly count: number }[];
      readonly reason: Reason;
    }
  | { readonly kind: 'scale-in'; readonly groupId: string; readonly instanceId: string; readonly reason: Reason }
  /** Lowers a group's desired size to what it has, when its launches keep failing (the work is bought elsewhere). */
  | {
      readonly kind: 'cancel-launches';
      readonly groupId: string;
      readonly fromDesired: number;
      readonly toDesired: number;
      readonly reason: Reason;
    }
  | { readonly kind: 'preempt'; readonly jobId: string; readonly attempt: number; readonly reason: Reason }
  /** Keeps a pending job waiting for a budget or limit, with why (a job already held for the same reason is left as it is). */
  | { readonly kind: 'hold'; readonly jobId: string; readonly reason: Reason }
  /** Lifts a hold that no longer applies: the job waits only for capacity again. */
  | { readonly kind: 'release-hold'; readonly jobId: string };

/**
 * An action of a plan that could not be applied, as data: which action, what it acted on, and
 * why in a code a script can key on. `code` is the port vocabulary's (`throttled`, `not-found`,
 * `access-denied`, ...) when a cloud or store call failed, or gpu-fleet's own: `refused` (the
 * job moved on since the snapshot), `unregistered` (the node's agent has no record), `no-provider`
 * (no configured cloud holds the group), `failed` (anything else).
 */
export interface ActionFailure {
  /** Index of the action in its plan. */
  readonly index: number;
  readonly kind: PlanAction['kind'];
  /** The job, group or instance the action was about. */
  readonly resource: string;
  readonly code: string;
  readonly message: string;
}

/** What an action acts on, for records and logs. */
export function actionResource(action: PlanAction): string {
  switch (action.kind) {
    case 'place':
    case 'preempt':
    case 'hold':
    case 'release-hold':
      return action.jobId;
    case 'scale-up':
    case 'cancel-launches':
      return action.groupId;
    case 'scale-in':
      return action.instanceId;
  }
}

/** One line for a failed action, for people. */
export function describeFailure(failure: ActionFailure): string {
  return `${failure.kind} ${failure.resource} failed [${failure.code}]: ${failure.message}`;
}

export interface WaitingJob {
  readonly jobId: string;
  readonly reason: Reason;
}

export interface Plan {
  readonly actions: readonly PlanAction[];
  /** Every pending job the plan does not place, with why. */
  readonly waiting: readonly WaitingJob[];
  /** Hourly price of the capacity this plan adds, under the snapshot's prices (µUSD/h). */
  readonly addedCostMicroUsdPerHour: number;
  /**
   * Expected hourly cost of that capacity under the cost model: its price plus, on spot, the
   * expected rework of the jobs it is bought for (µUSD/h). The measure benchmarks compare.
   */
  readonly addedExpectedCostMicroUsdPerHour: number;
  /** Machines left out of this plan because their stored GPU report cannot be read: no work goes to them until their agent registers again. */
  readonly unreadableNodes?: readonly { readonly nodeId: string; readonly problem: string }[];
}

/** A short human line for an action, for logs, `explain` and the decision record. */
export function describeAction(action: PlanAction): string {
  switch (action.kind) {
    case 'place':
      return `place ${action.jobId} (attempt ${action.attempt}) on ${action.placement.nodes.map((n) => `${n.nodeId}[${n.gpuIndices.join(',')}]`).join(' + ')}: ${action.reason.message}`;
    case 'scale-up':
      return `scale ${action.groupId} ${action.fromDesired} → ${action.toDesired}: ${action.reason.message}`;
    case 'scale-in':
      return `remove ${action.instanceId} from ${action.groupId}: ${action.reason.message}`;
    case 'cancel-launches':
      return `cancel launches of ${action.groupId} ${action.fromDesired} → ${action.toDesired}: ${action.reason.message}`;
    case 'preempt':
      return `preempt ${action.jobId} (attempt ${action.attempt}): ${action.reason.message}`;
    case 'hold': {
      // Decision records and plan journals written before release-hold existed say a release as a hold without a reason.
      const why = action.reason as Reason | undefined;
      return why ? `hold ${action.jobId}: ${why.message}` : `release the hold on ${action.jobId}`;
    }
    case 'release-hold':
      return `release the hold on ${action.jobId}`;
  }
}
