import {
  GetMetricDataCommand,
  GetMetricStatisticsCommand,
  PutMetricDataCommand,
  type CloudWatchClient,
  type MetricDatum,
  type MetricDataQuery,
  type StandardUnit,
} from '@aws-sdk/client-cloudwatch';
import type {
  Clock,
  GpuMetricSample,
  GpuMetricSink,
  GpuMetricsSource,
  GpuSample,
  ServiceMetricSample,
  ServiceMetricSink,
} from '../../core/ports.ts';
import { translateAwsError } from './errors.ts';

/** Where the node agent publishes GPU metrics (per GPU, with the dimensions GpuIndex, InstanceId, NodeGroup). */
export const AGENT_METRICS = {
  namespace: 'GpuFleet',
  utilization: 'GpuUtilization',
  memoryUsed: 'GpuMemoryUsed',
  power: 'GpuPowerDraw',
  temperature: 'GpuTemperature',
  eccErrors: 'GpuUncorrectableEccErrors',
} as const;
/**
 * Replicas' own load figures, by service (each replica publishes its value once a minute: the
 * minute's Sum is the service's total), in a namespace of their own: the agent API publishes them
 * for the replica's machine (it checks the machine runs that replica), and the machines' role may
 * put metrics in the agents' namespace only, so no machine can move another service's replicas.
 */
export const SERVICE_METRICS_NAMESPACE = 'GpuFleet/Services';
export const SERVICE_METRICS = {
  'waiting-requests': 'ServiceWaitingRequests',
  'running-requests': 'ServiceRunningRequests',
} as const;

/** What the CloudWatch agent publishes for fleets that already run it (nvidia_gpu plugin). */
export const CWAGENT_METRICS = {
  namespace: 'CWAgent',
  utilization: 'nvidia_smi_utilization_gpu',
  memoryUsed: 'nvidia_smi_memory_used',
} as const;

/**
 * Per-GPU utilisation and memory of instances from CloudWatch, batched with GetMetricData
 * (≤ 500 queries a call, paginated). Both gpu-fleet's own metrics and the CloudWatch agent's
 * `nvidia_smi_*` metrics are searched; the agent's are used where gpu-fleet's are missing.
 */
export class CloudWatchGpuMetrics implements GpuMetricsSource {
  constructor(
    private readonly cw: CloudWatchClient,
    private readonly clock: Clock,
  ) {}

  async gpuSamples(instanceIds: readonly string[], windowSec: number): Promise<GpuSample[]> {
    const end = this.clock.nowMs();
    const start = end - Math.max(60, windowSec) * 1000;
    const queries: MetricDataQuery[] = [];
    instanceIds.forEach((id, i) => {
      for (const [src, m, dim, schema] of [
        ['g', AGENT_METRICS, 'GpuIndex', 'GpuIndex,InstanceId,NodeGroup'],
        ['c', CWAGENT_METRICS, 'index', 'InstanceId,index'],
      ] as const) {
        // A dynamic label names each series found by its GPU index.
        const label = `\${PROP('Dim.${dim}')}`;
        queries.push({
          Id: `${src}u${i}`,
          Expression: `SEARCH('{${m.namespace},${schema}} MetricName="${m.utilization}" InstanceId="${id}"', 'Average', 60)`,
          Label: label,
          ReturnData: true,
        });
        queries.push({
          Id: `${src}m${i}`,
          Expression: `SEARCH('{${m.namespace},${schema}} MetricName="${m.memoryUsed}" InstanceId="${id}"', 'Average', 60)`,
          Label: label,
          ReturnData: true,
        });
      }
    });
    const series = new Map<string, { label: string; at: number; value: number }[]>();
    for (let i = 0; i < queries.length; i += 500) {
      let token: string | undefined;
      do {
        let page;
        try {
          page = await this.cw.send(
            new GetMetricDataCommand({
              MetricDataQueries: queries.slice(i, i + 500),
              StartTime: new Date(start),
              EndTime: new Date(end),
              ScanBy: 'TimestampDescending',
              ...(token ? { NextToken: token } : {}),
            }),
          );
        } catch (error) {
          throw translateAwsError(error, { operation: 'get GPU metrics', resource: `${instanceIds.length} instances` });
        }
        for (const r of page.MetricDataResults ?? []) {
          const ts = r.Timestamps ?? [];
          const vs = r.Values ?? [];
          if (ts.length === 0 || vs.length === 0) continue;
          const list = series.get(r.Id!) ?? [];
          list.push({ label: r.Label ?? '', at: new Date(ts[0]!).getTime(), value: vs[0]! });
          series.set(r.Id!, list);
        }
        token = page.NextToken;
      } while (token);
    }
    const out: GpuSample[] = [];
    instanceIds.forEach((id, i) => {
      const own = series.get(`gu${i}`);
      const src = own && own.length > 0 ? 'g' : 'c';
      const util = series.get(`${src}u${i}`) ?? [];
      const mem = series.get(`${src}m${i}`) ?? [];
      util.forEach((u, k) => {
        const gpuIndex = /^\d+$/.test(u.label) ? Number(u.label) : k;
        const m = mem.find((x) => x.label === u.label) ?? mem[k];
        out.push({
          instanceId: id,
          gpuIndex,
          utilizationPct: Math.max(0, Math.min(100, u.value)),
          memoryUsedMiB: m ? Math.round(m.value) : 0,
          atMs: u.at,
        });
      });
    });
    return out;
  }
}

/**
 * The node agent's GPU metrics to CloudWatch: one datum per GPU and metric, with the dimensions
 * GpuIndex, InstanceId and NodeGroup (the set CloudWatchGpuMetrics searches), at most 1000 data a call.
 */
export class CloudWatchGpuMetricSink implements GpuMetricSink {
  constructor(
    private readonly cw: CloudWatchClient,
    private readonly namespace: string = AGENT_METRICS.namespace,
  ) {}

  async put(samples: readonly GpuMetricSample[]): Promise<void> {
    const data: MetricDatum[] = [];
    for (const s of samples) {
      const dims = [
        { Name: 'GpuIndex', Value: String(s.gpuIndex) },
        { Name: 'InstanceId', Value: s.instanceId },
        { Name: 'NodeGroup', Value: s.groupId },
      ];
      const add = (name: string, value: number | undefined, unit: StandardUnit) => {
        if (value !== undefined) data.push({ MetricName: name, Dimensions: dims, Timestamp: new Date(s.atMs), Value: value, Unit: unit });
      };
      add(AGENT_METRICS.utilization, s.utilizationPct, 'Percent');
      add(AGENT_METRICS.memoryUsed, s.memoryUsedMiB, 'Megabytes');
      add(AGENT_METRICS.power, s.powerDrawW, 'None');
      add(AGENT_METRICS.temperature, s.temperatureC, 'None');
      add(AGENT_METRICS.eccErrors, s.uncorrectableEccErrors, 'Count');
    }
    for (let i = 0; i < data.length; i += 1000) {
      try {
        await this.cw.send(new PutMetricDataCommand({ Namespace: this.namespace, MetricData: data.slice(i, i + 1000) }));
      } catch (error) {
        throw translateAwsError(error, { operation: 'put GPU metrics', resource: this.namespace });
      }
    }
  }
}

/** Publishes replicas' load figures in the services' namespace, by service. */
export class CloudWatchServiceMetricSink implements ServiceMetricSink {
  constructor(
    private readonly cw: CloudWatchClient,
    private readonly namespace: string = SERVICE_METRICS_NAMESPACE,
  ) {}

  async put(samples: readonly ServiceMetricSample[]): Promise<void> {
    const data: MetricDatum[] = samples.flatMap((s) => {
      const name = SERVICE_METRICS[s.metric as keyof typeof SERVICE_METRICS];
      return name
        ? [
            {
              MetricName: name,
              Dimensions: [{ Name: 'Service', Value: s.serviceId }],
              Timestamp: new Date(s.atMs),
              Value: s.value,
              Unit: 'Count' as const,
            },
          ]
        : [];
    });
    for (let i = 0; i < data.length; i += 1000) {
      try {
        await this.cw.send(new PutMetricDataCommand({ Namespace: this.namespace, MetricData: data.slice(i, i + 1000) }));
      } catch (error) {
        throw translateAwsError(error, { operation: 'put service metrics', resource: this.namespace });
      }
    }
  }
}

/**
 * What the checkpoint bucket holds by S3's own count: the newest daily `BucketSizeBytes` of its
 * Standard storage in the last three days (S3 publishes it once a day, for the whole bucket).
 * Undefined when the root is no S3 bucket or S3 has published nothing yet.
 */
export async function s3BucketBytes(
  cloudwatch: CloudWatchClient,
  checkpointRoot: string,
  clock: Clock,
): Promise<{ bytes: number; atMs: number; source: string } | undefined> {
  const bucket = /^s3:\/\/([^/]+)/.exec(checkpointRoot)?.[1] ?? (/^[a-z0-9][a-z0-9.-]+$/.test(checkpointRoot) ? checkpointRoot : undefined);
  if (!bucket) return undefined;
  const now = clock.nowMs();
  try {
    const out = await cloudwatch.send(
      new GetMetricStatisticsCommand({
        Namespace: 'AWS/S3',
        MetricName: 'BucketSizeBytes',
        Dimensions: [
          { Name: 'BucketName', Value: bucket },
          { Name: 'StorageType', Value: 'StandardStorage' },
        ],
        StartTime: new Date(now - 3 * 86_400_000),
        EndTime: new Date(now),
        Period: 86_400,
        Statistics: ['Average'],
      }),
    );
    const newest = (out.Datapoints ?? [])
      .filter((d) => d.Timestamp && d.Average !== undefined)
      .sort((a, b) => b.Timestamp!.getTime() - a.Timestamp!.getTime())[0];
    return newest
      ? { bytes: newest.Average!, atMs: newest.Timestamp!.getTime(), source: `CloudWatch AWS/S3 BucketSizeBytes of ${bucket}` }
      : undefined;
  } catch (error) {
    throw translateAwsError(error, { operation: 'get the checkpoint bucket size', resource: bucket });
  }
}
