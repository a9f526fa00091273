import type { CapacityType, Cloud, Offering } from './catalog.ts';
import type { GpuDevice } from './gpu.ts';

/**
 * A node group is a set of machines the cloud scales for us (an EC2 Auto Scaling group, a GCP
 * managed instance group, a simulated group). gpu-fleet decides its desired size; the cloud picks
 * among the group's offerings.
 */
export interface NodeGroup {
  readonly id: string;
  readonly cloud: Cloud;
  readonly region: string;
  /** The offerings the group may launch: instance types × zones × capacity type. */
  readonly offerings: readonly Offering[];
  readonly minSize: number;
  readonly maxSize: number;
  readonly desiredCapacity: number;
  /** Its machines boot with MIG mode on (A100/H100/H200/B200): they take MIG requests only. */
  readonly migEnabled?: boolean;
}

/**
 * Instance states as the cloud reports them, in gpu-fleet's words. The two `-wait` states are a
 * lifecycle hook holding the machine: `pending-wait` boots and takes no work yet (EC2 Auto Scaling
 * `Pending:Wait`), `terminating-wait` still runs its work and is being drained until its hook is
 * completed or times out (`Terminating:Wait`). `stopping` is on its way out with nothing held.
 */
export type InstanceState = 'pending' | 'pending-wait' | 'running' | 'terminating-wait' | 'stopping' | 'terminated';

/** The machine counts toward its group's size: booting (hook or not) or in service. */
export function inService(state: InstanceState): boolean {
  return state === 'pending' || state === 'pending-wait' || state === 'running';
}

/** The machine still runs what is on it: in service, or held by a terminate hook while it drains. */
export function stillRuns(state: InstanceState): boolean {
  return state === 'running' || state === 'terminating-wait';
}

/** A machine as the cloud reports it. */
export interface Instance {
  readonly id: string;
  readonly groupId: string;
  readonly cloud: Cloud;
  readonly region: string;
  readonly zone: string;
  readonly instanceType: string;
  readonly capacityType: CapacityType;
  /** The capacity reservation the machine runs in (capacity type `reserved`). */
  readonly reservationId?: string;
  readonly state: InstanceState;
  readonly launchedAtMs: number;
  /** Protected from the group's own scale-in (because it runs work). */
  readonly scaleInProtected?: boolean;
}

/** What the node agent on a machine has told the state store. */
export interface NodeRecord {
  readonly instanceId: string;
  readonly groupId: string;
  readonly registeredAtMs: number;
  readonly lastHeartbeatAtMs: number;
  readonly gpus: readonly GpuDevice[];
  /** The machine's private address, for a gang's followers to reach its leader. */
  readonly address?: string;
  readonly healthy: boolean;
  readonly healthProblem?: string;
  /** Set once: the node takes no new work and its jobs are being checkpointed and requeued. */
  readonly draining?: Draining;
  /** Since when the node has had no job placed on it (undefined while it has work). */
  readonly idleSinceMs?: number;
  /**
   * The node's work list: job id → attempt, written by reconcile just before it places the
   * attempt here. The agent reads it with its own record; the job record stays the truth (a
   * pointer whose placement lost a race is dropped by the agent).
   */
  readonly assigned?: Readonly<Record<string, number>>;
  /**
   * What the machine costs, stamped by reconcile the first time it sees the machine listed, so
   * that its last minutes are still counted once the cloud no longer lists it.
   */
  readonly meter?: MachineMeterFacts;
  /** When the cloud said the machine stopped or terminated (EC2 state change, GCE preemption): its bill ends here. */
  readonly endedAtMs?: number;
}

/** A machine's billing facts, as reconcile saw it listed. */
export interface MachineMeterFacts {
  readonly offeringId: string;
  readonly priceMicroUsdPerHour: number;
  readonly launchedAtMs: number;
  readonly gpuCount: number;
}

export interface Draining {
  readonly sinceMs: number;
  readonly reason: string;
  /** When the machine is expected to go: work still on it then is requeued. */
  readonly deadlineMs: number;
  /** A terminate lifecycle hook holds the machine until gpu-fleet completes it. */
  readonly lifecycle?: { readonly groupId: string; readonly hookName: string; readonly token?: string };
}

/**
 * A new draining notice merged into the mark a node has: an earlier deadline tightens it (with
 * its reason), a later one never loosens it, and a lifecycle hook, once known, is kept (a hook
 * with its token replaces one without). Returns undefined when the mark stays as it is. Notices
 * arrive at least once and in any order; whatever the order, the mark ends the same.
 */
export function mergeDraining(current: Draining | undefined, next: Draining): Draining | undefined {
  if (!current) return next;
  const earlier = next.deadlineMs < current.deadlineMs;
  const lifecycle =
    !current.lifecycle || (!current.lifecycle.token && next.lifecycle?.token) ? (next.lifecycle ?? current.lifecycle) : current.lifecycle;
  const sinceMs = Math.min(current.sinceMs, next.sinceMs);
  if (!earlier && lifecycle === current.lifecycle && sinceMs === current.sinceMs) return undefined;
  const base = earlier ? next : current;
  return { sinceMs, reason: base.reason, deadlineMs: base.deadlineMs, ...(lifecycle ? { lifecycle } : {}) };
}

/** A node as the planner sees it: the cloud's instance joined with its agent's record. */
export interface FleetNode {
  readonly instance: Instance;
  readonly record?: NodeRecord;
  /** Running, registered, healthy and not draining: new work may go here. */
  readonly schedulable: boolean;
}
