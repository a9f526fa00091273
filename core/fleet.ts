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
  /**
   * Its warm pool, where it has one: machines prepared ahead and kept stopped (or hibernated) that a
   * scale-out starts instead of launching new ones. Not the group's capacity until started: `ready`
   * are prepared, `preparing` still booting into the pool.
   */
  readonly warm?: WarmPool;
}

export interface WarmPool {
  readonly state: 'Stopped' | 'Hibernated' | 'Running';
  readonly ready: number;
  readonly preparing: number;
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
  /**
   * Container images the machine's agent pulls ahead, written by reconcile (core/serving/prefetch.ts):
   * those of the services that may place a replica here, so one placed here starts without the pull.
   */
  readonly prefetchImages?: readonly string[];
  /**
   * Container images the machine's agent says are on its disk (pulled ahead, or pulled by a
   * container it ran), sorted: a replica placed here starts without its pull.
   */
  readonly images?: readonly string[];
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

/** How reconcile tells a control-plane fault from machines that are gone (see {@link correlatedSilence}). */
export interface SilencePolicy {
  readonly heartbeatTimeoutSec: number;
  /** Share of a zone's running machines whose agents must fall silent together for it to be the control path's fault. */
  readonly silenceShare: number;
  /** Only zones with at least this many running machines are judged (one or two silent machines are just machines). */
  readonly silenceMinMachines: number;
  /** "Together": their last heartbeats all fall within this many seconds. */
  readonly silenceWindowSec: number;
}

/** A zone whose machines went silent together while their cloud lists them running. */
export interface SilentZone {
  readonly cloud: Cloud;
  readonly zone: string;
  readonly silent: number;
  readonly running: number;
  /** The newest last heartbeat among them: when the silence began, give or take the window. */
  readonly sinceMs: number;
}

/**
 * Machines whose agents fell silent together, zone by zone, while their cloud still lists them
 * running: a fault of the control path (the agent API down or throttled, its store throttled, a
 * bad deploy), not of the machines, which are up and likely still running their work. Kubernetes'
 * node lifecycle controller reasons the same way: it stops evicting from a zone where most nodes
 * go NotReady at once (`--unhealthy-zone-threshold`, 0.55, on zones of 3 or more nodes). Returns
 * the zones judged so, and their silent machines, which reconcile neither requeues for silence nor
 * lets go; a machine silent on its own (or a small zone) is judged alone, as before.
 */
export function correlatedSilence(
  nodes: readonly { readonly instance: Instance; readonly record?: NodeRecord }[],
  nowMs: number,
  policy: SilencePolicy,
): { readonly zones: readonly SilentZone[]; readonly machines: ReadonlySet<string> } {
  const byZone = new Map<string, { cloud: Cloud; zone: string; running: number; silent: { id: string; lastMs: number }[] }>();
  for (const { instance, record } of nodes) {
    if (instance.state !== 'running' || !record) continue;
    const key = `${instance.cloud}/${instance.zone}`;
    const z = byZone.get(key) ?? { cloud: instance.cloud, zone: instance.zone, running: 0, silent: [] };
    byZone.set(key, z);
    z.running++;
    if (nowMs - record.lastHeartbeatAtMs > policy.heartbeatTimeoutSec * 1000)
      z.silent.push({ id: instance.id, lastMs: record.lastHeartbeatAtMs });
  }
  const zones: SilentZone[] = [];
  const machines = new Set<string>();
  for (const z of [...byZone.values()].sort((a, b) => (a.cloud + a.zone < b.cloud + b.zone ? -1 : 1))) {
    if (z.running < policy.silenceMinMachines || z.silent.length < 2) continue;
    // The largest group of silent machines whose last heartbeats fall within one window.
    const times = z.silent.map((s) => s.lastMs).sort((a, b) => a - b);
    let best = { count: 0, endMs: 0 };
    for (let i = 0, j = 0; j < times.length; j++) {
      while (times[j]! - times[i]! > policy.silenceWindowSec * 1000) i++;
      if (j - i + 1 > best.count) best = { count: j - i + 1, endMs: times[j]! };
    }
    if (best.count / z.running < policy.silenceShare) continue;
    const together = z.silent.filter((s) => s.lastMs <= best.endMs && s.lastMs >= best.endMs - policy.silenceWindowSec * 1000);
    zones.push({ cloud: z.cloud, zone: z.zone, silent: together.length, running: z.running, sinceMs: best.endMs });
    for (const s of together) machines.add(s.id);
  }
  return { zones, machines };
}
