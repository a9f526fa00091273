import { Logger } from '@aws-lambda-powertools/logger';
import { Metrics, MetricUnit } from '@aws-lambda-powertools/metrics';
import { Tracer } from '@aws-lambda-powertools/tracer';

/** gpu-fleet's CloudWatch namespace, for its own metrics (the agent publishes GPU metrics there too). */
export const METRICS_NAMESPACE = 'GpuFleet';

export interface Observability {
  readonly logger: Logger;
  readonly metrics: Metrics;
  readonly tracer: Tracer;
}

/** Logger (JSON, with correlation ids), metrics (EMF) and tracer (X-Ray) for one function. */
export function observability(serviceName: string): Observability {
  return {
    logger: new Logger({ serviceName }),
    metrics: new Metrics({ namespace: METRICS_NAMESPACE, serviceName }),
    tracer: new Tracer({ serviceName }),
  };
}

export { MetricUnit };
