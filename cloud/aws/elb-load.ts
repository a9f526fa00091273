/**
 * A service's load on AWS, from its Application Load Balancer target group's CloudWatch metric
 * `RequestCountPerTarget` (namespace AWS/ApplicationELB, dimension TargetGroup, Sum per minute):
 * requests per second per target over the newest complete minute, times the targets AWS divides
 * the group's requests by (its healthy targets, or all registered ones when none is healthy, as
 * the metric is defined), is the service's total the autoscaler spreads over its replicas.
 * Replicas still booting, failing their checks or draining are not among the divisors: counting
 * them (as the running replicas) inflated the load during every scale-up. Waiting and running requests
 * come from the replicas themselves (their agents publish them, `ServiceWaitingRequests` and
 * `ServiceRunningRequests` by Service): the newest minute's Sum over the replicas.
 */
import { GetMetricDataCommand, type CloudWatchClient } from '@aws-sdk/client-cloudwatch';
import type { Clock, FrontDoor, ServiceLoadSource } from '../../core/ports.ts';
import type { ServiceMetric } from '../../core/serving/autoscale.ts';
import type { ServiceRecord } from '../../core/serving/service.ts';
import { SERVICE_METRICS, SERVICE_METRICS_NAMESPACE } from './cloudwatch-metrics.ts';
import { translateAwsError } from './errors.ts';

/** The TargetGroup dimension of a target group's ARN ("targetgroup/name/id"). */
export function targetGroupDimension(arn: string): string {
  const i = arn.indexOf(':targetgroup/');
  return i >= 0 ? arn.slice(i + 1) : arn;
}

export class ElbRequestLoad implements ServiceLoadSource {
  constructor(
    private readonly cw: CloudWatchClient,
    private readonly clock: Clock,
    /** Service id → target group ARN. */
    private readonly targetGroups: Readonly<Record<string, string>>,
    /** The target groups' health (the services' front door, DescribeTargetHealth). */
    private readonly frontDoor: Pick<FrontDoor, 'targets'>,
  ) {}

  async read(service: ServiceRecord): Promise<Partial<Record<ServiceMetric, number>>> {
    const arn = this.targetGroups[service.id];
    if (!arn) return {};
    const targets = await this.frontDoor.targets(service.id);
    const healthy = targets.filter((t) => t.state === 'healthy').length;
    const registered = targets.filter((t) => t.state !== 'draining' && t.state !== 'unused').length;
    const divisor = healthy > 0 ? healthy : registered;
    const end = Math.floor(this.clock.nowMs() / 60_000) * 60_000;
    try {
      const out = await this.cw.send(
        new GetMetricDataCommand({
          StartTime: new Date(end - 5 * 60_000),
          EndTime: new Date(end),
          ScanBy: 'TimestampDescending',
          MetricDataQueries: [
            // The replicas' own figures, as their agents published them: the minute's Sum over the replicas.
            ...Object.entries(SERVICE_METRICS).map(([metric, name]) => ({
              Id: metric === 'waiting-requests' ? 'waiting' : 'running',
              MetricStat: {
                Metric: { Namespace: SERVICE_METRICS_NAMESPACE, MetricName: name, Dimensions: [{ Name: 'Service', Value: service.id }] },
                Period: 60,
                Stat: 'Sum',
              },
            })),
            {
              Id: 'perTarget',
              MetricStat: {
                Metric: {
                  Namespace: 'AWS/ApplicationELB',
                  MetricName: 'RequestCountPerTarget',
                  Dimensions: [{ Name: 'TargetGroup', Value: targetGroupDimension(arn) }],
                },
                Period: 60,
                Stat: 'Sum',
              },
            },
          ],
        }),
      );
      const newest = out.MetricDataResults?.find((r) => r.Id === 'perTarget')?.Values?.[0];
      // No datapoint: no request reached the group in the window (the metric is only published when there are requests).
      const perTargetPerSec = (newest ?? 0) / 60;
      const newestOf = (id: string) => out.MetricDataResults?.find((r) => r.Id === id)?.Values?.[0];
      const waiting = newestOf('waiting');
      const inFlight = newestOf('running');
      return {
        'requests-per-second': perTargetPerSec * Math.max(1, divisor),
        ...(waiting !== undefined ? { 'waiting-requests': waiting } : {}),
        ...(inFlight !== undefined ? { 'running-requests': inFlight } : {}),
      };
    } catch (error) {
      throw translateAwsError(error, { operation: 'GetMetricData (RequestCountPerTarget)', resource: arn });
    }
  }
}
