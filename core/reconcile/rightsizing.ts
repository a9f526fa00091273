/**
 * Right-sizing: the measured runs of the jobs that ended lately are noted in their families'
 * history (core/services/rightsizing.ts), for intake to size the next ones. It writes the family
 * runs only.
 */
import { noteFinishedRuns } from '../services/rightsizing.ts';
import type { ReconcileContext } from './context.ts';

export async function noteRuns(ctx: ReconcileContext): Promise<void> {
  const { ports, nowMs, policy } = ctx;
  // Runs that ended in the last three intervals (a reconcile that failed is covered by the next; a run noted twice is kept once).
  if (ports.families)
    await noteFinishedRuns(ports.families, await ports.jobs.listEndedSince(nowMs - 3 * policy.reconcileIntervalSec * 1000, nowMs));
}
