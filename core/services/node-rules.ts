import type { GpuDevice } from '../gpu.ts';
import { ACTIVE_STATES, type CheckpointRef, type Job, type Placement } from '../job.ts';
import { migProfile } from '../mig.ts';
import { reason, type Reason } from '../reason.ts';
import { SAVE_MIB_PER_SEC } from '../save-price.ts';

/**
 * The node-side rules: what a machine does with each entry of its work list, decided here once
 * and carried out by the real node agent (agent/agent.ts: processes, files, S3) and by the
 * simulated machines (cloud/sim/sim-agent.ts: the same steps on a virtual clock). The job record
 * decides; the machine adds only what it knows locally (what runs here, how it ended, what it is
 * doing about it).
 */

/** What a node agent does with one entry of its work list (job id → attempt). */
export type WorkVerdict = 'run' | 'stale' | 'wait';

/**
 * Reconcile writes the entry just before it places the attempt, so the job record decides:
 * - `run`: the attempt is placed on this node (placed, running or checkpointing): run it here.
 * - `stale`: the job moved on (finished, a newer attempt, or placed elsewhere): drop the entry.
 * - `wait`: the placement has not landed (yet): keep the entry and look again next time.
 */
export function judgeWorkEntry(job: Job | undefined, nodeId: string, attempt: number): WorkVerdict {
  if (!job || job.attempt > attempt) return 'stale';
  if (job.attempt < attempt) return 'wait';
  if (ACTIVE_STATES.includes(job.state)) return job.placement?.nodes.some((n) => n.nodeId === nodeId) ? 'run' : 'stale';
  return job.state === 'pending' ? 'wait' : 'stale';
}

/** This node's part of a gang: its rank (0 leads and reports the job's outcome) and how many nodes take part. */
export function gangRank(job: Job, nodeId: string): { rank: number; size: number } | undefined {
  const nodes = job.placement?.nodes ?? [];
  const rank = nodes.findIndex((n) => n.nodeId === nodeId);
  return rank < 0 ? undefined : { rank, size: nodes.length };
}

/** What the machine knows of its own process for one attempt. */
export interface LocalAttempt {
  readonly rank: number;
  /** The process ended by itself (the agent did not stop it), with this exit code. */
  readonly exitCode?: number;
  /** The agent is taking a checkpoint it was asked for, and what it does once it is taken. */
  readonly checkpointing?: 'requeue' | 'cancel';
  /** The agent is stopping the process on purpose. */
  readonly stopping?: boolean;
}

/** The next thing a machine does for one entry of its work list. */
export type NodeStep =
  /** The entry is stale: drop it, and stop a process of it that still runs here. */
  | { readonly kind: 'drop' }
  /** The placement has not landed yet: look again next time. */
  | { readonly kind: 'wait' }
  /** Start this node's part of the attempt (the leader then records it running). */
  | { readonly kind: 'launch'; readonly rank: number; readonly size: number }
  /** It runs: save each checkpoint the job marks, in the background. */
  | { readonly kind: 'run' }
  /** A checkpoint is being taken or the process is being stopped: let that finish. */
  | { readonly kind: 'busy' }
  /** Ask the job for a checkpoint, save it, stop the process, then requeue or cancel the attempt. */
  | { readonly kind: 'checkpoint'; readonly then: 'requeue' | 'cancel'; readonly reason: Reason }
  /** Stop the process (a cancel of a job that cannot checkpoint); `records`: this node (the leader) records it cancelled. */
  | { readonly kind: 'stop-cancel'; readonly records: boolean }
  /** The process ended by itself: report how (see {@link exitReport}). */
  | { readonly kind: 'report-exit'; readonly exitCode: number }
  /** Nothing runs here for an attempt that is checkpointing (the agent restarted): `records`: this node (the leader) requeues it from the newest checkpoint. */
  | { readonly kind: 'requeue-from-store'; readonly reason: Reason; readonly records: boolean }
  /** A job whose cancel was asked for has no process here: `records`: this node (the leader) records it cancelled. */
  | { readonly kind: 'finish-cancel'; readonly records: boolean };

const CHECKPOINTED_ON_REQUEST = reason('preempt-for-priority', 'checkpointed on request and returned to the queue');
export const CANCELLED = reason('cancelled', 'cancelled: checkpointed, then stopped');

/**
 * The step for one work-list entry, from the job record and what runs here. Pure; called at
 * every look at the work list (every heartbeat on a real machine, every tick in the simulator).
 */
export function nextNodeStep(job: Job | undefined, nodeId: string, attempt: number, local: LocalAttempt | undefined): NodeStep {
  const verdict = judgeWorkEntry(job, nodeId, attempt);
  if (verdict === 'stale') return { kind: 'drop' };
  if (verdict === 'wait' || !job) return { kind: 'wait' };
  const where = gangRank(job, nodeId)!;
  // Only the leader writes what becomes of the attempt: the others stop, and forget.
  const records = where.rank === 0;
  if (local?.stopping || local?.checkpointing) return { kind: 'busy' };
  if (job.cancelRequested) {
    if (local && local.exitCode === undefined && job.spec.checkpoint) return { kind: 'checkpoint', then: 'cancel', reason: CANCELLED };
    if (local && local.exitCode === undefined) return { kind: 'stop-cancel', records: local.rank === 0 };
    return { kind: 'finish-cancel', records };
  }
  if (local?.exitCode !== undefined) return { kind: 'report-exit', exitCode: local.exitCode };
  if (job.state === 'checkpointing') {
    if (local) return { kind: 'checkpoint', then: 'requeue', reason: job.checkpointReason ?? CHECKPOINTED_ON_REQUEST };
    return {
      kind: 'requeue-from-store',
      reason:
        job.checkpointReason ??
        reason('preempt-for-priority', 'checkpoint requested while no process ran; requeued from its newest checkpoint'),
      records,
    };
  }
  if (!local) return { kind: 'launch', rank: where.rank, size: where.size };
  return { kind: 'run' };
}

/** One entry of a machine's work list as read at a look: the attempt, the job's record, what runs here for it. */
export interface WorkListEntry {
  readonly jobId: string;
  readonly attempt: number;
  readonly job: Job | undefined;
  readonly local: LocalAttempt | undefined;
}

/** An attempt that runs here, as the work-list plan sees it; `busy`: saving a checkpoint asked for, or being stopped. */
export interface AttemptHere {
  readonly jobId: string;
  readonly attempt: number;
  readonly busy: boolean;
}

/** What a machine does at one look at its work list, in this order. */
export interface WorkListPlan<E extends WorkListEntry, L extends AttemptHere> {
  /** Attempts here that are no longer this machine's (the job moved on): stop them first, so two attempts of a job never run at once. */
  readonly stop: readonly L[];
  /** Attempts no longer this machine's whose save is under way: let it end (the index may still take it), then they stop. */
  readonly finishing: readonly L[];
  /** Each entry's step ({@link nextNodeStep}), in the list's order. */
  readonly steps: readonly (E & { readonly step: NodeStep })[];
}

/**
 * The plan for one look at the work list: each entry's step, and what of what runs here is no
 * longer this machine's. The one loop both agents carry out (the real agent at each heartbeat, the
 * simulated machines at each tick).
 */
export function planWorkList<E extends WorkListEntry, L extends AttemptHere>(
  nodeId: string,
  entries: readonly E[],
  here: readonly L[],
): WorkListPlan<E, L> {
  const current = new Set<string>();
  const steps = entries.map((e) => {
    const step = nextNodeStep(e.job, nodeId, e.attempt, e.local);
    if (step.kind !== 'drop' && step.kind !== 'wait') current.add(`${e.jobId}\u0000${e.attempt}`);
    return { ...e, step };
  });
  const gone = here.filter((l) => !current.has(`${l.jobId}\u0000${l.attempt}`));
  return { stop: gone.filter((l) => !l.busy), finishing: gone.filter((l) => l.busy), steps };
}

/**
 * What an agent that starts again does with one launch an earlier run of it left (a container that
 * outlived it): follow it again ("adopt") when its attempt is still assigned to this node, the work
 * list would launch that very rank here now (the job has not moved on, ended or been asked to
 * checkpoint), and nobody stopped it on purpose: neither the machine's watchdog nor the earlier
 * agent (which notes each stop and each checkpoint signal it sends before sending it: a fence, a
 * notice, a stop whose end it did not live to report). One that runs is followed to its end; one
 * that ended on its own is followed to have its end reported (it must not run again). Else it is
 * stopped and removed, and its attempt, if still the node's, starts again as a new process from its
 * newest checkpoint. The same rule for the real agent and the simulated ones.
 */
export function adoptsLeftover(o: {
  readonly assigned: boolean;
  readonly stoppedOnPurpose: boolean;
  readonly rank: number;
  readonly step: NodeStep;
}): boolean {
  return o.assigned && !o.stoppedOnPurpose && o.step.kind === 'launch' && o.step.rank === o.rank;
}

/** How a process that ended by itself is reported: the leader's success ends the job; any rank's failure fails it. */
export function exitReport(rank: number, exitCode: number): { readonly event: 'succeed' | 'fail'; readonly exitCode: number } | undefined {
  if (exitCode === 0) return rank === 0 ? { event: 'succeed', exitCode } : undefined; // a follower waits for its leader
  return { event: 'fail', exitCode };
}

/**
 * What a machine reports of a service replica it runs, after probing its readiness path: the event
 * to write when what it found differs from what the job says (only the first rank runs a replica),
 * or nothing. A replica whose process has ended, or that is being stopped, is not reported.
 */
export function replicaHealthReport(
  job: Job,
  rank: number,
  answering: boolean,
): { readonly type: 'replica-health'; readonly attempt: number; readonly answering: boolean } | undefined {
  if (!job.spec.service || rank !== 0 || job.cancelRequested || (job.state !== 'running' && job.state !== 'placed')) return undefined;
  const known = job.replicaHealth;
  if (known?.attempt === job.attempt && known.answering === answering) return undefined;
  return { type: 'replica-health', attempt: job.attempt, answering };
}

/**
 * Where a rank saves the checkpoint a marker names: a folder of its own under the attempt's
 * folder, never one an earlier save of the attempt wrote. A job that saves into one folder each
 * time (`latest/`) so never overwrites the checkpoint the index names newest and complete, and an
 * upload torn by a machine's end lies in a folder the index never names.
 * - the marker's own folder, `<path>/`, the first time the attempt saves it;
 * - `<path>@2/`, `<path>@3/`, … each time it is saved again (the first such name not yet used).
 * The name depends only on the folders the attempt's markers named, in order, so the ranks of a
 * gang, each reading its own marker, name the same folder and their parts make up one save.
 * `used` is the folders this rank's saves of the attempt took, the new one not yet in it.
 */
export function saveLocation(attemptFolder: string, markerPath: string, used: ReadonlySet<string>): string {
  const base = `${attemptFolder}${markerPath.replace(/\/+$/, '')}`;
  if (!used.has(`${base}/`)) return `${base}/`;
  for (let k = 2; ; k++) if (!used.has(`${base}@${k}/`)) return `${base}@${k}/`;
}

/**
 * The checkpoint a new attempt resumes from: the newer of the index's newest complete one and the
 * one the job's record names (by completion, then progress, as the index orders them). The index
 * may know of a newer one than the record (a save that completed after the attempt was requeued);
 * the record is used alone only when the index has none (or could not be read).
 */
export function resumePoint(job: Job, indexed: CheckpointRef | undefined): CheckpointRef | undefined {
  const own = job.checkpoint;
  if (!indexed || !own) return indexed ?? own;
  const indexedNewer =
    indexed.completedAtMs > own.completedAtMs || (indexed.completedAtMs === own.completedAtMs && indexed.progressSec >= own.progressSec);
  return indexedNewer ? indexed : own;
}

/** A rank that cannot start its part ends the whole attempt: it goes back to the queue, and the other ranks stop. */
export function startFailure(nodeId: string, why: string): Reason {
  return reason('start-failed', `node ${nodeId} could not start it: ${why}`);
}

/**
 * How a checkpoint taken on request ended, and what the attempt becomes. A process that had
 * already ended before it was asked ended by itself, and its own exit decides. Only the leader
 * writes the result; followers stop and forget.
 */
export type CheckpointOutcome =
  | { readonly kind: 'exited-before'; readonly exitCode: number }
  /** The job's checkpoint is saved (every rank's part, for a gang). */
  | { readonly kind: 'saved' }
  /** No checkpoint in time: the job wrote none within its grace, or the upload failed or ran out of time; it resumes from the newest one saved earlier. */
  | { readonly kind: 'not-saved'; readonly why: string };

/**
 * What the node sees, at one look, of a checkpoint it asked for (its process, the job's markers,
 * the saves of them): the one description both agents give {@link checkpointVerdict}.
 */
export interface SaveWatch {
  readonly nowMs: number;
  /** The limits the checkpoint was asked under ({@link checkpointLimits}). */
  readonly writeByMs: number;
  readonly uploadByMs: number;
  /** The process had ended before it was asked, with this exit code: its own end decides. */
  readonly endedBeforeExitCode?: number;
  /** The job's grace to write one, seconds; undefined: the job declares no checkpoint support. */
  readonly graceSec: number | undefined;
  /** The job wrote a marker newer than the newest it had written when asked. */
  readonly wroteNew: boolean;
  /** The process has ended since it was asked. */
  readonly ended: boolean;
  /**
   * How the save of the newest marker ended, once it has (and no newer marker waits behind it);
   * undefined while it is queued or uploading.
   */
  readonly newestSave?: { readonly ok: true; readonly complete: boolean } | { readonly ok: false; readonly error: string };
  /** A gang's leader, whose save is one part: whether the index holds the newest save complete (every rank's part). */
  readonly gangSaved?: boolean;
}

/**
 * How a checkpoint asked for has ended, from what the node sees now; undefined while it is still
 * under way (the node looks again when something changes or a limit passes). Both agents ask this
 * at each look: the real one as its process, markers and uploads change, the simulated ones at each
 * tick; neither decides the outcome itself.
 */
export function checkpointVerdict(w: SaveWatch): CheckpointOutcome | undefined {
  if (w.endedBeforeExitCode !== undefined) return { kind: 'exited-before', exitCode: w.endedBeforeExitCode };
  if (w.graceSec === undefined) return { kind: 'not-saved', why: 'no checkpoint support' };
  if (!w.wroteNew)
    return w.ended || w.nowMs >= w.writeByMs ? { kind: 'not-saved', why: `it wrote none within its ${w.graceSec} s grace` } : undefined;
  const save = w.newestSave;
  if (!save) return w.nowMs >= w.uploadByMs ? { kind: 'not-saved', why: 'its upload did not finish within the allowance' } : undefined;
  if (!save.ok) return { kind: 'not-saved', why: `its upload failed: ${save.error}` };
  if (save.complete || w.gangSaved === undefined || w.gangSaved) return { kind: 'saved' };
  return w.nowMs >= w.uploadByMs ? { kind: 'not-saved', why: 'the other ranks did not save their parts within the allowance' } : undefined;
}

export type CheckpointResult =
  | { readonly event: 'succeed' }
  | { readonly event: 'fail'; readonly exitCode: number }
  | { readonly event: 'cancel' }
  | { readonly event: 'requeue'; readonly reason: Reason };

export function afterCheckpoint(job: Job, then: 'requeue' | 'cancel', why: Reason, outcome: CheckpointOutcome): CheckpointResult {
  if (outcome.kind === 'exited-before')
    return outcome.exitCode === 0 ? { event: 'succeed' } : { event: 'fail', exitCode: outcome.exitCode };
  if (then === 'cancel' || job.cancelRequested) return { event: 'cancel' };
  if (!job.spec.checkpoint)
    return {
      event: 'requeue',
      reason: { code: why.code, message: `${why.message}; it declares no checkpoint support, so it restarts from scratch` },
    };
  if (outcome.kind === 'not-saved') {
    return {
      event: 'requeue',
      reason: {
        code: why.code,
        message: `${why.message}; no new checkpoint was saved (${outcome.why}), so it resumes from its newest earlier one`,
      },
    };
  }
  return { event: 'requeue', reason: why };
}

// ---- how long a checkpoint may take -------------------------------------------------------

/** Upload speed assumed for a checkpoint, MiB/s per machine, when nothing better is known. */
export const DEFAULT_UPLOAD_MIB_PER_SEC = SAVE_MIB_PER_SEC;
/** Extra time an upload gets beyond size ÷ bandwidth. */
export const DEFAULT_UPLOAD_MARGIN_SEC = 120;
/** Extra time the control plane waits beyond the grace and the upload allowance before it gives up on a checkpoint. */
export const CHECKPOINT_TIMEOUT_MARGIN_SEC = 60;

export interface CheckpointTiming {
  readonly uploadMiBPerSec: number;
  readonly uploadMarginSec: number;
}

export const DEFAULT_CHECKPOINT_TIMING: CheckpointTiming = {
  uploadMiBPerSec: DEFAULT_UPLOAD_MIB_PER_SEC,
  uploadMarginSec: DEFAULT_UPLOAD_MARGIN_SEC,
};

/**
 * How large one rank's checkpoint is, MiB: the spec's `checkpoint.sizeGiB` when given; else the
 * GPU memory the attempt holds on that node (a checkpoint of the model and optimiser state that
 * fill it), from the node's GPUs: whole GPUs' memory, a share's memory, or a MIG slice's.
 */
export function checkpointSizeMiB(
  job: Pick<Job, 'spec'> & { readonly placement?: Pick<Placement, 'nodes'> },
  gpus: readonly Pick<GpuDevice, 'index' | 'model' | 'memoryMiB'>[] | undefined,
  nodeIndex = 0,
): number {
  const given = job.spec.checkpoint?.sizeGiB;
  if (given !== undefined) return Math.round(given * 1024);
  const a = job.placement?.nodes[nodeIndex];
  if (!a) return 0;
  if (a.share) return a.share.memoryMiB;
  if (a.mig) {
    const model = gpus?.find((g) => g.index === a.gpuIndices[0])?.model;
    return (model ? migProfile(model, a.mig.profile)?.memoryMiB : undefined) ?? Number(/\.(\d+)gb/.exec(a.mig.profile)?.[1] ?? 0) * 1024;
  }
  return a.gpuIndices.reduce((sum, i) => sum + (gpus?.find((g) => g.index === i)?.memoryMiB ?? 16_384), 0);
}

/**
 * Seconds between the saves a job is asked to make of its own accord on this attempt: the cadence
 * the planner chose where it placed the attempt (its save's price against the capacity's take-backs,
 * core/save-price.ts), else the spec's `checkpoint.intervalSec`; undefined for a job that does not
 * checkpoint. The real agent hands it to the job (GPU_FLEET_CHECKPOINT_INTERVAL_SEC); the simulated
 * agents save on it.
 */
export function saveEverySec(job: Pick<Job, 'spec' | 'placement'>): number | undefined {
  const longest = job.spec.checkpoint?.intervalSec;
  if (longest === undefined) return undefined;
  return Math.min(longest, job.placement?.saves?.everySec ?? longest);
}

/** Seconds an upload of `sizeMiB` is allowed: its size over the bandwidth, plus the margin. */
export function uploadAllowanceSec(sizeMiB: number, timing: CheckpointTiming = DEFAULT_CHECKPOINT_TIMING): number {
  return Math.ceil(sizeMiB / Math.max(1, timing.uploadMiBPerSec)) + timing.uploadMarginSec;
}

/**
 * The time limits of a checkpoint asked for at `requestedAtMs`: the job writes it within its
 * grace period; the upload then has its own allowance; a notice that the machine goes at
 * `hardDeadlineMs` bounds both (then the newest checkpoint already saved is what it resumes from).
 */
export function checkpointLimits(input: {
  readonly graceSec: number;
  readonly sizeMiB: number;
  readonly requestedAtMs: number;
  readonly hardDeadlineMs?: number;
  readonly timing?: CheckpointTiming;
}): { readonly writeByMs: number; readonly uploadByMs: number } {
  const hard = input.hardDeadlineMs ?? Number.POSITIVE_INFINITY;
  const writeByMs = Math.min(hard, input.requestedAtMs + input.graceSec * 1000);
  const uploadByMs = Math.min(hard, writeByMs + uploadAllowanceSec(input.sizeMiB, input.timing) * 1000);
  return { writeByMs, uploadByMs };
}

/** A checkpoint to take: what becomes of the attempt after it, why, and the limits it is taken within. */
export interface CheckpointPlan {
  readonly then: 'requeue' | 'cancel';
  readonly reason: Reason;
  readonly writeByMs: number;
  readonly uploadByMs: number;
}

/** The plan of a checkpoint asked for at `requestedAtMs` ({@link checkpointLimits} with what follows it). */
export function checkpointPlan(input: {
  readonly then: 'requeue' | 'cancel';
  readonly reason: Reason;
  readonly graceSec: number;
  readonly sizeMiB: number;
  readonly requestedAtMs: number;
  readonly hardDeadlineMs?: number;
  readonly timing?: CheckpointTiming;
}): CheckpointPlan {
  return { then: input.then, reason: input.reason, ...checkpointLimits(input) };
}

/**
 * How long the control plane lets a job stay `checkpointing` before it stops waiting for the
 * node and requeues it from its newest checkpoint: grace + upload allowance + a margin.
 */
export function checkpointTimeoutSec(job: Job, sizeMiB: number, timing: CheckpointTiming = DEFAULT_CHECKPOINT_TIMING): number {
  const grace = graceSecOf(job);
  return grace + uploadAllowanceSec(sizeMiB, timing) + CHECKPOINT_TIMEOUT_MARGIN_SEC;
}

/** The delay before retry `n` (1, 2, …) of a failed upload: doubling from 2 s, at most 60 s. */
export function uploadRetryDelayMs(n: number): number {
  return Math.min(60_000, 2000 * 2 ** Math.max(0, n - 1));
}

// ---- the agent's lease ----------------------------------------------------------------------

/**
 * The agent's lease on the work it runs: each heartbeat the control plane takes renews it. An
 * agent that has renewed nothing for `leaseSec` (the control plane unreachable, refusing it, or
 * the machine cut off) fences itself: it checkpoints each attempt within `fenceGraceSec`, stops
 * them all and starts nothing until a heartbeat is taken again; what it stopped it then reports
 * requeued (reason `fenced`). The lease is longer than reconcile's patience (Policy
 * `heartbeatTimeoutSec`, 90 s: a silent machine gets no new work) and, with the fence and the
 * agent's stop grace (30 s), shorter than the point where reconcile requeues a silent machine's
 * work (Policy `silentRequeueSec`, 300 s). So whichever side was wrong, no attempt runs on two
 * machines: an agent cut off stops its work before the work is placed anywhere else.
 */
export interface AgentLease {
  readonly leaseSec: number;
  readonly fenceGraceSec: number;
}

export const DEFAULT_AGENT_LEASE: AgentLease = { leaseSec: 180, fenceGraceSec: 60 };

/** The agent's stop grace (SIGTERM to SIGKILL) by default, seconds: part of the fence's length. */
export const DEFAULT_STOP_GRACE_SEC = 30;

/** Seconds from the last renewal until a fenced agent has stopped every process: lease + fence + stop grace. */
export function fencedBySec(lease: AgentLease = DEFAULT_AGENT_LEASE, stopGraceSec = DEFAULT_STOP_GRACE_SEC): number {
  return lease.leaseSec + lease.fenceGraceSec + stopGraceSec;
}

/**
 * The machine's watchdog (a root timer beside the agent, infra/node-setup.ts) stops every job
 * container once the lease the agent last renewed (its lease file, written at each renewal) is past
 * the lease and the fence: an agent that lives has stopped its work itself by then; one that died,
 * hung, or never renewed has not, and its containers must not run on into the time the control
 * plane may place their attempts elsewhere (Policy `silentRequeueSec`). The stop takes at most the
 * stop grace, so every container is gone by {@link fencedBySec} after the last renewal.
 * `renewedAtMs` undefined: no renewal on record (no lease file, or one unreadable) — stop.
 */
export function watchdogStops(renewedAtMs: number | undefined, nowMs: number, lease: AgentLease = DEFAULT_AGENT_LEASE): boolean {
  return renewedAtMs === undefined || nowMs - renewedAtMs > (lease.leaseSec + lease.fenceGraceSec) * 1000;
}

/**
 * Why an attempt whose process the machine's watchdog stopped goes back to the queue: its end is no
 * end of the job's (an agent that adopted it just as the watchdog acted, or one that hung, sees it
 * exit 143), so it is requeued from its newest checkpoint, never reported failed.
 */
export const WATCHDOG_STOPPED: Reason = reason(
  'fenced',
  "its machine's watchdog stopped it: its agent's lease had run out (the agent had died, hung or could not renew it); requeued from its newest checkpoint",
);

/**
 * What a process that ended without its agent stopping it says: the attempt's own end (recorded by
 * {@link exitReport}), or, when the machine's watchdog stopped it, no end of the job's: the attempt
 * goes back to the queue from its newest checkpoint ({@link WATCHDOG_STOPPED}). Both agents ask this
 * before they report an exit.
 */
export function processEnd(
  exitCode: number,
  stoppedByWatchdog: boolean,
): { readonly kind: 'exit'; readonly exitCode: number } | { readonly kind: 'requeue'; readonly reason: Reason } {
  return stoppedByWatchdog ? { kind: 'requeue', reason: WATCHDOG_STOPPED } : { kind: 'exit', exitCode };
}

/** The lease has lapsed: nothing renewed it for longer than `leaseSec`. */
export function leaseLapsed(lastRenewedMs: number, nowMs: number, lease: AgentLease = DEFAULT_AGENT_LEASE): boolean {
  return nowMs - lastRenewedMs > lease.leaseSec * 1000;
}

/**
 * What an agent does when its lease lapses: every attempt it runs is checkpointed (if it can be)
 * by `stopByMs` and stopped; one that cannot checkpoint is stopped at once; one already being
 * checkpointed or stopped is left to that, and killed at `stopByMs` if it still runs. Each is
 * requeued with `reason` once the control plane answers again.
 */
export function onLeaseLapsed(
  lastRenewedMs: number,
  nowMs: number,
  attempts: readonly NoticeAttempt[],
  lease: AgentLease = DEFAULT_AGENT_LEASE,
  timing: CheckpointTiming = DEFAULT_CHECKPOINT_TIMING,
): { readonly stopByMs: number; readonly reason: Reason; readonly steps: readonly NoticeStep[] } {
  const stopByMs = nowMs + lease.fenceGraceSec * 1000;
  const silentSec = Math.round((nowMs - lastRenewedMs) / 1000);
  const why = reason(
    'fenced',
    `its machine's agent could not renew its lease with the control plane for ${silentSec} s (lease ${lease.leaseSec} s), so it stopped its work`,
  );
  const steps = attempts.map<NoticeStep>((a) => {
    if (a.busy) return { key: a.key, kind: 'keep' };
    if (a.checkpointable) return { key: a.key, kind: 'checkpoint', plan: requeuePlan(a, why, nowMs, timing, stopByMs) };
    return { key: a.key, kind: 'requeue-at', atMs: nowMs, plan: requeuePlan(a, why, nowMs, timing, nowMs) };
  });
  return { stopByMs, reason: why, steps };
}

/** What the machine's own metadata says is coming (AWS instance-action, GCE `instance/preempted`, a rebalance recommendation). */
export interface MachineNotice {
  /** `interruption`: the machine is taken at `actionAtMs`; `rebalance`: at higher risk, no hard deadline. */
  readonly kind: 'interruption' | 'rebalance';
  readonly actionAtMs?: number;
  /** For the reason and the log: "preempted notice (instance/preempted)". */
  readonly what: string;
}

/** One local attempt as the notice rule sees it. */
export interface NoticeAttempt {
  readonly key: string;
  readonly checkpointable: boolean;
  /** A checkpoint is being taken or the process is being stopped already. */
  readonly busy: boolean;
  readonly gracePeriodSec: number;
  /** Its checkpoint's size here, MiB ({@link checkpointSizeMiB}): the upload's allowance. */
  readonly sizeMiB: number;
}

/**
 * The grace a job without a checkpoint spec gets to end when it is stopped (a spec's own
 * `checkpoint.gracePeriodSec` defaults to 90 s in the schema).
 */
export const NO_CHECKPOINT_GRACE_SEC = 30;

/** How long a job may take to write a checkpoint (or, without checkpoints, to end) when asked. */
export function graceSecOf(job: Pick<Job, 'spec'>): number {
  return job.spec.checkpoint?.gracePeriodSec ?? NO_CHECKPOINT_GRACE_SEC;
}

/**
 * An attempt running on a machine, as the notice and lease rules see it: the one builder both
 * agents use (the real one's local attempts, the simulated machines' processes).
 */
export function noticeAttemptOf(key: string, job: Pick<Job, 'spec'>, busy: boolean, sizeMiB: number): NoticeAttempt {
  return { key, checkpointable: job.spec.checkpoint !== undefined, busy, gracePeriodSec: graceSecOf(job), sizeMiB };
}

/** The plan of an attempt's checkpoint, then its requeue, asked for at `atMs` (by a notice or the fence). */
function requeuePlan(a: NoticeAttempt, why: Reason, atMs: number, timing: CheckpointTiming, hardDeadlineMs?: number): CheckpointPlan {
  return checkpointPlan({
    then: 'requeue',
    reason: why,
    graceSec: a.gracePeriodSec,
    sizeMiB: a.sizeMiB,
    requestedAtMs: atMs,
    ...(hardDeadlineMs !== undefined ? { hardDeadlineMs } : {}),
    timing,
  });
}

export type NoticeStep =
  /** Mark the job checkpointing (`checkpoint-requested`) and take its checkpoint now, as `plan` says (then requeue it). */
  | { readonly key: string; readonly kind: 'checkpoint'; readonly plan: CheckpointPlan }
  /** It cannot keep its work: let it run until `atMs`, then stop it and requeue it from the start (`plan`: nothing to save). */
  | { readonly key: string; readonly kind: 'requeue-at'; readonly atMs: number; readonly plan: CheckpointPlan }
  /** Leave it: busy already, or a rebalance recommendation with no checkpoint to take (it finishes where it is). */
  | { readonly key: string; readonly kind: 'keep' };

/** A rebalance recommendation sets no hard deadline: the drain mark's deadline is a week out. */
const NOTICE_NO_DEADLINE_MS = 7 * 86_400_000;

/**
 * What a machine does when its metadata says it is going: mark itself draining (with the
 * deadline, `marginSec` before the machine goes) so nothing new lands on it, and for each
 * attempt that runs here, checkpoint now or run until the deadline. Pure; the real agent (at
 * each look at the metadata) and the simulated machines (told by the simulated cloud) both
 * follow it.
 */
export function onMachineNotice(
  notice: MachineNotice,
  nowMs: number,
  marginSec: number,
  attempts: readonly NoticeAttempt[],
  timing: CheckpointTiming = DEFAULT_CHECKPOINT_TIMING,
): { readonly deadlineMs: number; readonly drainReason: string; readonly reason: Reason; readonly steps: readonly NoticeStep[] } {
  const interruption = notice.kind === 'interruption';
  const deadlineMs = interruption ? Math.max(nowMs, (notice.actionAtMs ?? nowMs) - marginSec * 1000) : nowMs + NOTICE_NO_DEADLINE_MS;
  const saved = reason('interrupted', `its machine got a ${notice.what}; checkpointed and requeued`);
  const restarted = reason('interrupted', `its machine got a ${notice.what}`);
  const steps = attempts.map<NoticeStep>((a) => {
    if (a.busy) return { key: a.key, kind: 'keep' };
    const plan = (why: Reason, atMs: number, hardDeadlineMs?: number) => requeuePlan(a, why, atMs, timing, hardDeadlineMs);
    if (a.checkpointable)
      // At least its grace period: a notice time in the past (clock skew) must not skip the checkpoint.
      return {
        key: a.key,
        kind: 'checkpoint',
        plan: interruption ? plan(saved, nowMs, Math.max(deadlineMs, nowMs + a.gracePeriodSec * 1000)) : plan(saved, nowMs),
      };
    return interruption
      ? { key: a.key, kind: 'requeue-at', atMs: deadlineMs, plan: plan(restarted, deadlineMs) }
      : { key: a.key, kind: 'keep' };
  });
  return { deadlineMs, drainReason: `${notice.what} seen by the node agent`, reason: saved, steps };
}
