import { mkdir, rm } from 'node:fs/promises';
import os from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { finishCancel, type Job } from '../core/job.ts';
import type { GpuDevice } from '../core/gpu.ts';
import type { CheckpointStore, Clock, GpuMetricSample, GpuMetricSink, JobStore, NodeStore } from '../core/ports.ts';
import { reason, type Reason } from '../core/reason.ts';
import { applyJobEvent } from '../core/services/job-updates.ts';
import { requeueAttempt } from '../core/services/requeue.ts';
import { gangRank, judgeWorkEntry } from '../core/services/work-list.ts';
import { readMarker, type CheckpointBlobs, type CheckpointMarker } from './checkpoint-files.ts';
import { DeviceAllocator, type HeldDevices, type MigControl } from './devices.ts';
import type { Identity, LocalNotice, MetadataClient } from './metadata.ts';
import { gpuProblems, toGpuDevices, type NvidiaSmiReport } from './nvidia-smi.ts';
import type { Exit, JobProcess, JobRunner } from './runner.ts';
import { messageOf } from '../core/errors.ts';

/**
 * The node agent: the process on every GPU machine.
 *
 * Every `heartbeatSec` it reads its GPUs, sends a heartbeat (with health) and reads its own node
 * record: the draining mark and the work list reconcile wrote before placing jobs here. Each
 * listed attempt that is placed here runs as exactly one local process; an attempt that moved
 * on (requeued, cancelled, placed elsewhere) is stopped. Every `noticeSec` it looks for new
 * checkpoints the jobs marked and for the cloud's notices in the instance metadata: on an
 * interruption notice it drains the node and checkpoints its jobs at once, without waiting for
 * the control plane. Whichever path comes first, a job is requeued once (every change names
 * the attempt it acts on).
 *
 * On a gang, the first node of the placement leads: it starts, checkpoints, requeues and ends
 * the job; the others run their part and stop when the job moves on (or fail it if their part fails).
 */

export interface AgentLog {
  info(message: string, extra?: Record<string, unknown>): void;
  warn(message: string, extra?: Record<string, unknown>): void;
  error(message: string, extra?: Record<string, unknown>): void;
}

export interface AgentPorts {
  readonly clock: Clock;
  readonly jobs: JobStore;
  readonly nodes: NodeStore;
  readonly checkpoints: CheckpointStore;
  readonly blobs: CheckpointBlobs;
  readonly runner: JobRunner;
  /** Reads nvidia-smi (throws GpuInventoryError when it cannot). */
  readonly gpus: () => Promise<NvidiaSmiReport>;
  readonly migControl?: MigControl;
  readonly metadata?: MetadataClient;
  readonly metrics?: GpuMetricSink;
  readonly log: AgentLog;
}

export interface AgentConfig {
  readonly identity: Identity;
  /** The node group, when the metadata does not say (AWS without instance tags in metadata). */
  readonly groupId?: string;
  /** Job folders (checkpoints, resume copies, logs) live under this folder. */
  readonly workDir: string;
  readonly heartbeatSec?: number;
  readonly noticeSec?: number;
  readonly metricsSec?: number;
  /** Time a stopped job gets between SIGTERM and SIGKILL. */
  readonly stopGraceSec?: number;
  /** Checkpoints must be safe this long before the machine goes. */
  readonly noticeMarginSec?: number;
  /** How often the agent looks for the job's marker while it waits for a checkpoint it asked for. */
  readonly checkpointPollMs?: number;
}

interface LocalAttempt {
  readonly key: string;
  readonly jobId: string;
  readonly attempt: number;
  job: Job;
  readonly rank: number;
  readonly size: number;
  readonly proc: JobProcess;
  readonly held: HeldDevices;
  readonly dirs: { readonly root: string; readonly checkpoint: string; readonly resume?: string };
  readonly startedAtMs: number;
  readonly baseProgressSec: number;
  /** The modification time of the newest marker already copied to the store. */
  lastMarkerMs: number;
  /** Set while the agent stops the process on purpose (the job moved on, cancel, checkpoint-and-requeue). */
  stopping: boolean;
  checkpointing?: Promise<void>;
  exit?: Exit;
}

const NO_DEADLINE_MS = 7 * 86_400_000;

export class NodeAgent {
  private readonly local = new Map<string, LocalAttempt>();
  private readonly handledNotices = new Set<string>();
  private readonly devices: DeviceAllocator;
  private registeredGpus: string | undefined;
  private lastReport: NvidiaSmiReport | undefined;
  private health: { healthy: boolean; problem?: string } = { healthy: true };
  private queue: Promise<unknown> = Promise.resolve();
  private timers: NodeJS.Timeout[] = [];
  private stopped = false;
  readonly instanceId: string;
  readonly groupId: string;

  constructor(
    private readonly ports: AgentPorts,
    private readonly config: AgentConfig,
  ) {
    this.instanceId = config.identity.instanceId;
    this.groupId = config.identity.groupId ?? config.groupId ?? 'unknown';
    this.devices = new DeviceAllocator(
      () => this.inventory(),
      ports.migControl,
      (m) => ports.log.info(m),
    );
  }

  // ---- the loops ----------------------------------------------------------------------------

  /** Starts the loops (after one full pass, so a caller can await a registered node). */
  async start(): Promise<void> {
    const leftovers = await this.ports.runner.cleanUpLeftovers();
    if (leftovers.length > 0)
      this.ports.log.warn('stopped job processes a previous agent left running; their jobs restart from their newest checkpoint', {
        leftovers,
      });
    await this.heartbeat();
    await this.watch();
    this.every(this.config.heartbeatSec ?? 15, () => this.heartbeat());
    this.every(this.config.noticeSec ?? 5, () => this.watch());
    if (this.ports.metrics) this.every(this.config.metricsSec ?? 60, () => this.publishMetrics());
  }

  /** Stops the loops and the jobs' processes. Jobs stay running in the store: the next agent restarts them from their newest checkpoint. */
  async stop(): Promise<void> {
    this.stopped = true;
    for (const t of this.timers) clearTimeout(t);
    this.timers = [];
    await this.queue.catch(() => {});
    await Promise.all(
      [...this.local.values()].map(async (l) => {
        l.stopping = true;
        await l.proc.stop((this.config.stopGraceSec ?? 30) * 1000);
        await l.held.release().catch(() => {});
      }),
    );
    this.local.clear();
  }

  private every(sec: number, f: () => Promise<void>): void {
    const loop = () => {
      if (this.stopped) return;
      const t = setTimeout(() => {
        void f()
          .catch((error: unknown) => this.ports.log.error('agent loop failed; it runs again at its next turn', { error: String(error) }))
          .finally(loop);
      }, sec * 1000);
      this.timers.push(t);
    };
    loop();
  }

  /** Runs `f` after everything queued before it: the agent's steps never interleave. */
  private serial<T>(f: () => Promise<T>): Promise<T> {
    const next = this.queue.then(f, f);
    this.queue = next.catch(() => undefined);
    return next;
  }

  // ---- heartbeat and work list ------------------------------------------------------------

  private async inventory(): Promise<NvidiaSmiReport> {
    this.lastReport = await this.ports.gpus();
    return this.lastReport;
  }

  /** One heartbeat: GPUs and health, the node's record, and the work on its list. */
  heartbeat(): Promise<void> {
    return this.serial(async () => {
      const now = this.ports.clock.nowMs();
      let gpus: GpuDevice[] | undefined;
      try {
        const report = await this.inventory();
        gpus = toGpuDevices(report);
        const problems = report.gpus.flatMap(gpuProblems);
        if (report.gpus.length > 0 && gpus.length === 0)
          problems.push(`no GPU here is a model gpu-fleet schedules (${report.gpus.map((g) => g.name).join(', ')})`);
        this.health = problems.length > 0 ? { healthy: false, problem: problems.join('; ') } : { healthy: true };
      } catch (error) {
        this.health = { healthy: false, problem: messageOf(error) };
      }
      if (!this.health.healthy) this.ports.log.warn('node unhealthy: it takes no new work', { problem: this.health.problem });
      const gpuKey = gpus ? JSON.stringify(gpus) : this.registeredGpus;
      const known = gpuKey === this.registeredGpus && (await this.ports.nodes.heartbeat(this.instanceId, now, this.health));
      if (!known) {
        await this.ports.nodes.register({
          instanceId: this.instanceId,
          groupId: this.groupId,
          registeredAtMs: now,
          lastHeartbeatAtMs: now,
          gpus: gpus ?? [],
          ...(this.config.identity.privateIp ? { address: this.config.identity.privateIp } : {}),
          healthy: this.health.healthy,
          ...(this.health.problem ? { healthProblem: this.health.problem } : {}),
        });
        this.registeredGpus = gpuKey;
      }
      await this.syncWork();
    });
  }

  private async syncWork(): Promise<void> {
    const record = await this.ports.nodes.get(this.instanceId);
    const mine = new Set<string>();
    for (const [jobId, attempt] of Object.entries(record?.assigned ?? {})) {
      const job = await this.ports.jobs.get(jobId);
      const verdict = judgeWorkEntry(job, this.instanceId, attempt);
      if (verdict === 'stale') {
        await this.ports.nodes.unassign(this.instanceId, jobId, attempt);
        continue;
      }
      if (verdict === 'run' && job) {
        mine.add(keyOf(job.id, job.attempt));
        await this.runStep(job);
      }
    }
    // Attempts that are no longer this node's: the control plane requeued or moved them.
    for (const l of [...this.local.values()]) {
      if (!mine.has(l.key) && !l.stopping && !l.checkpointing) {
        this.ports.log.info('the job moved on; stopping its process here', { job: l.jobId, attempt: l.attempt });
        await this.endLocal(l);
      }
    }
  }

  private async runStep(job: Job): Promise<void> {
    const key = keyOf(job.id, job.attempt);
    const l = this.local.get(key);
    const where = gangRank(job, this.instanceId)!;
    const lead = where.rank === 0;
    const now = this.ports.clock.nowMs();
    if (l) l.job = job;

    if (job.cancelRequested) {
      // Cancelled while running: a job that can checkpoint is asked to save first, then stopped.
      if (l && job.spec.checkpoint && !l.exit && !l.stopping) {
        if (!l.checkpointing)
          this.beginCheckpoint(
            l,
            reason('preempt-for-priority', 'cancelled: checkpointed, then stopped'),
            now + checkpointGraceMs(job),
            'cancel',
          );
        return;
      }
      if (l?.checkpointing) return; // its checkpoint ends in a stop and the cancel is recorded there
      if (l) await this.endLocal(l);
      if (lead) await this.finishCancelled(job.id);
      return;
    }
    if (job.state === 'checkpointing') {
      if (l && !l.checkpointing)
        this.beginCheckpoint(
          l,
          job.checkpointReason ?? reason('preempt-for-priority', 'checkpointed on request and returned to the queue'),
          now + checkpointGraceMs(job),
        );
      if (!l && lead) {
        // Nothing runs here (the agent restarted): requeue from the newest checkpoint in the store.
        await requeueAttempt(this.ports, {
          jobId: job.id,
          attempt: job.attempt,
          reason:
            job.checkpointReason ??
            reason('preempt-for-priority', 'checkpoint requested while no process ran; requeued from its newest checkpoint'),
          nowMs: now,
        });
      }
      return;
    }
    if (!l) {
      await this.launch(job, where);
      return;
    }
    if (l.exit) {
      await this.reportExit(l);
      return;
    }
    await this.collectCheckpoint(l);
  }

  private async launch(job: Job, where: { rank: number; size: number }): Promise<void> {
    const now = this.ports.clock.nowMs();
    const key = keyOf(job.id, job.attempt);
    const assignment = job.placement!.nodes[where.rank]!;
    const root = join(this.config.workDir, 'jobs', safeName(job.id), `attempt-${job.attempt}`);
    const dirs = { root, checkpoint: join(root, 'checkpoint'), resume: join(root, 'resume') };
    let held: HeldDevices;
    try {
      held = await this.devices.acquire(assignment, key);
    } catch (error) {
      this.ports.log.error('cannot start job: its devices are not available', {
        job: job.id,
        attempt: job.attempt,
        error: messageOf(error),
      });
      if (where.rank === 0)
        await requeueAttempt(this.ports, {
          jobId: job.id,
          attempt: job.attempt,
          reason: reason('start-failed', `node ${this.instanceId} could not start it: ${messageOf(error)}`),
          nowMs: now,
        });
      return;
    }
    await mkdir(dirs.checkpoint, { recursive: true });
    const latest = job.checkpoint ?? (await this.ports.checkpoints.latest(job.id));
    let resumed = false;
    if (latest) {
      try {
        resumed = await this.ports.blobs.download(latest.location, dirs.resume);
        if (!resumed)
          this.ports.log.warn('the newest checkpoint is not in the store; starting from scratch', {
            job: job.id,
            location: latest.location,
          });
      } catch (error) {
        this.ports.log.warn('could not fetch the newest checkpoint; starting from scratch', {
          job: job.id,
          location: latest.location,
          error: messageOf(error),
        });
      }
    }
    const leader = where.size > 1 ? await this.ports.nodes.get(job.placement!.nodes[0]!.nodeId) : undefined;
    const cp = job.spec.checkpoint;
    const env: Record<string, string> = {
      ...job.spec.env,
      GPU_FLEET_JOB_ID: job.id,
      GPU_FLEET_ATTEMPT: String(job.attempt),
      GPU_FLEET_TEAM: job.team,
      GPU_FLEET_NODE_RANK: String(where.rank),
      GPU_FLEET_NUM_NODES: String(where.size),
      GPU_FLEET_CHECKPOINT_LOCATION: this.ports.checkpoints.locationFor(job.id, job.attempt),
      ...(cp ? { GPU_FLEET_CHECKPOINT_SIGNAL: cp.signal, GPU_FLEET_CHECKPOINT_INTERVAL_SEC: String(cp.intervalSec) } : {}),
      ...(resumed && latest ? { GPU_FLEET_RESUME_FROM: latest.location, GPU_FLEET_RESUME_PROGRESS_SEC: String(latest.progressSec) } : {}),
      ...(leader?.address ? { GPU_FLEET_LEADER_ADDRESS: leader.address } : {}),
    };
    let proc: JobProcess;
    try {
      proc = await this.ports.runner.start({
        jobId: job.id,
        attempt: job.attempt,
        image: job.spec.image,
        command: job.spec.command,
        env,
        devices: held.devices,
        checkpointDir: dirs.checkpoint,
        ...(resumed ? { resumeDir: dirs.resume } : {}),
        logFile: join(root, 'output.log'),
      });
    } catch (error) {
      await held.release();
      this.ports.log.error('cannot start job', { job: job.id, attempt: job.attempt, error: messageOf(error) });
      if (where.rank === 0)
        await requeueAttempt(this.ports, {
          jobId: job.id,
          attempt: job.attempt,
          reason: reason('start-failed', `node ${this.instanceId} could not start it: ${messageOf(error)}`),
          nowMs: now,
        });
      return;
    }
    const l: LocalAttempt = {
      key,
      jobId: job.id,
      attempt: job.attempt,
      job,
      rank: where.rank,
      size: where.size,
      proc,
      held,
      dirs: resumed ? dirs : { root, checkpoint: dirs.checkpoint },
      startedAtMs: now,
      baseProgressSec: resumed && latest ? latest.progressSec : 0,
      lastMarkerMs: 0,
      stopping: false,
    };
    this.local.set(key, l);
    void proc.exited.then((exit) => {
      l.exit = exit;
      return this.serial(() => this.reportExit(l)).catch((error: unknown) =>
        this.ports.log.warn("could not report the job's end; trying again at the next heartbeat", { job: l.jobId, error: String(error) }),
      );
    });
    this.ports.log.info('job started', {
      job: job.id,
      attempt: job.attempt,
      rank: where.rank,
      devices: held.devices,
      resumedFrom: resumed ? latest?.location : undefined,
    });
    if (where.rank === 0 && job.state === 'placed')
      await applyJobEvent(this.ports.jobs, job.id, { type: 'start', attempt: job.attempt }, now);
  }

  /**
   * The process ended by itself (the agent did not stop it): report how, then forget it. If the
   * report cannot be written now, the attempt stays known (and is not started again) and the
   * next heartbeat tries again.
   */
  private async reportExit(l: LocalAttempt): Promise<void> {
    const exit = l.exit;
    if (!exit || l.stopping || l.checkpointing) return; // the path that stopped it (or is checkpointing it) reports
    const now = this.ports.clock.nowMs();
    await this.collectCheckpoint(l).catch(() => undefined);
    const code = exitCode(exit);
    if (code === 0) {
      if (l.rank === 0) await applyJobEvent(this.ports.jobs, l.jobId, { type: 'succeed', attempt: l.attempt }, now);
      // A follower that finished waits for the leader to end the job.
    } else {
      await applyJobEvent(this.ports.jobs, l.jobId, { type: 'fail', attempt: l.attempt, exitCode: code }, now);
    }
    this.ports.log.info('job process ended', { job: l.jobId, attempt: l.attempt, exitCode: code, signal: exit.signal });
    await this.forget(l);
  }

  /** Stops a local process on purpose (the job moved on or was cancelled) and forgets it. */
  private async endLocal(l: LocalAttempt): Promise<void> {
    l.stopping = true;
    if (!l.exit) await l.proc.stop((this.config.stopGraceSec ?? 30) * 1000);
    await this.forget(l);
  }

  private async forget(l: LocalAttempt): Promise<void> {
    if (this.local.get(l.key) !== l) return;
    this.local.delete(l.key);
    await l.held
      .release()
      .catch((error: unknown) => this.ports.log.warn("could not release the job's MIG instance", { job: l.jobId, error: String(error) }));
    await this.ports.nodes.unassign(this.instanceId, l.jobId, l.attempt);
    // The checkpoint is in the store now; keep only the job's log on the machine.
    await rm(l.dirs.checkpoint, { recursive: true, force: true });
    if (l.dirs.resume) await rm(l.dirs.resume, { recursive: true, force: true });
  }

  private async finishCancelled(jobId: string): Promise<void> {
    for (let i = 0; i < 5; i++) {
      const job = await this.ports.jobs.get(jobId);
      if (!job) return;
      const out = finishCancel(job, this.ports.clock.nowMs());
      if (!out.ok || !out.changed) return;
      if ((await this.ports.jobs.update(out.job, job.version)).ok) return;
    }
  }

  // ---- checkpoints ------------------------------------------------------------------------

  /** Copies a checkpoint the job marked since the last one to the store and records it. */
  private async collectCheckpoint(l: LocalAttempt): Promise<CheckpointMarker | undefined> {
    if (l.rank !== 0 || !l.job.spec.checkpoint) return undefined;
    const read = await readMarker(l.dirs.checkpoint);
    if (!read) return undefined;
    if (!read.ok) {
      if (l.lastMarkerMs !== -1)
        this.ports.log.warn('the job wrote a checkpoint marker the agent cannot use', { job: l.jobId, problem: read.problem });
      l.lastMarkerMs = -1;
      return undefined;
    }
    const marker = read.marker;
    if (marker.modifiedAtMs <= l.lastMarkerMs) return undefined;
    const now = this.ports.clock.nowMs();
    const location = `${this.ports.checkpoints.locationFor(l.jobId, l.attempt)}${marker.path.replace(/\/+$/, '')}/`;
    await this.ports.blobs.upload(join(l.dirs.checkpoint, marker.path), location);
    const progressSec = marker.progressSec ?? Math.floor(l.baseProgressSec + (now - l.startedAtMs) / 1000);
    const ref = { jobId: l.jobId, attempt: l.attempt, location, completedAtMs: now, progressSec };
    await this.ports.checkpoints.markComplete(ref);
    await applyJobEvent(this.ports.jobs, l.jobId, { type: 'checkpoint-done', checkpoint: ref }, now);
    l.lastMarkerMs = marker.modifiedAtMs;
    this.ports.log.info('checkpoint saved', { job: l.jobId, attempt: l.attempt, location, progressSec });
    return marker;
  }

  /**
   * Checkpoint and requeue: signal the job, wait (until the deadline) for a new marker or its
   * exit, copy the checkpoint, stop the process, requeue the attempt. A job that declares no
   * checkpoint support is stopped and requeued to restart from scratch.
   */
  private beginCheckpoint(l: LocalAttempt, why: Reason, deadlineMs: number, then: 'requeue' | 'cancel' = 'requeue'): void {
    l.checkpointing = (async () => {
      const cp = l.job.spec.checkpoint;
      // A process that ended before it was asked ended on its own: its exit decides, not the request.
      const endedBefore = l.exit;
      const markerBefore = l.lastMarkerMs;
      if (cp && !l.exit) {
        await l.proc.signal(cp.signal);
        const pollMs = this.config.checkpointPollMs ?? 500;
        while (!l.exit && l.lastMarkerMs === markerBefore && this.ports.clock.nowMs() < deadlineMs && !this.stopped) {
          await Promise.race([l.proc.exited, sleep(pollMs)]);
          await this.serial(() => this.collectCheckpoint(l));
        }
      }
      await this.serial(async () => {
        if (cp) await this.collectCheckpoint(l); // a marker written just before the exit
        l.stopping = true;
        if (!l.exit) await l.proc.stop((this.config.stopGraceSec ?? 30) * 1000);
        const now = this.ports.clock.nowMs();
        if (l.rank === 0) {
          if (endedBefore && exitCode(endedBefore) === 0)
            await applyJobEvent(this.ports.jobs, l.jobId, { type: 'succeed', attempt: l.attempt }, now);
          else if (endedBefore)
            await applyJobEvent(this.ports.jobs, l.jobId, { type: 'fail', attempt: l.attempt, exitCode: exitCode(endedBefore) }, now);
          else if (then === 'cancel' || l.job.cancelRequested) await this.finishCancelled(l.jobId);
          else {
            const message = cp ? why.message : `${why.message}; it declares no checkpoint support, so it restarts from scratch`;
            await requeueAttempt(this.ports, { jobId: l.jobId, attempt: l.attempt, reason: { code: why.code, message }, nowMs: now });
          }
        }
        await this.forget(l);
        this.ports.log.info(cp ? 'checkpointed and requeued' : 'requeued to restart from scratch', {
          job: l.jobId,
          attempt: l.attempt,
          reason: why.code,
          newCheckpoint: l.lastMarkerMs !== markerBefore,
        });
      });
    })().catch((error: unknown) =>
      this.ports.log.error('checkpoint failed; the control plane requeues the job when the machine goes', {
        job: l.jobId,
        error: String(error),
      }),
    );
  }

  // ---- local notices and checkpoint markers -----------------------------------------------

  /** One look at the instance metadata for notices, and at the jobs' checkpoint markers. */
  watch(): Promise<void> {
    return this.serial(async () => {
      for (const l of this.local.values())
        if (!l.stopping && !l.exit)
          await this.collectCheckpoint(l).catch((error: unknown) =>
            this.ports.log.warn('could not save a checkpoint', { job: l.jobId, error: String(error) }),
          );
      if (!this.ports.metadata) return;
      let notices: LocalNotice[];
      try {
        notices = await this.ports.metadata.notices(this.ports.clock.nowMs());
      } catch (error) {
        this.ports.log.warn('could not read notices from the instance metadata', { error: messageOf(error) });
        return;
      }
      for (const n of notices) await this.onNotice(n);
    });
  }

  private async onNotice(n: LocalNotice): Promise<void> {
    const id = `${n.kind}:${n.source}:${n.kind === 'interruption' ? n.action : ''}`;
    if (this.handledNotices.has(id)) return;
    this.handledNotices.add(id);
    const now = this.ports.clock.nowMs();
    const marginMs = (this.config.noticeMarginSec ?? 20) * 1000;
    const deadlineMs = n.kind === 'interruption' ? Math.max(now, n.actionAtMs - marginMs) : now + NO_DEADLINE_MS;
    const what = n.kind === 'interruption' ? `${n.action} notice (${n.source})` : `rebalance recommendation (${n.source})`;
    this.ports.log.warn(`the cloud says this machine is at risk: ${what}; draining and checkpointing now`, {
      deadline: new Date(deadlineMs).toISOString(),
    });
    await this.ports.nodes.markDraining(this.instanceId, {
      sinceMs: now,
      reason: `${what} seen by the node agent`,
      deadlineMs,
      groupId: this.groupId,
    });
    const why = reason('interrupted', `its machine got a ${what}; checkpointed and requeued`);
    for (const l of this.local.values()) {
      if (l.rank !== 0 || l.stopping || l.checkpointing) continue;
      const checkpointable = l.job.spec.checkpoint !== undefined;
      if (n.kind === 'rebalance' && !checkpointable) continue; // no hard deadline: let it finish where it is
      if (checkpointable) {
        await applyJobEvent(this.ports.jobs, l.jobId, { type: 'checkpoint-requested', attempt: l.attempt, reason: why }, now);
        // The job gets at least its grace period: a notice time in the past (clock skew) must not skip the checkpoint.
        this.beginCheckpoint(l, why, Math.max(deadlineMs, now + checkpointGraceMs(l.job)));
      } else {
        // It cannot keep its work; give it until the deadline to finish, then requeue it from scratch.
        const wait = Math.max(0, deadlineMs - now);
        const t = setTimeout(() => {
          if (this.local.get(l.key) === l && !l.exit && !l.checkpointing)
            this.beginCheckpoint(l, reason('interrupted', `its machine got a ${what}`), this.ports.clock.nowMs());
        }, wait);
        this.timers.push(t);
      }
    }
  }

  // ---- metrics ----------------------------------------------------------------------------

  publishMetrics(): Promise<void> {
    return this.serial(async () => {
      if (!this.ports.metrics) return;
      let report: NvidiaSmiReport;
      try {
        report = await this.inventory();
      } catch {
        return; // the heartbeat reports the node unhealthy
      }
      const atMs = this.ports.clock.nowMs();
      const samples: GpuMetricSample[] = report.gpus.map((g) => ({
        instanceId: this.instanceId,
        groupId: this.groupId,
        gpuIndex: g.index,
        atMs,
        ...(g.utilizationPct !== undefined ? { utilizationPct: g.utilizationPct } : {}),
        ...(g.memoryUsedMiB !== undefined ? { memoryUsedMiB: g.memoryUsedMiB } : {}),
        ...(g.powerDrawW !== undefined ? { powerDrawW: g.powerDrawW } : {}),
        ...(g.temperatureC !== undefined ? { temperatureC: g.temperatureC } : {}),
        ...(g.ecc.volatileUncorrectable !== undefined ? { uncorrectableEccErrors: g.ecc.volatileUncorrectable } : {}),
      }));
      if (samples.length > 0) await this.ports.metrics.put(samples);
    });
  }

  // ---- for inspection and tests -----------------------------------------------------------

  /** The attempts running here now. */
  running(): { jobId: string; attempt: number; pid: number | undefined; rank: number }[] {
    return [...this.local.values()].map((l) => ({ jobId: l.jobId, attempt: l.attempt, pid: l.proc.pid, rank: l.rank }));
  }

  /** Resolves when every checkpoint in progress has finished. */
  async settled(): Promise<void> {
    await Promise.all([...this.local.values()].map((l) => l.checkpointing));
    await this.queue;
  }

  get lastInventory(): NvidiaSmiReport | undefined {
    return this.lastReport;
  }
}

function keyOf(jobId: string, attempt: number): string {
  return `${jobId}#${attempt}`;
}

function safeName(jobId: string): string {
  return jobId.replace(/[^A-Za-z0-9._-]/g, '_');
}

function checkpointGraceMs(job: Job): number {
  return (job.spec.checkpoint?.gracePeriodSec ?? 30) * 1000;
}

/** The exit code a shell would report: 128 + the signal's number for a process killed by a signal. */
function exitCode(exit: Exit): number {
  if (exit.exitCode !== null) return exit.exitCode;
  const signals = os.constants.signals as Readonly<Record<string, number>>;
  return 128 + (signals[exit.signal ?? ''] ?? 0);
}
