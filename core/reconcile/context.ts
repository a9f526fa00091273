/**
 * Reconcile's one context: the ports and options it was called with, the time of this turn, and
 * the world as last read, which every step reads and a step that changed it reads again
 * (`reread`). The steps (this folder) each decide one thing over it, in the order of
 * reconcile.ts; none keeps state of its own between turns.
 */
import type { SilentZone } from '../fleet.ts';
import type { Plan } from '../plan.ts';
import type {
  FamilyRunStore,
  CheckpointStore,
  CheckpointSweep,
  Clock,
  DecisionLog,
  FrontDoor,
  LeaseStore,
  PlanJournal,
  ServiceLoadSource,
  ServiceStore,
} from '../ports.ts';
import type { ByteMeter } from '../services/accrual.ts';
import type { NoticeSource } from '../services/interruption.ts';
import type { ServiceStepResult } from '../services/serving.ts';
import { buildSnapshot, readWorld, type SnapshotPorts, type TeamMemory, type WorldView } from '../services/snapshot-reader.ts';
import type { Policy, Snapshot } from '../snapshot.ts';

export type Planner = (snapshot: Snapshot) => Plan;

export interface ReconcilePorts extends SnapshotPorts {
  readonly clock: Clock;
  readonly checkpoints: CheckpointStore;
  readonly decisions: DecisionLog;
  readonly journal: PlanJournal;
  readonly lease?: LeaseStore;
  /**
   * Clouds whose interruptions are found by looking rather than pushed as events (GCP's
   * preemption operations). Each reconcile reads them first, and handles what they found exactly
   * as the interruption function handles an event, before it reads the fleet.
   */
  readonly notices?: readonly NoticeSource[];
  /** Services (their records, and their load): without them, services are not run. */
  readonly services?: ServiceStore;
  readonly serviceLoad?: ServiceLoadSource;
  readonly frontDoor?: FrontDoor;
  /** Right-sizing's family runs: each reconcile notes the measured runs of the jobs that ended lately. */
  readonly families?: FamilyRunStore;
  /** The checkpoint store's retention: each reconcile sweeps a share of it (absent: nothing is deleted). */
  readonly checkpointSweep?: CheckpointSweep;
  /** The checkpoint bytes' bill (the index's byte logs, the store's site and path): spend accrual adds it per team, and the planner prices each save with it for the cadence. */
  readonly bytes?: ByteMeter;
}

export interface ReconcileOptions {
  readonly planner: Planner;
  readonly policy: Policy;
  readonly dryRun?: boolean;
  /** Who takes the lease (a Lambda request id, a host name). */
  readonly holder?: string;
  /** Last valid budget tags per team, carried between runs of one process. */
  readonly teamMemory?: TeamMemory;
  readonly poolRiskPerHour?: ReadonlyMap<string, number>;
  /** Measures plan time; core has no clock of its own for that. */
  readonly stopwatch?: () => number;
}

export interface ReconcileContext {
  readonly ports: ReconcilePorts;
  readonly options: ReconcileOptions;
  readonly policy: Policy;
  /** False on a dry run: the steps that would change anything do not run. */
  readonly acting: boolean;
  /** This turn's time, read once after the world is first read; every step uses it. */
  readonly nowMs: number;
  /** The world as last read. */
  world: WorldView;
  /** Machines that fell silent together while their cloud lists them running, judged on the world as first read (lost work: judgeSilence). */
  silence: { readonly zones: readonly SilentZone[]; readonly machines: ReadonlySet<string> };
  /** Attempts requeued because their machine was lost (lost work). */
  lostJobsRequeued: number;
  /** What the services step decided (absent without services, or on a dry run). */
  services?: ServiceStepResult;
  /** The planner's input, read once the steps before planning have changed the world. */
  snapshot?: Snapshot;
}

/** Reads the world and opens the turn's context. */
export async function openContext(ports: ReconcilePorts, options: ReconcileOptions): Promise<ReconcileContext> {
  const world = await readWorld(ports);
  const nowMs = ports.clock.nowMs();
  return {
    ports,
    options,
    policy: options.policy,
    acting: !options.dryRun,
    nowMs,
    world,
    silence: { zones: [], machines: new Set() },
    lostJobsRequeued: 0,
  };
}

/** A step changed the world: read it again. */
export async function reread(ctx: ReconcileContext): Promise<void> {
  ctx.world = await readWorld(ctx.ports);
}

/** Builds the planner's snapshot from the world as last read. */
export async function readSnapshot(ctx: ReconcileContext): Promise<Snapshot> {
  ctx.snapshot = await buildSnapshot(ctx.ports, ctx.world, {
    nowMs: ctx.nowMs,
    policy: ctx.policy,
    ...(ctx.options.teamMemory ? { teamMemory: ctx.options.teamMemory } : {}),
    ...(ctx.options.poolRiskPerHour ? { poolRiskPerHour: ctx.options.poolRiskPerHour } : {}),
  });
  return ctx.snapshot;
}

/** The snapshot, once read (a step after planning's input may rely on it). */
export function snapshotOf(ctx: ReconcileContext): Snapshot {
  if (!ctx.snapshot) throw new Error('reconcile: the snapshot is read before this step');
  return ctx.snapshot;
}
