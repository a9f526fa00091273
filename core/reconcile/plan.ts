/**
 * Plan: the planner (core/planner) over the snapshot, timed. Pure: it changes nothing; what the
 * plan says is applied by the apply step.
 */
import type { Plan } from '../plan.ts';
import { snapshotOf, type ReconcileContext } from './context.ts';

export function planOnce(ctx: ReconcileContext): { readonly plan: Plan; readonly planMs: number } {
  const t0 = ctx.options.stopwatch?.() ?? 0;
  const plan = ctx.options.planner(snapshotOf(ctx));
  return { plan, planMs: (ctx.options.stopwatch?.() ?? 0) - t0 };
}
