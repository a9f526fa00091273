import {
  AutoScalingClient,
  CompleteLifecycleActionCommand,
  DescribeAutoScalingGroupsCommand,
  DescribeAutoScalingInstancesCommand,
  DescribeScalingActivitiesCommand,
  RecordLifecycleActionHeartbeatCommand,
  SetDesiredCapacityCommand,
  SetInstanceProtectionCommand,
  TerminateInstanceInAutoScalingGroupCommand,
  type AutoScalingGroup,
} from '@aws-sdk/client-auto-scaling';
import { DescribeInstancesCommand, EC2Client } from '@aws-sdk/client-ec2';
import { mockClient } from 'aws-sdk-client-mock';

/** An AWS error as the SDK v3 raises it: `name` is the AWS error code. */
export function awsError(name: string, message: string, httpStatusCode = 400): Error {
  return Object.assign(new Error(message), { name, $metadata: { httpStatusCode }, $fault: httpStatusCode >= 500 ? 'server' : 'client' });
}

interface FakeInstance {
  InstanceId: string;
  AvailabilityZone: string;
  LifecycleState: string;
  InstanceType: string;
  ProtectedFromScaleIn: boolean;
  spot: boolean;
  launched: Date;
  /** EC2 does not know it yet (eventual consistency: a just-launched instance the group already lists). */
  unknownToEc2?: boolean;
}

interface FakeGroup {
  name: string;
  min: number;
  max: number;
  desired: number;
  zones: string[];
  types: string[];
  spot: boolean;
  managed: boolean;
  instances: FakeInstance[];
}

/**
 * A small Auto Scaling + EC2 that behaves: groups keep their desired size (launching on
 * `settle`), refuse sizes outside their limits with the real ValidationError text, terminate
 * specific instances, protect them, and answer with the field names of the real APIs. Built
 * on aws-sdk-client-mock, so every call is recorded.
 */
export function fakeAutoScaling(groups: Omit<FakeGroup, 'instances' | 'desired'>[]) {
  const state = new Map<string, FakeGroup>(groups.map((g) => [g.name, { ...g, desired: g.min, instances: [] }]));
  let counter = 0;
  const asgClient = new AutoScalingClient({ region: 'us-west-2', credentials: { accessKeyId: 'x', secretAccessKey: 'x' } });
  const ec2Client = new EC2Client({ region: 'us-west-2', credentials: { accessKeyId: 'x', secretAccessKey: 'x' } });
  const asg = mockClient(asgClient);
  const ec2 = mockClient(ec2Client);

  const view = (g: FakeGroup): AutoScalingGroup => ({
    AutoScalingGroupName: g.name,
    AutoScalingGroupARN: `arn:aws:autoscaling:us-west-2:123456789012:autoScalingGroup:00000000-0000-0000-0000-000000000000:autoScalingGroupName/${g.name}`,
    MixedInstancesPolicy: {
      LaunchTemplate: {
        LaunchTemplateSpecification: { LaunchTemplateId: 'lt-0123456789abcdef0', LaunchTemplateName: g.name, Version: '$Default' },
        Overrides: g.types.map((t) => ({ InstanceType: t })),
      },
      InstancesDistribution: {
        OnDemandBaseCapacity: 0,
        OnDemandPercentageAboveBaseCapacity: g.spot ? 0 : 100,
        SpotAllocationStrategy: 'price-capacity-optimized',
      },
    },
    MinSize: g.min,
    MaxSize: g.max,
    DesiredCapacity: g.desired,
    DefaultCooldown: 300,
    AvailabilityZones: g.zones,
    HealthCheckType: 'EC2',
    HealthCheckGracePeriod: 300,
    Instances: g.instances
      .filter((i) => i.LifecycleState !== 'Terminated')
      .map((i) => ({
        InstanceId: i.InstanceId,
        InstanceType: i.InstanceType,
        AvailabilityZone: i.AvailabilityZone,
        LifecycleState: i.LifecycleState as never,
        HealthStatus: 'Healthy',
        ProtectedFromScaleIn: i.ProtectedFromScaleIn,
      })),
    CreatedTime: new Date('2026-11-01T00:00:00Z'),
    Tags: g.managed
      ? [{ ResourceId: g.name, ResourceType: 'auto-scaling-group', Key: 'gpu-fleet:managed', Value: 'true', PropagateAtLaunch: true }]
      : [],
    CapacityRebalance: true,
  });

  // Pages of MaxRecords groups (default 50, at most 100), NextToken for the rest (API reference, DescribeAutoScalingGroups).
  asg
    .on(DescribeAutoScalingGroupsCommand)
    .callsFake((input: { Filters?: { Name?: string; Values?: string[] }[]; MaxRecords?: number; NextToken?: string }) => {
      const max = input.MaxRecords ?? 50;
      if (!Number.isInteger(max) || max < 1 || max > 100)
        throw awsError(
          'ValidationError',
          `1 validation error detected: Value '${max}' at 'maxRecords' failed to satisfy constraint: Member must have value less than or equal to 100`,
        );
      const managedOnly = input.Filters?.some((f) => f.Name === 'tag:gpu-fleet:managed' && f.Values?.includes('true'));
      const all = [...state.values()].filter((g) => !managedOnly || g.managed);
      const from = input.NextToken === undefined ? 0 : Number(input.NextToken.replace(/^page-/, ''));
      if (input.NextToken !== undefined && !(Number.isInteger(from) && from > 0 && from < all.length))
        throw awsError('InvalidNextToken', 'The token provided is not valid.');
      return {
        AutoScalingGroups: all.slice(from, from + max).map(view),
        ...(from + max < all.length ? { NextToken: `page-${from + max}` } : {}),
      };
    });
  asg.on(SetDesiredCapacityCommand).callsFake((input: { AutoScalingGroupName: string; DesiredCapacity: number }) => {
    const g = state.get(input.AutoScalingGroupName);
    if (!g)
      throw awsError('ValidationError', 'AutoScalingGroup name not found - AutoScalingGroup ' + input.AutoScalingGroupName + ' not found');
    if (input.DesiredCapacity > g.max)
      throw awsError(
        'ValidationError',
        `New SetDesiredCapacity value ${input.DesiredCapacity} is above max value ${g.max} for the AutoScalingGroup.`,
      );
    if (input.DesiredCapacity < g.min)
      throw awsError(
        'ValidationError',
        `New SetDesiredCapacity value ${input.DesiredCapacity} is below min value ${g.min} for the AutoScalingGroup.`,
      );
    g.desired = input.DesiredCapacity;
    return {};
  });
  asg.on(TerminateInstanceInAutoScalingGroupCommand).callsFake((input: { InstanceId: string; ShouldDecrementDesiredCapacity: boolean }) => {
    for (const g of state.values()) {
      const i = g.instances.find((x) => x.InstanceId === input.InstanceId && x.LifecycleState !== 'Terminated');
      if (!i) continue;
      if (input.ShouldDecrementDesiredCapacity && g.desired - 1 < g.min)
        throw awsError(
          'ValidationError',
          `Currently, desiredCapacity=${g.desired} and minSize=${g.min}, terminating instance without replacement will violate group min size constraint. Either set shouldDecrementDesiredCapacity flag to false or lower group min size.`,
        );
      i.LifecycleState = 'Terminated';
      if (input.ShouldDecrementDesiredCapacity) g.desired -= 1;
      return {
        Activity: {
          ActivityId: `act-${++counter}`,
          AutoScalingGroupName: g.name,
          Description: `Terminating EC2 instance: ${i.InstanceId}`,
          Cause: 'requested',
          StartTime: new Date(),
          StatusCode: 'InProgress',
          Progress: 0,
        },
      };
    }
    throw awsError('ValidationError', 'Instance Id not found - No managed instance found for instance ID: ' + input.InstanceId);
  });
  asg
    .on(SetInstanceProtectionCommand)
    .callsFake((input: { AutoScalingGroupName: string; InstanceIds: string[]; ProtectedFromScaleIn: boolean }) => {
      const g = state.get(input.AutoScalingGroupName);
      if (!g)
        throw awsError('ValidationError', `AutoScalingGroup name not found - AutoScalingGroup ${input.AutoScalingGroupName} not found`);
      for (const id of input.InstanceIds) {
        const i = g.instances.find((x) => x.InstanceId === id);
        if (!i) throw awsError('ValidationError', `The instance ${id} is not part of Auto Scaling group ${g.name}.`);
        i.ProtectedFromScaleIn = input.ProtectedFromScaleIn;
      }
      return {};
    });
  asg.on(DescribeAutoScalingInstancesCommand).callsFake((input: { InstanceIds?: string[] }) => ({
    AutoScalingInstances: [...state.values()].flatMap((g) =>
      g.instances
        .filter((i) => input.InstanceIds?.includes(i.InstanceId) && i.LifecycleState !== 'Terminated')
        .map((i) => ({
          InstanceId: i.InstanceId,
          InstanceType: i.InstanceType,
          AutoScalingGroupName: g.name,
          AvailabilityZone: i.AvailabilityZone,
          LifecycleState: i.LifecycleState,
          HealthStatus: 'HEALTHY',
          ProtectedFromScaleIn: i.ProtectedFromScaleIn,
        })),
    ),
  }));
  asg.on(DescribeScalingActivitiesCommand).resolves({ Activities: [] });
  asg.on(CompleteLifecycleActionCommand).callsFake((input: { InstanceId?: string; LifecycleHookName: string }) => {
    const held = [...state.values()]
      .flatMap((g) => g.instances)
      .find((i) => i.InstanceId === input.InstanceId && i.LifecycleState === 'Terminating:Wait');
    if (!held)
      throw awsError('ValidationError', `No active Lifecycle Action found with instance ID ${input.InstanceId ?? 'i-0000000000000000'}`);
    held.LifecycleState = 'Terminating:Proceed';
    return {};
  });
  // A heartbeat extends an action in progress; without one, the same ValidationError as completing it.
  asg.on(RecordLifecycleActionHeartbeatCommand).callsFake((input: { InstanceId?: string; LifecycleHookName: string }) => {
    const held = [...state.values()]
      .flatMap((g) => g.instances)
      .some((i) => i.InstanceId === input.InstanceId && i.LifecycleState === 'Terminating:Wait');
    if (!held)
      throw awsError('ValidationError', `No active Lifecycle Action found with instance ID ${input.InstanceId ?? 'i-0000000000000000'}`);
    return {};
  });
  // As EC2 answers: an id it does not know (never was, or too new to be known) fails the whole call with
  // InvalidInstanceID.NotFound naming the ids ("The instance ID 'i-…' does not exist", "The instance IDs 'i-…, i-…' do not exist").
  ec2.on(DescribeInstancesCommand).callsFake((input: { InstanceIds?: string[] }) => {
    const known = new Set([...state.values()].flatMap((g) => g.instances.filter((i) => !i.unknownToEc2).map((i) => i.InstanceId)));
    const unknown = (input.InstanceIds ?? []).filter((id) => !known.has(id));
    if (unknown.length === 1) throw awsError('InvalidInstanceID.NotFound', `The instance ID '${unknown[0]}' does not exist`);
    if (unknown.length > 1) throw awsError('InvalidInstanceID.NotFound', `The instance IDs '${unknown.join(', ')}' do not exist`);
    return describedInstances(input);
  });
  const describedInstances = (input: { InstanceIds?: string[] }) => ({
    Reservations: [
      {
        ReservationId: 'r-0123456789abcdef0',
        Instances: [...state.values()].flatMap((g) =>
          g.instances
            .filter((i) => input.InstanceIds?.includes(i.InstanceId))
            .map((i) => ({
              InstanceId: i.InstanceId,
              InstanceType: i.InstanceType,
              LaunchTime: i.launched,
              Placement: { AvailabilityZone: i.AvailabilityZone },
              ...(i.spot ? { InstanceLifecycle: 'spot' as const } : {}),
              State: { Code: 16, Name: 'running' as const },
            })),
        ),
      },
    ],
  });

  return {
    asgClient,
    ec2Client,
    asg,
    ec2,
    /**
     * The group starts taking a machine away itself (the LifecycleState values are the API
     * reference's; the recorded responses in ../shared/data/api/aws show only InService, so these
     * are assembled): its terminate hook holds it in Terminating:Wait until completed.
     */
    holdForTermination(instanceId: string) {
      const i = [...state.values()].flatMap((g) => g.instances).find((x) => x.InstanceId === instanceId);
      if (!i) throw new Error(`no instance ${instanceId}`);
      i.LifecycleState = 'Terminating:Wait';
    },
    /** EC2 learns of the instances launched so far (those `settle({ ec2Lags: true })` launched). */
    ec2CatchesUp() {
      for (const g of state.values()) for (const i of g.instances) delete i.unknownToEc2;
    },
    /**
     * Launches what each group misses, as Auto Scaling would over the next minutes; machines let go by their hook end.
     * `ec2Lags`: the new instances are in their group, but EC2's DescribeInstances does not know them yet.
     */
    settle(options: { ec2Lags?: boolean } = {}) {
      for (const g of state.values()) {
        for (const i of g.instances) if (i.LifecycleState === 'Terminating:Proceed') i.LifecycleState = 'Terminated';
        let live = g.instances.filter((i) => i.LifecycleState === 'InService' || i.LifecycleState.startsWith('Pending')).length;
        while (live < g.desired) {
          const id = `i-${(++counter).toString(16).padStart(17, '0')}`;
          g.instances.push({
            InstanceId: id,
            AvailabilityZone: g.zones[counter % g.zones.length]!,
            LifecycleState: 'InService',
            InstanceType: g.types[0]!,
            ProtectedFromScaleIn: false,
            spot: g.spot,
            launched: new Date('2026-11-30T12:00:00Z'),
            ...(options.ec2Lags ? { unknownToEc2: true } : {}),
          });
          live++;
        }
      }
    },
  };
}
