/**
 * The planner: one snapshot in, one plan out, with a reason for every action and every job left
 * waiting. Pure and deterministic. It runs phases in order over one planning state (state.ts);
 * each phase is a module that says at its top what it decides and what it must not touch.
 *
 *  1. Indexing: offerings, live machines with the room their work holds, what teams hold.
 *  2. Launch cancellation: launches of groups whose every offering is failing are cancelled.
 *     Then launches in flight of the other groups are counted as booting capacity.
 *  3. Classification: what each pending job may run on (its class) and the order they are served.
 *  4. Existing capacity: placements on free GPUs of ready machines, then waits on booting ones.
 *  5. New capacity: purchases for the rest, the cheapest per GPU actually used.
 *  6. Preemption: lower-priority work makes room for jobs whose groups are at their maximum.
 *  7. Limits: running work of teams whose stop budget is spent is checkpointed and requeued.
 *     (Team GPU caps and hold budgets are checked by phases 4 and 5 before each placement.)
 *  8. Disruption: scale-in, consolidation, back to spot (onto free spot room, or a machine bought
 *     for the move while the job keeps running), deadline moves.
 *  9. Scale-ups: one per group that had machines bought for it (by new capacity, or for a move to spot).
 */
import type { Plan, PlanAction } from '../plan.ts';
import type { Snapshot } from '../snapshot.ts';
import { landMovesToSpot, prepareMovesToSpot } from './back-to-spot.ts';
import { classify } from './classification.ts';
import { consolidate } from './consolidation.ts';
import { deadlineMoves } from './deadline-moves.ts';
import { useExistingCapacity } from './existing-capacity.ts';
import { indexAllOfferings, indexInFlight, indexNodes, indexOfferings } from './indexing.ts';
import { cancelLaunches } from './launch-cancellation.ts';
import { stopSpentTeams } from './limits.ts';
import { buyNewCapacity, scaleUps } from './new-capacity.ts';
import { preemptForStuck } from './preemption.ts';
import { scaleIn } from './scale-in.ts';
import { emit, PlanningState } from './state.ts';

export function plan(snapshot: Snapshot): Plan {
  const st = indexSnapshot(snapshot);
  const entries = classify(st);
  const toBuy = useExistingCapacity(st, entries);
  preemptForStuck(st, buyNewCapacity(st, toBuy));
  emit(st, stopSpentTeams(st));
  disrupt(st);
  // After disruption: a move to spot may buy the machine it will land on.
  emit(st, scaleUps(st));
  return {
    // Capacity first: the job records of holds are written after every scale-up, launch and placement.
    actions: [...st.actions.filter((a) => !isHoldAction(a)), ...st.actions.filter(isHoldAction)],
    waiting: st.waiting,
    addedCostMicroUsdPerHour: [...st.groups.values()].reduce((sum, g) => sum + g.added.reduce((a, n) => a + n.priceMicroUsdPerHour, 0), 0),
    addedExpectedCostMicroUsdPerHour: Math.round(st.addedExpected),
    ...(st.unreadable.length > 0 ? { unreadableNodes: st.unreadable } : {}),
  };
}

/** Phases 1 and 2: the planning state of a snapshot before any job is classified (benchmarks build on it too). */
export function indexSnapshot(snapshot: Snapshot): PlanningState {
  const st = new PlanningState(snapshot);
  indexOfferings(st);
  indexNodes(st);
  emit(st, cancelLaunches(st));
  indexInFlight(st);
  indexAllOfferings(st);
  return st;
}

/** The disruption steps in order; each sees what the steps before it decided. */
function disrupt(st: PlanningState): void {
  const policy = st.s.policy;
  const letGo = scaleIn(st);
  emit(st, letGo);
  const removed = new Set(letGo.flatMap((a) => (a.kind === 'scale-in' ? [a.instanceId] : [])));
  if (policy.consolidate) emit(st, consolidate(st, removed));
  if (policy.moveToSpot && !st.scarce) {
    const moves = landMovesToSpot(st, removed);
    emit(st, moves.actions);
    prepareMovesToSpot(st, moves.left);
  }
  emit(st, deadlineMoves(st));
}

/** Holds and their releases go last in a plan (after every placement they could have let through). */
const isHoldAction = (a: PlanAction): boolean => a.kind === 'hold' || a.kind === 'release-hold';
