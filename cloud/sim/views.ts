/**
 * How an older gpu-fleet saw the simulated world, for comparisons in one run: without reservation
 * support, a group whose launch template targets a reservation is just an on-demand group at list
 * price, and its machines are on-demand machines (the cloud still launches them into the
 * reservation and bills the reservation, which is the world's business, not the view's).
 */
import { makeOffering, type Offering } from '../../core/catalog.ts';
import type { Instance, NodeGroup } from '../../core/fleet.ts';
import type { LaunchFailure, NodeGroupProvider } from '../../core/ports.ts';

function asOnDemand(o: Offering): Offering {
  if (o.capacityType !== 'reserved') return o;
  return makeOffering({ cloud: o.cloud, region: o.region, zone: o.zone, instanceType: o.instanceType, capacityType: 'on-demand' });
}

function instanceAsOnDemand(i: Instance): Instance {
  if (i.capacityType !== 'reserved') return i;
  const { reservationId: _hidden, ...rest } = i;
  void _hidden;
  return { ...rest, capacityType: 'on-demand' };
}

/** A provider whose reserved groups and machines look on-demand, as a reservation-unaware control plane reads them. */
export class ReservationsHidden implements NodeGroupProvider {
  readonly cloud: NodeGroupProvider['cloud'];
  readonly scope?: string;

  constructor(private readonly inner: NodeGroupProvider) {
    this.cloud = inner.cloud;
    if (inner.scope !== undefined) this.scope = inner.scope;
  }

  async listGroups(): Promise<NodeGroup[]> {
    return (await this.inner.listGroups()).map((g) => ({ ...g, offerings: g.offerings.map(asOnDemand) }));
  }
  async listInstances(): Promise<Instance[]> {
    return (await this.inner.listInstances()).map(instanceAsOnDemand);
  }
  async describeInstance(instanceId: string): Promise<Instance | undefined> {
    const i = await this.inner.describeInstance(instanceId);
    return i ? instanceAsOnDemand(i) : undefined;
  }
  async launchFailures(sinceMs: number): Promise<LaunchFailure[]> {
    return (await this.inner.launchFailures(sinceMs)).map((f) =>
      f.offeringId?.includes('/reserved/') ? { ...f, offeringId: f.offeringId.replace(/\/reserved\/[^/]+$/, '/on-demand') } : f,
    );
  }
  setDesiredCapacity(groupId: string, desired: number): Promise<void> {
    return this.inner.setDesiredCapacity(groupId, desired);
  }
  terminateInstance(groupId: string, instanceId: string): Promise<{ alreadyGone: boolean }> {
    return this.inner.terminateInstance(groupId, instanceId);
  }
  setScaleInProtection(groupId: string, instanceIds: readonly string[], protect: boolean): Promise<void> {
    return this.inner.setScaleInProtection(groupId, instanceIds, protect);
  }
  completeLifecycleAction(input: { groupId: string; instanceId: string; hookName: string; token?: string }): Promise<void> {
    return this.inner.completeLifecycleAction(input);
  }
  async recordLifecycleHeartbeat(input: { groupId: string; instanceId: string; hookName: string; token?: string }): Promise<void> {
    await this.inner.recordLifecycleHeartbeat?.(input);
  }
}
