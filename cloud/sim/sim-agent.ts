import type { InstanceType } from '../../core/catalog.ts';
import { ConflictError } from '../../core/errors.ts';
import { stillRuns, type Instance } from '../../core/fleet.ts';
import { GPU_SPEED, type GpuDevice, type GpuModel } from '../../core/gpu.ts';
import { migProfile, MIG_GPUS } from '../../core/mig.ts';
import { prefetchChanged } from '../../core/serving/prefetch.ts';
import {
  addGpuLook,
  newGpuUseTally,
  summarizeGpuUse,
  type AttemptGpuUse,
  type DeviceReading,
  type GpuUseTally,
} from '../../core/gpu-use.ts';
import { saveSizeOf, storeKindOf, type Site } from '../../core/bytes.ts';
import { checkpointFolder, checkpointPartLocation, type CheckpointRef, type Job } from '../../core/job.ts';
import { agentLeavesFrontDoorNow, SERVICE_LABEL } from '../../core/serving/service.ts';
import type { CheckpointHistory, CheckpointStore, Clock, JobLogSink, JobStore, NodeStore } from '../../core/ports.ts';
import type { Reason } from '../../core/reason.ts';
import { AgentRefused, agentView, type AgentView, type AgentSources } from '../../core/services/agent-access.ts';
import { applyJobEvent, finishCancelled, recordLandedSave } from '../../core/services/job-updates.ts';
import { recordCheckpointResult, recordExit } from '../../core/services/node-reports.ts';
import {
  afterCheckpoint,
  checkpointVerdict,
  checkpointPlan,
  checkpointSizeMiB,
  adoptsLeftover,
  DEFAULT_AGENT_LEASE,
  DEFAULT_CHECKPOINT_TIMING,
  DEFAULT_STOP_GRACE_SEC,
  leaseLapsed,
  nextNodeStep,
  planWorkList,
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
  uploadRetryDelayMs,
  processEnd,
  watchdogStops,
  type CheckpointPlan,
  type WorkListEntry,
  type CheckpointTiming,
  type LocalAttempt as LocalView,
  type MachineNotice,
  type NoticeAttempt,
} from '../../core/services/node-rules.ts';
import { requeueAttempt } from '../../core/services/requeue.ts';
import type { SimCloud } from './sim-cloud.ts';

const MIB = 1024 * 1024;

/**
 * The simulated machines. The world is simulated here: machines, the processes on them (a job
 * makes progress, writes a checkpoint at its interval and when signalled, ends when its work is
 * done), checkpoint uploads that take time at a bandwidth and can fail, and faults. What each
 * machine's agent does with its work list is not: every step comes from the node-side rules in
 * core (core/services/node-rules.ts), the very ones the real agent follows.
 */

export interface SimAgentOptions {
  readonly clock: Clock;
  readonly jobs: JobStore;
  readonly nodes: NodeStore;
  readonly checkpoints: CheckpointStore;
  /** The control plane's checkpoint history: a machine's reads of saves are noted in it for the bill, as through the agent API. */
  readonly history?: Pick<CheckpointHistory, 'noteRead'>;
  readonly instanceTypes: ReadonlyMap<string, InstanceType>;
  /** How many seconds of work the job really needs (the simulated process knows; the planner only has estimates). */
  readonly workSecOf: (job: Job) => number;
  /** The exit code the simulated process ends with (default 0). */
  readonly exitCodeOf?: (job: Job) => number;
  /** Seconds a resumed job spends restoring (beyond downloading its checkpoint) before it makes progress again (default 0). */
  readonly restoreSec?: number;
  /** Upload and download speed of a machine's checkpoints, MiB/s (default 500), and the agent's allowance margin. */
  readonly uploadMiBPerSec?: number;
  readonly timing?: CheckpointTiming;
  /** Seconds a job takes to write a checkpoint after its signal (default 10, never more than its grace). */
  readonly writeSec?: number;
  /** Fault injection: the machine's agent (and the jobs it runs) is dead at this time. */
  readonly agentDead?: (inst: Instance, nowMs: number) => boolean;
  /**
   * Fault injection: the machine's agent process is down at this time, and its jobs' containers
   * run on without it (they outlive it); the machine's watchdog stops them once its lease is past
   * the lease and fence. When it is up again it adopts what it may (core node-rules `adoptsLeftover`).
   */
  readonly agentDown?: (inst: Instance, nowMs: number) => boolean;
  /** The machines lack the watchdog (the world as it was before it): a dead agent's containers run on until the machine goes. */
  readonly noWatchdog?: boolean;
  /**
   * Fault injection: whether the agent API answers this machine's heartbeat, or its look at its
   * work list (everything else it writes goes with that look), now. Unanswered, the agent does
   * only what needs no control plane, and fences itself once its lease lapses.
   */
  readonly agentApiAnswers?: (instanceId: string, nowMs: number, call: 'heartbeat' | 'work') => boolean;
  /** Fault injection: the job fails to write this checkpoint (nothing is saved). */
  readonly checkpointFails?: (job: Job, nowMs: number) => boolean;
  /** Fault injection: this try of an upload fails. */
  readonly uploadFails?: (upload: { jobId: string; attempt: number; rank: number; tries: number }) => boolean;
  /** Fault injection: this rank of this attempt cannot start (its devices are gone, its image will not start). */
  readonly startFails?: (job: Job, rank: number) => boolean;
  /** The machine boots in MIG mode (its group's): its agent reports MIG GPUs and the GPU instances its jobs use, with their placements. */
  readonly migMachine?: (inst: Instance) => boolean;
  /** Whether a machine that is gone was let go by its terminate hook (the world knows why a machine ended). */
  readonly releasedByHook?: (instanceId: string) => boolean;
  /** Where the simulated processes' output goes (what `gpu-fleet logs --sim` reads): a line at each start, checkpoint and end. */
  readonly output?: JobLogSink;
  /**
   * What a job's process really uses of each GPU device it is given (the world's truth; its agent
   * only sees readings of it). Without one, a process reports no GPU use. A process given less
   * memory than it needs fails (out of memory); one given less compute runs slower.
   */
  readonly gpuUseOf?: (job: Job) => ScriptedGpuUse | undefined;
  /**
   * Seconds a service replica's process takes to load before its readiness path answers, given
   * whether its machine holds its image already (default: its readiness probe's initial delay, the
   * time its spec expects).
   */
  readonly replicaLoadSecOf?: (job: Job, imageCached: boolean) => number;
  /**
   * Seconds one pull of the image takes on a simulated machine, for images its record lists to pull
   * ahead (the real agent pulls them through the container engine); undefined: an image the world
   * knows no size of, pulled at once.
   */
  readonly imagePullSecOf?: (image: string) => number | undefined;
  /** Fault injection: this replica's load hangs: its process runs, its readiness path never answers. */
  readonly replicaHangs?: (job: Job) => boolean;
  /**
   * What the agent API answers from beyond the stores (core/services/agent-access.ts): the services
   * and types a machine being prepared in a warm pool is told its images from (without them it
   * pulls nothing), the load balancer a warned machine's replicas leave (without it, reconcile alone
   * takes them out).
   */
  readonly sources?: AgentSources;
  /**
   * When a warned machine's replicas leave their target groups: the groups' deregistration delay
   * and how often the agent looks, seconds (without it, only reconcile takes them out).
   */
  readonly frontDoorTiming?: { readonly drainSec: number; readonly lookSec: number };
  /** The images on a machine's volume when it boots: those its agent pulled while it was prepared in a warm pool. */
  readonly imagesOnVolume?: (instanceId: string) => readonly string[];
  /** The checkpoint store's objects and bill (the world's): each rank's part of a save lands there, and is read back to resume. */
  readonly bucket?: {
    put(o: { objectUri: string; jobId: string; team: string; bytes: number; machine: Site }): void;
    get(o: { objectUri: string; team: string; bytes: number; machine: Site }): void;
  };
  /**
   * The checkpoint root a machine saves into where its site keeps a bucket of its own (a GCP
   * region's, `gs://…/`), as a deployed GCP machine's agent is given; elsewhere, the index's root.
   */
  readonly rootFor?: (machine: Site) => string | undefined;
  /** Those sites' roots: a machine may read a save kept there (the agent view's rule, core/services/agent-access.ts). */
  readonly otherRoots?: readonly string[];
}

/** A simulated process's use of each of its devices: the memory it fills at its peak, and its work rate (dense FP16 TFLOPS, GPU_SPEED's unit). */
export interface ScriptedGpuUse {
  readonly peakMemoryMiB: number;
  readonly tflops: number;
}

/** Exit code of a simulated process that ran out of GPU memory (what a CUDA out-of-memory error ends a Python job with). */
export const OUT_OF_MEMORY_EXIT_CODE = 1;

/** Work an attempt lost when it ended without finishing (interrupted, node lost, requeued). */
export interface LostWork {
  readonly jobId: string;
  readonly attempt: number;
  readonly lostSec: number;
  /** What the rules allow it to lose: its checkpoint interval, grace and upload allowance (undefined for a job without checkpoints). */
  readonly allowedSec?: number;
  /** A checkpoint of this job failed (injected), so the bound does not apply. */
  readonly checkpointFailed: boolean;
}

/** An attempt that resumed from a checkpoint older than the newest one the index had taken as complete. */
export interface StaleResume {
  readonly jobId: string;
  readonly attempt: number;
  /** Progress of what it resumed from (0: from scratch), and of the newest complete checkpoint then. */
  readonly resumedSec: number;
  readonly newestSec: number;
}

const MIG_MODELS = new Set<GpuModel>(Object.keys(MIG_GPUS) as GpuModel[]);

/** A live process, as its machine sees it. */
export interface LiveProcess {
  readonly instanceId: string;
  readonly jobId: string;
  readonly attempt: number;
  readonly rank: number;
}

/** A job's process on a simulated machine: its part (rank) of one attempt. */
interface SimProcess {
  /** The checkpoint root its machine saves into, when its site keeps its own (else the index's). */
  readonly saveRoot?: string;
  /** A replica its agent took out of its service's target group (its machine is going). */
  leftFrontDoor?: boolean;
  /** Lines it wrote so far (the next line's number). */
  written?: number;
  readonly jobId: string;
  readonly attempt: number;
  readonly rank: number;
  readonly size: number;
  job: Job;
  readonly startedAtMs: number;
  /** When it makes progress again after downloading and restoring its checkpoint. */
  readonly readyAtMs: number;
  readonly baseProgressSec: number;
  /** Work done per second on its devices: 1, or less when they are too small for its scripted compute. */
  readonly rate: number;
  /** A service replica: when its readiness path starts answering (never, for one whose load hangs). */
  readonly answersFromMs?: number;
  /** Its devices as its agent reads them, and the tally of the readings (one look per tick). */
  readonly devices?: {
    readonly model: GpuModel;
    readonly memoryMiB: number;
    readonly share: number;
    readonly count: number;
    readonly mig: boolean;
  };
  use: GpuUseTally;
  readonly sizeMiB: number;
  /** The newest checkpoint the job wrote (its marker), and the one whose save was started. */
  marker?: { readonly atMs: number; readonly progressSec: number; readonly path: string };
  collectedAtMs: number;
  nextPeriodicAtMs: number;
  /** The job was signalled to checkpoint: it writes at this time, then exits. */
  signalWriteAtMs?: number;
  exit?: { readonly atMs: number; readonly code: number };
  /** The agent is taking a checkpoint it was asked for. */
  checkpointing?: {
    readonly then: 'requeue' | 'cancel';
    readonly why: Reason;
    readonly requestedAtMs: number;
    readonly markerBefore: number;
    readonly writeByMs: number;
    readonly uploadByMs: number;
    readonly endedBefore?: number;
  };
  /** Its machine got a notice and it cannot checkpoint: the agent stops and requeues it at this time. */
  requeueAt?: { readonly atMs: number; readonly plan: CheckpointPlan };
  /** Its agent fenced itself (its lease lapsed): whatever still runs is stopped at this time. */
  fenceStopAtMs?: number;
  /** The machine's watchdog stopped it (its agent's lease ran out). */
  watchdogStopped?: boolean;
  /** Its agent signalled or stopped it on purpose (what the real agent notes in the attempt's note before it does). */
  stoppedByAgent?: boolean;
  /** The save in flight, and a newer marker queued behind it. */
  upload?: SimUpload;
  /** The folders this rank's saves of the attempt took (each save has its own: node-rules' saveLocation). */
  readonly savedTo: Set<string>;
  queued?: { readonly atMs: number; readonly progressSec: number; readonly path: string };
  /** How the newest save ended (for a checkpoint that waits on it). */
  lastSave?: {
    readonly markerAtMs: number;
    readonly ok: boolean;
    readonly complete: boolean;
    readonly location: string;
    readonly error?: string;
  };
}

interface SimUpload {
  readonly markerAtMs: number;
  readonly ref: CheckpointRef;
  readonly deadlineMs: number;
  readonly durationMs: number;
  doneAtMs: number;
  tries: number;
}

interface SimMachine {
  readonly instance: Instance;
  /** Its private address (simulatedAddress). */
  readonly address: string;
  readonly processes: Map<string, SimProcess>;
  /** The GPUs last registered (the layout changes as MIG jobs come and go). */
  registered?: string;
  /** Last seen held by its group's terminate hook. */
  inHook?: boolean;
  /** When a heartbeat last reached the control plane (the lease's renewal); the machine's boot until then. */
  renewedAtMs: number;
  /** Set while its lease has lapsed: its attempts are stopped and nothing starts. */
  fencedSinceMs?: number;
  /** Set while its agent process is down (its containers run on). */
  agentDownSinceMs?: number;
  /** The container images on its disk: pulled by a replica that ran here, or ahead (its record's list). */
  readonly images: Set<string>;
  /** The image being pulled ahead, one at a time as the real agent does, and when its pull ends. */
  pulling?: { readonly image: string; readonly startedAtMs: number; readonly doneAtMs: number };
  /** Of its images, those it pulled ahead. */
  readonly pulledAhead: Set<string>;
}

export interface AgentStats {
  started: number;
  succeeded: number;
  checkpoints: number;
  cancelled: number;
  preempted: number;
  checkpointFailures: number;
  uploadFailures: number;
  uploadsGivenUp: number;
  /** Saves the checkpoint index refused (progress behind the newest complete checkpoint). */
  checkpointsRefused: number;
  /** Checkpoints asked for whose upload was still going when the machine's terminate hook let it go (it timed out, or was completed too soon). */
  savesCutByHook: number;
  startFailures: number;
  /** Service replicas whose load hung (fault injection): they ran, and never answered their readiness path. */
  replicasHung: number;
  /** Service replicas that pulled their image (the others found it on their machine). */
  imagePulls: number;
  /** Images machines pulled ahead because their records listed them. */
  prefetchPulls: number;
  writeRetries: number;
  /** Calls the agent API's rules refused (core/services/agent-access.ts): an agent following the node-side rules makes none. */
  refusedCalls: number;
  /** Heartbeats and looks at the work list the agent API did not answer (fault injection). */
  unansweredCalls: number;
  /** Attempts agents stopped themselves when their lease lapsed (node-rules onLeaseLapsed). */
  fencedAttempts: number;
  /** Agents that went down (their containers running on), started again, and what they adopted or stopped on starting. */
  agentsDown: number;
  agentRestarts: number;
  adopted: number;
  leftoversStopped: number;
  /** Processes the machines' watchdogs stopped (their agents' leases ran out). */
  watchdogStopped: number;
}

/**
 * Every simulated machine's agent and processes. Each tick, a booted machine registers, every
 * live agent sends a heartbeat (uploads never hold it back) and reads its work list; each entry's
 * step comes from the node-side rules. A machine that is gone takes its processes and uploads with it.
 */
export class SimAgents {
  private readonly machines = new Map<string, SimMachine>();
  /** Replicas that pulled their image, by service id (the others found it on their machine). */
  readonly imagePullsOf = new Map<string, number>();
  /** Replicas whose image their machine had pulled ahead (finished, or under way), by service id. */
  readonly pulledAheadOf = new Map<string, number>();
  readonly stats: AgentStats = {
    started: 0,
    succeeded: 0,
    checkpoints: 0,
    cancelled: 0,
    preempted: 0,
    checkpointFailures: 0,
    uploadFailures: 0,
    uploadsGivenUp: 0,
    checkpointsRefused: 0,
    savesCutByHook: 0,
    startFailures: 0,
    replicasHung: 0,
    imagePulls: 0,
    prefetchPulls: 0,
    writeRetries: 0,
    refusedCalls: 0,
    unansweredCalls: 0,
    fencedAttempts: 0,
    agentsDown: 0,
    agentRestarts: 0,
    adopted: 0,
    leftoversStopped: 0,
    watchdogStopped: 0,
  };
  /** The first calls refused, with why (kept to 20). */
  readonly refusals: string[] = [];
  /** Each machine's agent sees the stores as a real machine does through the agent API: the same rules, the same view. */
  private readonly views = new Map<string, AgentView>();
  /** Attempts ended without finishing, with the work they lost. */
  readonly lost: LostWork[] = [];
  /** Attempts that resumed from an older checkpoint than the newest complete one (the invariant says none). */
  readonly staleResumes: StaleResume[] = [];
  /** The newest checkpoint of each job whose save completed, as the simulation saw it: the ground truth resumes are checked against. */
  private readonly newestComplete = new Map<string, CheckpointRef>();
  private readonly failedCheckpointJobs = new Set<string>();
  private readonly timing: CheckpointTiming;

  constructor(private readonly options: SimAgentOptions) {
    this.timing = options.timing ?? {
      ...DEFAULT_CHECKPOINT_TIMING,
      uploadMiBPerSec: options.uploadMiBPerSec ?? DEFAULT_CHECKPOINT_TIMING.uploadMiBPerSec,
    };
  }

  private as(m: SimMachine | string): AgentView {
    const id = typeof m === 'string' ? m : m.instance.id;
    let view = this.views.get(id);
    if (!view) {
      view = agentView(this.options, id, this.options.clock, this.options.sources);
      this.views.set(id, view);
    }
    return view;
  }

  /** A call the rules refused is counted (and the first few kept), as the agent API's metric would; the agent carries on. */
  private refused(error: unknown): boolean {
    if (!(error instanceof AgentRefused)) return false;
    this.stats.refusedCalls++;
    if (this.refusals.length < 20) this.refusals.push(`${error.nodeId}: ${error.message}`);
    return true;
  }

  private get bandwidth(): number {
    return this.options.uploadMiBPerSec ?? DEFAULT_CHECKPOINT_TIMING.uploadMiBPerSec;
  }

  /** Every live process on every machine that still has any (draining, stopping, terminating ones included). */
  liveProcesses(): LiveProcess[] {
    const out: LiveProcess[] = [];
    for (const m of this.machines.values()) {
      for (const p of m.processes.values())
        if (!p.exit) out.push({ instanceId: m.instance.id, jobId: p.jobId, attempt: p.attempt, rank: p.rank });
    }
    return out;
  }

  /** Work done so far by the running attempt of a job, in seconds (its checkpoint's when nothing runs). */
  progressSec(job: Job, nowMs: number): number {
    const p = this.processOf(job.id, job.attempt, 0);
    return p ? this.progress(p, nowMs) : (job.checkpoint?.progressSec ?? 0);
  }

  private processOf(jobId: string, attempt: number, rank: number): SimProcess | undefined {
    for (const m of this.machines.values()) {
      const p = m.processes.get(jobId);
      if (p && p.attempt === attempt && p.rank === rank) return p;
    }
    return undefined;
  }

  private progress(p: SimProcess, nowMs: number): number {
    const until = p.exit?.atMs ?? nowMs;
    return p.baseProgressSec + (p.rate * Math.max(0, until - p.readyAtMs)) / 1000;
  }

  /**
   * The agents of machines booted into a warm pool: each asks the agent API which images to pull
   * (the rule the real agent is answered by), pulls them one after another from the end of its
   * boot, and lets its launch hook go, so the machine is stopped with them on its volume. With the
   * API not answering, it goes on without them, as the real agent does after its tries.
   */
  async prepareWarm(cloud: Pick<SimCloud, 'warmAwaitingAgent' | 'notePrepared'>): Promise<void> {
    const now = this.options.clock.nowMs();
    for (const w of cloud.warmAwaitingAgent()) {
      const machine: Instance = { ...w.offering, id: w.id, groupId: w.groupId, state: 'running', launchedAtMs: w.launchedAtMs };
      let images: readonly string[] = [];
      if (this.options.sources?.services && (this.options.agentApiAnswers?.(w.id, now, 'work') ?? true)) {
        images = await this.as(w.id).imagesToPrepare({ ...machine, migMode: this.options.migMachine?.(machine) ?? false });
      }
      const pullMs = images.reduce((sum, image) => sum + (this.options.imagePullSecOf?.(image) ?? 0) * 1000, 0);
      cloud.notePrepared(w.id, images, w.preparedAtMs + pullMs);
    }
  }

  async tick(instances: readonly Instance[]): Promise<void> {
    const now = this.options.clock.nowMs();
    const live = new Map<string, Instance>();
    for (const inst of instances) if (stillRuns(inst.state) && !this.options.agentDead?.(inst, now)) live.set(inst.id, inst);
    // Machines that are gone (or whose agent died) take their processes and uploads with them.
    for (const [id, m] of [...this.machines]) {
      if (live.has(id)) continue;
      const gone = instances.find((i) => i.id === id);
      if (gone && stillRuns(gone.state) && !this.options.agentDead?.(gone, now)) continue;
      for (const p of m.processes.values()) {
        // A checkpoint asked for whose upload was still going when its terminate hook let the machine go.
        if (m.inHook && p.checkpointing && p.upload && this.options.releasedByHook?.(id)) this.stats.savesCutByHook++;
        await this.noteLost(p, now);
      }
      this.machines.delete(id);
    }
    for (const inst of live.values()) {
      let m = this.machines.get(inst.id);
      if (!m) {
        const onVolume = this.options.imagesOnVolume?.(inst.id) ?? [];
        m = {
          instance: inst,
          address: simulatedAddress(inst.id),
          processes: new Map(),
          renewedAtMs: now,
          // What its agent pulled while the machine was prepared in a warm pool is on its volume still: pulled ahead.
          images: new Set(onVolume),
          pulledAhead: new Set(onVolume),
        };
        this.machines.set(inst.id, m);
      }
      m.inHook = inst.state === 'terminating-wait';
      if (this.options.agentDown?.(inst, now)) {
        // No agent: no heartbeat, no look, nothing reported; its containers run on, until the watchdog stops them.
        if (m.agentDownSinceMs === undefined) this.stats.agentsDown++;
        m.agentDownSinceMs ??= now;
        this.world(m, now);
        this.watchdog(m, now);
        continue;
      }
      if (m.agentDownSinceMs !== undefined) {
        // As the real agent starts: its lease renewed first, and no start at all (systemd tries again) while the API does not answer.
        let started = false;
        if (this.answered(m, now, 'heartbeat'))
          await this.beat(m, now).then(
            () => {
              this.renewed(m, now);
              started = true;
            },
            (error: unknown) => {
              if (!this.refused(error)) throw error;
            },
          );
        if (!started) {
          this.world(m, now);
          this.watchdog(m, now);
          continue;
        }
        await this.agentStartsAgain(m, now);
      }
      this.world(m, now);
      this.watchdog(m, now);
      this.look(m, now);
      if (this.answered(m, now, 'heartbeat')) {
        await this.beat(m, now).then(
          () => this.renewed(m, now),
          (error: unknown) => {
            if (!this.refused(error)) throw error;
          },
        );
        await this.reportReadiness(m, now);
      }
      this.checkLease(m, now);
    }
    // Each agent reads its own work list, as the real agent does (one read of every record stands for each).
    for (const record of await this.options.nodes.list()) {
      const m = this.machines.get(record.instanceId);
      if (!m || !live.has(record.instanceId) || m.agentDownSinceMs !== undefined || !this.answered(m, now, 'work')) continue;
      this.pullAhead(m, record.prefetchImages ?? [], now);
      try {
        const held = [...m.images].sort();
        if (prefetchChanged(record.images, held)) await this.as(m).nodes.noteImages(m.instance.id, held);
        await this.syncWork(m, record.assigned ?? {}, record.gpus, now);
        if (record.draining) await this.leaveFrontDoor(m, record.draining.deadlineMs, now);
      } catch (error) {
        if (this.refused(error)) continue;
        // Lost a write race too many times in a row: the agent tries again at its next tick.
        if (!(error instanceof ConflictError)) throw error;
        this.stats.writeRetries++;
      }
    }
  }

  /**
   * A warned machine's replicas leave their services' target groups at the agent's last look before
   * the machine could no longer drain them (core/serving/service.ts agentLeavesFrontDoorNow), as the
   * real agent does.
   */
  private async leaveFrontDoor(m: SimMachine, deadlineMs: number, now: number): Promise<void> {
    const timing = this.options.frontDoorTiming;
    if (!this.options.sources?.frontDoor || !timing) return;
    if (!agentLeavesFrontDoorNow(deadlineMs, now, timing.drainSec, timing.lookSec)) return;
    for (const p of m.processes.values()) {
      if (p.exit || p.leftFrontDoor || p.rank !== 0 || !p.job.spec.service) continue;
      await this.as(m).leaveFrontDoor(p.jobId, p.attempt);
      p.leftFrontDoor = true;
    }
  }

  /** Whether the agent API answers this call of the machine's agent now (fault injection; always, without it). */
  private answered(m: SimMachine, now: number, call: 'heartbeat' | 'work'): boolean {
    if (this.options.agentApiAnswers?.(m.instance.id, now, call) ?? true) return true;
    this.stats.unansweredCalls++;
    return false;
  }

  /**
   * The machine's watchdog (a root timer beside the agent: agent/watchdog.ts): once the lease its
   * agent last renewed is past the lease and fence (core `watchdogStops`), every job process still
   * running is stopped within the stop grace.
   */
  private watchdog(m: SimMachine, now: number): void {
    if (this.options.noWatchdog) return;
    if (!watchdogStops(m.renewedAtMs, now, DEFAULT_AGENT_LEASE)) return;
    for (const p of m.processes.values()) {
      if (p.exit && p.exit.atMs <= now) continue;
      if (!p.watchdogStopped) this.stats.watchdogStopped++;
      p.watchdogStopped = true;
      // SIGTERM, then SIGKILL at the stop grace: at the latest then.
      const by = now + DEFAULT_STOP_GRACE_SEC * 1000;
      if (!p.exit || p.exit.atMs > by) p.exit = { atMs: by, code: 143 };
    }
  }

  /**
   * The agent process starts again on a machine whose containers ran on without it: each is
   * adopted or stopped by the rule the real agent follows (core node-rules `adoptsLeftover`). What
   * lived only in the dead agent (a save in flight, a checkpoint it was taking, a stop it planned)
   * is gone; what the store says is read again at the next look.
   */
  private async agentStartsAgain(m: SimMachine, now: number): Promise<void> {
    m.agentDownSinceMs = undefined;
    m.fencedSinceMs = undefined;
    this.stats.agentRestarts++;
    const record = await this.options.nodes.get(m.instance.id);
    for (const [key, p] of [...m.processes]) {
      const assigned = record?.assigned?.[p.jobId] === p.attempt;
      const job = assigned ? await this.options.jobs.get(p.jobId) : undefined;
      const step = nextNodeStep(job, m.instance.id, p.attempt, undefined);
      const stoppedOnPurpose = p.watchdogStopped === true || p.stoppedByAgent === true;
      if (job && adoptsLeftover({ assigned, stoppedOnPurpose, rank: p.rank, step })) {
        this.stats.adopted++;
        p.upload = undefined;
        p.queued = undefined;
        p.checkpointing = undefined;
        p.requeueAt = undefined;
        p.fenceStopAtMs = undefined;
        continue;
      }
      // Removed (docker rm --force): its attempt, if still this node's, starts again as a new process at the next look.
      if (!p.exit || p.exit.atMs > now) this.stats.leftoversStopped++;
      m.processes.delete(key);
    }
  }

  private renewed(m: SimMachine, now: number): void {
    m.renewedAtMs = now;
    m.fencedSinceMs = undefined;
  }

  /** The agent's lease (node-rules onLeaseLapsed): lapsed, it checkpoints and stops every attempt, and starts nothing until renewed. */
  private checkLease(m: SimMachine, now: number): void {
    if (m.fencedSinceMs !== undefined || !leaseLapsed(m.renewedAtMs, now, DEFAULT_AGENT_LEASE)) return;
    const procs = [...m.processes.values()].filter((p) => !p.exit || p.exit.atMs > now);
    const rule = onLeaseLapsed(m.renewedAtMs, now, procs.map(noticeAttempt), DEFAULT_AGENT_LEASE, this.timing);
    m.fencedSinceMs = now;
    for (const step of rule.steps) {
      const p = procs.find((x) => noticeAttempt(x).key === step.key)!;
      this.stats.fencedAttempts++;
      p.fenceStopAtMs = rule.stopByMs;
      p.stoppedByAgent = true;
      if (step.kind === 'checkpoint') this.beginCheckpoint(p, step.plan, now);
      else if (step.kind === 'requeue-at') {
        this.beginCheckpoint(p, step.plan, now);
        p.exit = { atMs: now, code: 143 }; // nothing to save: stopped at once
      }
    }
  }

  /**
   * The machine's own metadata says it is going (GCE sets `instance/preempted` about 30 s before
   * it takes a spot machine, and tells no one else): its agent, if it runs, does what the real
   * agent does on that notice, by the same rule (node-rules `onMachineNotice`).
   */
  async localNotice(instanceId: string, notice: MachineNotice, marginSec: number): Promise<void> {
    const m = this.machines.get(instanceId);
    if (!m) return; // not booted, or its agent is dead: nobody reads the metadata
    const now = this.options.clock.nowMs();
    this.world(m, now);
    const procs = [...m.processes.values()].filter((p) => !p.exit);
    const rule = onMachineNotice(notice, now, marginSec, procs.map(noticeAttempt), this.timing);
    // With the agent API not answering, only what needs no control plane: the checkpoints are taken, their ends written later.
    const reachable = this.answered(m, now, 'work');
    if (reachable)
      await this.as(instanceId).nodes.markDraining(instanceId, {
        sinceMs: now,
        reason: rule.drainReason,
        deadlineMs: rule.deadlineMs,
        groupId: m.instance.groupId,
      });
    for (const step of rule.steps) {
      const p = procs.find((x) => noticeAttempt(x).key === step.key)!;
      if (step.kind === 'checkpoint') {
        if (reachable)
          await applyJobEvent(
            this.as(instanceId).jobs,
            p.jobId,
            { type: 'checkpoint-requested', attempt: p.attempt, reason: rule.reason },
            now,
          );
        this.beginCheckpoint(p, step.plan, now);
        if (reachable) await this.advanceCheckpoint(m, p, now);
      } else if (step.kind === 'requeue-at') {
        p.requeueAt = { atMs: step.atMs, plan: step.plan };
        p.stoppedByAgent = true;
      }
    }
  }

  // ---- the world ----------------------------------------------------------------------------

  /** What happens on a machine between two looks: jobs progress, write checkpoints, end; uploads move. */
  private world(m: SimMachine, now: number): void {
    for (const p of m.processes.values()) {
      if (p.exit) continue;
      const cp = p.job.spec.checkpoint;
      if (
        p.fenceStopAtMs !== undefined &&
        now >= p.fenceStopAtMs &&
        (p.signalWriteAtMs === undefined || p.signalWriteAtMs > p.fenceStopAtMs)
      ) {
        p.exit = { atMs: p.fenceStopAtMs, code: 143 }; // its fence ran out: stopped
        continue;
      }
      if (p.signalWriteAtMs !== undefined && now >= p.signalWriteAtMs) {
        this.write(p, p.signalWriteAtMs);
        p.exit = { atMs: p.signalWriteAtMs, code: 0 }; // it checkpoints on its signal and exits, as a job following the protocol does
        continue;
      }
      if (this.progress(p, now) >= this.options.workSecOf(p.job)) {
        const doneAt = Math.min(now, p.readyAtMs + ((this.options.workSecOf(p.job) - p.baseProgressSec) * 1000) / p.rate);
        p.exit = { atMs: doneAt, code: this.options.exitCodeOf?.(p.job) ?? 0 };
        continue;
      }
      if (cp && now >= p.nextPeriodicAtMs) {
        this.write(p, now);
        p.nextPeriodicAtMs = now + (saveEverySec(p.job) ?? cp.intervalSec) * 1000;
      }
    }
  }

  private write(p: SimProcess, atMs: number): void {
    if (this.options.checkpointFails?.(p.job, atMs)) {
      this.stats.checkpointFailures++;
      this.failedCheckpointJobs.add(p.jobId);
      return;
    }
    const progressSec = Math.floor(p.baseProgressSec + (p.rate * Math.max(0, atMs - p.readyAtMs)) / 1000);
    p.marker = { atMs, progressSec, path: `step-${progressSec}` };
  }

  /**
   * The agent's look at its GPUs at the heartbeat: each live process's devices read as nvidia-smi
   * would (memory used, utilisation; none for a MIG slice), added to its attempt's tally. A
   * process's memory climbs to its scripted peak every fourth look; its utilisation swings ±30%
   * around its need ÷ its devices' compute.
   */
  private look(m: SimMachine, now: number): void {
    for (const p of m.processes.values()) {
      const script = p.devices && !(p.exit && p.exit.atMs <= now) ? this.options.gpuUseOf?.(p.job) : undefined;
      if (!script || !p.devices || now < p.readyAtMs) continue;
      const d = p.devices;
      const k = p.use.looks;
      const wobble = 0.7 + 0.6 * ((k * 0.618_033_988_75) % 1);
      const memory = Math.min(d.memoryMiB, Math.round(script.peakMemoryMiB * (k % 4 === 0 ? 1 : 0.8 + 0.15 * wobble)));
      const busyPct = Math.min(100, (100 * script.tflops * wobble) / (d.share * GPU_SPEED[d.model].tflops));
      const one: DeviceReading = {
        model: d.model,
        memoryTotalMiB: d.memoryMiB,
        memoryUsedMiB: memory,
        ...(d.mig ? {} : { smPct: Math.round(busyPct) }),
      };
      p.use = addGpuLook(
        p.use,
        Array.from({ length: d.count }, () => one),
      );
    }
  }

  /** The devices a rank's placement gives it on this machine: their model, memory each, share of a GPU each, and how many. */
  private devicesOf(m: SimMachine, job: Job, rank: number): SimProcess['devices'] {
    const type = this.options.instanceTypes.get(m.instance.instanceType);
    const a = job.placement?.nodes[rank];
    if (!type || !a) return undefined;
    if (a.mig) {
      const profile = migProfile(type.gpuModel, a.mig.profile);
      return { model: type.gpuModel, memoryMiB: profile?.memoryMiB ?? 0, share: (profile?.computeSlices ?? 1) / 7, count: 1, mig: true };
    }
    if (a.share) return { model: type.gpuModel, memoryMiB: a.share.memoryMiB, share: a.share.milliGpu / 1000, count: 1, mig: false };
    return { model: type.gpuModel, memoryMiB: type.gpuMemoryMiB, share: 1, count: Math.max(1, a.gpuIndices.length), mig: false };
  }

  /**
   * What the machine's agent does at its heartbeat for the replicas it runs: probes each one's
   * readiness path once its initial delay has passed and writes what it found when that changed
   * (node-rules `replicaHealthReport`, as the real agent does).
   */
  private async reportReadiness(m: SimMachine, now: number): Promise<void> {
    for (const p of m.processes.values()) {
      const svc = p.job.spec.service;
      if (!svc || p.exit || p.checkpointing || now < p.startedAtMs + svc.readiness.initialDelaySec * 1000) continue;
      const event = replicaHealthReport(p.job, p.rank, this.answers(p, now));
      if (!event) continue;
      try {
        const out = await applyJobEvent(this.as(m).jobs, p.jobId, event, now);
        if (out.status === 'changed') p.job = out.job;
      } catch (error) {
        if (!this.refused(error) && !(error instanceof ConflictError)) throw error;
      }
    }
  }

  /**
   * The images the machine's record lists to pull ahead: a pull that has ended puts its image on the
   * disk, and the next listed image it lacks starts (one at a time, as the real agent pulls).
   */
  private pullAhead(m: SimMachine, listed: readonly string[], now: number): void {
    if (m.pulling && now >= m.pulling.doneAtMs) {
      m.images.add(m.pulling.image);
      m.pulledAhead.add(m.pulling.image);
      m.pulling = undefined;
    }
    if (m.pulling || m.fencedSinceMs !== undefined) return;
    const next = listed.find((image) => !m.images.has(image));
    if (next === undefined) return;
    this.stats.prefetchPulls++;
    m.pulling = { image: next, startedAtMs: now, doneAtMs: now + (this.options.imagePullSecOf?.(next) ?? 0) * 1000 };
  }

  /**
   * When a replica starting now answers its readiness path: once loaded (its pull skipped when the
   * machine holds its image, which it holds from then on; the rest of a pull ahead under way waited
   * out), or never when its load hangs.
   */
  private answersFrom(m: SimMachine, job: Job, now: number): number {
    const image = job.spec.image;
    // A pull ahead of this image under way: the replica waits out the rest of it; one that began at
    // this very look saved nothing, and counts as the replica's own pull.
    const underWay = m.pulling?.image === image ? m.pulling : undefined;
    if (underWay) m.pulling = undefined;
    const pulledAheadMs = underWay && underWay.startedAtMs < now ? Math.max(0, underWay.doneAtMs - now) : undefined;
    if (pulledAheadMs !== undefined) m.pulledAhead.add(image);
    const cached = m.images.has(image) || pulledAheadMs !== undefined;
    const service = job.spec.labels?.[SERVICE_LABEL];
    if (service !== undefined && cached && m.pulledAhead.has(image))
      this.pulledAheadOf.set(service, (this.pulledAheadOf.get(service) ?? 0) + 1);
    m.images.add(job.spec.image);
    if (!cached) {
      this.stats.imagePulls++;
      if (service !== undefined) this.imagePullsOf.set(service, (this.imagePullsOf.get(service) ?? 0) + 1);
    }
    if (this.options.replicaHangs?.(job)) {
      this.stats.replicasHung++;
      return Number.POSITIVE_INFINITY;
    }
    return (
      now + (pulledAheadMs ?? 0) + (this.options.replicaLoadSecOf?.(job, cached) ?? job.spec.service?.readiness.initialDelaySec ?? 0) * 1000
    );
  }

  private answers(p: SimProcess, now: number): boolean {
    return !p.exit && p.answersFromMs !== undefined && now >= p.answersFromMs;
  }

  /**
   * Whether a replica answers its readiness path at this address and port now: what a load
   * balancer's health check of the target finds (the world's truth, not what any agent reported).
   */
  answersReadiness(address: string, port: number, nowMs: number): boolean {
    for (const m of this.machines.values()) {
      if (m.address !== address) continue;
      for (const p of m.processes.values()) if (p.job.spec.service?.port === port && this.answers(p, nowMs)) return true;
    }
    return false;
  }

  /** The heartbeat; the machine registers again when its GPUs (a MIG layout) changed, as the real agent does. */
  private async beat(m: SimMachine, now: number): Promise<void> {
    const inst = m.instance;
    const gpus = this.gpusOf(m);
    const key = JSON.stringify(gpus);
    if (key === m.registered && (await this.as(m).nodes.heartbeat(inst.id, now))) return;
    await this.as(m).nodes.register({
      instanceId: inst.id,
      groupId: inst.groupId,
      registeredAtMs: now,
      lastHeartbeatAtMs: now,
      healthy: true,
      gpus,
      address: simulatedAddress(inst.id),
    });
    m.registered = key;
  }

  /** What nvidia-smi would show: the machine's GPUs, and on a MIG machine the GPU instances its live jobs hold, where they sit. */
  private gpusOf(m: SimMachine): GpuDevice[] {
    const type = this.options.instanceTypes.get(m.instance.instanceType);
    if (!type) return [];
    const mig = (this.options.migMachine?.(m.instance) ?? false) && MIG_MODELS.has(type.gpuModel);
    return Array.from({ length: type.gpuCount }, (_, index) => {
      const base: GpuDevice = { index, model: type.gpuModel, memoryMiB: type.gpuMemoryMiB };
      if (!mig) return base;
      const held = [...m.processes.values()]
        .filter((p) => !p.exit)
        .map((p) => p.job.placement?.nodes[p.rank])
        .filter((a) => a?.mig && a.gpuIndices[0] === index)
        .map((a) => ({ profile: a!.mig!.profile, start: a!.mig!.startSlice }))
        .sort((a, b) => a.start - b.start);
      return {
        ...base,
        migEnabled: true,
        migDevices: held.map((h, k) => {
          const profile = migProfile(type.gpuModel, h.profile);
          return {
            index: k,
            gpuInstanceId: h.start + 1,
            computeInstanceId: 0,
            profile: h.profile,
            memoryMiB: profile?.memoryMiB ?? 0,
            startSlice: h.start,
            slices: profile?.memorySlices ?? 1,
          };
        }),
      };
    });
  }

  // ---- the agent, following the node-side rules ---------------------------------------------

  private view(p: SimProcess | undefined, now: number): LocalView | undefined {
    if (!p) return undefined;
    return {
      rank: p.rank,
      ...(p.exit && p.exit.atMs <= now ? { exitCode: p.exit.code } : {}),
      ...(p.checkpointing ? { checkpointing: p.checkpointing.then } : {}),
    };
  }

  private async syncWork(
    m: SimMachine,
    assigned: Readonly<Record<string, number>>,
    gpus: readonly GpuDevice[],
    now: number,
  ): Promise<void> {
    const { jobs, nodes } = this.as(m);
    const entries: (WorkListEntry & { readonly p: SimProcess | undefined })[] = [];
    for (const [jobId, attempt] of Object.entries(assigned)) {
      const job = await jobs.get(jobId);
      const p = m.processes.get(jobId);
      const mine = p && p.attempt === attempt ? p : undefined;
      if (mine && job && job.attempt === mine.attempt) mine.job = job;
      entries.push({ jobId, attempt, job, local: this.view(mine, now), p: mine });
    }
    const here = [...m.processes.values()].map((p) => ({ p, jobId: p.jobId, attempt: p.attempt, busy: p.checkpointing !== undefined }));
    const plan = planWorkList(m.instance.id, entries, here);
    // Stop what is no longer this machine's first: two attempts of a job never live at once.
    for (const { p } of plan.stop) await this.end(m, p, now, true);
    // A save under way for an attempt that moved on (reconcile gave up on it) goes on to its end, as the real agent's
    // does: the index may still take it; then the process stops.
    for (const { p } of plan.finishing) await this.advanceCheckpoint(m, p, now);
    for (const { jobId, attempt, job, p } of plan.steps) {
      await this.advanceUpload(m, p, now);
      // Looked at again after the upload moved on (a save that ended may end a checkpoint), by the same rule.
      const step = nextNodeStep(job, m.instance.id, attempt, this.view(p, now));
      switch (step.kind) {
        case 'drop':
          await nodes.unassign(m.instance.id, jobId, attempt);
          break;
        case 'wait':
          break;
        case 'launch':
          await this.launch(m, job!, step.rank, step.size, gpus, now);
          break;
        case 'run':
          this.collect(p!, now);
          if (p!.requeueAt && now >= p!.requeueAt.atMs) {
            this.beginCheckpoint(p!, p!.requeueAt.plan, now);
            await this.advanceCheckpoint(m, p!, now);
          }
          break;
        case 'busy':
          await this.advanceCheckpoint(m, p!, now);
          break;
        case 'checkpoint':
          this.beginCheckpoint(
            p!,
            checkpointPlan({
              then: step.then,
              reason: step.reason,
              graceSec: graceSecOf(p!.job),
              sizeMiB: p!.sizeMiB,
              requestedAtMs: now,
              timing: this.timing,
            }),
            now,
          );
          await this.advanceCheckpoint(m, p!, now);
          break;
        case 'stop-cancel':
          await this.end(m, p!, now, true);
          if (step.records) await this.finishCancelled(m, jobId, now, useOf(p!).gpuUse);
          break;
        case 'report-exit': {
          const end = processEnd(step.exitCode, p!.watchdogStopped === true);
          if (end.kind === 'requeue') {
            await requeueAttempt(this.as(m), { jobId, attempt, reason: end.reason, nowMs: now });
            await this.end(m, p!, now, false);
            break;
          }
          const done = await recordExit(jobs, { jobId, attempt, rank: p!.rank, exitCode: end.exitCode, nowMs: now, ...useOf(p!) });
          if (done?.status === 'changed' && done.job.state === 'succeeded') this.stats.succeeded++;
          await this.end(m, p!, now, false);
          break;
        }
        case 'requeue-from-store':
          if (step.records) await requeueAttempt(this.as(m), { jobId, attempt, reason: step.reason, nowMs: now });
          break;
        case 'finish-cancel':
          if (step.records) await this.finishCancelled(m, jobId, now);
          break;
      }
    }
  }

  private async launch(m: SimMachine, job: Job, rank: number, size: number, gpus: readonly GpuDevice[], now: number): Promise<void> {
    if (m.fencedSinceMs !== undefined) return; // fenced: nothing starts until its lease is renewed
    if (this.options.startFails?.(job, rank)) {
      this.stats.startFailures++;
      // Any rank: the whole attempt goes back to the queue, and the other ranks stop.
      await requeueAttempt(this.as(m), {
        jobId: job.id,
        attempt: job.attempt,
        reason: startFailure(m.instance.id, `rank ${rank} of ${size} could not start (its devices are not available)`),
        nowMs: now,
      });
      return;
    }
    const latest = resumePoint(job, await this.as(m).checkpoints.latest(job.id));
    const newest = this.newestComplete.get(job.id);
    if (rank === 0 && newest && (latest?.progressSec ?? 0) < newest.progressSec)
      this.staleResumes.push({ jobId: job.id, attempt: job.attempt, resumedSec: latest?.progressSec ?? 0, newestSec: newest.progressSec });
    const sizeMiB = checkpointSizeMiB(job, gpus, rank);
    const saveRoot = this.options.rootFor?.(m.instance);
    if (latest) {
      // The read starts as through the agent API (checked, and noted for the bill); the bucket counts the bytes it serves.
      await this.as(m).readCheckpoint(job.id, checkpointPartLocation(latest, rank));
      this.options.bucket?.get({
        objectUri: checkpointPartLocation(latest, rank),
        team: job.team,
        bytes: sizeMiB * MIB,
        machine: m.instance,
      });
    }
    // Downloading this rank's part of the checkpoint, then restoring it, before any progress.
    const restoreMs = latest ? Math.round((sizeMiB / this.bandwidth) * 1000) + (this.options.restoreSec ?? 0) * 1000 : 0;
    const cp = job.spec.checkpoint;
    const script = this.options.gpuUseOf?.(job);
    const devices = script ? this.devicesOf(m, job, rank) : undefined;
    const capacity = devices ? devices.share * GPU_SPEED[devices.model].tflops : 0;
    const p: SimProcess = {
      jobId: job.id,
      attempt: job.attempt,
      rank,
      size,
      job,
      startedAtMs: now,
      readyAtMs: now + restoreMs,
      baseProgressSec: latest?.progressSec ?? 0,
      rate: script && devices && script.tflops > capacity ? capacity / script.tflops : 1,
      ...(job.spec.service && rank === 0 ? { answersFromMs: this.answersFrom(m, job, now) } : {}),
      ...(devices ? { devices } : {}),
      use: newGpuUseTally(),
      sizeMiB,
      collectedAtMs: 0,
      savedTo: new Set(latest?.attempt === job.attempt ? [latest.location] : []),
      nextPeriodicAtMs: cp ? now + restoreMs + (saveEverySec(job) ?? cp.intervalSec) * 1000 : Number.POSITIVE_INFINITY,
      ...(saveRoot ? { saveRoot } : {}),
    };
    // Out of GPU memory: it fails a minute after it starts, once it has allocated what it holds.
    if (script && devices && script.peakMemoryMiB > devices.memoryMiB) p.exit = { atMs: now + 60_000, code: OUT_OF_MEMORY_EXIT_CODE };
    m.processes.set(job.id, p);
    await this.say(
      p,
      now,
      `started attempt ${job.attempt} on ${m.instance.id} (${m.instance.instanceType}, ${m.instance.capacityType}), rank ${rank} of ${size}${latest ? `; resuming at ${Math.round(latest.progressSec)} s of work from ${latest.location}` : ''}`,
    );
    if (rank === 0 && job.state === 'placed') {
      const started = await applyJobEvent(this.as(m).jobs, job.id, { type: 'start', attempt: job.attempt }, now);
      if (started.status === 'changed') this.stats.started++;
    }
  }

  /** Starts saving the newest checkpoint the job marked (the upload runs at the machine's bandwidth). */
  private collect(p: SimProcess, now: number): void {
    if (!p.marker || p.marker.atMs <= p.collectedAtMs) return;
    p.collectedAtMs = p.marker.atMs;
    if (p.upload) {
      p.queued = p.marker;
      return;
    }
    this.startUpload(p, p.marker, now);
  }

  private startUpload(p: SimProcess, marker: NonNullable<SimProcess['marker']>, now: number): void {
    const folder = p.saveRoot ? checkpointFolder(p.saveRoot, p.jobId, p.attempt) : this.options.checkpoints.locationFor(p.jobId, p.attempt);
    const location = saveLocation(folder, marker.path, p.savedTo);
    p.savedTo.add(location);
    const durationMs = Math.max(1, Math.round((p.sizeMiB / this.bandwidth) * 1000));
    p.upload = {
      markerAtMs: marker.atMs,
      ref: {
        jobId: p.jobId,
        attempt: p.attempt,
        location,
        completedAtMs: now,
        progressSec: marker.progressSec,
        ...(p.size > 1 ? { ranks: p.size } : {}),
        // The simulated job writes its part as one file.
        size: saveSizeOf([p.sizeMiB * MIB], storeKindOf(location)),
      },
      deadlineMs: now + uploadAllowanceSec(p.sizeMiB, this.timing) * 1000,
      durationMs,
      doneAtMs: now + durationMs,
      tries: 1,
    };
  }

  /** An upload that has had its time either lands, or fails and is retried (with backoff, within its allowance). */
  private async advanceUpload(m: SimMachine, p: SimProcess | undefined, now: number): Promise<void> {
    const u = p?.upload;
    if (!p || !u || now < u.doneAtMs) return;
    if (this.options.uploadFails?.({ jobId: p.jobId, attempt: p.attempt, rank: p.rank, tries: u.tries })) {
      this.stats.uploadFailures++;
      const retryAt = now + uploadRetryDelayMs(u.tries);
      if (retryAt + u.durationMs <= u.deadlineMs) {
        u.tries++;
        u.doneAtMs = retryAt + u.durationMs;
        return;
      }
      this.stats.uploadsGivenUp++;
      this.failedCheckpointJobs.add(p.jobId);
      p.lastSave = { markerAtMs: u.markerAtMs, ok: false, complete: false, location: u.ref.location, error: `failed ${u.tries} times` };
    } else {
      const saved: CheckpointRef = { ...u.ref, completedAtMs: now };
      // The part is in the store, whatever the index makes of it.
      this.options.bucket?.put({
        objectUri: checkpointPartLocation(saved, p.rank),
        jobId: p.jobId,
        team: p.job.team,
        bytes: p.sizeMiB * MIB,
        machine: m.instance,
      });
      // The index is told; a complete save is attached to the job (core: the one verdict after an upload, the real agent's too).
      const landed = await recordLandedSave(this.as(m), saved, { rank: p.rank, attempt: p.attempt, nodeId: m.instance.id }, now);
      if (landed.kind === 'refused') {
        // Its progress is behind the newest complete checkpoint: saved, but never resumed from.
        this.stats.checkpointsRefused++;
        await this.say(p, now, `checkpoint not taken by the index: ${landed.why}`);
        p.lastSave = { markerAtMs: u.markerAtMs, ok: false, complete: false, location: u.ref.location, error: landed.why };
        this.finishUpload(m, p, now);
        return;
      }
      const complete = landed.complete;
      if (complete) {
        // The world's own record of the newest complete save (for the invariants), beside the index's.
        const before = this.newestComplete.get(p.jobId);
        if (!before || saved.progressSec >= before.progressSec) this.newestComplete.set(p.jobId, saved);
        this.stats.checkpoints++;
      }
      await this.say(p, now, `checkpoint saved at ${Math.round(u.ref.progressSec)} s of work: ${u.ref.location}`);
      p.lastSave = { markerAtMs: u.markerAtMs, ok: true, complete, location: u.ref.location };
    }
    this.finishUpload(m, p, now);
  }

  /** The save in flight ended: a newer marker queued behind it is saved next. */
  private finishUpload(m: SimMachine, p: SimProcess, now: number): void {
    p.upload = undefined;
    const next = p.queued;
    p.queued = undefined;
    if (next && m.processes.get(p.jobId) === p) this.startUpload(p, next, now);
  }

  private beginCheckpoint(p: SimProcess, plan: CheckpointPlan, now: number): void {
    const cp = p.job.spec.checkpoint;
    const { then, reason: why, writeByMs, uploadByMs } = plan;
    const limits = { writeByMs, uploadByMs };
    const endedBefore = p.exit && p.exit.atMs <= now ? p.exit.code : undefined;
    p.checkpointing = {
      then,
      why,
      requestedAtMs: now,
      markerBefore: p.marker?.atMs ?? 0,
      ...limits,
      ...(endedBefore !== undefined ? { endedBefore } : {}),
    };
    p.stoppedByAgent = true;
    // The job writes its checkpoint a little after the signal (within its grace), then exits.
    if (cp && endedBefore === undefined && !p.exit)
      p.signalWriteAtMs = now + Math.min(cp.gracePeriodSec, this.options.writeSec ?? 10) * 1000;
  }

  /** A checkpoint asked for moves on: the marker, its save, a gang's other parts; then the attempt ends as the rules say. */
  private async advanceCheckpoint(m: SimMachine, p: SimProcess, now: number): Promise<void> {
    const c = p.checkpointing;
    if (!c) return;
    this.world(m, now);
    this.collect(p, now);
    await this.advanceUpload(m, p, now);
    const cp = p.job.spec.checkpoint;
    const newest = p.marker?.atMs ?? 0;
    const save = p.lastSave && p.lastSave.markerAtMs === newest && !p.upload ? p.lastSave : undefined;
    const wroteNew = newest > c.markerBefore;
    // A gang's leader's part alone: the index says whether every rank's part is in.
    const gangSaved =
      wroteNew && save?.ok && !save.complete && p.size > 1 && p.rank === 0
        ? (await this.as(m).checkpoints.latest(p.jobId))?.location === save.location
        : undefined;
    const outcome = checkpointVerdict({
      nowMs: now,
      writeByMs: c.writeByMs,
      uploadByMs: c.uploadByMs,
      ...(c.endedBefore !== undefined ? { endedBeforeExitCode: c.endedBefore } : {}),
      graceSec: cp?.gracePeriodSec,
      wroteNew,
      ended: p.exit !== undefined && p.exit.atMs <= now,
      ...(save ? { newestSave: save.ok ? { ok: true, complete: save.complete } : { ok: false, error: save.error ?? 'unknown' } } : {}),
      ...(gangSaved !== undefined ? { gangSaved } : {}),
    });
    if (!outcome) return;
    const job = (await this.as(m).jobs.get(p.jobId)) ?? p.job;
    const result = afterCheckpoint(job, c.then, c.why, outcome);
    const out = await recordCheckpointResult(this.as(m), {
      jobId: p.jobId,
      attempt: p.attempt,
      rank: p.rank,
      result,
      nowMs: now,
      ...useOf(p),
    });
    if (out?.status === 'changed') {
      if (result.event === 'succeed') this.stats.succeeded++;
      if (result.event === 'cancel') this.stats.cancelled++;
      if (result.event === 'requeue') this.stats.preempted++;
    }
    await this.end(m, p, now, outcome.kind !== 'exited-before');
  }

  /** Stops (or forgets an ended) process; an attempt that did not finish counts the work it lost. */
  private async end(m: SimMachine, p: SimProcess, now: number, stopped: boolean): Promise<void> {
    if (m.processes.get(p.jobId) !== p) return;
    m.processes.delete(p.jobId);
    if (stopped && !p.exit) p.exit = { atMs: now, code: 143 };
    await this.say(p, now, stopped ? 'stopped by the agent (SIGTERM)' : `exited with code ${p.exit?.code ?? 0}`);
    await this.as(m).nodes.unassign(m.instance.id, p.jobId, p.attempt);
    await this.noteLost(p, now);
  }

  /** One line of the simulated process's output, as its agent would ship it. */
  private async say(p: SimProcess, now: number, line: string): Promise<void> {
    if (!this.options.output) return;
    const seq = p.written ?? 0;
    p.written = seq + 1;
    await this.options.output.append({
      jobId: p.jobId,
      attempt: p.attempt,
      rank: p.rank,
      team: p.job.team,
      labels: p.job.spec.labels ?? {},
      lines: [{ atMs: now, seq, line }],
    });
  }

  private async finishCancelled(m: SimMachine, jobId: string, now: number, gpuUse?: AttemptGpuUse): Promise<void> {
    if ((await finishCancelled(this.as(m).jobs, jobId, now, gpuUse)).status === 'changed') this.stats.cancelled++;
  }

  /** An attempt this machine ran is over: if it did not finish, how much work did it lose? */
  private async noteLost(p: SimProcess, now: number): Promise<void> {
    if (p.rank !== 0) return;
    const job = await this.options.jobs.get(p.jobId);
    if (!job || job.state === 'succeeded' || job.state === 'failed' || job.state === 'cancelled') return;
    if (job.attempt === p.attempt && job.state !== 'pending') return;
    const saved = job.checkpoint?.progressSec ?? 0;
    const lostSec = Math.max(0, this.progress(p, now) - Math.max(saved, p.baseProgressSec));
    const cp = job.spec.checkpoint;
    this.lost.push({
      jobId: p.jobId,
      attempt: p.attempt,
      lostSec,
      ...(cp ? { allowedSec: (saveEverySec(p.job) ?? cp.intervalSec) + cp.gracePeriodSec + this.saveLagSec(p.sizeMiB) } : {}),
      checkpointFailed: this.failedCheckpointJobs.has(p.jobId),
    });
  }

  /**
   * How far the newest saved checkpoint can trail the newest one written, at this world's bandwidth:
   * one upload in flight and the newest checkpoint queued behind it (two upload times), plus the margin.
   */
  private saveLagSec(sizeMiB: number): number {
    return Math.ceil((2 * sizeMiB) / this.bandwidth) + this.timing.uploadMarginSec;
  }

  /** The attempt's process still runs on this machine, whose agent lives (for the wrongful-requeue count). */
  runsOn(instanceId: string, jobId: string, attempt: number): boolean {
    const p = this.machines.get(instanceId)?.processes.get(jobId);
    return p !== undefined && p.attempt === attempt && !p.exit;
  }

  /** Test hook: the attempt runs here (a live process for this rank). */
  hasProcess(instanceId: string, jobId: string): boolean {
    return this.machines.get(instanceId)?.processes.has(jobId) ?? false;
  }
}

/** A live process as the notice and lease rules see it (node-rules NoticeAttempt). */
function noticeAttempt(p: SimProcess): NoticeAttempt {
  return noticeAttemptOf(`${p.jobId}#${p.attempt}#${p.rank}`, p.job, p.checkpointing !== undefined, p.sizeMiB);
}

/** A machine's private address in the simulated VPC (10.0.0.0/16), fixed by its id, as the real agent reports the instance's. */
export function simulatedAddress(instanceId: string): string {
  let h = 2166136261;
  for (let i = 0; i < instanceId.length; i++) h = Math.imul(h ^ instanceId.charCodeAt(i), 16777619) >>> 0;
  return `10.0.${(h >>> 8) & 0xff}.${h & 0xff || 1}`;
}

/** A process's measured use so far, for the event that ends its attempt. */
function useOf(p: SimProcess): { gpuUse?: AttemptGpuUse } {
  const use = summarizeGpuUse(p.use, p.attempt, p.rank);
  return use ? { gpuUse: use } : {};
}
