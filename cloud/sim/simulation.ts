import { isDeepStrictEqual } from 'node:util';
import type { QueuedMessage } from './memory-stores.ts';
import {
  costByTeam as exactCostByTeam,
  BYTES_DAY_PERIOD_PREFIX,
  byteMeterOf,
  isBudgetPeriod,
  RESERVED_UNUSED_PREFIX,
  type Holding,
  type MachineMeter,
} from '../../core/services/accrual.ts';
import { CloudError, ConflictError, GpuFleetError } from '../../core/errors.ts';
import type { Instance } from '../../core/fleet.ts';
import {
  conflictingJobs,
  observeLostRequeues,
  crashingJournal,
  FAULT_PROFILES,
  faultyNotices,
  faultyProvider,
  hash01,
  outageFailures,
  randomFailures,
  SimulatedCrash,
  stockouts,
  type CallFault,
  type FaultProfile,
} from './faults.ts';
import type { Cloud } from '../../core/catalog.ts';
import {
  defaultNetworkLayout,
  siteKey,
  storeRootFor,
  type ByteBill,
  type NetworkLayout,
  type Site,
  type StoreRoot,
} from '../../core/bytes.ts';
import { regionOfZone } from '../catalog/shipped.ts';
import { shippedByteRates } from '../prices.ts';
import { billOf, SimCheckpointBucket } from './checkpoint-bucket.ts';
import { GCE_PREEMPTION_NOTICE_MS } from '../gcp/preemptions.ts';
import { checkInvariants, fromMachines, InvariantViolation } from './invariants.ts';
import { budgetStatus, teamFromTags } from '../../core/budget.ts';
import { periodKey } from '../../core/period.ts';
import { gpuModelMatches, milliGpusUsed } from '../../core/gpu.ts';
import { ACTIVE_STATES, assignmentMilliGpu, jobIdFor, requeueCounts, reworkGpuHours, TERMINAL_STATES, type Job } from '../../core/job.ts';
import { costForDuration, type MicroUsd } from '../../core/money.ts';
import { fitsBeforeTermination, reservationTerminationMs } from '../../core/reservation.ts';
import type { Plan } from '../../core/plan.ts';
import { planBaseline } from '../../core/planner/baseline.ts';
import { plan } from '../../core/planner/planner.ts';
import type { TeamTagSet } from '../../core/ports.ts';
import { fleetShapeFrom, intake } from '../../core/services/intake.ts';
import { handleNotice } from '../../core/services/interruption.ts';
import { checkpointSizeMiB, checkpointTimeoutSec } from '../../core/services/node-rules.ts';
import { reconcile, type Planner, type ReconcilePorts } from '../../core/reconcile/reconcile.ts';
import { DEFAULT_POLICY, type Policy, type Snapshot } from '../../core/snapshot.ts';
import type { BudgetState } from '../../core/team.ts';
import {
  instanceStateChange,
  parseCloudEvent,
  rebalanceRecommendation,
  spotInterruptionWarning,
  terminateLifecycleAction,
} from '../aws/events.ts';
import { SeededRandom } from './clock.ts';
import { RESERVATION_POLICIES, SIM_POLICIES, type SimPolicyName } from './policies.ts';
import { ReservationsHidden } from './views.ts';
import { ReservationMeter, type ReservationSummary } from './reservation-meter.ts';
import { typeCanHold } from '../../core/planner/capacity.ts';
import { createSimEnvironment, type SimEnvironment } from './environment.ts';
import { SimAgents, simulatedAddress } from './sim-agent.ts';
import { SimFrontDoor } from './front-door.ts';
import { ALWAYS_OBTAINABLE, type SimGroupConfig, type SimInstance, type SimReservationConfig } from './sim-cloud.ts';
import { AvailabilityLowerBound, floorPools, spotFloorCost } from './cost-floors.ts';
import { RateSpotMarket, TraceSpotMarket, type AvailabilityTrace, type SpotMarket } from './spot-market.ts';
import type { Workload, WorkloadJob } from './workload.ts';
import { jobTimes, type JobTimes, type Slowdown } from './job-times.ts';
import type { SimService } from './service-demand.ts';
import { replicaStartTime } from './replica-start.ts';
import { ServiceMeter, type ServiceSample, type ServiceSummary } from './service-meter.ts';
import { SERVICE_DEREGISTRATION_DELAY_SEC, SERVICE_LABEL, serviceId } from '../../core/serving/service.ts';

export { RESERVATION_POLICIES, SIM_POLICIES, type SimPolicyName, type ReservationSummary };

/** Where spot interruptions come from. */
export type SpotSetup =
  | { readonly kind: 'traces'; readonly traceOf: (o: { zone: string; instanceType: string }) => AvailabilityTrace | undefined }
  | { readonly kind: 'rates'; readonly ratePerHour: (o: { zone: string; instanceType: string }) => number }
  | { readonly kind: 'none' };

export interface SimulationOptions {
  readonly workload: Workload;
  readonly groups: readonly SimGroupConfig[];
  readonly teamTags: readonly TeamTagSet[];
  readonly policy?: SimPolicyName;
  readonly seed: number;
  /** Virtual hours to simulate at most; the run ends sooner once every job has ended and the fleet is empty. */
  readonly hours: number;
  readonly controlPolicy?: Partial<Policy>;
  readonly bootSec?: number;
  readonly spot?: SpotSetup;
  /** Epoch of virtual time 0 (default 2026-11-02T00:00:00Z, a Monday). */
  readonly startMs?: number;
  /** The machines' checkpoint upload speed, MiB/s (default: what the policy assumes, 500). */
  readonly uploadMiBPerSec?: number;
  /** Agent step (default 15 s, the agent's heartbeat period). */
  readonly tickSec?: number;
  /** Timeline sample period for charts (default 300 s). */
  readonly sampleEverySec?: number;
  readonly onProgress?: (virtualSec: number, totalSec: number) => void;
  /** Called after every step with the environment, for tests and analyses. */
  readonly onTick?: (env: SimEnvironment, virtualMs: number) => void | Promise<void>;
  /** Faults to inject (default none). */
  readonly faults?: FaultProfile;
  /** After every simulated minute, check the invariants: `stop` throws at the first violation (default), `count` records them. */
  readonly invariants?: 'stop' | 'count' | 'off';
  /** Services replayed beside the jobs, each with its load (submitted at the start, through the team's queue and intake). */
  readonly services?: readonly SimService[];
  /** Capacity reservations (ODCRs, Capacity Blocks) the `reserved` groups launch into, paid in full whether used or not. */
  readonly reservations?: readonly SimReservationConfig[];
  /**
   * The network the deployment has, for what its checkpoint bytes cost (default: the stack's own
   * VPC, an S3 gateway endpoint and a NAT gateway in every zone of the AWS groups).
   */
  readonly network?: NetworkLayout;
  /** How long an ended job's newest checkpoint is kept, days (the config's `checkpoints.expireAfterDays`, default 30). */
  readonly checkpointRetentionDays?: number;
  /**
   * Where GCP machines save: `regional` (default), a Cloud Storage bucket in each GCP region the
   * groups use (the config's `gcp.checkpointRoots`); `s3`, the fleet's S3 bucket, across clouds.
   */
  readonly gcpCheckpoints?: 'regional' | 's3';
}

/** The Cloud Storage root the simulated fleet keeps in a GCP region (what `gcp.checkpointRoots` names deployed). */
export function simGcsRoot(region: string): string {
  return `gs://gpu-fleet-sim-${region}/checkpoints/`;
}

/** What the checkpoints cost beside the machines: bytes moved and kept, and their bill by category (core/bytes.ts). */
export interface CheckpointBytes {
  /** Bytes uploaded (every rank's part of every save that landed) and downloaded (every resume's parts). */
  readonly bytesUploaded: number;
  readonly bytesDownloaded: number;
  readonly uploads: number;
  readonly downloads: number;
  /** Storage held over the run, GiB × hours (each object from its upload until the sweep deleted it, or the end). */
  readonly storageGiBHours: number;
  /** Objects and GiB still held at the end. */
  readonly heldObjectsAtEnd: number;
  readonly heldGiBAtEnd: number;
  readonly bill: ByteBill;
  readonly billByTeam: Readonly<Record<string, ByteBill>>;
  /**
   * What the spend ledger charged the teams for checkpoint bytes (its `bytes:day:` rows), as a
   * deployment counts them: from each save's size as its agent reported it, kept in the checkpoint
   * index. Beside `bill` (the bucket's own account) it shows how close the deployed count is: it
   * misses uploads that never completed, and the minutes after the last reconcile.
   */
  readonly chargedMicroUsd: MicroUsd;
  readonly chargedByTeam: Readonly<Record<string, MicroUsd>>;
  /** Where the checkpoints are kept, and the network path to them. */
  readonly store: string;
  readonly network: NetworkLayout;
}

export interface SimulationSummary {
  readonly policy: SimPolicyName;
  readonly trace: string;
  readonly seed: number;
  /** Simulated time from start to end (`--hours`; the run stops there, whatever still runs). */
  readonly virtualHours: number;
  /** The span of the trace's arrivals: its last job's submit time, hours (the rest of virtualHours lets the queue drain). */
  readonly arrivalHours: number;
  readonly jobs: number;
  readonly accepted: number;
  readonly rejected: number;
  readonly completed: number;
  readonly failed: number;
  readonly cancelled: number;
  /** Accepted jobs that are in no state at all, or were never accepted: must be 0. */
  readonly lost: number;
  readonly runningAtEnd: number;
  readonly pendingAtEnd: number;
  readonly gpuHoursUsed: number;
  readonly gpuHoursPaid: number;
  readonly utilizationPct: number;
  readonly costMicroUsd: MicroUsd;
  /** Of it, what the groups' warm pools cost before their machines were started (with a warm pool only). */
  readonly warmPoolMicroUsd?: MicroUsd;
  /** The same machines at on-demand prices (what this run would have cost without spot). */
  readonly sameMachinesOnDemandMicroUsd: MicroUsd;
  /** The all-on-demand baseline's cost on the same trace and seed, when it was run. */
  readonly onDemandCostMicroUsd: MicroUsd;
  /**
   * Useful work at the cheapest spot price each job could use, no idle, no boot, no rework, whether
   * or not spot could be had then: a floor no policy reaches on a market with outages (cloud/sim/cost-floors.ts).
   */
  readonly spotFloorCostMicroUsd: MicroUsd;
  /**
   * The same useful work priced tick by tick at the cheapest pool that had capacity then (spot only
   * while a spot pool the job may use could give a machine, else on-demand): what cost is judged against.
   */
  readonly lowerBoundCostMicroUsd: MicroUsd;
  readonly costByTeamMicroUsd: Readonly<Record<string, MicroUsd>>;
  /** The checkpoints' bytes: what was moved and kept, and what that cost, in all and per team. */
  readonly checkpointBytes: CheckpointBytes;
  /** The whole bill: the machines (costMicroUsd) and the checkpoints' bytes. */
  readonly wholeBillMicroUsd: MicroUsd;
  /**
   * What each team (and idle) really owed up to where the ledger counted it: the simulated
   * cloud's machine lives at their prices, split by every attempt's holding as the job records
   * say. The ledger is measured against it.
   */
  readonly exactCostByTeamMicroUsd: Readonly<Record<string, MicroUsd>>;
  /** (ledger total − exact total) ÷ exact total, in percent. */
  readonly spendErrorPct: number;
  /** Spend counted to the wrong team or not at all: Σ |ledger − exact| over teams (idle included) ÷ exact total, in percent. */
  readonly teamSpendErrorPct: number;
  /** Submission to first start (the first wait), over accepted jobs. */
  readonly p50WaitSec: number;
  readonly p95WaitSec: number;
  /** First wait, total wait over all attempts, and attempts per job (job-times.ts). */
  readonly jobTimes: JobTimes;
  /**
   * Completion time against the same job's under the all-on-demand baseline of the same run
   * (filled in by whoever ran both: `gpu-fleet simulate`, bench:replay).
   */
  readonly slowdownVsOnDemand?: Slowdown;
  /**
   * With groups in more than one cloud: the same waits over the jobs each cloud could run (some
   * group of it has a machine with the GPU model and count the job asks for). A job either
   * cloud could run counts in both.
   */
  readonly waitByCloud?: Readonly<Record<string, { readonly jobs: number; readonly p50WaitSec: number; readonly p95WaitSec: number }>>;
  /** Spot machines the market took back (one may hold several jobs). */
  readonly interruptions: number;
  /** Times a job went back to the queue, whatever the cause (core/job.ts, requeueCounts). */
  readonly requeues: number;
  /** Of those, the moves gpu-fleet decided itself (back to spot, consolidation, deadline, priority, budget stop). */
  readonly moves: number;
  readonly checkpoints: number;
  /** GPU-hours of work done twice: lost since the newest checkpoint when an attempt was requeued, summed over the jobs (core/job.ts, reworkGpuHours). */
  readonly reworkGpuHours: number;
  /** GPU-hours jobs ran without making progress that is not rework: restoring from checkpoints and pausing to write them. */
  readonly overheadGpuHours: number;
  readonly deadlineJobs: number;
  readonly deadlineMisses: number;
  readonly budgetEvents: number;
  readonly machinesLaunched: number;
  readonly peakGpus: number;
  readonly wallMs: number;
  /** The fault profile and what it injected. */
  readonly faults: {
    readonly profile: string;
    readonly apiErrors: number;
    /** Calls failed by a cloud's outage (`cloud-outage`). */
    readonly outageErrors: number;
    readonly storeConflicts: number;
    readonly crashes: number;
    readonly duplicateEvents: number;
    readonly deadAgents: number;
    /** Agents that died with their containers running on, those that started again, what they adopted, and what the watchdogs stopped. */
    readonly agentsDown: number;
    readonly agentRestarts: number;
    readonly adopted: number;
    readonly watchdogStopped: number;
    readonly checkpointFailures: number;
    /** Upload tries that failed, uploads given up after their allowance, and ranks that could not start. */
    readonly uploadFailures: number;
    readonly uploadsGivenUp: number;
    /** Saves the checkpoint index refused: progress behind the newest complete checkpoint. */
    readonly checkpointsRefused: number;
    /** Checkpoints asked for whose upload was still going when the machine's terminate hook let it go. */
    readonly savesCutByHook: number;
    /** Attempts that resumed from an older checkpoint than the newest complete one (the invariant says none). */
    readonly staleResumes: number;
    readonly rankStartFailures: number;
    /** Service replicas whose load hung (`hung-replicas`). */
    readonly replicasHung: number;
    /** Agent calls the agent API's rules refused (each one is also an invariant violation). */
    readonly agentCallsRefused: number;
    /** Machines the groups took away themselves (rebalancing, health checks, a refresh, someone else's scale-in). */
    readonly asgTerminations: number;
    readonly stormInterruptions: number;
    readonly reconcileFailures: number;
    /** Attempts the control plane requeued as lost while their machine was running and its agent still ran them (0 under `agent-api-outage`). */
    readonly wrongfulRequeues: number;
    /** Attempts agents stopped themselves when their lease lapsed, and agent calls the agent API left unanswered (`agent-api-*`). */
    readonly fencedAttempts: number;
    readonly unansweredAgentCalls: number;
    /** Queue messages delivered again, and services an older copy sent back to an older spec (must be 0) (`redelivery`). */
    readonly redelivered: number;
    readonly servicesReverted: number;
  };
  /** Machines launched and scaled in per group over the run (a buy-then-scale-in cycle shows here). */
  readonly groupActivity: Readonly<
    Record<
      string,
      { readonly launched: number; readonly scaledIn: number; readonly rebought: number; readonly scaledInWithWorkWaiting: number }
    >
  >;
  /** Invariant violations found (each minute's check), and their first messages. */
  readonly violations: number;
  readonly violationMessages: readonly string[];
  /** Jobs seen with two attempts running at once: must be 0. */
  readonly duplicated: number;
  /** The most work one interrupted attempt lost, seconds. */
  readonly maxLostWorkSec: number;
  /**
   * Each service: its load's source, availability (ready replicas ≥ what the load needed), replica-hours and
   * cost. Its replicas are not in the job counts above; its machines are in the fleet's cost.
   */
  readonly services?: readonly ServiceSummary[];
  /** With reservations: each one's cost and use, and the run's cost with every reservation paid in full. */
  readonly reservations?: readonly ReservationSummary[];
  readonly costWithReservationsMicroUsd?: MicroUsd;
}

export interface TimelineSample {
  /** Seconds since the start of the replay. */
  readonly tSec: number;
  readonly machinesByGroup: Readonly<Record<string, number>>;
  readonly spotGpus: number;
  readonly onDemandGpus: number;
  readonly pendingJobs: number;
  readonly pendingGpus: number;
  readonly runningJobs: number;
  readonly cumulativeCostMicroUsd: number;
  readonly spendByTeamMicroUsd: Readonly<Record<string, number>>;
  /** Per service: replicas its load needed, and ready ones (spot and on-demand). */
  readonly services?: Readonly<Record<string, ServiceSample>>;
}

export interface BudgetEvent {
  readonly tSec: number;
  readonly team: string;
  readonly state: BudgetState;
  readonly crossedPct: number | undefined;
  readonly message: string;
}

export interface SimulationResult {
  readonly summary: SimulationSummary;
  readonly timeline: readonly TimelineSample[];
  readonly budgetEvents: readonly BudgetEvent[];
  readonly budgets: Readonly<Record<string, { amountMicroUsd: number; period: string }>>;
  readonly env: SimEnvironment;
  readonly jobs: readonly Job[];
  /** The services' simulated load balancer (with services only): its register/deregister log. */
  readonly frontDoor?: SimFrontDoor;
}

export const DEFAULT_SIM_START_MS = Date.UTC(2026, 10, 2, 0, 0, 0);
/** The region of the simulated stack (and its checkpoint bucket) when the fleet has no AWS group: the shipped AWS fleet's. */
export const SIM_STACK_REGION = 'us-west-2';
/** The byte prices every simulation bills with: the shipped list prices (data/prices). */
const BYTE_RATES = shippedByteRates();
const NOTICE_MS = 120_000;
/** Seconds at the start of a run in which services are not scored (their first replicas boot). */
const SERVICE_GRACE_SEC = 900;

/** The fleet without warm pools: the baselines stand for systems that have none (Karpenter has none). */
/** The zones of a fleet's AWS groups, sorted: where the stack's VPC has subnets (and, by default, a NAT gateway each). */
export function awsZonesOf(groups: readonly Pick<SimGroupConfig, 'cloud' | 'zones'>[]): string[] {
  return [...new Set(groups.filter((g) => (g.cloud ?? 'aws') === 'aws').flatMap((g) => g.zones))].sort();
}

function withoutWarmPools(groups: readonly SimGroupConfig[]): readonly SimGroupConfig[] {
  return groups.map(({ warmPool: _none, ...g }) => g);
}

/** The planner, fleet and workload each policy runs with (the baselines without gpu-fleet's warm pools). */
export function policySetup(
  policy: SimPolicyName,
  groups: readonly SimGroupConfig[],
  workload: Workload,
): { planner: Planner; groups: readonly SimGroupConfig[]; workload: Workload; hideReservations?: boolean } {
  if (policy !== 'gpu-fleet') groups = withoutWarmPools(groups);
  switch (policy) {
    case 'gpu-fleet':
      return { planner: plan, groups, workload };
    case 'on-demand':
      // Everything on on-demand machines (the same autoscaler, without gpu-fleet's warm pools).
      return { planner: plan, groups: groups.filter((g) => g.capacityType === 'on-demand'), workload };
    case 'spot-greedy':
      // Spot whenever it can be had, no regard for risk, and no checkpoints: an interrupted job starts over.
      return {
        planner: ({ spotModel: _risk, ...s }: Snapshot): Plan =>
          plan({ ...s, poolRiskPerHour: new Map([...s.prices.keys()].filter((k) => k.endsWith('/spot')).map((k) => [k, 0])) }),
        groups,
        workload: { ...workload, jobs: workload.jobs.map((j) => ({ ...j, spec: { ...j.spec, checkpoint: undefined } })) },
      };
    case 'cheapest-fit':
    case 'reserved-first':
      // Reserved capacity costs nothing at the margin, so the cheapest-first baseline takes it first.
      return { planner: planBaseline, groups, workload };
    case 'reservation-unaware':
      return { planner: plan, groups, workload, hideReservations: true };
  }
}

/**
 * Replays a workload through the real control loop on the simulated cloud: each job is sent
 * to its team's queue and taken in by the intake service; node agents run what is placed,
 * checkpoint at each job's interval and on request; spot machines are taken back as the market
 * says, each announced two minutes ahead by the same EventBridge event the interruption Lambda
 * receives; the reconcile service runs every reconcile interval of virtual time, and at once
 * after an interruption, as in production.
 */
export async function runSimulation(options: SimulationOptions): Promise<SimulationResult> {
  const wallStart = performance.now();
  const policyName = options.policy ?? 'gpu-fleet';
  const faults = options.faults ?? FAULT_PROFILES.none!;
  const setup = policySetup(policyName, options.groups, withGangs(options.workload, faults, options.seed));
  const control: Policy = { ...DEFAULT_POLICY, ...faults.policy, ...options.controlPolicy };
  const startMs = options.startMs ?? DEFAULT_SIM_START_MS;
  const tickMs = (options.tickSec ?? 15) * 1000;
  const horizonMs = Math.round(options.hours * 3_600_000);
  const sampleEveryMs = (options.sampleEverySec ?? 300) * 1000;
  const marketRandom = new SeededRandom(options.seed * 7919 + 17);
  const market = buildMarket(options.spot ?? { kind: 'none' }, startMs, horizonMs, marketRandom);
  const env = createSimEnvironment({
    startMs,
    seed: options.seed,
    // The stack puts its drain hook on every group; the simulated groups get it when a profile makes them take machines away.
    groups: faults.asgTerminations
      ? setup.groups.map((g) => ({ ...g, terminateHook: { name: control.drainHookName, timeoutSec: control.drainHookTimeoutSec } }))
      : setup.groups,
    teams: [...new Set([...setup.workload.teams, ...options.teamTags.map((t) => t.team)])],
    teamTags: options.teamTags,
    ...(options.bootSec !== undefined ? { bootSec: options.bootSec } : {}),
    ...(faults.spotStockoutRate
      ? { capacity: stockouts(market ?? ALWAYS_OBTAINABLE, faults.spotStockoutRate, options.seed) }
      : market
        ? { capacity: market }
        : {}),
    ...(options.reservations ? { reservations: options.reservations } : {}),
    warmPreparedByAgents: true,
  });
  // Faults: the control loop's ports (and the agents' store) as the chosen profile breaks them.
  const faultRandom = new SeededRandom(options.seed * 104_729 + 3);
  const injected = {
    api: { injected: 0 },
    outage: { injected: 0 },
    conflicts: { injected: 0 },
    duplicates: 0,
    storm: 0,
    reconcileFailures: 0,
    asgTerminations: 0,
    redelivered: 0,
  };
  const crash = { armed: false, done: 0, k: faults.crashAfterActions ?? 0, crashes: 0 };
  const jobStore = faults.storeConflictRate
    ? conflictingJobs(env.jobs, faultRandom, faults.storeConflictRate, injected.conflicts)
    : env.jobs;
  // Attempts the control plane requeued as lost while their machine was running and its agent still ran them: its own mistake.
  const wrongful = { requeues: 0 };
  const controlJobs = observeLostRequeues(jobStore, (before) => {
    const truth = new Map(env.cloud.allInstances().map((i) => [i.id, i]));
    // Every rank's machine running and still running its rank: nothing was lost (one rank's machine lost requeues a gang rightly).
    const nodes = before.placement?.nodes ?? [];
    const running =
      nodes.length > 0 &&
      nodes.every((n) => truth.get(n.nodeId)?.state === 'running' && agents.runsOn(n.nodeId, before.id, before.attempt));
    if (running) wrongful.requeues++;
  });
  let ports: ReconcilePorts = { ...env.ports, jobs: controlJobs };
  if (setup.hideReservations) {
    // The control plane as it was before it knew reservations: reserved groups look on-demand, and no reservation is read.
    const { reservations: _unread, ...rest } = ports;
    void _unread;
    ports = { ...rest, providers: rest.providers.map((p) => new ReservationsHidden(p)) };
  }
  const reservationMeter = new ReservationMeter(options.reservations ?? [], startMs);
  // API faults per cloud: random errors (on every cloud, or one), and one cloud's outage.
  const clouds = [...new Set(setup.groups.map((g) => g.cloud ?? 'aws'))];
  const outage = faults.outage
    ? {
        cloud: faults.outage.cloud ?? (clouds.includes('gcp') ? 'gcp' : (clouds[0] ?? 'aws')),
        fromMs: startMs + faults.outage.atHour * 3_600_000,
        untilMs: startMs + (faults.outage.atHour + faults.outage.hours) * 3_600_000,
      }
    : undefined;
  const callFaults = (cloud: Cloud): CallFault | undefined => {
    const checks: CallFault[] = [];
    if (faults.apiErrorRate && (faults.apiErrorCloud === undefined || faults.apiErrorCloud === cloud))
      checks.push(randomFailures(faultRandom, faults.apiErrorRate, injected.api, cloud));
    if (outage?.cloud === cloud) checks.push(outageFailures(env.clock, outage.fromMs, outage.untilMs, injected.outage, cloud));
    return checks.length === 0 ? undefined : (operation) => checks.forEach((check) => check(operation));
  };
  ports = {
    ...ports,
    providers: ports.providers.map((p) => {
      const fail = callFaults(p.cloud);
      return fail ? faultyProvider(p, fail) : p;
    }),
    ...(ports.notices
      ? {
          notices: ports.notices.map((n) => {
            const fail = callFaults(n.cloud);
            return fail ? faultyNotices(n, fail) : n;
          }),
        }
      : {}),
  };
  if (faults.crashEvery) ports = { ...ports, ...crashingJournal(ports.journal, ports.lease, crash) } as ReconcilePorts;
  const deadAgents = new Set<string>();
  const agentDead = faults.deadAgentRate
    ? (inst: Instance, nowMs: number) => {
        // Some machines' agents die between 10 minutes and 2 hours into their life, for good.
        if (hash01(`${options.seed}/agent/${inst.id}`) >= faults.deadAgentRate!) return false;
        const dies = inst.launchedAtMs + 600_000 + hash01(`${options.seed}/when/${inst.id}`) * 1.5 * 3_600_000;
        if (nowMs >= dies) deadAgents.add(inst.id);
        return nowMs >= dies;
      }
    : undefined;
  // Agents whose process dies while their containers run on: between 5 and 65 minutes into the machine's life; some
  // start again 30 s to 5 min later (systemd starts the machine's agent again, which adopts what is still its), the rest never do.
  const agentDown = faults.agentDies
    ? (inst: Instance, nowMs: number) => {
        const f = faults.agentDies!;
        const draw = hash01(`${options.seed}/agent-dies/${inst.id}`);
        if (draw >= f.rate) return false;
        const dies = inst.launchedAtMs + 300_000 + hash01(`${options.seed}/agent-dies-when/${inst.id}`) * 3_600_000;
        // The lower part of the draw's range starts again (one draw: two of this hash's draws on near names are not independent).
        const restarts = draw < f.rate * f.restartShare;
        const back = dies + 30_000 + hash01(`${options.seed}/agent-back/${inst.id}`) * 270_000;
        return nowMs >= dies && (!restarts || nowMs < back);
      }
    : undefined;
  const checkpointFails = faults.checkpointFailRate ? () => faultRandom.next() < faults.checkpointFailRate! : undefined;
  // The agent API's own faults: an outage window (every agent call unanswered), or a share of calls throttled.
  const apiOutage = faults.agentApi?.outage;
  const agentApiAnswers = faults.agentApi
    ? (_id: string, nowMs: number) => {
        const t = nowMs - startMs;
        if (apiOutage && t >= apiOutage.atHour * 3_600_000 && t < apiOutage.atHour * 3_600_000 + apiOutage.minutes * 60_000) return false;
        return !(faults.agentApi!.throttleRate && faultRandom.next() < faults.agentApi!.throttleRate);
      }
    : undefined;
  if (faults.apiLag) env.cloud.setApiLag(faults.apiLag);
  const byJobId = new Map<string, WorkloadJob>(setup.workload.jobs.map((j) => [jobIdFor(j.team, j.id), j]));
  const workOf = (job: Job): WorkloadJob | undefined => byJobId.get(job.id);
  const pools = floorPools(env, options.groups);
  const lowerBound = new AvailabilityLowerBound(pools, (o, atMs) => market?.obtainable(o, atMs) ?? true);
  // Each service's load, as its replicas would report it (requests per second over the service).
  const demandOf = new Map((options.services ?? []).map((svc) => [serviceId(svc.team, svc.spec.name ?? ''), svc.demand]));
  ports = {
    ...ports,
    serviceLoad: {
      read: async (svc, _replicas, atMs) => {
        const d = demandOf.get(svc.id);
        return d ? { 'requests-per-second': d.rpsAt((atMs - startMs) / 1000) } : {};
      },
    },
  };
  // The services' load balancer: a target group per service on the virtual clock. Its health check
  // asks the simulated replica behind the address itself: it answers once its model has loaded, and
  // never if its load hangs (whatever any agent reported).
  const answers = (_serviceId: string, target: { ip: string; port: number }, atMs: number): boolean =>
    agents.answersReadiness(target.ip, target.port, atMs);
  const frontDoor: SimFrontDoor | undefined =
    options.services && options.services.length > 0
      ? new SimFrontDoor(env.clock, { healthyAfterSec: 10, deregistrationDelaySec: SERVICE_DEREGISTRATION_DELAY_SEC, probe: answers })
      : undefined;
  if (frontDoor) ports = { ...ports, frontDoor };
  const taking = frontDoor
    ? (serviceId: string, job: Job) => {
        const nodeId = job.placement?.nodes[0]?.nodeId;
        const port = job.spec.service?.port;
        if (!nodeId || port === undefined) return false;
        const ip = simulatedAddress(nodeId);
        return frontDoor.healthy(serviceId).some((t) => t.ip === ip && t.port === port);
      }
    : undefined;
  // The first quarter hour, while the first replicas boot, is not scored.
  const serviceMeter = new ServiceMeter(options.services ?? [], startMs, SERVICE_GRACE_SEC);
  let serviceNow: Record<string, ServiceSample>;
  // What each service's replica loads when it starts (services that say), by service id.
  const startupOf = new Map(
    (options.services ?? []).flatMap((s) => (s.startup ? [[serviceId(s.team, s.spec.name ?? ''), s.startup] as const] : [])),
  );
  const startupByImage = new Map((options.services ?? []).flatMap((s) => (s.startup ? [[s.spec.image, s.startup] as const] : [])));
  // The checkpoint bucket: the world's store and its bill; its sweep is reconcile's (the production rule).
  const awsZones = awsZonesOf(setup.groups);
  const storeSite: Site = { cloud: 'aws', region: awsZones[0] ? regionOfZone('aws', awsZones[0]) : SIM_STACK_REGION };
  const network = options.network ?? defaultNetworkLayout(awsZones);
  // A bucket in each GCP region the groups use, unless the run says GCP machines save into the S3 bucket.
  const gcpRegions = [
    ...new Set(setup.groups.filter((g) => g.cloud === 'gcp').flatMap((g) => g.zones.map((z) => regionOfZone('gcp', z)))),
  ].sort();
  const storeRoots: StoreRoot[] =
    options.gcpCheckpoints === 's3' ? [] : gcpRegions.map((region) => ({ root: simGcsRoot(region), site: { cloud: 'gcp', region } }));
  const bucket = new SimCheckpointBucket({
    clock: env.clock,
    jobs: env.jobs,
    checkpoints: env.checkpoints,
    store: storeSite,
    roots: storeRoots,
    layout: network,
    retentionDays: options.checkpointRetentionDays ?? 30,
  });
  // Budgets count the bytes as a deployment's do: from the index's byte events, as the agents reported each save.
  ports = {
    ...ports,
    checkpointSweep: bucket,
    bytes: byteMeterOf(env.checkpoints, { store: storeSite, roots: storeRoots, layout: network, rates: BYTE_RATES }),
  };
  const agents = new SimAgents({
    clock: env.clock,
    jobs: jobStore,
    bucket,
    nodes: env.nodes,
    checkpoints: env.checkpoints,
    history: env.checkpoints,
    // A GCP machine saves into its region's bucket, as its deployed agent is told to.
    rootFor: (machine: Site) => storeRootFor(storeRoots, machine)?.root,
    otherRoots: storeRoots.map((r) => r.root),
    instanceTypes: env.catalog.instanceTypes,
    // A service replica serves until it is cancelled.
    workSecOf: (job) => (job.spec.service ? Infinity : (workOf(job)?.workSec ?? job.spec.expectedRuntimeSec ?? 3600)),
    exitCodeOf: (job) => workOf(job)?.exitCode ?? 0,
    restoreSec: control.restoreSec,
    migMachine: (inst) => env.cloud.isMigGroup(inst.groupId),
    // A machine being prepared in a warm pool asks the agent API which images to pull; started, it finds them on its volume.
    // and a warned machine's replicas leave the load balancer through it, as late as lets them drain.
    sources: { services: env.services, types: env.catalog.instanceTypes, ...(frontDoor ? { frontDoor } : {}) },
    frontDoorTiming: { drainSec: SERVICE_DEREGISTRATION_DELAY_SEC, lookSec: tickMs / 1000 },
    imagesOnVolume: (id) => env.cloud.imagesOnVolume(id),
    releasedByHook: (id) => env.cloud.releasedByHook(id),
    output: env.jobLogs,
    gpuUseOf: (job) => workOf(job)?.gpuUse,
    // The world's upload speed (a fault may slow it); the agents assume the policy's.
    uploadMiBPerSec: faults.uploadMiBPerSec ?? options.uploadMiBPerSec ?? control.uploadMiBPerSec,
    timing: { uploadMiBPerSec: control.uploadMiBPerSec, uploadMarginSec: control.uploadMarginSec },
    ...(agentDead ? { agentDead } : {}),
    ...(agentDown ? { agentDown } : {}),
    ...(faults.noWatchdog ? { noWatchdog: true } : {}),
    ...(agentApiAnswers ? { agentApiAnswers } : {}),
    ...(checkpointFails ? { checkpointFails } : {}),
    ...(faults.uploadFailRate || faults.stubbornUploadRate
      ? {
          uploadFails: (u: { jobId: string; attempt: number; rank: number; tries: number }) =>
            hash01(`${options.seed}/stubborn/${u.jobId}/${u.attempt}/${u.rank}`) < (faults.stubbornUploadRate ?? 0) ||
            faultRandom.next() < (faults.uploadFailRate ?? 0),
        }
      : {}),
    ...(faults.rankStartFailRate
      ? {
          startFails: (job: Job, rank: number) =>
            rank > 0 && hash01(`${options.seed}/rank/${job.id}/${job.attempt}`) < faults.rankStartFailRate!,
        }
      : {}),
    ...(faults.replicaHangRate
      ? { replicaHangs: (job: Job) => hash01(`${options.seed}/hang/${job.id}/${job.attempt}`) < faults.replicaHangRate! }
      : {}),
    // A replica of a service that says what it loads starts in its pull (unless its machine holds the image), weights and warm-up.
    replicaLoadSecOf: (job: Job, imageCached: boolean) => {
      const startup = startupOf.get(job.spec.labels?.[SERVICE_LABEL] ?? '');
      return startup ? replicaStartTime(startup, imageCached).totalSec : (job.spec.service?.readiness.initialDelaySec ?? 0);
    },
    // An image pulled ahead takes as long as a replica's own pull of it.
    imagePullSecOf: (image: string) => {
      const startup = startupByImage.get(image);
      return startup ? replicaStartTime(startup, false).pullSec : undefined;
    },
  });

  // Exact cost: each machine's price over its life, counted when it ends (or at the end).
  const cost = { actual: 0, onDemand: 0, gpuMsPaid: 0, running: 0 };
  const accounted = new Set<string>();
  // The truth spend accrual is measured against: every machine's life as the simulated cloud ran it, and
  // every attempt's holding as the job records say (logged as they are written, none trimmed).
  const lives: { id: string; priceMicroUsdPerHour: number; launchedAtMs: number; endedAtMs: number; gpus: number }[] = [];
  const heldLog = new Map<string, Holding & { nodeId: string }>();
  env.jobs.onWrite = (job) => {
    for (const h of job.heldAttempts ?? [])
      for (const n of h.nodes) {
        const key = `${job.id}#${h.attempt}#${n.nodeId}`;
        if (!heldLog.has(key)) heldLog.set(key, { team: job.team, nodeId: n.nodeId, milliGpu: n.milliGpu, fromMs: h.fromMs, toMs: h.toMs });
      }
  };
  const account = (inst: SimInstance, endMs: number) => {
    if (accounted.has(inst.id)) return;
    accounted.add(inst.id);
    const p = env.priceOf(inst.offering);
    lives.push({
      id: inst.id,
      priceMicroUsdPerHour: p?.price ?? 0,
      launchedAtMs: inst.launchedAtMs,
      endedAtMs: endMs,
      gpus: env.catalog.instanceTypes.get(inst.offering.instanceType)?.gpuCount ?? 1,
    });
    const aliveMs = Math.max(0, endMs - inst.launchedAtMs);
    if (p) {
      cost.actual += costForDuration(p.price, aliveMs);
      cost.onDemand += costForDuration(p.onDemand, aliveMs);
    }
    cost.gpuMsPaid += aliveMs * (env.catalog.instanceTypes.get(inst.offering.instanceType)?.gpuCount ?? 0);
  };
  env.cloud.onEnded = (inst) => {
    account(inst, inst.endedAtMs ?? env.clock.nowMs());
    reservationMeter.ended(inst, inst.endedAtMs ?? env.clock.nowMs());
    // A reservation taking its machines away: whatever still runs there is killed (its last checkpoint is what survives).
    if (inst.offering.reservationId !== undefined && inst.endReason?.startsWith('reservation '))
      reservationMeter.killed(
        inst.offering.reservationId,
        env.jobs
          .all()
          .filter((j) => (j.state === 'running' || j.state === 'checkpointing') && j.placement?.nodes.some((a) => a.nodeId === inst.id))
          .map((j) => j.id),
      );
    // EC2 tells EventBridge of every machine that terminates (reclaimed, scaled in, let go by its hook), and the
    // stack's rule sends it to the interruption handler; Compute Engine pushes nothing.
    if (inst.offering.cloud === 'aws') {
      const atMs = inst.endedAtMs ?? env.clock.nowMs();
      deliver(
        atMs,
        instanceStateChange({ id: `sim-${++eventCounter}`, instanceId: inst.id, region: inst.offering.region, atMs, state: 'terminated' }),
      );
    }
  };
  // A MIG group scaled in while MIG work waits is the buy-then-scale-in cycle (counted per group).
  env.cloud.waitingWorkFor = (group) =>
    group.migEnabled === true && env.jobs.all().some((j) => j.state === 'pending' && j.spec.gpu.kind === 'mig' && !j.hold);
  // A machine entering its terminate hook: Auto Scaling sends the lifecycle event (EventBridge may repeat it).
  env.cloud.onHookStarted = (inst, hook) =>
    deliver(
      env.clock.nowMs(),
      terminateLifecycleAction({
        id: `sim-${++eventCounter}`,
        instanceId: inst.id,
        groupName: inst.groupId,
        hookName: hook.name,
        token: hook.token,
        region: inst.offering.region,
        atMs: env.clock.nowMs(),
      }),
    );
  const refresh = { started: false, groupId: '', before: new Set<string>() };
  /** What the groups do by themselves this tick (the asg-terminations profile). */
  const groupsAct = (now: number, t: number) => {
    const a = faults.asgTerminations;
    if (!a) return;
    const perTick = tickMs / 3_600_000;
    const live = env.cloud.allInstances().filter((i) => i.state === 'running' && i.replaceAtMs === undefined);
    for (const inst of live) {
      if (inst.offering.capacityType === 'spot' && faultRandom.next() < a.rebalancePerHour * perTick) {
        injected.asgTerminations++;
        deliver(
          now,
          rebalanceRecommendation({ id: `sim-${++eventCounter}`, instanceId: inst.id, region: inst.offering.region, atMs: now }),
        );
        env.cloud.rebalance(inst.id);
      } else if (faultRandom.next() < a.unhealthyPerHour * perTick) {
        injected.asgTerminations++;
        env.cloud.replace(inst.id, 'failed its EC2 health check');
      }
    }
    if (!refresh.started && t >= a.refreshAtHour * 3_600_000) {
      const counts = new Map<string, number>();
      for (const i of live) counts.set(i.groupId, (counts.get(i.groupId) ?? 0) + 1);
      const busiest = [...counts].sort((x, y) => y[1] - x[1] || (x[0] < y[0] ? -1 : 1))[0];
      if (busiest) {
        refresh.started = true;
        refresh.groupId = busiest[0];
        for (const i of live) if (i.groupId === busiest[0]) refresh.before.add(i.id);
      }
    }
    // The refresh replaces one machine at a time: the next once none of the group's is in its hook.
    if (refresh.before.size > 0) {
      const group = env.cloud.allInstances().filter((i) => i.groupId === refresh.groupId);
      if (!group.some((i) => i.state === 'terminating-wait')) {
        const next = group.find((i) => refresh.before.has(i.id) && i.state === 'running');
        for (const id of [...refresh.before]) if (!group.some((i) => i.id === id && i.state === 'running')) refresh.before.delete(id);
        if (next) {
          refresh.before.delete(next.id);
          injected.asgTerminations++;
          env.cloud.replace(next.id, 'replaced by an instance refresh');
        }
      }
    }
    for (const g of new Set(live.map((i) => i.groupId))) {
      if (faultRandom.next() < a.externalScaleInPerHour * perTick && env.cloud.externalScaleIn(g)) injected.asgTerminations++;
    }
  };

  const arrivals = [...setup.workload.jobs].sort((a, b) => a.submitSec - b.submitSec);
  const teams = await env.queue.teams();
  const teamBudgets = Object.fromEntries(
    options.teamTags.flatMap((t) => {
      const team = teamFromTags(t.team, t.tags);
      return team.budget ? [[t.team, { amountMicroUsd: team.budget.amountMicroUsd, period: team.budget.period }]] : [];
    }),
  );
  const inbox: { atMs: number; event: Record<string, unknown> }[] = [];
  const terminations: { atMs: number; inst: SimInstance }[] = [];
  const localNotices: { atMs: number; inst: SimInstance }[] = [];
  /**
   * The cloud takes a spot machine back at `at` plus its notice: AWS sends the EventBridge
   * warning two minutes ahead; GCP only sets the machine's metadata about 30 s ahead (its agent
   * reacts, and reconcile finds the preemption by polling afterwards).
   */
  const interrupt = (inst: SimInstance, at: number) => {
    interruptions++;
    if (inst.offering.cloud === 'gcp') {
      localNotices.push({ atMs: at, inst });
      terminations.push({ atMs: at + GCE_PREEMPTION_NOTICE_MS, inst });
      return;
    }
    deliver(
      at,
      spotInterruptionWarning({
        id: `sim-${++eventCounter}`,
        instanceId: inst.id,
        zone: inst.offering.zone,
        region: inst.offering.region,
        atMs: at,
      }),
    );
    terminations.push({ atMs: at + NOTICE_MS, inst });
  };
  const timeline: TimelineSample[] = [];
  const budgetEvents: BudgetEvent[] = [];
  const lastBudget = new Map<string, { state: BudgetState; crossed: number }>();
  let next = 0;
  let gpuMsUsed = 0;
  let peakGpus = 0;
  let interruptions = 0;
  let eventCounter = 0;
  let nextSampleMs = 0;
  const reconcileEvery = Math.max(1, Math.round((control.reconcileIntervalSec * 1000) / tickMs));
  let reconcileCount = 0;
  let stormDone = false;
  const runReconcile = async () => {
    reconcileCount++;
    crash.armed = faults.crashEvery !== undefined && reconcileCount % faults.crashEvery === 0;
    crash.done = 0;
    try {
      // Each run is its own function invocation (its own lease holder), as in production.
      await reconcile(ports, { planner: setup.planner, policy: control, holder: `sim-${reconcileCount}` });
    } catch (error) {
      // A dead or failed invocation: the next scheduled one picks up (and resumes a journaled plan).
      if (!(error instanceof SimulatedCrash) && !(error instanceof CloudError) && !(error instanceof ConflictError)) throw error;
      injected.reconcileFailures++;
    }
  };
  const submitted = new Set<string>();
  const violations: InvariantViolation[] = [];
  const overBudgetSince = new Map<string, number>();
  const stoppedSince = new Map<string, { atMs: number; rateMicroUsdPerHour: number; allowanceSec: number }>();
  const lostChecked = { upTo: 0 };
  const seenTwice = new Set<string>();
  /** Every tick, from the machines' side: two attempts of a job, or one rank on two machines, is the job running twice. */
  const noteDuplicates = () => {
    for (const t of fromMachines(agents.liveProcesses()).twice) seenTwice.add(t.jobId);
  };
  let refusedSeen = 0;
  const checkNow = async (atMs: number, instances: readonly Instance[]) => {
    if ((options.invariants ?? 'stop') === 'off') return;
    const processes = agents.liveProcesses();
    const gpusOf = new Map((await env.nodes.list()).map((r) => [r.instanceId, r.gpus]));
    const found = await checkInvariants(
      {
        atMs,
        jobs: env.jobs.all(),
        submitted,
        processes,
        checkpointTimeoutSec: (job) =>
          checkpointTimeoutSec(job, checkpointSizeMiB(job, gpusOf.get(job.placement?.nodes[0]?.nodeId ?? '')), {
            uploadMiBPerSec: control.uploadMiBPerSec,
            uploadMarginSec: control.uploadMarginSec,
          }),
        groups: await env.cloud.listGroups(),
        instances,
        exitCodeOf: (job) => workOf(job)?.exitCode ?? 0,
        lost: agents.lost,
        staleResumes: agents.staleResumes,
        lostSlackSec: tickMs / 1000 + control.noticeMarginSec + control.restoreSec,
        teamTags: options.teamTags,
        ledger: env.ledger,
        overBudgetSince,
        stoppedSince,
        reconcileIntervalMs: control.reconcileIntervalSec * 1000,
      },
      lostChecked,
    );
    // The agents go through the agent API's rules (core/services/agent-access.ts): following the node-side rules, they are never refused.
    if (agents.stats.refusedCalls > refusedSeen) {
      found.push(
        new InvariantViolation(
          'agents-never-refused',
          `${agents.stats.refusedCalls - refusedSeen} agent call(s) refused by the agent API's rules, first: ${agents.refusals[Math.min(refusedSeen, agents.refusals.length - 1)] ?? '?'}`,
          atMs,
        ),
      );
      refusedSeen = agents.stats.refusedCalls;
    }
    if (found.length > 0 && (options.invariants ?? 'stop') === 'stop') throw found[0]!;
    violations.push(...found);
  };
  /** Delivers a cloud event, maybe twice (the copy later), as EventBridge may. */
  const deliver = (atMs: number, event: Record<string, unknown>) => {
    inbox.push({ atMs, event });
    if (faults.duplicateEventRate && faultRandom.next() < faults.duplicateEventRate) {
      injected.duplicates++;
      inbox.push({ atMs: atMs + 30_000, event });
    }
  };

  const redeliveries: { atMs: number; team: string; message: QueuedMessage }[] = [];
  let servicesUpdated = false;
  /** Each service's labels as last sent (the `redelivery` profile's update), to check none is reverted. */
  const newestServiceSpec = new Map<string, Readonly<Record<string, string>> | undefined>();

  let tick = 0;
  for (let t = 0; t <= horizonMs; t += tickMs, tick++) {
    const now = startMs + t;
    env.clock.advanceTo(now);
    // Services are submitted first, through their team's queue like jobs.
    if (t === 0)
      for (const svc of options.services ?? []) await env.queue.send(svc.team, JSON.stringify(svc.spec), `service-${svc.spec.name ?? ''}`);
    // Arrivals go through the team queue and intake, as in production.
    while (next < arrivals.length && arrivals[next]!.submitSec * 1000 <= t) {
      const job = arrivals[next++]!;
      const spec =
        job.deadlineSec !== undefined ? { ...job.spec, deadline: new Date(startMs + job.deadlineSec * 1000).toISOString() } : job.spec;
      await env.queue.send(job.team, JSON.stringify(spec), job.id);
      submitted.add(jobIdFor(job.team, job.id));
    }
    // `redelivery`: each service's spec updated once (a new revision), so an older copy can come after it.
    if (faults.serviceUpdateAtHour !== undefined && !servicesUpdated && t >= faults.serviceUpdateAtHour * 3_600_000) {
      servicesUpdated = true;
      for (const svc of options.services ?? []) {
        const spec = { ...svc.spec, labels: { ...(svc.spec.labels ?? {}), revision: '2' } };
        newestServiceSpec.set(serviceId(svc.team, svc.spec.name ?? ''), spec.labels);
        await env.queue.send(svc.team, JSON.stringify(spec), `service-${svc.spec.name ?? ''}-r2`);
        // The first revision's message comes again two minutes later (its Lambda timed out before deleting it), sent at the start.
        const first = { team: svc.team, body: JSON.stringify(svc.spec), token: `service-${svc.spec.name ?? ''}`, messageId: 'first' };
        redeliveries.push({ atMs: now + 120_000, team: svc.team, message: { ...first, sentAtMs: startMs } });
      }
    }
    const take = (team: string, message: QueuedMessage) =>
      intake(
        {
          jobs: env.jobs,
          clock: env.clock,
          fleetShape: fleetShapeFrom(env.ports.providers, env.catalog.instanceTypes, env.clock),
          services: env.services,
          rightsizing: { families: env.families, offers: env.offers },
        },
        { team, body: message.body, token: message.token, ...(message.sentAtMs !== undefined ? { sentAtMs: message.sentAtMs } : {}) },
      );
    // Copies SQS delivers again (at least once, in no promised order): due ones first.
    for (let i = redeliveries.length - 1; i >= 0; i--) {
      const r = redeliveries[i]!;
      if (r.atMs > now) continue;
      redeliveries.splice(i, 1);
      injected.redelivered++;
      await take(r.team, r.message);
    }
    for (const team of teams) {
      for (const message of env.queue.receive(team, Number.MAX_SAFE_INTEGER)) {
        await take(team, message);
        if (faults.redeliveryRate && faultRandom.next() < faults.redeliveryRate)
          redeliveries.push({ atMs: now + (1 + Math.floor(faultRandom.next() * 10)) * 60_000, team, message });
      }
    }
    // The spot market takes machines back, each with its cloud's notice.
    if (market) for (const inst of market.reclaims(env.cloud.allInstances(), now)) interrupt(inst, now);
    // An interruption storm: half the live spot machines warned within one minute.
    // (At the first minute from that hour on with at least four spot machines up, so it is a storm.)
    const stormSpot =
      faults.stormAtHour !== undefined && !stormDone && t >= faults.stormAtHour * 3_600_000
        ? env.cloud
            .allInstances()
            .filter((i) => i.state !== 'terminated' && i.offering.capacityType === 'spot' && !terminations.some((x) => x.inst.id === i.id))
        : [];
    if (stormSpot.length >= 4) {
      stormDone = true;
      for (const inst of stormSpot.filter((_, k) => k % 2 === 0)) {
        injected.storm++;
        interrupt(inst, now + Math.floor(faultRandom.next() * 4) * tickMs);
      }
    }
    for (let i = terminations.length - 1; i >= 0; i--) {
      const due = terminations[i]!;
      if (due.atMs > now) continue;
      terminations.splice(i, 1);
      if (due.inst.state !== 'terminated' && due.inst.offering.cloud === 'gcp') {
        // Compute Engine records the preemption as an operation of its zone; nothing is pushed anywhere.
        env.cloud.reclaim(due.inst.id, 'preempted');
      } else if (due.inst.state !== 'terminated') {
        // (its state-change event goes out from onEnded, as for every machine that ends)
        env.cloud.reclaim(due.inst.id, 'spot interruption');
      }
    }
    // GCE sets a preempted machine's metadata `instance/preempted`: its agent sees it at its next look.
    for (let i = localNotices.length - 1; i >= 0; i--) {
      const n = localNotices[i]!;
      if (n.atMs > now) continue;
      localNotices.splice(i, 1);
      await agents.localNotice(
        n.inst.id,
        { kind: 'interruption', actionAtMs: n.atMs + GCE_PREEMPTION_NOTICE_MS, what: 'preempted notice (instance/preempted)' },
        control.noticeMarginSec,
      );
    }
    groupsAct(now, t);
    env.cloud.tick();
    let reconcileSoon = false;
    const due: Record<string, unknown>[] = [];
    for (let i = 0; i < inbox.length;) {
      if (inbox[i]!.atMs > now) {
        i++;
        continue;
      }
      due.push(inbox.splice(i, 1)[0]!.event);
    }
    if (faults.reorderEvents) faultRandom.shuffle(due);
    for (const event of due) {
      const parsed = parseCloudEvent(event, { receivedAtMs: now });
      if (parsed.kind !== 'notice') throw new GpuFleetError(`simulated event was not understood: ${JSON.stringify(parsed)}`);
      try {
        const out = await handleNotice(ports, parsed.notice, control);
        if (out.status === 'handled' && out.reconcileSoon) reconcileSoon = true;
      } catch (error) {
        // The interruption function failed (a cloud call, a write race lost again and again): EventBridge retries it a little later.
        if (!(error instanceof CloudError) && !(error instanceof ConflictError)) throw error;
        inbox.push({ atMs: now + tickMs, event });
      }
    }
    await agents.prepareWarm(env.cloud);
    const instances = await env.cloud.listInstances();
    await agents.tick(instances);
    noteDuplicates();
    if (tick % reconcileEvery === 0 || reconcileSoon) {
      await runReconcile();
      await noteBudgetEvents(env, t, lastBudget, budgetEvents);
    }
    if (tick % reconcileEvery === 0) await checkNow(now, await env.cloud.listInstances());
    if (reservationMeter.active && tick % reconcileEvery === 0) {
      // Work it could hold still waits after the plan, longer than a machine takes to boot and be planned for (what waits less is on its
      // way to a machine being launched): a job its type can hold that would finish, or reach a checkpoint, before it takes its machines.
      const settledMs = (control.expectedBootSec + 2 * control.reconcileIntervalSec) * 1000;
      const pending = (await env.jobs.listByState(['pending'])).filter((j) => now - j.queuedAtMs > settledMs);
      reservationMeter.noteAfterPlan(
        now,
        reconcileEvery * tickMs,
        await env.cloud.listInstances(),
        (r, type) =>
          pending.some(
            (j) =>
              !j.hold &&
              j.spec.gpu.kind !== 'mig' &&
              typeCanHold(type, j.spec.gpu, false) &&
              fitsBeforeTermination(
                {
                  remainingSec: Math.max(0, (workOf(j)?.workSec ?? j.spec.expectedRuntimeSec ?? 3600) - (j.checkpoint?.progressSec ?? 0)),
                  ...(j.spec.checkpoint ? { checkpointIntervalSec: j.spec.checkpoint.intervalSec } : {}),
                  interruptible: j.spec.interruptible,
                },
                control.expectedBootSec,
                now,
                reservationTerminationMs(r),
              ),
          ),
        (t) => env.catalog.instanceTypes.get(t),
      );
    }
    const running = await env.jobs.listByState(['running', 'checkpointing']);
    serviceNow = serviceMeter.note(
      now,
      tickMs,
      running,
      new Set(instances.filter((i) => i.state !== 'terminated').map((i) => i.id)),
      taking,
    );
    for (const job of running) gpuMsUsed += (tickMs * milliGpusUsed(job.spec.gpu) * job.spec.nodes) / 1000;
    reservationMeter.note(now, tickMs, instances);
    lowerBound.note(now, tickMs, running);
    let liveGpus = 0;
    for (const i of instances) {
      if (i.state === 'terminated') continue;
      const gpus = env.catalog.instanceTypes.get(i.instanceType)?.gpuCount ?? 0;
      liveGpus += gpus;
      const p = env.priceOf(i);
      if (p) cost.running += (p.price * tickMs) / 3_600_000;
    }
    peakGpus = Math.max(peakGpus, liveGpus);
    if (t >= nextSampleMs) {
      const at = await sample(env, t, instances, cost.running);
      timeline.push(Object.keys(serviceNow).length > 0 ? { ...at, services: serviceNow } : at);
      nextSampleMs += sampleEveryMs;
    }
    options.onProgress?.(t / 1000, horizonMs / 1000);
    await options.onTick?.(env, t);
    if (next >= arrivals.length && running.length === 0 && tick % reconcileEvery === 0 && inbox.length === 0) {
      const open = await env.jobs.listByState(['pending', 'placed']);
      if (open.length === 0 && instances.every((i) => i.state === 'terminated')) break;
    }
  }
  const endMs = env.clock.nowMs();
  for (const inst of env.cloud.allInstances()) account(inst, inst.endedAtMs ?? endMs);
  // The warm pools: their machines while prepared (running) and then stopped (their volumes), until started or the end.
  const warmPoolMicroUsd = env.cloud.warmPoolMicroUsd(endMs);
  cost.actual += warmPoolMicroUsd;

  const everything = env.jobs.all();
  // Service replicas are counted as services, not jobs.
  const isReplica = (j: Job) => j.spec?.labels?.[SERVICE_LABEL] !== undefined;
  const jobs = everything.filter((j) => !isReplica(j));
  const services =
    options.services && options.services.length > 0
      ? serviceMeter.summary(everything, endMs, tickMs, agents.imagePullsOf, agents.pulledAheadOf)
      : undefined;
  const costByTeam: Record<string, MicroUsd> = {};
  const countedUntil = new Map<string, number>();
  const bytesChargedByTeam: Record<string, MicroUsd> = {};
  for (const row of await env.ledger.list())
    if (row.period.startsWith(BYTES_DAY_PERIOD_PREFIX))
      bytesChargedByTeam[row.team] = (bytesChargedByTeam[row.team] ?? 0) + row.spentMicroUsd;
    else if (isBudgetPeriod(row.period)) {
      costByTeam[row.team] = (costByTeam[row.team] ?? 0) + row.spentMicroUsd;
      countedUntil.set(row.team, Math.max(countedUntil.get(row.team) ?? 0, row.accruedUntilMs ?? 0));
    }
  // The unused part of reservations is in the ledger too (paid whatever runs), and so are the checkpoint bytes: the
  // exact costs the ledger is checked against are the machines'.
  const machineSpend = Object.fromEntries(
    Object.entries(costByTeam)
      .filter(([t]) => !t.startsWith(RESERVED_UNUSED_PREFIX))
      .map(([t, c]) => [t, c - (bytesChargedByTeam[t] ?? 0)]),
  );
  const spend = spendAccuracy(machineSpend, countedUntil, lives, [...heldLog.values()], everything, startMs);
  const useful = usefulWork(jobs, agents, workOf, endMs);
  const reworkTotal = jobs.reduce((sum, j) => sum + reworkGpuHours(j), 0);
  // `redelivery`: a service whose record lost its newest spec to an older copy of its message was reverted.
  let servicesReverted = 0;
  for (const [id, labels] of newestServiceSpec) {
    const record = await env.services.get(id);
    if (record && !isDeepStrictEqual(record.spec.labels ?? {}, labels ?? {})) {
      servicesReverted++;
      violations.push(new InvariantViolation('service-not-reverted', `service ${id} went back to an older spec`, endMs));
    }
  }
  const byteAccount = bucket.account(endMs);
  const byteBill = billOf(byteAccount, BYTE_RATES);
  const checkpointBytes: CheckpointBytes = {
    bytesUploaded: Object.values(byteAccount.total).reduce((n, u) => n + u.bytesUploaded, 0),
    bytesDownloaded: Object.values(byteAccount.total).reduce((n, u) => n + u.bytesDownloaded, 0),
    uploads: byteAccount.uploads,
    downloads: byteAccount.downloads,
    storageGiBHours: round2(Object.values(byteAccount.total).reduce((n, u) => n + u.storageGiBHours, 0)),
    heldObjectsAtEnd: byteAccount.heldObjects,
    heldGiBAtEnd: round2(byteAccount.heldBytes / 2 ** 30),
    bill: byteBill.total,
    billByTeam: Object.fromEntries(byteBill.byTeam),
    chargedMicroUsd: Object.values(bytesChargedByTeam).reduce((a, b) => a + b, 0),
    chargedByTeam: Object.fromEntries(Object.entries(bytesChargedByTeam).filter(([, c]) => c > 0)),
    store: [storeSite, ...storeRoots.map((r) => r.site)].map(siteKey).join(' + '),
    network,
  };
  const summary: SimulationSummary = {
    policy: policyName,
    trace: options.workload.name,
    seed: options.seed,
    virtualHours: round2((endMs - startMs) / 3_600_000),
    arrivalHours: round2(options.workload.jobs.reduce((m, j) => Math.max(m, j.submitSec), 0) / 3600),
    jobs: options.workload.jobs.length,
    accepted: jobs.filter((j) => j.state !== 'rejected').length,
    rejected: jobs.filter((j) => j.state === 'rejected').length,
    completed: jobs.filter((j) => j.state === 'succeeded').length,
    failed: jobs.filter((j) => j.state === 'failed').length,
    cancelled: jobs.filter((j) => j.state === 'cancelled').length,
    lost: lostJobs(arrivals.slice(0, next), jobs),
    runningAtEnd: jobs.filter((j) => j.state === 'running' || j.state === 'checkpointing' || j.state === 'placed').length,
    pendingAtEnd: jobs.filter((j) => j.state === 'pending').length,
    gpuHoursUsed: round2(gpuMsUsed / 3_600_000),
    gpuHoursPaid: round2(cost.gpuMsPaid / 3_600_000),
    utilizationPct: cost.gpuMsPaid > 0 ? round2((100 * gpuMsUsed) / cost.gpuMsPaid) : 0,
    costMicroUsd: cost.actual,
    ...(options.groups.some((g) => g.warmPool) ? { warmPoolMicroUsd } : {}),
    sameMachinesOnDemandMicroUsd: cost.onDemand,
    onDemandCostMicroUsd: cost.onDemand,
    spotFloorCostMicroUsd: spotFloorCost(pools, jobs, useful),
    lowerBoundCostMicroUsd: lowerBound.cost(jobs, useful),
    costByTeamMicroUsd: costByTeam,
    checkpointBytes,
    wholeBillMicroUsd: cost.actual + checkpointBytes.bill.totalMicroUsd,
    ...spend,
    ...waits(jobs, endMs),
    jobTimes: jobTimes(jobs, endMs),
    ...(clouds.length > 1 ? { waitByCloud: waitsByCloud(jobs, endMs, setup.groups, env) } : {}),
    interruptions,
    requeues: jobs.reduce((s, j) => s + requeueCounts(j).requeues, 0),
    moves: jobs.reduce((s, j) => s + requeueCounts(j).moves, 0),
    checkpoints: agents.stats.checkpoints,
    reworkGpuHours: round2(reworkTotal),
    overheadGpuHours: round2(Math.max(0, (gpuMsUsed - [...useful.values()].reduce((a, b) => a + b, 0)) / 3_600_000 - reworkTotal)),
    ...deadlines(jobs, endMs),
    budgetEvents: budgetEvents.length,
    machinesLaunched: accounted.size,
    peakGpus,
    wallMs: Math.round(performance.now() - wallStart),
    faults: {
      profile: faults.name,
      apiErrors: injected.api.injected,
      outageErrors: injected.outage.injected,
      storeConflicts: injected.conflicts.injected,
      crashes: crash.crashes,
      duplicateEvents: injected.duplicates,
      deadAgents: deadAgents.size,
      agentsDown: agents.stats.agentsDown,
      agentRestarts: agents.stats.agentRestarts,
      adopted: agents.stats.adopted,
      watchdogStopped: agents.stats.watchdogStopped,
      checkpointFailures: agents.stats.checkpointFailures,
      uploadFailures: agents.stats.uploadFailures,
      uploadsGivenUp: agents.stats.uploadsGivenUp,
      checkpointsRefused: agents.stats.checkpointsRefused,
      savesCutByHook: agents.stats.savesCutByHook,
      staleResumes: agents.staleResumes.length,
      rankStartFailures: agents.stats.startFailures,
      replicasHung: agents.stats.replicasHung,
      agentCallsRefused: agents.stats.refusedCalls,
      asgTerminations: injected.asgTerminations,
      stormInterruptions: injected.storm,
      reconcileFailures: injected.reconcileFailures,
      wrongfulRequeues: wrongful.requeues,
      fencedAttempts: agents.stats.fencedAttempts,
      unansweredAgentCalls: agents.stats.unansweredCalls,
      redelivered: injected.redelivered,
      servicesReverted,
    },
    groupActivity: Object.fromEntries(
      [...env.cloud.activity]
        .sort(([a], [b]) => (a < b ? -1 : 1))
        .map(([id, a]) => [
          id,
          { launched: a.launched, scaledIn: a.scaledIn, rebought: a.rebought, scaledInWithWorkWaiting: a.scaledInWithWorkWaiting },
        ]),
    ),
    violations: violations.length,
    violationMessages: violations.slice(0, 10).map((v) => v.message),
    duplicated: seenTwice.size,
    maxLostWorkSec: Math.round(
      Math.max(0, ...agents.lost.filter((l) => !l.checkpointFailed && l.allowedSec !== undefined).map((l) => l.lostSec)),
    ),
    ...(services ? { services } : {}),
    ...(reservationMeter.active
      ? (() => {
          const reservations = reservationMeter.summary(endMs, env.cloud.allInstances());
          const used = reservations.reduce((a, r) => a + r.usedMicroUsd, 0);
          const paid = reservations.reduce((a, r) => a + r.paidMicroUsd, 0);
          return { reservations, costWithReservationsMicroUsd: cost.actual - used + paid };
        })()
      : {}),
  };
  return { summary, timeline, budgetEvents, budgets: teamBudgets, env, jobs, ...(frontDoor ? { frontDoor } : {}) };
}

/** A fault profile's gangs: a share of the multi-GPU jobs replayed as two nodes with half the GPUs each (deterministic per job and seed). */
function withGangs(workload: Workload, faults: FaultProfile, seed: number): Workload {
  if (!faults.gangShare) return workload;
  return {
    ...workload,
    jobs: workload.jobs.map((j) => {
      const g = j.spec.gpu;
      if (g.kind !== 'whole' || g.count < 2 || g.count % 2 !== 0 || (j.spec.nodes ?? 1) !== 1) return j;
      if (hash01(`${seed}/gang/${j.id}`) >= faults.gangShare!) return j;
      return { ...j, spec: { ...j.spec, gpu: { ...g, count: g.count / 2 }, nodes: 2 } };
    }),
  };
}

function buildMarket(spot: SpotSetup, startMs: number, horizonMs: number, random: SeededRandom): SpotMarket | undefined {
  switch (spot.kind) {
    case 'none':
      return undefined;
    case 'rates':
      return new RateSpotMarket((o) => spot.ratePerHour(o), random);
    case 'traces': {
      // One offset for every pool, so that pools that moved together in the trace still do.
      const probe = spot.traceOf({ zone: 'us-west-2a', instanceType: 'p3.2xlarge' });
      const offset = probe ? TraceSpotMarket.offsetFor(probe, horizonMs / 1000, random) : 0;
      return new TraceSpotMarket(spot.traceOf, startMs, offset);
    }
  }
}

async function sample(
  env: SimEnvironment,
  tMs: number,
  instances: Awaited<ReturnType<SimEnvironment['cloud']['listInstances']>>,
  runningCost: number,
): Promise<TimelineSample> {
  const machinesByGroup: Record<string, number> = {};
  let spotGpus = 0;
  let onDemandGpus = 0;
  for (const i of instances) {
    if (i.state === 'terminated') continue;
    machinesByGroup[i.groupId] = (machinesByGroup[i.groupId] ?? 0) + 1;
    const gpus = env.catalog.instanceTypes.get(i.instanceType)?.gpuCount ?? 0;
    if (i.capacityType === 'spot') spotGpus += gpus;
    else onDemandGpus += gpus;
  }
  const pending = await env.jobs.listByState(['pending']);
  const running = await env.jobs.listByState(['running', 'checkpointing', 'placed']);
  const spendByTeamMicroUsd: Record<string, number> = {};
  for (const row of await env.ledger.list())
    if (isBudgetPeriod(row.period)) spendByTeamMicroUsd[row.team] = (spendByTeamMicroUsd[row.team] ?? 0) + row.spentMicroUsd;
  return {
    tSec: Math.round(tMs / 1000),
    machinesByGroup,
    spotGpus,
    onDemandGpus,
    pendingJobs: pending.length,
    pendingGpus: pending.reduce((s, j) => s + (milliGpusUsed(j.spec.gpu) * j.spec.nodes) / 1000, 0),
    runningJobs: running.length,
    cumulativeCostMicroUsd: Math.round(runningCost),
    spendByTeamMicroUsd,
  };
}

async function noteBudgetEvents(
  env: SimEnvironment,
  tMs: number,
  last: Map<string, { state: BudgetState; crossed: number }>,
  events: BudgetEvent[],
): Promise<void> {
  for (const set of await env.budgets.readTeamTags()) {
    const team = teamFromTags(set.team, set.tags);
    if (!team.budget) continue;
    const spent = (await env.ledger.read(team.id, periodKey(team.budget.period, env.clock.nowMs()))).spentMicroUsd;
    const status = budgetStatus(team, spent);
    const crossed = status.crossedAlertPct[status.crossedAlertPct.length - 1] ?? 0;
    const prev = last.get(team.id) ?? { state: 'ok' as BudgetState, crossed: 0 };
    if (crossed > prev.crossed || status.state !== prev.state) {
      events.push({
        tSec: Math.round(tMs / 1000),
        team: team.id,
        state: status.state,
        crossedPct: crossed || undefined,
        message: status.message,
      });
      last.set(team.id, { state: status.state, crossed });
    }
  }
}

/** Seconds of GPU work each job really got done (milli-GPU × ms): completed work, work saved in a checkpoint, or work in progress at the end. */
function usefulWork(
  jobs: readonly Job[],
  agents: SimAgents,
  workOf: (job: Job) => WorkloadJob | undefined,
  endMs: number,
): Map<string, number> {
  const out = new Map<string, number>();
  for (const j of jobs) {
    if (j.state === 'rejected') continue;
    const work = workOf(j)?.workSec ?? j.spec.expectedRuntimeSec ?? 0;
    const doneSec =
      j.state === 'succeeded' || j.state === 'failed'
        ? work
        : j.state === 'running' || j.state === 'checkpointing'
          ? Math.min(work, agents.progressSec(j, endMs))
          : (j.checkpoint?.progressSec ?? 0);
    // seconds × thousandths of a GPU = GPU-milliseconds
    out.set(j.id, doneSec * milliGpusUsed(j.spec.gpu) * j.spec.nodes);
  }
  return out;
}

/** Waits of the jobs each cloud's groups could run (by GPU model and count per machine). */
function waitsByCloud(
  jobs: readonly Job[],
  endMs: number,
  groups: readonly SimGroupConfig[],
  env: SimEnvironment,
): Record<string, { jobs: number; p50WaitSec: number; p95WaitSec: number }> {
  const out: Record<string, { jobs: number; p50WaitSec: number; p95WaitSec: number }> = {};
  for (const cloud of [...new Set(groups.map((g) => g.cloud ?? 'aws'))].sort()) {
    const types = groups
      .filter((g) => (g.cloud ?? 'aws') === cloud)
      .flatMap((g) => g.instanceTypes.map((t) => env.catalog.instanceTypes.get(t)))
      .filter((t) => t !== undefined);
    const mine = jobs.filter((j) => {
      const g = j.spec.gpu;
      const need = g.kind === 'whole' ? g.count : 1;
      const models = g.kind === 'mig' ? undefined : g.models;
      return types.some((t) => t.gpuCount >= need && (!models || models.some((m) => gpuModelMatches(m, t.gpuModel))));
    });
    out[cloud] = { jobs: mine.filter((j) => j.state !== 'rejected').length, ...waits(mine, endMs) };
  }
  return out;
}

function waits(jobs: readonly Job[], endMs: number): { p50WaitSec: number; p95WaitSec: number } {
  const first = jobTimes(jobs, endMs).firstWaitSec;
  return { p50WaitSec: first.p50, p95WaitSec: first.p95 };
}

function deadlines(jobs: readonly Job[], endMs: number): { deadlineJobs: number; deadlineMisses: number } {
  let n = 0;
  let misses = 0;
  for (const j of jobs) {
    if (!j.spec.deadline || j.state === 'rejected') continue;
    n++;
    const due = Date.parse(j.spec.deadline);
    if (j.state === 'succeeded' ? (j.endedAtMs ?? endMs) > due : due <= endMs) misses++;
  }
  return { deadlineJobs: n, deadlineMisses: misses };
}

/**
 * The ledger against the truth: each team's exact spend up to its own cursor, from the machines'
 * true lives and every holding ever written (not only what the reconciles saw).
 */
function spendAccuracy(
  ledger: Readonly<Record<string, MicroUsd>>,
  countedUntil: ReadonlyMap<string, number>,
  lives: readonly { id: string; priceMicroUsdPerHour: number; launchedAtMs: number; endedAtMs: number; gpus: number }[],
  closed: readonly (Holding & { nodeId: string })[],
  jobs: readonly Job[],
  startMs: number,
): Pick<SimulationSummary, 'exactCostByTeamMicroUsd' | 'spendErrorPct' | 'teamSpendErrorPct'> {
  const byNode = new Map<string, Holding[]>();
  const hold = (nodeId: string, h: Holding) => {
    const list = byNode.get(nodeId);
    if (list) list.push(h);
    else byNode.set(nodeId, [h]);
  };
  for (const h of closed) hold(h.nodeId, { team: h.team, milliGpu: h.milliGpu, fromMs: h.fromMs, toMs: h.toMs! });
  for (const j of jobs) {
    const fromMs = j.placedAtMs ?? j.startedAtMs;
    if (ACTIVE_STATES.includes(j.state) && j.placement && fromMs !== undefined)
      for (const a of j.placement.nodes) hold(a.nodeId, { team: j.team, milliGpu: assignmentMilliGpu(a), fromMs });
  }
  const machines: MachineMeter[] = lives.map((l) => ({
    id: l.id,
    priceMicroUsdPerHour: l.priceMicroUsdPerHour,
    launchedAtMs: l.launchedAtMs,
    endedAtMs: l.endedAtMs,
    totalMilliGpu: Math.max(1, l.gpus) * 1000,
    holdings: byNode.get(l.id) ?? [],
  }));
  const exact: Record<string, MicroUsd> = {};
  const untils = [...new Set(countedUntil.values())];
  const costs = new Map(untils.map((u) => [u, exactCostByTeam(machines, startMs - 86_400_000, u)] as const));
  const teams = new Set([...Object.keys(ledger), ...[...costs.values()].flatMap((c) => [...c.keys()])]);
  for (const t of [...teams].sort()) {
    const until = countedUntil.get(t);
    exact[t] = until === undefined ? 0 : (costs.get(until)!.get(t) ?? 0);
  }
  const total = Object.values(exact).reduce((a, b) => a + b, 0);
  const counted = Object.values(ledger).reduce((a, b) => a + b, 0);
  const misplaced = [...teams].reduce((a, t) => a + Math.abs((ledger[t] ?? 0) - (exact[t] ?? 0)), 0);
  return {
    exactCostByTeamMicroUsd: exact,
    spendErrorPct: total > 0 ? round4((100 * (counted - total)) / total) : 0,
    teamSpendErrorPct: total > 0 ? round4((100 * misplaced) / total) : 0,
  };
}

/** Jobs submitted that are not in the store in exactly one known state. */
function lostJobs(submitted: readonly WorkloadJob[], jobs: readonly Job[]): number {
  const stored = new Map(jobs.map((j) => [j.id, j]));
  const known = new Set<string>([...TERMINAL_STATES, 'pending', 'placed', 'running', 'checkpointing']);
  return submitted.filter((w) => {
    const job = stored.get(jobIdFor(w.team, w.id));
    return !job || !known.has(job.state);
  }).length;
}

function round4(x: number): number {
  return Math.round(x * 10_000) / 10_000;
}

function round2(x: number): number {
  return Math.round(x * 100) / 100;
}
