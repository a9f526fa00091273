import { injectLambdaContext } from '@aws-lambda-powertools/logger/middleware';
import { logMetrics } from '@aws-lambda-powertools/metrics/middleware';
import middy from '@middy/core';
import type { Context } from 'aws-lambda';
import '../core/schema.ts';
import * as z from 'zod/mini';
import type { ActionFailure } from '../core/plan.ts';
import type { JobQueue, QueueDepth } from '../core/ports.ts';
import { reconcileMetrics } from '../core/services/metrics.ts';
import { reconcile, type Planner, type ReconcilePorts } from '../core/reconcile/reconcile.ts';
import type { TeamMemory } from '../core/services/snapshot-reader.ts';
import type { Policy } from '../core/snapshot.ts';
import { type Observability } from './observability.ts';
import { messageOf } from '../core/errors.ts';

export interface ReconcileDeps {
  readonly ports: ReconcilePorts;
  readonly queue: JobQueue;
  readonly planner: Planner;
  readonly policy: Policy;
  readonly obs: Observability;
  readonly timeoutEarlyInMillis?: number;
}

/** The scheduled event, an EventBridge "Scheduled Event", or a direct invocation `{ "dryRun": true }`. */
const ReconcileEvent = z.looseObject({ dryRun: z.optional(z.boolean()), reason: z.optional(z.string().check(z.maxLength(200))) });

export interface ReconcileResult {
  readonly status: 'done' | 'skipped';
  readonly decisionId?: string;
  readonly dryRun: boolean;
  readonly actions: number;
  readonly applied: number;
  readonly waiting: number;
  /** Actions that could not be applied, with their code and resource. */
  readonly errors: readonly ActionFailure[];
  readonly lostJobsRequeued: number;
  readonly resumedActions: number;
  /** Interruptions found by polling (GCP preemptions) and handled before planning. */
  readonly polledNotices?: number;
  readonly why?: string;
}

/** Budget tags keep their last valid values across runs of one Lambda container. */
const teamMemory: TeamMemory = new Map();

/**
 * Reconcile: every minute (an EventBridge schedule), and soon after new jobs or lost capacity
 * (invoked by the interruption function). Takes the lease, requeues lost work, plans, records
 * the decision, applies it through the plan journal, and publishes the loop's metrics.
 */
export function createReconcileHandler(deps: ReconcileDeps) {
  const { logger, metrics } = deps.obs;
  return middy(
    async (event: unknown, context: Context): Promise<ReconcileResult> => {
      const parsed = ReconcileEvent.safeParse(event ?? {});
      const dryRun = parsed.success ? (parsed.data.dryRun ?? false) : false;
      if (!parsed.success) logger.warn('reconcile event not understood; running a normal reconcile', { error: parsed.error.message });
      const out = await reconcile(deps.ports, {
        planner: deps.planner,
        policy: deps.policy,
        dryRun,
        holder: context.awsRequestId || `reconcile-${deps.ports.clock.nowMs()}`,
        teamMemory,
        stopwatch: () => performance.now(),
      });
      if (out.status === 'skipped') {
        logger.info('reconcile skipped', { why: out.reason });
        return {
          status: 'skipped',
          dryRun,
          actions: 0,
          applied: 0,
          waiting: 0,
          errors: [],
          lostJobsRequeued: 0,
          resumedActions: 0,
          why: out.reason,
        };
      }
      const d = out.decision;
      const polled = out.polled;
      if (polled && polled.seen > 0)
        logger.info('polled interruption notices', { seen: polled.seen, handled: polled.handled, requeued: polled.requeued });
      for (const e of polled?.errors ?? []) logger.warn('interruption notices unavailable', { error: e });
      const depths = new Map<string, QueueDepth>();
      for (const team of await deps.queue.teams().catch(() => [] as string[])) {
        try {
          depths.set(team, await deps.queue.depth(team));
        } catch (error) {
          logger.warn('queue depth unavailable', { team, error: messageOf(error) });
        }
      }
      for (const m of reconcileMetrics(out.snapshot, d, depths)) {
        if (m.dimensions) {
          const single = metrics.singleMetric();
          for (const [k, v] of Object.entries(m.dimensions)) single.addDimension(k, v);
          single.addMetric(m.name, m.unit, m.value);
        } else {
          metrics.addMetric(m.name, m.unit, m.value);
        }
      }
      logger.info('reconciled', {
        decisionId: d.id,
        dryRun,
        pending: d.inputs.pendingJobs,
        active: d.inputs.activeJobs,
        actions: d.plan.actions.length,
        applied: d.applied,
        errors: d.errors,
        planMs: Math.round(d.planMs),
        lostJobsRequeued: out.lostJobsRequeued,
        resumedActions: out.resumed,
      });
      return {
        status: 'done',
        decisionId: d.id,
        dryRun,
        actions: d.plan.actions.length,
        applied: d.applied,
        waiting: d.plan.waiting.length,
        errors: d.errors,
        lostJobsRequeued: out.lostJobsRequeued,
        resumedActions: out.resumed,
        ...(polled ? { polledNotices: polled.handled } : {}),
      };
    },
    { timeoutEarlyInMillis: deps.timeoutEarlyInMillis ?? 1000 },
  )
    .use(injectLambdaContext(logger, { resetKeys: true }))
    .use(logMetrics(metrics));
}
