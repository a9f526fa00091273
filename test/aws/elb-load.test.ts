import { CloudWatchClient, GetMetricDataCommand } from '@aws-sdk/client-cloudwatch';
import { ElasticLoadBalancingV2Client } from '@aws-sdk/client-elastic-load-balancing-v2';
import { mockClient } from 'aws-sdk-client-mock';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ElbFrontDoor } from '../../cloud/aws/elb-front-door.ts';
import { ElbRequestLoad, targetGroupDimension } from '../../cloud/aws/elb-load.ts';
import { isCloudError } from '../../core/errors.ts';
import { checkJobSpec } from '../../core/job-spec.ts';
import { newServiceRecord } from '../../core/serving/service.ts';
import { awsError } from '../support/fake-aws.ts';
import { startFakeElb, type FakeElb } from '../support/fake-elb.ts';

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

// The target group behind the load: a local ELB v2 endpoint whose health checks the test decides.
let elb: FakeElb;
const answering = new Set<string>();
beforeAll(async () => {
  elb = await startFakeElb([ARN]);
  elb.healthCheck = async (t) => answering.has(t.ip);
});
afterAll(async () => {
  await elb.close();
});
/** The service's target group with these replicas registered, `healthy` of them answering their health checks. */
async function frontDoorWith(registered: number, healthy: number): Promise<ElbFrontDoor> {
  elb.groups.get(ARN)!.clear();
  answering.clear();
  const door = new ElbFrontDoor(
    new ElasticLoadBalancingV2Client({
      region: 'us-west-2',
      endpoint: elb.endpoint,
      credentials: { accessKeyId: 'x', secretAccessKey: 'x' },
    }),
    { 'nlp.chat': ARN },
  );
  const targets = Array.from({ length: registered }, (_, i) => ({ ip: `10.0.0.${i + 1}`, port: 8000 }));
  for (const t of targets.slice(0, healthy)) answering.add(t.ip);
  await door.register('nlp.chat', targets);
  await elb.settle();
  return door;
}

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
    const load = new ElbRequestLoad(cw, { nowMs: () => NOW }, { 'nlp.chat': ARN }, await frontDoorWith(3, 3));
    // 150 requests per target in a minute, three healthy targets: 7.5 requests per second in all; the replicas' own waiting requests summed.
    expect(await load.read(record)).toEqual({ 'requests-per-second': 7.5, 'waiting-requests': 14 });
    const input = mock.commandCalls(GetMetricDataCommand)[0]!.args[0].input;
    expect(input.MetricDataQueries!.find((q) => q.Id === 'waiting')!.MetricStat).toEqual({
      Metric: {
        Namespace: 'GpuFleet/Services',
        MetricName: 'ServiceWaitingRequests',
        Dimensions: [{ Name: 'Service', Value: 'nlp.chat' }],
      },
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
    const door = await frontDoorWith(2, 2);
    const load = new ElbRequestLoad(cw, { nowMs: () => NOW }, { 'nlp.chat': ARN }, door);
    expect(await load.read(record)).toEqual({ 'requests-per-second': 0 });
    expect(await new ElbRequestLoad(cw, { nowMs: () => NOW }, {}, door).read(record)).toEqual({});
    mock.on(GetMetricDataCommand).rejects(awsError('Throttling', 'Rate exceeded'));
    await expect(load.read(record)).rejects.toSatisfy((e) => isCloudError(e, 'throttled'));
    expect(targetGroupDimension(ARN)).toBe('targetgroup/gf-nlp-chat/50dc6c495c0c9188');
  });

  it('divides by the healthy targets as AWS defines the metric, not by the replicas running: 2 healthy of 4', async () => {
    const cw = new CloudWatchClient({ region: 'us-west-2' });
    mockClient(cw)
      .on(GetMetricDataCommand)
      .resolves({ MetricDataResults: [{ Id: 'perTarget', StatusCode: 'Complete', Values: [150], Timestamps: [] }] });
    // Four replicas run and are registered; two still load (failing their checks): the group's 300 requests went to the two healthy ones.
    const twoOfFour = new ElbRequestLoad(cw, { nowMs: () => NOW }, { 'nlp.chat': ARN }, await frontDoorWith(4, 2));
    expect(await twoOfFour.read(record)).toEqual({ 'requests-per-second': 5 });
    // None healthy: the load balancer sends to every registered target, and the metric divides by all of them.
    const noneHealthy = new ElbRequestLoad(cw, { nowMs: () => NOW }, { 'nlp.chat': ARN }, await frontDoorWith(4, 0));
    expect(await noneHealthy.read(record)).toEqual({ 'requests-per-second': 10 });
  });
});
