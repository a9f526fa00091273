import { readFileSync } from 'node:fs';
import {
  AutoScalingClient,
  CompleteLifecycleActionCommand,
  RecordLifecycleActionHeartbeatCommand,
  DescribeAutoScalingGroupsCommand,
  DescribeScalingActivitiesCommand,
  DescribeWarmPoolCommand,
  type LifecycleState,
  SetDesiredCapacityCommand,
  TerminateInstanceInAutoScalingGroupCommand,
} from '@aws-sdk/client-auto-scaling';
import { DescribeInstancesCommand, DescribeLaunchTemplateVersionsCommand, EC2Client } from '@aws-sdk/client-ec2';
import { mockClient } from 'aws-sdk-client-mock';
import { beforeEach, describe, expect, it } from 'vitest';
import { isCloudError } from '../../core/errors.ts';
import { AsgNodeGroups } from '../../cloud/aws/asg-node-groups.ts';
import { VirtualClock } from '../../cloud/sim/clock.ts';
import { T0 } from '../builders.ts';
import { nodeGroupProviderContract } from '../contract/node-group-provider.contract.ts';
import { awsError, fakeAutoScaling } from '../support/fake-aws.ts';

const fixture = (name: string) => JSON.parse(readFileSync(new URL(`../fixtures/api/aws/${name}`, import.meta.url), 'utf8'));
const creds = { region: 'us-west-2', credentials: { accessKeyId: 'x', secretAccessKey: 'x' } };

nodeGroupProviderContract(
  'EC2 Auto Scaling (stateful fake over aws-sdk-client-mock)',
  async () => {
    const fake = fakeAutoScaling([
      { name: 'gpu-v100-od', min: 0, max: 4, zones: ['us-west-2a', 'us-west-2b'], types: ['p3.2xlarge'], spot: false, managed: true },
    ]);
    const provider = new AsgNodeGroups(fake.asgClient, fake.ec2Client, { region: 'us-west-2', clock: new VirtualClock(T0), cacheSec: 0 });
    return {
      provider,
      groupId: 'gpu-v100-od',
      settle: async () => fake.settle(),
      holdForTermination: async (id) => fake.holdForTermination(id),
    };
  },
  { lifecycleHooks: true },
);

describe('a group at its minimum', () => {
  it('refuses to shrink, so a machine let go there is replaced, not reported gone', async () => {
    const fake = fakeAutoScaling([
      { name: 'gpu-v100-od', min: 1, max: 4, zones: ['us-west-2a'], types: ['p3.2xlarge'], spot: false, managed: true },
    ]);
    fake.settle();
    const provider = new AsgNodeGroups(fake.asgClient, fake.ec2Client, { region: 'us-west-2', clock: new VirtualClock(T0), cacheSec: 0 });
    const [machine] = await provider.listInstances();
    expect(await provider.terminateInstance('gpu-v100-od', machine!.id)).toEqual({ alreadyGone: false });
    fake.settle();
    const after = await provider.listInstances();
    expect(after.map((i) => i.id)).not.toContain(machine!.id);
    expect(after).toHaveLength(1);
  });
});

describe('EC2 is eventually consistent: an instance its group lists may be unknown to DescribeInstances', () => {
  it('lists every instance when EC2 does not know the new ones yet: those keep their group’s view until it does', async () => {
    const fake = fakeAutoScaling([
      { name: 'gpu-v100-spot', min: 0, max: 4, zones: ['us-west-2a'], types: ['p3.2xlarge'], spot: true, managed: true },
    ]);
    const provider = new AsgNodeGroups(fake.asgClient, fake.ec2Client, { region: 'us-west-2', clock: new VirtualClock(T0), cacheSec: 0 });
    await provider.setDesiredCapacity('gpu-v100-spot', 1);
    fake.settle();
    await provider.setDesiredCapacity('gpu-v100-spot', 3);
    fake.settle({ ec2Lags: true });
    // The real EC2 behaviour the fake follows: the unknown ids fail the whole call.
    const ids = (await provider.listInstances()).map((i) => i.id);
    await expect(fake.ec2Client.send(new DescribeInstancesCommand({ InstanceIds: ids }))).rejects.toThrow(
      /The instance IDs 'i-.*, i-.*' do not exist/,
    );
    const listed = await provider.listInstances();
    expect(listed).toHaveLength(3);
    expect(listed.map((i) => [i.state, i.capacityType])).toEqual([
      ['running', 'spot'],
      ['running', 'spot'],
      ['running', 'spot'],
    ]);
    // The known one has EC2's launch time; the new ones are described again once EC2 knows them.
    expect(listed[0]!.launchedAtMs).toBe(Date.parse('2026-11-30T12:00:00Z'));
    expect(await provider.describeInstance(listed[2]!.id)).toMatchObject({ id: listed[2]!.id, state: 'running' });
    fake.ec2CatchesUp();
    expect((await provider.listInstances()).every((i) => i.launchedAtMs === Date.parse('2026-11-30T12:00:00Z'))).toBe(true);
  });
});

describe('Auto Scaling node groups', () => {
  const asgClient = new AutoScalingClient(creds);
  const ec2Client = new EC2Client(creds);
  const asg = mockClient(asgClient);
  const ec2 = mockClient(ec2Client);
  const groups = () => new AsgNodeGroups(asgClient, ec2Client, { region: 'us-west-2', clock: new VirtualClock(T0), cacheSec: 0 });
  beforeEach(() => {
    asg.reset();
    ec2.reset();
  });

  it('finds managed groups by tag, page by page, and reads offerings from the mixed instances policy', async () => {
    const recorded = fixture('autoscaling-DescribeAutoScalingGroups-mixed-instances.json');
    const g = recorded.AutoScalingGroups[0];
    asg
      .on(DescribeAutoScalingGroupsCommand, { NextToken: undefined })
      .resolves({ AutoScalingGroups: [g], NextToken: 'page-2' })
      .on(DescribeAutoScalingGroupsCommand, { NextToken: 'page-2' })
      .resolves({
        AutoScalingGroups: [
          {
            ...g,
            AutoScalingGroupName: 'second',
            Tags: [
              ...g.Tags,
              {
                Key: 'gpu-fleet:capacity-type',
                Value: 'spot',
                ResourceId: 'second',
                ResourceType: 'auto-scaling-group',
                PropagateAtLaunch: true,
              },
            ],
          },
        ],
      });
    const out = await groups().listGroups();
    expect(asg.commandCalls(DescribeAutoScalingGroupsCommand).map((c) => c.args[0].input)).toEqual([
      { Filters: [{ Name: 'tag:gpu-fleet:managed', Values: ['true'] }], MaxRecords: 100 },
      { Filters: [{ Name: 'tag:gpu-fleet:managed', Values: ['true'] }], MaxRecords: 100, NextToken: 'page-2' },
    ]);
    expect(out.map((x) => [x.id, x.minSize, x.maxSize, x.desiredCapacity, x.offerings.map((o) => o.id)])).toEqual([
      // OnDemandBaseCapacity 1 → not all spot: on-demand, for the planner's arithmetic.
      [
        g.AutoScalingGroupName,
        g.MinSize,
        g.MaxSize,
        g.DesiredCapacity,
        g.AvailabilityZones.map((z: string) => `aws/${z}/t3.medium/on-demand`),
      ],
      ['second', g.MinSize, g.MaxSize, g.DesiredCapacity, g.AvailabilityZones.map((z: string) => `aws/${z}/t3.medium/spot`)],
    ]);
  });

  it('counts a group’s warm pool apart from its capacity, from DescribeWarmPool page by page; unreadable, from its size, and says so', async () => {
    // The recorded group with a warm pool, as DescribeAutoScalingGroups gives its configuration and size (API reference).
    const g = fixture('autoscaling-DescribeAutoScalingGroups-mixed-instances.json').AutoScalingGroups[0];
    const warm = { ...g, WarmPoolConfiguration: { MinSize: 3, MaxGroupPreparedCapacity: 3, PoolState: 'Stopped' }, WarmPoolSize: 3 };
    asg.on(DescribeAutoScalingGroupsCommand).resolves({ AutoScalingGroups: [warm, g] });
    const pooled = (id: string, LifecycleState: LifecycleState) => ({
      InstanceId: id,
      InstanceType: 't3.medium',
      AvailabilityZone: 'us-west-2a',
      LifecycleState,
      HealthStatus: 'Healthy',
      ProtectedFromScaleIn: false,
    });
    asg
      .on(DescribeWarmPoolCommand, { NextToken: undefined })
      .resolves({
        WarmPoolConfiguration: warm.WarmPoolConfiguration,
        Instances: [pooled('i-1', 'Warmed:Stopped'), pooled('i-2', 'Warmed:Pending')],
        NextToken: 'p2',
      })
      .on(DescribeWarmPoolCommand, { NextToken: 'p2' })
      .resolves({ Instances: [pooled('i-3', 'Warmed:Stopped'), pooled('i-4', 'Warmed:Terminating')] });
    const provider = groups();
    const [withPool, without] = await provider.listGroups();
    expect(withPool!.warm).toEqual({ state: 'Stopped', ready: 2, preparing: 1 });
    expect(without!.warm).toBeUndefined();
    expect(asg.commandCalls(DescribeWarmPoolCommand)[0]!.args[0].input).toEqual({
      AutoScalingGroupName: g.AutoScalingGroupName,
      MaxRecords: 50,
    });
    asg
      .on(DescribeWarmPoolCommand)
      .rejects(awsError('AccessDenied', 'User is not authorized to perform: autoscaling:DescribeWarmPool', 403));
    const fallback = groups();
    expect((await fallback.listGroups())[0]!.warm).toEqual({ state: 'Stopped', ready: 3, preparing: 0 });
    expect(fallback.problems).toEqual([expect.stringMatching(/its warm pool could not be read .*; counted from its size$/)]);
  });

  it('reads the instance type of a launch-template group, and reports a group whose types cannot be known', async () => {
    const recorded = fixture('autoscaling-DescribeAutoScalingGroups-mixed-instances-2026.json');
    asg.on(DescribeAutoScalingGroupsCommand).resolves(recorded);
    ec2
      .on(DescribeLaunchTemplateVersionsCommand)
      .resolves({ LaunchTemplateVersions: [{ LaunchTemplateData: { InstanceType: 'g5.xlarge' } }] });
    const provider = groups();
    const out = await provider.listGroups();
    expect(out).toHaveLength(recorded.AutoScalingGroups.length);
    // The recorded groups use instance requirements (no types) and one launch template group.
    expect(provider.problems.some((p) => p.includes('c7n-public-test') && p.includes('instance types cannot be known'))).toBe(true);
    const viaTemplate = out.filter((x) => x.offerings.some((o) => o.instanceType === 'g5.xlarge'));
    expect(viaTemplate.length).toBeGreaterThan(0);
    expect(ec2.commandCalls(DescribeLaunchTemplateVersionsCommand).length).toBeGreaterThan(0);
  });

  it('lists instances with their market from EC2', async () => {
    const g = fixture('autoscaling-DescribeAutoScalingGroups-mixed-instances.json').AutoScalingGroups[0];
    const spot = fixture('ec2-DescribeInstances-spot.json');
    const spotId = spot.Reservations[0].Instances[0].InstanceId;
    asg
      .on(DescribeAutoScalingGroupsCommand)
      .resolves({ AutoScalingGroups: [{ ...g, Instances: [{ ...g.Instances[0], InstanceId: spotId }] }] });
    ec2.on(DescribeInstancesCommand).resolves(spot);
    const [inst] = await groups().listInstances();
    expect(ec2.commandCalls(DescribeInstancesCommand)[0]!.args[0].input).toEqual({ InstanceIds: [spotId] });
    expect(inst).toMatchObject({
      id: spotId,
      groupId: g.AutoScalingGroupName,
      capacityType: 'spot',
      state: 'running',
      launchedAtMs: new Date(spot.Reservations[0].Instances[0].LaunchTime).getTime(),
    });
  });

  it('a group tagged reserved launches into the reservation its launch template targets; its machines in it are reserved', async () => {
    // The recorded group, retagged; the template data and the instance's CapacityReservationId are assembled from the
    // EC2 API reference (LaunchTemplateCapacityReservationSpecificationResponse, Instance.CapacityReservationId).
    const g = fixture('autoscaling-DescribeAutoScalingGroups-mixed-instances.json').AutoScalingGroups[0];
    const reservedTag = {
      Key: 'gpu-fleet:capacity-type',
      Value: 'reserved',
      ResourceId: 'x',
      ResourceType: 'auto-scaling-group',
      PropagateAtLaunch: true,
    };
    const reserved = {
      ...g,
      AutoScalingGroupName: 'p5-block',
      Tags: [...g.Tags, reservedTag],
      MixedInstancesPolicy: {
        ...g.MixedInstancesPolicy,
        LaunchTemplate: {
          ...g.MixedInstancesPolicy.LaunchTemplate,
          LaunchTemplateSpecification: { LaunchTemplateId: 'lt-0abc', Version: '3' },
        },
      },
    };
    const unnamed = {
      ...g,
      AutoScalingGroupName: 'no-target',
      Tags: [...g.Tags, reservedTag],
      MixedInstancesPolicy: undefined,
      LaunchTemplate: undefined,
    };
    const spot = fixture('ec2-DescribeInstances-spot.json');
    const inst = spot.Reservations[0].Instances[0];
    asg
      .on(DescribeAutoScalingGroupsCommand)
      .resolves({ AutoScalingGroups: [{ ...reserved, Instances: [{ ...g.Instances[0], InstanceId: inst.InstanceId }] }, unnamed] });
    ec2.on(DescribeLaunchTemplateVersionsCommand, { LaunchTemplateId: 'lt-0abc', Versions: ['3'] }).resolves({
      LaunchTemplateVersions: [
        {
          LaunchTemplateData: {
            InstanceType: 't3.medium',
            CapacityReservationSpecification: { CapacityReservationTarget: { CapacityReservationId: 'cr-0123456789abcdef0' } },
            InstanceMarketOptions: { MarketType: 'capacity-block' },
          },
        },
      ],
    });
    ec2.on(DescribeInstancesCommand).resolves({
      Reservations: [{ Instances: [{ ...inst, InstanceLifecycle: 'capacity-block', CapacityReservationId: 'cr-0123456789abcdef0' }] }],
    });
    const provider = groups();
    const out = await provider.listGroups();
    expect(out.map((x) => x.id)).toEqual(['p5-block']);
    expect(out[0]!.offerings.map((o) => o.id)).toEqual(
      g.AvailabilityZones.map((z: string) => `aws/${z}/t3.medium/reserved/cr-0123456789abcdef0`),
    );
    expect(provider.problems.some((p) => p.includes('no-target') && p.includes('names no reservation'))).toBe(true);
    const [machine] = await provider.listInstances();
    expect(machine).toMatchObject({ id: inst.InstanceId, capacityType: 'reserved', reservationId: 'cr-0123456789abcdef0' });
  });

  it('names every LifecycleState of the API reference: the hook states are their own, a warm pool is left out', async () => {
    // Assembled from the recorded group: the recorded responses show only InService, so the other values are the API reference's.
    const g = fixture('autoscaling-DescribeAutoScalingGroups-mixed-instances.json').AutoScalingGroups[0];
    const states: Record<string, string | undefined> = {
      Pending: 'pending',
      'Pending:Wait': 'pending-wait',
      'Pending:Proceed': 'pending',
      Quarantined: 'stopping',
      InService: 'running',
      Terminating: 'stopping',
      'Terminating:Wait': 'terminating-wait',
      'Terminating:Proceed': 'stopping',
      Terminated: 'terminated',
      Detaching: 'stopping',
      Detached: 'stopping',
      EnteringStandby: 'running',
      Standby: 'running',
      'Warmed:Pending': undefined,
      'Warmed:Pending:Wait': undefined,
      'Warmed:Running': undefined,
      'Warmed:Stopped': undefined,
      'Warmed:Hibernated': undefined,
      'Warmed:Terminating:Wait': undefined,
    };
    const ids = Object.keys(states).map((_, k) => `i-${String(k).padStart(17, '0')}`);
    asg.on(DescribeAutoScalingGroupsCommand).resolves({
      AutoScalingGroups: [
        { ...g, Instances: Object.keys(states).map((LifecycleState, k) => ({ ...g.Instances[0], InstanceId: ids[k], LifecycleState })) },
      ],
    });
    ec2.on(DescribeInstancesCommand).resolves({ Reservations: [] });
    const listed = new Map((await groups().listInstances()).map((i) => [i.id, i.state]));
    expect(Object.fromEntries(Object.keys(states).map((s, k) => [s, listed.get(ids[k]!)]))).toEqual(states);
  });

  it('sets the desired size exactly, and turns the real above-max error into invalid-request with its text', async () => {
    asg.on(SetDesiredCapacityCommand, { AutoScalingGroupName: 'ok' }).resolves({});
    asg
      .on(SetDesiredCapacityCommand, { AutoScalingGroupName: 'small' })
      .rejects(
        awsError('ValidationError', fixture('autoscaling-SetDesiredCapacity-error-ValidationError-above-max.assembled.json').Error.Message),
      );
    await groups().setDesiredCapacity('ok', 5);
    expect(asg.commandCalls(SetDesiredCapacityCommand)[0]!.args[0].input).toEqual({
      AutoScalingGroupName: 'ok',
      DesiredCapacity: 5,
      HonorCooldown: false,
    });
    await expect(groups().setDesiredCapacity('small', 2)).rejects.toSatisfy(
      (e) => isCloudError(e, 'invalid-request') && /above max value 1/.test((e as Error).message),
    );
  });

  it('removes a specific instance with the desired size lowered; one already gone is no error', async () => {
    asg
      .on(TerminateInstanceInAutoScalingGroupCommand, { InstanceId: 'i-0123456789abcdef0' })
      .resolves(fixture('autoscaling-TerminateInstanceInAutoScalingGroup.assembled.json'));
    asg
      .on(TerminateInstanceInAutoScalingGroupCommand, { InstanceId: 'i-00000000000000dead' })
      .rejects(awsError('ValidationError', 'Instance Id not found - No managed instance found for instance ID: i-00000000000000dead'));
    expect(await groups().terminateInstance('g', 'i-0123456789abcdef0')).toEqual({ alreadyGone: false });
    expect(asg.commandCalls(TerminateInstanceInAutoScalingGroupCommand)[0]!.args[0].input).toEqual({
      InstanceId: 'i-0123456789abcdef0',
      ShouldDecrementDesiredCapacity: true,
    });
    expect(await groups().terminateInstance('g', 'i-00000000000000dead')).toEqual({ alreadyGone: true });
  });

  it('reads failed spot launches from scaling activities, with the zone and code, for the planner to avoid', async () => {
    const g = {
      ...fixture('autoscaling-DescribeAutoScalingGroups-mixed-instances.json').AutoScalingGroups[0],
      AutoScalingGroupName: 'spot-g4',
      AvailabilityZones: ['eu-west-2a', 'eu-west-2c'],
    };
    g.MixedInstancesPolicy.LaunchTemplate.Overrides = [{ InstanceType: 'g4dn.xlarge' }];
    asg.on(DescribeAutoScalingGroupsCommand).resolves({ AutoScalingGroups: [g] });
    const failed = fixture('autoscaling-DescribeScalingActivities-failed-spot-InsufficientInstanceCapacity.assembled.json');
    const ok = fixture('autoscaling-DescribeScalingActivities-successful.awscli.json');
    asg.on(DescribeScalingActivitiesCommand).resolves({ Activities: [...failed.Activities, ...ok.Activities] });
    const provider = new AsgNodeGroups(asgClient, ec2Client, { region: 'eu-west-2', clock: new VirtualClock(T0), cacheSec: 0 });
    const out = await provider.launchFailures(0);
    expect(out).toEqual([
      {
        groupId: 'spot-g4',
        offeringId: 'aws/eu-west-2c/g4dn.xlarge/on-demand',
        atMs: Date.parse(failed.Activities[0].StartTime),
        code: 'InsufficientInstanceCapacity',
        message: failed.Activities[0].StatusMessage,
      },
    ]);
    expect(asg.commandCalls(DescribeScalingActivitiesCommand)[0]!.args[0].input).toEqual({
      AutoScalingGroupName: 'spot-g4',
      MaxRecords: 100,
    });
  });

  it('completes lifecycle actions, an expired one included', async () => {
    asg
      .on(CompleteLifecycleActionCommand)
      .rejectsOnce(awsError('ValidationError', 'No active Lifecycle Action found with instance ID i-1234567890abcdef0'))
      .resolves({});
    await expect(
      groups().completeLifecycleAction({ groupId: 'g', instanceId: 'i-1234567890abcdef0', hookName: 'gpu-fleet-drain', token: 't' }),
    ).resolves.toBeUndefined();
    expect(asg.commandCalls(CompleteLifecycleActionCommand)[0]!.args[0].input).toEqual({
      AutoScalingGroupName: 'g',
      LifecycleHookName: 'gpu-fleet-drain',
      InstanceId: 'i-1234567890abcdef0',
      LifecycleActionResult: 'CONTINUE',
      LifecycleActionToken: 't',
    });
  });

  it('sends a lifecycle action heartbeat, and an action no longer waiting is no error', async () => {
    asg
      .on(RecordLifecycleActionHeartbeatCommand)
      .rejectsOnce(awsError('ValidationError', 'No active Lifecycle Action found with instance ID i-1234567890abcdef0'))
      .resolves({});
    const input = { groupId: 'g', instanceId: 'i-1234567890abcdef0', hookName: 'gpu-fleet-drain' };
    await expect(groups().recordLifecycleHeartbeat(input)).resolves.toBeUndefined();
    await expect(groups().recordLifecycleHeartbeat({ ...input, token: 't' })).resolves.toBeUndefined();
    expect(asg.commandCalls(RecordLifecycleActionHeartbeatCommand).map((c) => c.args[0].input)).toEqual([
      { AutoScalingGroupName: 'g', LifecycleHookName: 'gpu-fleet-drain', InstanceId: 'i-1234567890abcdef0' },
      { AutoScalingGroupName: 'g', LifecycleHookName: 'gpu-fleet-drain', InstanceId: 'i-1234567890abcdef0', LifecycleActionToken: 't' },
    ]);
    asg.on(RecordLifecycleActionHeartbeatCommand).rejects(awsError('Throttling', 'Rate exceeded'));
    await expect(groups().recordLifecycleHeartbeat(input)).rejects.toMatchObject({ code: 'throttled' });
  });

  it('says throttled for Auto Scaling throttling, and never lets an SDK error type out', async () => {
    asg.on(SetDesiredCapacityCommand).rejects(awsError('Throttling', 'Rate exceeded'));
    const error = await groups()
      .setDesiredCapacity('g', 1)
      .catch((e: unknown) => e);
    expect(isCloudError(error, 'throttled')).toBe(true);
    expect((error as Error).message).toBe('set desired capacity on g failed: Throttling: Rate exceeded');
    expect((error as { retryable: boolean }).retryable).toBe(true);
  });
});
