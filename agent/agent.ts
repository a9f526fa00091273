import { DEFAULT_POLICY } from '../core/snapshot.ts';
import { readFileSync, renameSync, rmSync, statfsSync, writeFileSync } from 'node:fs';
import { mkdir, rm } from 'node:fs/promises';
import { createHash } from 'node:crypto';
import os from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { messageOf } from '../core/errors.ts';
import type { GpuDevice } from '../core/gpu.ts';
import { assignmentMilliGpu, checkpointPartLocation, rendezvousPortOf, type CheckpointRef, type Job } from '../core/job.ts';
import {
  containerLimits,
  diskFull,
  diskIsFull,
  jobDiskMiB,
  layerFull,
  layerIsOver,
  outOfMemory,
  writableLayerMiB,
} from '../core/container-limits.ts';
import { saveSizeOf, storeKindOf } from '../core/bytes.ts';
import { containerSettings } from '../core/job-spec.ts';
import type {
  CheckpointStore,
  Clock,
  GpuMetricSample,
  GpuMetricSink,
  JobStore,
  NodeStore,
  ServiceMetricSample,
  JobLogSink,
  ServiceMetricSink,
} from '../core/ports.ts';
import type { ServiceMetric } from '../core/serving/autoscale.ts';
import { agentLeavesFrontDoorNow, SERVICE_DEREGISTRATION_DELAY_SEC, SERVICE_LABEL } from '../core/serving/service.ts';
import type { Reason } from '../core/reason.ts';
import { applyJobEvent, finishCancelled, recordLandedSave } from '../core/services/job-updates.ts';
import { recordCheckpointResult, recordExit } from '../core/services/node-reports.ts';
import {
  afterCheckpoint,
  checkpointVerdict,
  checkpointPlan,
  checkpointSizeMiB,
  DEFAULT_AGENT_LEASE,
  DEFAULT_CHECKPOINT_TIMING,
  DEFAULT_STOP_GRACE_SEC,
  leaseLapsed,
  nextNodeStep,
  planWorkList,
  adoptsLeftover,
  processEnd,
  onLeaseLapsed,
  onMachineNotice,
  noticeAttemptOf,
  graceSecOf,
  replicaHealthReport,
  resumePoint,
  saveEverySec,
  saveLocation,
  startFailure,
  uploadAllowanceSec,
  type AgentLease,
  type CheckpointOutcome,
  type CheckpointPlan,
  type NoticeAttempt,
  type WorkListEntry,
  type CheckpointTiming,
  type LocalAttempt as LocalView,
  type NodeStep,
} from '../core/services/node-rules.ts';
import { requeueAttempt } from '../core/services/requeue.ts';
import { readMarker, type CheckpointBlobs, type CheckpointMarker } from './checkpoint-files.ts';
import { DeviceAllocator, type HeldDevices, type MigControl } from './devices.ts';
import type { Identity, LocalNotice, MetadataClient } from './metadata.ts';
import { deviceReadings, gpuProblems, toGpuDevices, type NvidiaSmiReport } from './nvidia-smi.ts';
import { containerName, launchKey, safeJobName, type Exit, type JobProcess, type JobRunner, type LeftLaunch } from './runner.ts';
import { ImagePrefetcher } from './prefetch.ts';
import { prefetchChanged } from '../core/serving/prefetch.ts';
import { LogShipper } from './log-shipper.ts';
import { leaseMark, stoppedByWatchdog, stoppedFileOf } from './watchdog.ts';
import { dcgmExposition, type GpuHolder } from './dcgm-exporter.ts';
import { UploadWorker, type UploadResult } from './uploads.ts';
import { probeReadiness, scrapeReplica } from './prometheus.ts';
import { parseDcgmReadings, type DcgmReading } from './dcgm-readings.ts';
import { addGpuLook, newGpuUseTally, summarizeGpuUse, type AttemptGpuUse, type GpuUseTally } from '../core/gpu-use.ts';

/**
 * The node agent: the process on every GPU machine. What it does with each entry of its work
 * list is decided by the node-side rules in core (core/services/node-rules.ts), the same rules
 * the simulated machines follow; this class carries them out with real processes and files.
 *
 * - The heartbeat has its own timer: every `heartbeatSec` it reads the GPUs and records the
 *   node's health. Nothing it does waits on a job.
 * - The work list is read after each heartbeat: each attempt placed here runs as exactly one
 *   local process; an attempt that moved on (requeued, cancelled, placed elsewhere) is stopped
 *   before anything new starts.
 * - Every `noticeSec` it looks for the checkpoints the jobs marked (each is copied to the
 *   checkpoint store by the upload worker, in the background, retried within its allowance)
 *   and for the cloud's notices in the instance metadata: on an interruption notice it drains
 *   the node and checkpoints its jobs at once, without waiting for the control plane.
 * - A checkpoint asked for (preemption, interruption, cancel) ends within its limits: the job's
 *   grace to write it, then the upload's allowance; if it cannot be saved in time, the attempt is
 *   stopped and requeued from the newest checkpoint saved earlier. It never stays `checkpointing`.
 * - Every heartbeat the control plane takes renews the agent's lease on its work. When nothing has
 *   renewed it for the lease (node-rules: onLeaseLapsed), the agent fences itself: it checkpoints
 *   and stops every attempt, starts nothing, and once a heartbeat is taken again reports them
 *   requeued; the control plane requeues a silent machine's work only after that (so no attempt
 *   ever runs on two machines, whichever side lost the other).
 * - On a gang, every rank saves its own part of each checkpoint (under `rank-<r>/`) and restores
 *   its own; the first rank leads (it starts and ends the job); a rank that cannot start sends the
 *   whole attempt back to the queue, and the others stop.
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
  /** Where a service replica's waiting and running requests go (read from its metrics endpoint with the GPU metrics). */
  readonly serviceMetrics?: ServiceMetricSink;
  /**
   * One scrape of the node's own dcgm-exporter, when it runs one (agent/dcgm-readings.ts): read at
   * each heartbeat for the attempts' GPU use, it gives MIG instances the utilisation nvidia-smi lacks.
   */
  readonly dcgm?: () => Promise<string>;
  /** Where each attempt's output goes as it is written (CloudWatch Logs through the agent API); without it, it stays on the machine only. */
  readonly jobLogs?: JobLogSink;
  /**
   * Takes a replica running here out of its service's target group (the agent API's
   * `service/leave`); without it, reconcile alone takes a warned machine's replicas out.
   */
  readonly frontDoor?: { leave(jobId: string, attempt: number): Promise<void> };
  /**
   * The values of the secrets an attempt's job names by reference (core/secrets.ts), resolved by
   * the agent API under the attempt's credential. They go into the container's env file only (0600,
   * removed once the container has started), never into a log, a record or the job's folder.
   * Without it, a job that names secrets cannot start on this machine and says so.
   */
  readonly secrets?: { resolve(jobId: string, attempt: number): Promise<Readonly<Record<string, string>>> };
  readonly log: AgentLog;
  /**
   * Removes a job's folder once its attempt is over (default: the agent removes it itself). On a
   * fleet machine the agent is not root and a container writes as root: a root-owned helper that
   * removes folders under the jobs folder only does it (see infra/node-setup.ts).
   */
  readonly removeFolder?: (dir: string) => Promise<void>;
  /**
   * The machine's own port wall (infra/node-setup.ts `portWallScript`), attempt by attempt: a gang's
   * other machines may reach this one while the attempt runs here, a replica's port is open while it
   * serves; without it, nothing is opened or closed (off-cloud, tests without the wall).
   */
  readonly peers?: AttemptPorts;
  /**
   * A disk of its own for each job's folder (a root helper: infra/node-setup.ts `jobDiskScript`),
   * sized by its share of the machine; without it, job folders share the machine's volume.
   */
  readonly jobDisks?: JobDisks;
}

/** Gives a job folder a disk of its own, and takes it back. */
export interface JobDisks {
  make(dir: string, mib: number): Promise<void>;
  drop(dir: string): Promise<void>;
}

/** What the agent opens in the machine's port wall for one attempt (`key`: {@link wallKey}). */
export interface AttemptPorts {
  /** Exactly these addresses may reach the machine for this attempt (what it held before is replaced). */
  open(key: string, addresses: readonly string[]): Promise<void>;
  /** This port may be reached by whoever the security group lets through, for this attempt. */
  openPort(key: string, port: number): Promise<void>;
  close(key: string): Promise<void>;
  /** Closes every attempt's (an agent starting knows none of an earlier one's). */
  reset(): Promise<void>;
}

/** The port wall's key of one attempt: 16 hex digits of its job and attempt. */
export function wallKey(jobId: string, attempt: number): string {
  return createHash('sha256').update(`${jobId}\u0000${attempt}`).digest('hex').slice(0, 16);
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
  /** Seconds between sends of the attempts' output (default 2). */
  readonly logsSec?: number;
  /** Time a stopped job gets between SIGTERM and SIGKILL. */
  readonly stopGraceSec?: number;
  /** The lease the heartbeats renew, and the fence's length once it lapses (default node-rules DEFAULT_AGENT_LEASE). */
  readonly lease?: AgentLease;
  /**
   * Where the agent writes each renewal of its lease (and the lease's terms), for the machine's
   * watchdog (agent/watchdog.ts), which stops the job containers once it is past the lease and fence.
   */
  readonly leaseFile?: string;
  /** Checkpoints must be safe this long before the machine goes. */
  readonly noticeMarginSec?: number;
  /** How often the agent looks for the job's marker while it waits for a checkpoint it asked for. */
  readonly checkpointPollMs?: number;
  /** Upload speed assumed and the margin an upload gets (its allowance is size ÷ speed + margin). */
  readonly checkpointTiming?: CheckpointTiming;
  /** Uploads at a time (default 2). */
  readonly uploadConcurrency?: number;
  /**
   * The memory and CPUs the jobs' limits are shares of (default what the OS reports): set it where
   * the agent sees more than the jobs may have (a machine that also runs other services).
   */
  readonly machine?: {
    readonly memoryMiB?: number;
    readonly cpus?: number;
    readonly diskMiB?: number;
    /** What all jobs may write outside their folders together, MiB (core/container-limits.ts `writableLayerMiB`'s default: 10 GiB a GPU). */
    readonly writableLayerMiB?: number;
  };
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
  /** The modification time of the newest marker seen (its save is started). */
  lastMarkerMs: number;
  /** Its folder's disk, MiB, when it has one of its own. */
  readonly diskMiB?: number;
  /** Its folder's disk taken back (the folder is removed after). */
  diskDropped?: Promise<void>;
  /** The save in flight (one at a time per attempt). */
  saving?: LocalSave;
  /** The save of the newest marker started so far (kept after it ends, for a checkpoint that waits on it). */
  newestSave?: LocalSave;
  /** A marker newer than the one being saved, saved once that ends. */
  nextMarker?: CheckpointMarker;
  /** The folders this rank's saves of the attempt took (each save has its own: node-rules' saveLocation). */
  readonly savedTo: Set<string>;
  /** What its container may write outside its folders, MiB, where the runner can tell what it wrote. */
  readonly layerMiB?: number;
  /** Why the agent stopped it as a failure (it wrote past {@link layerMiB}): reported when it has exited. */
  evicted?: Reason;
  /** Set while the agent stops the process on purpose. */
  stopping: boolean;
  /** Its devices' readings, one look per heartbeat: reported with the event that ends the attempt. */
  use: GpuUseTally;
  /** A checkpoint asked for is being taken, and what follows it. */
  checkpointing?: { readonly then: 'requeue' | 'cancel'; readonly task: Promise<void> };
  /** The process is stopped and its end not yet written (the control plane did not answer): written again at each look at the work list. */
  unreported?: () => Promise<void>;
  exit?: Exit;
}

/** The attempt's note beside its folders (`attempt.json`): what an agent that starts again needs to take the attempt back. */
const ATTEMPT_NOTE = 'attempt.json';
interface AttemptNote {
  readonly startedAtMs: number;
  readonly baseProgressSec: number;
  /** It started from a checkpoint, in its resume folder. */
  readonly resumed: boolean;
  readonly devices: readonly string[];
  readonly diskMiB?: number;
  readonly layerMiB?: number;
  /** The agent signalled or stopped it on purpose (noted before it did). */
  readonly stoppedByAgent?: boolean;
}

type SaveResult = UploadResult & { readonly complete?: boolean; readonly ref?: CheckpointRef };

/** One save of a marker: where it goes, its end to wait on, and that end once it has come. */
interface LocalSave {
  readonly markerMs: number;
  readonly location: string;
  readonly done: Promise<SaveResult>;
  result?: SaveResult;
}

export class NodeAgent {
  private readonly local = new Map<string, LocalAttempt>();
  /** How long the newest asked-for checkpoint took to write (signal to marker), seconds. */
  private lastCheckpointWriteSec: number | undefined;
  /** When the last heartbeat (or registration) reached the control plane: the lease's last renewal. */
  private lastBeatAtMs: number | undefined;
  /** When the agent came up: the lease runs from here until a heartbeat is taken. */
  private readonly upAtMs: number;
  /** Set while the lease has lapsed: every attempt is being (or has been) stopped, and nothing starts. */
  private fence: { readonly sinceMs: number; readonly stopByMs: number } | undefined;
  /** Sends each attempt's output as it is written (with a log sink). */
  private readonly shipper: LogShipper | undefined;
  private readonly handledNotices = new Set<string>();
  /** Replicas (attempt keys) this agent took out of their target groups, their machine going. */
  private readonly leftFrontDoor = new Set<string>();
  private readonly devices: DeviceAllocator;
  private readonly uploads: UploadWorker;
  /** Pulls ahead the images the node's record lists (services that may place a replica here). */
  readonly prefetcher: ImagePrefetcher;
  /** Images of the containers it started: on its disk once they ran, which the prefetcher confirms. */
  private readonly ranImages = new Set<string>();
  private readonly cleanups = new Set<Promise<void>>();
  private registeredGpus: string | undefined;
  private dcgmFailing = false;
  private lastReport: NvidiaSmiReport | undefined;
  private lastGpus: GpuDevice[] = [];
  private health: { healthy: boolean; problem?: string } = { healthy: true };
  private queue: Promise<unknown> = Promise.resolve();
  private syncQueued = false;
  private timers: NodeJS.Timeout[] = [];
  private stopped = false;
  readonly instanceId: string;
  readonly groupId: string;

  constructor(
    private readonly ports: AgentPorts,
    private readonly config: AgentConfig,
  ) {
    this.instanceId = config.identity.instanceId;
    this.upAtMs = ports.clock.nowMs();
    this.groupId = config.identity.groupId ?? config.groupId ?? 'unknown';
    this.devices = new DeviceAllocator(
      () => this.inventory(),
      ports.migControl,
      (m) => ports.log.info(m),
    );
    this.uploads = new UploadWorker(ports.blobs, ports.clock, config.uploadConcurrency ?? 2);
    this.prefetcher = new ImagePrefetcher(ports.runner, ports.clock, ports.log);
    this.shipper = ports.jobLogs ? new LogShipper(ports.jobLogs, ports.clock, (m, extra) => ports.log.warn(m, extra)) : undefined;
  }

  private get lease(): AgentLease {
    return this.config.lease ?? DEFAULT_AGENT_LEASE;
  }

  private get stopGraceMs(): number {
    return (this.config.stopGraceSec ?? DEFAULT_STOP_GRACE_SEC) * 1000;
  }

  private get timing(): CheckpointTiming {
    return this.config.checkpointTiming ?? DEFAULT_CHECKPOINT_TIMING;
  }

  // ---- the loops ----------------------------------------------------------------------------

  /** Starts the loops (after one full pass, so a caller can await a registered node). */
  async start(): Promise<void> {
    // What an earlier agent opened in the port wall is its attempts': those it adopts open theirs again.
    await this.ports.peers?.reset();
    // The lease renewed first: the watchdog must not stop what this agent is about to adopt.
    await this.beat();
    const adopted = await this.adoptLeftovers();
    const leftovers = await this.ports.runner.cleanUpLeftovers(adopted);
    // What the watchdog stopped is gone now: its names are of no use to the next agent.
    if (this.config.leaseFile) rmSync(stoppedFileOf(this.config.leaseFile), { force: true });
    if (leftovers.length > 0)
      this.ports.log.warn('stopped job processes a previous agent left running that are no longer this machine’s to run', {
        leftovers,
      });
    await this.heartbeat();
    await this.watch();
    // The heartbeat never waits on the work list: a sync still running is not queued twice.
    this.every(this.config.heartbeatSec ?? 15, async () => {
      await this.beat();
      if (this.syncQueued) return;
      this.syncQueued = true;
      void this.serial(() => this.syncWork())
        .catch((error: unknown) =>
          this.ports.log.error('reading the work list failed; it is read again at the next heartbeat', { error: messageOf(error) }),
        )
        .finally(() => (this.syncQueued = false));
    });
    this.every(this.config.noticeSec ?? 5, () => this.watch());
    // The lease has its own timer: a heartbeat call that hangs (within its timeout) must not delay the fence.
    this.every(Math.min(5, this.lease.leaseSec / 4), () => this.checkLease());
    if (this.ports.metrics) this.every(this.config.metricsSec ?? 60, () => this.publishMetrics());
    if (this.shipper) this.every(this.config.logsSec ?? 2, () => this.shipper!.flushAll());
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
        await l.proc.stop(this.stopGraceMs);
        await l.held.release().catch(() => {});
      }),
    );
    this.local.clear();
  }

  /**
   * Stops the loops and leaves the jobs' containers running, for the agent that starts after this
   * one to adopt (an upgrade of the agent, or a test of what a crash leaves). Nothing is reported:
   * the attempts stay this node's in the store. A runner whose launches cannot outlive the agent
   * (plain processes) has them stopped, as {@link stop} does.
   */
  async leave(): Promise<void> {
    if (!this.ports.runner.detach) return this.stop();
    this.stopped = true;
    for (const t of this.timers) clearTimeout(t);
    this.timers = [];
    await this.queue.catch(() => {});
    this.ports.runner.detach();
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

  /** Runs `f` after everything queued before it: the agent's steps on its work list never interleave. */
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

  /** One heartbeat and one look at the work list (the loop does the same, without waiting for the work list). */
  async heartbeat(): Promise<void> {
    await this.beat();
    await this.serial(() => this.syncWork());
    // Off the heartbeat's path: the engine walks each container's files to size them, which may take a while on a big
    // layer, and the next heartbeat (the node's lease) must not wait on it. One look at a time.
    this.evicting ??= this.evictOverwriters()
      .catch((error: unknown) => this.ports.log.error('the look at what containers wrote failed', { error: messageOf(error) }))
      .finally(() => (this.evicting = undefined));
  }

  /** The look at what the containers wrote outside their folders, while one is under way. */
  private evicting?: Promise<void>;

  /**
   * Stops each container that has written past its limit outside its folders (kubelet's eviction
   * for ephemeral storage): Docker's data volume, which holds every container's files and the
   * images, stays free for its neighbours. The attempt fails with the reason once it has exited.
   */
  private async evictOverwriters(): Promise<void> {
    const runner = this.ports.runner;
    const watched = [...this.local.values()].filter((l) => l.layerMiB !== undefined && !l.exit && !l.stopping && !l.evicted);
    if (!runner.writtenOutside || watched.length === 0) return;
    let written: Map<string, number>;
    try {
      written = await runner.writtenOutside(watched);
    } catch (error) {
      this.ports.log.warn('could not read what the containers wrote outside their folders', { error: messageOf(error) });
      return;
    }
    for (const l of watched) {
      const bytes = written.get(launchKey(l));
      if (bytes === undefined || !layerIsOver(bytes, l.layerMiB!) || l.exit || l.stopping) continue;
      l.evicted = layerFull(Math.round(bytes / 2 ** 20), l.layerMiB!);
      this.ports.log.warn('stopping a job that wrote past its limit outside its folders', {
        job: l.jobId,
        attempt: l.attempt,
        rank: l.rank,
        writtenMiB: Math.round(bytes / 2 ** 20),
        limitMiB: l.layerMiB,
      });
      // Not "stopping": the attempt ended by its own doing, and its exit is reported as a failure (reportExit).
      void l.proc.stop(this.stopGraceMs);
    }
  }

  /** Writes the renewal for the watchdog: the whole file at once (a rename), never half of one. */
  private markLease(renewedAtMs: number): void {
    const file = this.config.leaseFile;
    if (!file) return;
    try {
      writeFileSync(`${file}.tmp`, JSON.stringify(leaseMark(renewedAtMs, this.lease)));
      renameSync(`${file}.tmp`, file);
    } catch (error) {
      // The watchdog then stops the containers at the lease's end, as it would for a dead agent: loud, not silent.
      this.ports.log.error('could not write the lease file the watchdog reads', { file, error: messageOf(error) });
    }
  }

  /** The heartbeat itself: GPUs and health, written to the node's record. Waits on no job. */
  async beat(): Promise<void> {
    const now = this.ports.clock.nowMs();
    let gpus: GpuDevice[] | undefined;
    let read: NvidiaSmiReport | undefined;
    try {
      const report = await this.inventory();
      gpus = toGpuDevices(report);
      const problems = report.gpus.flatMap(gpuProblems);
      if (report.gpus.length > 0 && gpus.length === 0)
        problems.push(`no GPU here is a model gpu-fleet schedules (${report.gpus.map((g) => g.name).join(', ')})`);
      this.health = problems.length > 0 ? { healthy: false, problem: problems.join('; ') } : { healthy: true };
      this.lastGpus = gpus;
      read = report;
    } catch (error) {
      this.health = { healthy: false, problem: messageOf(error) };
    }
    if (!this.health.healthy) this.ports.log.warn('node unhealthy: it takes no new work', { problem: this.health.problem });
    const gpuKey = gpus ? JSON.stringify(gpus) : this.registeredGpus;
    const known = gpuKey === this.registeredGpus && (await this.ports.nodes.heartbeat(this.instanceId, now, this.health));
    this.lastBeatAtMs = now;
    this.markLease(now);
    if (this.fence) {
      this.ports.log.info('the control plane takes heartbeats again: the lease is renewed, and new work may start', {
        fencedForSec: Math.round((now - this.fence.sinceMs) / 1000),
      });
      this.fence = undefined;
    }
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
    // The attempts' GPU use, from this beat's reading (after the heartbeat is sent: a slow dcgm-exporter never delays it).
    if (read && this.local.size > 0) {
      const dcgm = await this.dcgmReadings();
      for (const l of this.local.values()) if (!l.exit) l.use = addGpuLook(l.use, deviceReadings(read, l.held.devices, dcgm));
    }
    await this.reportReadiness(now);
  }

  /**
   * Probes the readiness path of each service replica run here, once its initial delay has passed
   * (as a kubelet does), and writes what it found when it changed (node-rules: replicaHealthReport).
   * The services step reads it where no load balancer health-checks the replica.
   */
  private async reportReadiness(nowMs: number): Promise<void> {
    for (const l of [...this.local.values()]) {
      const svc = l.job.spec.service;
      if (!svc || l.rank !== 0 || l.exit || l.stopping || nowMs < l.startedAtMs + svc.readiness.initialDelaySec * 1000) continue;
      const answering = await probeReadiness(l.job.spec);
      const event = replicaHealthReport(l.job, l.rank, answering);
      if (!event) continue;
      try {
        const out = await applyJobEvent(this.ports.jobs, l.jobId, event, this.ports.clock.nowMs());
        if (out.status === 'changed') l.job = out.job;
        this.ports.log.info(answering ? 'the replica answers its readiness path' : 'the replica does not answer its readiness path', {
          job: l.jobId,
          attempt: l.attempt,
          path: svc.readiness.path,
        });
      } catch (error) {
        this.ports.log.warn("could not record the replica's readiness; trying again at the next heartbeat", {
          job: l.jobId,
          error: messageOf(error),
        });
      }
    }
  }

  /** The node's dcgm-exporter readings now, or none (no exporter configured, or it did not answer: said once, not at every beat). */
  private async dcgmReadings(): Promise<ReadonlyMap<string, DcgmReading> | undefined> {
    if (!this.ports.dcgm) return undefined;
    try {
      const readings = parseDcgmReadings(await this.ports.dcgm());
      this.dcgmFailing = false;
      return readings;
    } catch (error) {
      if (!this.dcgmFailing)
        this.ports.log.warn('could not read the dcgm-exporter; MIG slices are measured without utilisation until it answers', {
          error: messageOf(error),
        });
      this.dcgmFailing = true;
      return undefined;
    }
  }

  private view(l: LocalAttempt | undefined): LocalView | undefined {
    if (!l) return undefined;
    return {
      rank: l.rank,
      ...(l.exit ? { exitCode: exitCode(l.exit) } : {}),
      ...(l.checkpointing ? { checkpointing: l.checkpointing.then } : {}),
      ...(l.stopping ? { stopping: true } : {}),
    };
  }

  private async syncWork(): Promise<void> {
    if (this.stopped) return; // a look queued by a loop turn that fired just before stop() must not start anything
    // Ends not yet written (the control plane did not answer when they happened) go first.
    for (const l of [...this.local.values()]) if (l.unreported) await l.unreported();
    const record = await this.ports.nodes.get(this.instanceId);
    // The images its record lists, then those its containers ran (found on the disk, not pulled again).
    this.prefetcher.want([...(record?.prefetchImages ?? []), ...this.ranImages]);
    const held = this.prefetcher.images;
    if (record && prefetchChanged(record.images, held)) await this.ports.nodes.noteImages(this.instanceId, held);
    if (record?.draining) await this.leaveFrontDoor(record.draining.deadlineMs);
    const entries: WorkListEntry[] = [];
    for (const [jobId, attempt] of Object.entries(record?.assigned ?? {})) {
      const job = await this.ports.jobs.get(jobId);
      const l = this.local.get(keyOf(jobId, attempt));
      if (l && job && job.attempt === l.attempt) l.job = job;
      entries.push({ jobId, attempt, job, local: this.view(l) });
    }
    const here = [...this.local.values()].map((l) => ({ l, jobId: l.jobId, attempt: l.attempt, busy: l.stopping || !!l.checkpointing }));
    const plan = planWorkList(this.instanceId, entries, here);
    // A save under way for an attempt that moved on (plan.finishing) goes on in its own task, and the process then stops.
    for (const { l } of plan.stop) {
      this.ports.log.info('the job moved on; stopping its process here', { job: l.jobId, attempt: l.attempt });
      await this.endLocal(l);
    }
    for (const s of plan.steps) await this.perform(s.jobId, s.attempt, s.job, s.step);
  }

  /**
   * A warned machine's replicas leave their services' target groups at the last look (a heartbeat
   * apart) before the machine could no longer drain them (core/serving/service.ts
   * agentLeavesFrontDoorNow): until then they take requests while their replacements start. A
   * call that fails is tried again at the next look; reconcile is the backstop.
   */
  private async leaveFrontDoor(deadlineMs: number): Promise<void> {
    const door = this.ports.frontDoor;
    const now = this.ports.clock.nowMs();
    const lookSec = this.config.heartbeatSec ?? 15;
    if (!door || !agentLeavesFrontDoorNow(deadlineMs, now, SERVICE_DEREGISTRATION_DELAY_SEC, lookSec)) return;
    for (const l of this.local.values()) {
      if (l.exit || l.rank !== 0 || !l.job.spec.service || this.leftFrontDoor.has(l.key)) continue;
      try {
        await door.leave(l.jobId, l.attempt);
        this.leftFrontDoor.add(l.key);
        this.ports.log.info('the machine is going: its replica left its target group to drain', { job: l.jobId, attempt: l.attempt });
      } catch (error) {
        this.ports.log.warn('the replica could not leave its target group; tried again at the next look', {
          job: l.jobId,
          error: messageOf(error),
        });
      }
    }
  }

  private async perform(jobId: string, attempt: number, job: Job | undefined, step: NodeStep): Promise<void> {
    const l = this.local.get(keyOf(jobId, attempt));
    const now = this.ports.clock.nowMs();
    switch (step.kind) {
      case 'drop':
        await this.ports.nodes.unassign(this.instanceId, jobId, attempt);
        return;
      case 'wait':
      case 'busy':
        return;
      case 'launch':
        await this.launch(job!, step.rank, step.size);
        return;
      case 'run':
        await this.collectCheckpoint(l!);
        return;
      case 'checkpoint':
        this.beginCheckpoint(
          l!,
          checkpointPlan({
            then: step.then,
            reason: step.reason,
            graceSec: graceSecOf(l!.job),
            sizeMiB: this.sizeMiBOf(l!),
            requestedAtMs: now,
            timing: this.timing,
          }),
        );
        return;
      case 'stop-cancel':
        await this.endLocal(l!);
        if (step.records) await this.finishCancelled(jobId, useOf(l!).gpuUse);
        return;
      case 'report-exit':
        await this.reportExit(l!);
        return;
      case 'requeue-from-store':
        if (step.records) await requeueAttempt(this.ports, { jobId, attempt, reason: step.reason, nowMs: now });
        return;
      case 'finish-cancel':
        if (step.records) await this.finishCancelled(jobId);
        return;
    }
  }

  private async launch(job: Job, rank: number, size: number): Promise<void> {
    if (this.stopped || this.fence) return; // fenced: nothing starts until the lease is renewed

    const now = this.ports.clock.nowMs();
    const key = keyOf(job.id, job.attempt);
    const assignment = job.placement!.nodes[rank]!;
    const root = this.attemptRoot(job.id, job.attempt);
    const dirs = { root, checkpoint: join(root, 'checkpoint'), resume: join(root, 'resume') };
    const cannotStart = async (why: string) => {
      this.ports.log.error('cannot start job here; its attempt goes back to the queue', {
        job: job.id,
        attempt: job.attempt,
        rank,
        error: why,
      });
      // Any rank: a gang whose part cannot start cannot run at all; the other ranks stop when they see it requeued.
      await requeueAttempt(this.ports, { jobId: job.id, attempt: job.attempt, reason: startFailure(this.instanceId, why), nowMs: now });
    };
    let held: HeldDevices;
    try {
      held = await this.devices.acquire(assignment, key);
    } catch (error) {
      await cannotStart(messageOf(error));
      return;
    }
    await mkdir(dirs.checkpoint, { recursive: true });
    // Its folder gets a disk of its own, its share of the jobs' volume: filling it fills nothing of its neighbours'.
    const diskMiB = this.ports.jobDisks
      ? jobDiskMiB(assignmentMilliGpu(assignment), { gpus: this.lastReport?.gpus.length ?? 0 }, this.jobsVolumeMiB())
      : undefined;
    if (diskMiB !== undefined) {
      try {
        await this.ports.jobDisks!.make(dirs.checkpoint, diskMiB);
      } catch (error) {
        await held.release();
        await cannotStart(`could not give the job's folder its disk: ${messageOf(error)}`);
        return;
      }
    }
    const indexed = await this.ports.checkpoints.latest(job.id).catch((error: unknown) => {
      this.ports.log.warn("could not read the checkpoint index; resuming from the job's own record of its newest checkpoint", {
        job: job.id,
        error: messageOf(error),
      });
      return undefined;
    });
    const latest = resumePoint(job, indexed);
    let resumed = false;
    if (latest) {
      const from = checkpointPartLocation(latest, rank);
      try {
        resumed = await this.ports.blobs.download(from, dirs.resume);
        if (!resumed)
          this.ports.log.warn('the newest checkpoint is not in the store; starting from scratch', { job: job.id, location: from });
      } catch (error) {
        this.ports.log.warn('could not fetch the newest checkpoint; starting from scratch', {
          job: job.id,
          location: from,
          error: messageOf(error),
        });
      }
    }
    const leader = size > 1 ? await this.ports.nodes.get(job.placement!.nodes[0]!.nodeId) : undefined;
    const rendezvousPort = rendezvousPortOf(job.placement);
    const cp = job.spec.checkpoint;
    let secretValues: Readonly<Record<string, string>> = {};
    if ((job.spec.secrets ?? []).length > 0) {
      if (!this.ports.secrets) {
        await held.release();
        await cannotStart('the job names secrets by reference, and this machine has no agent API to resolve them');
        return;
      }
      try {
        secretValues = await this.ports.secrets.resolve(job.id, job.attempt);
      } catch (error) {
        await held.release();
        // The error names the reference and why (not found, refused), never a value.
        await cannotStart(`could not resolve its secrets: ${messageOf(error)}`);
        return;
      }
    }
    const env: Record<string, string> = {
      ...job.spec.env,
      ...secretValues,
      GPU_FLEET_JOB_ID: job.id,
      GPU_FLEET_ATTEMPT: String(job.attempt),
      GPU_FLEET_TEAM: job.team,
      GPU_FLEET_NODE_RANK: String(rank),
      GPU_FLEET_NUM_NODES: String(size),
      GPU_FLEET_CHECKPOINT_LOCATION: this.ports.checkpoints.locationFor(job.id, job.attempt),
      ...(cp
        ? { GPU_FLEET_CHECKPOINT_SIGNAL: cp.signal, GPU_FLEET_CHECKPOINT_INTERVAL_SEC: String(saveEverySec(job) ?? cp.intervalSec) }
        : {}),
      ...(resumed && latest
        ? { GPU_FLEET_RESUME_FROM: checkpointPartLocation(latest, rank), GPU_FLEET_RESUME_PROGRESS_SEC: String(latest.progressSec) }
        : {}),
      ...(leader?.address ? { GPU_FLEET_LEADER_ADDRESS: leader.address } : {}),
      ...(rendezvousPort !== undefined ? { GPU_FLEET_LEADER_PORT: String(rendezvousPort) } : {}),
    };
    try {
      await this.openWall(job, size);
    } catch (error) {
      await held.release();
      await cannotStart(`could not open the machine's port wall for its attempt: ${messageOf(error)}`);
      return;
    }
    let proc: JobProcess;
    let layerMiB: number | undefined;
    try {
      if (this.ports.runner.prefetch) this.ranImages.add(job.spec.image);
      const container = containerSettings(job.spec);
      // Its share of the machine's memory, processes, CPUs and writable layer: the share of the machine's GPUs it holds.
      const machine = this.machineSize();
      layerMiB = this.ports.runner.writtenOutside
        ? writableLayerMiB(assignmentMilliGpu(assignment), machine, this.config.machine?.writableLayerMiB)
        : undefined;
      // Followed before it starts: the image pull's lines are the job's first.
      this.shipper?.track(key, { jobId: job.id, attempt: job.attempt, rank, team: job.team, labels: job.spec.labels ?? {} });
      proc = await this.ports.runner.start({
        jobId: job.id,
        attempt: job.attempt,
        rank,
        image: job.spec.image,
        command: job.spec.command,
        env,
        devices: held.devices,
        checkpointDir: dirs.checkpoint,
        ...(resumed ? { resumeDir: dirs.resume } : {}),
        logFile: join(root, 'output.log'),
        ...(this.shipper ? { onLine: (line: Buffer) => this.shipper!.line(key, line) } : {}),
        container,
        limits: containerLimits(assignmentMilliGpu(assignment), machine, container.shmSizeMiB),
        ...(layerMiB !== undefined ? { layerMiB } : {}),
      });
    } catch (error) {
      void this.shipper?.finish(key);
      await held.release();
      await cannotStart(messageOf(error));
      return;
    }
    const note: AttemptNote = {
      startedAtMs: now,
      baseProgressSec: resumed && latest ? latest.progressSec : 0,
      resumed,
      devices: held.devices,
      ...(diskMiB !== undefined ? { diskMiB } : {}),
      ...(layerMiB !== undefined ? { layerMiB } : {}),
    };
    try {
      writeFileSync(join(root, ATTEMPT_NOTE), JSON.stringify(note));
    } catch (error) {
      this.ports.log.warn('could not write the attempt’s note; an agent that starts again stops it rather than adopt it', {
        job: job.id,
        error: messageOf(error),
      });
    }
    this.follow({
      ...(diskMiB !== undefined ? { diskMiB } : {}),
      ...(layerMiB !== undefined ? { layerMiB } : {}),
      key,
      jobId: job.id,
      attempt: job.attempt,
      job,
      rank,
      size,
      proc,
      held,
      dirs: resumed ? dirs : { root, checkpoint: dirs.checkpoint },
      startedAtMs: now,
      baseProgressSec: note.baseProgressSec,
      lastMarkerMs: 0,
      // A save of this attempt the index already holds (an agent restarted mid-attempt) is never written again.
      savedTo: new Set(latest?.attempt === job.attempt ? [latest.location] : []),
      stopping: false,
      use: newGpuUseTally(),
    });
    this.ports.log.info('job started', {
      job: job.id,
      attempt: job.attempt,
      rank,
      devices: held.devices,
      resumedFrom: resumed && latest ? checkpointPartLocation(latest, rank) : undefined,
    });
    if (rank === 0 && job.state === 'placed') await applyJobEvent(this.ports.jobs, job.id, { type: 'start', attempt: job.attempt }, now);
  }

  /** Follows an attempt the agent runs (started or adopted) to its end, which it reports. */
  private follow(attempt: LocalAttempt): void {
    const key = attempt.key;
    // Every signal and stop the agent sends is noted first (noteStopping).
    const proc = attempt.proc;
    const l: LocalAttempt = {
      ...attempt,
      proc: {
        get pid() {
          return proc.pid;
        },
        exited: proc.exited,
        signal: (sig) => {
          this.noteStopping(l);
          return proc.signal(sig);
        },
        stop: (graceMs) => {
          this.noteStopping(l);
          return proc.stop(graceMs);
        },
      },
    };
    this.local.set(key, l);
    void l.proc.exited.then(async (exit) => {
      l.exit = exit;
      // What it wrote up to its end (a kill included) goes out first; a send that fails is retried by the next flush.
      await this.shipper
        ?.finish(key)
        .catch((error: unknown) =>
          this.ports.log.warn("could not send the job's last output; trying again", { job: l.jobId, error: String(error) }),
        );
      return this.serial(() => this.reportExit(l)).catch((error: unknown) =>
        this.ports.log.warn("could not report the job's end; trying again at the next heartbeat", { job: l.jobId, error: String(error) }),
      );
    });
  }

  /** The machine's size, as the containers' shares are cut from it. */
  private machineSize(): { memoryMiB: number; cpus: number; gpus: number } {
    return {
      memoryMiB: this.config.machine?.memoryMiB ?? Math.floor(os.totalmem() / 2 ** 20),
      cpus: this.config.machine?.cpus ?? os.availableParallelism(),
      gpus: this.lastReport?.gpus.length ?? 0,
    };
  }

  /**
   * Takes back what an earlier run of this agent left running (kubelet and the ECS agent do the
   * same after a restart): each container whose attempt the node's record still assigns here, that
   * the work list would launch here now, is followed again as if this agent had started it, on the
   * same devices, with its output picked up where the earlier agent's copy ends. The rest are
   * stopped by the caller; a container that is not gpu-fleet's is never listed.
   */
  private async adoptLeftovers(): Promise<Set<string>> {
    const kept = new Set<string>();
    const runner = this.ports.runner;
    if (!runner.findLeftovers || !runner.adopt) return kept;
    const found = await runner.findLeftovers();
    if (found.length === 0) return kept;
    await this.inventory();
    const record = await this.ports.nodes.get(this.instanceId);
    const stopped = new Set(this.config.leaseFile ? stoppedByWatchdog(this.config.leaseFile) : []);
    for (const left of found) {
      if (this.local.has(keyOf(left.jobId, left.attempt))) continue;
      const assigned = record?.assigned?.[left.jobId] === left.attempt;
      const job = assigned ? await this.ports.jobs.get(left.jobId) : undefined;
      const step = nextNodeStep(job, this.instanceId, left.attempt, this.view(undefined));
      const note = this.noteOf(left.jobId, left.attempt);
      // Stopped on purpose: by the watchdog, or by the earlier agent (a fence, a notice, a checkpoint it asked for) before it could report it.
      const stoppedOnPurpose = stopped.has(left.name) || note?.stoppedByAgent === true;
      if (!job || step.kind !== 'launch' || !adoptsLeftover({ assigned, stoppedOnPurpose, rank: left.rank, step })) continue;
      if (await this.adopt(left, job, step.rank, step.size, note)) kept.add(left.name);
    }
    if (kept.size > 0) this.ports.log.info('adopted the job containers an earlier agent left running', { adopted: [...kept] });
    return kept;
  }

  /** The attempt's folder on this machine. */
  private attemptRoot(jobId: string, attempt: number): string {
    return join(this.config.workDir, 'jobs', safeJobName(jobId), `attempt-${attempt}`);
  }

  /** The attempt's note, as the agent that started it wrote it (undefined: none, or unreadable). */
  private noteOf(jobId: string, attempt: number): AttemptNote | undefined {
    try {
      return JSON.parse(readFileSync(join(this.attemptRoot(jobId, attempt), ATTEMPT_NOTE), 'utf8')) as AttemptNote;
    } catch {
      return undefined;
    }
  }

  /**
   * Notes, before the agent signals or stops an attempt's process, that it does so on purpose: an
   * agent that starts after this one finds the process ended and must not take that for the job's
   * own end (core node-rules `adoptsLeftover`).
   */
  private noteStopping(l: LocalAttempt): void {
    const file = join(l.dirs.root, ATTEMPT_NOTE);
    const note = this.noteOf(l.jobId, l.attempt);
    if (!note || note.stoppedByAgent) return;
    try {
      writeFileSync(`${file}.tmp`, JSON.stringify({ ...note, stoppedByAgent: true }));
      renameSync(`${file}.tmp`, file);
    } catch (error) {
      this.ports.log.warn('could not note a stop in the attempt’s note', { job: l.jobId, error: messageOf(error) });
    }
  }

  /** Follows one container an earlier agent started; false (it is to be stopped) when it cannot be taken back as it was. */
  private async adopt(left: LeftLaunch, job: Job, rank: number, size: number, note: AttemptNote | undefined): Promise<boolean> {
    const key = keyOf(job.id, job.attempt);
    const root = this.attemptRoot(job.id, job.attempt);
    const refuse = (why: string) => {
      this.ports.log.warn('cannot adopt a job container an earlier agent left; it is stopped and its attempt handled as lost', {
        job: job.id,
        attempt: job.attempt,
        rank,
        why,
      });
      return false;
    };
    if (!note) return refuse(`its note (${join(root, ATTEMPT_NOTE)}) is missing or unreadable`);
    const assignment = job.placement!.nodes[rank]!;
    let held: HeldDevices;
    try {
      held = await this.devices.acquire(assignment, key);
    } catch (error) {
      return refuse(messageOf(error));
    }
    if (held.devices.join(',') !== note.devices.join(',')) {
      await held.release();
      return refuse(`it ran on devices ${note.devices.join(',')}, its placement now gives ${held.devices.join(',')}`);
    }
    try {
      await this.openWall(job, size);
    } catch (error) {
      await held.release();
      return refuse(`could not open the machine's port wall for it: ${messageOf(error)}`);
    }
    const container = containerSettings(job.spec);
    this.shipper?.track(key, { jobId: job.id, attempt: job.attempt, rank, team: job.team, labels: job.spec.labels ?? {} });
    const proc = this.ports.runner.adopt!(left, {
      logFile: join(root, 'output.log'),
      ...(this.shipper ? { onLine: (line: Buffer) => this.shipper!.line(key, line) } : {}),
      limits: containerLimits(assignmentMilliGpu(assignment), this.machineSize(), container.shmSizeMiB),
    });
    const indexed = await this.ports.checkpoints.latest(job.id).catch(() => undefined);
    const checkpoint = join(root, 'checkpoint');
    this.follow({
      ...(note.diskMiB !== undefined ? { diskMiB: note.diskMiB } : {}),
      ...(note.layerMiB !== undefined ? { layerMiB: note.layerMiB } : {}),
      key,
      jobId: job.id,
      attempt: job.attempt,
      job,
      rank,
      size,
      proc,
      held,
      dirs: note.resumed ? { root, checkpoint, resume: join(root, 'resume') } : { root, checkpoint },
      startedAtMs: note.startedAtMs,
      baseProgressSec: note.baseProgressSec,
      lastMarkerMs: 0,
      savedTo: new Set(indexed?.attempt === job.attempt ? [indexed.location] : []),
      stopping: false,
      use: newGpuUseTally(),
    });
    return true;
  }

  /** The volume the jobs' folders are on, MiB (the config's, else what the file system says). */
  private jobsVolumeMiB(): number {
    if (this.config.machine?.diskMiB !== undefined) return this.config.machine.diskMiB;
    const fs = statfsSync(join(this.config.workDir, 'jobs'));
    return Math.floor((fs.blocks * fs.bsize) / 2 ** 20);
  }

  /** Whether a job folder's own disk is full. */
  private diskFull(dir: string): boolean {
    try {
      const fs = statfsSync(dir);
      return diskIsFull(fs.bavail * fs.bsize, fs.blocks * fs.bsize);
    } catch {
      return false;
    }
  }

  /**
   * Opens the machine's port wall for an attempt (with a wall to open): a gang's other machines,
   * at the addresses their agents registered, and a replica's port. What the wall does not open,
   * no other machine of the fleet reaches.
   */
  private async openWall(job: Job, size: number): Promise<void> {
    const peers = this.ports.peers;
    if (!peers) return;
    const key = wallKey(job.id, job.attempt);
    if (size > 1) {
      const others = job.placement!.nodes.filter((n) => n.nodeId !== this.instanceId);
      const records = await Promise.all(others.map((n) => this.ports.nodes.get(n.nodeId)));
      const missing = others.filter((_, i) => !records[i]?.address).map((n) => n.nodeId);
      if (missing.length > 0) throw new Error(`machines ${missing.join(', ')} of the gang have registered no address yet`);
      await peers.open(
        key,
        records.map((r) => r!.address!),
      );
    }
    if (job.spec.service) await peers.openPort(key, job.spec.service.port);
  }

  /**
   * The process ended by itself (the agent did not stop it): report how, then forget it. If the
   * report cannot be written now, the attempt stays known (and is not started again) and the
   * next heartbeat tries again.
   */
  private async reportExit(l: LocalAttempt): Promise<void> {
    const exit = l.exit;
    if (!exit || l.stopping || l.checkpointing || this.local.get(l.key) !== l) return; // the path that stopped it (or is checkpointing it) reports
    const now = this.ports.clock.nowMs();
    const watchdog =
      this.config.leaseFile !== undefined && stoppedByWatchdog(this.config.leaseFile).includes(containerName(l.jobId, l.attempt, l.rank));
    const end = processEnd(exitCode(exit), watchdog);
    if (end.kind === 'requeue') {
      // The watchdog stopped it (this agent adopted it just as the watchdog acted, or hung).
      await requeueAttempt(this.ports, { jobId: l.jobId, attempt: l.attempt, reason: end.reason, nowMs: now });
      this.ports.log.warn("the machine's watchdog stopped a job; it goes back to the queue from its newest checkpoint", {
        job: l.jobId,
        attempt: l.attempt,
      });
      await this.forget(l);
      return;
    }
    // The exit decides now: a finished or failed attempt needs no checkpoint, so a save in flight never holds the report.
    const code = exitCode(exit);
    const failure = l.evicted
      ? { failure: l.evicted }
      : exit.outOfMemoryMiB !== undefined
        ? { failure: outOfMemory(exit.outOfMemoryMiB) }
        : code !== 0 && l.diskMiB !== undefined && this.diskFull(l.dirs.checkpoint)
          ? { failure: diskFull(l.diskMiB) }
          : {};
    await recordExit(this.ports.jobs, {
      jobId: l.jobId,
      attempt: l.attempt,
      rank: l.rank,
      exitCode: code,
      nowMs: now,
      ...useOf(l),
      ...failure,
    });
    this.ports.log.info('job process ended', {
      job: l.jobId,
      attempt: l.attempt,
      exitCode: code,
      signal: exit.signal,
      ...(exit.outOfMemoryMiB !== undefined ? { outOfMemoryMiB: exit.outOfMemoryMiB } : {}),
    });
    await this.forget(l);
  }

  /** Stops a local process on purpose (the job moved on or was cancelled) and forgets it. */
  private async endLocal(l: LocalAttempt): Promise<void> {
    l.stopping = true;
    if (!l.exit) await l.proc.stop(this.stopGraceMs);
    await this.forget(l);
  }

  private async forget(l: LocalAttempt): Promise<void> {
    if (this.local.get(l.key) !== l) return;
    this.local.delete(l.key);
    // A save in flight finishes (within its allowance) before the folder it reads goes.
    await l.saving?.done;
    await l.held
      .release()
      .catch((error: unknown) => this.ports.log.warn("could not release the job's MIG instance", { job: l.jobId, error: String(error) }));
    await this.ports.nodes.unassign(this.instanceId, l.jobId, l.attempt);
    // The folder's disk goes before the folder (a save still reading it finishes first).
    if (l.diskMiB !== undefined) {
      const disk = (async () => {
        await l.saving?.done;
        await this.ports.jobDisks?.drop(l.dirs.checkpoint);
      })().catch((error: unknown) =>
        this.ports.log.warn("could not take back the job folder's disk", { job: l.jobId, error: messageOf(error) }),
      );
      l.diskDropped = disk;
    }
    await this.ports.peers
      ?.close(wallKey(l.jobId, l.attempt))
      .catch((error: unknown) =>
        this.ports.log.warn("could not close the port wall to the attempt's peers", { job: l.jobId, error: messageOf(error) }),
      );
    // Keep only the job's log on the machine, once a save still reading the folder has ended (in the background: nothing waits on it).
    const saving = l.saving?.done;
    const cleanup = (async () => {
      await saving;
      await l.diskDropped;
      const remove = this.ports.removeFolder ?? ((dir: string) => rm(dir, { recursive: true, force: true }));
      await remove(l.dirs.checkpoint);
      if (l.dirs.resume) await remove(l.dirs.resume);
    })().catch((error: unknown) =>
      this.ports.log.warn("could not remove the job's checkpoint folder", { job: l.jobId, error: messageOf(error) }),
    );
    this.cleanups.add(cleanup);
    void cleanup.finally(() => this.cleanups.delete(cleanup));
  }

  private async finishCancelled(jobId: string, gpuUse?: AttemptGpuUse): Promise<void> {
    await finishCancelled(this.ports.jobs, jobId, this.ports.clock.nowMs(), gpuUse);
  }

  // ---- checkpoints ------------------------------------------------------------------------

  /**
   * Starts saving a checkpoint the job marked since the last one (every rank saves its part).
   * The upload runs in the upload worker; a newer marker found meanwhile is saved after it.
   */
  private async collectCheckpoint(l: LocalAttempt): Promise<void> {
    if (!l.job.spec.checkpoint) return;
    const read = await readMarker(l.dirs.checkpoint);
    if (!read) return;
    if (!read.ok) {
      if (l.lastMarkerMs !== -1)
        this.ports.log.warn('the job wrote a checkpoint marker the agent cannot use', { job: l.jobId, problem: read.problem });
      l.lastMarkerMs = -1;
      return;
    }
    const marker = read.marker;
    if (marker.modifiedAtMs <= l.lastMarkerMs) return;
    l.lastMarkerMs = marker.modifiedAtMs;
    if (l.saving) {
      l.nextMarker = marker;
      return;
    }
    this.startSave(l, marker);
  }

  private startSave(l: LocalAttempt, marker: CheckpointMarker): void {
    const startedAt = this.ports.clock.nowMs();
    const location = saveLocation(this.ports.checkpoints.locationFor(l.jobId, l.attempt), marker.path, l.savedTo);
    l.savedTo.add(location);
    const ref: CheckpointRef = {
      jobId: l.jobId,
      attempt: l.attempt,
      location,
      completedAtMs: startedAt,
      progressSec: marker.progressSec ?? Math.floor(l.baseProgressSec + (startedAt - l.startedAtMs) / 1000),
      ...(l.size > 1 ? { ranks: l.size } : {}),
    };
    const deadlineMs = startedAt + uploadAllowanceSec(checkpointSizeMiB(l.job, this.lastGpus, l.rank), this.timing) * 1000;
    const done = (async (): Promise<SaveResult> => {
      const up = await this.uploads.upload(
        join(l.dirs.checkpoint, marker.path),
        checkpointPartLocation(ref, l.rank),
        deadlineMs,
        l.dirs.checkpoint,
      );
      if (!up.ok) {
        this.ports.log.warn('could not save a checkpoint; the job resumes from an earlier one if it is moved', {
          job: l.jobId,
          tries: up.tries,
          error: up.error,
        });
        return up;
      }
      // The part's size as uploaded: the index bills the save's storage and transfer by it.
      const saved: CheckpointRef = {
        ...ref,
        completedAtMs: this.ports.clock.nowMs(),
        size: saveSizeOf(up.fileBytes, storeKindOf(ref.location)),
      };
      // The index is told; a complete save is attached to the job (core: the one verdict after an upload).
      const landed = await recordLandedSave(
        this.ports,
        saved,
        { rank: l.rank, attempt: l.attempt, nodeId: this.instanceId },
        saved.completedAtMs,
      );
      if (landed.kind === 'refused') {
        this.ports.log.warn('checkpoint not taken by the index; the job resumes from an earlier one', { job: l.jobId, error: landed.why });
        return { ok: false, tries: up.tries, error: landed.why };
      }
      const complete = landed.complete;
      this.ports.log.info('checkpoint saved', {
        job: l.jobId,
        attempt: l.attempt,
        rank: l.rank,
        location,
        progressSec: saved.progressSec,
        complete,
      });
      return { ...up, complete, ref: saved };
    })().catch((error: unknown): SaveResult => ({ ok: false, tries: 1, error: messageOf(error) }));
    const save: LocalSave = { markerMs: marker.modifiedAtMs, location, done };
    l.saving = save;
    l.newestSave = save;
    void done.then((result) => {
      save.result = result;
      if (l.saving?.done !== done) return;
      l.saving = undefined;
      const next = l.nextMarker;
      l.nextMarker = undefined;
      if (next && this.local.get(l.key) === l) this.startSave(l, next);
    });
  }

  /** Its checkpoint's size on this machine, MiB (the upload's allowance). */
  private sizeMiBOf(l: LocalAttempt): number {
    return checkpointSizeMiB(l.job, this.lastGpus, l.rank);
  }

  /** An attempt here as the notice and lease rules see it. */
  private noticeAttempt(l: LocalAttempt): NoticeAttempt {
    return noticeAttemptOf(l.key, l.job, l.stopping || l.checkpointing !== undefined, this.sizeMiBOf(l));
  }

  /**
   * A checkpoint asked for: signal the job, wait (within its grace) for the marker, save it
   * (within the upload's allowance; a gang's leader also waits for every rank's part), stop the
   * process, then requeue or cancel the attempt as the rules say. Whatever happens on the way,
   * the attempt ends: a checkpoint that could not be saved in time resumes from an earlier one.
   */
  private beginCheckpoint(l: LocalAttempt, plan: CheckpointPlan): void {
    const { then, reason: why } = plan;
    const task = (async () => {
      // A process that ended before it was asked ended on its own: its exit decides, not the request.
      const endedBefore = l.exit;
      const markerBefore = l.lastMarkerMs;
      const limits = plan;
      let outcome: CheckpointOutcome;
      try {
        outcome = endedBefore
          ? { kind: 'exited-before', exitCode: exitCode(endedBefore) }
          : await this.takeCheckpoint(l, markerBefore, limits);
      } catch (error) {
        outcome = { kind: 'not-saved', why: messageOf(error) };
      }
      await this.serial(async () => {
        l.stopping = true;
        if (!l.exit) await l.proc.stop(this.stopGraceMs);
        // Written now, or (the control plane not answering) at each look at the work list until it is.
        l.unreported = async () => {
          const now = this.ports.clock.nowMs();
          const job = (await this.ports.jobs.get(l.jobId)) ?? l.job;
          const result = afterCheckpoint(job, then, why, outcome);
          await recordCheckpointResult(this.ports, { jobId: l.jobId, attempt: l.attempt, rank: l.rank, result, nowMs: now, ...useOf(l) });
          l.unreported = undefined;
          await this.forget(l);
          this.ports.log.info(outcome.kind === 'saved' ? 'checkpointed' : 'stopped without a new checkpoint', {
            job: l.jobId,
            attempt: l.attempt,
            rank: l.rank,
            reason: why.code,
            then: result.event,
            ...(outcome.kind === 'not-saved' ? { why: outcome.why } : {}),
          });
        };
        await l.unreported();
      });
    })().catch((error: unknown) =>
      this.ports.log.error('checkpoint failed; the control plane requeues the job when its checkpoint times out', {
        job: l.jobId,
        error: messageOf(error),
      }),
    );
    l.checkpointing = { then, task };
  }

  /**
   * Signals the job, then looks (at each marker, upload end or process end, and at least every
   * poll) until core's {@link checkpointVerdict} says how the checkpoint ended: the agent observes,
   * the rule decides, as in the simulator.
   */
  private async takeCheckpoint(
    l: LocalAttempt,
    markerBefore: number,
    limits: { writeByMs: number; uploadByMs: number },
  ): Promise<CheckpointOutcome> {
    const cp = l.job.spec.checkpoint;
    const signalledAtMs = this.ports.clock.nowMs();
    if (cp) await l.proc.signal(cp.signal);
    const pollMs = this.config.checkpointPollMs ?? 500;
    let timedWrite = false;
    for (;;) {
      await this.serial(() => this.collectCheckpoint(l));
      const now = this.ports.clock.nowMs();
      // A marker it cannot use (-1) is no checkpoint.
      const wroteNew = l.lastMarkerMs !== markerBefore && l.lastMarkerMs !== -1;
      if (wroteNew && !timedWrite) {
        timedWrite = true;
        this.lastCheckpointWriteSec = (now - signalledAtMs) / 1000;
      }
      // The newest marker's save, once it has ended (it may wait behind an older one still uploading).
      const newest = l.newestSave;
      const settled = newest && newest.markerMs === l.lastMarkerMs && !l.nextMarker ? newest.result : undefined;
      const gangSaved =
        wroteNew && settled?.ok && !settled.complete && l.size > 1 && l.rank === 0
          ? (await this.ports.checkpoints.latest(l.jobId))?.location === newest!.location
          : undefined;
      const verdict = checkpointVerdict({
        // An agent that is stopping waits for no marker still to come.
        nowMs: this.stopped && !wroteNew ? Number.POSITIVE_INFINITY : now,
        writeByMs: limits.writeByMs,
        uploadByMs: limits.uploadByMs,
        graceSec: cp?.gracePeriodSec,
        wroteNew,
        ended: l.exit !== undefined,
        ...(settled
          ? { newestSave: settled.ok ? { ok: true, complete: settled.complete === true } : { ok: false, error: settled.error } }
          : {}),
        ...(gangSaved !== undefined ? { gangSaved } : {}),
      });
      if (verdict) return verdict;
      const untilLimit = (wroteNew ? limits.uploadByMs : limits.writeByMs) - now;
      const inFlight = l.saving && !l.saving.result ? l.saving.done : undefined;
      await Promise.race([
        ...(l.exit === undefined ? [l.proc.exited] : []),
        ...(inFlight ? [inFlight] : []),
        sleep(Math.max(0, Math.min(pollMs, untilLimit))),
      ]);
    }
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
    const what = n.kind === 'interruption' ? `${n.action} notice (${n.source})` : `rebalance recommendation (${n.source})`;
    const locals = [...this.local.values()];
    const rule = onMachineNotice(
      n.kind === 'interruption' ? { kind: 'interruption', actionAtMs: n.actionAtMs, what } : { kind: 'rebalance', what },
      now,
      this.config.noticeMarginSec ?? DEFAULT_POLICY.noticeMarginSec,
      locals.map((l) => this.noticeAttempt(l)),
      this.timing,
    );
    this.ports.log.warn(`the cloud says this machine is at risk: ${what}; draining and checkpointing now`, {
      deadline: new Date(rule.deadlineMs).toISOString(),
    });
    await this.ports.nodes.markDraining(this.instanceId, {
      sinceMs: now,
      reason: rule.drainReason,
      deadlineMs: rule.deadlineMs,
      groupId: this.groupId,
    });
    for (const step of rule.steps) {
      const l = locals.find((x) => x.key === step.key)!;
      if (step.kind === 'checkpoint') {
        // Any rank: the whole gang checkpoints (the other ranks see the job checkpointing).
        await applyJobEvent(this.ports.jobs, l.jobId, { type: 'checkpoint-requested', attempt: l.attempt, reason: rule.reason }, now);
        this.beginCheckpoint(l, step.plan);
      } else if (step.kind === 'requeue-at') {
        const t = setTimeout(
          () => {
            if (this.local.get(l.key) === l && !l.exit && !l.checkpointing) this.beginCheckpoint(l, step.plan);
          },
          Math.max(0, step.atMs - now),
        );
        this.timers.push(t);
      }
    }
  }

  // ---- the lease ------------------------------------------------------------------------------

  /**
   * The fence (node-rules: onLeaseLapsed): once nothing has renewed the lease for its length, every
   * attempt is checkpointed within the fence and stopped, and whatever still runs at its end is
   * stopped without waiting on anything that talks to the control plane.
   */
  async checkLease(): Promise<void> {
    const now = this.ports.clock.nowMs();
    const last = this.lastBeatAtMs ?? this.upAtMs;
    if (this.fence || this.stopped || !leaseLapsed(last, now, this.lease)) return;
    const live = [...this.local.values()].filter((l) => !l.exit);
    const rule = onLeaseLapsed(
      last,
      now,
      live.map((l) => this.noticeAttempt(l)),
      this.lease,
      this.timing,
    );
    this.fence = { sinceMs: now, stopByMs: rule.stopByMs };
    this.ports.log.error('the control plane has taken no heartbeat for the whole lease: checkpointing and stopping every job here', {
      silentSec: Math.round((now - last) / 1000),
      leaseSec: this.lease.leaseSec,
      attempts: live.map((l) => l.key),
    });
    for (const step of rule.steps) {
      const l = live.find((x) => x.key === step.key)!;
      // Nothing to save (requeue-at, now): the checkpoint path stops it at once and writes the requeue.
      if (step.kind !== 'keep') this.beginCheckpoint(l, step.plan);
    }
    const t = setTimeout(
      () => {
        for (const l of this.local.values()) {
          if (l.exit) continue;
          l.stopping = true;
          void l.proc.stop(this.stopGraceMs).catch(() => {});
        }
      },
      Math.max(0, rule.stopByMs - now),
    );
    this.timers.push(t);
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
      await this.publishServiceMetrics(atMs);
    });
  }

  /** Each service replica's own load figures, read from its metrics endpoint (the leader rank only). */
  private async publishServiceMetrics(atMs: number): Promise<void> {
    if (!this.ports.serviceMetrics) return;
    const out: ServiceMetricSample[] = [];
    for (const l of this.local.values()) {
      const serviceId = l.job.spec.labels?.[SERVICE_LABEL];
      if (!serviceId || l.rank !== 0) continue;
      const values = await scrapeReplica(l.job.spec);
      for (const [metric, value] of Object.entries(values) as [ServiceMetric, number][])
        out.push({ serviceId, jobId: l.jobId, attempt: l.job.attempt, metric, value, atMs });
    }
    if (out.length > 0) await this.ports.serviceMetrics.put(out);
  }

  // ---- Prometheus -------------------------------------------------------------------------

  /**
   * One scrape in the DCGM exporter's names (agent/dcgm-exporter.ts): the GPUs as nvidia-smi reads
   * them now, each device with the attempt the agent gave it, and the agent's own figures.
   */
  async prometheusScrape(hostname: string): Promise<string> {
    const report = await this.inventory();
    const holders = new Map<string, GpuHolder>();
    for (const l of this.local.values())
      for (const d of l.held.devices) holders.set(d, { job: l.jobId, team: l.job.team, attempt: l.attempt });
    const now = this.ports.clock.nowMs();
    return dcgmExposition(report, {
      hostname,
      holders,
      agent: {
        ...(this.lastBeatAtMs !== undefined ? { heartbeatAgeSec: Math.max(0, (now - this.lastBeatAtMs) / 1000) } : {}),
        ...(this.lastCheckpointWriteSec !== undefined ? { lastCheckpointWriteSec: this.lastCheckpointWriteSec } : {}),
        ...(this.uploads.lastUploadSec !== undefined ? { lastCheckpointUploadSec: this.uploads.lastUploadSec } : {}),
        uploadsInFlight: this.uploads.uploading,
        attemptsRunning: this.local.size,
        ...(this.shipper ? { logLinesDropped: this.shipper.counts.dropped, logBytesDropped: this.shipper.counts.droppedBytes } : {}),
      },
    });
  }

  // ---- for inspection and tests -----------------------------------------------------------

  /** The attempts running here now. */
  running(): { jobId: string; attempt: number; pid: number | undefined; rank: number }[] {
    return [...this.local.values()].map((l) => ({ jobId: l.jobId, attempt: l.attempt, pid: l.proc.pid, rank: l.rank }));
  }

  /** Resolves when every checkpoint and upload in progress has finished. */
  async settled(): Promise<void> {
    await Promise.all([...this.local.values()].map((l) => l.checkpointing?.task));
    await this.uploads.idle();
    await this.queue;
    await Promise.all([...this.cleanups]);
    await this.evicting;
  }

  get lastInventory(): NvidiaSmiReport | undefined {
    return this.lastReport;
  }
}

/** The attempt's measured use so far, for the event that ends it (nothing when no heartbeat read its devices). */
function useOf(l: LocalAttempt): { gpuUse?: AttemptGpuUse } {
  const use = summarizeGpuUse(l.use, l.attempt, l.rank);
  return use ? { gpuUse: use } : {};
}

function keyOf(jobId: string, attempt: number): string {
  return `${jobId}#${attempt}`;
}

/** The exit code a shell would report: 128 + the signal's number for a process killed by a signal. */
function exitCode(exit: Exit): number {
  if (exit.exitCode !== null) return exit.exitCode;
  const signals = os.constants.signals as Readonly<Record<string, number>>;
  return 128 + (signals[exit.signal ?? ''] ?? 0);
}
