import type { SecretRef } from './secrets.ts';
import type { Cloud, InstanceType, InstanceTypeCatalog, Offering, PriceQuote } from './catalog.ts';
import type { Draining, Instance, MachineMeterFacts, NodeGroup, NodeRecord, SilentZone } from './fleet.ts';
import type { CheckpointRef, Job, JobState, RetainedSaves, SaveMeter } from './job.ts';
import type { ByteCarry, ByteEvent, ByteLog, Site } from './bytes.ts';
import type { MicroUsd } from './money.ts';
import type { ActionFailure, Plan, PlanAction } from './plan.ts';
import type { GpuRequest } from './gpu.ts';
import type { Reservation } from './reservation.ts';
import type { RightsizeRun } from './rightsizing.ts';
import type { BudgetState, Team } from './team.ts';
import type { ServiceMetric } from './serving/autoscale.ts';
import type { ServiceRecord } from './serving/service.ts';
import type { MachineHistory } from './risk.ts';

/**
 * The ports: what gpu-fleet needs from the outside world. core/ calls these and nothing else;
 * cloud/aws, cloud/gcp and cloud/sim implement them. test/contract/ holds one suite per port
 * that every implementation must pass.
 *
 * Conventions for all ports:
 * - Methods that change the world are idempotent: calling twice with the same arguments has
 *   the effect of calling once, and the second call does not fail because of the first.
 * - "Not found" is a value (undefined, `alreadyGone`) where the caller expects it, and a
 *   `CloudError('not-found')` only where the thing named must exist (a node group).
 * - Failures of the outside world are `CloudError`s with a code from the port vocabulary.
 */

/** The time. The only clock core/ ever reads. */
export interface Clock {
  /** Milliseconds since the Unix epoch. Never goes backwards within one process. */
  nowMs(): number;
}

/** A failed attempt to launch capacity, as the cloud reports it. */
export interface LaunchFailure {
  readonly groupId: string;
  /** The offering that failed, when the cloud says which (instance type and zone). */
  readonly offeringId?: string;
  readonly atMs: number;
  /** Cloud's code, e.g. InsufficientInstanceCapacity, ZONE_RESOURCE_POOL_EXHAUSTED. */
  readonly code: string;
  readonly message: string;
}

/** A team's budget as one reconcile enforced it: the values in force, what was spent, what running work will still cost. */
export interface TeamInForce extends Team {
  readonly spentMicroUsd: MicroUsd;
  readonly committedMicroUsd: MicroUsd;
  readonly state: BudgetState;
}

/** One group's machines, or why they could not be listed. */
export type GroupListing =
  { readonly groupId: string; readonly instances: Instance[] } | { readonly groupId: string; readonly error: unknown };

/** What was left out of a reconcile because its calls failed: a cloud's provider (one region or project) or one group. */
export interface DegradedScope {
  readonly cloud: string;
  /** The provider's scope (`us-east-1`, `projects my-proj`) or `group <id>`; absent for a provider without one. */
  readonly scope?: string;
  readonly error: string;
  readonly code?: string;
}

/** How a degraded scope is named in reasons, logs and `status`: "gcp", "aws us-east-1", "gcp group p/us-central1-a/a2". */
export function degradedName(d: Pick<DegradedScope, 'cloud' | 'scope'>): string {
  return d.scope ? `${d.cloud} ${d.scope}` : d.cloud;
}

/** The machines: node groups and their instances. */
export interface NodeGroupProvider {
  readonly cloud: Cloud;
  /** Where this provider acts within its cloud (an AWS region, GCP projects), to name it when it fails. */
  readonly scope?: string;
  /** Every group gpu-fleet manages (found by its managed tag or label); [] when there are none. */
  listGroups(): Promise<NodeGroup[]>;
  /** Instances of the managed groups in every state the cloud still reports, terminated included while it does. */
  listInstances(): Promise<Instance[]>;
  /**
   * The same, group by group (optional): a group whose listing fails comes back with its error,
   * and only that group is left out of the reconcile, not the provider.
   */
  listInstancesByGroup?(groups: readonly NodeGroup[]): Promise<GroupListing[]>;
  /**
   * Sets a group's desired size. Idempotent. Rejects with `invalid-request` when the size is
   * outside [min, max] and with `not-found` when the group does not exist.
   */
  setDesiredCapacity(groupId: string, desired: number): Promise<void>;
  /**
   * Terminates one instance and lowers the group's desired size by one, so the group does not
   * replace it. Idempotent: an instance that is already gone (or terminating) resolves with
   * `alreadyGone: true` and changes nothing else.
   */
  terminateInstance(groupId: string, instanceId: string): Promise<{ alreadyGone: boolean }>;
  /**
   * Protects instances that run work from the group's own scale-in (or lifts the protection).
   * Idempotent; instances that no longer exist are skipped.
   */
  setScaleInProtection(groupId: string, instanceIds: readonly string[], protect: boolean): Promise<void>;
  /** One instance of a managed group, or undefined when no managed group holds it (or it is long gone). */
  describeInstance(instanceId: string): Promise<Instance | undefined>;
  /** Launch failures reported since `sinceMs`, oldest first. */
  launchFailures(sinceMs: number): Promise<LaunchFailure[]>;
  /**
   * What the last listing found wrong with the groups (a limit tag that is not a number, a
   * group without instance types), one sentence each; absent or [] when nothing. Dry runs and
   * status print it.
   */
  readonly problems?: readonly string[];
  /**
   * Lets a terminating instance held by a lifecycle hook go. Idempotent: an expired or
   * already completed action resolves.
   */
  completeLifecycleAction(input: { groupId: string; instanceId: string; hookName: string; token?: string }): Promise<void>;
  /**
   * Keeps a terminating instance in its lifecycle hook for another heartbeat timeout (AWS
   * RecordLifecycleActionHeartbeat), up to the hook's global timeout. Idempotent: an action no
   * longer waiting resolves. Absent for clouds without terminate hooks.
   */
  recordLifecycleHeartbeat?(input: { groupId: string; instanceId: string; hookName: string; token?: string }): Promise<void>;
}

/** The machine types a cloud offers, and their GPU facts. */
export interface CatalogSource {
  /** Facts for the named instance types; names the cloud does not know are left out of the map. */
  instanceTypes(names: readonly string[]): Promise<Map<string, InstanceType>>;
}

/** One line an attempt wrote to its output (stdout and stderr, as they reach the attempt's log). */
export interface LogLine {
  /** When the agent read it (the output carries no times of its own). */
  readonly atMs: number;
  /** Its place in the attempt's output on that rank, from 0: a line shipped twice keeps its number. */
  readonly seq: number;
  readonly line: string;
}

/** Lines of one attempt on one rank, with what a log search wants beside them. */
export interface JobLogBatch {
  readonly jobId: string;
  readonly attempt: number;
  readonly rank: number;
  readonly team: string;
  readonly labels: Readonly<Record<string, string>>;
  readonly lines: readonly LogLine[];
}

/** Where the agents send what their attempts write, as they write it (CloudWatch Logs; the simulator's memory). */
export interface JobLogSink {
  append(batch: JobLogBatch): Promise<void>;
}

/** What people read: a job's lines, attempt by attempt in order, each attempt's ranks in order of their lines. */
export interface JobLogSource {
  read(
    jobId: string,
    options?: { readonly attempt?: number; readonly sinceMs?: number },
  ): Promise<(LogLine & { readonly attempt: number; readonly rank: number })[]>;
}

/** Capacity reservations in a cloud (AWS Capacity Reservations and Capacity Blocks; GCP reservations). */
export interface ReservationSource {
  readonly cloud: Cloud;
  /** Where it reads, to name it when it fails (a region). */
  readonly scope?: string;
  /**
   * The reservations gpu-fleet may use: those its selector finds (the `gpu-fleet:managed=true` tag,
   * or the ids and tags the config names) and those named here (the ones node groups launch into).
   */
  listReservations(named: readonly string[]): Promise<Reservation[]>;
}

/** Prices of offerings. */
export interface PriceSource {
  /**
   * The current price of each offering, by offering id. An offering with no known price is
   * left out (the planner then never buys it). On-demand prices come from the shipped
   * catalogue; spot prices from the cloud where it publishes them.
   */
  prices(offerings: readonly Offering[]): Promise<Map<string, PriceQuote>>;
}

/** Per-job outcome of a state-store write that may lose a race. */
export type WriteResult = { readonly ok: true; readonly job: Job } | { readonly ok: false; readonly current: Job | undefined };

/** Jobs, by id; by state and team. */
export interface JobStore {
  /**
   * Stores a new job unless one with the same id exists. Idempotent by id: the second call
   * returns `created: false` and the stored job, unchanged.
   */
  create(job: Job): Promise<{ created: boolean; job: Job }>;
  /** The job, or undefined when there is none with that id. */
  get(id: string): Promise<Job | undefined>;
  /**
   * Replaces the stored job with `next` only if the stored version is `expectedVersion`
   * (a conditional write). On a lost race returns the current job so the caller can re-decide.
   * `next.version` must be `expectedVersion + 1`.
   */
  update(next: Job, expectedVersion: number): Promise<WriteResult>;
  /** Jobs in any of the given states (optionally of one team), in submission order. */
  listByState(states: readonly JobState[], team?: string): Promise<Job[]>;
  /**
   * Finished jobs (succeeded, failed, cancelled) that held machines and ended in [sinceMs,
   * untilMs]: what spend accrual needs of them (their last attempts' holdings).
   */
  listEndedSince(sinceMs: number, untilMs: number): Promise<Job[]>;
}

/** Service records (core/serving/service.ts): one per service, written with the same conditional writes as jobs. */
export interface ServiceStore {
  /** Stores a new service unless one with the same id exists (then returns it, unchanged). */
  create(record: ServiceRecord): Promise<{ created: boolean; record: ServiceRecord }>;
  get(id: string): Promise<ServiceRecord | undefined>;
  /** Replaces the record only if the stored version is `expectedVersion`; `next.version` must be `expectedVersion + 1`. */
  update(
    next: ServiceRecord,
    expectedVersion: number,
  ): Promise<{ ok: true; record: ServiceRecord } | { ok: false; current: ServiceRecord | undefined }>;
  list(): Promise<ServiceRecord[]>;
}

/**
 * A service's load now, as its replicas and its front door report it: totals over the service
 * for requests per second and waiting or running requests; averages over its ready replicas
 * for GPU use and memory (%). A metric not reported is left out.
 */
export interface ServiceLoadSource {
  read(service: ServiceRecord, replicas: readonly Job[], nowMs: number): Promise<Partial<Record<ServiceMetric, number>>>;
}

/** A replica as its service's front door addresses it: the machine's private address and the service's port. */
export interface FrontDoorTarget {
  readonly ip: string;
  readonly port: number;
}

/** A target's state at the front door (Elastic Load Balancing's target health states). */
export type FrontDoorTargetState = 'initial' | 'healthy' | 'unhealthy' | 'draining' | 'unused' | 'unavailable';

/**
 * The cloud's own load balancer in front of each service (an Application Load Balancer target
 * group per service, IP targets). A replica is registered once ready and deregistered before its
 * machine goes; the target group drains its connections for its deregistration delay.
 */
export interface FrontDoor {
  /** Seconds a deregistered target drains (the target groups' deregistration delay). */
  readonly deregistrationDelaySec: number;
  /** Whether this front door has a target group for the service (services without one are not fronted). */
  fronts(serviceId: string): boolean;
  /** Adds targets. Idempotent: a target already registered stays as it is. */
  register(serviceId: string, targets: readonly FrontDoorTarget[]): Promise<void>;
  /** Removes targets (they drain first). Idempotent: a target not registered is no error. */
  deregister(serviceId: string, targets: readonly FrontDoorTarget[]): Promise<void>;
  /** The targets the service's group holds, with their state (a draining one included until it is gone). */
  targets(
    serviceId: string,
  ): Promise<{ readonly target: FrontDoorTarget; readonly state: FrontDoorTargetState; readonly reason?: string }[]>;
}

/** What node agents report, and the node's draining mark. */
export interface NodeStore {
  /** Records a node's agent. Idempotent: registering again refreshes GPUs and heartbeat. */
  register(record: NodeRecord): Promise<void>;
  /** Records a heartbeat. A heartbeat for an unknown node is ignored (returns false). */
  heartbeat(instanceId: string, atMs: number, health?: { healthy: boolean; problem?: string }): Promise<boolean>;
  /** The node's record, or undefined when its agent never registered (or it was removed). */
  get(instanceId: string): Promise<NodeRecord | undefined>;
  list(): Promise<NodeRecord[]>;
  /**
   * Marks a node draining, merged into any mark it has by mergeDraining (core/fleet.ts): an earlier
   * deadline or a lifecycle hook updates the mark, nothing loosens it. Idempotent and
   * order-independent. Marking an unknown node creates a minimal record so the mark is not lost.
   */
  markDraining(instanceId: string, drain: Draining & { groupId?: string }): Promise<NodeRecord>;
  /** Sets or clears the time since which the node has had no work. */
  setIdleSince(instanceId: string, idleSinceMs: number | undefined): Promise<void>;
  /** Sets the images the node's agent pulls ahead (an empty list clears them). Returns false, writing nothing, when the node has no record. */
  setPrefetch(instanceId: string, images: readonly string[]): Promise<boolean>;
  /** Records the images the node's agent holds (it reports them when they change). Returns false, writing nothing, when the node has no record. */
  noteImages(instanceId: string, images: readonly string[]): Promise<boolean>;
  /** Forgets a node that is gone, its work list with it. Idempotent. */
  remove(instanceId: string): Promise<void>;
  /**
   * Stamps a registered node's billing facts, once (a node that has them keeps them). Returns
   * false, writing nothing, when the node has no record: a machine whose agent never registered
   * is counted only while its cloud lists it.
   */
  noteMeter(instanceId: string, meter: MachineMeterFacts): Promise<boolean>;
  /**
   * Records when the machine stopped or terminated; the earliest report wins, whatever the order
   * reports come in. A node without a record is left alone (mark it draining first, which makes one).
   */
  noteEnded(instanceId: string, atMs: number): Promise<void>;
  /**
   * Adds attempt `attempt` of a job to a node's work list, before the job is placed there (so an
   * agent can never miss a placement). A newer attempt replaces an older pointer; an older one
   * changes nothing. Returns false, writing nothing, when the node has no record.
   */
  assign(instanceId: string, jobId: string, attempt: number): Promise<boolean>;
  /** Drops a job from a node's work list if its pointer is for `attempt` or older. Idempotent. */
  unassign(instanceId: string, jobId: string, attempt: number): Promise<void>;
}

export interface QueueDepth {
  readonly visible: number;
  readonly inFlight: number;
  readonly delayed: number;
}

/** The team job queues. */
export interface JobQueue {
  /**
   * Sends a job spec to a team's queue. `token` is the submitter's idempotency token: sending
   * the same token twice makes one job. Rejects with `not-found` for a team without a queue.
   */
  send(team: string, body: string, token: string): Promise<{ messageId: string }>;
  /** Messages waiting in the team's queue. Rejects with `not-found` for a team without a queue. */
  depth(team: string): Promise<QueueDepth>;
  /** The teams that have queues. */
  teams(): Promise<string[]>;
}

export interface GpuSample {
  readonly instanceId: string;
  readonly gpuIndex: number;
  /** Mean utilisation over the window, 0–100. */
  readonly utilizationPct: number;
  readonly memoryUsedMiB: number;
  readonly atMs: number;
}

/** One GPU's readings as a node agent publishes them. */
export interface GpuMetricSample {
  readonly instanceId: string;
  readonly groupId: string;
  readonly gpuIndex: number;
  readonly utilizationPct?: number;
  readonly memoryUsedMiB?: number;
  readonly powerDrawW?: number;
  readonly temperatureC?: number;
  readonly uncorrectableEccErrors?: number;
  readonly atMs: number;
}

/** Where node agents publish GPU metrics (CloudWatch on AWS); what GpuMetricsSource reads back. */
export interface GpuMetricSink {
  /** Publishes samples. Repeating a sample is harmless (a metric store keeps both points). */
  put(samples: readonly GpuMetricSample[]): Promise<void>;
}

/** One replica's own load figure (waiting or running requests), as the agent read it from the replica's metrics endpoint. */
export interface ServiceMetricSample {
  readonly serviceId: string;
  readonly jobId: string;
  /** The replica's attempt that measured it (the agent API publishes a machine's figures for that attempt only). */
  readonly attempt?: number;
  readonly metric: ServiceMetric;
  readonly value: number;
  readonly atMs: number;
}

/** Where the agents publish their replicas' load figures, one sample per replica and minute. */
export interface ServiceMetricSink {
  put(samples: readonly ServiceMetricSample[]): Promise<void>;
}

/** GPU utilisation of nodes. */
export interface GpuMetricsSource {
  /** The newest sample per GPU of each instance within the last `windowSec`; instances without data are absent. */
  gpuSamples(instanceIds: readonly string[], windowSec: number): Promise<GpuSample[]>;
}

/** A team's budget tags as found on its resources (its queue first of all). */
export interface TeamTagSet {
  readonly team: string;
  readonly resource: string;
  readonly tags: Readonly<Record<string, string>>;
  /**
   * Set when the resource is not the team's own queue, with why: its tags are reported as a
   * problem of the team and change nothing (only the team's queue sets its budget).
   */
  readonly notTheTeamQueue?: string;
}

/** The last valid budget of each team, kept so that a broken tag never lifts (or loses) a budget. */
export interface BudgetMemory {
  /** Every team's last valid budget settings. */
  load(): Promise<Map<string, Team>>;
  /** Remembers a team's settings as the last valid ones. Idempotent. */
  save(team: Team): Promise<void>;
}

/** Reads a secret a job names by reference (core/secrets.ts): SSM parameters and Secrets Manager secrets on AWS. */
export interface SecretReader {
  read(ref: SecretRef): Promise<string>;
}

/** Budget tags, read live (no redeploy to change a budget). */
export interface BudgetTagSource {
  /** Every resource carrying `gpu-fleet:team`, with all its `gpu-fleet:*` tags. */
  readTeamTags(): Promise<TeamTagSet[]>;
}

/** Where checkpoints live, and which one is newest. */
export interface CheckpointStore {
  /** Where attempt `attempt` of a job writes its checkpoints. Pure: same input, same answer. */
  locationFor(jobId: string, attempt: number): string;
  /**
   * Records that `rank`'s part of a checkpoint is saved (rank 0 for a single node). The
   * checkpoint is complete once every rank of `ref.ranks` (1 when absent) has recorded its part
   * under the same location; only complete checkpoints are ever `latest`. Resolves true when the
   * checkpoint is complete (now, or already). Idempotent by (job, location, rank). `meter`, set by
   * the control plane (never a machine): whom the save's bytes (`ref.size`) are charged to, and
   * where the machine is; a store that keeps a byte log records the save in it.
   */
  markComplete(ref: CheckpointRef, rank?: number, meter?: SaveMeter): Promise<boolean>;
  /** The newest complete checkpoint of the job, over all attempts; undefined when there is none. */
  latest(jobId: string): Promise<CheckpointRef | undefined>;
}

/**
 * What the control plane's checkpoint index remembers for the sweep (core/job.ts
 * `afterNewestSave`): the newest complete save, the one it replaced and when, and the locations of
 * saves replaced before those. The stores the control plane keeps (DynamoDB, memory) offer it; an
 * agent's view of the index does not.
 */
export interface CheckpointHistory {
  /** The job's retained saves; `NO_SAVES` for a job with none. */
  retained(jobId: string): Promise<RetainedSaves>;
  /**
   * Drops `locations` from the job's superseded list once their objects are deleted. Idempotent; a
   * location not listed is ignored. `read`: what the caller read with `retained`, tried first (a
   * store may then skip a read; a newer save since is never lost).
   */
  forgetSuperseded(jobId: string, locations: readonly string[], read?: RetainedSaves): Promise<void>;
  /**
   * Notes that a save (its folder, or one part of it) was read back onto a machine to resume from,
   * once per `read.key` (the attempt and machine): its bytes out of the store are billed then
   * (core/bytes.ts `logRead`). A save with no live record in the byte log is not noted. Idempotent.
   */
  noteRead(jobId: string, location: string, read: { readonly key: string; readonly atMs: number; readonly machine?: Site }): Promise<void>;
  /**
   * Every job's byte log with a save held at or after `sinceMs` (or deleted after it): what `gpu-fleet
   * report` charges to each job. It reads the whole index: for a person's report, not each minute.
   */
  byteLogs(sinceMs: number): Promise<ByteLog[]>;
  /**
   * The byte events not forgotten yet (core/bytes.ts `ByteEvent`): each change to a byte log puts its
   * events beside it (again, when a repeat of the call comes within `BYTE_EVENT_REPLAY_MS`), and
   * spend accrual reads them each minute.
   */
  byteEvents(): Promise<ByteEvent[]>;
  /** Forgets events once counted. Idempotent; an unknown id is ignored. */
  forgetByteEvents(ids: readonly string[]): Promise<void>;
  /** Every team an event was ever put for: accrual counts what each still holds, events or not. */
  byteTeams(): Promise<string[]>;
}

/**
 * Deletes the checkpoint objects no attempt will resume from, by the rule in core/job.ts
 * (checkpointObjectExpired): a job keeps its resume points and, for an hour, the save before its
 * newest; older saves go at the next sweep. It never takes the newest complete checkpoint of a
 * job that has not ended. Each call does a bounded share of the
 * store and goes on where the last one stopped; deleting is idempotent.
 */
export interface CheckpointSweep {
  sweep(): Promise<{ readonly jobs: number; readonly deleted: number; readonly wrapped: boolean }>;
}

/** One reconcile's record: what it saw, did, and why. `gpu-fleet explain` reads these. */
export interface DecisionRecord {
  readonly id: string;
  readonly atMs: number;
  readonly dryRun: boolean;
  readonly inputs: {
    readonly pendingJobs: number;
    readonly activeJobs: number;
    readonly nodes: number;
    readonly groups: readonly { readonly id: string; readonly desired: number; readonly min: number; readonly max: number }[];
  };
  readonly plan: Plan;
  readonly applied: number;
  /** Actions that could not be applied, each with its code and resource. */
  readonly errors: readonly ActionFailure[];
  readonly planMs: number;
  /** The budgets in force for this plan, as reconcile read them (what `explain` quotes for a held job). */
  readonly teams?: readonly TeamInForce[];
  /** Providers (or groups) left out of this reconcile because their calls failed: since when (carried from the decision before), and the last error. */
  readonly degraded?: readonly (DegradedScope & { readonly sinceMs: number })[];
  /** Zones whose machines fell silent together while running: a control-plane fault; their work was not requeued, nor they let go. */
  readonly controlPlaneSilence?: readonly SilentZone[];
  /** Each service's decision in this reconcile: its target, its ready replicas, and why. */
  readonly services?: readonly {
    readonly service: string;
    readonly target: number;
    readonly ready: number;
    readonly reason: string;
    /** With an objective and a request rate read: the requests per second and the share the ready replicas serve within it. */
    readonly objectiveNow?: { readonly requestsPerSec: number; readonly withinPct: number };
    /** Replicas given up for not answering their readiness path past their spec's limit, and why. */
    readonly replaced?: readonly { readonly jobId: string; readonly why: string }[];
  }[];
  /** Jobs this plan places in a shape right-sizing chose at intake (`gpu.rightsize: "auto"`): what they asked for, what they run in, and why. */
  readonly rightsized?: readonly { readonly jobId: string; readonly from: GpuRequest; readonly to: GpuRequest; readonly why: string }[];
}

export interface DecisionLog {
  /** Stores a record. Idempotent by id. */
  record(decision: DecisionRecord): Promise<void>;
  get(id: string): Promise<DecisionRecord | undefined>;
  /** The newest records first, at most `limit`. */
  recent(limit: number): Promise<DecisionRecord[]>;
}

/** The team's spend in one budget period, and how far in time it has been counted. */
export interface SpendCursor {
  readonly spentMicroUsd: MicroUsd;
  /** Spend is counted up to this time; undefined when nothing was counted yet in the period. */
  readonly accruedUntilMs: number | undefined;
  /** The team's checkpoint bytes as the last count left them (a budget row's), written with the cursor. */
  readonly carry?: ByteCarry;
}

export interface SpendAccrual {
  readonly team: string;
  readonly period: string;
  /** The window counted: [fromMs, toMs). `fromMs` must be the cursor's `accruedUntilMs` (or any time when unset). */
  readonly fromMs: number;
  readonly toMs: number;
  readonly amountMicroUsd: MicroUsd;
  /** Stored with the cursor in the same write, when given (and only if the window is counted). */
  readonly carry?: ByteCarry;
}

/**
 * Spend per team and budget period. Each (team, period) has a cursor; an accrual moves it
 * forward with one conditional write, so a window is counted exactly once even when two
 * writers race or a crashed run is repeated.
 */
export interface SpendLedger {
  read(team: string, period: string): Promise<SpendCursor>;
  /**
   * Adds the amount and moves the cursor to `toMs` if the cursor is at `fromMs` (or unset).
   * Returns true when counted now or already counted for exactly this window (a repeat);
   * false when the cursor is elsewhere (another writer counted): re-read and recompute.
   */
  accrue(entry: SpendAccrual): Promise<boolean>;
  /** Every (team, period) cursor, for reports. */
  list(): Promise<(SpendCursor & { team: string; period: string })[]>;
}

export interface PoolStats {
  readonly interruptions: number;
  readonly exposureHours: number;
  readonly lastInterruptedAtMs?: number;
}

export interface JournaledPlan {
  readonly planId: string;
  readonly atMs: number;
  readonly actions: readonly PlanAction[];
  /** Indexes of the actions already applied. */
  readonly done: ReadonlySet<number>;
  readonly finished: boolean;
}

/**
 * The plan journal makes apply resumable: a plan is written before any action is taken, each
 * action is recorded once applied, and a reconciler that finds an unfinished plan (its
 * predecessor crashed half-way) applies the rest before planning anew.
 */
export interface PlanJournal {
  /** Stores a plan before any of it is applied. Idempotent by plan id (a second start changes nothing). */
  start(planId: string, atMs: number, actions: readonly PlanAction[]): Promise<void>;
  /** Records that action `index` of the plan was applied. Idempotent. */
  done(planId: string, index: number): Promise<void>;
  /** Marks the plan finished. Idempotent. */
  finish(planId: string): Promise<void>;
  /** The newest plan that was started but not finished, or undefined. */
  unfinished(): Promise<JournaledPlan | undefined>;
}

/** What gpu-fleet has seen of each spot pool: how long its machines lived, and how often they were taken. */
export interface PoolHistory {
  /**
   * Notes that an instance of a pool was alive at `atMs`. A pool's exposure is the sum, over its
   * instances, of the span between the first and the last note. Idempotent; order does not matter.
   */
  noteAlive(notes: readonly { instanceId: string; offeringId: string; atMs: number }[]): Promise<void>;
  /** Counts the interruption of an instance of a pool. Idempotent by instance id. */
  noteInterrupted(instanceId: string, offeringId: string, atMs: number): Promise<void>;
  /** Interruptions and instance-hours per pool (by offering id) of instances seen since `sinceMs`, and when the pool was last interrupted. */
  stats(sinceMs: number): Promise<Map<string, PoolStats>>;
  /** Each instance noted or interrupted since `sinceMs`: its pool, first and last note, and when it was taken back (the spot model's sightings). */
  machines(sinceMs: number): Promise<MachineHistory[]>;
}

/** A mutual-exclusion lease with expiry, so one reconciler acts at a time. */
export interface LeaseStore {
  /**
   * Takes the lease for `holder` until `nowMs + ttlMs` if it is free, expired, or already held
   * by `holder` (renewal). Returns false when someone else holds it.
   */
  acquire(name: string, holder: string, nowMs: number, ttlMs: number): Promise<boolean>;
  /** Gives the lease up if `holder` holds it; otherwise does nothing. */
  release(name: string, holder: string): Promise<void>;
}

/** Where a message that cannot even be attributed to a team goes, with why (a dead-letter queue). */
export interface DeadLetter {
  send(input: { body: string; reason: string; sourceQueueArn: string; messageId: string }): Promise<void>;
}

/** Asks for a reconcile now (on AWS an asynchronous invocation of the reconcile function), so replacement capacity is chosen at once. */
export interface ReconcileTrigger {
  reconcileSoon(reason: string): Promise<void>;
}

/**
 * The node groups a job could ever run on, for intake's checks (no group can hold it; a right-sized
 * shape some group can run); undefined when they cannot all be known here (then nothing is decided
 * from them: a job is never called unschedulable on half the fleet).
 */
export type FleetShape = () => Promise<{ readonly groups: readonly NodeGroup[]; readonly types: InstanceTypeCatalog } | undefined>;

/**
 * Right-sizing's memory of each job family's finished, measured runs (core/rightsizing.ts):
 * reconcile adds the jobs that ended, intake reads a family's runs for a spec with `gpu.rightsize`.
 */
export interface FamilyRunStore {
  /** The family's kept runs, oldest first (none: an empty list). */
  runs(family: string): Promise<RightsizeRun[]>;
  /**
   * Adds runs to their families, keeping each family's newest FAMILY_RUNS_KEPT. Idempotent: a run
   * already kept (by job id) changes nothing.
   */
  note(runs: readonly { readonly family: string; readonly run: RightsizeRun }[]): Promise<void>;
}
