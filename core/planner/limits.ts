/**
 * Limits: what the teams' tags allow. A team's budget state (ok, spot-only, hold, stop) and what
 * a hold budget has left to commit; whether placing a job would take its team over its GPU cap
 * or its budget; and the running work of a team whose stop budget is spent. Decides only
 * whether a team's work may have more; it must not choose where work goes.
 */
import { budgetStatus } from '../budget.ts';
import { remainingWorkSec } from '../cost-model.ts';
import type { PlanAction } from '../plan.ts';
import type { Reason } from '../reason.ts';
import { budgetStopped, overBudget, teamGpuCap } from './reasons.ts';
import type { Entry, PlanningState, TeamBudget } from './state.ts';

/** A team's budget state in this plan (worked out once per team). */
export function teamBudget(st: PlanningState, teamId: string): TeamBudget {
  let t = st.teamBudgets.get(teamId);
  if (!t) {
    const team = st.s.teams.get(teamId);
    const spent = st.s.spendMicroUsd.get(teamId) ?? 0;
    const committed = st.s.committedMicroUsd?.get(teamId) ?? 0;
    const state = team ? budgetStatus(team, spent, committed).state : 'hold';
    // What new work may still commit: the budget less what was spent and what running work will still cost.
    const leftMicroUsd =
      team?.budget && (team.budget.action === 'hold' || team.budget.action === 'stop')
        ? Math.max(0, team.budget.amountMicroUsd - spent - committed)
        : undefined;
    t = { state, team, leftMicroUsd };
    st.teamBudgets.set(teamId, t);
  }
  return t;
}

/** The budget status message of a team (with what it spent and committed), for reasons. */
export function budgetMessage(st: PlanningState, teamId: string): string | undefined {
  const b = teamBudget(st, teamId);
  return b.team ? budgetStatus(b.team, st.s.spendMicroUsd.get(teamId) ?? 0, st.s.committedMicroUsd?.get(teamId) ?? 0).message : undefined;
}

/** Why the job may not take this hourly price share (team GPU cap, then hold budget), or undefined when it may. */
export function limitProblem(st: PlanningState, e: Entry, priceShareMicroUsdPerHour: number, factor: number): Reason | undefined {
  const team = st.s.teams.get(e.team);
  const milli = e.cls.milli * e.cls.nodes;
  if (team?.maxGpus !== undefined && (st.teamUsedMilli.get(e.team) ?? 0) + milli > team.maxGpus * 1000) {
    return teamGpuCap(e.team, team.maxGpus);
  }
  const b = teamBudget(st, e.team);
  if (b.leftMicroUsd !== undefined) {
    const hours = remainingWorkSec(e.job, st.s.policy) / 3600;
    const expected = Math.round(priceShareMicroUsdPerHour * hours * factor);
    if (expected > b.leftMicroUsd) return overBudget(e.team, expected, b.leftMicroUsd);
  }
  return undefined;
}

/** Counts a job's GPUs to its team and its expected cost against a hold budget. */
export function commitLimits(st: PlanningState, e: Entry, priceShareMicroUsdPerHour: number, factor: number): void {
  st.teamUsedMilli.set(e.team, (st.teamUsedMilli.get(e.team) ?? 0) + e.cls.milli * e.cls.nodes);
  const b = teamBudget(st, e.team);
  if (b.leftMicroUsd !== undefined) {
    const hours = remainingWorkSec(e.job, st.s.policy) / 3600;
    b.leftMicroUsd -= Math.round(priceShareMicroUsdPerHour * hours * factor);
  }
}

/** A team whose budget (action stop) is spent: each of its running attempts is checkpointed and requeued, and then waits held. */
export function stopSpentTeams(st: PlanningState): PlanAction[] {
  const actions: PlanAction[] = [];
  for (const job of st.s.activeJobs) {
    if (job.state === 'checkpointing' || st.preempted.has(job.id) || teamBudget(st, job.team).state !== 'stop') continue;
    const status = budgetStatus(teamBudget(st, job.team).team!, st.s.spendMicroUsd.get(job.team) ?? 0);
    actions.push({ kind: 'preempt', jobId: job.id, attempt: job.attempt, reason: budgetStopped(status.message, !!job.spec.checkpoint) });
  }
  return actions;
}
