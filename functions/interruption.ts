import type { BasePersistenceLayer } from '@aws-lambda-powertools/idempotency/persistence';
import { IdempotencyConfig } from '@aws-lambda-powertools/idempotency';
import { makeHandlerIdempotent } from '@aws-lambda-powertools/idempotency/middleware';
import { injectLambdaContext } from '@aws-lambda-powertools/logger/middleware';
import { logMetrics } from '@aws-lambda-powertools/metrics/middleware';
import middy from '@middy/core';
import type { Context } from 'aws-lambda';
import type { ReconcileTrigger } from '../core/ports.ts';
import { handleNotice, type InterruptionPorts } from '../core/services/interruption.ts';
import type { Policy } from '../core/snapshot.ts';
import { parseCloudEvent } from '../cloud/aws/events.ts';
import { MetricUnit, type Observability } from './observability.ts';
import { messageOf } from '../core/errors.ts';

export type { ReconcileTrigger };

export interface InterruptionDeps {
  readonly ports: InterruptionPorts;
  readonly policy: Policy;
  readonly trigger: ReconcileTrigger;
  readonly obs: Observability;
  /** Powertools idempotency store (DynamoDB): each event id is handled once within an hour. */
  readonly idempotency?: BasePersistenceLayer;
  /** Heartbeat timeout of gpu-fleet's terminate lifecycle hook, seconds. */
  readonly lifecycleTimeoutSec?: number;
  readonly timeoutEarlyInMillis?: number;
}

export type InterruptionResult =
  | {
      readonly status: 'handled';
      readonly summary: string;
      readonly requeued: readonly string[];
      readonly checkpointsRequested: readonly string[];
      readonly warnings: readonly string[];
    }
  | { readonly status: 'ignored'; readonly why: string }
  | { readonly status: 'invalid'; readonly error: string };

/**
 * Interruption: EventBridge rules deliver spot interruption warnings, rebalance
 * recommendations, instance state changes, terminate lifecycle actions and AWS Health
 * scheduled changes here. Each is parsed, handled by the interruption service (drain,
 * checkpoint, requeue, record the pool's risk) and, when capacity was lost, a reconcile is
 * triggered at once. A bad event is logged and skipped; events for machines gpu-fleet does not
 * manage are logged and ignored. Idempotent by event id (Powertools) and by job attempt (core).
 */
export function createInterruptionHandler(deps: InterruptionDeps) {
  const { logger, metrics } = deps.obs;
  const base = middy(
    async (event: unknown, _context: Context): Promise<InterruptionResult> => {
      const parsed = parseCloudEvent(event, {
        receivedAtMs: deps.ports.clock.nowMs(),
        ...(deps.lifecycleTimeoutSec !== undefined ? { lifecycleTimeoutSec: deps.lifecycleTimeoutSec } : {}),
      });
      if (parsed.kind === 'invalid') {
        logger.error('event skipped: not understood', { error: parsed.error });
        metrics.addMetric('EventsInvalid', MetricUnit.Count, 1);
        return { status: 'invalid', error: parsed.error };
      }
      if (parsed.kind === 'ignored') {
        logger.info('event ignored', { why: parsed.reason });
        return { status: 'ignored', why: parsed.reason };
      }
      for (const w of parsed.warnings) logger.warn(w, { eventId: parsed.notice.eventId });
      const out = await handleNotice(deps.ports, parsed.notice, deps.policy);
      if (out.status === 'ignored') {
        logger.info('event ignored', { why: out.why, eventId: parsed.notice.eventId });
        return { status: 'ignored', why: out.why };
      }
      metrics.addMetric(parsed.notice.kind === 'interruption-warning' ? 'SpotInterruptions' : 'NodeNotices', MetricUnit.Count, 1);
      if (out.requeued.length > 0) metrics.addMetric('JobsRequeued', MetricUnit.Count, out.requeued.length);
      logger.info(out.summary, {
        eventId: parsed.notice.eventId,
        kind: parsed.notice.kind,
        requeued: out.requeued,
        checkpointsRequested: out.checkpointsRequested,
      });
      if (out.reconcileSoon) {
        try {
          await deps.trigger.reconcileSoon(`${parsed.notice.kind} ${parsed.notice.eventId}`);
        } catch (error) {
          // The scheduled reconcile will choose replacement capacity within a minute anyway.
          logger.warn('could not trigger a reconcile now', { error: messageOf(error) });
        }
      }
      return {
        status: 'handled',
        summary: out.summary,
        requeued: out.requeued,
        checkpointsRequested: out.checkpointsRequested,
        warnings: parsed.warnings,
      };
    },
    { timeoutEarlyInMillis: deps.timeoutEarlyInMillis ?? 1000 },
  )
    .use(injectLambdaContext(logger, { resetKeys: true }))
    .use(logMetrics(metrics));
  if (deps.idempotency) {
    base.use(
      makeHandlerIdempotent({
        persistenceStore: deps.idempotency,
        config: new IdempotencyConfig({ eventKeyJmesPath: 'id', expiresAfterSeconds: 3600, throwOnNoIdempotencyKey: false }),
      }),
    );
  }
  return base;
}
