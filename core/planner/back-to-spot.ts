/**
 * Back to spot, a disruption step: moves long, checkpointable, interruptible work from on-demand
 * machines to spot when the expected saving over its remaining time (on-demand share less spot
 * price with rework) is more than twice the cost of the move: the restart on a new machine, the
 * idle tail of the machine it leaves and the work since its checkpoint. Not while capacity is
 * scarce; at most the policy's number of moves per plan, biggest saving first.
 *
 * A move is made before it breaks anything, as Karpenter's consolidation launches a replacement
 * before it evicts: the job is checkpointed and requeued only when a ready spot machine has free
 * room for it (it then prefers spot for a while, see classification, and takes that room). When
 * none has, one is bought for it (or a machine already starting is counted on) and the job keeps
 * running on on-demand until it is ready. A spot pool that cannot deliver then costs a failed
 * launch, not a restart on the machine the job came back to.
 */
import { deadlineChoice } from '../deadline.ts';
import type { Job } from '../job.ts';
import type { PlanAction } from '../plan.ts';
import { commitFit, tryFit, type NodeCapacity } from './capacity.ts';
import { classOf } from './classification.ts';
import { findFits } from './fits.ts';
import { newMachine } from './indexing.ts';
import { teamBudget } from './limits.ts';
import { movedToSpot } from './reasons.ts';
import {
  lostWorkSec,
  perMilli,
  shareOf,
  unavailable,
  unitOf,
  workLeftSec,
  type Entry,
  type GroupState,
  type OfferingInfo,
  type PlanningState,
} from './state.ts';

export interface Candidate {
  readonly entry: Entry;
  readonly node: NodeCapacity;
  readonly odShare: number;
  readonly remainingSec: number;
  readonly cost: number;
  readonly saving: number;
  readonly buy: { readonly info: OfferingInfo; readonly gs: GroupState; readonly perHour: number };
}

/**
 * `removed`: machines this plan already lets go. Runs after pending work has had the free room
 * (a move is optional; waiting work is not): the moves that land now, as preempt actions, and
 * the candidates left, biggest saving first, for `prepareMovesToSpot`.
 */
export function landMovesToSpot(st: PlanningState, removed: ReadonlySet<string>): { actions: PlanAction[]; left: Candidate[] } {
  const s = st.s;
  const candidates: Candidate[] = [];
  for (const node of st.ready.allNodes()) {
    if (node.capacityType !== 'on-demand') continue;
    for (const h of st.holders.get(node.id) ?? []) {
      const c = candidate(st, h.job, node);
      if (c) candidates.push(c);
    }
  }
  candidates.sort((a, b) => b.saving - a.saving || (a.entry.job.id < b.entry.job.id ? -1 : 1));
  const actions: PlanAction[] = [];
  const left: Candidate[] = [];
  // Room only shrinks while moves land: a kind of job that found none will not find any later.
  const noRoom = new Set<Entry['cls']>();
  for (const c of candidates) {
    const { entry } = c;
    if (actions.length >= s.policy.moveToSpotPerPlan || noRoom.has(entry.cls)) {
      left.push(c);
      continue;
    }
    const ready = findFits(st, st.ready, entry, undefined, (n) => isSpot(n) && !removed.has(n.id))?.[0];
    if (!ready) noRoom.add(entry.cls);
    const perHour = ready ? shareOf(ready.node, entry.cls.milli, 1) * (entry.cls.eligible.get(ready.node.poolKey) ?? 1) : 0;
    const saving = ((c.odShare - perHour) * c.remainingSec) / 3600;
    if (!ready || saving <= 2 * c.cost) {
      left.push(c);
      continue;
    }
    commitFit(ready.node, ready.assignment, entry.cls.wall?.team);
    st.ready.update(ready.node);
    actions.push({
      kind: 'preempt',
      jobId: entry.job.id,
      attempt: entry.job.attempt,
      reason: movedToSpot(c.node.id, ready.node.instanceType, ready.node.zone, saving, c.cost),
    });
  }
  return { actions, left };
}

/**
 * For the moves that found no ready room: each counts on a spot machine
 * already starting (or bought in this plan) with room for it, or has one bought for it. Adds
 * purchases only (they become the plan's scale-ups); the jobs keep running where they are.
 */
export function prepareMovesToSpot(st: PlanningState, left: readonly Candidate[]): void {
  let decided = 0;
  for (const c of left) {
    if (decided >= st.s.policy.moveToSpotPerPlan) break;
    if (st.preempted.has(c.entry.job.id)) continue;
    decided++;
    if (counted(st, c.entry)) continue;
    const { info, gs } = c.buy;
    if (gs.room < 1) continue;
    const machine = newMachine(info, gs.group.id, `planned:${gs.group.id}:${st.plannedCount++}`, 'planned');
    const assignment = tryFit(machine, c.entry.cls.request, c.entry.cls.ports);
    if (!assignment) continue;
    commitFit(machine, assignment, c.entry.cls.wall?.team);
    gs.added.push(machine);
    gs.room--;
    st.planned.add(machine);
    // Not counted in the plan's expected added cost: the machine replaces the on-demand share the
    // job releases once it moves, which saves more than twice the move's cost (see candidate).
  }
}

const isSpot = (node: NodeCapacity) => node.capacityType === 'spot';

/** Takes room for the job on a spot machine that is starting or bought in this plan; false when none has any. */
function counted(st: PlanningState, entry: Entry): boolean {
  for (const index of [st.booting, st.planned]) {
    const fit = findFits(st, index, entry, undefined, isSpot)?.[0];
    if (!fit) continue;
    commitFit(fit.node, fit.assignment, entry.cls.wall?.team);
    index.update(fit.node);
    return true;
  }
  return false;
}

/** A running on-demand job worth moving to spot, with the pool a machine for it would be bought from. */
function candidate(st: PlanningState, job: Job, node: NodeCapacity): Candidate | undefined {
  const s = st.s;
  if (job.state !== 'running' || !job.spec.interruptible || !job.spec.checkpoint || job.spec.nodes > 1 || st.preempted.has(job.id))
    return undefined;
  if ((job.startedAtMs ?? s.nowMs) > s.nowMs - s.policy.idleCooldownSec * 1000) return undefined;
  if (job.spec.deadline && !deadlineAllowsSpotMove(st, job)) return undefined;
  if (teamBudget(st, job.team).state === 'hold') return undefined;
  const cls = classOf(st, job, 'spot');
  let buy: Candidate['buy'] | undefined;
  for (const [key, factor] of cls.eligible) {
    const info = st.offerings.get(key);
    if (!info || unavailable(s, info.offering.id)) continue;
    const gs = info.groups.find((g) => g.room >= 1);
    if (!gs) continue;
    const perHour = perMilli(info, factor) * unitOf(cls);
    if (!buy || perHour < buy.perHour) buy = { info, gs, perHour };
  }
  if (!buy) return undefined;
  const restartSec = s.policy.expectedBootSec + s.policy.restoreSec;
  const odShare = shareOf(node, cls.milli, 1);
  const remainingSec = workLeftSec(s, job);
  const saving = ((odShare - buy.perHour) * remainingSec) / 3600;
  const cost = (buy.perHour * restartSec + odShare * s.policy.idleCooldownSec + odShare * lostWorkSec(s, job)) / 3600;
  if (saving <= 2 * cost) return undefined;
  return { entry: { job, cls, team: job.team }, node, odShare, remainingSec, cost, saving, buy };
}

/**
 * A deadline job on on-demand may move to spot only if, after paying the move (a changeover),
 * the spot policy would still let it wait out a preemption: otherwise it stays where it is sure.
 */
function deadlineAllowsSpotMove(st: PlanningState, job: Job): boolean {
  const s = st.s;
  const changeover = s.policy.expectedBootSec + s.policy.restoreSec;
  const choice = deadlineChoice(job, s.nowMs, s.policy, {
    mode: 'none',
    spotAvailable: false,
    workLeftSec: workLeftSec(s, job) + changeover,
  });
  return choice.mode === 'wait-for-spot' || choice.mode === 'spot-ok';
}
