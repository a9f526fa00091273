/**
 * Services: each service decides its replicas (start, replace, stop) before the planner reads the
 * queue, so new replicas are placed in this turn's plan. It writes services' records, replica jobs
 * and the front door's registrations (core/services/serving.ts); it never scales machines.
 */
import { reconcileServices } from '../services/serving.ts';
import { reread, type ReconcileContext } from './context.ts';

export async function runServices(ctx: ReconcileContext): Promise<void> {
  const { ports } = ctx;
  if (!ports.services) return;
  ctx.services = await reconcileServices({ ...ports, services: ports.services }, ctx.world, ctx.nowMs, {
    intervalSec: ctx.policy.reconcileIntervalSec,
    bootSec: ctx.policy.expectedBootSec,
  });
  if (ctx.services.started > 0 || ctx.services.cancelled > 0) await reread(ctx);
}
