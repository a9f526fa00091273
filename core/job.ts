import { logDeleted, logSave, type ByteLog, type SaveOwner, type SaveRecord, type SaveSize, type Site } from './bytes.ts';
import type { CapacityType } from './catalog.ts';
import { rejectedBody, rejectedBodyDigest, type JobSpec } from './job-spec.ts';
import { milliGpusUsed, type GpuRequest } from './gpu.ts';
import { GPU_USE_KEPT, type AttemptGpuUse } from './gpu-use.ts';
import { GpuFleetError } from './errors.ts';
import { costForDuration, type MicroUsd } from './money.ts';
import type { Reason, ReasonCode } from './reason.ts';

/**
 * A job's life: pending → placed → running → succeeded | failed | cancelled, with
 * running → checkpointing → pending (attempt + 1) on interruption or preemption, and
 * rejected for a spec that failed validation. A held job is pending with a `hold` reason.
 * Exactly one attempt runs at a time: every transition names the attempt it acts on, and a
 * transition for an older attempt is refused, so late or repeated events change nothing.
 */
export const JOB_STATES = ['pending', 'placed', 'running', 'checkpointing', 'succeeded', 'failed', 'cancelled', 'rejected'] as const;
export type JobState = (typeof JOB_STATES)[number];
export const TERMINAL_STATES: readonly JobState[] = ['succeeded', 'failed', 'cancelled', 'rejected'];
export const ACTIVE_STATES: readonly JobState[] = ['placed', 'running', 'checkpointing'];

export function isTerminal(state: JobState): boolean {
  return TERMINAL_STATES.includes(state);
}

/** Where one attempt of a job runs: one entry per node of its gang. */
export interface NodeAssignment {
  readonly nodeId: string;
  /** Whole GPUs, or the one GPU that holds the MIG slice or time-slice share. */
  readonly gpuIndices: readonly number[];
  readonly mig?: { readonly profile: string; readonly startSlice: number };
  readonly share?: { readonly milliGpu: number; readonly memoryMiB: number };
  /**
   * Ports of the machine the job's container listens on with the host's network (a service's
   * port; the rendezvous port on a gang's first machine): room of the machine no other job on it
   * may take. Absent when none.
   */
  readonly ports?: readonly number[];
}

/**
 * The port a multi-node gang's ranks meet at on its first machine (torch.distributed's
 * MASTER_PORT), chosen by the planner when it placed the attempt; undefined for a single machine.
 */
export function rendezvousPortOf(placement: Placement | undefined): number | undefined {
  return placement && placement.nodes.length > 1 ? placement.nodes[0]?.ports?.[0] : undefined;
}

/**
 * The failure reasons a node's agent may record with a job's failure (what its machine saw beyond
 * the exit code); any other it sends is refused by the agent API.
 */
export const AGENT_FAILURE_CODES: readonly ReasonCode[] = ['out-of-memory', 'disk-full'];
/** The longest failure message an agent may record. */
export const AGENT_FAILURE_MESSAGE_MAX = 500;

/** Thousandths of a GPU one node's part of a placement holds (a whole GPU is 1000). */
export function assignmentMilliGpu(a: NodeAssignment): number {
  if (a.share) return a.share.milliGpu;
  if (a.mig) return milliGpusUsed({ kind: 'mig', profile: a.mig.profile });
  return a.gpuIndices.length * 1000;
}

/** How often an attempt is asked to save, as the planner chose it where it placed the attempt (core/save-price.ts). */
export interface SaveCadence {
  /** Seconds between saves asked of the job. */
  readonly everySec: number;
  /** What the decision used: take-backs per hour on the attempt's capacity, and a save's price at the cadence chosen. */
  readonly hazardPerHour: number;
  readonly savePriceMicroUsd: MicroUsd;
  /** Why this cadence: the job's own longest gap, the best trade of save price against lost work, or the shortest allowed. */
  readonly by: 'longest' | 'price' | 'shortest';
}

export interface Placement {
  readonly nodes: readonly NodeAssignment[];
  /** Capacity type of the nodes, for accounting and the spot rules. */
  readonly capacityType: CapacityType;
  /** The capacity reservation of the machines, when reserved (for `explain` and the reservation report). */
  readonly reservationId?: string;
  /** Thousandths of a GPU the attempt holds, over all its nodes. */
  readonly milliGpu?: number;
  /** What the attempt's share of its machines costs per hour when placed (µUSD), and the same share on on-demand. */
  readonly priceMicroUsdPerHour?: number;
  readonly onDemandMicroUsdPerHour?: number;
  /** How often the attempt is asked to save, and the take-back rate and save price that decided it (absent: the spec's interval). */
  readonly saves?: SaveCadence;
}

/**
 * What a job's finished attempts used and cost, added up when each attempt ends (requeued,
 * succeeded, failed, cancelled): the basis of per-job and per-project reports. Cost is the
 * attempt's share of its machines at the price when it was placed, from placement to end.
 */
export interface JobUsage {
  readonly attempts: number;
  /** Seconds attempts held their GPUs (from placement to end). */
  readonly heldSec: number;
  /** GPU-seconds held (milli-GPUs ÷ 1000 × seconds). */
  readonly gpuSec: number;
  /** Seconds held on spot. */
  readonly spotSec: number;
  readonly costMicroUsd: number;
  /** The same holdings at on-demand prices, for savings. */
  readonly onDemandMicroUsd: number;
  /** Seconds of work lost to interruptions: time run since the attempt's newest checkpoint (or its start) when it was requeued. */
  readonly reworkSec: number;
  /** Of the cost, what attempts on reserved capacity were billed at their reservations' rates (absent: none). */
  readonly reservedMicroUsd?: number;
  /** The newest attempts' measured GPU use (peak memory, mean and p95 utilisation), as their agents reported it at their end. */
  readonly gpuUse?: readonly AttemptGpuUse[];
}

/** What intake decided about a submission's shape with `gpu.rightsize` (core/rightsizing.ts), kept on the job for `explain`. */
export interface RightsizeDecision {
  readonly mode: 'suggest' | 'auto';
  /** Whether the job runs with `to` instead of what it asked for. */
  readonly applied: boolean;
  /** Its family: team, project label and image. */
  readonly family: string;
  readonly from: GpuRequest;
  readonly to?: GpuRequest;
  readonly atMs: number;
  readonly why: string;
}

/** The newest complete checkpoint of a job. */
export interface CheckpointRef {
  readonly jobId: string;
  readonly attempt: number;
  readonly location: string;
  readonly completedAtMs: number;
  /** Seconds of work the checkpoint holds (progress to resume from). */
  readonly progressSec: number;
  /**
   * Nodes whose parts make up the checkpoint (a gang's ranks each save their own shard, under
   * `rank-<r>/` of the location); absent or 1 for a single node, whose files are the location itself.
   */
  readonly ranks?: number;
  /**
   * The size of the part its machine wrote (a gang rank's shard; the whole save for one node), as
   * the machine measured it: the index bills the save's bytes by it (all ranks: this part × ranks).
   */
  readonly size?: SaveSize;
}

/** How far a machine's clock may run ahead of the checkpoint store's: a completion dated later than that is refused. */
export const CHECKPOINT_CLOCK_SKEW_MS = 5 * 60_000;

/**
 * How a checkpoint store takes the completion `next`, given the newest complete checkpoint it
 * holds (`current`) and its own clock (`nowMs`): the one rule every store follows.
 * - Refused: a completion dated more than {@link CHECKPOINT_CLOCK_SKEW_MS} after the store's clock
 *   (a machine whose clock runs ahead, or a hostile one, would otherwise stay newest for good), a
 *   progress that is not a whole number of seconds, or progress behind the current checkpoint's.
 * - Again: the current checkpoint's own location with no more progress (a retried call, another
 *   rank's part of the same save): the current one stays as it is.
 * - Newest: anything else. Among checkpoints that pass, the one the store records last wins; the
 *   store's clock orders them, never the machines' dates.
 */
export function checkpointCompletion(
  current: CheckpointRef | undefined,
  next: CheckpointRef,
  nowMs: number,
): { readonly kind: 'newest' | 'again' } | { readonly kind: 'refused'; readonly why: string } {
  if (!Number.isFinite(next.completedAtMs) || next.completedAtMs > nowMs + CHECKPOINT_CLOCK_SKEW_MS)
    return {
      kind: 'refused',
      why: `the checkpoint at ${next.location} is dated ${next.completedAtMs}, more than ${CHECKPOINT_CLOCK_SKEW_MS / 1000} s after the store's clock (${nowMs})`,
    };
  if (!Number.isSafeInteger(next.progressSec) || next.progressSec < 0)
    return {
      kind: 'refused',
      why: `the checkpoint at ${next.location} gives progress ${next.progressSec}; it must be a whole number of seconds, 0 or more`,
    };
  if (!current) return { kind: 'newest' };
  if (current.location === next.location && next.progressSec <= current.progressSec) return { kind: 'again' };
  if (next.progressSec < current.progressSec)
    return {
      kind: 'refused',
      why: `the checkpoint at ${next.location} holds ${next.progressSec} s of progress, behind the newest complete one (${current.location}, ${current.progressSec} s)`,
    };
  return { kind: 'newest' };
}

/**
 * The most progress a save of an attempt can believably hold: the progress the attempt resumed
 * from at most (`resumedAtMostSec`, the newest complete save's), plus the seconds the attempt has
 * held its machines since `attemptFromMs`, plus the clock skew allowed. A machine that claims more
 * (a hostile one's 2^53 − 1 seconds) would make its save the newest for good, and every honest save
 * after it would be refused as behind.
 */
export function progressCeilingSec(resumedAtMostSec: number, attemptFromMs: number, nowMs: number): number {
  return Math.floor(resumedAtMostSec + Math.max(0, nowMs - attemptFromMs + CHECKPOINT_CLOCK_SKEW_MS) / 1000);
}

/** How long a live job keeps the save its newest one replaced (a second resume point, should the newest prove bad). */
export const PREVIOUS_SAVE_KEPT_MS = 3_600_000;
/** How long an object of no save recorded complete is kept: a save under way, or one whose completion is not recorded yet. */
export const UNRECORDED_SAVE_KEPT_MS = 3_600_000;
/** How many replaced saves' locations the index remembers for the sweep; beyond them, the time rule for unrecorded objects applies. */
export const SUPERSEDED_KEPT_MAX = 200;

/**
 * What the checkpoint index knows of a job's complete saves: the newest; the one it replaced
 * (with when, on the store's clock); and the locations of saves replaced before that, which no
 * attempt resumes from and the sweep deletes (then forgets).
 */
export interface RetainedSaves {
  readonly newest?: CheckpointRef;
  readonly previous?: CheckpointRef;
  readonly replacedAtMs?: number;
  readonly superseded: readonly string[];
  /** Each save's bytes from its upload to its deletion, for the bill (absent for saves recorded without a size). */
  readonly bytes?: ByteLog;
}

/** Whose save is recorded, and where its machine is: the control plane stamps it (core/services/agent-access.ts), never the machine. */
export interface SaveMeter {
  readonly owner: SaveOwner;
  readonly machine?: Site;
}

export const NO_SAVES: RetainedSaves = { superseded: [] };

/**
 * What an index records when `ref` becomes a job's newest complete save at `nowMs`, given what it
 * held: the newest it replaces becomes the previous one, and the previous one before it joins the
 * superseded (at most {@link SUPERSEDED_KEPT_MAX}, the oldest dropped). A save of the same
 * location with more progress replaces the newest in place and leaves the previous one as it was.
 */
export function afterNewestSave(held: RetainedSaves, ref: CheckpointRef, nowMs: number, meter?: SaveMeter): RetainedSaves {
  const current = held.newest;
  const bytes = ref.size && meter ? { bytes: logSave(held.bytes, meter.owner, saveRecord(ref, ref.size, meter, nowMs), nowMs) } : {};
  if (!current || current.location === ref.location) return { ...held, newest: ref, ...bytes };
  const superseded = [...held.superseded];
  if (held.previous && held.previous.location !== ref.location && !superseded.includes(held.previous.location))
    superseded.push(held.previous.location);
  return {
    newest: ref,
    previous: current,
    replacedAtMs: nowMs,
    superseded: superseded.slice(-SUPERSEDED_KEPT_MAX),
    ...(held.bytes ? { bytes: held.bytes } : {}),
    ...bytes,
  };
}

/** A save's record in the byte log: one rank's measured part stands for each of the save's parts (a gang's shards are alike). */
function saveRecord(ref: CheckpointRef, size: SaveSize, meter: SaveMeter, nowMs: number): SaveRecord {
  const ranks = ref.ranks ?? 1;
  return {
    location: ref.location,
    bytes: size.bytes * ranks,
    writeRequests: size.writeRequests * ranks,
    readRequests: size.readRequests * ranks,
    ...(ranks > 1 ? { parts: ranks } : {}),
    savedAtMs: nowMs,
    ...(meter.machine ? { machine: meter.machine } : {}),
  };
}

/** How far a writer's clock (the agent API's, stamping a save's record) may run behind the sweep's. */
export const LISTING_CLOCK_MARGIN_MS = 60_000;

/**
 * What an index keeps once the sweep deleted the objects of `locations` at `nowMs`: they leave the
 * superseded list, and their saves' records in the byte log are closed then.
 */
export function afterSweep(held: RetainedSaves, locations: readonly string[], nowMs: number): RetainedSaves {
  const gone = new Set(locations);
  return {
    ...held,
    superseded: held.superseded.filter((l) => !gone.has(l)),
    ...(held.bytes ? { bytes: logDeleted(held.bytes, locations, nowMs) } : {}),
  };
}

/**
 * The saves a sweep tells the index are gone: the superseded ones it kept no object of (all
 * deleted, or none there), and any other save the byte log still counts as held (the save before
 * the newest, an ended job's newest) of which it kept no object. One it kept (the job's record
 * still names it as its resume point) stays listed, so a later sweep deletes it once the record
 * has moved on. `root` is the swept bucket's root: saves elsewhere are another sweep's to judge.
 * `listedFromMs` is when the listing of the objects began, where it began before the index was
 * read: a save recorded since may have objects the listing missed, so it is not judged this time.
 */
export function forgettable(saves: RetainedSaves, keptObjectUris: readonly string[], root = '', listedFromMs?: number): string[] {
  // A save recorded after the listing began (less a minute for the writers' clocks) may have objects the listing missed: judged next time.
  const late = new Set(
    listedFromMs === undefined
      ? []
      : (saves.bytes?.saves ?? []).filter((s) => s.savedAtMs >= listedFromMs - LISTING_CLOCK_MARGIN_MS).map((s) => s.location),
  );
  // Only saves under the swept root: one kept in another bucket (another cloud's) has objects this listing cannot see.
  const none = (l: string) => l.startsWith(root) && !late.has(l) && !keptObjectUris.some((u) => u.startsWith(l));
  const superseded = saves.superseded.filter(none);
  const logged = (saves.bytes?.saves ?? [])
    .filter((s) => s.deletedAtMs === undefined && !saves.superseded.includes(s.location) && none(s.location))
    .map((s) => s.location);
  return [...superseded, ...new Set(logged)];
}

/**
 * Whether the checkpoint object at `objectUri`, last written at `modifiedAtMs`, may be deleted:
 * the retention the checkpoint index derives (the bucket's own lifecycle expires none of them).
 * A job keeps what it can resume from, not its history:
 * - Its resume points (the index's newest complete save, and the one the job's record names,
 *   should the two differ) are never deleted while it may still run; once it has ended, they go
 *   when the retention (`checkpoints.expireAfterDays`) has passed since it ended.
 * - The save its newest one replaced is kept for {@link PREVIOUS_SAVE_KEPT_MS} after the
 *   replacement while the job is live, then goes.
 * - Saves replaced before that go at the next sweep.
 * - An object of no save recorded complete (an upload under way, a torn one, a save refused) is
 *   kept for {@link UNRECORDED_SAVE_KEPT_MS} after it was written, then goes.
 * - An object of a job not on record goes once the retention has passed (it may be another
 *   deployment's, or a job whose record is not written yet).
 * So after a sweep a live job holds at most two complete saves.
 */
export function checkpointObjectExpired(o: {
  readonly objectUri: string;
  readonly modifiedAtMs: number;
  readonly job: Job | undefined;
  readonly saves: RetainedSaves;
  readonly nowMs: number;
  readonly retentionMs: number;
}): boolean {
  const { job, saves } = o;
  if (!job) return o.modifiedAtMs <= o.nowMs - o.retentionMs;
  const under = (location: string | undefined) => location !== undefined && o.objectUri.startsWith(location);
  const ended = isTerminal(job.state);
  if (under(saves.newest?.location) || under(job.checkpoint?.location)) return ended && job.updatedAtMs <= o.nowMs - o.retentionMs;
  if (under(saves.previous?.location)) return ended || (saves.replacedAtMs ?? 0) <= o.nowMs - PREVIOUS_SAVE_KEPT_MS;
  if (saves.superseded.some(under)) return true;
  return o.modifiedAtMs <= o.nowMs - UNRECORDED_SAVE_KEPT_MS;
}

/** A completion a checkpoint store refused (see {@link checkpointCompletion}): the store is left as it was. */
export class CheckpointRefused extends GpuFleetError {
  override name = 'CheckpointRefused';
}

/** The folder attempt `attempt` of a job writes its checkpoints in, under a checkpoint root (`s3://bucket/prefix/`, `file:///path/`). */
export function checkpointFolder(root: string, jobId: string, attempt: number): string {
  return `${root.endsWith('/') ? root : `${root}/`}${encodeURIComponent(jobId)}/attempt-${attempt}/`;
}

/** Where rank `rank`'s part of a checkpoint lives. */
export function checkpointPartLocation(ref: Pick<CheckpointRef, 'location' | 'ranks'>, rank: number): string {
  return (ref.ranks ?? 1) > 1 ? `${ref.location}rank-${rank}/` : ref.location;
}

export interface Job {
  readonly id: string;
  readonly team: string;
  /** The validated spec; for a rejected job, absent (the raw body is in `rejected.body`). */
  readonly spec: JobSpec;
  readonly state: JobState;
  /** Bumped on every write; stores compare it so racing writers cannot both win. */
  readonly version: number;
  /** 1 for the first run; + 1 each time the job goes back to pending after it was placed. */
  readonly attempt: number;
  readonly submittedAtMs: number;
  readonly updatedAtMs: number;
  /** When the job last entered pending: the clock for its current wait. */
  readonly queuedAtMs: number;
  /** Total time spent pending so far, excluding the current wait. */
  readonly waitedMs: number;
  readonly placement?: Placement;
  readonly placedAtMs?: number;
  readonly startedAtMs?: number;
  readonly firstStartedAtMs?: number;
  readonly checkpoint?: CheckpointRef;
  /** Set while pending when a budget or limit keeps the job waiting. */
  readonly hold?: Reason;
  /** Why the job went back to pending the last time (interrupted, node lost, preempted). */
  readonly requeueReason?: Reason;
  /** Why its checkpoint was asked for, while it is checkpointing: the reason it is requeued with. */
  readonly checkpointReason?: Reason;
  /** When its checkpoint was asked for, while it is checkpointing: the control plane gives up waiting after the checkpoint's time limits. */
  readonly checkpointRequestedAtMs?: number;
  /** Times the job went back to the queue, whatever the cause (interruptions and moves; see requeueCounts). */
  readonly interruptions: number;
  /** Of those, the moves gpu-fleet decided itself (see isMove); absent on records written before it was counted. */
  readonly moves?: number;
  readonly rejection?: {
    readonly errors: readonly string[];
    readonly body: string;
    /** The digest of the whole body, `env` values redacted (the body kept is cut at 16 KiB): core/job-spec.ts `rejectedBodyDigest`. */
    readonly bodyDigest?: string;
  };
  readonly exitCode?: number;
  /** Why it failed, where its machine knew more than the exit code (the kernel killed it for its memory). */
  readonly failure?: Reason;
  readonly endedAtMs?: number;
  readonly cancelRequested?: boolean;
  /** Finished attempts' use and cost (absent until an attempt ends). */
  readonly usage?: JobUsage;
  /** What right-sizing decided at intake (a spec with `gpu.rightsize`): the shape it changed or suggested, and why. */
  readonly rightsize?: RightsizeDecision;
  /** The attempts that ended in the last {@link HELD_ATTEMPTS_KEPT_MS}: what they held and when, for exact spend. */
  readonly heldAttempts?: readonly HeldAttempt[];
  /**
   * A service replica's readiness as its agent last found it (its readiness path on its port, from
   * the machine): written when it changes, with the time it changed. The services step reads it for
   * a service without a front door (with one, the target group's health checks say).
   */
  readonly replicaHealth?: { readonly attempt: number; readonly answering: boolean; readonly sinceMs: number };
}

/**
 * One finished attempt's hold on its machines: its GPUs on each node, from placement to end. Each
 * node's entry names the GPUs themselves (records written before it did not): until that node's
 * agent reports the attempt stopped, they are not free (core/planner/indexing.ts `indexStaleHolds`).
 */
export interface HeldAttempt {
  readonly attempt: number;
  readonly nodes: readonly ({ readonly nodeId: string; readonly milliGpu: number } & Partial<
    Pick<NodeAssignment, 'gpuIndices' | 'mig' | 'share'>
  >)[];
  readonly fromMs: number;
  readonly toMs: number;
}

/**
 * How long a finished attempt's holdings stay on its job: spend accrual charges them from there,
 * so a gap between reconciles up to this long (a degraded cloud, a stuck lease) is still charged
 * to the teams that held the machines; an older gap's share goes to (idle).
 */
export const HELD_ATTEMPTS_KEPT_MS = 48 * 3_600_000;

/** The job's recent holdings with its current attempt's added (unchanged when it was never placed). */
export function closeHolding(job: Job, nowMs: number): { heldAttempts?: readonly HeldAttempt[] } {
  const kept = (job.heldAttempts ?? []).filter((h) => h.toMs >= nowMs - HELD_ATTEMPTS_KEPT_MS);
  const p = job.placement;
  const fromMs = job.placedAtMs ?? job.startedAtMs;
  const current: HeldAttempt[] =
    p && fromMs !== undefined
      ? [
          {
            attempt: job.attempt,
            nodes: p.nodes.map((a) => ({
              nodeId: a.nodeId,
              milliGpu: assignmentMilliGpu(a),
              gpuIndices: a.gpuIndices,
              ...(a.mig ? { mig: a.mig } : {}),
              ...(a.share ? { share: a.share } : {}),
            })),
            fromMs,
            toMs: nowMs,
          },
        ]
      : [];
  const all = [...kept.filter((h) => h.attempt !== job.attempt), ...current];
  return all.length > 0 ? { heldAttempts: all } : {};
}

export type JobEvent =
  | { readonly type: 'place'; readonly attempt: number; readonly placement: Placement }
  | { readonly type: 'start'; readonly attempt: number }
  | { readonly type: 'checkpoint-requested'; readonly attempt: number; readonly reason?: Reason }
  | { readonly type: 'checkpoint-done'; readonly checkpoint: CheckpointRef }
  /** Back to pending (attempt + 1) from placed, running or checkpointing: interruption, node lost, preemption. */
  | { readonly type: 'requeue'; readonly attempt: number; readonly reason: Reason; readonly gpuUse?: AttemptGpuUse }
  | { readonly type: 'succeed'; readonly attempt: number; readonly gpuUse?: AttemptGpuUse }
  | {
      readonly type: 'fail';
      readonly attempt: number;
      readonly exitCode: number;
      readonly gpuUse?: AttemptGpuUse;
      /** What the machine knew of why (see {@link AGENT_FAILURE_CODES}). */
      readonly failure?: Reason;
    }
  | { readonly type: 'cancel' }
  | { readonly type: 'hold'; readonly reason: Reason }
  | { readonly type: 'release-hold' }
  /** A replica's readiness path answers now, or no longer does (its agent's probe); only a change is written. */
  | { readonly type: 'replica-health'; readonly attempt: number; readonly answering: boolean };

export type TransitionResult =
  { readonly ok: true; readonly job: Job; readonly changed: boolean } | { readonly ok: false; readonly error: string };

const ALLOWED: Record<JobEvent['type'], readonly JobState[]> = {
  place: ['pending'],
  start: ['placed'],
  'checkpoint-requested': ['running', 'placed'],
  'checkpoint-done': ['running', 'checkpointing', 'placed', 'pending'],
  requeue: ['placed', 'running', 'checkpointing'],
  succeed: ['placed', 'running', 'checkpointing'],
  fail: ['placed', 'running', 'checkpointing'],
  cancel: ['pending', 'placed', 'running', 'checkpointing'],
  hold: ['pending'],
  'release-hold': ['pending'],
  'replica-health': ['placed', 'running'],
};

/**
 * Applies one event to a job at `nowMs`. Pure. An event for another attempt, or one that has
 * already been applied, returns `changed: false` with the job as it is (idempotent); an
 * event that makes no sense in the current state returns an error.
 */
export function transition(job: Job, event: JobEvent, nowMs: number): TransitionResult {
  if ('attempt' in event && event.attempt !== job.attempt) {
    return { ok: true, job, changed: false };
  }
  if (event.type === 'checkpoint-done' && event.checkpoint.jobId !== job.id) {
    return { ok: false, error: `checkpoint of job ${event.checkpoint.jobId} given to job ${job.id}` };
  }
  if (!ALLOWED[event.type].includes(job.state)) {
    if (isTerminal(job.state) || alreadyApplied(job, event)) return { ok: true, job, changed: false };
    return { ok: false, error: `job ${job.id} is ${job.state}; "${event.type}" is allowed only when ${ALLOWED[event.type].join(' or ')}` };
  }
  const base = { ...job, version: job.version + 1, updatedAtMs: nowMs };
  switch (event.type) {
    case 'place':
      return changed({
        ...base,
        state: 'placed',
        placement: event.placement,
        placedAtMs: nowMs,
        waitedMs: job.waitedMs + (nowMs - job.queuedAtMs),
        hold: undefined,
      });
    case 'start':
      return changed({ ...base, state: 'running', startedAtMs: nowMs, firstStartedAtMs: job.firstStartedAtMs ?? nowMs });
    case 'checkpoint-requested':
      if (job.state === 'placed') return { ok: true, job, changed: false };
      return changed({
        ...base,
        state: 'checkpointing',
        checkpointRequestedAtMs: nowMs,
        ...(event.reason ? { checkpointReason: event.reason } : {}),
      });
    case 'checkpoint-done': {
      const cp = event.checkpoint;
      if (
        job.checkpoint &&
        (job.checkpoint.completedAtMs > cp.completedAtMs ||
          (job.checkpoint.completedAtMs === cp.completedAtMs && job.checkpoint.progressSec >= cp.progressSec))
      ) {
        return { ok: true, job, changed: false };
      }
      return changed({ ...base, checkpoint: cp });
    }
    case 'requeue':
      // A job whose cancel was asked for is not put back in the queue: it ends cancelled.
      if (job.cancelRequested)
        return changed({
          ...base,
          state: 'cancelled',
          endedAtMs: nowMs,
          usage: closeAttempt(job, nowMs, false, event.gpuUse),
          ...closeHolding(job, nowMs),
        });
      return changed({
        ...base,
        usage: closeAttempt(job, nowMs, true, event.gpuUse),
        ...closeHolding(job, nowMs),
        state: 'pending',
        attempt: job.attempt + 1,
        placement: undefined,
        placedAtMs: undefined,
        startedAtMs: undefined,
        queuedAtMs: nowMs,
        requeueReason: event.reason,
        replicaHealth: undefined,
        checkpointReason: undefined,
        checkpointRequestedAtMs: undefined,
        interruptions: job.interruptions + 1,
        ...(isMove(event.reason.code) ? { moves: (job.moves ?? 0) + 1 } : {}),
        cancelRequested: undefined,
      });
    case 'succeed':
      return changed({
        ...base,
        state: 'succeeded',
        exitCode: 0,
        endedAtMs: nowMs,
        usage: closeAttempt(job, nowMs, false, event.gpuUse),
        ...closeHolding(job, nowMs),
      });
    case 'fail':
      return changed({
        ...base,
        state: 'failed',
        exitCode: event.exitCode,
        ...(event.failure ? { failure: event.failure } : {}),
        endedAtMs: nowMs,
        usage: closeAttempt(job, nowMs, false, event.gpuUse),
        ...closeHolding(job, nowMs),
      });
    case 'cancel':
      if (job.state === 'pending') {
        return changed({ ...base, state: 'cancelled', endedAtMs: nowMs, waitedMs: job.waitedMs + (nowMs - job.queuedAtMs) });
      }
      if (job.cancelRequested) return { ok: true, job, changed: false };
      // A placed or running job is stopped by its node agent, which then reports it cancelled.
      return changed({ ...base, cancelRequested: true });
    case 'hold':
      if (sameReason(job.hold, event.reason)) return { ok: true, job, changed: false };
      return changed({ ...base, hold: event.reason });
    case 'release-hold':
      if (!job.hold) return { ok: true, job, changed: false };
      return changed({ ...base, hold: undefined });
    case 'replica-health':
      if (!job.spec.service) return { ok: false, error: `job ${job.id} is not a service replica: it has no readiness to report` };
      if (job.replicaHealth?.attempt === event.attempt && job.replicaHealth.answering === event.answering)
        return { ok: true, job, changed: false };
      return changed({ ...base, replicaHealth: { attempt: event.attempt, answering: event.answering, sinceMs: nowMs } });
  }
}

function changed(job: Job): TransitionResult {
  return { ok: true, job, changed: true };
}

function sameReason(a: Reason | undefined, b: Reason | undefined): boolean {
  return a?.code === b?.code && a?.message === b?.message;
}

function alreadyApplied(job: Job, event: JobEvent): boolean {
  switch (event.type) {
    case 'start':
      return job.state === 'running' || job.state === 'checkpointing';
    case 'checkpoint-requested':
      return job.state === 'checkpointing';
    default:
      return false;
  }
}

/** Marks a stopped job (after cancelRequested) as cancelled; the agent calls this once the process is gone. */
export function finishCancel(job: Job, nowMs: number, gpuUse?: AttemptGpuUse): TransitionResult {
  if (job.state === 'cancelled') return { ok: true, job, changed: false };
  if (!job.cancelRequested || isTerminal(job.state)) {
    return { ok: false, error: `job ${job.id} is ${job.state} without a pending cancel` };
  }
  return changed({
    ...job,
    state: 'cancelled',
    version: job.version + 1,
    updatedAtMs: nowMs,
    endedAtMs: nowMs,
    usage: closeAttempt(job, nowMs, false, gpuUse),
    ...closeHolding(job, nowMs),
  });
}

/**
 * The job's usage with its current attempt added (unchanged when the attempt was never placed),
 * with the attempt's measured GPU use when its agent reported one for this attempt.
 */
export function closeAttempt(job: Job, nowMs: number, interrupted: boolean, gpuUse?: AttemptGpuUse): JobUsage | undefined {
  const p = job.placement;
  const from = job.placedAtMs ?? job.startedAtMs;
  if (!p || from === undefined) return job.usage;
  const heldMs = Math.max(0, nowMs - from);
  const u = job.usage ?? { attempts: 0, heldSec: 0, gpuSec: 0, spotSec: 0, costMicroUsd: 0, onDemandMicroUsd: 0, reworkSec: 0 };
  const cpMs = job.checkpoint && job.checkpoint.attempt === job.attempt ? job.checkpoint.completedAtMs : undefined;
  const lostMs = interrupted && job.startedAtMs !== undefined ? Math.max(0, nowMs - Math.max(job.startedAtMs, cpMs ?? 0)) : 0;
  return {
    attempts: u.attempts + 1,
    heldSec: u.heldSec + heldMs / 1000,
    gpuSec: u.gpuSec + ((p.milliGpu ?? 0) / 1000) * (heldMs / 1000),
    spotSec: u.spotSec + (p.capacityType === 'spot' ? heldMs / 1000 : 0),
    costMicroUsd: u.costMicroUsd + costForDuration(p.priceMicroUsdPerHour ?? 0, heldMs),
    onDemandMicroUsd: u.onDemandMicroUsd + costForDuration(p.onDemandMicroUsdPerHour ?? p.priceMicroUsdPerHour ?? 0, heldMs),
    reworkSec: u.reworkSec + lostMs / 1000,
    ...(p.capacityType === 'reserved' || u.reservedMicroUsd !== undefined
      ? {
          reservedMicroUsd:
            (u.reservedMicroUsd ?? 0) + (p.capacityType === 'reserved' ? costForDuration(p.priceMicroUsdPerHour ?? 0, heldMs) : 0),
        }
      : {}),
    ...withGpuUse(u.gpuUse, gpuUse?.attempt === job.attempt ? gpuUse : undefined),
  };
}

function withGpuUse(kept: readonly AttemptGpuUse[] | undefined, added: AttemptGpuUse | undefined): { gpuUse?: readonly AttemptGpuUse[] } {
  const all = [...(kept ?? []).filter((k) => k.attempt !== added?.attempt), ...(added ? [added] : [])];
  return all.length > 0 ? { gpuUse: all.slice(-GPU_USE_KEPT) } : {};
}

export interface NewJob {
  readonly id: string;
  readonly team: string;
  readonly spec: JobSpec;
  readonly submittedAtMs: number;
}

export function newPendingJob(input: NewJob): Job {
  return {
    id: input.id,
    team: input.team,
    spec: input.spec,
    state: 'pending',
    version: 1,
    attempt: 1,
    submittedAtMs: input.submittedAtMs,
    updatedAtMs: input.submittedAtMs,
    queuedAtMs: input.submittedAtMs,
    waitedMs: 0,
    interruptions: 0,
  };
}

/**
 * The most a job's stored form may hold, bytes of its JSON: DynamoDB refuses an item over 400 KB
 * (names and values together), and a job grows as it runs (its attempts' holdings, its GPU use),
 * so intake refuses a spec whose new record would already pass this.
 */
export const MAX_STORED_JOB_BYTES = 350_000;
/** The most problems a rejected job's record keeps; the rest are counted. */
export const REJECTION_ERRORS_KEPT = 50;
/** The most characters of one problem a rejected job's record keeps. */
const REJECTION_ERROR_CHARS = 1000;

/** The bytes of a record's stored form (its JSON, UTF-8): what {@link MAX_STORED_JOB_BYTES} bounds, and near what DynamoDB counts. */
export function storedBytes(record: unknown): number {
  return new TextEncoder().encode(JSON.stringify(record)).length;
}

/**
 * A rejected job keeps the body it was sent (every `env` value replaced by its length, cut at 16
 * KiB: core/job-spec.ts `rejectedBody`) and its reasons (the first {@link REJECTION_ERRORS_KEPT},
 * the rest counted), so what was wrong is on record and the record always fits the store.
 */
export function newRejectedJob(input: Omit<NewJob, 'spec'> & { errors: readonly string[]; body: string }): Job {
  return {
    id: input.id,
    team: input.team,
    spec: REJECTED_PLACEHOLDER_SPEC,
    state: 'rejected',
    version: 1,
    attempt: 0,
    submittedAtMs: input.submittedAtMs,
    updatedAtMs: input.submittedAtMs,
    queuedAtMs: input.submittedAtMs,
    waitedMs: 0,
    interruptions: 0,
    rejection: {
      // However many problems a body has (20,000 bad label keys), its record stays small enough to store.
      errors: [
        ...input.errors
          .slice(0, REJECTION_ERRORS_KEPT)
          .map((e) => (e.length > REJECTION_ERROR_CHARS ? `${e.slice(0, REJECTION_ERROR_CHARS)}…` : e)),
        ...(input.errors.length > REJECTION_ERRORS_KEPT ? [`… and ${input.errors.length - REJECTION_ERRORS_KEPT} more problems`] : []),
      ],
      body: rejectedBody(input.body),
      bodyDigest: rejectedBodyDigest(input.body),
    },
    endedAtMs: input.submittedAtMs,
  };
}

/** Stands in for the spec of a rejected job, which has none; never scheduled (the state is terminal). */
const REJECTED_PLACEHOLDER_SPEC: JobSpec = {
  image: 'rejected',
  command: ['false'],
  env: {},
  secrets: [],
  gpu: { kind: 'whole', count: 1 },
  nodes: 1,
  priority: 0,
  interruptible: true,
  labels: {},
};

/**
 * Deterministic job id from the team and the submitter's idempotency token (or the queue
 * message id): the same message delivered twice makes the same id, and two teams can never
 * collide. Characters outside [A-Za-z0-9_-] are escaped at a fixed width, so distinct tokens give
 * distinct ids: a code point up to U+00FF as `~` and two hex digits (`a b` → `a~20b`, as ids were
 * before), any other as `~~` and six (`Ā` → `~~000100`). An escape never contains a `~`, so
 * `~~` cannot be read any other way.
 */
export function jobIdFor(team: string, token: string): string {
  const safe = token.replace(/[^A-Za-z0-9_-]/gu, (c) => {
    const code = c.codePointAt(0)!;
    return code <= 0xff ? `~${code.toString(16).padStart(2, '0')}` : `~~${code.toString(16).padStart(6, '0')}`;
  });
  return `${team}.${safe}`;
}

export const MAX_IDEMPOTENCY_TOKEN_LENGTH = 128;

/** The total wait: time pending over every attempt so far, the current wait included (boots not counted). */
export function waitMsSoFar(job: Job, nowMs: number): number {
  return job.waitedMs + (job.state === 'pending' ? nowMs - job.queuedAtMs : 0);
}

/** The first wait: from submission to the first start, or to now (or its end) for a job that never started. */
export function firstWaitMs(job: Job, nowMs: number): number {
  return (job.firstStartedAtMs ?? (isTerminal(job.state) ? (job.endedAtMs ?? nowMs) : nowMs)) - job.submittedAtMs;
}

/** Attempts that started: each requeue ended one, and the current one counts once it has been placed on a machine. */
export function attemptsRun(job: Job): number {
  if (job.firstStartedAtMs === undefined && job.state !== 'placed') return 0;
  return job.interruptions + (job.state === 'pending' ? 0 : 1);
}

/**
 * Rework: GPU-hours of work lost since the newest checkpoint at the end of each attempt that was
 * requeued (an attempt still running has lost nothing yet). Restores and checkpoint pauses are
 * not rework: the simulation counts them apart.
 */
export function reworkGpuHours(job: Job): number {
  return ((job.usage?.reworkSec ?? 0) * milliGpusUsed(job.spec.gpu) * job.spec.nodes) / 1000 / 3600;
}

/**
 * A move is a requeue gpu-fleet decided itself to save money or keep a promise: back to spot,
 * consolidation, a deadline, a higher priority, a spent budget. Everything else is an
 * interruption: the machine was taken back, lost, or could not run the job.
 */
export function isMove(code: ReasonCode): boolean {
  return MOVE_CODES.has(code);
}

const MOVE_CODES: ReadonlySet<ReasonCode> = new Set<ReasonCode>([
  'rebalance-to-spot',
  'scale-in-consolidate',
  'deadline-on-demand',
  'deadline-spot-safe',
  'preempt-for-priority',
  'budget-stop',
]);

/** A job's requeues split into interruptions (machine taken back, lost or failed) and moves gpu-fleet decided. */
export function requeueCounts(job: Pick<Job, 'interruptions' | 'moves'>): { requeues: number; interruptions: number; moves: number } {
  const moves = Math.min(job.moves ?? 0, job.interruptions);
  return { requeues: job.interruptions, interruptions: job.interruptions - moves, moves };
}

/**
 * What the job has held and cost up to `nowMs`: its finished attempts and, while one is placed or
 * running, that attempt as if it ended now. The one "cost so far" of status, report and explain.
 */
export function usageSoFar(job: Job, nowMs: number): JobUsage | undefined {
  return ACTIVE_STATES.includes(job.state) && job.placement
    ? closeAttempt(job, Math.max(nowMs, job.placedAtMs ?? nowMs), false)
    : job.usage;
}
