/**
 * One turn of the control loop, as a sequence of steps over one context (./context.ts), each its
 * own module saying what it decides and what it must not touch:
 *
 *   1. apply      finish a plan a killed predecessor left half-applied
 *   2. notices    interruptions found by looking (GCP), then machines held by a terminate hook
 *   3. lost work  requeue the work of lost machines; silences that are the control plane's fault
 *   4. services   each service's replicas, before the planner reads the queue
 *   5. reservations  drain machines of reservations about to end
 *   6. meters and spend  pool exposure, machine meters, the teams' ledger
 *   7. plan       the planner over the snapshot
 *   8. record     the decision, before anything is applied
 *   9. apply      journal and apply the plan; idle marks, protection, hooks, forgotten records
 *  10. right-sizing  the runs that ended lately, for intake
 *  11. retention  a share of the checkpoint store past its retention
 *  12. record     the decision with what applying it did
 *
 * Under a lease, so one reconciler acts at a time; every step is idempotent, so a run that dies
 * half-way is repaired by the next. A dry run reads, plans and records only.
 */
import type { Job } from '../job.ts';
import type { DecisionRecord } from '../ports.ts';
import type { PolledNotices } from '../services/interruption.ts';
import type { Snapshot } from '../snapshot.ts';
import { applyDecision, resumeUnfinished } from './apply.ts';
import { openContext, readSnapshot, type ReconcileOptions, type ReconcilePorts } from './context.ts';
import { leaseTtlMs, RECONCILE_LEASE } from './lease.ts';
import { judgeSilence, requeueLost } from './lost-work.ts';
import { countSpend } from './meters.ts';
import { drainHeld, pollCloudNotices } from './notices.ts';
import { planOnce } from './plan.ts';
import { recordDecision, recordOutcome } from './record.ts';
import { drainReservations } from './reservations.ts';
import { noteRuns } from './rightsizing.ts';
import { sweepCheckpoints } from './retention.ts';
import { runServices } from './services.ts';

export { applyPlan, JOB_WRITE_CONCURRENCY } from './apply.ts';
export type { Planner, ReconcileContext, ReconcileOptions, ReconcilePorts } from './context.ts';
export { leaseTtlMs, RECONCILE_LEASE, resumeCutoffMs } from './lease.ts';
export { checkpointOverdue, lostReason, requeueLostWork, silenceOf } from './lost-work.ts';
export { POOL_NOTE_EVERY_MS, poolNoteDue } from './meters.ts';
export { drainHeldMachines } from './notices.ts';
export { drainEndingReservations } from './reservations.ts';

export type ReconcileOutcome =
  | { readonly status: 'skipped'; readonly reason: string }
  | {
      readonly status: 'done';
      readonly decision: DecisionRecord;
      readonly snapshot: Snapshot;
      readonly lostJobsRequeued: number;
      /** Actions of an unfinished earlier plan applied before this one (a predecessor crashed half-way). */
      readonly resumed: number;
      /** What polling the notice sources found (absent without sources, and on a dry run). */
      readonly polled?: PolledNotices;
    };

export async function reconcile(ports: ReconcilePorts, options: ReconcileOptions): Promise<ReconcileOutcome> {
  const holder = options.holder ?? 'reconciler';
  const startMs = ports.clock.nowMs();
  if (ports.lease && !(await ports.lease.acquire(RECONCILE_LEASE, holder, startMs, leaseTtlMs(options.policy)))) {
    return { status: 'skipped', reason: 'another reconciler holds the lease' };
  }
  try {
    const acting = !options.dryRun;
    const resumed = acting ? await resumeUnfinished(ports, options.policy) : 0;
    // Preemptions no cloud pushed (GCP): found by looking, handled like events, before the fleet is read.
    const polled = acting ? await pollCloudNotices(ports, options.policy) : undefined;
    const ctx = await openContext(ports, options);
    // Machines that fell silent together while their cloud lists them running: the control path's fault, not theirs.
    judgeSilence(ctx);
    if (acting) {
      await drainHeld(ctx);
      await requeueLost(ctx);
      await runServices(ctx);
    }
    const snapshot = await readSnapshot(ctx);
    if (acting) {
      await drainReservations(ctx);
      await countSpend(ctx);
    }
    const { plan, planMs } = planOnce(ctx);
    const base = await recordDecision(ctx, plan, planMs);
    const done = { status: 'done' as const, lostJobsRequeued: ctx.lostJobsRequeued, resumed };
    if (!acting) return { ...done, decision: base, snapshot: ctx.snapshot ?? snapshot };
    const outcome = await applyDecision(ctx, base);
    await noteRuns(ctx);
    await sweepCheckpoints(ctx);
    const decision = await recordOutcome(ctx, base, outcome);
    return { ...done, decision, snapshot: ctx.snapshot ?? snapshot, ...(polled ? { polled } : {}) };
  } finally {
    if (ports.lease) await ports.lease.release(RECONCILE_LEASE, holder);
  }
}

/** Counts jobs by state, for summaries. */
export function countByState(jobs: readonly Job[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const j of jobs) out[j.state] = (out[j.state] ?? 0) + 1;
  return out;
}
