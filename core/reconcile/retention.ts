/**
 * Retention: a share of the checkpoint store past its retention is deleted (the sweep decides
 * which, by core/job.ts checkpointObjectExpired). A failure waits for the next reconcile; nothing
 * else depends on it, and it touches nothing but old checkpoint objects.
 */
import { CloudError } from '../errors.ts';
import type { ReconcileContext } from './context.ts';

export async function sweepCheckpoints(ctx: ReconcileContext): Promise<void> {
  await ctx.ports.checkpointSweep?.sweep().catch((error: unknown) => {
    if (!(error instanceof CloudError)) throw error;
  });
}
