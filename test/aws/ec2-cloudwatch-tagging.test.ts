import { readFileSync } from 'node:fs';
import { CloudWatchClient, GetMetricDataCommand, PutMetricDataCommand } from '@aws-sdk/client-cloudwatch';
import { DescribeInstanceTypesCommand, DescribeSpotPriceHistoryCommand, EC2Client } from '@aws-sdk/client-ec2';
import { GetResourcesCommand, ResourceGroupsTaggingAPIClient } from '@aws-sdk/client-resource-groups-tagging-api';
import { mockClient } from 'aws-sdk-client-mock';
import { beforeEach, describe, expect, it } from 'vitest';
import { makeOffering } from '../../core/catalog.ts';
import { isCloudError } from '../../core/errors.ts';
import { CloudWatchGpuMetricSink, CloudWatchGpuMetrics } from '../../cloud/aws/cloudwatch-metrics.ts';
import { AwsPriceSource, Ec2Catalog } from '../../cloud/aws/ec2-catalog.ts';
import { translateAwsError } from '../../cloud/aws/errors.ts';
import { teamsInForce } from '../../core/services/snapshot-reader.ts';
import { TaggingBudgetSource } from '../../cloud/aws/tagging-budgets.ts';
import { VirtualClock } from '../../cloud/sim/clock.ts';
import { T0 } from '../builders.ts';
import { awsError } from '../support/fake-aws.ts';

const fixture = (name: string) => JSON.parse(readFileSync(new URL(`../fixtures/api/aws/${name}`, import.meta.url), 'utf8'));
const creds = { region: 'us-west-2', credentials: { accessKeyId: 'x', secretAccessKey: 'x' } };

describe('EC2 catalogue and prices', () => {
  const client = new EC2Client(creds);
  const ec2 = mockClient(client);
  beforeEach(() => ec2.reset());

  it('reads GPU facts from DescribeInstanceTypes once, and falls back to the shipped catalogue', async () => {
    ec2.on(DescribeInstanceTypesCommand).resolves(fixture('ec2-DescribeInstanceTypes-gpu.json'));
    const catalog = new Ec2Catalog(client);
    const types = await catalog.instanceTypes(['g4dn.xlarge', 'p4d.24xlarge', 'p3.2xlarge']);
    expect(types.get('g4dn.xlarge')).toEqual({
      name: 'g4dn.xlarge',
      cloud: 'aws',
      gpuModel: 'T4',
      gpuCount: 1,
      gpuMemoryMiB: 16_384,
      vcpus: 4,
      memoryMiB: 16_384,
    });
    expect(types.get('p4d.24xlarge')).toMatchObject({ gpuModel: 'A100-40GB', gpuCount: 8, gpuMemoryMiB: 40_960 });
    expect(types.get('p3.2xlarge')).toMatchObject({ gpuModel: 'V100', gpuCount: 1 }); // not in the response: shipped
    await catalog.instanceTypes(['g4dn.xlarge', 'p4d.24xlarge']);
    expect(ec2.commandCalls(DescribeInstanceTypesCommand)).toHaveLength(1);
    expect(ec2.commandCalls(DescribeInstanceTypesCommand)[0]!.args[0].input).toEqual({
      InstanceTypes: ['g4dn.xlarge', 'p4d.24xlarge', 'p3.2xlarge'],
    });
  });

  it('takes the newest spot price per zone and type, caches it, and falls back to the shipped price', async () => {
    const clock = new VirtualClock(T0);
    ec2.on(DescribeSpotPriceHistoryCommand).resolves({
      SpotPriceHistory: [
        {
          AvailabilityZone: 'us-west-2a',
          InstanceType: 'p3.2xlarge',
          ProductDescription: 'Linux/UNIX',
          SpotPrice: '0.918000',
          Timestamp: new Date(T0 - 3_600_000),
        },
        {
          AvailabilityZone: 'us-west-2a',
          InstanceType: 'p3.2xlarge',
          ProductDescription: 'Linux/UNIX',
          SpotPrice: '0.950000',
          Timestamp: new Date(T0 - 60_000),
        },
      ],
      NextToken: '',
    });
    const prices = new AwsPriceSource(client, { clock, spotCacheSec: 300 });
    const a = makeOffering({ cloud: 'aws', region: 'us-west-2', zone: 'us-west-2a', instanceType: 'p3.2xlarge', capacityType: 'spot' });
    const b = makeOffering({ cloud: 'aws', region: 'us-west-2', zone: 'us-west-2b', instanceType: 'p3.2xlarge', capacityType: 'spot' });
    const od = makeOffering({
      cloud: 'aws',
      region: 'us-west-2',
      zone: 'us-west-2a',
      instanceType: 'p3.2xlarge',
      capacityType: 'on-demand',
    });
    const out = await prices.prices([a, b, od]);
    expect(out.get(a.id)).toEqual({
      offeringId: a.id,
      priceMicroUsdPerHour: 950_000,
      onDemandMicroUsdPerHour: 3_060_000,
      source: 'EC2 spot price history',
      interruptionBand: '>20%',
    });
    expect(out.get(b.id)).toMatchObject({ priceMicroUsdPerHour: 856_800, source: 'shipped catalogue (spot)' });
    expect(out.get(od.id)).toMatchObject({ priceMicroUsdPerHour: 3_060_000, source: 'shipped catalogue (on-demand)' });
    expect(ec2.commandCalls(DescribeSpotPriceHistoryCommand)[0]!.args[0].input).toEqual({
      InstanceTypes: ['p3.2xlarge'],
      ProductDescriptions: ['Linux/UNIX', 'Linux/UNIX (Amazon VPC)'],
      StartTime: new Date(T0),
      MaxResults: 1000,
    });
    await prices.prices([a]);
    expect(ec2.commandCalls(DescribeSpotPriceHistoryCommand)).toHaveLength(1);
    clock.advanceBy(301_000);
    await prices.prices([a]);
    expect(ec2.commandCalls(DescribeSpotPriceHistoryCommand)).toHaveLength(2);
  });

  it('turns EC2 errors into the port vocabulary with context', async () => {
    ec2.on(DescribeSpotPriceHistoryCommand).rejects(awsError('RequestLimitExceeded', 'Request limit exceeded.', 503));
    const err = await new AwsPriceSource(client, { clock: new VirtualClock(T0) })
      .prices([makeOffering({ cloud: 'aws', region: 'us-west-2', zone: 'us-west-2a', instanceType: 'p3.2xlarge', capacityType: 'spot' })])
      .catch((e: unknown) => e);
    expect(isCloudError(err, 'throttled')).toBe(true);
  });
});

describe('CloudWatch GPU metrics', () => {
  it('asks GetMetricData for every GPU of each instance, in gpu-fleet\u2019s namespace and the CloudWatch agent\u2019s, and reads it back per GPU', async () => {
    const client = new CloudWatchClient(creds);
    const cw = mockClient(client);
    cw.on(GetMetricDataCommand).resolves({
      MetricDataResults: [
        { Id: 'gu0', Label: '0', Timestamps: [new Date(T0 - 60_000)], Values: [87.5], StatusCode: 'Complete' },
        { Id: 'gu0', Label: '1', Timestamps: [new Date(T0 - 60_000)], Values: [12], StatusCode: 'Complete' },
        { Id: 'gm0', Label: '1', Timestamps: [new Date(T0 - 60_000)], Values: [2048], StatusCode: 'Complete' },
        { Id: 'gm0', Label: '0', Timestamps: [new Date(T0 - 60_000)], Values: [30_000], StatusCode: 'Complete' },
        { Id: 'cu1', Label: '0', Timestamps: [new Date(T0 - 120_000)], Values: [55], StatusCode: 'Complete' },
        { Id: 'cm1', Label: '0', Timestamps: [new Date(T0 - 120_000)], Values: [1000], StatusCode: 'Complete' },
      ],
      Messages: [],
    });
    const samples = await new CloudWatchGpuMetrics(client, new VirtualClock(T0)).gpuSamples(
      ['i-0123456789abcdef0', 'i-0fedcba9876543210'],
      300,
    );
    expect(samples).toEqual([
      { instanceId: 'i-0123456789abcdef0', gpuIndex: 0, utilizationPct: 87.5, memoryUsedMiB: 30_000, atMs: T0 - 60_000 },
      { instanceId: 'i-0123456789abcdef0', gpuIndex: 1, utilizationPct: 12, memoryUsedMiB: 2048, atMs: T0 - 60_000 },
      { instanceId: 'i-0fedcba9876543210', gpuIndex: 0, utilizationPct: 55, memoryUsedMiB: 1000, atMs: T0 - 120_000 },
    ]);
    const input = cw.commandCalls(GetMetricDataCommand)[0]!.args[0].input;
    expect(input.MetricDataQueries).toHaveLength(8);
    expect(input.MetricDataQueries![0]).toEqual({
      Id: 'gu0',
      Expression: `SEARCH('{GpuFleet,GpuIndex,InstanceId,NodeGroup} MetricName="GpuUtilization" InstanceId="i-0123456789abcdef0"', 'Average', 60)`,
      Label: "${PROP('Dim.GpuIndex')}",
      ReturnData: true,
    });
    expect(input.MetricDataQueries![2]).toMatchObject({
      Id: 'cu0',
      Expression: expect.stringContaining('{CWAgent,InstanceId,index} MetricName="nvidia_smi_utilization_gpu"'),
    });
    expect(input).toMatchObject({ StartTime: new Date(T0 - 300_000), EndTime: new Date(T0), ScanBy: 'TimestampDescending' });
  });
});

describe('GPU metrics published by the node agent', () => {
  it('puts one datum per GPU and reading, with the dimensions the reader searches, in calls of at most 1000', async () => {
    const client = new CloudWatchClient(creds);
    const cw = mockClient(client);
    cw.on(PutMetricDataCommand).resolves({});
    const samples = Array.from({ length: 250 }, (_, k) => ({
      instanceId: `i-${k}`,
      groupId: 'gpu-a100-spot',
      gpuIndex: k % 8,
      utilizationPct: 87.5,
      memoryUsedMiB: 30_000,
      powerDrawW: 312.4,
      temperatureC: 61,
      uncorrectableEccErrors: 0,
      atMs: T0,
    }));
    await new CloudWatchGpuMetricSink(client).put(samples);
    const calls = cw.commandCalls(PutMetricDataCommand).map((c) => c.args[0].input);
    expect(calls.map((c) => c.MetricData!.length)).toEqual([1000, 250]);
    expect(calls[0]!.Namespace).toBe('GpuFleet');
    expect(calls[0]!.MetricData![0]).toEqual({
      MetricName: 'GpuUtilization',
      Dimensions: [
        { Name: 'GpuIndex', Value: '0' },
        { Name: 'InstanceId', Value: 'i-0' },
        { Name: 'NodeGroup', Value: 'gpu-a100-spot' },
      ],
      Timestamp: new Date(T0),
      Value: 87.5,
      Unit: 'Percent',
    });
    expect(calls[0]!.MetricData!.slice(0, 5).map((d) => [d.MetricName, d.Unit])).toEqual([
      ['GpuUtilization', 'Percent'],
      ['GpuMemoryUsed', 'Megabytes'],
      ['GpuPowerDraw', 'None'],
      ['GpuTemperature', 'None'],
      ['GpuUncorrectableEccErrors', 'Count'],
    ]);
    // A reading nvidia-smi did not give (N/A) is left out, not sent as 0.
    cw.reset();
    cw.on(PutMetricDataCommand).resolves({});
    await new CloudWatchGpuMetricSink(client).put([{ instanceId: 'i-1', groupId: 'g', gpuIndex: 0, memoryUsedMiB: 11_125, atMs: T0 }]);
    expect(cw.commandCalls(PutMetricDataCommand)[0]!.args[0].input.MetricData!.map((d) => d.MetricName)).toEqual(['GpuMemoryUsed']);
  });
});

describe('budget tags from the Resource Groups Tagging API', () => {
  it("reads every resource tagged with a team, page by page until the empty token; only the team's own queue sets its budget, decoys are marked and change nothing", async () => {
    const client = new ResourceGroupsTaggingAPIClient(creds);
    const tagging = mockClient(client);
    const recorded = fixture('tagging-GetResources-recorded.json');
    const nlpQueue = 'arn:aws:sqs:us-east-1:644160558196:gpufleet-team-nlp';
    tagging
      .on(GetResourcesCommand, { PaginationToken: undefined })
      .resolves({
        PaginationToken: 'next',
        ResourceTagMappingList: [
          {
            ResourceARN: 'arn:aws:s3:::nlp-data',
            Tags: [
              { Key: 'gpu-fleet:team', Value: 'nlp' },
              { Key: 'gpu-fleet:budget-usd', Value: '100' },
            ],
          },
          // A queue of the account that is not nlp's (the recorded one), tagged to lift nlp's budget.
          {
            ResourceARN: recorded.ResourceTagMappingList[0].ResourceARN,
            Tags: [
              ...recorded.ResourceTagMappingList[0].Tags,
              { Key: 'gpu-fleet:team', Value: 'nlp' },
              { Key: 'gpu-fleet:budget-usd', Value: '999999' },
              { Key: 'gpu-fleet:budget-action', Value: 'alert' },
              { Key: 'gpu-fleet:weight', Value: '9999' },
            ],
          },
          {
            ResourceARN: nlpQueue,
            Tags: [
              { Key: 'gpu-fleet:team', Value: 'nlp' },
              { Key: 'gpu-fleet:budget-usd', Value: '2500' },
              { Key: 'gpu-fleet:budget-action', Value: 'hold' },
            ],
          },
        ],
      })
      .on(GetResourcesCommand, { PaginationToken: 'next' })
      .resolves({
        ...recorded,
        ResourceTagMappingList: [
          {
            ResourceARN: 'arn:aws:sqs:us-east-1:644160558196:aaa-scratch',
            Tags: [
              { Key: 'gpu-fleet:team', Value: 'vision' },
              { Key: 'gpu-fleet:budget-usd', Value: '999999' },
            ],
          },
          {
            ResourceARN: 'arn:aws:sqs:us-east-1:644160558196:gpufleet-team-vision',
            Tags: [
              { Key: 'gpu-fleet:team', Value: 'vision' },
              { Key: 'gpu-fleet:budget-usd', Value: '5000' },
              { Key: 'gpu-fleet:budget-action', Value: 'spot-only' },
            ],
          },
        ],
      });
    const sets = await new TaggingBudgetSource(client, { teamQueuePrefix: 'gpufleet-team-' }).readTeamTags();
    const notOwn = (team: string) => `budget tags are read only from the team's queue gpufleet-team-${team}`;
    expect(sets.map((x) => [x.team, x.resource, x.notTheTeamQueue])).toEqual([
      ['nlp', 'arn:aws:s3:::nlp-data', notOwn('nlp')],
      ['vision', 'arn:aws:sqs:us-east-1:644160558196:aaa-scratch', notOwn('vision')],
      ['nlp', nlpQueue, undefined],
      ['vision', 'arn:aws:sqs:us-east-1:644160558196:gpufleet-team-vision', undefined],
      ['nlp', recorded.ResourceTagMappingList[0].ResourceARN, notOwn('nlp')],
    ]);
    expect(tagging.commandCalls(GetResourcesCommand).map((c) => c.args[0].input)).toEqual([
      { TagFilters: [{ Key: 'gpu-fleet:team' }], ResourcesPerPage: 100 },
      { TagFilters: [{ Key: 'gpu-fleet:team' }], ResourcesPerPage: 100, PaginationToken: 'next' },
    ]);
    // What is in force: each team's own queue, whatever the decoys say; each decoy named as a problem.
    const teams = teamsInForce(sets, new Map());
    expect(teams.get('nlp')).toMatchObject({ weight: 1, budget: { amountMicroUsd: 2_500_000_000, action: 'hold' } });
    expect(teams.get('vision')).toMatchObject({ budget: { amountMicroUsd: 5_000_000_000, action: 'spot-only' } });
    expect(teams.get('nlp')!.tagProblems).toEqual([
      `arn:aws:s3:::nlp-data carries gpu-fleet:team=nlp, and its gpu-fleet tags are ignored: ${notOwn('nlp')}`,
      `${recorded.ResourceTagMappingList[0].ResourceARN} carries gpu-fleet:team=nlp, and its gpu-fleet tags are ignored: ${notOwn('nlp')}`,
    ]);
    // A team whose only tags are on a decoy has no budget: it is held.
    const onlyDecoy = teamsInForce([sets[1]!], new Map());
    expect(onlyDecoy.get('vision')!.budget).toBeUndefined();
  });

  it('says throttled for ThrottledException', async () => {
    const client = new ResourceGroupsTaggingAPIClient(creds);
    mockClient(client)
      .on(GetResourcesCommand)
      .rejects(awsError('ThrottledException', fixture('tagging-error-ThrottledException.assembled.json').Message ?? 'Rate exceeded'));
    expect(
      isCloudError(
        await new TaggingBudgetSource(client, { teamQueuePrefix: 'gpufleet-team-' }).readTeamTags().catch((e: unknown) => e),
        'throttled',
      ),
    ).toBe(true);
  });
});

describe('AWS error translation', () => {
  it.each([
    ['Throttling', 400, 'throttled'],
    ['RequestLimitExceeded', 503, 'throttled'],
    ['InsufficientInstanceCapacity', 500, 'insufficient-capacity'],
    ['MaxSpotInstanceCountExceeded', 400, 'quota-exceeded'],
    ['VcpuLimitExceeded', 400, 'quota-exceeded'],
    ['ResourceNotFoundException', 400, 'not-found'],
    ['AccessDeniedException', 400, 'access-denied'],
    ['ValidationError', 400, 'invalid-request'],
    ['ConditionalCheckFailedException', 400, 'conflict'],
    ['SomethingNew', 503, 'unavailable'],
    ['SomethingNew', 429, 'throttled'],
  ])('%s (HTTP %i) → %s', (name, status, code) => {
    const e = translateAwsError(awsError(name, 'msg', status), { operation: 'op', resource: 'r' });
    expect(e.code).toBe(code);
    expect(e.message).toBe(`op on r failed: ${name}: msg`);
    expect(e.context).toEqual({ operation: 'op', resource: 'r', cloud: 'aws' });
  });
});
