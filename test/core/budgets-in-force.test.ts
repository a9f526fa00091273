import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { explainJob } from '../../cli/commands/explain.ts';
import { BUDGET_TAGS } from '../../core/budget.ts';
import { plan } from '../../core/planner/planner.ts';
import type { TeamTagSet } from '../../core/ports.ts';
import { intake } from '../../core/services/intake.ts';
import { reconcile } from '../../core/reconcile/reconcile.ts';
import { buildSnapshot, readWorld, type TeamMemory } from '../../core/services/snapshot-reader.ts';
import { DEFAULT_POLICY } from '../../core/snapshot.ts';
import { createSimEnvironment } from '../../cloud/sim/environment.ts';
import { MemoryBudgetMemory, StaticBudgetTags } from '../../cloud/sim/memory-stores.ts';
import { aGroup, aJob, aNode, aSnapshot, aTeam, T0 } from '../builders.ts';

const queue = (team: string) => `arn:aws:sqs:us-east-1:123456789012:gpufleet-team-${team}`;
const tagSet = (team: string, tags: Record<string, string>): TeamTagSet => ({
  team,
  resource: queue(team),
  tags: { [BUDGET_TAGS.team]: team, ...tags },
});

describe('budgets in force survive a cold start', () => {
  it('the last valid values stay in force when a new container starts with an empty memory (loaded from the store)', async () => {
    const e = createSimEnvironment({ startMs: T0, seed: 1, groups: [], teams: ['nlp'], teamTags: [] });
    const store = new MemoryBudgetMemory();
    const budgets = new StaticBudgetTags([
      tagSet('nlp', { [BUDGET_TAGS.amount]: '2500', [BUDGET_TAGS.action]: 'alert', [BUDGET_TAGS.maxGpus]: '8' }),
    ]);
    const ports = { ...e.ports, budgets, budgetMemory: store };
    const read = async (memory: TeamMemory) =>
      (await buildSnapshot(ports, await readWorld(ports), { nowMs: T0, policy: DEFAULT_POLICY, teamMemory: memory })).teams.get('nlp')!;
    await read(new Map()); // a warm container learns the good values (and saves them)
    budgets.setTags('nlp', {
      [BUDGET_TAGS.team]: 'nlp',
      [BUDGET_TAGS.amount]: '2500',
      [BUDGET_TAGS.action]: 'alert',
      [BUDGET_TAGS.maxGpus]: 'eight',
    });
    const cold = await read(new Map()); // a new container: its memory is empty
    expect(cold).toMatchObject({ maxGpus: 8, budget: { action: 'alert', amountMicroUsd: 2_500_000_000 } });
    expect(cold.tagProblems).toEqual([expect.stringMatching(/max-gpus="eight" is not allowed/)]);
    // ... and the good values are still what the store keeps.
    expect((await store.load()).get('nlp')).toMatchObject({ maxGpus: 8, budget: { action: 'alert' } });
  });

  it('property: for any sequence of valid and invalid tag values and cold starts, each value in force is the last valid one, and a team never valid is held', async () => {
    const amount = fc.oneof(fc.constantFrom('100', '2500', '0.5'), fc.constantFrom('lots', '-3', ''));
    const action = fc.oneof(fc.constantFrom('alert', 'hold', 'spot-only', 'stop'), fc.constantFrom('ignore', 'HOLD'));
    const maxGpus = fc.oneof(fc.constantFrom('0', '8', '64'), fc.constantFrom('eight', '1.5'));
    const step = fc.oneof(
      fc.record({ kind: fc.constant('tags' as const), amount, action, maxGpus }),
      fc.constant({ kind: 'cold-start' as const }),
    );
    await fc.assert(
      fc.asyncProperty(fc.array(step, { minLength: 1, maxLength: 12 }), async (steps) => {
        const e = createSimEnvironment({ startMs: T0, seed: 1, groups: [], teams: ['nlp'], teamTags: [] });
        const budgets = new StaticBudgetTags([]);
        const ports = { ...e.ports, budgets, budgetMemory: new MemoryBudgetMemory() };
        let container: TeamMemory = new Map();
        const last: { amount?: string; action?: string; maxGpus?: string } = {};
        for (const s of steps) {
          if (s.kind === 'cold-start') {
            container = new Map();
            continue;
          }
          budgets.setTags('nlp', {
            [BUDGET_TAGS.team]: 'nlp',
            [BUDGET_TAGS.amount]: s.amount,
            [BUDGET_TAGS.action]: s.action,
            [BUDGET_TAGS.maxGpus]: s.maxGpus,
          });
          if (/^\d+(\.\d+)?$/.test(s.amount)) last.amount = s.amount;
          if (['alert', 'hold', 'spot-only', 'stop'].includes(s.action)) last.action = s.action;
          if (/^\d+$/.test(s.maxGpus)) last.maxGpus = s.maxGpus;
          const snap = await buildSnapshot(ports, await readWorld(ports), { nowMs: T0, policy: DEFAULT_POLICY, teamMemory: container });
          const team = snap.teams.get('nlp')!;
          if (last.amount === undefined) {
            expect(team.budget).toBeUndefined();
            expect(
              plan({ ...aSnapshot(), teams: snap.teams, pendingJobs: [aJob({ id: 'nlp.x', team: 'nlp' })] }).waiting[0]?.reason.code,
            ).toBe('budget-hold');
          } else expect(team.budget?.amountMicroUsd).toBe(Math.round(Number(last.amount) * 1e6));
          if (team.budget) expect(team.budget.action).toBe(last.action ?? 'hold');
          expect(team.maxGpus).toBe(last.maxGpus === undefined ? undefined : Number(last.maxGpus));
        }
      }),
      { numRuns: 150 },
    );
  });
});

describe('hold and spot-only count what running work will still cost', () => {
  it('with $100 and two jobs of about $89 each, the second waits in the next plan too (the first is committed)', async () => {
    const e = createSimEnvironment({
      startMs: T0,
      seed: 1,
      teams: ['nlp'],
      teamTags: [tagSet('nlp', { [BUDGET_TAGS.amount]: '100', [BUDGET_TAGS.action]: 'hold' })],
      bootSec: 60,
      groups: [{ id: 'v100-od', instanceTypes: ['p3.2xlarge'], zones: ['us-west-2a'], capacityType: 'on-demand', minSize: 2, maxSize: 2 }],
    });
    e.cloud.tick();
    e.clock.advanceBy(120_000);
    e.cloud.tick();
    for (const i of await e.cloud.listInstances())
      await e.nodes.register({
        instanceId: i.id,
        groupId: i.groupId,
        registeredAtMs: e.clock.nowMs(),
        lastHeartbeatAtMs: e.clock.nowMs(),
        healthy: true,
        gpus: [{ index: 0, model: 'V100', memoryMiB: 16384 }],
      });
    // p3.2xlarge on-demand is $3.06/h: 29 h ≈ $88.74 each.
    const spec = {
      image: 'i',
      command: ['c'],
      gpu: { kind: 'whole', count: 1 },
      expectedRuntimeSec: 29 * 3600,
      checkpoint: { intervalSec: 600 },
    };
    await intake(e, { team: 'nlp', body: JSON.stringify(spec), token: 'a' });
    await intake(e, { team: 'nlp', body: JSON.stringify(spec), token: 'b' });
    const run = () => reconcile(e.ports, { planner: plan, policy: DEFAULT_POLICY });
    const first = await run();
    if (first.status !== 'done') throw new Error('skipped');
    expect(first.decision.plan.actions.filter((a) => a.kind === 'place').map((a) => a.kind === 'place' && a.jobId)).toEqual(['nlp.a']);
    expect(first.decision.plan.waiting).toEqual([{ jobId: 'nlp.b', reason: expect.objectContaining({ code: 'budget-hold' }) }]);
    e.clock.advanceBy(60_000);
    const second = await run();
    if (second.status !== 'done') throw new Error('skipped');
    expect(second.decision.plan.actions.filter((a) => a.kind === 'place')).toEqual([]);
    const held = await e.jobs.get('nlp.b');
    expect(held?.hold).toMatchObject({ code: 'budget-hold' });
    // The decision says what was in force: the budget, the spend, the committed cost.
    const nlp = second.decision.teams?.find((t) => t.id === 'nlp');
    expect(nlp).toMatchObject({ budget: { amountMicroUsd: 100_000_000, action: 'hold' }, state: 'ok' });
    expect(nlp!.committedMicroUsd).toBeGreaterThan(85_000_000);
    expect(nlp!.committedMicroUsd + nlp!.spentMicroUsd).toBeLessThan(100_000_000 + 1_000_000);
    // explain of the held job quotes the budget that reconcile enforced.
    const why = explainJob(held!, await e.decisions.recent(10), e.clock.nowMs());
    expect(why.summary).toMatch(/nlp\.b waits .*: held — its expected cost \(\$88\.\d\d\) is more than what is left of team nlp's budget/);
    expect(why.details).toContainEqual(
      expect.stringMatching(
        /^team nlp in force at decision decision-\d+: budget \$100\.00 monthly, action hold; spent \$\d+\.\d\d, running work will cost about \$8\d\.\d\d more; no GPU cap, weight 1; state ok$/,
      ),
    );
  });
});

describe('action stop', () => {
  const stopTeam = (amount: number) =>
    aTeam('team-a', { budget: { amountMicroUsd: amount, period: 'monthly', action: 'stop', alertAtPct: [100] } });

  it('once the budget is spent, running work is checkpointed and requeued, and waiting work is held', () => {
    const g = aGroup();
    const running = aJob({
      id: 'team-a.run',
      state: 'running',
      attempt: 1,
      placedAtMs: T0,
      placement: { nodes: [{ nodeId: 'i-1', gpuIndices: [0] }], capacityType: 'on-demand', priceMicroUsdPerHour: 1_000_000 },
    });
    const waiting = aJob({ id: 'team-a.wait' });
    const other = aJob({
      id: 'team-b.run',
      team: 'team-b',
      state: 'running',
      attempt: 1,
      placedAtMs: T0,
      placement: { nodes: [{ nodeId: 'i-1', gpuIndices: [1] }], capacityType: 'on-demand' },
    });
    const p = plan(
      aSnapshot({
        groups: [g],
        nodes: [aNode('i-1', { group: g })],
        teams: new Map([
          ['team-a', stopTeam(10_000_000)],
          ['team-b', aTeam('team-b')],
        ]),
        spendMicroUsd: new Map([['team-a', 10_000_000]]),
        activeJobs: [running, other],
        pendingJobs: [waiting],
      }),
    );
    expect(p.actions.filter((a) => a.kind === 'preempt')).toEqual([
      {
        kind: 'preempt',
        jobId: 'team-a.run',
        attempt: 1,
        reason: expect.objectContaining({
          code: 'budget-stop',
          message: expect.stringMatching(/spent its monthly budget.*checkpointed and requeued/),
        }),
      },
    ]);
    expect(p.waiting.find((w) => w.jobId === 'team-a.wait')?.reason.code).toBe('budget-stop');
  });

  it('before the budget is spent, a stop team is held like hold once spend plus committed cost reach it, and nothing is stopped', () => {
    const g = aGroup();
    const running = aJob({
      id: 'team-a.run',
      state: 'running',
      attempt: 1,
      placedAtMs: T0,
      placement: { nodes: [{ nodeId: 'i-1', gpuIndices: [0] }], capacityType: 'on-demand', priceMicroUsdPerHour: 1_000_000 },
    });
    const p = plan(
      aSnapshot({
        groups: [g],
        nodes: [aNode('i-1', { group: g })],
        teams: new Map([['team-a', stopTeam(10_000_000)]]),
        spendMicroUsd: new Map([['team-a', 6_000_000]]),
        committedMicroUsd: new Map([['team-a', 5_000_000]]),
        activeJobs: [running],
        pendingJobs: [aJob({ id: 'team-a.wait' })],
      }),
    );
    expect(p.actions.filter((a) => a.kind === 'preempt')).toEqual([]);
    expect(p.waiting.find((w) => w.jobId === 'team-a.wait')?.reason).toMatchObject({
      code: 'budget-hold',
      message: expect.stringMatching(
        /has spent \$6\.00 of its monthly budget of \$10\.00 and its running work will cost about \$5\.00 more; no new work is started \(action stop\)/,
      ),
    });
  });
});
