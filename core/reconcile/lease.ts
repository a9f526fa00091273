/** The reconcile lease and how long an unfinished plan may still be resumed. */
import type { Policy } from '../snapshot.ts';

export const RECONCILE_LEASE = 'reconcile';

/**
 * How long a reconcile holds its lease: two intervals (at least a minute). A run killed by its
 * timeout never releases it, so its successor gets the lease only when this runs out.
 */
export function leaseTtlMs(policy: Policy): number {
  return Math.max(2 * policy.reconcileIntervalSec * 1000, 60_000);
}

/**
 * How old an unfinished plan may be and still be resumed: the lease's TTL plus two intervals, so
 * the first run after a killed one's lease has run out (a schedule that fires late included)
 * finishes its plan instead of abandoning it.
 */
export function resumeCutoffMs(policy: Policy): number {
  return leaseTtlMs(policy) + 2 * policy.reconcileIntervalSec * 1000;
}
