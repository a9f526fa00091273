import {
  CompleteLifecycleActionCommand,
  DescribeAutoScalingGroupsCommand,
  DescribeAutoScalingInstancesCommand,
  RecordLifecycleActionHeartbeatCommand,
  SetDesiredCapacityCommand,
  SetInstanceProtectionCommand,
  TerminateInstanceInAutoScalingGroupCommand,
} from '@aws-sdk/client-auto-scaling';
import { DescribeInstancesCommand } from '@aws-sdk/client-ec2';
import { afterEach, describe, expect, it } from 'vitest';
import { fakeAutoScaling } from '../support/fake-aws.ts';
import { startFakeElb } from '../support/fake-elb.ts';
import { FakeGce } from '../support/fake-gce.ts';
import { FakeCloudWatchLogs } from '../../bench/support/fake-logs.ts';
import { startMetadataServer } from '../support/metadata-server.ts';

// Issue 48: every fake in test/support that stands for an AWS or GCP API, checked against what the
// API reference documents for the calls gpu-fleet makes, errors and limits included. A fake kinder
// than the service is how defects hide; each case names the reference it follows.

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** The error a call fails with (its AWS error code and message), or undefined when it succeeds. */
async function failure(p: Promise<unknown>): Promise<{ name: string; message: string } | undefined> {
  try {
    await p;
    return undefined;
  } catch (error) {
    const e = error as Error;
    return { name: e.name, message: e.message };
  }
}

function awsGroups(count = 1) {
  const f = fakeAutoScaling(
    Array.from({ length: count }, (_, i) => ({
      name: `gpu-${i}`,
      min: 1,
      max: 3,
      zones: ['us-west-2a'],
      types: ['p3.2xlarge'],
      spot: true,
      managed: true,
    })),
  );
  f.settle();
  return f;
}

describe('fake Auto Scaling and EC2 (test/support/fake-aws.ts)', () => {
  it('DescribeInstances: an id EC2 does not know fails the whole call with InvalidInstanceID.NotFound, naming it (EC2 API reference, error codes)', async () => {
    const f = awsGroups();
    const [known] = (await f.asgClient.send(new DescribeAutoScalingGroupsCommand({}))).AutoScalingGroups![0]!.Instances!;
    const ok = await f.ec2Client.send(new DescribeInstancesCommand({ InstanceIds: [known!.InstanceId!] }));
    expect(ok.Reservations![0]!.Instances!.map((i) => i.InstanceId)).toEqual([known!.InstanceId]);
    expect(
      await failure(f.ec2Client.send(new DescribeInstancesCommand({ InstanceIds: [known!.InstanceId!, 'i-0000000000000dead'] }))),
    ).toEqual({
      name: 'InvalidInstanceID.NotFound',
      message: "The instance ID 'i-0000000000000dead' does not exist",
    });
    // Eventual consistency: launched and listed by its group, not yet known to EC2.
    f.settle({ ec2Lags: true });
    await f.asgClient.send(new SetDesiredCapacityCommand({ AutoScalingGroupName: 'gpu-0', DesiredCapacity: 2 }));
    f.settle({ ec2Lags: true });
    const ids = (await f.asgClient.send(new DescribeAutoScalingGroupsCommand({}))).AutoScalingGroups![0]!.Instances!.map(
      (i) => i.InstanceId!,
    );
    expect((await failure(f.ec2Client.send(new DescribeInstancesCommand({ InstanceIds: ids }))))?.name).toBe('InvalidInstanceID.NotFound');
    f.ec2CatchesUp();
    expect(await failure(f.ec2Client.send(new DescribeInstancesCommand({ InstanceIds: ids })))).toBeUndefined();
  });

  it('SetDesiredCapacity: outside the limits, or for a group that does not exist, is a ValidationError (Auto Scaling API reference)', async () => {
    const f = awsGroups();
    const set = (name: string, n: number) =>
      f.asgClient.send(new SetDesiredCapacityCommand({ AutoScalingGroupName: name, DesiredCapacity: n }));
    expect(await failure(set('gpu-0', 4))).toMatchObject({ name: 'ValidationError', message: expect.stringMatching(/above max value 3/) });
    expect(await failure(set('gpu-0', 0))).toMatchObject({ name: 'ValidationError', message: expect.stringMatching(/below min value 1/) });
    expect(await failure(set('nope', 1))).toMatchObject({ name: 'ValidationError', message: expect.stringMatching(/not found/) });
    expect(await failure(set('gpu-0', 2))).toBeUndefined();
  });

  it('TerminateInstanceInAutoScalingGroup: an unknown instance, or decrementing below the minimum, is a ValidationError', async () => {
    const f = awsGroups();
    const id = (await f.asgClient.send(new DescribeAutoScalingGroupsCommand({}))).AutoScalingGroups![0]!.Instances![0]!.InstanceId!;
    const terminate = (instanceId: string, decrement: boolean) =>
      f.asgClient.send(
        new TerminateInstanceInAutoScalingGroupCommand({ InstanceId: instanceId, ShouldDecrementDesiredCapacity: decrement }),
      );
    expect(await failure(terminate('i-0000000000000dead', true))).toMatchObject({ name: 'ValidationError' });
    // The group is at its minimum (1): taking one away without a replacement would break it.
    expect(await failure(terminate(id, true))).toMatchObject({
      name: 'ValidationError',
      message: expect.stringMatching(/violate group min size constraint/),
    });
    expect(await failure(terminate(id, false))).toBeUndefined();
  });

  it('SetInstanceProtection: an instance outside the group, or a group that does not exist, is a ValidationError', async () => {
    const f = awsGroups();
    const protect = (group: string, id: string) =>
      f.asgClient.send(new SetInstanceProtectionCommand({ AutoScalingGroupName: group, InstanceIds: [id], ProtectedFromScaleIn: true }));
    expect(await failure(protect('gpu-0', 'i-0000000000000dead'))).toMatchObject({ name: 'ValidationError' });
    expect(await failure(protect('nope', 'i-0000000000000dead'))).toMatchObject({
      name: 'ValidationError',
      message: expect.stringMatching(/not found/),
    });
  });

  it('CompleteLifecycleAction and RecordLifecycleActionHeartbeat: without an action in progress, a ValidationError', async () => {
    const f = awsGroups();
    const id = (await f.asgClient.send(new DescribeAutoScalingGroupsCommand({}))).AutoScalingGroups![0]!.Instances![0]!.InstanceId!;
    const action = { AutoScalingGroupName: 'gpu-0', LifecycleHookName: 'gpu-fleet-drain', InstanceId: id };
    expect(await failure(f.asgClient.send(new RecordLifecycleActionHeartbeatCommand(action)))).toMatchObject({
      name: 'ValidationError',
      message: expect.stringMatching(/No active Lifecycle Action/),
    });
    expect(
      await failure(f.asgClient.send(new CompleteLifecycleActionCommand({ ...action, LifecycleActionResult: 'CONTINUE' }))),
    ).toMatchObject({
      name: 'ValidationError',
    });
    f.holdForTermination(id);
    expect(await failure(f.asgClient.send(new RecordLifecycleActionHeartbeatCommand(action)))).toBeUndefined();
    expect(
      await failure(f.asgClient.send(new CompleteLifecycleActionCommand({ ...action, LifecycleActionResult: 'CONTINUE' }))),
    ).toBeUndefined();
  });

  it('DescribeAutoScalingGroups pages: 50 groups by default, at most 100 (MaxRecords over 100 is a ValidationError), NextToken for the rest', async () => {
    const f = awsGroups(120);
    const first = await f.asgClient.send(new DescribeAutoScalingGroupsCommand({}));
    expect(first.AutoScalingGroups).toHaveLength(50);
    expect(first.NextToken).toBeDefined();
    const names: string[] = [];
    let token: string | undefined;
    do {
      const page = await f.asgClient.send(
        new DescribeAutoScalingGroupsCommand({ MaxRecords: 100, ...(token ? { NextToken: token } : {}) }),
      );
      expect(page.AutoScalingGroups!.length).toBeLessThanOrEqual(100);
      names.push(...page.AutoScalingGroups!.map((g) => g.AutoScalingGroupName!));
      token = page.NextToken;
    } while (token);
    expect(new Set(names).size).toBe(120);
    expect((await failure(f.asgClient.send(new DescribeAutoScalingGroupsCommand({ MaxRecords: 101 }))))?.name).toBe('ValidationError');
  });

  it('DescribeAutoScalingInstances: an id it does not know is left out, without an error', async () => {
    const f = awsGroups();
    const out = await f.asgClient.send(new DescribeAutoScalingInstancesCommand({ InstanceIds: ['i-0000000000000dead'] }));
    expect(out.AutoScalingInstances).toEqual([]);
  });
});

describe('fake Elastic Load Balancing v2 (test/support/fake-elb.ts)', () => {
  const arn = 'arn:aws:elasticloadbalancing:us-west-2:123456789012:targetgroup/nlp-chat/0123456789abcdef';
  const call = async (endpoint: string, params: Record<string, string>) => {
    const res = await fetch(endpoint, { method: 'POST', body: new URLSearchParams({ Version: '2015-12-01', ...params }) });
    return { status: res.status, body: await res.text() };
  };

  it('an unknown target group is TargetGroupNotFound; deregistering a target not registered is InvalidTarget; a port is required', async () => {
    const elb = await startFakeElb([arn]);
    cleanups.push(() => elb.close());
    const unknown = await call(elb.endpoint, { Action: 'DescribeTargetHealth', TargetGroupArn: `${arn}-gone` });
    expect(unknown.status).toBe(400);
    expect(unknown.body).toContain('<Code>TargetGroupNotFound</Code>');
    const missing = await call(elb.endpoint, {
      Action: 'DeregisterTargets',
      TargetGroupArn: arn,
      'Targets.member.1.Id': '10.0.1.17',
      'Targets.member.1.Port': '8000',
    });
    expect(missing.body).toContain('<Code>InvalidTarget</Code>');
    const noPort = await call(elb.endpoint, { Action: 'RegisterTargets', TargetGroupArn: arn, 'Targets.member.1.Id': '10.0.1.17' });
    expect(noPort.status).toBe(400);
  });

  it('a target is initial until checked, unhealthy when its check fails, and draining once deregistered (target health states)', async () => {
    const elb = await startFakeElb([arn]);
    cleanups.push(() => elb.close());
    elb.healthCheck = async () => false;
    await call(elb.endpoint, {
      Action: 'RegisterTargets',
      TargetGroupArn: arn,
      'Targets.member.1.Id': '10.0.1.17',
      'Targets.member.1.Port': '8000',
    });
    expect(elb.groups.get(arn)!.get('10.0.1.17:8000')).toEqual({ state: 'initial', reason: 'Elb.RegistrationInProgress' });
    await elb.settle();
    expect(elb.groups.get(arn)!.get('10.0.1.17:8000')).toEqual({ state: 'unhealthy', reason: 'Target.FailedHealthChecks' });
    await call(elb.endpoint, {
      Action: 'DeregisterTargets',
      TargetGroupArn: arn,
      'Targets.member.1.Id': '10.0.1.17',
      'Targets.member.1.Port': '8000',
    });
    expect(elb.groups.get(arn)!.get('10.0.1.17:8000')?.state).toBe('draining');
  });
});

describe('fake CloudWatch Logs (bench/support/fake-logs.ts)', () => {
  async function logs() {
    const f = await new FakeCloudWatchLogs(['/gpu-fleet/jobs']).start();
    cleanups.push(() => f.stop());
    const call = async (op: string, body: Record<string, unknown>) => {
      const res = await fetch(f.endpoint, {
        method: 'POST',
        headers: { 'x-amz-target': `Logs_20140328.${op}`, 'content-type': 'application/x-amz-json-1.1' },
        body: JSON.stringify(body),
      });
      return { status: res.status, json: (await res.json()) as Record<string, unknown> };
    };
    await call('CreateLogStream', { logGroupName: '/gpu-fleet/jobs', logStreamName: 's' });
    const put = (logEvents: { timestamp: number; message: string }[]) =>
      call('PutLogEvents', { logGroupName: '/gpu-fleet/jobs', logStreamName: 's', logEvents });
    return { f, call, put };
  }
  const now = Date.now();

  it('an unknown group or stream is ResourceNotFoundException; a stream made twice ResourceAlreadyExistsException', async () => {
    const { call } = await logs();
    expect(
      (await call('PutLogEvents', { logGroupName: '/nope', logStreamName: 's', logEvents: [{ timestamp: now, message: 'x' }] })).json
        .__type,
    ).toBe('ResourceNotFoundException');
    expect(
      (
        await call('PutLogEvents', {
          logGroupName: '/gpu-fleet/jobs',
          logStreamName: 'none',
          logEvents: [{ timestamp: now, message: 'x' }],
        })
      ).json.__type,
    ).toBe('ResourceNotFoundException');
    expect((await call('CreateLogStream', { logGroupName: '/gpu-fleet/jobs', logStreamName: 's' })).json.__type).toBe(
      'ResourceAlreadyExistsException',
    );
  });

  it('PutLogEvents past its call rate is 400 ThrottlingException "Rate exceeded", takes nothing of that call, and takes calls again as the rate allows', async () => {
    const f = await new FakeCloudWatchLogs(['/g'], { throttle: { callsPerSec: 2 } }).start();
    cleanups.push(() => f.stop());
    const call = (op: string, body: Record<string, unknown>) =>
      fetch(f.endpoint, {
        method: 'POST',
        headers: { 'x-amz-target': `Logs_20140328.${op}`, 'content-type': 'application/x-amz-json-1.1' },
        body: JSON.stringify(body),
      });
    await call('CreateLogStream', { logGroupName: '/g', logStreamName: 's' });
    const put = async (message: string) => {
      const res = await call('PutLogEvents', { logGroupName: '/g', logStreamName: 's', logEvents: [{ timestamp: now, message }] });
      return { status: res.status, type: ((await res.json()) as { __type?: string }).__type };
    };
    expect(await put('one')).toEqual({ status: 200, type: undefined });
    expect(await put('two')).toEqual({ status: 200, type: undefined });
    expect(await put('three')).toEqual({ status: 400, type: 'ThrottlingException' });
    await new Promise((r) => setTimeout(r, 700));
    expect(await put('four')).toEqual({ status: 200, type: undefined });
    expect(
      f.groups
        .get('/g')!
        .get('s')!
        .map((e) => e.message),
    ).toEqual(['one', 'two', 'four']);
    expect(f.stats).toEqual({ events: 3, bytes: 10, throttled: 1 });
    expect(await (await fetch(`${f.endpoint}/__stats`)).json()).toEqual(f.stats);
  });

  it('PutLogEvents refuses a batch out of time order, over 10,000 events, over 1,048,576 bytes (26 per event), spanning over 24 h, or with an event over 256 KiB', async () => {
    const { put } = await logs();
    const at = (ms: number, message = 'x') => ({ timestamp: ms, message });
    expect((await put([at(now), at(now - 1)])).json.__type).toBe('InvalidParameterException');
    expect((await put(Array.from({ length: 10_001 }, () => at(now)))).json.__type).toBe('InvalidParameterException');
    // 5 events of 209,700 bytes: 1,048,500 + 130 = 1,048,630 bytes, just over.
    expect((await put(Array.from({ length: 5 }, () => at(now, 'a'.repeat(209_700))))).json.__type).toBe('InvalidParameterException');
    expect((await put(Array.from({ length: 5 }, () => at(now, 'a'.repeat(209_000))))).status).toBe(200);
    expect((await put([at(now - 25 * 3_600_000), at(now)])).json.__type).toBe('InvalidParameterException');
    expect((await put([at(now, 'a'.repeat(262_144))])).json.__type).toBe('InvalidParameterException');
  });

  it('PutLogEvents keeps the rest and reports the events more than 14 days old or 2 hours ahead (rejectedLogEventsInfo: old end exclusive, new start inclusive)', async () => {
    const { f, put } = await logs();
    const old = now - 14 * 86_400_000 - 60_000;
    const tooOld = await put([
      { timestamp: old, message: 'old' },
      { timestamp: old + 1, message: 'old too' },
      { timestamp: old + 120_000, message: 'kept (just inside 14 days)' },
    ]);
    expect(tooOld.json.rejectedLogEventsInfo).toEqual({ tooOldLogEventEndIndex: 2 });
    const tooNew = await put([
      { timestamp: now, message: 'kept' },
      { timestamp: now + 3 * 3_600_000, message: 'ahead' },
    ]);
    expect(tooNew.json.rejectedLogEventsInfo).toEqual({ tooNewLogEventStartIndex: 1 });
    expect(
      f.groups
        .get('/gpu-fleet/jobs')!
        .get('s')!
        .map((e) => e.message),
    ).toEqual(['kept (just inside 14 days)', 'kept']);
  });
});

describe('fake Compute Engine (test/support/fake-gce.ts)', () => {
  async function gce() {
    const g = await new FakeGce().start();
    cleanups.push(() => g.stop());
    const get = async (path: string) => {
      const res = await fetch(`http://127.0.0.1:${g.port}/compute/v1/projects/p/${path}`);
      return { status: res.status, json: (await res.json()) as Record<string, unknown> };
    };
    return { g, get };
  }

  it('an unknown managed instance group is 404 notFound in the JSON error envelope', async () => {
    const { get } = await gce();
    const out = await get('zones/us-central1-a/instanceGroupManagers/nope');
    expect(out.status).toBe(404);
    expect(out.json).toMatchObject({ error: { code: 404, errors: [{ reason: 'notFound' }] } });
  });

  it('lists page by maxResults (0 to 500; more is 400 invalid) and nextPageToken', async () => {
    const { g, get } = await gce();
    g.addTemplate('p', 't', { machineType: 'a2-highgpu-1g', spot: true });
    for (let i = 0; i < 3; i++) g.addMig({ project: 'p', name: `m${i}`, zone: 'us-central1-a', template: 't' });
    const first = await get('aggregated/instanceGroupManagers?maxResults=2');
    expect(first.json.nextPageToken).toBeDefined();
    const rest = await get(`aggregated/instanceGroupManagers?maxResults=2&pageToken=${String(first.json.nextPageToken)}`);
    expect(rest.json.nextPageToken).toBeUndefined();
    const over = await get('aggregated/instanceGroupManagers?maxResults=501');
    expect(over.status).toBe(400);
    expect(over.json).toMatchObject({ error: { code: 400, errors: [{ reason: 'invalid' }] } });
  });
});

describe('fake instance metadata (test/support/metadata-server.ts)', () => {
  it('IMDSv2: a token needs a TTL of 1 to 21,600 s; a GET without a valid token is 401; a path with nothing is 404', async () => {
    const m = await startMetadataServer('aws', { 'meta-data/instance-id': 'i-0123456789abcdef0' });
    cleanups.push(() => m.close());
    const token = (ttl: string) =>
      fetch(`${m.url}/latest/api/token`, { method: 'PUT', headers: { 'x-aws-ec2-metadata-token-ttl-seconds': ttl } });
    expect((await token('0')).status).toBe(400);
    expect((await token('21601')).status).toBe(400);
    const t = await (await token('60')).text();
    expect((await fetch(`${m.url}/latest/meta-data/instance-id`)).status).toBe(401);
    const ok = await fetch(`${m.url}/latest/meta-data/instance-id`, { headers: { 'x-aws-ec2-metadata-token': t } });
    expect(await ok.text()).toBe('i-0123456789abcdef0');
    expect((await fetch(`${m.url}/latest/meta-data/spot/instance-action`, { headers: { 'x-aws-ec2-metadata-token': t } })).status).toBe(
      404,
    );
    m.expireTokens();
    expect((await fetch(`${m.url}/latest/meta-data/instance-id`, { headers: { 'x-aws-ec2-metadata-token': t } })).status).toBe(401);
  });

  it('GCE: every request needs Metadata-Flavor: Google (403 without)', async () => {
    const m = await startMetadataServer('gce', { 'instance/preempted': 'FALSE' });
    cleanups.push(() => m.close());
    expect((await fetch(`${m.url}/computeMetadata/v1/instance/preempted`)).status).toBe(403);
    const ok = await fetch(`${m.url}/computeMetadata/v1/instance/preempted`, { headers: { 'metadata-flavor': 'Google' } });
    expect(await ok.text()).toBe('FALSE');
  });
});
