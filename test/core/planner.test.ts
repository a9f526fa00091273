import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { Job } from '../../core/job.ts';
import type { Plan, PlanAction } from '../../core/plan.ts';
import { planSimple } from '../../core/planner/simple-planner.ts';
import { aGroup, aJob, aNode, aSnapshot, aTeam, T0 } from '../builders.ts';

const placements = (plan: Plan) => plan.actions.filter((a): a is Extract<PlanAction, { kind: 'place' }> => a.kind === 'place');
const scaleUps = (plan: Plan) => plan.actions.filter((a): a is Extract<PlanAction, { kind: 'scale-up' }> => a.kind === 'scale-up');

describe('simple planner', () => {
  it('places a job on free GPUs of a ready node, best fit first', () => {
    const big = aGroup({ instanceType: 'g5.12xlarge' });
    const small = aGroup({ instanceType: 'g5.xlarge' });
    const plan = planSimple(aSnapshot({ groups: [big, small], nodes: [aNode('i-big', { group: big }), aNode('i-small', { group: small })], pendingJobs: [aJob()] }));
    expect(placements(plan)).toEqual([expect.objectContaining({ jobId: 'team-a.job-1', placement: { nodes: [{ nodeId: 'i-small', gpuIndices: [0] }], capacityType: 'on-demand' } })]);
    expect(placements(plan)[0]!.reason.code).toBe('placed-on-free-capacity');
    expect(scaleUps(plan)).toEqual([]);
  });

  it('never gives one GPU to two jobs', () => {
    const g = aGroup({ instanceType: 'g5.12xlarge' });
    const running = aJob({ id: 'team-a.run', state: 'running', placement: { nodes: [{ nodeId: 'i-1', gpuIndices: [0, 1, 2] }], capacityType: 'on-demand' } });
    const plan = planSimple(aSnapshot({ groups: [g], nodes: [aNode('i-1', { group: g })], activeJobs: [running], pendingJobs: [aJob({ id: 'team-a.a', spec: { gpu: { kind: 'whole', count: 2 } } }), aJob({ id: 'team-a.b' })] }));
    expect(placements(plan)).toEqual([expect.objectContaining({ jobId: 'team-a.b', placement: expect.objectContaining({ nodes: [{ nodeId: 'i-1', gpuIndices: [3] }] }) })]);
    expect(scaleUps(plan)).toHaveLength(1);
  });

  it('buys the cheapest offering that fits, and spot only for interruptible work', () => {
    const od = aGroup({ instanceType: 'g5.xlarge', capacityType: 'on-demand' });
    const spot = aGroup({ instanceType: 'g5.xlarge', capacityType: 'spot' });
    const plan = planSimple(aSnapshot({ groups: [od, spot], pendingJobs: [aJob({ id: 'team-a.i' }), aJob({ id: 'team-a.n', spec: { interruptible: false } })] }));
    expect(scaleUps(plan).map((a) => [a.groupId, a.fromDesired, a.toDesired])).toEqual([
      ['g5.xlarge-on-demand', 0, 1],
      ['g5.xlarge-spot', 0, 1],
    ]);
    expect(plan.waiting.map((w) => w.reason.code)).toEqual(['waiting-for-capacity', 'waiting-for-capacity']);
  });

  it('does not buy again for a job whose capacity is already booting', () => {
    const g = aGroup({ desiredCapacity: 1 });
    const plan = planSimple(aSnapshot({ groups: [g], nodes: [aNode('i-boot', { group: g, state: 'pending', record: null })], pendingJobs: [aJob()] }));
    expect(scaleUps(plan)).toEqual([]);
    expect(plan.waiting[0]!.reason.code).toBe('waiting-for-boot');
  });

  it('counts launches in flight as capacity on the way', () => {
    const plan = planSimple(aSnapshot({ groups: [aGroup({ desiredCapacity: 2 })], pendingJobs: [aJob({ id: 'team-a.1' }), aJob({ id: 'team-a.2' }), aJob({ id: 'team-a.3' })] }));
    expect(scaleUps(plan).map((a) => a.toDesired)).toEqual([3]);
  });

  it('keeps a gang in one zone, all or nothing', () => {
    const g = aGroup({ instanceType: 'p3.16xlarge', zones: ['us-east-1a', 'us-east-1b'] });
    const nodes = [aNode('i-a1', { group: g, zone: 'us-east-1a' }), aNode('i-b1', { group: g, zone: 'us-east-1b' }), aNode('i-b2', { group: g, zone: 'us-east-1b' })];
    const gang = aJob({ spec: { gpu: { kind: 'whole', count: 8 }, nodes: 2 } });
    const plan = planSimple(aSnapshot({ groups: [g], nodes, pendingJobs: [gang] }));
    const p = placements(plan)[0]!;
    expect(p.placement.nodes.map((n) => n.nodeId).sort()).toEqual(['i-b1', 'i-b2']);
    const tooBig = planSimple(aSnapshot({ groups: [{ ...g, maxSize: 3, desiredCapacity: 3 }], nodes, pendingJobs: [aJob({ spec: { gpu: { kind: 'whole', count: 8 }, nodes: 3 } })] }));
    expect(placements(tooBig)).toEqual([]);
    expect(tooBig.waiting[0]!.reason.code).toBe('group-at-max');
  });

  it('holds the jobs of a team whose budget says hold, and says why', () => {
    const team = aTeam('team-a', { budget: { amountMicroUsd: 100, period: 'monthly', action: 'hold', alertAtPct: [100] } });
    const g = aGroup();
    const plan = planSimple(aSnapshot({ groups: [g], nodes: [aNode('i-1', { group: g })], pendingJobs: [aJob()], teams: new Map([['team-a', team]]), spendMicroUsd: new Map([['team-a', 200]]) }));
    expect(placements(plan)).toEqual([]);
    expect(plan.actions).toContainEqual({ kind: 'hold', jobId: 'team-a.job-1', reason: expect.objectContaining({ code: 'budget-hold' }) });
  });

  it('removes a node empty for the cool-down, and not before', () => {
    const g = aGroup({ desiredCapacity: 1 });
    const idle = (sinceMin: number) => planSimple(aSnapshot({ groups: [g], nodes: [aNode('i-1', { group: g, record: { idleSinceMs: T0 - sinceMin * 60_000 } })] }));
    expect(idle(2).actions).toEqual([]);
    expect(idle(6).actions).toEqual([{ kind: 'scale-in', groupId: g.id, instanceId: 'i-1', reason: expect.objectContaining({ code: 'scale-in-idle' }) }]);
    expect(planSimple(aSnapshot({ groups: [{ ...g, minSize: 1 }], nodes: [aNode('i-1', { group: g, record: { idleSinceMs: T0 - 3_600_000 } })] })).actions).toEqual([]);
  });

  it('gives the same plan for the same snapshot, and never exceeds a group maximum', () => {
    fc.assert(
      fc.property(
        fc.array(fc.record({ gpus: fc.constantFrom(1, 2, 4, 8), interruptible: fc.boolean(), priority: fc.integer({ min: 0, max: 1000 }) }), { maxLength: 40 }),
        fc.integer({ min: 0, max: 6 }),
        (specs, max) => {
          const groups = [aGroup({ instanceType: 'p3.16xlarge', capacityType: 'spot', maxSize: max }), aGroup({ instanceType: 'p3.16xlarge', maxSize: max }), aGroup({ instanceType: 'g5.xlarge', maxSize: max })];
          const jobs: Job[] = specs.map((s, i) => aJob({ id: `team-a.j${i}`, spec: { gpu: { kind: 'whole', count: s.gpus }, interruptible: s.interruptible, priority: s.priority } }));
          const snap = aSnapshot({ groups, pendingJobs: jobs });
          const plan = planSimple(snap);
          expect(planSimple(snap)).toEqual(plan);
          for (const a of scaleUps(plan)) expect(a.toDesired).toBeLessThanOrEqual(groups.find((g) => g.id === a.groupId)!.maxSize);
          for (const w of plan.waiting) expect(w.reason.message.length).toBeGreaterThan(10);
          expect(plan.waiting.length + placements(plan).length).toBe(jobs.length);
        },
      ),
    );
  });
});
