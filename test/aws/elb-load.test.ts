import { CloudWatchClient, GetMetricDataCommand } from '@aws-sdk/client-cloudwatch';
import { mockClient } from 'aws-sdk-client-mock';
import { describe, expect, it } from 'vitest';
import { ElbRequestLoad, targetGroupDimension } from '../../cloud/aws/elb-load.ts';
import { isCloudError } from '../../core/errors.ts';
import { newPendingJob, type Job } from '../../core/job.ts';
import { checkJobSpec } from '../../core/job-spec.ts';
import { newServiceRecord } from '../../core/serving/service.ts';
import { awsError } from '../support/fake-aws.ts';

const ARN = 'arn:aws:elasticloadbalancing:us-west-2:123456789012:targetgroup/gf-nlp-chat/50dc6c495c0c9188';
const NOW = Date.UTC(2026, 11, 2, 10, 30, 20);
const check = checkJobSpec({
  name: 'chat',
  image: 'vllm/vllm-openai:v0.6.3',
  command: ['--port', '8000'],
  gpu: { kind: 'whole', count: 1 },
  service: { port: 8000, replicas: { min: 1, max: 4 }, targets: [{ metric: 'requests-per-second', perReplica: 2 }] },
});
if (!check.ok) throw new Error(check.errors.join('; '));
const record = newServiceRecord('nlp', check.spec, NOW);
const running = (n: number): Job[] =>
  Array.from({ length: n }, (_, i) => ({
    ...newPendingJob({ id: `nlp.chat-r${i}`, team: 'nlp', spec: check.spec, submittedAtMs: NOW }),
    state: 'running' as const,
  }));

describe('service load from the load balancer (RequestCountPerTarget)', () => {
  it('reads the target group’s newest minute and makes it the service’s requests per second', async () => {
    const cw = new CloudWatchClient({ region: 'us-west-2' });
    const mock = mockClient(cw);
    // Shape of a GetMetricData answer (API reference): newest first with ScanBy TimestampDescending.
    mock.on(GetMetricDataCommand).resolves({
      MetricDataResults: [
        { Id: 'perTarget', StatusCode: 'Complete', Values: [150, 90], Timestamps: [] },
        { Id: 'waiting', StatusCode: 'Complete', Values: [14], Timestamps: [] },
        { Id: 'running', StatusCode: 'Complete', Values: [], Timestamps: [] },
      ],
    });
    const load = new ElbRequestLoad(cw, { nowMs: () => NOW }, { 'nlp.chat': ARN });
    // 150 requests per target in a minute, three replicas: 7.5 requests per second in all; the replicas' own waiting requests summed.
    expect(await load.read(record, running(3))).toEqual({ 'requests-per-second': 7.5, 'waiting-requests': 14 });
    const input = mock.commandCalls(GetMetricDataCommand)[0]!.args[0].input;
    expect(input.MetricDataQueries!.find((q) => q.Id === 'waiting')!.MetricStat).toEqual({
      Metric: { Namespace: 'GpuFleet', MetricName: 'ServiceWaitingRequests', Dimensions: [{ Name: 'Service', Value: 'nlp.chat' }] },
      Period: 60,
      Stat: 'Sum',
    });
    expect(input.MetricDataQueries!.find((q) => q.Id === 'perTarget')!.MetricStat).toEqual({
      Metric: {
        Namespace: 'AWS/ApplicationELB',
        MetricName: 'RequestCountPerTarget',
        Dimensions: [{ Name: 'TargetGroup', Value: 'targetgroup/gf-nlp-chat/50dc6c495c0c9188' }],
      },
      Period: 60,
      Stat: 'Sum',
    });
    // Whole minutes only: the window ends at the start of the current minute.
    expect(input.EndTime).toEqual(new Date(Date.UTC(2026, 11, 2, 10, 30, 0)));
  });

  it('no datapoint is no load; a service without a target group reports nothing; errors in the port’s words', async () => {
    const cw = new CloudWatchClient({ region: 'us-west-2' });
    const mock = mockClient(cw);
    mock.on(GetMetricDataCommand).resolves({ MetricDataResults: [{ Id: 'perTarget', Values: [] }] });
    const load = new ElbRequestLoad(cw, { nowMs: () => NOW }, { 'nlp.chat': ARN });
    expect(await load.read(record, running(2))).toEqual({ 'requests-per-second': 0 });
    expect(await new ElbRequestLoad(cw, { nowMs: () => NOW }, {}).read(record, running(2))).toEqual({});
    mock.on(GetMetricDataCommand).rejects(awsError('Throttling', 'Rate exceeded'));
    await expect(load.read(record, running(1))).rejects.toSatisfy((e) => isCloudError(e, 'throttled'));
    expect(targetGroupDimension(ARN)).toBe('targetgroup/gf-nlp-chat/50dc6c495c0c9188');
  });
});
