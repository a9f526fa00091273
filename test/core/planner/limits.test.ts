import { describe, expect, it } from 'vitest';
import { commitLimits, limitProblem, stopSpentTeams, teamBudget } from '../../../core/planner/limits.ts';
import { aGroup, aJob, aNode, aTeam } from '../../builders.ts';
import { classified, running } from './support.ts';

const budget = (action: 'alert' | 'spot-only' | 'hold' | 'stop', amountMicroUsd: number) => ({
  amountMicroUsd,
  period: 'monthly' as const,
  action,
  alertAtPct: [100],
});

describe('planner phase: limits', () => {
  it('a GPU cap counts what the team holds and what this plan gave it', () => {
    const g = aGroup({ instanceType: 'g5.12xlarge' });
    const teams = new Map([['team-a', aTeam('team-a', { maxGpus: 3 })]]);
    const held = running('team-a.old', 'i-1', { gpuIndices: [0] });
    const { st, entries } = classified({
      groups: [g],
      nodes: [aNode('i-1', { group: g })],
      teams,
      activeJobs: [held],
      pendingJobs: [aJob({ id: 'team-a.new', spec: { gpu: { kind: 'whole', count: 2 } } })],
    });
    const e = entries[0]!;
    expect(limitProblem(st, e, 0, 1)).toBeUndefined(); // 1 held + 2 = 3: at the cap, not over it
    commitLimits(st, e, 0, 1);
    expect(st.teamUsedMilli.get('team-a')).toBe(3000);
    expect(limitProblem(st, e, 0, 1)).toMatchObject({ code: 'team-gpu-cap' });
  });

  it('a hold budget refuses work whose expected cost is more than is left, and counts what it commits', () => {
    const teams = new Map([['team-a', aTeam('team-a', { budget: budget('hold', 5_000_000) })]]);
    const { st, entries } = classified({
      teams,
      spendMicroUsd: new Map([['team-a', 1_000_000]]),
      pendingJobs: [aJob({ id: 'team-a.x', spec: { expectedRuntimeSec: 3600 } })],
    });
    const e = entries[0]!;
    expect(teamBudget(st, 'team-a').leftMicroUsd).toBe(4_000_000);
    expect(limitProblem(st, e, 4_000_001, 1)).toMatchObject({ code: 'budget-hold' });
    expect(limitProblem(st, e, 3_000_000, 1)).toBeUndefined();
    commitLimits(st, e, 3_000_000, 1);
    expect(teamBudget(st, 'team-a').leftMicroUsd).toBe(1_000_000);
    // Rework on spot counts: a factor of 1.5 makes a $0.80 share $1.20.
    expect(limitProblem(st, e, 800_000, 1.5)).toMatchObject({ code: 'budget-hold' });
  });

  it('a spent stop budget checkpoints each running attempt once, not those already leaving', () => {
    const g = aGroup({ desiredCapacity: 3 });
    const teams = new Map([
      ['team-a', aTeam('team-a', { budget: budget('stop', 1_000_000) })],
      ['team-b', aTeam('team-b')],
    ]);
    const active = [
      running('team-a.cp', 'i-1', { gpuIndices: [0] }, { spec: { checkpoint: { intervalSec: 600 } } }),
      running('team-a.leaving', 'i-2', { gpuIndices: [0] }, { state: 'checkpointing' }),
      running('team-b.other', 'i-3', { gpuIndices: [0] }, { team: 'team-b' }),
    ];
    const { st } = classified({
      groups: [g],
      nodes: ['i-1', 'i-2', 'i-3'].map((id) => aNode(id, { group: g })),
      teams,
      spendMicroUsd: new Map([['team-a', 2_000_000]]),
      activeJobs: active,
    });
    const actions = stopSpentTeams(st);
    expect(actions.map((a) => a.kind === 'preempt' && [a.jobId, a.reason.code])).toEqual([['team-a.cp', 'budget-stop']]);
    expect(actions[0]!.kind === 'preempt' && actions[0]!.reason.message).toMatch(/resumes from its checkpoint/);
    st.preempted.add('team-a.cp');
    expect(stopSpentTeams(st)).toEqual([]);
  });
});
