import { Logger } from '@aws-lambda-powertools/logger';
import { Metrics, MetricUnit } from '@aws-lambda-powertools/metrics';

/** gpu-fleet's CloudWatch namespace, for its own metrics (the agent publishes GPU metrics there too). */
export const METRICS_NAMESPACE = 'GpuFleet';

export interface Observability {
  readonly logger: Logger;
  readonly metrics: Metrics;
}

/**
 * Logger (JSON, with correlation ids) and metrics (EMF) for one function. Traces are Lambda's own
 * active tracing (one segment per invocation); the Powertools tracer is not used: its X-Ray SDK
 * weighed 120 KiB in every bundle and hooks every promise of the process.
 */
export function observability(serviceName: string): Observability {
  return {
    logger: new Logger({ serviceName }),
    metrics: new Metrics({ namespace: METRICS_NAMESPACE, serviceName }),
  };
}

export { MetricUnit };
