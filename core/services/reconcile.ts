import { billedPrice, offeringId, type PriceQuote } from '../catalog.ts';
import { correlatedSilence, inService, type Instance, type NodeRecord } from '../fleet.ts';
import { drainLeadMs, reservationTerminationMs } from '../reservation.ts';
import { MAX_CHECKPOINT_GRACE_SEC as MAX_GRACE_SEC } from '../job-spec.ts';
import { ACTIVE_STATES, HELD_ATTEMPTS_KEPT_MS, type Job } from '../job.ts';
import { actionResource, type ActionFailure, type Plan, type PlanAction } from '../plan.ts';
import type {
  FamilyRunStore,
  CheckpointStore,
  CheckpointSweep,
  Clock,
  DecisionLog,
  DecisionRecord,
  FrontDoor,
  LeaseStore,
  PlanJournal,
  ServiceLoadSource,
  ServiceStore,
} from '../ports.ts';
import { reconcileServices, type ServiceStepResult } from './serving.ts';
import { reason, type Reason } from '../reason.ts';
import type { Policy, Snapshot } from '../snapshot.ts';
import { accrueSpend, machineMeters, unusedReservationMeters } from './accrual.ts';
import { completeDrainedLifecycles, handleNotice, pollNotices, type NoticeSource, type PolledNotices } from './interruption.ts';
import { applyJobEvent } from './job-updates.ts';
import { checkpointSizeMiB, checkpointTimeoutSec } from './node-rules.ts';
import { jobsOnInstance, requeueAttempt } from './requeue.ts';
import { noteFinishedRuns } from './rightsizing.ts';
import { buildSnapshot, readWorld, type SnapshotPorts, type TeamMemory, type WorldView } from './snapshot-reader.ts';
import { ApplyError, CloudError, codeOf, messageOf } from '../errors.ts';
import { budgetStatus } from '../budget.ts';

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

export type ReconcileOutcome =
  | { readonly status: 'skipped'; readonly reason: string }
  | {
      readonly status: 'done';
      readonly decision: DecisionRecord;
      readonly snapshot: Snapshot;
      readonly lostJobsRequeued: number;
      /** Actions of an unfinished earlier plan applied before this one (a predecessor crashed half-way). */
      readonly resumed: number;
      /** What polling the notice sources found (absent without sources, and on a dry run). */
      readonly polled?: PolledNotices;
    };

export const RECONCILE_LEASE = 'reconcile';

/**
 * How long a reconcile holds its lease: two intervals (at least a minute). A run killed by its
 * timeout never releases it, so its successor gets the lease only when this runs out.
 */
export function leaseTtlMs(policy: Policy): number {
  return Math.max(2 * policy.reconcileIntervalSec * 1000, 60_000);
}

/**
 * How old an unfinished plan may be and still be resumed: the lease's TTL plus two intervals, so
 * the first run after a killed one's lease has run out (a schedule that fires late included)
 * finishes its plan instead of abandoning it.
 */
export function resumeCutoffMs(policy: Policy): number {
  return leaseTtlMs(policy) + 2 * policy.reconcileIntervalSec * 1000;
}

/**
 * One turn of the control loop: take the lease; requeue the work of lost nodes; count spend;
 * read a snapshot; plan; record the decision; apply it (unless dry run); mark idle nodes.
 * Every step is idempotent, so a run that crashed half-way is repaired by the next one.
 */
export async function reconcile(ports: ReconcilePorts, options: ReconcileOptions): Promise<ReconcileOutcome> {
  const holder = options.holder ?? 'reconciler';
  const startMs = ports.clock.nowMs();
  const ttlMs = leaseTtlMs(options.policy);
  if (ports.lease && !(await ports.lease.acquire(RECONCILE_LEASE, holder, startMs, ttlMs))) {
    return { status: 'skipped', reason: 'another reconciler holds the lease' };
  }
  try {
    const resumed = options.dryRun ? 0 : await resumeUnfinished(ports, options.policy);
    // Preemptions no cloud pushed (GCP): found by looking, handled like events, before the fleet is read.
    const polled =
      !options.dryRun && ports.notices && ports.notices.length > 0 ? await pollNotices(ports, ports.notices, options.policy) : undefined;
    let world = await readWorld(ports);
    const nowMs = ports.clock.nowMs();
    // Machines that fell silent together while their cloud lists them running: the control path's fault, not theirs.
    const silence = silenceOf(world, nowMs, options.policy);
    let lostJobsRequeued = 0;
    let services: ServiceStepResult | undefined;
    if (!options.dryRun) {
      if ((await drainHeldMachines(ports, world, nowMs, options.policy)) > 0) world = await readWorld(ports);
      lostJobsRequeued = await requeueLostWork(ports, world, nowMs, options.policy);
      if (lostJobsRequeued > 0) world = await readWorld(ports);
      // Services decide their replicas before the planner reads the queue, so new replicas are placed in this plan.
      if (ports.services) {
        services = await reconcileServices({ ...ports, services: ports.services }, world, nowMs, {
          intervalSec: options.policy.reconcileIntervalSec,
          bootSec: options.policy.expectedBootSec,
        });
        if (services.started > 0 || services.cancelled > 0) world = await readWorld(ports);
      }
    }
    const snapshotInput = {
      nowMs,
      policy: options.policy,
      ...(options.teamMemory ? { teamMemory: options.teamMemory } : {}),
      ...(options.poolRiskPerHour ? { poolRiskPerHour: options.poolRiskPerHour } : {}),
    };
    let snapshot = await buildSnapshot(ports, world, snapshotInput);
    // Machines of a reservation about to end (a Capacity Block) are drained ahead of it, whether or not its warning came.
    if (!options.dryRun && (await drainEndingReservations(ports, snapshot, options.policy)) > 0) {
      world = await readWorld(ports);
      snapshot = await buildSnapshot(ports, world, snapshotInput);
    }
    if (!options.dryRun) {
      // Each spot machine's exposure is noted once per POOL_NOTE_EVERY_MS of its life, not every minute (one write per
      // machine per note: at 1,000 spot machines, every minute was 1,000 writes a minute that changed nothing of note).
      const intervalMs = options.policy.reconcileIntervalSec * 1000;
      const spotAlive = world.instances.filter(
        (i) =>
          i.capacityType === 'spot' && (i.state === 'running' || i.state === 'pending') && poolNoteDue(i.launchedAtMs, nowMs, intervalMs),
      );
      if (spotAlive.length > 0)
        await ports.pools.noteAlive(spotAlive.map((i) => ({ instanceId: i.id, offeringId: offeringId(i), atMs: nowMs })));
      const gpuCountOf = (t: string) => snapshot.instanceTypes.get(t)?.gpuCount ?? 1;
      await stampMeters(ports, world, snapshot.prices, gpuCountOf);
      // With a cloud left out its machines are not in view: spend is not counted this minute (the cursor stays, and the
      // next complete view counts the whole window from it), rather than counted without them.
      // A reservation listing that failed holds spend back the same way (unused reserved capacity could not be counted).
      if ((snapshot.degraded ?? []).length === 0)
        await accrueSpend(ports.ledger, {
          teams: [...snapshot.teams.values()],
          nowMs,
          maxWindowMs: 2 * options.policy.reconcileIntervalSec * 1000,
          machines: async (sinceMs) => [
            ...machineMeters({
              instances: world.instances,
              records: world.records,
              // Finished attempts are kept on their jobs for HELD_ATTEMPTS_KEPT_MS: no older job can add a holding.
              jobs: [
                ...world.activeJobs,
                ...world.pendingJobs,
                ...(await ports.jobs.listEndedSince(Math.max(sinceMs, nowMs - HELD_ATTEMPTS_KEPT_MS), nowMs)),
              ],
              prices: snapshot.prices,
              gpuCountOf,
              nowMs,
              heartbeatTimeoutMs: options.policy.heartbeatTimeoutSec * 1000,
            }),
            ...unusedReservationMeters(snapshot.reservations, world.instances, sinceMs),
          ],
        });
    }
    const t0 = options.stopwatch?.() ?? 0;
    const plan = options.planner(snapshot);
    const planMs = (options.stopwatch?.() ?? 0) - t0;
    const degraded = world.degraded.length > 0 ? await degradedSince(ports, world, nowMs) : [];
    const base: DecisionRecord = {
      ...(degraded.length > 0 ? { degraded } : {}),
      id: `decision-${String(nowMs).padStart(15, '0')}`,
      atMs: nowMs,
      dryRun: options.dryRun ?? false,
      inputs: {
        pendingJobs: snapshot.pendingJobs.length,
        activeJobs: snapshot.activeJobs.length,
        nodes: snapshot.nodes.length,
        groups: snapshot.groups.map((g) => ({ id: g.id, desired: g.desiredCapacity, min: g.minSize, max: g.maxSize })),
      },
      plan,
      applied: 0,
      errors: [],
      planMs,
      ...(services && services.decisions.length > 0 ? { services: services.decisions } : {}),
      ...(silence.zones.length > 0 ? { controlPlaneSilence: silence.zones } : {}),
      ...rightsizedIn(plan, snapshot.pendingJobs),
      teams: [...snapshot.teams.values()].map((t) => {
        const spentMicroUsd = snapshot.spendMicroUsd.get(t.id) ?? 0;
        const committedMicroUsd = snapshot.committedMicroUsd?.get(t.id) ?? 0;
        return { ...t, spentMicroUsd, committedMicroUsd, state: budgetStatus(t, spentMicroUsd, committedMicroUsd).state };
      }),
    };
    await ports.decisions.record(base);
    if (options.dryRun) return { status: 'done', decision: base, snapshot, lostJobsRequeued, resumed };
    // The plan is journaled before any action, and each action is recorded once applied.
    await ports.journal.start(base.id, nowMs, plan.actions);
    const { applied, errors } = await applyPlan(ports, plan.actions, providersByGroup(ports, snapshot.groups), nowMs, {
      journal: ports.journal,
      planId: base.id,
    });
    await ports.journal.finish(base.id);
    await trackIdleAndProtection(ports, world, plan, nowMs);
    await completeDrainedLifecycles(ports, world.records, world.activeJobs, nowMs);
    // A degraded cloud's machines are not in the view: their records are kept, not forgotten.
    if (world.degraded.length === 0) await forgetGoneNodes(ports, world, nowMs);
    // Runs that ended in the last three intervals (a reconcile that failed is covered by the next; a run noted twice is kept once).
    if (ports.families)
      await noteFinishedRuns(
        ports.families,
        await ports.jobs.listEndedSince(nowMs - 3 * options.policy.reconcileIntervalSec * 1000, nowMs),
      );
    // A share of the checkpoint store past its retention; a failure waits for the next reconcile (nothing depends on it).
    await ports.checkpointSweep?.sweep().catch((error: unknown) => {
      if (!(error instanceof CloudError)) throw error;
    });
    const decision: DecisionRecord = { ...base, applied, errors };
    await ports.decisions.record(decision);
    return { status: 'done', decision, snapshot, lostJobsRequeued, resumed, ...(polled ? { polled } : {}) };
  } finally {
    if (ports.lease) await ports.lease.release(RECONCILE_LEASE, holder);
  }
}

/** The jobs the plan places whose shape right-sizing chose at intake, for the decision record. */
function rightsizedIn(plan: Plan, pending: readonly Job[]): Pick<DecisionRecord, 'rightsized'> {
  const placed = new Set(plan.actions.flatMap((a) => (a.kind === 'place' ? [a.jobId] : [])));
  const rightsized = pending
    .filter((j) => placed.has(j.id) && j.rightsize?.applied && j.rightsize.to)
    .map((j) => ({ jobId: j.id, from: j.rightsize!.from, to: j.rightsize!.to!, why: j.rightsize!.why }));
  return rightsized.length > 0 ? { rightsized } : {};
}

type ProviderOf = Map<string, ReconcilePorts['providers'][number] | undefined>;

function providersByGroup(ports: ReconcilePorts, groups: readonly { id: string; cloud: string }[]): ProviderOf {
  return new Map(groups.map((g) => [g.id, ports.providers.find((p) => p.cloud === g.cloud)]));
}

/**
 * Applies each action on its own; one failure is recorded and does not stop the rest. With a
 * journal, each applied action is recorded; actions already recorded are skipped. A failure to
 * record (the store is gone, the function is being stopped) ends the apply: the next run resumes.
 */
export async function applyPlan(
  ports: ReconcilePorts,
  actions: readonly PlanAction[],
  providerOf: ProviderOf,
  nowMs: number,
  journal?: { journal: PlanJournal; planId: string; done?: ReadonlySet<number> },
): Promise<{ applied: number; errors: ActionFailure[] }> {
  let applied = 0;
  const errors: ActionFailure[] = [];
  const one = async (index: number, action: PlanAction) => {
    try {
      await applyAction(ports, action, providerOf, nowMs);
      applied++;
    } catch (error) {
      errors.push(failureOf(index, action, error));
    }
    if (journal) await journal.journal.done(journal.planId, index);
  };
  const todo = [...actions.entries()].filter(([index]) => !journal?.done?.has(index));
  for (let i = 0; i < todo.length;) {
    // Placements and holds touch their job's record and their nodes' work lists only: a run of them is applied in waves
    // of up to JOB_WRITE_CONCURRENCY, no two in a wave on the same node. Cloud actions go one at a time, in plan order.
    if (concurrent(todo[i]![1])) {
      let j = i;
      while (j < todo.length && concurrent(todo[j]![1])) j++;
      for (const wave of waves(todo.slice(i, j))) {
        // Every write of a wave ends before the apply goes on or gives up: none lands after this reconcile has
        // stopped (its successor would otherwise race writes it cannot see).
        const settled = await Promise.allSettled(wave.map(([index, action]) => one(index, action)));
        const failed = settled.find((r): r is PromiseRejectedResult => r.status === 'rejected');
        if (failed) throw failed.reason;
      }
      i = j;
    } else {
      await one(todo[i]![0], todo[i]![1]);
      i++;
    }
  }
  errors.sort((a, b) => a.index - b.index);
  return { applied, errors };
}

function concurrent(action: PlanAction): boolean {
  return action.kind === 'hold' || action.kind === 'release-hold' || action.kind === 'place';
}

/** Consecutive waves of at most JOB_WRITE_CONCURRENCY actions, in plan order, no two of a wave touching the same node. */
function waves(run: readonly (readonly [number, PlanAction])[]): (readonly [number, PlanAction])[][] {
  const out: (readonly [number, PlanAction])[][] = [];
  let wave: (readonly [number, PlanAction])[] = [];
  let nodes = new Set<string>();
  for (const entry of run) {
    const mine = entry[1].kind === 'place' ? entry[1].placement.nodes.map((n) => n.nodeId) : [];
    if (wave.length >= JOB_WRITE_CONCURRENCY || mine.some((n) => nodes.has(n))) {
      out.push(wave);
      wave = [];
      nodes = new Set();
    }
    wave.push(entry);
    for (const n of mine) nodes.add(n);
  }
  if (wave.length > 0) out.push(wave);
  return out;
}

/** How many placements or holds are applied at once (each a few conditional writes of one job and its nodes). */
export const JOB_WRITE_CONCURRENCY = 16;

/**
 * Finishes the newest unfinished plan, if a predecessor crashed while applying it: its remaining
 * actions are applied (each is idempotent, so one that was applied but not yet recorded is
 * harmless to repeat). A plan older than {@link resumeCutoffMs} is abandoned instead: the world
 * has moved on, and planning anew converges to the same place.
 */
async function resumeUnfinished(ports: ReconcilePorts, policy: Policy): Promise<number> {
  const left = await ports.journal.unfinished();
  if (!left) return 0;
  const nowMs = ports.clock.nowMs();
  if (nowMs - left.atMs > resumeCutoffMs(policy)) {
    await ports.journal.finish(left.planId);
    return 0;
  }
  // A provider that cannot be listed now leaves its actions unapplied (each then fails as having no provider; the plan is finished anyway).
  const groups = (await Promise.all(ports.providers.map((p) => p.listGroups().catch(() => [])))).flat();
  const { applied } = await applyPlan(ports, left.actions, providersByGroup(ports, groups), nowMs, {
    journal: ports.journal,
    planId: left.planId,
    done: left.done,
  });
  await ports.journal.finish(left.planId);
  return applied;
}

function failureOf(index: number, action: PlanAction, error: unknown): ActionFailure {
  const code = error instanceof ApplyError ? error.code : (codeOf(error) ?? 'failed');
  const resource = error instanceof ApplyError ? error.resource : actionResource(action);
  return { index, kind: action.kind, resource, code, message: messageOf(error) };
}

async function applyAction(ports: ReconcilePorts, action: PlanAction, providerOf: ProviderOf, nowMs: number): Promise<void> {
  switch (action.kind) {
    case 'place': {
      // The node's work list first: an agent must never miss a placement. If the placement
      // below then loses a race, the agent finds the job is not here and drops the pointer.
      for (const n of action.placement.nodes) {
        if (!(await ports.nodes.assign(n.nodeId, action.jobId, action.attempt))) {
          throw new ApplyError(
            'unregistered',
            `cannot place ${action.jobId} on ${n.nodeId}: the node's agent has no record (it was forgotten since the snapshot)`,
            n.nodeId,
          );
        }
      }
      const out = await applyJobEvent(
        ports.jobs,
        action.jobId,
        { type: 'place', attempt: action.attempt, placement: action.placement },
        nowMs,
      );
      if (out.status === 'refused') throw new ApplyError('refused', out.error, action.jobId);
      return;
    }
    case 'release-hold': {
      await applyJobEvent(ports.jobs, action.jobId, { type: 'release-hold' }, nowMs);
      return;
    }
    case 'hold': {
      await applyJobEvent(ports.jobs, action.jobId, { type: 'hold', reason: action.reason }, nowMs);
      return;
    }
    case 'preempt': {
      await applyJobEvent(
        ports.jobs,
        action.jobId,
        { type: 'checkpoint-requested', attempt: action.attempt, reason: action.reason },
        nowMs,
      );
      return;
    }
    case 'scale-up':
    case 'cancel-launches': {
      const provider = providerOf.get(action.groupId);
      if (!provider) throw new ApplyError('no-provider', `no configured cloud holds group ${action.groupId}`, action.groupId);
      await provider.setDesiredCapacity(action.groupId, action.toDesired);
      return;
    }
    case 'scale-in': {
      const provider = providerOf.get(action.groupId);
      if (!provider) throw new ApplyError('no-provider', `no configured cloud holds group ${action.groupId}`, action.groupId);
      await provider.terminateInstance(action.groupId, action.instanceId);
      // The record stays until the machine is gone and its last minutes are counted (forgetGoneNodes).
      return;
    }
  }
}

/** Correlated silence over the world as read (core/fleet.ts correlatedSilence). */
export function silenceOf(world: Pick<WorldView, 'instances' | 'records'>, nowMs: number, policy: Policy) {
  const records = new Map(world.records.map((r) => [r.instanceId, r]));
  return correlatedSilence(
    world.instances.map((instance) => ({ instance, ...(records.has(instance.id) ? { record: records.get(instance.id)! } : {}) })),
    nowMs,
    policy,
  );
}

/**
 * Finds nodes that are gone or silent and requeues the attempts that ran there, from their
 * newest checkpoint. Lost means: the cloud says the machine is stopping or terminated; or its
 * agent's heartbeats stopped for longer than `silentRequeueSec` (past the agent's lease and fence); or
 * it was draining and its notice ran out.
 */
export async function requeueLostWork(
  ports: Pick<ReconcilePorts, 'jobs' | 'checkpoints'>,
  world: WorldView,
  nowMs: number,
  policy: Policy,
): Promise<number> {
  const instances = new Map(world.instances.map((i) => [i.id, i]));
  const records = new Map(world.records.map((r) => [r.instanceId, r]));
  const nodeIds = new Set(world.activeJobs.flatMap((j) => j.placement?.nodes.map((n) => n.nodeId) ?? []));
  const knownGroups = new Set(world.groups.map((g) => g.id));
  const silence = silenceOf(world, nowMs, policy);
  let requeued = 0;
  for (const nodeId of [...nodeIds].sort()) {
    // While a cloud is degraded, a machine missing from the view may be one of its own: kept as it is, never called lost.
    const record = records.get(nodeId);
    if ((world.degraded ?? []).length > 0 && !instances.has(nodeId) && !(record && knownGroups.has(record.groupId))) continue;
    const why = lostReason(instances.get(nodeId), records.get(nodeId), nowMs, policy);
    if (!why) continue;
    // Silent with many others of its zone, and running: its work is most likely running still; nothing is requeued for it.
    if (silence.machines.has(nodeId) && instances.get(nodeId)?.state === 'running' && why.code === 'node-lost') continue;
    for (const job of jobsOnInstance(world.activeJobs, nodeId)) {
      const out = await requeueAttempt(ports, { jobId: job.id, attempt: job.attempt, reason: why, nowMs });
      if (out.status === 'changed') requeued++;
    }
  }
  // A checkpoint asked for that its node has not saved within every allowance: stop waiting.
  for (const job of world.activeJobs) {
    const why = checkpointOverdue(job, records.get(job.placement?.nodes[0]?.nodeId ?? '')?.gpus, nowMs, policy);
    if (!why) continue;
    const out = await requeueAttempt(ports, { jobId: job.id, attempt: job.attempt, reason: why, nowMs });
    if (out.status === 'changed') requeued++;
  }
  return requeued;
}

/**
 * Why a job in `checkpointing` is given up on: its node has not ended the attempt within the
 * checkpoint's grace, the upload's allowance and a margin (the agent itself ends it within the
 * first two; past them the node is stuck or gone without a word).
 */
export function checkpointOverdue(job: Job, gpus: NodeRecord['gpus'] | undefined, nowMs: number, policy: Policy): Reason | undefined {
  if (job.state !== 'checkpointing' || job.checkpointRequestedAtMs === undefined) return undefined;
  const limitSec = checkpointTimeoutSec(job, checkpointSizeMiB(job, gpus), {
    uploadMiBPerSec: policy.uploadMiBPerSec,
    uploadMarginSec: policy.uploadMarginSec,
  });
  const waitedSec = (nowMs - job.checkpointRequestedAtMs) / 1000;
  if (waitedSec <= limitSec) return undefined;
  return reason(
    'checkpoint-timed-out',
    `its node did not save the checkpoint asked for ${Math.round(waitedSec)} s ago within ${limitSec} s (grace, upload allowance and margin); requeued from its newest saved checkpoint`,
  );
}

/**
 * Machines a terminate hook holds (the group is taking them away itself: Capacity Rebalancing, a
 * health-check replacement, an instance refresh, someone else's scale-in) whose lifecycle event
 * was never seen: drained as that event would have, so their work checkpoints and moves before the
 * hook times out, and the action is completed once they are empty. Returns how many were found.
 */
export async function drainHeldMachines(ports: ReconcilePorts, world: WorldView, nowMs: number, policy: Policy): Promise<number> {
  const records = new Map(world.records.map((r) => [r.instanceId, r]));
  let found = 0;
  for (const i of world.instances) {
    if (i.state !== 'terminating-wait' || records.get(i.id)?.draining?.lifecycle) continue;
    found++;
    await handleNotice(
      ports,
      {
        kind: 'lifecycle-terminate',
        eventId: `held/${i.id}`,
        instanceId: i.id,
        atMs: nowMs,
        groupName: i.groupId,
        hookName: policy.drainHookName,
        deadlineMs: nowMs + policy.drainHookTimeoutSec * 1000,
      },
      policy,
    );
  }
  return found;
}

/**
 * Drains every machine whose reservation takes it away soon (see core/reservation.ts drainLeadMs):
 * its work is checkpointed and requeued ahead of the end, as on a spot warning. The same notice as
 * the cloud's warning (handled once per machine), so it does not matter which comes first.
 */
export async function drainEndingReservations(ports: ReconcilePorts, snapshot: Snapshot, policy: Policy): Promise<number> {
  let drained = 0;
  for (const n of snapshot.nodes) {
    const i = n.instance;
    if (i.reservationId === undefined || n.record?.draining || !inService(i.state)) continue;
    const r = snapshot.reservations?.get(i.reservationId);
    const terminationMs = r ? reservationTerminationMs(r) : undefined;
    // Far from its end (beyond the longest lead any job's grace could ask): nothing to look at on this machine yet.
    if (terminationMs === undefined || terminationMs - snapshot.nowMs > drainLeadMs(MAX_GRACE_SEC)) continue;
    const graceSec = Math.max(
      0,
      ...snapshot.activeJobs
        .filter((j) => j.placement?.nodes.some((a) => a.nodeId === i.id))
        .map((j) => j.spec.checkpoint?.gracePeriodSec ?? 0),
    );
    if (terminationMs - snapshot.nowMs > drainLeadMs(graceSec)) continue;
    drained++;
    await handleNotice(
      ports,
      {
        kind: 'interruption-warning',
        eventId: `reservation-end/${i.reservationId}/${i.id}`,
        instanceId: i.id,
        atMs: snapshot.nowMs,
        deadlineMs: terminationMs,
        cause: `reservation ${i.reservationId} ends`,
      },
      policy,
    );
  }
  return drained;
}

/** What is degraded in this reconcile, each with when it first failed (carried over from the newest decision that had it). */
async function degradedSince(ports: ReconcilePorts, world: WorldView, nowMs: number): Promise<NonNullable<DecisionRecord['degraded']>> {
  const [previous] = await ports.decisions.recent(1);
  return world.degraded.map((d) => ({
    ...d,
    sinceMs: previous?.degraded?.find((p) => p.cloud === d.cloud && p.scope === d.scope)?.sinceMs ?? nowMs,
  }));
}

export function lostReason(
  instance: Instance | undefined,
  record: NodeRecord | undefined,
  nowMs: number,
  policy: Policy,
): Reason | undefined {
  if (instance && (instance.state === 'terminated' || instance.state === 'stopping')) {
    return reason('node-lost', `machine ${instance.id} is ${instance.state}`);
  }
  if (record?.draining && nowMs >= record.draining.deadlineMs) {
    return reason('interrupted', `machine ${record.instanceId} was draining (${record.draining.reason}) and its notice ran out`);
  }
  // Silent past the agent's lease and fence (Policy.silentRequeueSec): its agent, if it lives, has stopped its work itself.
  if (record && nowMs - record.lastHeartbeatAtMs > policy.silentRequeueSec * 1000) {
    const silentSec = Math.round((nowMs - record.lastHeartbeatAtMs) / 1000);
    return reason(
      'node-lost',
      `the agent on ${record.instanceId} has sent no heartbeat for ${silentSec} s (requeued after ${policy.silentRequeueSec} s, past its lease)`,
    );
  }
  if (!instance && !record) {
    return reason('node-lost', 'the machine is no longer reported by its cloud and its agent never registered');
  }
  return undefined;
}

/** Marks when each node became empty (for the idle cool-down) and protects busy nodes from the group's own scale-in. */
async function trackIdleAndProtection(ports: ReconcilePorts, world: WorldView, plan: Plan, nowMs: number): Promise<void> {
  const busy = new Set<string>();
  for (const job of world.activeJobs) if (ACTIVE_STATES.includes(job.state)) job.placement?.nodes.forEach((n) => busy.add(n.nodeId));
  for (const action of plan.actions) if (action.kind === 'place') action.placement.nodes.forEach((n) => busy.add(n.nodeId));
  const removed = new Set(plan.actions.flatMap((a) => (a.kind === 'scale-in' ? [a.instanceId] : [])));
  const records = new Map(world.records.map((r) => [r.instanceId, r]));
  const toProtect = new Map<string, { on: string[]; off: string[] }>();
  for (const instance of world.instances) {
    if (instance.state !== 'running' || removed.has(instance.id)) continue;
    const record = records.get(instance.id);
    const isBusy = busy.has(instance.id);
    if (record) {
      if (isBusy && record.idleSinceMs !== undefined) await ports.nodes.setIdleSince(instance.id, undefined);
      if (!isBusy && record.idleSinceMs === undefined) await ports.nodes.setIdleSince(instance.id, nowMs);
    }
    if (isBusy !== (instance.scaleInProtected ?? false)) {
      const entry = toProtect.get(instance.groupId) ?? { on: [], off: [] };
      (isBusy ? entry.on : entry.off).push(instance.id);
      toProtect.set(instance.groupId, entry);
    }
  }
  for (const [groupId, { on, off }] of toProtect) {
    const provider = ports.providers.find((p) => world.groups.some((g) => g.id === groupId && g.cloud === p.cloud));
    if (!provider) continue;
    // Protection is set again every reconcile: a call that fails now is retried at the next one, and stops nothing else.
    try {
      if (on.length > 0) await provider.setScaleInProtection(groupId, on, true);
      if (off.length > 0) await provider.setScaleInProtection(groupId, off, false);
    } catch (error) {
      if (!(error instanceof CloudError)) throw error;
    }
  }
}

/** How often a spot machine's time alive is noted in the pool history (its exposure, for the interruption rate). */
export const POOL_NOTE_EVERY_MS = 10 * 60_000;

/**
 * Whether a machine launched at `launchedAtMs` is noted alive at `nowMs`: at its first reconcile,
 * then once in each {@link POOL_NOTE_EVERY_MS} of its life (the first reconcile past each slot
 * start). Exposure is undercounted by at most one slot per machine, which errs toward more risk.
 */
export function poolNoteDue(launchedAtMs: number, nowMs: number, intervalMs: number): boolean {
  const slot = (t: number) => Math.floor((t - launchedAtMs) / POOL_NOTE_EVERY_MS);
  return nowMs - launchedAtMs < intervalMs || slot(nowMs) !== slot(nowMs - intervalMs);
}

/**
 * Stamps each listed machine's billing facts on its record, once, so its last minutes can be
 * charged after its cloud stops listing it (one write per machine in its life).
 */
async function stampMeters(
  ports: ReconcilePorts,
  world: WorldView,
  prices: ReadonlyMap<string, PriceQuote>,
  gpuCountOf: (instanceType: string) => number,
): Promise<void> {
  const records = new Map(world.records.map((r) => [r.instanceId, r]));
  for (const i of world.instances) {
    const record = records.get(i.id);
    if (!record || record.meter || i.state === 'terminated') continue;
    const price = prices.get(offeringId(i));
    if (!price) continue;
    await ports.nodes.noteMeter(i.id, {
      offeringId: offeringId(i),
      priceMicroUsdPerHour: billedPrice(price),
      launchedAtMs: i.launchedAtMs,
      gpuCount: gpuCountOf(i.instanceType),
    });
  }
}

/** Forgets the records of machines that are gone and hold no work, a while after they went. */
async function forgetGoneNodes(ports: ReconcilePorts, world: WorldView, nowMs: number): Promise<void> {
  const instances = new Map(world.instances.map((i) => [i.id, i]));
  const busy = new Set(world.activeJobs.flatMap((j) => j.placement?.nodes.map((n) => n.nodeId) ?? []));
  for (const r of world.records) {
    if (busy.has(r.instanceId)) continue;
    const inst = instances.get(r.instanceId);
    const gone = inst ? inst.state === 'terminated' : nowMs - r.lastHeartbeatAtMs > 10 * 60_000;
    if (gone) await ports.nodes.remove(r.instanceId);
  }
}

/** Counts jobs by state, for summaries. */
export function countByState(jobs: readonly Job[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const j of jobs) out[j.state] = (out[j.state] ?? 0) + 1;
  return out;
}
