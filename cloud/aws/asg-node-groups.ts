import {
  type AutoScalingClient,
  CompleteLifecycleActionCommand,
  RecordLifecycleActionHeartbeatCommand,
  DescribeAutoScalingGroupsCommand,
  DescribeAutoScalingInstancesCommand,
  DescribeScalingActivitiesCommand,
  DescribeWarmPoolCommand,
  SetDesiredCapacityCommand,
  SetInstanceProtectionCommand,
  TerminateInstanceInAutoScalingGroupCommand,
  type Activity,
  type AutoScalingGroup,
} from '@aws-sdk/client-auto-scaling';
import { DescribeInstancesCommand, DescribeLaunchTemplateVersionsCommand, type EC2Client } from '@aws-sdk/client-ec2';
import { makeOffering, type CapacityType } from '../../core/catalog.ts';
import { CloudError, messageOf } from '../../core/errors.ts';
import type { Instance, InstanceState, NodeGroup, WarmPool } from '../../core/fleet.ts';
import type { Clock, LaunchFailure, NodeGroupProvider } from '../../core/ports.ts';
import { translateAwsError } from './errors.ts';

/** Tags gpu-fleet reads on Auto Scaling groups. */
export const GROUP_TAGS = {
  managed: 'gpu-fleet:managed',
  capacityType: 'gpu-fleet:capacity-type',
  mig: 'gpu-fleet:mig',
  /** The capacity reservation a `reserved` group's launch template targets (the stack writes it; else the template is read). */
  reservation: 'gpu-fleet:reservation',
} as const;

/** The value of the `gpu-fleet:mig` tag on a MIG group (the stack writes it; `enabled` is read too, for groups tagged by hand). */
export const MIG_TAG_VALUE = 'true';

/** The group's machines boot in MIG mode: its `gpu-fleet:mig` tag says `true` (or `enabled`). */
export function isMigGroup(g: Pick<AutoScalingGroup, 'Tags'>): boolean {
  const v = tag(g as AutoScalingGroup, GROUP_TAGS.mig)?.toLowerCase();
  return v === MIG_TAG_VALUE || v === 'enabled';
}

export interface AsgOptions {
  readonly region: string;
  readonly clock: Clock;
  /** How long the list of managed groups is trusted, seconds (default 20). */
  readonly cacheSec?: number;
}

/** Codes of failed launches, as they appear in scaling activities' status messages. */
const FAILURE_CODES: readonly [RegExp, string][] = [
  [/InsufficientInstanceCapacity|do not have sufficient .* capacity|no Spot capacity available/i, 'InsufficientInstanceCapacity'],
  [/MaxSpotInstanceCountExceeded|Max spot instance count exceeded/i, 'MaxSpotInstanceCountExceeded'],
  [/UnfulfillableCapacity/i, 'UnfulfillableCapacity'],
  [/VcpuLimitExceeded|vCPU/i, 'VcpuLimitExceeded'],
  [/InstanceLimitExceeded|current instance limit/i, 'InstanceLimitExceeded'],
  [/InvalidFleetConfiguration|not supported in your requested Availability Zone/i, 'InvalidFleetConfiguration'],
  [/Spot request price .* lower than the minimum/i, 'SpotMaxPriceTooLow'],
];

/**
 * Node groups on EC2 Auto Scaling. Groups tagged `gpu-fleet:managed=true` are found by tag
 * (paginated); their offerings are the instance types of the mixed instances policy (or the
 * launch template) × the zones of their subnets × the capacity type (the instances
 * distribution, or the tag `gpu-fleet:capacity-type`). Instances come with their market from
 * EC2. Busy nodes are protected from the group's own scale-in, specific nodes are removed with
 * the desired size lowered, and failed launches are read from the scaling activities.
 */
export class AsgNodeGroups implements NodeGroupProvider {
  readonly cloud = 'aws' as const;
  /** The region it manages groups in, to name it when it fails. */
  get scope(): string {
    return this.options.region;
  }
  private groupsCache: { atMs: number; groups: AutoScalingGroup[] } | undefined;
  private readonly templateFacts = new Map<string, { instanceType?: string; reservationId?: string }>();
  /** Problems found while reading groups (a group whose instance types cannot be known), for logs and status. */
  readonly problems: string[] = [];

  constructor(
    private readonly asg: AutoScalingClient,
    private readonly ec2: EC2Client,
    private readonly options: AsgOptions,
  ) {}

  private async describeManaged(fresh = false): Promise<AutoScalingGroup[]> {
    const now = this.options.clock.nowMs();
    if (!fresh && this.groupsCache && now - this.groupsCache.atMs < (this.options.cacheSec ?? 20) * 1000) return this.groupsCache.groups;
    const groups: AutoScalingGroup[] = [];
    let token: string | undefined;
    do {
      const page = await this.call('describe node groups', 'gpu-fleet:managed=true', () =>
        this.asg.send(
          new DescribeAutoScalingGroupsCommand({
            Filters: [{ Name: `tag:${GROUP_TAGS.managed}`, Values: ['true'] }],
            MaxRecords: 100,
            ...(token ? { NextToken: token } : {}),
          }),
        ),
      );
      groups.push(...(page.AutoScalingGroups ?? []));
      token = page.NextToken;
    } while (token);
    this.groupsCache = { atMs: now, groups };
    return groups;
  }

  async listGroups(): Promise<NodeGroup[]> {
    const groups = await this.describeManaged(true);
    this.problems.length = 0;
    const out: NodeGroup[] = [];
    for (const g of groups) {
      const name = g.AutoScalingGroupName!;
      const types = await this.instanceTypes(g);
      if (types.length === 0) {
        this.problems.push(
          `group ${name}: its instance types cannot be known (attribute-based instance requirements, or a launch template without an instance type); list the instance types in its mixed instances policy overrides`,
        );
      }
      const capacityType = capacityTypeOf(g);
      const zones = [...(g.AvailabilityZones ?? [])].sort();
      // A reserved group launches into one reservation: its tag names it, or its launch template's capacity reservation target does.
      const reservationId =
        capacityType === 'reserved' ? (tag(g, GROUP_TAGS.reservation) ?? (await this.template(g))?.reservationId) : undefined;
      if (capacityType === 'reserved' && !reservationId) {
        this.problems.push(
          `group ${name}: tagged ${GROUP_TAGS.capacityType}=reserved but names no reservation (tag ${GROUP_TAGS.reservation}, or a capacity reservation target in its launch template); left out`,
        );
        continue;
      }
      out.push({
        id: name,
        cloud: 'aws',
        region: this.options.region,
        offerings: types.flatMap((instanceType) =>
          zones.map((zone) =>
            makeOffering({
              cloud: 'aws',
              region: this.options.region,
              zone,
              instanceType,
              capacityType,
              ...(reservationId ? { reservationId } : {}),
            }),
          ),
        ),
        minSize: g.MinSize ?? 0,
        maxSize: g.MaxSize ?? 0,
        desiredCapacity: g.DesiredCapacity ?? 0,
        ...(isMigGroup(g) ? { migEnabled: true } : {}),
        ...(g.WarmPoolConfiguration ? { warm: await this.warmPool(g) } : {}),
      });
    }
    return out;
  }

  /** The group's warm pool, from DescribeWarmPool (its instances are not the group's); unreadable, its size alone, as prepared. */
  private async warmPool(g: AutoScalingGroup): Promise<WarmPool> {
    const name = g.AutoScalingGroupName!;
    const poolState = g.WarmPoolConfiguration?.PoolState;
    try {
      const lifecycles: string[] = [];
      let token: string | undefined;
      do {
        const page = await this.asg.send(
          new DescribeWarmPoolCommand({ AutoScalingGroupName: name, MaxRecords: 50, ...(token ? { NextToken: token } : {}) }),
        );
        for (const i of page.Instances ?? []) lifecycles.push(i.LifecycleState ?? '');
        token = page.NextToken || undefined;
      } while (token);
      return warmPoolOf(poolState, lifecycles);
    } catch (error) {
      this.problems.push(`group ${name}: its warm pool could not be read (${messageOf(error)}); counted from its size`);
      return warmPoolOf(poolState, new Array<string>(g.WarmPoolSize ?? 0).fill('Warmed:Stopped'));
    }
  }

  private async instanceTypes(g: AutoScalingGroup): Promise<string[]> {
    const overrides = g.MixedInstancesPolicy?.LaunchTemplate?.Overrides ?? [];
    const fromOverrides = overrides.map((o) => o.InstanceType).filter((t): t is string => typeof t === 'string');
    if (fromOverrides.length > 0) return [...new Set(fromOverrides)];
    // Attribute-based selection: Auto Scaling picks the types, so gpu-fleet cannot plan with them.
    if (overrides.some((o) => o.InstanceRequirements !== undefined)) return [];
    const t = (await this.template(g))?.instanceType;
    return t ? [t] : [];
  }

  /** What gpu-fleet reads in a group's launch template (cached by template and version): its instance type and reservation target. */
  private async template(g: AutoScalingGroup): Promise<{ instanceType?: string; reservationId?: string } | undefined> {
    const spec = g.MixedInstancesPolicy?.LaunchTemplate?.LaunchTemplateSpecification ?? g.LaunchTemplate;
    if (!spec?.LaunchTemplateId && !spec?.LaunchTemplateName) return undefined;
    const key = `${spec.LaunchTemplateId ?? spec.LaunchTemplateName}@${spec.Version ?? '$Default'}`;
    if (!this.templateFacts.has(key)) {
      const out = await this.call('read launch template', key, () =>
        this.ec2.send(
          new DescribeLaunchTemplateVersionsCommand({
            ...(spec.LaunchTemplateId ? { LaunchTemplateId: spec.LaunchTemplateId } : { LaunchTemplateName: spec.LaunchTemplateName! }),
            Versions: [spec.Version ?? '$Default'],
          }),
        ),
      );
      const data = out.LaunchTemplateVersions?.[0]?.LaunchTemplateData;
      const reservationId = data?.CapacityReservationSpecification?.CapacityReservationTarget?.CapacityReservationId;
      this.templateFacts.set(key, {
        ...(data?.InstanceType ? { instanceType: data.InstanceType } : {}),
        ...(reservationId ? { reservationId } : {}),
      });
    }
    return this.templateFacts.get(key);
  }

  async listInstances(): Promise<Instance[]> {
    const groups = await this.describeManaged(true);
    const members = groups.flatMap((g) => (g.Instances ?? []).filter((i) => !isWarmed(i.LifecycleState)).map((i) => ({ g, i })));
    const details = await this.ec2Details(members.map((m) => m.i.InstanceId!));
    return members.map(({ g, i }) => this.instanceOf(g, i, details.get(i.InstanceId!)));
  }

  /** Market, launch time, zone and type of instances, from EC2 (batched, paginated). */
  /**
   * EC2's view of the given instances. EC2 is eventually consistent: an instance its group already
   * lists may be unknown to DescribeInstances for a while, and one unknown id fails the whole call
   * with InvalidInstanceID.NotFound naming the ids. Those are left out and the rest described
   * again; an instance left out keeps its group's view (its purchase option from the group's
   * distribution) until EC2 knows it.
   */
  private async ec2Details(ids: readonly string[]): Promise<Map<string, Ec2Details>> {
    const out = new Map<string, Ec2Details>();
    for (let i = 0; i < ids.length; i += 500) {
      let batch = ids.slice(i, i + 500);
      // One batch: described page by page; when EC2 does not know some ids, described again without them.
      for (;;) {
        if (batch.length === 0) break;
        const found = new Map<string, Ec2Details>();
        try {
          let token: string | undefined;
          do {
            const page = await this.ec2.send(new DescribeInstancesCommand({ InstanceIds: batch, ...(token ? { NextToken: token } : {}) }));
            for (const r of page.Reservations ?? []) {
              for (const inst of r.Instances ?? []) {
                found.set(inst.InstanceId!, {
                  spot: inst.InstanceLifecycle === 'spot',
                  ...(inst.CapacityReservationId ? { reservationId: inst.CapacityReservationId } : {}),
                  launchedAtMs: inst.LaunchTime ? new Date(inst.LaunchTime).getTime() : this.options.clock.nowMs(),
                  zone: inst.Placement?.AvailabilityZone ?? '',
                  instanceType: inst.InstanceType ?? '',
                });
              }
            }
            token = page.NextToken;
          } while (token);
        } catch (error) {
          const unknown = (error as { name?: string }).name === 'InvalidInstanceID.NotFound' ? unknownInstanceIds(error, batch) : [];
          if (unknown.length === 0)
            throw translateAwsError(error, { operation: 'describe instances', resource: `${ids.length} instances` });
          batch = batch.filter((id) => !unknown.includes(id));
          continue;
        }
        for (const [id, d] of found) out.set(id, d);
        break;
      }
    }
    return out;
  }

  async describeInstance(instanceId: string): Promise<Instance | undefined> {
    const out = await this.call('describe instance', instanceId, () =>
      this.asg.send(new DescribeAutoScalingInstancesCommand({ InstanceIds: [instanceId] })),
    );
    const i = out.AutoScalingInstances?.[0];
    if (!i || isWarmed(i.LifecycleState)) return undefined;
    const groups = await this.describeManaged();
    let g = groups.find((x) => x.AutoScalingGroupName === i.AutoScalingGroupName);
    if (!g) g = (await this.describeManaged(true)).find((x) => x.AutoScalingGroupName === i.AutoScalingGroupName);
    if (!g) return undefined; // in a group gpu-fleet does not manage
    return this.instanceOf(g, i, (await this.ec2Details([instanceId])).get(instanceId));
  }

  /**
   * A group member as gpu-fleet sees it: the group's view (zone, type, lifecycle, protection),
   * with EC2's for what the group does not say (purchase option, launch time).
   */
  private instanceOf(
    g: AutoScalingGroup,
    i: { InstanceId?: string; AvailabilityZone?: string; InstanceType?: string; LifecycleState?: string; ProtectedFromScaleIn?: boolean },
    d: Ec2Details | undefined,
  ): Instance {
    return {
      id: i.InstanceId!,
      groupId: g.AutoScalingGroupName!,
      cloud: 'aws',
      region: this.options.region,
      zone: i.AvailabilityZone ?? d?.zone ?? '',
      instanceType: i.InstanceType ?? d?.instanceType ?? '',
      // A machine in a reservation is reserved capacity (EC2 names the reservation it runs in); otherwise its market says.
      ...(d?.reservationId && capacityTypeOf(g) === 'reserved'
        ? { capacityType: 'reserved' as const, reservationId: d.reservationId }
        : { capacityType: d?.spot ? ('spot' as const) : d ? ('on-demand' as const) : capacityTypeOf(g) }),
      state: stateOf(i.LifecycleState),
      launchedAtMs: d?.launchedAtMs ?? this.options.clock.nowMs(),
      scaleInProtected: i.ProtectedFromScaleIn ?? false,
    };
  }

  async setDesiredCapacity(groupId: string, desired: number): Promise<void> {
    await this.call('set desired capacity', groupId, () =>
      this.asg.send(new SetDesiredCapacityCommand({ AutoScalingGroupName: groupId, DesiredCapacity: desired, HonorCooldown: false })),
    );
    this.groupsCache = undefined;
  }

  async terminateInstance(groupId: string, instanceId: string): Promise<{ alreadyGone: boolean }> {
    const terminate = (decrement: boolean) =>
      this.asg.send(new TerminateInstanceInAutoScalingGroupCommand({ InstanceId: instanceId, ShouldDecrementDesiredCapacity: decrement }));
    try {
      try {
        await terminate(true);
      } catch (error) {
        // A group at its minimum refuses to shrink ("… will violate group min size constraint"): the machine goes and the group replaces it.
        if (!/min size constraint/i.test((error as Error).message ?? '')) throw error;
        await terminate(false);
      }
      this.groupsCache = undefined;
      return { alreadyGone: false };
    } catch (error) {
      const e = translateAwsError(error, { operation: 'terminate instance', resource: `${groupId}/${instanceId}` });
      // "Instance Id not found", or an instance already terminating: gone as far as gpu-fleet is concerned.
      if (e.code === 'not-found' || (e.code === 'invalid-request' && /not found|terminat|not part of/i.test(e.message)))
        return { alreadyGone: true };
      throw e;
    }
  }

  async setScaleInProtection(groupId: string, instanceIds: readonly string[], protect: boolean): Promise<void> {
    const group =
      (await this.describeManaged()).find((g) => g.AutoScalingGroupName === groupId) ??
      (await this.describeManaged(true)).find((g) => g.AutoScalingGroupName === groupId);
    if (!group)
      throw new CloudError('not-found', `node group ${groupId} does not exist or is not managed by gpu-fleet`, {
        operation: 'set scale-in protection',
        resource: groupId,
        cloud: 'aws',
      });
    const members = new Set(
      (group.Instances ?? [])
        .filter((i) => i.LifecycleState === 'InService' || i.LifecycleState?.startsWith('Pending'))
        .map((i) => i.InstanceId),
    );
    const ids = instanceIds.filter((id) => members.has(id));
    for (let i = 0; i < ids.length; i += 50) {
      await this.call('set scale-in protection', groupId, () =>
        this.asg.send(
          new SetInstanceProtectionCommand({
            AutoScalingGroupName: groupId,
            InstanceIds: ids.slice(i, i + 50),
            ProtectedFromScaleIn: protect,
          }),
        ),
      );
    }
  }

  async launchFailures(sinceMs: number): Promise<LaunchFailure[]> {
    const groups = await this.listGroups();
    const out: LaunchFailure[] = [];
    for (const g of groups) {
      let token: string | undefined;
      let older = false;
      do {
        const page = await this.call('describe scaling activities', g.id, () =>
          this.asg.send(
            new DescribeScalingActivitiesCommand({ AutoScalingGroupName: g.id, MaxRecords: 100, ...(token ? { NextToken: token } : {}) }),
          ),
        );
        for (const a of page.Activities ?? []) {
          const at = a.StartTime ? new Date(a.StartTime).getTime() : 0;
          if (at < sinceMs) {
            older = true; // activities come newest first
            continue;
          }
          if (a.StatusCode !== 'Failed') continue;
          out.push(...failuresOf(g, a, at));
        }
        token = older ? undefined : page.NextToken;
      } while (token);
    }
    return out.sort((a, b) => a.atMs - b.atMs);
  }

  async completeLifecycleAction(input: { groupId: string; instanceId: string; hookName: string; token?: string }): Promise<void> {
    await this.lifecycleCall('complete lifecycle action', input, (action) =>
      this.asg.send(new CompleteLifecycleActionCommand({ ...action, LifecycleActionResult: 'CONTINUE' })),
    );
  }

  async recordLifecycleHeartbeat(input: { groupId: string; instanceId: string; hookName: string; token?: string }): Promise<void> {
    await this.lifecycleCall('record lifecycle action heartbeat', input, (action) =>
      this.asg.send(new RecordLifecycleActionHeartbeatCommand(action)),
    );
  }

  /**
   * A call on a machine's lifecycle action. "No active Lifecycle Action found" means the action
   * ended (completed already, timed out, or past its global timeout): nothing is left to do, and
   * the call resolves, so both calls are idempotent.
   */
  private async lifecycleCall(
    operation: string,
    input: { groupId: string; instanceId: string; hookName: string; token?: string },
    send: (action: {
      AutoScalingGroupName: string;
      LifecycleHookName: string;
      InstanceId: string;
      LifecycleActionToken?: string;
    }) => Promise<unknown>,
  ): Promise<void> {
    try {
      await send({
        AutoScalingGroupName: input.groupId,
        LifecycleHookName: input.hookName,
        InstanceId: input.instanceId,
        ...(input.token ? { LifecycleActionToken: input.token } : {}),
      });
    } catch (error) {
      const e = translateAwsError(error, { operation, resource: `${input.groupId}/${input.instanceId}` });
      if (e.code === 'invalid-request' && /no active lifecycle action|not found/i.test(e.message)) return;
      throw e;
    }
  }

  private async call<T>(operation: string, resource: string, f: () => Promise<T>): Promise<T> {
    try {
      return await f();
    } catch (error) {
      const e = translateAwsError(error, { operation, resource });
      // Auto Scaling reports a missing group as a ValidationError.
      if (e.code === 'invalid-request' && /AutoScalingGroup name not found|not found/i.test(e.message)) {
        throw new CloudError('not-found', e.message, { operation, resource, cloud: 'aws' }, { cause: error });
      }
      throw e;
    }
  }
}

function tag(g: AutoScalingGroup, key: string): string | undefined {
  return g.Tags?.find((t) => t.Key === key)?.Value;
}

/** The group's capacity type: its tag, else spot when the distribution is all spot, else on-demand. */
/** What EC2 says of an instance that its group does not. */
interface Ec2Details {
  readonly spot: boolean;
  /** The capacity reservation it runs in (EC2 CapacityReservationId). */
  readonly reservationId?: string;
  readonly launchedAtMs: number;
  readonly zone: string;
  readonly instanceType: string;
}

export function capacityTypeOf(g: AutoScalingGroup): CapacityType {
  const t = tag(g, GROUP_TAGS.capacityType);
  if (t === 'spot' || t === 'on-demand' || t === 'reserved') return t;
  const d = g.MixedInstancesPolicy?.InstancesDistribution;
  if (d && (d.OnDemandPercentageAboveBaseCapacity ?? 100) === 0 && (d.OnDemandBaseCapacity ?? 0) === 0) return 'spot';
  return 'on-demand';
}

/**
 * An Auto Scaling LifecycleState in gpu-fleet's words (the API reference's values). A `Warmed:*`
 * machine is not the group's capacity yet: it is left out of listings and counted in the group's
 * warm pool (warmPoolOf).
 */
export function stateOf(lifecycle: string | undefined): InstanceState {
  if (!lifecycle) return 'pending';
  if (lifecycle === 'InService' || lifecycle === 'Standby' || lifecycle.startsWith('EnteringStandby')) return 'running';
  if (lifecycle === 'Pending:Wait') return 'pending-wait';
  if (lifecycle.startsWith('Pending')) return 'pending'; // Pending, Pending:Proceed
  if (lifecycle === 'Terminating:Wait') return 'terminating-wait';
  if (lifecycle === 'Terminated') return 'terminated';
  return 'stopping'; // Terminating, Terminating:Proceed, Detaching, Detached
}

const isWarmed = (lifecycle: string | undefined) => lifecycle?.startsWith('Warmed:') ?? false;

/**
 * A group's warm pool, counted apart from its capacity from its instances' lifecycle states
 * (DescribeWarmPool's): machines prepared (`Warmed:Stopped`, `Warmed:Hibernated`, `Warmed:Running`)
 * and those still being prepared (`Warmed:Pending*`); one leaving the pool (`Warmed:Terminating*`)
 * is neither.
 */
export function warmPoolOf(poolState: string | undefined, lifecycles: readonly string[]): WarmPool {
  return {
    state: poolState === 'Hibernated' || poolState === 'Running' ? poolState : 'Stopped',
    ready: lifecycles.filter((l) => l === 'Warmed:Stopped' || l === 'Warmed:Hibernated' || l === 'Warmed:Running').length,
    preparing: lifecycles.filter((l) => l.startsWith('Warmed:Pending')).length,
  };
}

/**
 * The asked ids an InvalidInstanceID.NotFound names ("The instance ID 'i-…' does not exist", "The
 * instance IDs 'i-…, i-…' do not exist"); none when it names none of them.
 */
function unknownInstanceIds(error: unknown, asked: readonly string[]): string[] {
  const named = new Set(String((error as { message?: unknown }).message ?? '').match(/i-[0-9a-f]{8,17}/g) ?? []);
  return asked.filter((id) => named.has(id));
}

/** The launch failures an activity reports: the code from its message, the zone from its details, per instance type of the group. */
export function failuresOf(g: NodeGroup, a: Activity, atMs: number): LaunchFailure[] {
  const text = `${a.StatusMessage ?? ''} ${a.Description ?? ''}`;
  const code = FAILURE_CODES.find(([re]) => re.test(text))?.[1] ?? 'LaunchFailed';
  let zone: string | undefined;
  try {
    zone = (JSON.parse(a.Details ?? '{}') as Record<string, string>)['Availability Zone'];
  } catch {
    zone = /Availability Zone[^a-z0-9]*([a-z]{2}-[a-z]+-\d[a-z])/.exec(a.Details ?? '')?.[1];
  }
  zone ??= /\(([a-z]{2}-[a-z]+-\d[a-z])\)/.exec(text)?.[1];
  const typeInText = /(\b[a-z0-9]+\.[0-9]*[a-z]+\b)/.exec(text)?.[1];
  const offerings = g.offerings.filter(
    (o) =>
      (zone === undefined || o.zone === zone) &&
      (typeInText === undefined || !g.offerings.some((x) => x.instanceType === typeInText) || o.instanceType === typeInText),
  );
  const base = { groupId: g.id, atMs, code, message: a.StatusMessage ?? a.Description ?? code };
  return offerings.length > 0 ? offerings.map((o) => ({ ...base, offeringId: o.id })) : [base];
}
