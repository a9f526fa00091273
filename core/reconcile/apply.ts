/**
 * Apply: the plan, journaled before any action and each action recorded once applied, so a run
 * killed half-way is finished by the next (resumeUnfinished); then what follows from it on the
 * machines: idle marks and scale-in protection, terminate hooks completed for drained machines,
 * and the records of machines gone forgotten. It carries out decisions; it makes none.
 */
import { ACTIVE_STATES } from '../job.ts';
import { actionResource, type ActionFailure, type Plan, type PlanAction } from '../plan.ts';
import type { DecisionRecord, PlanJournal } from '../ports.ts';
import type { Policy } from '../snapshot.ts';
import { ApplyError, CloudError, codeOf, messageOf } from '../errors.ts';
import { completeDrainedLifecycles } from '../services/interruption.ts';
import { applyJobEvent } from '../services/job-updates.ts';
import type { WorldView } from '../services/snapshot-reader.ts';
import { snapshotOf, type ReconcileContext, type ReconcilePorts } from './context.ts';
import { resumeCutoffMs } from './lease.ts';

/** The step: journal, apply, then tidy the machines after it. */
export async function applyDecision(ctx: ReconcileContext, base: DecisionRecord): Promise<{ applied: number; errors: ActionFailure[] }> {
  const { ports, world, nowMs } = ctx;
  const plan = base.plan;
  await ports.journal.start(base.id, nowMs, plan.actions);
  const out = await applyPlan(ports, plan.actions, providersByGroup(ports, snapshotOf(ctx).groups), nowMs, {
    journal: ports.journal,
    planId: base.id,
  });
  await ports.journal.finish(base.id);
  await trackIdleAndProtection(ports, world, plan, nowMs);
  await completeDrainedLifecycles(ports, world.records, world.activeJobs, nowMs);
  // A degraded cloud's machines are not in the view: their records are kept, not forgotten.
  if (world.degraded.length === 0) await forgetGoneNodes(ports, world, nowMs);
  return out;
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
export async function resumeUnfinished(ports: ReconcilePorts, policy: Policy): Promise<number> {
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
