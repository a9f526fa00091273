import { GpuFleetError } from '../errors.ts';
import { gpuUseProblem } from '../gpu-use.ts';
import {
  AGENT_FAILURE_CODES,
  AGENT_FAILURE_MESSAGE_MAX,
  checkpointFolder,
  finishCancel,
  progressCeilingSec,
  transition,
  type CheckpointRef,
  type Job,
  type JobEvent,
  type SaveMeter,
} from '../job.ts';
import { saveSizeProblem, siteOfOffering } from '../bytes.ts';
import type { CheckpointHistory, CheckpointStore, Clock, FrontDoor, JobStore, NodeStore, ServiceStore } from '../ports.ts';
import { SERVICE_LABEL } from '../serving/service.ts';
import type { InstanceTypeCatalog } from '../catalog.ts';
import type { Instance, NodeRecord } from '../fleet.ts';
import { imagesToPrefetch } from '../serving/prefetch.ts';

/**
 * What a node's agent may read and write, judged from the stored records. The agent API
 * (functions/agent-api.ts) asks these before every read it answers and every write it makes for
 * an agent; the agent itself never holds a write permission on a table.
 *
 * The rules, for the machine `nodeId` (the instance id its credentials name):
 * - its own node record only (register, heartbeat, unassign, drain mark, the images it holds);
 * - a job, to read, while the job is on its work list or it holds or held one of its attempts;
 * - a job, to write, only while it holds the job's current attempt, and only a write that is the
 *   job's transition under one event an agent sends (start, checkpoint asked for, checkpoint
 *   saved, requeue, success, failure, cancel finished): nothing else of the job (its spec, team,
 *   priority, usage, holdings) can be set to a value of the agent's choosing;
 * - a checkpoint, to write, only under the job's folder for an attempt it holds or held; to
 *   read, only under a job it may read.
 * Through the agent API a call that acts for a job also carries the credential of one of its
 * attempts (minted for this machine, cloud/aws/attempt-credentials.ts), and the API checks the call
 * is for that attempt (`credential`: a job write, for the attempt the stored job is at). The
 * machine's own role alone then acts for no job: a container that took it acts for none.
 */

/** How far an agent's clock may be from the API's: the times in a write it makes are checked against this. */
export const AGENT_CLOCK_SKEW_MS = 5 * 60_000;

/** Whether `nodeId` holds attempt `attempt` of the job now (its placement) or held it (its recent holdings). */
export function heldAttempt(job: Job, nodeId: string, attempt: number): boolean {
  if (job.attempt === attempt && job.placement?.nodes.some((n) => n.nodeId === nodeId)) return true;
  return (job.heldAttempts ?? []).some((h) => h.attempt === attempt && h.nodes.some((n) => n.nodeId === nodeId));
}

/** Whether the agent of `nodeId` may read the job: it is on the node's work list, or the node holds or held an attempt of it. */
export function mayReadJob(job: Job, nodeId: string, record: NodeRecord | undefined): boolean {
  if (record?.assigned && Object.hasOwn(record.assigned, job.id)) return true;
  if (job.placement?.nodes.some((n) => n.nodeId === nodeId)) return true;
  return (job.heldAttempts ?? []).some((h) => h.nodes.some((n) => n.nodeId === nodeId));
}

/** The rank the node holds in the job's current placement, or undefined. */
/** Whether a value an agent wrote as a reason has a reason's shape. */
function isReasonShaped(r: unknown): boolean {
  const { code, message, ...rest } = (r ?? {}) as { code?: unknown; message?: unknown };
  return (
    typeof code === 'string' &&
    /^[a-z][a-z0-9-]{0,63}$/.test(code) &&
    typeof message === 'string' &&
    message.length <= AGENT_FAILURE_MESSAGE_MAX &&
    Object.keys(rest).length === 0
  );
}

function rankOf(job: Job, nodeId: string): number | undefined {
  const i = job.placement?.nodes.findIndex((n) => n.nodeId === nodeId) ?? -1;
  return i < 0 ? undefined : i;
}

/**
 * Why the agent of `nodeId` may not replace `stored` with `next`, or undefined when it may: the
 * write must be exactly the transition of one event an agent sends, at a time within
 * {@link AGENT_CLOCK_SKEW_MS} of `nowMs`, with a checkpoint (when it attaches one) that is the
 * job's newest complete one, `latest`.
 */
export function agentJobWriteProblem(
  stored: Job,
  next: Job,
  nodeId: string,
  nowMs: number,
  latest: CheckpointRef | undefined,
): string | undefined {
  if (next.id !== stored.id) return `the write is for job ${next.id}, not ${stored.id}`;
  const rank = rankOf(stored, nodeId);
  if (rank === undefined) return `machine ${nodeId} does not hold job ${stored.id} (attempt ${stored.attempt})`;
  const at = next.updatedAtMs;
  if (!Number.isFinite(at) || Math.abs(at - nowMs) > AGENT_CLOCK_SKEW_MS)
    return `the write is dated ${at}, more than ${AGENT_CLOCK_SKEW_MS / 1000} s from the API's clock (${nowMs})`;
  // The attempt's measured GPU use the write adds, if any: the agent's own figures, checked for shape only.
  const use = next.usage?.gpuUse?.find((u) => u.attempt === stored.attempt && !sameValue(u, usedBefore(stored)));
  if (use) {
    const problem = gpuUseProblem(use);
    if (problem) return problem;
  }
  const gpuUse = use ? { gpuUse: use } : {};
  if (next.failure && !sameValue(next.failure, stored.failure)) {
    if (!isReasonShaped(next.failure) || !AGENT_FAILURE_CODES.includes(next.failure.code))
      return `an agent may give a failure only as one of ${AGENT_FAILURE_CODES.join(', ')} with a message of at most ${AGENT_FAILURE_MESSAGE_MAX} characters`;
  }
  // What the write says in its own words is checked for shape: the transitions below copy it as given.
  if (next.exitCode !== stored.exitCode && !(Number.isSafeInteger(next.exitCode) && Math.abs(next.exitCode!) < 2 ** 31))
    return `an exit code is a whole number (a 32-bit status); got ${JSON.stringify(next.exitCode)?.slice(0, 40)}`;
  for (const [field, given, before] of [
    ['requeueReason', next.requeueReason, stored.requeueReason],
    ['checkpointReason', next.checkpointReason, stored.checkpointReason],
  ] as const)
    if (given !== undefined && !sameValue(given, before) && !isReasonShaped(given))
      return `${field}: a reason is {"code", "message"}: a code of lower-case letters, digits and "-", and a message of at most ${AGENT_FAILURE_MESSAGE_MAX} characters`;
  // Each event an agent sends, who may send it, and the state it leads to (only those that reach next's state are tried).
  const candidates: { readonly event: JobEvent | 'finish-cancel'; readonly leaderOnly: boolean; readonly yields: readonly string[] }[] = [
    { event: { type: 'start', attempt: stored.attempt }, leaderOnly: true, yields: ['running'] },
    {
      event: { type: 'checkpoint-requested', attempt: stored.attempt, ...reasonOf(next.checkpointReason) },
      leaderOnly: false,
      yields: ['checkpointing'],
    },
    { event: { type: 'succeed', attempt: stored.attempt, ...gpuUse }, leaderOnly: true, yields: ['succeeded'] },
    {
      event: {
        type: 'fail',
        attempt: stored.attempt,
        exitCode: next.exitCode ?? 1,
        ...gpuUse,
        ...(next.failure ? { failure: next.failure } : {}),
      },
      leaderOnly: false,
      yields: ['failed'],
    },
    { event: 'finish-cancel', leaderOnly: true, yields: ['cancelled'] },
    // Any rank that cannot start sends the whole attempt back (node-rules: startFailure); a job whose cancel was
    // asked for ends cancelled instead, whatever the reason given.
    {
      event: {
        type: 'requeue',
        attempt: stored.attempt,
        reason: next.requeueReason ?? stored.requeueReason ?? { code: 'node-lost', message: 'requeued by its node' },
        ...gpuUse,
      },
      leaderOnly: false,
      yields: ['pending', 'cancelled'],
    },
  ];
  if (next.checkpoint && !sameValue(next.checkpoint, stored.checkpoint)) {
    if (!latest || !sameValue(next.checkpoint, latest))
      return `the checkpoint attached to job ${stored.id} is not its newest complete checkpoint`;
    candidates.push({ event: { type: 'checkpoint-done', checkpoint: next.checkpoint }, leaderOnly: false, yields: [stored.state] });
  }
  // A replica's readiness as its agent found it (the first rank's machine runs the replica).
  if (next.replicaHealth && !sameValue(next.replicaHealth, stored.replicaHealth))
    candidates.push({
      event: { type: 'replica-health', attempt: stored.attempt, answering: next.replicaHealth.answering },
      leaderOnly: true,
      yields: [stored.state],
    });
  let leaderOnly: string | undefined;
  for (const c of candidates) {
    if (!c.yields.includes(next.state)) continue;
    const result = c.event === 'finish-cancel' ? finishCancel(stored, at, use) : transition(stored, c.event, at);
    if (!result.ok || !result.changed || !sameValue(result.job, next)) continue;
    if (!c.leaderOnly || rank === 0) return undefined;
    leaderOnly = `only the first rank of job ${stored.id} may record it ${eventName(c.event)}; machine ${nodeId} is rank ${rank}`;
  }
  return (
    leaderOnly ??
    `the write to job ${stored.id} is not a change an agent makes (start, checkpoint, readiness, requeue, success, failure or cancel of attempt ${stored.attempt})`
  );
}

/**
 * Why the agent of `nodeId` may not write the checkpoint folder `location` of job `job`, or
 * undefined: the folder must be under the job's own folder for an attempt the node holds or held
 * (`attemptFolder(jobId, attempt)` gives that folder, as the checkpoint store lays it out).
 */
export function agentCheckpointWriteProblem(
  job: Job,
  nodeId: string,
  location: string,
  attemptFolder: (jobId: string, attempt: number) => string,
): string | undefined {
  const attempt = attemptOfLocation(job.id, location, attemptFolder);
  if (attempt === undefined) return `${location} is not a checkpoint folder of job ${job.id}`;
  if (!heldAttempt(job, nodeId, attempt)) return `machine ${nodeId} did not hold attempt ${attempt} of job ${job.id}`;
  return undefined;
}

/** Why the agent of `nodeId` may not read the checkpoint folder `location`, or undefined: it must be the job's, and the job one it may read. */
export function agentCheckpointReadProblem(
  job: Job,
  nodeId: string,
  record: NodeRecord | undefined,
  location: string,
  attemptFolder: (jobId: string, attempt: number) => string,
): string | undefined {
  if (attemptOfLocation(job.id, location, attemptFolder) === undefined) return `${location} is not a checkpoint folder of job ${job.id}`;
  if (!mayReadJob(job, nodeId, record)) return `machine ${nodeId} has no part in job ${job.id}`;
  return undefined;
}

/** The attempt whose folder `location` is in (the folder itself or below it), or undefined when it is none of the job's. */
export function attemptOfLocation(
  jobId: string,
  location: string,
  attemptFolder: (jobId: string, attempt: number) => string,
): number | undefined {
  const probe = attemptFolder(jobId, 0);
  const stem = probe.slice(0, probe.length - 'attempt-0/'.length);
  if (!probe.endsWith('attempt-0/') || !location.startsWith(stem)) return undefined;
  const m = /^attempt-([1-9]\d{0,8})\/(.*)$/.exec(location.slice(stem.length));
  if (!m) return undefined;
  // No way out of the folder: no empty, "." or ".." segment below it.
  const rest = m[2]!;
  if (
    rest !== '' &&
    rest
      .replace(/\/$/, '')
      .split('/')
      .some((s) => s === '' || s === '.' || s === '..')
  )
    return undefined;
  return Number(m[1]);
}

/** The use the stored job already has for its current attempt (a write that repeats it adds nothing). */
function usedBefore(stored: Job): unknown {
  return stored.usage?.gpuUse?.find((u) => u.attempt === stored.attempt);
}

function reasonOf(reason: Job['checkpointReason']): { reason?: NonNullable<Job['checkpointReason']> } {
  return reason ? { reason } : {};
}

function eventName(event: JobEvent | 'finish-cancel'): string {
  if (event === 'finish-cancel') return 'cancelled';
  return event.type === 'succeed' ? 'succeeded' : event.type === 'replica-health' ? 'answering or not' : 'started';
}

/**
 * Whether two records mean the same: equal values, a member that is undefined the same as one that
 * is absent (a record that went through JSON has no undefined members).
 */
function sameValue(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (typeof a !== 'object' || typeof b !== 'object' || a === null || b === null) return false;
  if (Array.isArray(a) || Array.isArray(b)) {
    if (!Array.isArray(a) || !Array.isArray(b) || a.length !== b.length) return false;
    return a.every((v, i) => sameValue(v, b[i]));
  }
  const x = a as Record<string, unknown>;
  const y = b as Record<string, unknown>;
  for (const k of Object.keys(x)) if (x[k] !== undefined && !sameValue(x[k], y[k])) return false;
  for (const k of Object.keys(y)) if (y[k] !== undefined && x[k] === undefined) return false;
  return true;
}

/** A call an agent may not make: the agent API answers it with 403, the simulator counts it. */
export class AgentRefused extends GpuFleetError {
  override name = 'AgentRefused';
  constructor(
    readonly nodeId: string,
    message: string,
  ) {
    super(message, { context: { nodeId } });
  }
}

type AgentStores = {
  readonly jobs: JobStore;
  readonly nodes: NodeStore;
  readonly checkpoints: CheckpointStore;
  /** The index's history, where the control plane keeps one: reads of saves are noted in it for the bill. */
  readonly history?: Pick<CheckpointHistory, 'noteRead'>;
  /**
   * The checkpoint roots of the fleet's other sites (a GCP region's bucket, `gs://…/`): a job's
   * attempt folders there are its folders as much as under the index's root (a GCP machine saves
   * into its region's bucket; a machine of another cloud reads a save kept there to resume).
   */
  readonly otherRoots?: readonly string[];
};

/** A machine being prepared in its group's warm pool, as its agent describes it (its metadata and GPUs). */
export type PreparingMachine = Pick<Instance, 'cloud' | 'region' | 'zone' | 'instanceType' | 'capacityType'> & {
  /** Whether its GPUs are in MIG mode (what nvidia-smi says). */
  readonly migMode: boolean;
};

/**
 * What the agent API answers beyond the stores: the services (their images) and the instance types
 * (what a machine holds), for a machine being prepared; the services' load balancer, for a warned
 * machine's replicas leaving it.
 */
export interface AgentSources {
  readonly services?: Pick<ServiceStore, 'list'>;
  readonly types?: InstanceTypeCatalog;
  readonly frontDoor?: Pick<FrontDoor, 'deregister'>;
}

/** The stores as the agent of one machine may use them, plus the checks for its checkpoint bytes. */
export interface AgentView extends AgentStores {
  readonly nodeId: string;
  /** Throws {@link AgentRefused} unless the machine may write files in the checkpoint folder `location` of job `jobId`. */
  checkCheckpointWrite(jobId: string, location: string): Promise<void>;
  /** Throws {@link AgentRefused} unless the machine may read the checkpoint folder `location` of job `jobId`. */
  checkCheckpointRead(jobId: string, location: string): Promise<void>;
  /**
   * As {@link checkCheckpointRead}, for a read that starts (the first page of a download): it is
   * noted in the job's byte log (once per attempt and machine), which bills its bytes to the job's team.
   */
  readCheckpoint(jobId: string, location: string): Promise<void>;
  /**
   * Throws {@link AgentRefused} unless the machine may write the output of this attempt and rank: it
   * holds (or held) that rank of the attempt. Gives the job's team and labels, which go with the lines.
   */
  checkLogWrite(jobId: string, attempt: number, rank: number): Promise<{ team: string; labels: Readonly<Record<string, string>> }>;
  /**
   * The images a machine being prepared in its group's warm pool pulls before it is stopped: those
   * it would be told to pull ahead once in service (core/serving/prefetch.ts), so a replica placed on
   * it when it is started finds its image on the volume. Reads only service images; any machine may
   * ask. Throws {@link AgentRefused} where the view was made without the services to answer from.
   */
  imagesToPrepare(machine: PreparingMachine): Promise<string[]>;
  /**
   * Takes a replica this machine runs out of its service's target group (its connections drain for
   * the group's deregistration delay): only a replica of the attempt running here, and only once
   * the machine is draining (a notice said it goes; core/serving/service.ts agentLeavesFrontDoorNow
   * says when). Throws {@link AgentRefused} otherwise, or where the view has no load balancer.
   */
  leaveFrontDoor(jobId: string, attempt: number): Promise<void>;
  /**
   * The service whose load figures the machine may publish for this attempt: only a replica's
   * (its service label), only the attempt the job is at, and only from its first rank's machine,
   * which serves it. Throws {@link AgentRefused} otherwise.
   */
  checkServiceMetrics(jobId: string, attempt: number): Promise<{ serviceId: string }>;
  /**
   * The secrets an attempt's job names by reference, for the machine that starts it: only the
   * attempt the job is at, only while it is placed or running, and only on a machine of its
   * placement (or whose work list names it). Throws {@link AgentRefused} otherwise.
   */
  checkSecretsRead(
    jobId: string,
    attempt: number,
  ): Promise<{ team: string; secrets: readonly { readonly name: string; readonly valueFrom: string }[] }>;
}

/**
 * The rules above applied to every call: the agent API carries out an agent's calls through this
 * view of the control plane's stores, and the simulator hands each simulated machine's agent the
 * same view, so what a real machine is refused a simulated one is too. Reads it may not make of
 * a job answer as if the job did not exist; writes it may not make throw {@link AgentRefused}.
 * Times of its own record (registration, heartbeats) are the view's clock, never the machine's.
 */
export function agentView(
  stores: AgentStores,
  nodeId: string,
  clock: Clock,
  sources: AgentSources = {},
  credential?: { readonly jobId: string; readonly attempt: number },
): AgentView {
  const refuse = (message: string): never => {
    throw new AgentRefused(nodeId, message);
  };
  const own = (instanceId: string, what: string) => {
    if (instanceId !== nodeId) refuse(`machine ${nodeId} may not ${what} of machine ${instanceId}`);
  };
  const folder = (jobId: string, attempt: number) => stores.checkpoints.locationFor(jobId, attempt);
  // The attempt folders of the root a location is under: another site's (a GCP region's bucket) when it is there, else the index's.
  const folderFor = (location: string) => {
    const other = (stores.otherRoots ?? []).find((root) => location.startsWith(root));
    return other === undefined ? folder : (jobId: string, attempt: number) => checkpointFolder(other, jobId, attempt);
  };
  const jobOf = async (jobId: string): Promise<Job> => (await stores.jobs.get(jobId)) ?? refuse(`job ${jobId} does not exist`);
  // The node's record is read only when the job itself does not name the node (most reads are of jobs placed on it).
  const mayRead = async (job: Job): Promise<boolean> =>
    mayReadJob(job, nodeId, undefined) || mayReadJob(job, nodeId, await stores.nodes.get(nodeId));
  const readable = async (jobId: string): Promise<Job> => {
    const job = await jobOf(jobId);
    if (!(await mayRead(job))) refuse(`machine ${nodeId} has no part in job ${jobId}`);
    return job;
  };
  const notForAgents = (what: string): never => refuse(`${what} is not something a node agent does`);

  const jobs: JobStore = {
    async get(id) {
      const job = await stores.jobs.get(id);
      return job && (await mayRead(job)) ? job : undefined;
    },
    async update(next, expectedVersion) {
      const stored = await readable(next.id);
      if (stored.version !== expectedVersion) return { ok: false, current: stored };
      // Through the agent API, a write acts for the attempt the job is at: the call's credential must be that attempt's.
      if (credential && (credential.jobId !== stored.id || credential.attempt !== stored.attempt))
        refuse(
          `the write to job ${stored.id} (at attempt ${stored.attempt}) carries the credential of ${credential.jobId === stored.id ? `attempt ${credential.attempt}` : `job ${credential.jobId}`}`,
        );
      const latest = next.checkpoint ? await stores.checkpoints.latest(stored.id) : undefined;
      const problem = agentJobWriteProblem(stored, next, nodeId, clock.nowMs(), latest);
      if (problem !== undefined) refuse(problem);
      return stores.jobs.update(next, expectedVersion);
    },
    create: async () => notForAgents('creating a job'),
    listByState: async () => notForAgents('listing jobs'),
    listEndedSince: async () => notForAgents('listing jobs'),
  };

  const nodes: NodeStore = {
    async register(record) {
      own(record.instanceId, 'register');
      const now = clock.nowMs();
      // Only what an agent reports: never a drain mark, a work list or billing facts of its choosing.
      await stores.nodes.register({
        instanceId: nodeId,
        groupId: record.groupId,
        registeredAtMs: now,
        lastHeartbeatAtMs: now,
        gpus: record.gpus,
        ...(record.address !== undefined ? { address: record.address } : {}),
        healthy: record.healthy,
        ...(record.healthProblem !== undefined ? { healthProblem: record.healthProblem } : {}),
      });
    },
    async heartbeat(instanceId, _atMs, health) {
      own(instanceId, 'send the heartbeat');
      return stores.nodes.heartbeat(nodeId, clock.nowMs(), health);
    },
    async get(instanceId) {
      if (instanceId !== nodeId) {
        // Another machine's record only when the two share a job on this one's work list (a gang's leader, for its address).
        const record = await stores.nodes.get(nodeId);
        const shared = await Promise.all(Object.keys(record?.assigned ?? {}).map((id) => stores.jobs.get(id)));
        const sharesOne = shared.some(
          (j) => j?.placement?.nodes.some((n) => n.nodeId === nodeId) && j.placement.nodes.some((n) => n.nodeId === instanceId),
        );
        if (!sharesOne) refuse(`machine ${nodeId} shares no job with machine ${instanceId}`);
      }
      return stores.nodes.get(instanceId);
    },
    async markDraining(instanceId, drain) {
      own(instanceId, 'drain');
      const { sinceMs, reason, deadlineMs, groupId } = drain;
      return stores.nodes.markDraining(nodeId, { sinceMs, reason, deadlineMs, ...(groupId !== undefined ? { groupId } : {}) });
    },
    async unassign(instanceId, jobId, attempt) {
      own(instanceId, 'change the work list');
      await stores.nodes.unassign(nodeId, jobId, attempt);
    },
    async noteImages(instanceId, images) {
      own(instanceId, 'report its images');
      return stores.nodes.noteImages(nodeId, images);
    },
    list: async () => notForAgents('listing nodes'),
    setIdleSince: async () => notForAgents('marking a node idle'),
    setPrefetch: async () => notForAgents("setting a node's images to pull ahead"),
    remove: async () => notForAgents('removing a node'),
    noteMeter: async () => notForAgents("stamping a machine's billing facts"),
    noteEnded: async () => notForAgents("recording a machine's end"),
    assign: async () => notForAgents('placing work on a node'),
  };

  /** This machine's site as reconcile stamped its billing facts: where its saves are written from and read to. */
  const machineSite = async () => siteOfOffering((await stores.nodes.get(nodeId))?.meter?.offeringId);

  const checkRead = async (jobId: string, location: string): Promise<Job> => {
    const job = await jobOf(jobId);
    const record = mayReadJob(job, nodeId, undefined) ? undefined : await stores.nodes.get(nodeId);
    const problem = agentCheckpointReadProblem(job, nodeId, record, location, folderFor(location));
    if (problem !== undefined) refuse(problem);
    return job;
  };

  const checkpoints: CheckpointStore = {
    locationFor: (jobId, attempt) => stores.checkpoints.locationFor(jobId, attempt),
    async latest(jobId) {
      await readable(jobId);
      return stores.checkpoints.latest(jobId);
    },
    async markComplete(ref, rank = 0) {
      const job = await jobOf(ref.jobId);
      const problem = agentCheckpointWriteProblem(job, nodeId, ref.location, folderFor(ref.location));
      if (problem !== undefined) refuse(problem);
      const attempt = attemptOfLocation(job.id, ref.location, folderFor(ref.location))!;
      if (ref.attempt !== attempt) refuse(`the checkpoint at ${ref.location} is of attempt ${attempt}, not ${ref.attempt}`);
      // Dated by the machine: within the skew of the API's clock, or a machine whose clock runs ahead (or a hostile one) would
      // make its checkpoint the newest for good, and every later honest one would be dropped as older.
      const now = clock.nowMs();
      if (!Number.isFinite(ref.completedAtMs) || Math.abs(ref.completedAtMs - now) > AGENT_CLOCK_SKEW_MS)
        refuse(
          `the checkpoint at ${ref.location} is dated ${ref.completedAtMs}, more than ${AGENT_CLOCK_SKEW_MS / 1000} s from the API's clock (${now})`,
        );
      if (!Number.isSafeInteger(ref.progressSec) || ref.progressSec < 0)
        refuse(`the checkpoint at ${ref.location} gives progress ${ref.progressSec}; it must be a whole number of seconds, 0 or more`);
      // The attempt's machines in rank order: its placement now, or its holding once it ended.
      const ended = (job.heldAttempts ?? []).find((h) => h.attempt === attempt);
      const live = job.attempt === attempt && job.placement !== undefined;
      const held = live ? job.placement!.nodes.map((n) => n.nodeId) : ended!.nodes.map((n) => n.nodeId);
      // Progress no attempt could have made is refused, and the newest honest save stays the newest. The job's record
      // names its newest save; the index (read only when the claim passes what the record allows) may know a newer one.
      const attemptFromMs = (live ? (job.placedAtMs ?? job.startedAtMs) : ended?.fromMs) ?? job.submittedAtMs;
      let ceiling = progressCeilingSec(job.checkpoint?.progressSec ?? 0, attemptFromMs, now);
      if (ref.progressSec > ceiling)
        ceiling = progressCeilingSec(
          Math.max((await stores.checkpoints.latest(job.id))?.progressSec ?? 0, job.checkpoint?.progressSec ?? 0),
          attemptFromMs,
          now,
        );
      if (ref.progressSec > ceiling)
        refuse(
          `the checkpoint at ${ref.location} claims ${ref.progressSec} s of progress; attempt ${attempt} can have made at most ${ceiling} s (its newest complete save's, plus the time it has run)`,
        );
      if (held[rank] !== nodeId) refuse(`machine ${nodeId} is not rank ${rank} of attempt ${attempt} of job ${job.id}`);
      if ((ref.ranks ?? 1) !== held.length)
        refuse(
          `attempt ${attempt} of job ${job.id} ran on ${held.length} machines; its checkpoints have that many parts, not ${ref.ranks ?? 1}`,
        );
      const sizeProblem = ref.size ? saveSizeProblem(ref.size) : undefined;
      if (sizeProblem !== undefined) refuse(`the checkpoint at ${ref.location}: ${sizeProblem}`);
      // Whom the save's bytes are charged to, and where it was written from: the job's record and this machine's, never the call's.
      const machine = await machineSite();
      const project = job.spec.labels?.project;
      const meter: SaveMeter = {
        owner: { jobId: job.id, team: job.team, ...(project !== undefined ? { project } : {}) },
        ...(machine ? { machine } : {}),
      };
      return stores.checkpoints.markComplete(ref, rank, meter);
    },
  };

  return {
    nodeId,
    jobs,
    nodes,
    checkpoints,
    async checkCheckpointWrite(jobId, location) {
      const problem = agentCheckpointWriteProblem(await jobOf(jobId), nodeId, location, folderFor(location));
      if (problem !== undefined) refuse(problem);
      // The newest complete checkpoint is what the next attempt resumes from: nothing is ever written into it again.
      const newest = await stores.checkpoints.latest(jobId);
      if (newest && location.startsWith(newest.location))
        refuse(`${location} is in the newest complete checkpoint of job ${jobId}; a save goes to a folder of its own`);
    },
    async checkServiceMetrics(jobId, attempt) {
      const job = await jobOf(jobId);
      const serviceId = job.spec.labels?.[SERVICE_LABEL];
      if (!serviceId) return refuse(`job ${jobId} is not a service replica`);
      if (job.attempt !== attempt || job.placement?.nodes[0]?.nodeId !== nodeId)
        return refuse(`machine ${nodeId} does not serve attempt ${attempt} of replica ${jobId}`);
      return { serviceId };
    },
    async checkLogWrite(jobId, attempt, rank) {
      const job = await jobOf(jobId);
      const machines =
        job.attempt === attempt && job.placement
          ? job.placement.nodes.map((n) => n.nodeId)
          : ((job.heldAttempts ?? []).find((h) => h.attempt === attempt)?.nodes.map((n) => n.nodeId) ?? []);
      // A placed attempt not started yet has no holding: its work list entry names it.
      const listed = machines.length === 0 && (await stores.nodes.get(nodeId))?.assigned?.[jobId] === attempt;
      if (machines[rank] !== nodeId && !listed) refuse(`machine ${nodeId} did not run rank ${rank} of attempt ${attempt} of job ${jobId}`);
      return { team: job.team, labels: job.spec.labels ?? {} };
    },
    async checkSecretsRead(jobId, attempt) {
      const job = await jobOf(jobId);
      if (job.attempt !== attempt || (job.state !== 'placed' && job.state !== 'running'))
        refuse(`job ${jobId} is at attempt ${job.attempt} (${job.state}): the secrets of attempt ${attempt} are not given`);
      const here =
        (job.placement?.nodes.some((n) => n.nodeId === nodeId) ?? false) || (await stores.nodes.get(nodeId))?.assigned?.[jobId] === attempt;
      if (!here) refuse(`machine ${nodeId} does not run attempt ${attempt} of job ${jobId}: its secrets are not given`);
      return { team: job.team, secrets: job.spec.secrets ?? [] };
    },
    async imagesToPrepare(machine) {
      if (!sources.services || !sources.types)
        return refuse('this control plane answers no machine being prepared (it was set up without its services)');
      return imagesToPrefetch(machine, machine.migMode, await sources.services.list(), sources.types);
    },
    async leaveFrontDoor(jobId, attempt) {
      if (!sources.frontDoor) return refuse('this control plane fronts no service (it was set up without a load balancer)');
      const job = await readable(jobId);
      const service = job.spec.labels?.[SERVICE_LABEL];
      if (service === undefined || !job.spec.service) return refuse(`job ${jobId} is not a service replica`);
      if (job.attempt !== attempt || job.placement?.nodes[0]?.nodeId !== nodeId)
        return refuse(`attempt ${attempt} of job ${jobId} is not the one running on machine ${nodeId}`);
      const record = await stores.nodes.get(nodeId);
      if (!record?.draining)
        return refuse(`machine ${nodeId} is not draining: a replica leaves its target group only from a machine that goes`);
      if (!record.address) return refuse(`machine ${nodeId} registered no address, so none of its replicas is a target`);
      await sources.frontDoor.deregister(service, [{ ip: record.address, port: job.spec.service.port }]);
    },
    checkCheckpointRead: async (jobId, location) => void (await checkRead(jobId, location)),
    async readCheckpoint(jobId, location) {
      const job = await checkRead(jobId, location);
      if (!stores.history) return;
      const machine = await machineSite();
      await stores.history.noteRead(jobId, location, {
        key: `${job.attempt}/${nodeId}`,
        atMs: clock.nowMs(),
        ...(machine ? { machine } : {}),
      });
    },
  };
}
