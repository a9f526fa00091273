import { describe, expect, it } from 'vitest';
import { BUDGET_TAGS } from '../../core/budget.ts';
import { BUILT_IN_SPOT, BUILT_IN_TRACE, DEFAULT_SIM_GROUPS, defaultTeamTags } from '../../cloud/sim/defaults.ts';
import { runSimulation } from '../../cloud/sim/simulation.ts';
import { loadWorkload } from '../../cloud/sim/workload.ts';

describe('budget actions in the simulated fleet (invariants checked every minute)', () => {
  const workload = loadWorkload(BUILT_IN_TRACE, { hours: 6, maxJobs: 150 });
  const withAction = (action: 'stop' | 'hold', usd: number) =>
    defaultTeamTags(workload.teams).map((t) =>
      t.team === 'nlp' ? { ...t, tags: { ...t.tags, [BUDGET_TAGS.amount]: String(usd), [BUDGET_TAGS.action]: action } } : t,
    );

  it('stop: once nlp has spent its budget, its running work is checkpointed and requeued and waits held; the overshoot stays within one interval and the checkpoint allowance', async () => {
    // nlp's jobs say nothing of their runtime (an hour is assumed) and run three hours: the budget is spent while they run.
    const long = {
      ...workload,
      jobs: workload.jobs.map((j) => {
        if (j.team !== 'nlp') return j;
        const { expectedRuntimeSec: _unknown, ...spec } = j.spec;
        return { ...j, workSec: 3 * 3600, spec: { ...spec, checkpoint: { intervalSec: 600 } } };
      }),
    };
    const { summary, env, jobs } = await runSimulation({
      workload: long,
      groups: DEFAULT_SIM_GROUPS,
      teamTags: withAction('stop', 15),
      seed: 1,
      hours: 8,
      spot: BUILT_IN_SPOT,
      invariants: 'stop',
    });
    expect(summary).toMatchObject({ lost: 0, duplicated: 0, violations: 0 });
    const stopped = jobs.filter((j) => j.team === 'nlp' && j.requeueReason?.code === 'budget-stop');
    expect(stopped.length).toBeGreaterThan(0);
    // Held, not run: no nlp job is running at the end, and the held ones say why.
    expect(jobs.filter((j) => j.team === 'nlp' && (j.state === 'running' || j.state === 'placed'))).toEqual([]);
    expect(jobs.filter((j) => j.team === 'nlp' && j.state === 'pending').every((j) => j.hold?.code === 'budget-stop')).toBe(true);
    const latest = (await env.decisions.recent(1))[0]!;
    expect(latest.teams?.find((t) => t.id === 'nlp')).toMatchObject({ state: 'stop', budget: { action: 'stop' } });
    // The other teams carry on.
    expect(jobs.filter((j) => j.team !== 'nlp' && j.state === 'succeeded').length).toBeGreaterThan(50);
  }, 60_000);

  it('hold: nlp gets no new placement once its spend plus committed cost reach the budget, and its waiting work says why', async () => {
    const { summary, jobs } = await runSimulation({
      workload,
      groups: DEFAULT_SIM_GROUPS,
      teamTags: withAction('hold', 15),
      seed: 1,
      hours: 8,
      spot: BUILT_IN_SPOT,
      invariants: 'stop',
    });
    expect(summary).toMatchObject({ lost: 0, violations: 0 });
    expect(jobs.some((j) => j.team === 'nlp' && j.state === 'pending' && j.hold?.code === 'budget-hold')).toBe(true);
  }, 60_000);
});
