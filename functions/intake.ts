import type { ImagePolicy } from '../core/images.ts';
import { BatchProcessor, EventType, processPartialResponse } from '@aws-lambda-powertools/batch';
import { injectLambdaContext } from '@aws-lambda-powertools/logger/middleware';
import { logMetrics } from '@aws-lambda-powertools/metrics/middleware';
import middy from '@middy/core';
import type { Context, SQSBatchResponse, SQSEvent, SQSRecord } from 'aws-lambda';
import { isCloudError, messageOf } from '../core/errors.ts';
import type { Clock, DeadLetter, JobStore, ServiceStore } from '../core/ports.ts';
import { intake, type FleetShape } from '../core/services/intake.ts';
import type { RightsizePorts } from '../core/services/rightsizing.ts';
import { MetricUnit, type Observability } from './observability.ts';

export type { DeadLetter };

export interface IntakeDeps {
  readonly jobs: JobStore;
  readonly clock: Clock;
  readonly deadLetter: DeadLetter;
  /** The team whose queue this is, from the queue ARN; undefined for a queue that is not a team queue. */
  readonly teamOfQueue: (queueArn: string) => string | undefined;
  /** The node groups a job could run on, to record at intake a job none of them can ever hold; absent: not checked. */
  readonly fleetShape?: FleetShape;
  /** Service records, when the fleet runs services (GPU_FLEET_SERVICE_TARGET_GROUPS); without them a service spec is rejected, saying why. */
  readonly services?: ServiceStore;
  /** Right-sizing's family runs and the catalogue's GPU models, for specs with `gpu.rightsize`; absent: such specs keep their shape. */
  readonly rightsizing?: RightsizePorts;
  /** The fleet's rules on images (GPU_FLEET_IMAGE_POLICY); absent: only the rules that always hold. */
  readonly images?: ImagePolicy;
  /** The ports the machines keep to the load balancers (GPU_FLEET_SERVICE_PORTS); absent: not checked. */
  readonly servicePorts?: readonly number[];
  readonly obs: Observability;
  readonly timeoutEarlyInMillis?: number;
}

/** The message attribute a submitter may set to make resubmissions of the same job idempotent. */
export const TOKEN_ATTRIBUTE = 'gpu-fleet-token';

/**
 * Team queue names are `${prefix}${team}`; the ARN's last part is the queue name. The team is
 * never read from the message body.
 */
export function teamFromQueueArn(prefix: string): (queueArn: string) => string | undefined {
  return (arn) => {
    const name = arn.split(':').pop() ?? '';
    return name.startsWith(prefix) && name.length > prefix.length ? name.slice(prefix.length) : undefined;
  };
}

/**
 * Intake: an SQS event source on every team queue. Each message becomes a pending job (once,
 * however often it is delivered) or a rejected job that keeps the body and the reasons; the
 * rest of the batch goes on (partial batch responses). Only transient store failures are
 * retried; a message that cannot be attributed to a team goes to the dead-letter queue with
 * its reason. Nothing is dropped silently.
 */
export function createIntakeHandler(deps: IntakeDeps) {
  const { logger, metrics } = deps.obs;
  const processor = new BatchProcessor(EventType.SQS);

  const record = async (r: SQSRecord): Promise<string> => {
    const token = r.messageAttributes?.[TOKEN_ATTRIBUTE]?.stringValue ?? r.messageId;
    const log = logger.createChild({ persistentKeys: { messageId: r.messageId, queue: r.eventSourceARN } });
    const team = deps.teamOfQueue(r.eventSourceARN);
    if (team === undefined) {
      const reason = `queue ${r.eventSourceARN} is not a gpu-fleet team queue, so the message cannot be attributed to a team`;
      await deps.deadLetter.send({ body: r.body, reason, sourceQueueArn: r.eventSourceARN, messageId: r.messageId });
      log.error('message sent to the dead-letter queue', { reason });
      metrics.addMetric('JobsDeadLettered', MetricUnit.Count, 1);
      return 'dead-lettered';
    }
    try {
      const out = await intake(
        {
          jobs: deps.jobs,
          clock: deps.clock,
          fleetShape: deps.fleetShape,
          ...(deps.services ? { services: deps.services } : {}),
          ...(deps.rightsizing ? { rightsizing: deps.rightsizing } : {}),
          ...(deps.images ? { images: deps.images } : {}),
          ...(deps.servicePorts ? { servicePorts: deps.servicePorts } : {}),
        },
        { team, body: r.body, token, ...sentAt(r.attributes?.SentTimestamp) },
      );
      switch (out.outcome) {
        case 'accepted':
          log.info('job accepted', { jobId: out.job.id, team, ...(out.job.rightsize ? { rightsize: out.job.rightsize } : {}) });
          if (out.job.rightsize?.applied) metrics.addMetric('JobsRightsized', MetricUnit.Count, 1);
          metrics.addMetric('JobsAccepted', MetricUnit.Count, 1);
          return out.job.id;
        case 'duplicate':
          log.info('duplicate delivery: the job already exists', { jobId: out.job.id, team });
          metrics.addMetric('JobsDuplicate', MetricUnit.Count, 1);
          return out.job.id;
        case 'token-reused':
          // The stored job stands; a retry would meet the same answer, so the message is not failed.
          log.warn('token reused with a different spec: not taken', { jobId: out.job.id, team, error: out.error });
          metrics.addMetric('JobsTokenReused', MetricUnit.Count, 1);
          return out.job.id;
        case 'rejected':
          log.warn('job rejected', { jobId: out.job.id, team, errors: out.errors });
          metrics.addMetric('JobsRejected', MetricUnit.Count, 1);
          return out.job.id;
        case 'service':
          if (out.stale) {
            log.warn('service message older than the spec in force; nothing changed', { serviceId: out.service.id, team });
            return out.service.id;
          }
          log.info(out.created ? 'service created' : 'service updated', { serviceId: out.service.id, team });
          metrics.addMetric('ServicesTaken', MetricUnit.Count, 1);
          return out.service.id;
        case 'unattributable':
          await deps.deadLetter.send({ body: r.body, reason: out.error, sourceQueueArn: r.eventSourceARN, messageId: r.messageId });
          log.error('message sent to the dead-letter queue', { reason: out.error });
          metrics.addMetric('JobsDeadLettered', MetricUnit.Count, 1);
          return 'dead-lettered';
      }
    } catch (error) {
      // Only failures of the store reach here; retryable ones are retried by SQS (then dead-lettered by the redrive policy).
      log.error('intake failed; the message will be retried', {
        error: messageOf(error),
        retryable: isCloudError(error) ? error.retryable : false,
      });
      throw error;
    }
  };

  return middy(
    async (event: SQSEvent, context: Context): Promise<SQSBatchResponse> => processPartialResponse(event, record, processor, { context }),
    {
      timeoutEarlyInMillis: deps.timeoutEarlyInMillis ?? 1000,
    },
  )
    .use(injectLambdaContext(logger, { resetKeys: true }))
    .use(logMetrics(metrics));
}

/** SQS's SentTimestamp (epoch milliseconds, kept by a redelivery), when the record carries one. */
function sentAt(value: string | undefined): { sentAtMs?: number } {
  const ms = Number(value);
  return value !== undefined && Number.isSafeInteger(ms) && ms > 0 ? { sentAtMs: ms } : {};
}
