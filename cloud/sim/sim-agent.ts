import { ConflictError } from '../../core/errors.ts';
import type { InstanceType } from '../../core/catalog.ts';
import type { Instance } from '../../core/fleet.ts';
import { finishCancel, type Job } from '../../core/job.ts';
import type { CheckpointStore, Clock, JobStore, NodeStore } from '../../core/ports.ts';
import { reason } from '../../core/reason.ts';
import { applyJobEvent } from '../../core/services/job-updates.ts';
import { requeueAttempt } from '../../core/services/requeue.ts';
import { judgeWorkEntry } from '../../core/services/work-list.ts';

export interface SimAgentOptions {
  readonly clock: Clock;
  readonly jobs: JobStore;
  readonly nodes: NodeStore;
  readonly checkpoints: CheckpointStore;
  readonly instanceTypes: ReadonlyMap<string, InstanceType>;
  /** How many seconds of work the job really needs (the simulated process knows; the planner only has estimates). */
  readonly workSecOf: (job: Job) => number;
  /** The exit code the simulated process ends with (default 0). */
  readonly exitCodeOf?: (job: Job) => number;
  /** Seconds a resumed job spends restoring before it makes progress again (default 0). */
  readonly restoreSec?: number;
  /** Fault injection: the machine's agent is dead at this time (no heartbeats, no work). */
  readonly agentDead?: (inst: Instance, nowMs: number) => boolean;
  /** Fault injection: this checkpoint fails (nothing is saved). */
  readonly checkpointFails?: (job: Job, nowMs: number) => boolean;
}

/** Work an attempt lost when it ended without finishing (interrupted, node lost, requeued). */
export interface LostWork {
  readonly jobId: string;
  readonly attempt: number;
  readonly lostSec: number;
  /** The job's checkpoint interval plus grace period (undefined for a job without checkpoints). */
  readonly allowedSec?: number;
  /** A checkpoint of this job failed (injected), so the bound does not apply. */
  readonly checkpointFailed: boolean;
}

interface RunningAttempt {
  lastProgressSec?: number;
  readonly startedAtMs: number;
  readonly baseProgressSec: number;
  lastCheckpointAtMs: number;
}

export interface AgentTickResult {
  readonly started: number;
  readonly succeeded: number;
  readonly checkpoints: number;
  /** Seconds of work done per job attempt that finished or was lost this tick (for rework figures). */
}

/**
 * The node agents of every simulated machine, in one object: each tick, a booted machine
 * registers, every live agent sends a heartbeat, placed jobs start (resuming from their newest
 * checkpoint), running jobs checkpoint at their interval and finish when their work is done,
 * and jobs asked to checkpoint do so and go back to the queue. An agent on a machine that is
 * gone does nothing, so its jobs are found by the control plane's node-lost check.
 */
export class SimAgents {
  private readonly running = new Map<string, RunningAttempt>();
  readonly stats = { started: 0, succeeded: 0, checkpoints: 0, cancelled: 0, preempted: 0, checkpointFailures: 0, writeRetries: 0 };
  /** Attempts ended without finishing, with the work they lost. */
  readonly lost: LostWork[] = [];
  private readonly failedCheckpointJobs = new Set<string>();

  /** The attempts running now, by job: more than one for a job is a bug. */
  runningAttempts(): Map<string, number[]> {
    const out = new Map<string, number[]>();
    for (const k of this.running.keys()) {
      const i = k.lastIndexOf('#');
      const id = k.slice(0, i);
      out.set(id, [...(out.get(id) ?? []), Number(k.slice(i + 1))]);
    }
    return out;
  }

  constructor(private readonly options: SimAgentOptions) {}

  /** Work done so far by the running attempt of a job, in seconds (0 when it is not running). */
  progressSec(job: Job, nowMs: number): number {
    const r = this.running.get(key(job));
    if (!r) return job.checkpoint?.progressSec ?? 0;
    const restoreMs = (r.baseProgressSec > 0 ? (this.options.restoreSec ?? 0) : 0) * 1000;
    return r.baseProgressSec + Math.max(0, nowMs - r.startedAtMs - restoreMs) / 1000;
  }

  async tick(instances: readonly Instance[]): Promise<void> {
    const now = this.options.clock.nowMs();
    const live = new Map<string, Instance>();
    for (const inst of instances) if (inst.state === 'running' && !this.options.agentDead?.(inst, now)) live.set(inst.id, inst);

    for (const inst of live.values()) {
      const ok = await this.options.nodes.heartbeat(inst.id, now);
      if (!ok) {
        const type = this.options.instanceTypes.get(inst.instanceType);
        await this.options.nodes.register({
          instanceId: inst.id,
          groupId: inst.groupId,
          registeredAtMs: now,
          lastHeartbeatAtMs: now,
          healthy: true,
          gpus: Array.from({ length: type?.gpuCount ?? 0 }, (_, index) => ({
            index,
            model: type!.gpuModel,
            memoryMiB: type!.gpuMemoryMiB,
          })),
        });
      }
    }

    // Each agent reads its own work list, as the real agent does; a gang's job is stepped once.
    const stillActive = new Set<string>();
    const stepped = new Set<string>();
    // One read of every record stands for each agent reading its own.
    for (const record of await this.options.nodes.list()) {
      const inst = live.get(record.instanceId);
      if (!inst || !record.assigned) continue;
      for (const [jobId, attempt] of Object.entries(record.assigned)) {
        const job = await this.options.jobs.get(jobId);
        const verdict = judgeWorkEntry(job, inst.id, attempt);
        if (verdict === 'stale') await this.options.nodes.unassign(inst.id, jobId, attempt);
        if (verdict !== 'run' || !job || stepped.has(job.id)) continue;
        stepped.add(job.id);
        const nodes = job.placement?.nodes ?? [];
        if (!nodes.every((n) => live.has(n.nodeId))) continue; // a machine of its gang is gone: the control plane will notice
        stillActive.add(key(job));
        try {
          await this.step(job, now);
        } catch (error) {
          // Lost a write race too many times in a row: the agent tries again at its next tick.
          if (!(error instanceof ConflictError)) throw error;
          this.stats.writeRetries++;
        }
      }
    }
    for (const [k, r] of this.running) {
      if (stillActive.has(k)) continue;
      this.running.delete(k);
      await this.noteLost(k, r);
    }
  }

  /** An attempt this agent ran is over without finishing here: how much work did it lose? */
  private async noteLost(k: string, r: RunningAttempt): Promise<void> {
    const i = k.lastIndexOf('#');
    const jobId = k.slice(0, i);
    const attempt = Number(k.slice(i + 1));
    const job = await this.options.jobs.get(jobId);
    if (!job || job.attempt === attempt || job.state === 'succeeded' || job.state === 'failed' || job.state === 'cancelled') return;
    const saved = job.checkpoint?.progressSec ?? 0;
    const lostSec = Math.max(0, (r.lastProgressSec ?? r.baseProgressSec) - Math.max(saved, r.baseProgressSec));
    const cp = job.spec.checkpoint;
    this.lost.push({
      jobId,
      attempt,
      lostSec,
      ...(cp ? { allowedSec: cp.intervalSec + cp.gracePeriodSec } : {}),
      checkpointFailed: this.failedCheckpointJobs.has(jobId),
    });
  }

  private async step(job: Job, now: number): Promise<void> {
    const { jobs, checkpoints } = this.options;
    if (job.cancelRequested) {
      const out = finishCancel(job, now);
      if (out.ok && out.changed) {
        await jobs.update(out.job, job.version);
        this.running.delete(key(job));
        this.stats.cancelled++;
      }
      return;
    }
    if (job.state === 'placed') {
      const started = await applyJobEvent(jobs, job.id, { type: 'start', attempt: job.attempt }, now);
      if (started.status === 'changed') {
        this.running.set(key(job), { startedAtMs: now, baseProgressSec: job.checkpoint?.progressSec ?? 0, lastCheckpointAtMs: now });
        this.stats.started++;
      }
      return;
    }
    const r = this.running.get(key(job));
    if (!r) {
      // The agent lost track (it restarted): resume the attempt from where the store says it is.
      this.running.set(key(job), { startedAtMs: now, baseProgressSec: job.checkpoint?.progressSec ?? 0, lastCheckpointAtMs: now });
      return;
    }
    const progress = this.progressSec(job, now);
    r.lastProgressSec = progress;
    if (progress >= this.options.workSecOf(job)) {
      const exitCode = this.options.exitCodeOf?.(job) ?? 0;
      const done = await applyJobEvent(
        jobs,
        job.id,
        exitCode === 0 ? { type: 'succeed', attempt: job.attempt } : { type: 'fail', attempt: job.attempt, exitCode },
        now,
      );
      if (done.status === 'changed') this.stats.succeeded++;
      this.running.delete(key(job));
      return;
    }
    const cp = job.spec.checkpoint;
    const due = cp !== undefined && now - r.lastCheckpointAtMs >= cp.intervalSec * 1000;
    if (job.state === 'checkpointing' || due) {
      if (cp !== undefined && this.options.checkpointFails?.(job, now)) {
        this.stats.checkpointFailures++;
        this.failedCheckpointJobs.add(job.id);
        r.lastCheckpointAtMs = now; // it tries again at its next interval
      } else if (cp !== undefined) {
        const ref = {
          jobId: job.id,
          attempt: job.attempt,
          location: checkpoints.locationFor(job.id, job.attempt),
          completedAtMs: now,
          progressSec: Math.floor(progress),
        };
        await checkpoints.markComplete(ref);
        await applyJobEvent(jobs, job.id, { type: 'checkpoint-done', checkpoint: ref }, now);
        r.lastCheckpointAtMs = now;
        this.stats.checkpoints++;
      }
      if (job.state === 'checkpointing') {
        const why = job.checkpointReason ?? reason('preempt-for-priority', 'checkpointed on request and returned to the queue');
        const out = await requeueAttempt({ jobs, checkpoints }, { jobId: job.id, attempt: job.attempt, reason: why, nowMs: now });
        if (out.status === 'changed') this.stats.preempted++;
        this.running.delete(key(job));
      }
    }
  }
}

function key(job: Job): string {
  return `${job.id}#${job.attempt}`;
}
