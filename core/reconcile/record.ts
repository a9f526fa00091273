/**
 * Record: the decision record of the turn (its inputs, the plan, what is degraded, the services'
 * decisions, the control plane's silence, the teams' budgets), written once before anything is
 * applied and again with what applying it did. It writes the decision log only.
 */
import { budgetStatus } from '../budget.ts';
import type { Job } from '../job.ts';
import type { ActionFailure, Plan } from '../plan.ts';
import type { DecisionRecord } from '../ports.ts';
import type { WorldView } from '../services/snapshot-reader.ts';
import { snapshotOf, type ReconcileContext, type ReconcilePorts } from './context.ts';

/** The decision as planned, recorded before any action is applied. */
export async function recordDecision(ctx: ReconcileContext, plan: Plan, planMs: number): Promise<DecisionRecord> {
  const { ports, world, nowMs, services, silence } = ctx;
  const snapshot = snapshotOf(ctx);
  const degraded = world.degraded.length > 0 ? await degradedSince(ports, world, nowMs) : [];
  const base: DecisionRecord = {
    ...(degraded.length > 0 ? { degraded } : {}),
    id: `decision-${String(nowMs).padStart(15, '0')}`,
    atMs: nowMs,
    dryRun: ctx.options.dryRun ?? false,
    inputs: {
      pendingJobs: snapshot.pendingJobs.length,
      activeJobs: snapshot.activeJobs.length,
      nodes: snapshot.nodes.length,
      groups: snapshot.groups.map((g) => ({ id: g.id, desired: g.desiredCapacity, min: g.minSize, max: g.maxSize })),
    },
    plan,
    applied: 0,
    errors: [],
    planMs,
    ...(services && services.decisions.length > 0 ? { services: services.decisions } : {}),
    ...(silence.zones.length > 0 ? { controlPlaneSilence: silence.zones } : {}),
    ...rightsizedIn(plan, snapshot.pendingJobs),
    teams: [...snapshot.teams.values()].map((t) => {
      const spentMicroUsd = snapshot.spendMicroUsd.get(t.id) ?? 0;
      const committedMicroUsd = snapshot.committedMicroUsd?.get(t.id) ?? 0;
      return { ...t, spentMicroUsd, committedMicroUsd, state: budgetStatus(t, spentMicroUsd, committedMicroUsd).state };
    }),
  };
  await ports.decisions.record(base);
  return base;
}

/** The decision with what applying it did. */
export async function recordOutcome(
  ctx: ReconcileContext,
  base: DecisionRecord,
  outcome: { readonly applied: number; readonly errors: ActionFailure[] },
): Promise<DecisionRecord> {
  const decision: DecisionRecord = { ...base, applied: outcome.applied, errors: outcome.errors };
  await ctx.ports.decisions.record(decision);
  return decision;
}

/** The jobs the plan places whose shape right-sizing chose at intake, for the decision record. */
function rightsizedIn(plan: Plan, pending: readonly Job[]): Pick<DecisionRecord, 'rightsized'> {
  const placed = new Set(plan.actions.flatMap((a) => (a.kind === 'place' ? [a.jobId] : [])));
  const rightsized = pending
    .filter((j) => placed.has(j.id) && j.rightsize?.applied && j.rightsize.to)
    .map((j) => ({ jobId: j.id, from: j.rightsize!.from, to: j.rightsize!.to!, why: j.rightsize!.why }));
  return rightsized.length > 0 ? { rightsized } : {};
}

/** What is degraded in this reconcile, each with when it first failed (carried over from the newest decision that had it). */
async function degradedSince(ports: ReconcilePorts, world: WorldView, nowMs: number): Promise<NonNullable<DecisionRecord['degraded']>> {
  const [previous] = await ports.decisions.recent(1);
  return world.degraded.map((d) => ({
    ...d,
    sinceMs: previous?.degraded?.find((p) => p.cloud === d.cloud && p.scope === d.scope)?.sinceMs ?? nowMs,
  }));
}
