/**
 * Deadline moves, a disruption step: deadline work running on spot whose slack has run out (one
 * more interruption would leave no time to finish on on-demand) is checkpointed and requeued
 * now, while on-demand can still make it; classification then sends it to on-demand. Work that
 * cannot checkpoint would lose everything by moving, so it stays; so does work for which even
 * on-demand is already too late. Returns preempt actions only.
 */
import { deadlineChoice } from '../deadline.ts';
import type { PlanAction } from '../plan.ts';
import { deadlineToOnDemand } from './reasons.ts';
import { workLeftSec, type PlanningState } from './state.ts';

export function deadlineMoves(st: PlanningState): PlanAction[] {
  const s = st.s;
  const actions: PlanAction[] = [];
  const moved = new Set<string>(); // a gang's members sit on several machines: it moves once
  const changeover = s.policy.expectedBootSec + s.policy.restoreSec;
  for (const node of st.ready.allNodes()) {
    if (node.capacityType !== 'spot') continue;
    for (const h of st.holders.get(node.id) ?? []) {
      const job = h.job;
      if (!job.spec.deadline || job.state !== 'running' || !job.spec.checkpoint || st.preempted.has(job.id) || moved.has(job.id)) continue;
      const workLeft = workLeftSec(s, job);
      const timeLeft = (Date.parse(job.spec.deadline) - s.nowMs) / 1000;
      // Moving is only worth it while on-demand can still finish: time for the work and one changeover.
      if (timeLeft < workLeft + changeover) continue;
      const choice = deadlineChoice(job, s.nowMs, s.policy, { mode: 'none', spotAvailable: false, workLeftSec: workLeft });
      if (choice.mode !== 'on-demand' || !choice.commit) continue;
      moved.add(job.id);
      actions.push({
        kind: 'preempt',
        jobId: job.id,
        attempt: job.attempt,
        reason: deadlineToOnDemand(timeLeft - workLeft, workLeft, job.spec.deadline),
      });
    }
  }
  return actions;
}
