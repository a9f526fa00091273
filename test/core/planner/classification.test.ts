import { describe, expect, it } from 'vitest';
import { classOf } from '../../../core/planner/classification.ts';
import { emptySpotModel, observe } from '../../../core/spot-model.ts';
import { planBaseline } from '../../../core/planner/baseline.ts';
import { plan } from '../../../core/planner/planner.ts';
import { aGroup, aJob, aNode, aSnapshot, aTeam, T0 } from '../../builders.ts';
import { classified, freeWhole } from './support.ts';

const spot = aGroup({ capacityType: 'spot' });
const od = aGroup();
const pools = (eligible: ReadonlyMap<string, number>) => [...eligible.keys()].map((k) => k.split('/').slice(-1)[0]);

describe('planner phase: classification', () => {
  it('holds the jobs of held teams and of spot-only teams that cannot use spot, with a hold action each', () => {
    const teams = new Map([
      ['team-a', aTeam('team-a', { budget: { amountMicroUsd: 100, period: 'monthly', action: 'spot-only', alertAtPct: [100] } })],
    ]);
    const { st, entries } = classified({
      groups: [spot, od],
      teams,
      spendMicroUsd: new Map([['team-a', 500]]),
      pendingJobs: [
        aJob({ id: 'team-a.i' }),
        aJob({ id: 'team-a.n', spec: { interruptible: false } }),
        aJob({ id: 'team-x.no-team', team: 'team-x' }),
      ],
    });
    expect(entries.map((e) => e.job.id)).toEqual(['team-a.i']);
    expect(pools(entries[0]!.cls.eligible)).toEqual(['spot']);
    expect(st.waiting.map((w) => [w.jobId, w.reason.code])).toEqual([
      ['team-a.n', 'budget-spot-only'],
      ['team-x.no-team', 'budget-hold'],
    ]);
    expect(st.actions.map((a) => a.kind)).toEqual(['hold', 'hold']);
  });

  it('gives non-interruptible work only on-demand pools, and interruptible work spot only where rework leaves it cheaper', () => {
    const { st } = classified({ groups: [spot, od] });
    const firm = classOf(st, aJob({ spec: { interruptible: false } }), 'on-demand');
    expect(pools(firm.eligible)).toEqual(['on-demand']);
    const cheap = classOf(st, aJob({ spec: { expectedRuntimeSec: 3600 } }), 'any');
    expect([...cheap.eligible.values()].some((f) => f > 1)).toBe(true);
    expect(pools(cheap.eligible).sort()).toEqual(['on-demand', 'spot']);
    // A pool interrupted every few minutes makes a long job without checkpoints dearer on spot than on-demand.
    const risky = classified({ groups: [spot, od], poolRiskPerHour: new Map([[spot.offerings[0]!.id, 30]]) }).st;
    const long = classOf(risky, aJob({ spec: { expectedRuntimeSec: 10 * 3600 } }), 'any');
    expect(pools(long.eligible)).toEqual(['on-demand']);
  });

  it('prices spot rework from the spot model: where pools just back drop again soon, a pool up for minutes costs more than one up for hours', () => {
    const id = spot.offerings[0]!.id;
    const MIN = 60_000;
    // What the fleet has seen: another pool that came back and dropped again within ten minutes, twenty times.
    const seen = (upForMin: number) => {
      const m = emptySpotModel();
      for (let i = 0; i < 40; i++) observe(m, 'other', i % 2 === 0, T0 - 24 * 60 * MIN + i * 10 * MIN);
      observe(m, id, true, T0 - upForMin * MIN);
      observe(m, id, true, T0);
      return m;
    };
    const job = aJob({ spec: { expectedRuntimeSec: 2 * 3600, checkpoint: { intervalSec: 1800 } } });
    const factor = (upForMin: number) => {
      const { st } = classified({ groups: [spot, od], spotModel: seen(upForMin) });
      return [...classOf(st, job, 'spot').eligible].find(([k]) => k.endsWith('spot'))?.[1];
    };
    expect(factor(5)).toBeGreaterThan(1.05);
    expect(factor(600)).toBeLessThan(1.01);
    // Without the model, the per-pool rate alone (the Advisor band's prior here): one factor whatever the pool's age.
    const { st } = classified({ groups: [spot, od] });
    expect([...classOf(st, job, 'spot').eligible.values()][0]).toBeLessThan(1.05);
  });

  it('says why nothing fits: a limit the job sets, or no group offering such a machine', () => {
    const { st } = classified({ groups: [od] });
    const pinned = classOf(st, aJob({ spec: { placement: { zones: ['us-west-2a'] } } }), 'any');
    expect(pinned.noFit).toMatchObject({ code: 'no-offering-fits', message: expect.stringContaining('placement limits') });
    const huge = classOf(st, aJob({ spec: { gpu: { kind: 'whole', count: 8 } } }), 'any');
    // The requirement no group meets is named, as intake names it (a job taken while the groups could not be listed).
    expect(huge.noFit).toMatchObject({
      code: 'no-offering-fits',
      message: expect.stringMatching(/^no node group can hold it: it asks for 8 GPUs on one machine; the most a group's machine has is 1 /),
    });
  });

  it('orders by priority; when capacity is short, by fair share between teams; otherwise largest first', () => {
    const job = (id: string, team: string, count: number, priority = 100) =>
      aJob({ id, team, queuedAtMs: 0, spec: { priority, gpu: { kind: 'whole', count } } });
    const pending = [job('a.1', 'a', 1), job('a.2', 'a', 1), job('b.4', 'b', 4), job('c.urgent', 'c', 1, 900)];
    const big = aGroup({ instanceType: 'g5.12xlarge' });
    const roomy = classified({ groups: [big], pendingJobs: pending });
    expect(roomy.st.scarce).toBe(false);
    expect(roomy.entries.map((e) => e.job.id)).toEqual(['c.urgent', 'b.4', 'a.1', 'a.2']);
    const short = classified({ groups: [{ ...big, maxSize: 1 }], pendingJobs: pending });
    expect(short.st.scarce).toBe(true);
    expect(short.entries.map((e) => e.job.id)).toEqual(['c.urgent', 'a.1', 'b.4', 'a.2']);
  });

  it('takes no room and buys nothing', () => {
    const g = aGroup({ instanceType: 'g5.12xlarge' });
    const { st } = classified({ groups: [g], nodes: [aNode('i-1', { group: g })], pendingJobs: [aJob(), aJob({ id: 'team-a.2' })] });
    expect(freeWhole(st.ready.allNodes())).toEqual({ 'i-1': 4 });
    expect([...st.groups.values()].map((gs) => gs.added.length)).toEqual([0]);
    expect(st.actions).toEqual([]);
  });

  it('places a requeued job again only once every machine that ran its earlier attempt has stopped it, or its silent agent must have fenced itself', () => {
    // A two-node gang: attempt 9 was requeued (rank 1's machine went); rank 0's agent, lagging, still has it on its work list.
    const g = aGroup({ instanceType: 'g5.12xlarge' });
    const gang = aJob({ id: 'team-a.gang', attempt: 10, spec: { nodes: 2, gpu: { kind: 'whole', count: 4 } } });
    const world = (heardAtMs: number, assigned: Record<string, number>) =>
      aSnapshot({
        groups: [g],
        nodes: [aNode('i-217', { group: g, record: { lastHeartbeatAtMs: heardAtMs, assigned } }), aNode('i-21c', { group: g })],
        pendingJobs: [gang],
      });
    const placedNow = (s: ReturnType<typeof aSnapshot>) => plan(s).actions.some((a) => a.kind === 'place' && a.jobId === gang.id);
    // Heard from a minute ago with attempt 9 still listed: attempt 10 waits, and says for what.
    const lagging = plan(world(T0 - 60_000, { [gang.id]: 9 }));
    expect(lagging.actions.filter((a) => a.kind === 'place')).toEqual([]);
    expect(lagging.waiting.find((w) => w.jobId === gang.id)?.reason).toMatchObject({
      code: 'waiting-for-stop',
      message: expect.stringContaining('attempt 9 may still run on i-217'),
    });
    // The agent took the pointer off (it stopped attempt 9): placed.
    expect(placedNow(world(T0 - 60_000, {}))).toBe(true);
    // Silent past lease + fence + stop grace (270 s): whatever ran there has stopped; placed.
    expect(placedNow(world(T0 - 271_000, { [gang.id]: 9 }))).toBe(true);
    // The cheapest-fit baseline keeps the same rule.
    const baseline = planBaseline(world(T0 - 60_000, { [gang.id]: 9 }));
    expect(baseline.actions.filter((a) => a.kind === 'place' || a.kind === 'scale-up')).toEqual([]);
    expect(baseline.waiting.find((w) => w.jobId === gang.id)?.reason.code).toBe('waiting-for-stop');
    expect(planBaseline(world(T0 - 60_000, {})).actions.some((a) => a.kind === 'place' && a.jobId === gang.id)).toBe(true);
    // Another job's pointer does not hold it back.
    expect(placedNow(world(T0 - 60_000, { 'team-a.other': 3 }))).toBe(true);
  });
});
