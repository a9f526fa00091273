/**
 * Back to spot, a disruption step: moves long, checkpointable, interruptible work from on-demand
 * machines to spot when a spot pool that could hold it can launch now and the expected saving
 * over its remaining time (on-demand share less spot price with rework) is more than twice the
 * cost of the move: the restart on a new machine, the idle tail of the machine it leaves and the
 * work since its checkpoint. At most the policy's number of moves per plan, biggest saving first;
 * not while capacity is scarce. Returns preempt actions only (the requeued job then prefers spot
 * for a while, see classification); it must not buy the spot machine itself.
 */
import { deadlineChoice } from '../deadline.ts';
import type { Job } from '../job.ts';
import type { PlanAction } from '../plan.ts';
import type { NodeCapacity } from './capacity.ts';
import { classOf } from './classification.ts';
import { teamBudget } from './limits.ts';
import { movedToSpot } from './reasons.ts';
import { lostWorkSec, perMilli, shareOf, unavailable, unitOf, workLeftSec, type OfferingInfo, type PlanningState } from './state.ts';

export function moveToSpot(st: PlanningState): PlanAction[] {
  const s = st.s;
  const restartSec = s.policy.expectedBootSec + s.policy.restoreSec;
  const settleMs = s.policy.idleCooldownSec * 1000;
  const candidates: { job: Job; node: NodeCapacity; saving: number; cost: number; target: OfferingInfo }[] = [];
  for (const node of st.ready.allNodes()) {
    if (node.capacityType !== 'on-demand') continue;
    for (const h of st.holders.get(node.id) ?? []) {
      const job = h.job;
      if (job.state !== 'running' || !job.spec.interruptible || !job.spec.checkpoint || job.spec.nodes > 1 || st.preempted.has(job.id))
        continue;
      if ((job.startedAtMs ?? s.nowMs) > s.nowMs - settleMs) continue;
      if (job.spec.deadline && !deadlineAllowsSpotMove(st, job)) continue;
      if (teamBudget(st, job.team).state === 'hold') continue;
      const cls = classOf(st, job, 'spot');
      let best: { info: OfferingInfo; perHour: number } | undefined;
      for (const [key, factor] of cls.eligible) {
        const info = st.offerings.get(key);
        if (!info || info.groups.every((g) => g.room < 1) || unavailable(s, info.offering.id)) continue;
        const perHour = perMilli(info, factor) * unitOf(cls);
        if (!best || perHour < best.perHour) best = { info, perHour };
      }
      if (!best) continue;
      const odShare = shareOf(node, cls.milli, 1);
      const remainingSec = workLeftSec(s, job);
      const saving = ((odShare - best.perHour) * remainingSec) / 3600;
      const cost = (best.perHour * restartSec + odShare * s.policy.idleCooldownSec + odShare * lostWorkSec(s, job)) / 3600;
      if (saving > 2 * cost) candidates.push({ job, node, saving, cost, target: best.info });
    }
  }
  candidates.sort((a, b) => b.saving - a.saving || (a.job.id < b.job.id ? -1 : 1));
  return candidates.slice(0, s.policy.moveToSpotPerPlan).map((c): PlanAction => ({
    kind: 'preempt',
    jobId: c.job.id,
    attempt: c.job.attempt,
    reason: movedToSpot(c.node.id, c.target.offering.instanceType, c.target.offering.zone, c.saving, c.cost),
  }));
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
