/**
 * Every decision carries a reason: a machine-readable code and a sentence a person can read.
 * Codes are stable (scripts and dashboards key on them); messages may improve over time.
 */
export type ReasonCode =
  // placements and waiting
  | 'placed-on-free-capacity'
  | 'waiting-for-capacity'
  | 'waiting-for-boot'
  /** Its previous attempt may still run on a machine whose agent has not yet said it stopped (nor been fenced). */
  | 'waiting-for-stop'
  | 'no-offering-fits'
  /** No healthy group can hold it, and a cloud that might is left out because its calls fail. */
  | 'provider-degraded'
  | 'group-at-max'
  | 'offering-unavailable'
  | 'budget-hold'
  | 'budget-spot-only'
  /** The team's budget (action stop) is spent: its running work is checkpointed and requeued, and waits held. */
  | 'budget-stop'
  | 'team-gpu-cap'
  // scaling
  | 'scale-up-for-pending'
  | 'scale-in-idle'
  /** The machine's agent is silent (or never registered): it can run nothing. */
  | 'scale-in-unhealthy'
  | 'scale-in-consolidate'
  // interruptions and preemption
  | 'preempt-for-priority'
  | 'interrupted'
  | 'node-lost'
  /** The node's agent could not start the job there (no such MIG device free, the image would not start). */
  | 'start-failed'
  | 'deadline-on-demand'
  | 'deadline-spot-safe'
  | 'rebalance-to-spot'
  /** A person cancelled the job. */
  | 'cancelled'
  /** The node took longer than the grace period and the upload allowance to save a checkpoint it was asked for. */
  | 'checkpoint-timed-out'
  /** The node's agent could not renew its lease with the control plane: it checkpointed and stopped its work itself. */
  | 'fenced'
  /** The job's container passed its memory limit (its share of the machine) and the kernel killed it, alone. */
  | 'out-of-memory'
  /** The job filled its folder's disk (its share of the machine's) and ended failing. */
  | 'disk-full';

export interface Reason {
  readonly code: ReasonCode;
  readonly message: string;
}

export function reason(code: ReasonCode, message: string): Reason {
  return { code, message };
}
