import { CloudError, GpuFleetError } from '../../core/errors.ts';
import type { Cloud, Offering } from '../../core/catalog.ts';
import type { Clock, JobStore, LeaseStore, NodeGroupProvider, PlanJournal } from '../../core/ports.ts';
import type { Job } from '../../core/job.ts';
import type { Policy } from '../../core/snapshot.ts';
import type { NoticeSource } from '../../core/services/interruption.ts';
import type { SeededRandom } from './clock.ts';
import type { CapacityModel } from './sim-cloud.ts';

/**
 * Faults the simulated cloud can inject (`gpu-fleet simulate --faults PROFILE`, `npm run
 * bench:chaos`). Each is drawn from the simulation's seeded random source, so a profile and a
 * seed give the same run every time.
 */
export interface FaultProfile {
  readonly name: string;
  readonly description: string;
  /** Share of node-group API calls that fail with throttling or a server error; only this cloud's when set (`api-errors:gcp`). */
  readonly apiErrorRate?: number;
  readonly apiErrorCloud?: Cloud;
  /**
   * One cloud fails every call (its node groups and its preemption listing) for `hours`, from
   * `atHour` on. Without a cloud: GCP when the fleet has GCP groups, else the fleet's one cloud.
   */
  readonly outage?: { readonly cloud?: Cloud; readonly atHour: number; readonly hours: number };
  /** Share of (spot offering × 10-minute window) with no spot capacity: launches there fail. */
  readonly spotStockoutRate?: number;
  /** Every Nth reconcile dies after applying k actions (no clean-up: its lease is left to expire). */
  readonly crashEvery?: number;
  readonly crashAfterActions?: number;
  /** Share of cloud events delivered twice (the copy a little later), and events of a tick delivered in shuffled order. */
  readonly duplicateEventRate?: number;
  readonly reorderEvents?: boolean;
  /** Half the spot machines get an interruption warning in one minute, this many hours in. */
  readonly stormAtHour?: number;
  /** Share of machines whose agent dies (stops heartbeating) at some point of their life. */
  readonly deadAgentRate?: number;
  /**
   * Share of machines whose agent process dies mid-life while their jobs' containers run on (they
   * outlive it); `restartShare` of those agents start again after 30 s to 5 min (systemd restarts
   * them) and adopt what they may, the rest never do (the machine's watchdog stops the containers
   * once the lease runs out; reconcile requeues the work and replaces the machine).
   */
  readonly agentDies?: { readonly rate: number; readonly restartShare: number };
  /** The machines lack the watchdog (as before it existed): a dead agent's containers run on until the machine goes. */
  readonly noWatchdog?: boolean;
  /** Share of checkpoints that fail (nothing is saved; the job carries on or is requeued from its older checkpoint). */
  readonly checkpointFailRate?: number;
  /** Share of job-store writes that lose a conditional-write race. */
  readonly storeConflictRate?: number;
  /** The machines' real upload (and download) speed for checkpoints, MiB/s (the world's; the agents still assume the policy's). */
  readonly uploadMiBPerSec?: number;
  /** The control plane's policy as its operator set it for this world (the upload speed it assumes, say). */
  readonly policy?: Partial<Policy>;
  /** Share of upload tries that fail; and share of uploads that fail on every try. */
  readonly uploadFailRate?: number;
  readonly stubbornUploadRate?: number;
  /** Share of the multi-GPU jobs replayed as gangs of two nodes (half the GPUs on each), and share of gang attempts whose second rank cannot start. */
  readonly gangShare?: number;
  readonly rankStartFailRate?: number;
  /** Share of service replicas whose model load hangs: the process runs, its readiness path never answers. */
  readonly replicaHangRate?: number;
  /**
   * The groups take machines away themselves, through their terminate hook (the stack's, 300 s):
   * Capacity Rebalancing on spot groups (a rebalance recommendation, a replacement, then the old
   * machine), health-check replacements, an instance refresh of the busiest group, and scale-ins
   * by someone else. Rates are per machine-hour (per group-hour for the scale-ins).
   */
  /**
   * The agent API fails the agents (the control plane's own fault): down for `minutes` from
   * `atHour` on (every heartbeat and every look at the work list unanswered), and/or a share of
   * those calls throttled.
   */
  readonly agentApi?: { readonly outage?: { readonly atHour: number; readonly minutes: number }; readonly throttleRate?: number };
  /** The control plane's cloud calls see a new machine `newSec` after its launch and each change of state `stateSec` late (SimCloud.setApiLag). */
  readonly apiLag?: { readonly newSec: number; readonly stateSec: number };
  /**
   * Share of queue messages (jobs and services) delivered again, 1 to 10 minutes later (SQS
   * standard queues deliver at least once, in no promised order); and each service's spec updated
   * once, at this hour, so an older copy can arrive after the newer one.
   */
  readonly redeliveryRate?: number;
  readonly serviceUpdateAtHour?: number;
  readonly asgTerminations?: {
    readonly rebalancePerHour: number;
    readonly unhealthyPerHour: number;
    readonly refreshAtHour: number;
    readonly externalScaleInPerHour: number;
  };
}

const ASG_TERMINATIONS = { rebalancePerHour: 0.03, unhealthyPerHour: 0.01, refreshAtHour: 20, externalScaleInPerHour: 0.5 };

export const FAULT_PROFILES: Readonly<Record<string, FaultProfile>> = {
  none: { name: 'none', description: 'no faults (the baseline)' },
  'api-errors': { name: 'api-errors', description: '10% of node-group API calls throttled or failing with 5xx', apiErrorRate: 0.1 },
  'cloud-outage': {
    name: 'cloud-outage',
    description:
      'one cloud (GCP unless named: cloud-outage:aws) fails every call for an hour, 16 h in (the busiest hour of the built-in trace); with one cloud in the fleet, that one',
    outage: { atHour: 16, hours: 1 },
  },
  'spot-stockout': { name: 'spot-stockout', description: 'spot pools out of capacity 40% of the time', spotStockoutRate: 0.4 },
  'crash-mid-apply': {
    name: 'crash-mid-apply',
    description: 'every 7th reconcile dies after 2 actions of its apply',
    crashEvery: 7,
    crashAfterActions: 2,
  },
  'duplicate-reorder': {
    name: 'duplicate-reorder',
    description: "30% of events delivered twice, and every tick's events shuffled",
    duplicateEventRate: 0.3,
    reorderEvents: true,
  },
  'interruption-storm': {
    name: 'interruption-storm',
    description: 'half the spot machines interrupted in one minute, 18 h in (about 30 of 60 machines on the built-in trace)',
    stormAtHour: 18,
  },
  'dead-agents': {
    name: 'dead-agents',
    description: '10% of machines lose their agent (no heartbeats; the jobs it ran stop with it)',
    deadAgentRate: 0.1,
  },
  'agent-dies': {
    name: 'agent-dies',
    description:
      "20% of machines' agents die mid-life while their containers run on: half start again 30 s to 5 min later and adopt what is still theirs, half never (the watchdog stops the containers at the lease's end)",
    agentDies: { rate: 0.2, restartShare: 0.5 },
  },
  'checkpoint-failures': { name: 'checkpoint-failures', description: '30% of checkpoints fail', checkpointFailRate: 0.3 },
  'store-conflicts': { name: 'store-conflicts', description: '10% of job writes lose a conditional-write race', storeConflictRate: 0.1 },
  'slow-uploads': {
    name: 'slow-uploads',
    description: 'checkpoint uploads at 10 MiB/s: a 16 GiB checkpoint takes 27 min, far past the 90 s heartbeat timeout',
    uploadMiBPerSec: 10,
  },
  'upload-failures': {
    name: 'upload-failures',
    description: '30% of checkpoint upload tries fail, and 5% of uploads fail on every try',
    uploadFailRate: 0.3,
    stubbornUploadRate: 0.05,
  },
  'agent-api-outage': {
    name: 'agent-api-outage',
    description:
      'the agent API refuses every call for 10 minutes, 16 h in: every heartbeat stops at once (a control-plane fault: nothing may be requeued for it)',
    agentApi: { outage: { atHour: 16, minutes: 10 } },
  },
  'agent-api-throttling': {
    name: 'agent-api-throttling',
    description: "30% of the agents' heartbeats and looks at their work lists throttled, all run long",
    agentApi: { throttleRate: 0.3 },
  },
  'eventual-consistency': {
    name: 'eventual-consistency',
    description:
      "the control plane's cloud calls see a new machine only a minute after its launch (DescribeInstances: InvalidInstanceID.NotFound), and every change of state 30 s late",
    apiLag: { newSec: 60, stateSec: 30 },
  },
  redelivery: {
    name: 'redelivery',
    description:
      "30% of queue messages (jobs and services) delivered again 1 to 10 minutes later; every service's spec updated 6 h in, so older copies arrive after newer ones",
    redeliveryRate: 0.3,
    serviceUpdateAtHour: 6,
  },
  'asg-terminations': {
    name: 'asg-terminations',
    description:
      'the groups take machines away through their 300 s drain hook: Capacity Rebalancing (3% of spot machines an hour), health-check replacements (1% an hour), an instance refresh of the busiest group at hour 20, and scale-ins by someone else; checkpoints upload at 50 MiB/s (the policy knows it), so a large one takes far longer than the hook',
    asgTerminations: ASG_TERMINATIONS,
    uploadMiBPerSec: 50,
    policy: { uploadMiBPerSec: 50 },
  },
  'gang-rank-failure': {
    name: 'gang-rank-failure',
    description:
      'half the multi-GPU jobs run as gangs of two nodes (half the GPUs on each), and in 30% of gang attempts the second rank cannot start',
    gangShare: 0.5,
    rankStartFailRate: 0.3,
  },
  'hung-replicas': {
    name: 'hung-replicas',
    description: '20% of service replicas hang while loading: they run, but never answer their readiness path',
    replicaHangRate: 0.2,
  },
  all: {
    name: 'all',
    description: 'every fault above at once',
    apiErrorRate: 0.1,
    spotStockoutRate: 0.4,
    crashEvery: 7,
    crashAfterActions: 2,
    duplicateEventRate: 0.3,
    reorderEvents: true,
    stormAtHour: 18,
    deadAgentRate: 0.1,
    agentDies: { rate: 0.1, restartShare: 0.5 },
    checkpointFailRate: 0.3,
    storeConflictRate: 0.1,
    uploadMiBPerSec: 10,
    uploadFailRate: 0.3,
    stubbornUploadRate: 0.05,
    gangShare: 0.5,
    rankStartFailRate: 0.3,
    replicaHangRate: 0.2,
    asgTerminations: ASG_TERMINATIONS,
    agentApi: { outage: { atHour: 16, minutes: 10 }, throttleRate: 0.1 },
    apiLag: { newSec: 60, stateSec: 30 },
    redeliveryRate: 0.3,
    serviceUpdateAtHour: 6,
  },
};

const CLOUDS: readonly Cloud[] = ['aws', 'gcp'];

/**
 * A profile by name; `api-errors` and `cloud-outage` take a cloud after a colon (`api-errors:gcp`,
 * `cloud-outage:aws`) to hit that cloud only.
 */
export function faultProfile(name: string): FaultProfile {
  const [base = '', target, ...rest] = name.split(':');
  const p = FAULT_PROFILES[base];
  if (!p) throw new GpuFleetError(`unknown fault profile "${name}"; profiles: ${Object.keys(FAULT_PROFILES).join(', ')}`);
  if (target === undefined) return p;
  if (rest.length > 0 || !CLOUDS.includes(target as Cloud) || (base !== 'api-errors' && base !== 'cloud-outage'))
    throw new GpuFleetError(
      `fault profile "${name}": only api-errors and cloud-outage take a cloud, as api-errors:gcp or cloud-outage:aws (clouds: ${CLOUDS.join(', ')})`,
    );
  const cloud = target as Cloud;
  return base === 'api-errors'
    ? { ...p, name, description: `${p.description}, on ${cloud} only`, apiErrorCloud: cloud }
    : { ...p, name, description: `${cloud} fails every call for an hour, 16 h in`, outage: { ...p.outage!, cloud } };
}

/** A check run before each of a provider's calls: it throws to make the call fail. */
export type CallFault = (operation: string) => void;

/** A share of calls fail, as throttling or a server error. */
export function randomFailures(random: SeededRandom, rate: number, counts: { injected: number }, cloud: Cloud): CallFault {
  return (operation) => {
    if (random.next() >= rate) return;
    counts.injected++;
    const throttled = random.next() < 0.5;
    throw new CloudError(
      throttled ? 'throttled' : 'unavailable',
      throttled
        ? `Rate exceeded (injected fault on ${operation})`
        : `We encountered an internal error. Please try again. (injected fault on ${operation})`,
      { operation, cloud },
    );
  };
}

/** Every call fails while the clock is in the outage window, as when a cloud's API (or the credentials for it) is down. */
export function outageFailures(clock: Clock, fromMs: number, untilMs: number, counts: { injected: number }, cloud: Cloud): CallFault {
  return (operation) => {
    const now = clock.nowMs();
    if (now < fromMs || now >= untilMs) return;
    counts.injected++;
    throw new CloudError('unavailable', `${cloud} is not answering: the service is unavailable (injected outage, on ${operation})`, {
      operation,
      cloud,
    });
  };
}

/** A provider whose calls go through `fail` first. */
export function faultyProvider(provider: NodeGroupProvider, fail: CallFault): NodeGroupProvider {
  return {
    cloud: provider.cloud,
    ...(provider.scope !== undefined ? { scope: provider.scope } : {}),
    listGroups: async () => (fail('list groups'), provider.listGroups()),
    listInstances: async () => (fail('list instances'), provider.listInstances()),
    setDesiredCapacity: async (g, d) => (fail('set desired capacity'), provider.setDesiredCapacity(g, d)),
    terminateInstance: async (g, i) => (fail('terminate instance'), provider.terminateInstance(g, i)),
    setScaleInProtection: async (g, ids, p) => (fail('set scale-in protection'), provider.setScaleInProtection(g, ids, p)),
    describeInstance: async (i) => (fail('describe instance'), provider.describeInstance(i)),
    launchFailures: async (s) => (fail('launch failures'), provider.launchFailures(s)),
    completeLifecycleAction: async (input) => (fail('complete lifecycle action'), provider.completeLifecycleAction(input)),
    ...(provider.recordLifecycleHeartbeat
      ? {
          recordLifecycleHeartbeat: async (input: Parameters<NonNullable<NodeGroupProvider['recordLifecycleHeartbeat']>>[0]) => (
            fail('record lifecycle action heartbeat'),
            provider.recordLifecycleHeartbeat!(input)
          ),
        }
      : {}),
  };
}

/** A notice source whose polls go through `fail` first (a cloud's preemption listing is one of its API calls). */
export function faultyNotices(source: NoticeSource, fail: CallFault): NoticeSource {
  return { cloud: source.cloud, poll: async () => (fail('list preemption operations'), source.poll()) };
}

/** Spot pools without capacity in a share of 10-minute windows (deterministic per pool and window). */
export function stockouts(base: CapacityModel, rate: number, seed: number): CapacityModel {
  return {
    obtainable(o: Offering, atMs: number) {
      if (o.capacityType === 'spot' && hash01(`${seed}/${o.id}/${Math.floor(atMs / 600_000)}`) < rate) return false;
      return base.obtainable(o, atMs);
    },
  };
}

/** Job-store writes that lose a conditional-write race on a share of calls (the store is left unchanged). */
export function conflictingJobs<T extends JobStore>(store: T, random: SeededRandom, rate: number, counts: { injected: number }): T {
  return new Proxy(store, {
    get(target, prop, receiver) {
      const v = Reflect.get(target, prop, receiver) as unknown;
      if (prop === 'update' && typeof v === 'function') {
        return async (job: Parameters<JobStore['update']>[0], expected: number) => {
          if (random.next() < rate) {
            counts.injected++;
            return { ok: false, current: await target.get(job.id) };
          }
          return (v as JobStore['update']).call(target, job, expected);
        };
      }
      return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
    },
  });
}

/**
 * The control plane's job store, watched: `seen(before)` is told of each attempt it requeues as
 * lost (`node-lost`), with the job as it was, so the simulation can tell whether its machine still
 * ran it (a wrongful requeue). It changes nothing the store does.
 */
export function observeLostRequeues<T extends JobStore>(store: T, seen: (before: Job) => void): T {
  return new Proxy(store, {
    get(target, prop, receiver) {
      const v = Reflect.get(target, prop, receiver) as unknown;
      if (prop === 'update' && typeof v === 'function') {
        return async (job: Parameters<JobStore['update']>[0], expected: number) => {
          if (job.state !== 'pending' || job.requeueReason?.code !== 'node-lost')
            return (v as JobStore['update']).call(target, job, expected);
          const before = await target.get(job.id);
          const out = await (v as JobStore['update']).call(target, job, expected);
          if (out.ok && before && before.attempt < job.attempt) seen(before);
          return out;
        };
      }
      return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
    },
  });
}

/** Thrown inside a reconcile to stand for the function dying mid-apply. */
export class SimulatedCrash extends GpuFleetError {
  override name = 'SimulatedCrash';
}

/**
 * A plan journal whose run dies after `k` recorded actions, and a lease that is then not released
 * (a dead function runs no `finally`): the next reconcile must wait out the lease and resume.
 */
export function crashingJournal(
  journal: PlanJournal,
  lease: LeaseStore | undefined,
  state: { armed: boolean; done: number; k: number; crashes: number },
): { journal: PlanJournal; lease: LeaseStore | undefined } {
  let crashed = false;
  const j: PlanJournal = {
    ...bindAll(journal),
    async done(planId, index) {
      await journal.done(planId, index);
      if (state.armed && ++state.done >= state.k) {
        state.armed = false;
        state.crashes++;
        crashed = true;
        throw new SimulatedCrash(`reconcile died after ${state.k} actions of plan ${planId}`);
      }
    },
  };
  const l: LeaseStore | undefined = lease && {
    ...bindAll(lease),
    async release(name, holder) {
      if (crashed) {
        crashed = false;
        return;
      }
      return lease.release(name, holder);
    },
  };
  return { journal: j, lease: l };
}

function bindAll<T extends object>(o: T): T {
  const out: Record<string, unknown> = {};
  let proto: object | null = o;
  while (proto && proto !== Object.prototype) {
    for (const k of Object.getOwnPropertyNames(proto)) {
      const v = (o as Record<string, unknown>)[k];
      if (k !== 'constructor' && typeof v === 'function' && !(k in out)) out[k] = (v as (...a: unknown[]) => unknown).bind(o);
    }
    proto = Object.getPrototypeOf(proto) as object | null;
  }
  return out as T;
}

/** A stable number in [0, 1) from a string (FNV-1a). */
export function hash01(s: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h / 2 ** 32;
}
