import type { protos } from '@google-cloud/compute';
import { hookGlobalTimeoutMs } from '../../core/services/interruption.ts';
import { makeOffering, type CapacityType, type Cloud, type Offering } from '../../core/catalog.ts';
import { CloudError } from '../../core/errors.ts';
import { inService, type Instance, type NodeGroup, type WarmPool } from '../../core/fleet.ts';
import type { Clock, LaunchFailure, NodeGroupProvider, ReservationSource } from '../../core/ports.ts';
import { reservationTerminationMs, type Reservation, type ReservationKind } from '../../core/reservation.ts';
import { regionOfZone } from '../catalog/shipped.ts';
import type { SeededRandom } from './clock.ts';
/** The project the simulated GCP groups live in. */
export const SIM_GCP_PROJECT = 'gpu-fleet-sim';

export interface SimGroupConfig {
  readonly id: string;
  readonly cloud?: Cloud;
  readonly instanceTypes: readonly string[];
  readonly zones: readonly string[];
  readonly capacityType: CapacityType;
  readonly minSize: number;
  readonly maxSize: number;
  readonly desiredCapacity?: number;
  /** Its machines boot with MIG mode on (the stack's `migEnabled`). */
  readonly migEnabled?: boolean;
  /** A terminate lifecycle hook (the stack puts one on every group): a machine the group takes away waits in it until completed or timed out. */
  readonly terminateHook?: { readonly name: string; readonly timeoutSec: number };
  /** With capacity type `reserved`: the reservation its launch template targets (its instance type and zone are the group's). */
  readonly reservationId?: string;
  /**
   * An EC2 Auto Scaling warm pool of an absolute size (MinSize = MaxGroupPreparedCapacity): machines
   * launched ahead, booted once, then kept stopped (or hibernated); a scale-out starts one of them.
   */
  readonly warmPool?: { readonly size: number; readonly state: 'Stopped' | 'Hibernated' };
}

/**
 * A machine of a group's warm pool: running while it is prepared (billed as a running machine),
 * then stopped or hibernated (only its volume billed) until a scale-out starts it.
 */
export interface SimWarmMachine {
  readonly id: string;
  readonly offering: Offering;
  readonly launchedAtMs: number;
  /**
   * When its first boot ends: it is prepared and stopped then, unless its agent prepares it (with
   * {@link SimCloudOptions.warmPreparedByAgents}: then when its agent says, `pulled`).
   */
  readonly preparedAtMs: number;
  /** What its agent pulled onto its volume while preparing it, and when it was done (its launch hook let go). */
  readonly pulled?: { readonly images: readonly string[]; readonly doneAtMs: number };
}

/**
 * Seconds a machine takes from the warm pool into service: started from Stopped, its OS boots again
 * (no image to fetch, no first-boot setup); from Hibernated, its memory is restored. Both are
 * assumptions (AWS publishes no figure): 60 s and 30 s, against a new machine's 180 s.
 */
export const WARM_START_SEC: Readonly<Record<'Stopped' | 'Hibernated', number>> = { Stopped: 60, Hibernated: 30 };

/**
 * What a stopped machine's volume costs per hour: the stack's 200 GiB gp3 root volume at $0.08 per
 * GiB-month (EBS gp3, us-west-2), over 730 hours.
 */
export const WARM_VOLUME_MICRO_USD_PER_HOUR = Math.round((200 * 0.08 * 1_000_000) / 730);

/** A simulated capacity reservation: an ODCR, or a Capacity Block delivered at `startMs` whose machines go 30 min before `endMs`. */
export interface SimReservationConfig {
  readonly id: string;
  readonly cloud?: Cloud;
  readonly zone: string;
  readonly instanceType: string;
  readonly kind: ReservationKind;
  readonly interruptible?: boolean;
  readonly count: number;
  readonly startMs?: number;
  readonly endMs?: number;
  /** What one machine-hour of it costs, used or not. */
  readonly priceMicroUsdPerHour: number;
}

/** Whether a pool (offering) can give a machine right now. The spot market plugs in here. */
export interface CapacityModel {
  obtainable(offering: Offering, atMs: number): boolean;
}

export const ALWAYS_OBTAINABLE: CapacityModel = { obtainable: () => true };

export interface SimInstance {
  id: string;
  groupId: string;
  offering: Offering;
  state: Instance['state'];
  launchedAtMs: number;
  readyAtMs: number;
  endedAtMs?: number;
  scaleInProtected: boolean;
  /** Why it ended: scaled in, interrupted, failed. */
  endReason?: string;
  /** Held by the terminate hook until this time (then the group goes on, the hook's default result), and why it is going. */
  hookDeadlineMs?: number;
  /** When it entered the terminate hook: heartbeats extend the hook up to its global timeout from then. */
  hookStartMs?: number;
  /** Its terminate hook let it go (completed, or timed out), rather than the market or an operator ending it in the hook. */
  releasedByHook?: boolean;
  leavingWhy?: string;
  /** Capacity Rebalancing: its replacement is launched, and it goes (through the hook) at this time. */
  replaceAtMs?: number;
  /** Started from its group's warm pool (prepared ahead) rather than launched new. */
  fromWarmPool?: boolean;
}

interface SimGroup {
  config: SimGroupConfig;
  offerings: Offering[];
  desired: number;
  nextZone: number;
  lastFailureAtMs: Map<string, number>;
  /** Its warm pool's machines (with a warm pool). */
  warm: SimWarmMachine[];
}

export interface SimCloudOptions {
  readonly clock: Clock;
  readonly random: SeededRandom;
  readonly groups: readonly SimGroupConfig[];
  /** Mean boot time of a machine until its agent can register (default 180 s). */
  readonly bootSec?: number;
  /** Boot time varies by ±this share (default 0.2), drawn from the seeded random source. */
  readonly bootJitter?: number;
  readonly capacity?: CapacityModel;
  /** What each offering costs, µUSD/h: a spot launch takes the cheaper pool within the zone it balances to (price-capacity-optimized). */
  readonly priceOf?: (offering: Offering) => number | undefined;
  /** How long terminated instances stay listed (default 10 min), as clouds keep them for a while. */
  readonly keepTerminatedSec?: number;
  /** Capacity reservations the `reserved` groups launch into. */
  readonly reservations?: readonly SimReservationConfig[];
  /**
   * Warm machines wait, booted, in their launch hook until their agent has prepared them
   * ({@link SimCloud.notePrepared}), as the stack's groups with a warm pool do (infra/stack.ts);
   * without it a warm machine is prepared when its first boot ends.
   */
  readonly warmPreparedByAgents?: boolean;
}

/**
 * A simulated cloud of node groups, in the manner of EC2 Auto Scaling: a group holds its desired
 * size by launching machines (which boot for a while) in the zones it spans, skips pools without
 * capacity and records the failure, and lets specific machines be terminated with the desired
 * size lowered. Time moves only when {@link tick} is called.
 */
export class SimCloud implements NodeGroupProvider, ReservationSource {
  /** The cloud of the first group (the whole world answers as one provider; {@link providers} gives one per cloud). */
  readonly cloud: Cloud;
  private readonly groups = new Map<string, SimGroup>();
  private readonly instances = new Map<string, SimInstance>();
  private readonly failures: LaunchFailure[] = [];
  private counter = 0;
  /** What machines started from a warm pool found on their volumes: the images their agents pulled while preparing them. */
  private readonly volumeImages = new Map<string, readonly string[]>();
  /** What warm machines cost before they were started into service (running while prepared, then their volumes). */
  private warmSpent = 0;
  /**
   * Machines launched and scaled in (by gpu-fleet or anyone else) per group over the whole run, and
   * launches within 15 minutes after one of the group's scale-ins (a buy-then-scale-in cycle shows as these).
   */
  readonly activity = new Map<
    string,
    {
      launched: number;
      scaledIn: number;
      rebought: number;
      scaledInWithWorkWaiting: number;
      lastScaleInAtMs?: number;
      /** Of the launches, machines started from the warm pool. */
      fromWarmPool?: number;
    }
  >();
  /** Told at each scale-in: does work this group could run wait in the queue right now? (the simulation answers from the job store) */
  waitingWorkFor: ((group: SimGroupConfig) => boolean) | undefined;
  /** Every call made to the provider, for tests (method and arguments). */
  readonly calls: { method: string; args: unknown[] }[] = [];
  /** Fail the next N launches with this code, whatever the pool (a fake that can be told to fail). */
  private forcedFailures: { count: number; code: string } | undefined;

  constructor(private readonly options: SimCloudOptions) {
    this.cloud = options.groups[0]?.cloud ?? 'aws';
    for (const g of options.groups) {
      this.groups.set(g.id, {
        config: g,
        offerings: groupOfferings(g),
        desired: g.desiredCapacity ?? g.minSize,
        nextZone: 0,
        lastFailureAtMs: new Map(),
        warm: [],
      });
    }
  }

  async listGroups(): Promise<NodeGroup[]> {
    return [...this.groups.values()].map((g) => ({
      id: g.config.id,
      cloud: g.config.cloud ?? 'aws',
      region: g.offerings[0]?.region ?? '',
      offerings: g.offerings,
      minSize: g.config.minSize,
      maxSize: g.config.maxSize,
      desiredCapacity: g.desired,
      ...(g.config.migEnabled ? { migEnabled: true } : {}),
      ...(g.config.warmPool ? { warm: this.warmOf(g) } : {}),
    }));
  }

  /** The reservations as the cloud describes them now: each one's state by the clock, and what it still has free. */
  async listReservations(named: readonly string[] = []): Promise<Reservation[]> {
    void named; // the simulated account holds only the configured reservations, all of them gpu-fleet's
    const now = this.options.clock.nowMs();
    return (this.options.reservations ?? []).map((r) => {
      const cloud = r.cloud ?? 'aws';
      const state = reservationStateAt(r, now);
      const used = this.usedOf(r.id);
      return {
        id: r.id,
        cloud,
        region: regionOfZone(cloud, r.zone),
        zone: r.zone,
        instanceType: r.instanceType,
        kind: r.kind,
        interruptible: r.interruptible ?? false,
        totalCount: r.count,
        availableCount: state === 'active' ? Math.max(0, r.count - used) : 0,
        state,
        ...(r.startMs !== undefined ? { startMs: r.startMs } : {}),
        ...(r.endMs !== undefined ? { endMs: r.endMs } : {}),
        priceMicroUsdPerHour: r.priceMicroUsdPerHour,
      };
    });
  }

  /** Machines running in (or launching into) a reservation. */
  private usedOf(reservationId: string): number {
    let used = 0;
    for (const i of this.instances.values()) if (i.offering.reservationId === reservationId && inService(i.state)) used++;
    return used;
  }

  /**
   * Eventual consistency (fault injection, `eventual-consistency`): the control plane's calls see a
   * new machine only `newSec` after its launch (DescribeInstances answers InvalidInstanceID.NotFound
   * until then, and the group's listing leaves it out), and each change of state `stateSec` late.
   * The world itself (the machines, their agents) is not lagged.
   */
  setApiLag(lag: { readonly newSec: number; readonly stateSec: number }): void {
    this.apiLag = lag;
  }
  private apiLag: { readonly newSec: number; readonly stateSec: number } | undefined;
  /** The state the control plane's calls still see, until when (under an API lag). */
  private readonly staleStates = new Map<string, { readonly state: Instance['state']; readonly untilMs: number }>();

  private changeState(inst: SimInstance, state: Instance['state']): void {
    if (this.apiLag && this.apiLag.stateSec > 0 && !this.staleStates.has(inst.id))
      this.staleStates.set(inst.id, { state: inst.state, untilMs: this.options.clock.nowMs() + this.apiLag.stateSec * 1000 });
    inst.state = state;
  }

  /** A machine as the control plane's API calls see it now: not yet, or in an older state, under an API lag. */
  private asApiSees(i: SimInstance): Instance | undefined {
    const lag = this.apiLag;
    if (!lag) return toInstance(i);
    const now = this.options.clock.nowMs();
    if (now < i.launchedAtMs + lag.newSec * 1000) return undefined;
    const stale = this.staleStates.get(i.id);
    if (stale && now < stale.untilMs) return { ...toInstance(i), state: stale.state };
    if (stale) this.staleStates.delete(i.id);
    return toInstance(i);
  }

  /** The listing the control plane's provider gets (see setApiLag). */
  async apiInstances(): Promise<Instance[]> {
    const visible = new Set((await this.listInstances()).map((i) => i.id));
    return [...this.instances.values()].flatMap((i) => {
      if (!visible.has(i.id)) return [];
      const seen = this.asApiSees(i);
      return seen ? [seen] : [];
    });
  }

  /** DescribeInstances for one id, as the control plane's call sees it (see setApiLag). */
  async apiDescribeInstance(instanceId: string): Promise<Instance | undefined> {
    const inst = this.instances.get(instanceId);
    return inst ? this.asApiSees(inst) : undefined;
  }

  async listInstances(): Promise<Instance[]> {
    // EC2 lists terminated instances for a while; a GCE instance its group deleted is gone at once,
    // and only a preempted one stays listed, TERMINATED (its termination action stops it).
    return [...this.instances.values()]
      .filter((i) => !(i.offering.cloud === 'gcp' && i.state === 'terminated' && i.endReason !== 'preempted'))
      .map((i) => toInstance(i));
  }

  async setDesiredCapacity(groupId: string, desired: number): Promise<void> {
    this.calls.push({ method: 'setDesiredCapacity', args: [groupId, desired] });
    const g = this.group(groupId, 'setDesiredCapacity');
    if (!Number.isInteger(desired) || desired < g.config.minSize || desired > g.config.maxSize) {
      throw new CloudError(
        'invalid-request',
        `desired capacity ${desired} for ${groupId} is outside its limits [${g.config.minSize}, ${g.config.maxSize}]`,
        { operation: 'setDesiredCapacity', resource: groupId, cloud: this.cloud },
      );
    }
    g.desired = desired;
    this.fill(g);
  }

  async terminateInstance(groupId: string, instanceId: string): Promise<{ alreadyGone: boolean }> {
    this.calls.push({ method: 'terminateInstance', args: [groupId, instanceId] });
    const g = this.group(groupId, 'terminateInstance');
    const inst = this.instances.get(instanceId);
    if (!inst || inst.groupId !== groupId || !inService(inst.state)) return { alreadyGone: true };
    g.desired = Math.max(g.config.minSize, g.desired - 1);
    const a = this.countActivity(groupId);
    a.scaledIn++;
    a.lastScaleInAtMs = this.options.clock.nowMs();
    if (this.waitingWorkFor?.(g.config)) a.scaledInWithWorkWaiting++;
    this.leave(g, inst, 'scaled in');
    return { alreadyGone: false };
  }

  async setScaleInProtection(groupId: string, instanceIds: readonly string[], protect: boolean): Promise<void> {
    this.calls.push({ method: 'setScaleInProtection', args: [groupId, [...instanceIds], protect] });
    this.group(groupId, 'setScaleInProtection');
    for (const id of instanceIds) {
      const inst = this.instances.get(id);
      if (inst && inst.groupId === groupId) inst.scaleInProtected = protect;
    }
  }

  async describeInstance(instanceId: string): Promise<Instance | undefined> {
    const inst = this.instances.get(instanceId);
    return inst ? toInstance(inst) : undefined;
  }

  async launchFailures(sinceMs: number): Promise<LaunchFailure[]> {
    return this.failures.filter((f) => f.atMs >= sinceMs);
  }

  async completeLifecycleAction(input: { groupId: string; instanceId: string; hookName: string; token?: string }): Promise<void> {
    this.calls.push({ method: 'completeLifecycleAction', args: [input] });
    const inst = this.instances.get(input.instanceId);
    const hook = inst ? this.groups.get(inst.groupId)?.config.terminateHook : undefined;
    // No action waits (already completed, timed out, never held): nothing to do, as the real API's error says.
    if (!inst || inst.state !== 'terminating-wait' || hook?.name !== input.hookName) return;
    inst.releasedByHook = true;
    this.end(inst, inst.leavingWhy ?? 'terminated');
  }

  /**
   * A heartbeat for a machine its terminate hook holds: the hook waits another heartbeat timeout
   * from now, but never past its global timeout, 100 times the heartbeat timeout or 48 hours,
   * whichever is smaller, from when the machine entered the hook (Auto Scaling's
   * RecordLifecycleActionHeartbeat). An action no longer waiting: nothing to do.
   */
  async recordLifecycleHeartbeat(input: { groupId: string; instanceId: string; hookName: string; token?: string }): Promise<void> {
    this.calls.push({ method: 'recordLifecycleHeartbeat', args: [input] });
    const inst = this.instances.get(input.instanceId);
    const hook = inst ? this.groups.get(inst.groupId)?.config.terminateHook : undefined;
    if (!inst || !hook || inst.state !== 'terminating-wait' || hook.name !== input.hookName) return;
    const now = this.options.clock.nowMs();
    const globalEndMs = (inst.hookStartMs ?? now) + hookGlobalTimeoutMs(hook.timeoutSec * 1000);
    inst.hookDeadlineMs = Math.min(now + hook.timeoutSec * 1000, globalEndMs);
  }

  /** Listener told when a machine enters its terminate hook (the simulation delivers the lifecycle event). */
  onHookStarted: ((inst: SimInstance, hook: { name: string; timeoutSec: number; token: string }) => void) | undefined;

  /**
   * The group takes a machine away itself, replacing it (a health-check replacement, an instance
   * refresh): the machine enters the terminate hook, and the group launches another at once.
   */
  replace(instanceId: string, why: string): void {
    const inst = this.instances.get(instanceId);
    const g = inst ? this.groups.get(inst.groupId) : undefined;
    if (!inst || !g || !inService(inst.state)) return;
    this.leave(g, inst, why);
    this.fill(g);
  }

  /** Capacity Rebalancing: a replacement is launched now; the old machine goes through the hook once the replacement has had its boot time. */
  rebalance(instanceId: string): void {
    const inst = this.instances.get(instanceId);
    const g = inst ? this.groups.get(inst.groupId) : undefined;
    if (!inst || !g || !inService(inst.state) || inst.replaceAtMs !== undefined) return;
    inst.replaceAtMs = this.options.clock.nowMs() + (this.options.bootSec ?? 180) * 1000;
    this.fill(g);
  }

  /** Someone else lowers the group's desired size by one: the group picks an unprotected machine (the oldest) and takes it away. */
  externalScaleIn(groupId: string): string | undefined {
    const g = this.group(groupId, 'externalScaleIn');
    if (g.desired <= g.config.minSize) return undefined;
    const victim = [...this.instances.values()]
      .filter((i) => i.groupId === groupId && inService(i.state) && !i.scaleInProtected && i.replaceAtMs === undefined)
      .sort((a, b) => a.launchedAtMs - b.launchedAtMs)[0];
    if (!victim) return undefined;
    g.desired--;
    this.leave(g, victim, 'scaled in by someone else');
    return victim.id;
  }

  private countActivity(groupId: string) {
    let a = this.activity.get(groupId);
    if (!a) this.activity.set(groupId, (a = { launched: 0, scaledIn: 0, rebought: 0, scaledInWithWorkWaiting: 0 }));
    return a;
  }

  /**
   * One provider per cloud the groups are in, as gpu-fleet sees them in production (an Auto
   * Scaling client, a Compute client): each lists and acts on its own cloud's groups only, so
   * one can fail while the other answers.
   */
  providers(): SimProvider[] {
    const clouds = [...new Set([...this.groups.values()].map((g) => g.config.cloud ?? 'aws'))];
    return clouds.map((cloud) => new SimProvider(this, cloud));
  }

  /** The groups as configured. */
  groupConfigs(): SimGroupConfig[] {
    return [...this.groups.values()].map((g) => g.config);
  }

  /** The cloud a group is in (undefined for an unknown group). */
  cloudOf(groupId: string): Cloud | undefined {
    const g = this.groups.get(groupId);
    return g ? (g.config.cloud ?? 'aws') : undefined;
  }

  /**
   * GCP's zone operations API over the simulated machines: each preempted GCP spot machine
   * leaves a `compute.instances.preempted` operation in its zone, as Compute Engine does.
   */
  readonly zoneOperations = {
    listAsync: (request: { project: string; zone: string }): AsyncIterable<protos.google.cloud.compute.v1.IOperation> => {
      const ops = this.preemptionOps.filter((o) => o.zone === request.zone);
      return (async function* () {
        for (const o of ops) yield o.op;
      })();
    },
  };
  private readonly preemptionOps: { zone: string; op: protos.google.cloud.compute.v1.IOperation }[] = [];

  /** Whether the machine ended because its terminate hook let it go (completed or timed out). */
  releasedByHook(instanceId: string): boolean {
    return this.instances.get(instanceId)?.releasedByHook === true;
  }

  /** Whether a group's machines boot in MIG mode. */
  isMigGroup(groupId: string): boolean {
    return this.groups.get(groupId)?.config.migEnabled ?? false;
  }

  /** The machine leaves the group: through the terminate hook when the group has one, else at once. */
  private leave(g: SimGroup, inst: SimInstance, why: string): void {
    const hook = g.config.terminateHook;
    if (!hook) return this.end(inst, why);
    this.changeState(inst, 'terminating-wait');
    inst.hookStartMs = this.options.clock.nowMs();
    inst.hookDeadlineMs = inst.hookStartMs + hook.timeoutSec * 1000;
    inst.leavingWhy = why;
    this.onHookStarted?.(inst, { ...hook, token: `token-${inst.id}-${++this.counter}` });
  }

  /** Makes the next `count` launches fail with `code` (for tests of failure handling). */
  failNextLaunches(count: number, code = 'InsufficientInstanceCapacity'): void {
    this.forcedFailures = { count, code };
  }

  /** Advances the simulated cloud to the clock's time: boots finish, groups refill, old records go. */
  tick(): void {
    const now = this.options.clock.nowMs();
    for (const inst of this.instances.values()) {
      if (inst.state === 'pending' && now >= inst.readyAtMs) this.changeState(inst, 'running');
      // A hook not completed in time lets the group go on (the stack's default result is CONTINUE).
      if (inst.state === 'terminating-wait' && now >= (inst.hookDeadlineMs ?? 0)) {
        inst.releasedByHook = true;
        this.end(inst, inst.leavingWhy ?? 'terminated');
      }
      if (inst.replaceAtMs !== undefined && now >= inst.replaceAtMs && inService(inst.state)) {
        const g = this.groups.get(inst.groupId);
        if (g) this.leave(g, inst, 'replaced by Capacity Rebalancing');
      }
    }
    // A reservation's machines go when it takes them away (a Capacity Block 30 min before its end).
    for (const r of this.options.reservations ?? []) {
      const goesAtMs = reservationTerminationMs(r);
      if (goesAtMs === undefined || now < goesAtMs) continue;
      for (const inst of this.instances.values())
        if (inst.offering.reservationId === r.id && inst.state !== 'terminated') this.end(inst, `reservation ${r.id} ended`);
    }
    for (const g of this.groups.values()) this.fill(g);
    const keepMs = (this.options.keepTerminatedSec ?? 600) * 1000;
    for (const [id, inst] of this.instances) {
      if (inst.state === 'terminated' && inst.endedAtMs !== undefined && now - inst.endedAtMs > keepMs) this.instances.delete(id);
    }
  }

  /** Takes a machine away (a spot interruption or a hardware failure): it stops at once. */
  reclaim(instanceId: string, why: string): void {
    const inst = this.instances.get(instanceId);
    if (!inst || inst.state === 'terminated') return;
    this.end(inst, why);
    if (inst.offering.cloud === 'gcp' && inst.offering.capacityType === 'spot') {
      const at = new Date(this.options.clock.nowMs()).toISOString();
      this.preemptionOps.push({
        zone: inst.offering.zone,
        op: {
          name: `systemevent-${this.options.clock.nowMs()}-${inst.id}`,
          operationType: 'compute.instances.preempted',
          targetLink: `https://www.googleapis.com/compute/v1/projects/${SIM_GCP_PROJECT}/zones/${inst.offering.zone}/instances/${inst.id}`,
          insertTime: at,
          startTime: at,
          status: 'DONE',
        },
      });
      // Compute Engine keeps operations for a while; the simulation keeps the last day's.
      const cutoff = this.options.clock.nowMs() - 86_400_000;
      while (this.preemptionOps.length > 0 && Date.parse(this.preemptionOps[0]!.op.insertTime ?? '') < cutoff) this.preemptionOps.shift();
    }
  }

  dump(): {
    desired: Record<string, number>;
    instances: SimInstance[];
    counter: number;
    failures: LaunchFailure[];
    warm?: Record<string, SimWarmMachine[]>;
    warmSpent?: number;
    volumeImages?: Record<string, readonly string[]>;
  } {
    const warm = Object.fromEntries([...this.groups.entries()].filter(([, g]) => g.warm.length > 0).map(([id, g]) => [id, [...g.warm]]));
    return {
      desired: Object.fromEntries([...this.groups.entries()].map(([id, g]) => [id, g.desired])),
      instances: [...this.instances.values()].map((i) => ({ ...i })),
      counter: this.counter,
      failures: [...this.failures],
      ...(Object.keys(warm).length > 0 ? { warm, warmSpent: this.warmSpent } : {}),
      ...(this.volumeImages.size > 0 ? { volumeImages: Object.fromEntries(this.volumeImages) } : {}),
    };
  }

  restore(d: ReturnType<SimCloud['dump']>): void {
    for (const [id, desired] of Object.entries(d.desired)) {
      const g = this.groups.get(id);
      if (g) g.desired = desired;
    }
    for (const i of d.instances) this.instances.set(i.id, { ...i });
    for (const [id, machines] of Object.entries(d.warm ?? {})) {
      const g = this.groups.get(id);
      if (g) g.warm = [...machines];
    }
    this.warmSpent = d.warmSpent ?? this.warmSpent;
    for (const [id, images] of Object.entries(d.volumeImages ?? {})) this.volumeImages.set(id, images);
    this.counter = Math.max(this.counter, d.counter);
    this.failures.push(...d.failures);
  }

  /** All machines ever launched, including ended ones still remembered, for accounting. */
  allInstances(): readonly SimInstance[] {
    return [...this.instances.values()];
  }

  /** Listener told about each machine when it ends, for exact cost accounting. */
  onEnded: ((inst: SimInstance) => void) | undefined;

  private end(inst: SimInstance, why: string): void {
    this.changeState(inst, 'terminated');
    inst.endedAtMs = this.options.clock.nowMs();
    inst.endReason = why;
    this.onEnded?.(inst);
  }

  private group(groupId: string, operation: string): SimGroup {
    const g = this.groups.get(groupId);
    if (!g) throw new CloudError('not-found', `node group ${groupId} does not exist`, { operation, resource: groupId, cloud: this.cloud });
    return g;
  }

  /** Launches machines until the group has its desired number alive, skipping pools without capacity. */
  private fill(g: SimGroup): void {
    const now = this.options.clock.nowMs();
    // Machines on their way out (in the hook, or being rebalanced away) no longer count toward the desired size.
    const alive = () =>
      [...this.instances.values()].filter((i) => i.groupId === g.config.id && inService(i.state) && i.replaceAtMs === undefined).length;
    let missing = g.desired - alive();
    // Never above the group's max, machines being rebalanced away included (a real group may go 10% over while it rebalances; this one waits).
    const inServiceNow = [...this.instances.values()].filter((i) => i.groupId === g.config.id && inService(i.state)).length;
    missing = Math.min(missing, g.config.maxSize - inServiceNow);
    while (missing > 0) {
      // A prepared machine of the warm pool first: started, it is in service within WARM_START_SEC.
      const warm = g.warm.findIndex((w) => this.warmReady(w, now));
      if (warm >= 0) {
        this.startWarm(g, g.warm.splice(warm, 1)[0]!, now);
        missing--;
        continue;
      }
      const offering = this.pickOffering(g, now);
      if (!offering) break;
      this.launch(g, offering, now);
      missing--;
    }
    // The warm pool refilled to its size: each new machine boots once to be prepared, then is stopped.
    if (g.config.warmPool)
      while (g.warm.length < g.config.warmPool.size) {
        const offering = this.pickOffering(g, now);
        if (!offering) break;
        const n = ++this.counter;
        const bootMs = Math.round((this.options.bootSec ?? 180) * 1000);
        g.warm.push({ id: `i-${n.toString(16).padStart(17, '0')}`, offering, launchedAtMs: now, preparedAtMs: now + bootMs });
      }
  }

  /** The warm pool as the group describes it: prepared machines, and those still being prepared. */
  private warmOf(g: SimGroup): WarmPool {
    const now = this.options.clock.nowMs();
    const ready = g.warm.filter((w) => this.warmReady(w, now)).length;
    return { state: g.config.warmPool!.state, ready, preparing: g.warm.length - ready };
  }

  /** When a warm machine is prepared and stopped: its first boot's end, or its agent's word (undefined: not yet). */
  private warmDoneAtMs(w: SimWarmMachine): number | undefined {
    return this.options.warmPreparedByAgents ? w.pulled?.doneAtMs : w.preparedAtMs;
  }

  private warmReady(w: SimWarmMachine, now: number): boolean {
    const done = this.warmDoneAtMs(w);
    return done !== undefined && now >= done;
  }

  /** Warm machines booted and waiting in their launch hook for their agent (with {@link SimCloudOptions.warmPreparedByAgents}). */
  warmAwaitingAgent(): readonly (SimWarmMachine & { readonly groupId: string })[] {
    if (!this.options.warmPreparedByAgents) return [];
    const now = this.options.clock.nowMs();
    return [...this.groups.values()].flatMap((g) =>
      g.warm.filter((w) => w.pulled === undefined && now >= w.preparedAtMs).map((w) => ({ ...w, groupId: g.config.id })),
    );
  }

  /** A warm machine's agent prepared it: these images are on its volume from `doneAtMs`, when it is stopped. Unknown ids: nothing. */
  notePrepared(id: string, images: readonly string[], doneAtMs: number): void {
    for (const g of this.groups.values()) {
      const i = g.warm.findIndex((w) => w.id === id);
      if (i >= 0) g.warm[i] = { ...g.warm[i]!, pulled: { images: [...images], doneAtMs: Math.max(doneAtMs, g.warm[i]!.preparedAtMs) } };
    }
  }

  /** The images a machine started from a warm pool found on its volume (none for a machine launched anew). */
  imagesOnVolume(id: string): readonly string[] {
    return this.volumeImages.get(id) ?? [];
  }

  /** A warm machine started into service: the same instance, booting again for WARM_START_SEC. */
  private startWarm(g: SimGroup, w: SimWarmMachine, now: number): void {
    this.warmSpent += this.warmCostOf(w, now);
    if (w.pulled && w.pulled.images.length > 0) this.volumeImages.set(w.id, w.pulled.images);
    const startMs = WARM_START_SEC[g.config.warmPool?.state ?? 'Stopped'] * 1000;
    const a = this.countActivity(g.config.id);
    a.launched++;
    a.fromWarmPool = (a.fromWarmPool ?? 0) + 1;
    this.instances.set(w.id, {
      id: w.id,
      groupId: g.config.id,
      offering: w.offering,
      state: 'pending',
      // Billed as a running machine from its start; its time in the pool is counted in warmPoolMicroUsd.
      launchedAtMs: now,
      readyAtMs: now + startMs,
      scaleInProtected: false,
      fromWarmPool: true,
    });
  }

  /** What a warm machine cost up to `untilMs`: running while prepared, its volume only once stopped. */
  private warmCostOf(w: SimWarmMachine, untilMs: number): number {
    const price = this.options.priceOf?.(w.offering) ?? 0;
    // Running until it is prepared (while its agent prepares it, until now at least).
    const doneMs = this.warmDoneAtMs(w) ?? Math.max(untilMs, w.preparedAtMs);
    const runningMs = Math.max(0, Math.min(untilMs, doneMs) - w.launchedAtMs);
    const stoppedMs = Math.max(0, untilMs - doneMs);
    return (price * runningMs + WARM_VOLUME_MICRO_USD_PER_HOUR * stoppedMs) / 3_600_000;
  }

  /** What the warm pools cost up to `untilMs`: the machines started from them and those still in them. */
  warmPoolMicroUsd(untilMs: number): number {
    let sum = this.warmSpent;
    for (const g of this.groups.values()) for (const w of g.warm) sum += this.warmCostOf(w, untilMs);
    return Math.round(sum);
  }

  private pickOffering(g: SimGroup, now: number): Offering | undefined {
    const capacity = this.options.capacity ?? ALWAYS_OBTAINABLE;
    let candidates = g.offerings;
    if (g.config.capacityType === 'spot' && this.options.priceOf) {
      const priceOf = this.options.priceOf;
      // Balanced best effort (the API's default AvailabilityZoneDistribution): the zone holding the fewest of the group's
      // machines first, another where it has no capacity; within a zone, the cheaper pool (price-capacity-optimized).
      const inZone = new Map<string, number>();
      for (const i of this.instances.values())
        if (i.groupId === g.config.id && inService(i.state)) inZone.set(i.offering.zone, (inZone.get(i.offering.zone) ?? 0) + 1);
      candidates = [...candidates].sort(
        (a, b) =>
          (inZone.get(a.zone) ?? 0) - (inZone.get(b.zone) ?? 0) ||
          (priceOf(a) ?? Infinity) - (priceOf(b) ?? Infinity) ||
          (a.id < b.id ? -1 : 1),
      );
    } else {
      // Balance across zones, as an Auto Scaling group does for on-demand.
      const start = g.nextZone++ % Math.max(1, candidates.length);
      candidates = [...candidates.slice(start), ...candidates.slice(0, start)];
    }
    for (const o of candidates) {
      if (this.forcedFailures && this.forcedFailures.count > 0) {
        this.forcedFailures.count--;
        this.recordFailure(g, o, now, this.forcedFailures.code);
        continue;
      }
      if (o.reservationId !== undefined) {
        // A targeted reservation gives a machine only while it is active and has one free.
        const r = this.options.reservations?.find((x) => x.id === o.reservationId);
        if (r && reservationStateAt(r, now) === 'active' && this.usedOf(r.id) < r.count) return o;
        this.recordFailure(g, o, now, 'ReservationCapacityExceeded');
        continue;
      }
      if (capacity.obtainable(o, now)) return o;
      this.recordFailure(g, o, now, g.config.capacityType === 'spot' ? 'InsufficientInstanceCapacity' : 'InsufficientInstanceCapacity');
    }
    return undefined;
  }

  private recordFailure(g: SimGroup, o: Offering, now: number, code: string): void {
    const last = g.lastFailureAtMs.get(o.id);
    if (last !== undefined && now - last < 60_000) return; // the group retries; one record a minute per pool
    g.lastFailureAtMs.set(o.id, now);
    this.failures.push({
      groupId: g.config.id,
      offeringId: o.id,
      atMs: now,
      code,
      message: `There is no ${o.capacityType} capacity for ${o.instanceType} in ${o.zone} right now (simulated).`,
    });
    if (this.failures.length > 10_000) this.failures.splice(0, this.failures.length - 10_000);
  }

  private launch(g: SimGroup, offering: Offering, now: number): void {
    const bootMs = (this.options.bootSec ?? 180) * 1000;
    const jitter = this.options.bootJitter ?? 0.2;
    const readyAtMs = now + Math.round(bootMs * (1 - jitter + 2 * jitter * this.options.random.next()));
    // EC2 instance ids; GCE instances are named by their group (a MIG's base instance name plus a suffix).
    const n = ++this.counter;
    const id = offering.cloud === 'gcp' ? `${g.config.id}-${n.toString(36).padStart(4, '0')}` : `i-${n.toString(16).padStart(17, '0')}`;
    const a = this.countActivity(g.config.id);
    a.launched++;
    if (a.lastScaleInAtMs !== undefined && now - a.lastScaleInAtMs < 15 * 60_000) a.rebought++;
    this.instances.set(id, { id, groupId: g.config.id, offering, state: 'pending', launchedAtMs: now, readyAtMs, scaleInProtected: false });
  }
}

function toInstance(i: SimInstance): Instance {
  return {
    id: i.id,
    groupId: i.groupId,
    cloud: i.offering.cloud,
    region: i.offering.region,
    zone: i.offering.zone,
    instanceType: i.offering.instanceType,
    capacityType: i.offering.capacityType,
    ...(i.offering.reservationId !== undefined ? { reservationId: i.offering.reservationId } : {}),
    state: i.state,
    launchedAtMs: i.launchedAtMs,
    scaleInProtected: i.scaleInProtected,
  };
}

/**
 * One cloud's part of the simulated world, as gpu-fleet's provider for that cloud sees it: its
 * groups and machines only; a call about another cloud's group is a `not-found`, as it would be.
 */
export class SimProvider implements NodeGroupProvider {
  constructor(
    private readonly world: SimCloud,
    readonly cloud: Cloud,
  ) {}

  private own(groupId: string, operation: string): void {
    if (this.world.cloudOf(groupId) !== this.cloud)
      throw new CloudError('not-found', `node group ${groupId} does not exist in ${this.cloud}`, {
        operation,
        resource: groupId,
        cloud: this.cloud,
      });
  }

  async listGroups(): Promise<NodeGroup[]> {
    return (await this.world.listGroups()).filter((g) => g.cloud === this.cloud);
  }
  async listInstances(): Promise<Instance[]> {
    return (await this.world.apiInstances()).filter((i) => i.cloud === this.cloud);
  }
  /** The machines as listed now (the simulated groups have no listing to reuse); GCP's preemption poll asks for it. */
  recentInstances(): Promise<Instance[]> {
    return this.listInstances();
  }
  setDesiredCapacity(groupId: string, desired: number): Promise<void> {
    this.own(groupId, 'setDesiredCapacity');
    return this.world.setDesiredCapacity(groupId, desired);
  }
  terminateInstance(groupId: string, instanceId: string): Promise<{ alreadyGone: boolean }> {
    this.own(groupId, 'terminateInstance');
    return this.world.terminateInstance(groupId, instanceId);
  }
  setScaleInProtection(groupId: string, instanceIds: readonly string[], protect: boolean): Promise<void> {
    this.own(groupId, 'setScaleInProtection');
    return this.world.setScaleInProtection(groupId, instanceIds, protect);
  }
  async describeInstance(instanceId: string): Promise<Instance | undefined> {
    const i = await this.world.apiDescribeInstance(instanceId);
    return i?.cloud === this.cloud ? i : undefined;
  }
  async launchFailures(sinceMs: number): Promise<LaunchFailure[]> {
    return (await this.world.launchFailures(sinceMs)).filter((f) => this.world.cloudOf(f.groupId) === this.cloud);
  }
  async completeLifecycleAction(input: { groupId: string; instanceId: string; hookName: string; token?: string }): Promise<void> {
    if (this.world.cloudOf(input.groupId) !== this.cloud) return;
    return this.world.completeLifecycleAction(input);
  }
  async recordLifecycleHeartbeat(input: { groupId: string; instanceId: string; hookName: string; token?: string }): Promise<void> {
    if (this.world.cloudOf(input.groupId) !== this.cloud) return;
    return this.world.recordLifecycleHeartbeat(input);
  }
}

/** The offerings a simulated group launches: each of its instance types in each of its zones. */
export function groupOfferings(g: SimGroupConfig): Offering[] {
  const cloud = g.cloud ?? 'aws';
  return g.instanceTypes.flatMap((t) =>
    g.zones.map((zone) =>
      makeOffering({
        cloud,
        region: regionOfZone(cloud, zone),
        zone,
        instanceType: t,
        capacityType: g.capacityType,
        ...(g.reservationId !== undefined ? { reservationId: g.reservationId } : {}),
      }),
    ),
  );
}

/** A simulated reservation's state at a time: scheduled before its start, expired once its machines are gone, else active. */
export function reservationStateAt(r: SimReservationConfig, atMs: number): Reservation['state'] {
  if (r.startMs !== undefined && atMs < r.startMs) return 'scheduled';
  const goesAtMs = reservationTerminationMs(r);
  if (goesAtMs !== undefined && atMs >= goesAtMs) return 'expired';
  return 'active';
}
