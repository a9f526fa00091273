import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { InstanceType } from '../../core/catalog.ts';
import type { NodeAssignment } from '../../core/job.ts';
import { validateMigLayout } from '../../core/mig.ts';
import type { Plan, PlanAction } from '../../core/plan.ts';
import { plan } from '../../core/planner/planner.ts';
import type { Snapshot } from '../../core/snapshot.ts';
import { aGroup, aJob, aNode, anOffering, aSnapshot, aTeam, INSTANCE_TYPES, PRICES, T0 } from '../builders.ts';
import { running } from './planner/support.ts';

const placements = (p: Plan) => p.actions.filter((a): a is Extract<PlanAction, { kind: 'place' }> => a.kind === 'place');
const scaleUps = (p: Plan) => p.actions.filter((a): a is Extract<PlanAction, { kind: 'scale-up' }> => a.kind === 'scale-up');
const preempts = (p: Plan) => p.actions.filter((a): a is Extract<PlanAction, { kind: 'preempt' }> => a.kind === 'preempt');
const waitingCode = (p: Plan, id: string) => p.waiting.find((w) => w.jobId === id)?.reason.code;
const placedOn = (p: Plan, id: string) => placements(p).find((a) => a.jobId === id)?.placement.nodes;

describe('planner: GPU shapes', () => {
  it('packs time-sliced shares onto one GPU within its time and memory', () => {
    const g = aGroup({ instanceType: 'g5.xlarge' });
    const jobs = [0, 1, 2].map((i) => aJob({ id: `team-a.f${i}`, spec: { gpu: { kind: 'fraction', milliGpu: 300, memoryMiB: 10_000 } } }));
    const p = plan(aSnapshot({ groups: [g], nodes: [aNode('i-1', { group: g })], pendingJobs: jobs }));
    // Two shares fit the 24 GiB GPU by memory (3 × 10,000 MiB would not); the third waits for a new machine.
    expect(placements(p).map((a) => [a.jobId, a.placement.nodes[0]!.share])).toEqual([
      ['team-a.f0', { milliGpu: 300, memoryMiB: 10_000 }],
      ['team-a.f1', { milliGpu: 300, memoryMiB: 10_000 }],
    ]);
    expect(waitingCode(p, 'team-a.f2')).toBe('waiting-for-capacity');
  });

  it('never shares a GPU between a whole-GPU job and a time-sliced one', () => {
    const g = aGroup({ instanceType: 'g5.xlarge' });
    const share = running('team-a.s', 'i-1', { gpuIndices: [0], share: { milliGpu: 100, memoryMiB: 1000 } });
    const p = plan(aSnapshot({ groups: [g], nodes: [aNode('i-1', { group: g })], activeJobs: [share], pendingJobs: [aJob()] }));
    expect(placements(p)).toEqual([]);
  });

  it('places MIG slices at NVIDIA placements only: 4g.20gb needs slices 0-3 free', () => {
    const g = aGroup({ instanceType: 'p4d.24xlarge', migEnabled: true, maxSize: 0 });
    const node = aNode('i-1', {
      group: g,
      record: {
        gpus: Array.from({ length: 8 }, (_, index) => ({ index, model: 'A100-40GB' as const, memoryMiB: 40_960, migEnabled: true })),
      },
    });
    // GPU 0 has a 1g.5gb at slice 0: a 4g.20gb cannot go there (it may start only at 0) and takes
    // the empty GPU 7; the 3g.20gb then completes GPU 7 at slice 4 (4g@0 + 3g@4, valid since R510)
    // rather than opening GPU 0's larger hole.
    const active = [running('team-a.m', 'i-1', { gpuIndices: [0], mig: { profile: '1g.5gb', startSlice: 0 } })];
    for (let i = 1; i < 8; i++)
      active.push(running(`team-a.full${i}`, 'i-1', { gpuIndices: [i], mig: { profile: '7g.40gb', startSlice: 0 } }));
    active.pop(); // GPU 7 stays empty
    const p = plan(
      aSnapshot({
        groups: [g],
        nodes: [node],
        activeJobs: active,
        pendingJobs: [
          aJob({ id: 'team-a.four', spec: { gpu: { kind: 'mig', profile: '4g.20gb' } } }),
          aJob({ id: 'team-a.three', spec: { gpu: { kind: 'mig', profile: '3g.20gb' } } }),
        ],
      }),
    );
    expect(placedOn(p, 'team-a.four')).toEqual([{ nodeId: 'i-1', gpuIndices: [7], mig: { profile: '4g.20gb', startSlice: 0 } }]);
    expect(placedOn(p, 'team-a.three')).toEqual([{ nodeId: 'i-1', gpuIndices: [7], mig: { profile: '3g.20gb', startSlice: 4 } }]);
  });

  it('keeps the seven 1g slices of an A100 apart and refuses an eighth (no 1-slice placement at slice 7)', () => {
    const g = aGroup({ instanceType: 'p4d.24xlarge', migEnabled: true, maxSize: 0 });
    const gpus = [{ index: 0, model: 'A100-40GB' as const, memoryMiB: 40_960, migEnabled: true }];
    const types = new Map(Object.entries({ ...INSTANCE_TYPES, 'p4d.24xlarge': { ...INSTANCE_TYPES['p4d.24xlarge']!, gpuCount: 1 } }));
    const jobs = Array.from({ length: 8 }, (_, i) => aJob({ id: `team-a.s${i}`, spec: { gpu: { kind: 'mig', profile: '1g.5gb' } } }));
    const p = plan(
      aSnapshot({ groups: [g], instanceTypes: types, nodes: [aNode('i-1', { group: g, record: { gpus } })], pendingJobs: jobs }),
    );
    const starts = placements(p)
      .map((a) => a.placement.nodes[0]!.mig!.startSlice)
      .sort();
    expect(starts).toEqual([0, 1, 2, 3, 4, 5, 6]);
    expect(p.waiting).toHaveLength(1);
  });

  it('allows one +me slice per GPU and uses H100 and H200 profile names', () => {
    const h100: InstanceType = {
      name: 'p5.4xlarge',
      cloud: 'aws',
      gpuModel: 'H100',
      gpuCount: 1,
      gpuMemoryMiB: 81_920,
      vcpus: 16,
      memoryMiB: 262_144,
    };
    const types = new Map(Object.entries({ ...INSTANCE_TYPES, 'p5.4xlarge': h100 }));
    const g = {
      ...aGroup({ instanceType: 'p4d.24xlarge', maxSize: 0 }),
      id: 'h100',
      migEnabled: true,
      offerings: [anOffering('p5.4xlarge')],
    };
    const node = aNode('i-h', {
      group: g,
      instanceType: 'p4d.24xlarge',
      record: { gpus: [{ index: 0, model: 'H100', memoryMiB: 81_920, migEnabled: true }] },
    });
    const fixed = { ...node, instance: { ...node.instance, instanceType: 'p5.4xlarge' } };
    const jobs = [
      aJob({ id: 'team-a.me1', spec: { gpu: { kind: 'mig', profile: '1g.10gb+me' } } }),
      aJob({ id: 'team-a.me2', spec: { gpu: { kind: 'mig', profile: '1g.10gb+me' } } }),
      aJob({ id: 'team-a.big', spec: { gpu: { kind: 'mig', profile: '3g.40gb' } } }),
      aJob({ id: 'team-a.h200', spec: { gpu: { kind: 'mig', profile: '3g.71gb' } } }),
    ];
    const p = plan(
      aSnapshot({
        groups: [g],
        instanceTypes: types,
        prices: new Map([
          [
            g.offerings[0]!.id,
            { offeringId: g.offerings[0]!.id, priceMicroUsdPerHour: 6_880_000, onDemandMicroUsdPerHour: 6_880_000, source: 't' },
          ],
        ]),
        nodes: [fixed],
        pendingJobs: jobs,
      }),
    );
    expect(
      placements(p)
        .map((a) => a.jobId)
        .sort(),
    ).toEqual(['team-a.big', 'team-a.me1']);
    expect(waitingCode(p, 'team-a.h200')).toBe('no-offering-fits');
  });

  it('honours GPU model and minimum GPU memory', () => {
    const a10 = aGroup({ instanceType: 'g5.xlarge' });
    const v100 = aGroup({ instanceType: 'p3.2xlarge' });
    const nodes = [aNode('i-a10', { group: a10 }), aNode('i-v100', { group: v100 })];
    const p = plan(
      aSnapshot({
        groups: [a10, v100],
        nodes,
        pendingJobs: [
          aJob({ id: 'team-a.v', spec: { gpu: { kind: 'whole', count: 1, models: ['V100'] } } }),
          aJob({ id: 'team-a.m', spec: { gpu: { kind: 'whole', count: 1, minMemoryMiB: 20_000 } } }),
        ],
      }),
    );
    expect(placedOn(p, 'team-a.v')![0]!.nodeId).toBe('i-v100');
    expect(placedOn(p, 'team-a.m')![0]!.nodeId).toBe('i-a10');
  });
});

describe('planner: cheapest new capacity', () => {
  it('buys two 1-GPU machines for two 1-GPU jobs, not one 4-GPU machine', () => {
    const small = aGroup({ instanceType: 'g5.xlarge' });
    const big = aGroup({ instanceType: 'g5.12xlarge' });
    const p = plan(aSnapshot({ groups: [big, small], pendingJobs: [aJob({ id: 'team-a.1' }), aJob({ id: 'team-a.2' })] }));
    expect(scaleUps(p).map((a) => [a.groupId, a.toDesired])).toEqual([['g5.xlarge-on-demand', 2]]);
    expect(p.addedCostMicroUsdPerHour).toBe(2 * PRICES['g5.xlarge']!.od);
  });

  it('buys the bigger machine when it is cheaper per GPU for the work waiting', () => {
    const small = aGroup({ instanceType: 'g5.xlarge' });
    const big = aGroup({ instanceType: 'g5.12xlarge' }); // 4 GPUs for $5.672 < 4 × $1.006? no: 4.024 < 5.672
    const cheapBig = new Map(aSnapshot({ groups: [big, small] }).prices);
    const id = big.offerings[0]!.id;
    cheapBig.set(id, { ...cheapBig.get(id)!, priceMicroUsdPerHour: 3_500_000 });
    const jobs = Array.from({ length: 8 }, (_, i) => aJob({ id: `team-a.${i}` }));
    const p = plan(aSnapshot({ groups: [big, small], prices: cheapBig, pendingJobs: jobs }));
    expect(scaleUps(p).map((a) => [a.groupId, a.toDesired])).toEqual([['g5.12xlarge-on-demand', 2]]);
  });

  it('fills machines bought in the same plan before buying more', () => {
    const big = aGroup({ instanceType: 'g5.12xlarge' });
    const jobs = [
      aJob({ id: 'team-a.two', spec: { gpu: { kind: 'whole', count: 2 } } }),
      aJob({ id: 'team-a.one' }),
      aJob({ id: 'team-a.one-b' }),
    ];
    const p = plan(aSnapshot({ groups: [big], pendingJobs: jobs }));
    expect(scaleUps(p).map((a) => a.toDesired)).toEqual([1]);
    expect(p.waiting.map((w) => w.reason.code)).toEqual(['waiting-for-capacity', 'waiting-for-capacity', 'waiting-for-capacity']);
  });

  it('never puts non-interruptible work on spot', () => {
    const spot = aGroup({ instanceType: 'g5.xlarge', capacityType: 'spot' });
    const od = aGroup({ instanceType: 'g5.xlarge' });
    const p = plan(
      aSnapshot({ groups: [spot, od], nodes: [aNode('i-spot', { group: spot })], pendingJobs: [aJob({ spec: { interruptible: false } })] }),
    );
    expect(placements(p)).toEqual([]);
    expect(scaleUps(p).map((a) => a.groupId)).toEqual(['g5.xlarge-on-demand']);
  });

  it('prefers spot when its expected cost, rework included, is lower, and on-demand when it is not', () => {
    const spot = aGroup({ instanceType: 'g5.xlarge', capacityType: 'spot' });
    const od = aGroup({ instanceType: 'g5.xlarge' });
    const risky = new Map([[spot.offerings[0]!.id, 2]]); // two interruptions an hour
    const checkpointed = aJob({ id: 'team-a.cp', spec: { expectedRuntimeSec: 8 * 3600, checkpoint: { intervalSec: 300 } } });
    const fragile = aJob({ id: 'team-a.nocp', spec: { expectedRuntimeSec: 8 * 3600 } });
    const p = plan(aSnapshot({ groups: [spot, od], poolRiskPerHour: risky, pendingJobs: [checkpointed, fragile] }));
    expect(Object.fromEntries(scaleUps(p).map((a) => [a.groupId, a.toDesired]))).toEqual({ 'g5.xlarge-spot': 1, 'g5.xlarge-on-demand': 1 });
    expect(p.waiting.find((w) => w.jobId === 'team-a.cp')!.reason.message).toContain('spot');
    expect(p.addedExpectedCostMicroUsdPerHour).toBeGreaterThan(p.addedCostMicroUsdPerHour);
  });

  it('avoids offerings marked unavailable until their time is up, then uses them again', () => {
    const spot = aGroup({ instanceType: 'g5.xlarge', capacityType: 'spot' });
    const od = aGroup({ instanceType: 'g5.xlarge' });
    const until = new Map([[spot.offerings[0]!.id, T0 + 60_000]]);
    const impatient = { spotPatienceSec: 0 };
    expect(
      scaleUps(plan(aSnapshot({ groups: [spot, od], unavailableUntilMs: until, pendingJobs: [aJob()], policy: impatient }))).map(
        (a) => a.groupId,
      ),
    ).toEqual(['g5.xlarge-on-demand']);
    expect(
      scaleUps(
        plan(aSnapshot({ nowMs: T0 + 61_000, groups: [spot, od], unavailableUntilMs: until, pendingJobs: [aJob()], policy: impatient })),
      ).map((a) => a.groupId),
    ).toEqual(['g5.xlarge-spot']);
  });

  it('lets interruptible work wait a while for spot, in proportion to its length, then falls back to on-demand', () => {
    const spot = aGroup({ instanceType: 'g5.xlarge', capacityType: 'spot' });
    const od = aGroup({ instanceType: 'g5.xlarge' });
    const until = new Map([[spot.offerings[0]!.id, T0 + 3_600_000]]);
    const long = (waitedMin: number) => aJob({ queuedAtMs: T0 - waitedMin * 60_000, spec: { expectedRuntimeSec: 8 * 3600 } });
    const p = plan(aSnapshot({ groups: [spot, od], unavailableUntilMs: until, pendingJobs: [long(5)] }));
    expect(scaleUps(p)).toEqual([]);
    expect(p.waiting[0]!.reason.code).toBe('offering-unavailable');
    // Past the 30-minute patience it runs on on-demand.
    expect(
      scaleUps(plan(aSnapshot({ groups: [spot, od], unavailableUntilMs: until, pendingJobs: [long(31)] }))).map((a) => a.groupId),
    ).toEqual(['g5.xlarge-on-demand']);
    // A 4-minute job waits at most half its length (here the 3-minute boot time floor).
    const short = aJob({ queuedAtMs: T0 - 4 * 60_000, spec: { expectedRuntimeSec: 240 } });
    expect(
      scaleUps(plan(aSnapshot({ groups: [spot, od], unavailableUntilMs: until, pendingJobs: [short] }))).map((a) => a.groupId),
    ).toEqual(['g5.xlarge-on-demand']);
    // Work that may not be interrupted never waits for spot.
    expect(
      scaleUps(
        plan(aSnapshot({ groups: [spot, od], unavailableUntilMs: until, pendingJobs: [aJob({ spec: { interruptible: false } })] })),
      ).map((a) => a.groupId),
    ).toEqual(['g5.xlarge-on-demand']);
  });

  it('buys for a job limited to some zones only from a group whose zones all fit: a group spanning others picks its own zone', () => {
    const both = { ...aGroup({ zones: ['us-east-1a', 'us-east-1b'] }), id: 'both-zones' };
    const pinned = aJob({ spec: { placement: { zones: ['us-east-1b'] } } });
    // The group would launch in the zone it picks; before, the plan bought from it and the job waited for a machine that landed elsewhere.
    const p = plan(aSnapshot({ groups: [both], pendingJobs: [pinned] }));
    expect(scaleUps(p)).toEqual([]);
    expect(p.waiting.find((w) => w.jobId === pinned.id)?.reason.message).toMatch(/offered only by groups that also launch elsewhere/);
    const onlyB = { ...aGroup({ zones: ['us-east-1b'] }), id: 'only-b' };
    expect(scaleUps(plan(aSnapshot({ groups: [both, onlyB], pendingJobs: [pinned] }))).map((a) => a.groupId)).toEqual(['only-b']);
    // A job allowed in both zones may use the group that spans them.
    const either = aJob({ spec: { placement: { zones: ['us-east-1a', 'us-east-1b'] } } });
    expect(scaleUps(plan(aSnapshot({ groups: [both], pendingJobs: [either] }))).map((a) => a.groupId)).toEqual(['both-zones']);
  });

  it('keeps a gang in one zone on new capacity too, and buys all of it or none', () => {
    const g = aGroup({ instanceType: 'p3.16xlarge', zones: ['us-east-1a', 'us-east-1b'], maxSize: 3 });
    const gang = aJob({ spec: { gpu: { kind: 'whole', count: 8 }, nodes: 3 } });
    const p = plan(aSnapshot({ groups: [g], pendingJobs: [gang] }));
    expect(scaleUps(p)).toEqual([expect.objectContaining({ toDesired: 3, expected: [{ offeringId: g.offerings[0]!.id, count: 3 }] })]);
    const tooBig = plan(aSnapshot({ groups: [{ ...g, maxSize: 2 }], pendingJobs: [gang] }));
    expect(scaleUps(tooBig)).toEqual([]);
    expect(waitingCode(tooBig, gang.id)).toBe('group-at-max');
  });
});

describe('planner: priorities, fair share and preemption', () => {
  it('serves higher priority first when capacity is short', () => {
    const g = aGroup({ maxSize: 1 });
    const p = plan(
      aSnapshot({
        groups: [g],
        pendingJobs: [aJob({ id: 'team-a.low', spec: { priority: 10 } }), aJob({ id: 'team-a.high', spec: { priority: 900 } })],
      }),
    );
    expect(waitingCode(p, 'team-a.high')).toBe('waiting-for-capacity');
    expect(waitingCode(p, 'team-a.low')).toBe('group-at-max');
  });

  it('shares GPUs between teams by weight at equal priority', () => {
    const g = aGroup({ instanceType: 'g5.12xlarge', maxSize: 0 });
    const nodes = [aNode('i-1', { group: g }), aNode('i-2', { group: g })];
    const jobs = [
      ...Array.from({ length: 8 }, (_, i) => aJob({ id: `big.${i}`, team: 'big', queuedAtMs: T0 - 1000 + i })),
      ...Array.from({ length: 8 }, (_, i) => aJob({ id: `small.${i}`, team: 'small', queuedAtMs: T0 + i })),
    ];
    const teams = new Map([
      ['big', aTeam('big', { weight: 3 })],
      ['small', aTeam('small', { weight: 1 })],
    ]);
    const p = plan(aSnapshot({ groups: [g], nodes, pendingJobs: jobs, teams }));
    const placedTeams = placements(p).map((a) => a.jobId.split('.')[0]);
    expect(placedTeams.filter((t) => t === 'big')).toHaveLength(6);
    expect(placedTeams.filter((t) => t === 'small')).toHaveLength(2);
  });

  it('takes the place of the fewest, cheapest lower-priority jobs when groups are at their maximum', () => {
    const g = aGroup({ instanceType: 'g5.12xlarge', maxSize: 1, desiredCapacity: 2 });
    const nodes = [aNode('i-1', { group: g }), aNode('i-2', { group: g })];
    const cp = (id: string, ago: number) => ({
      checkpoint: { jobId: id, attempt: 1, location: 'x', completedAtMs: T0 - ago, progressSec: 100 },
    });
    const active = [
      running(
        'team-a.a',
        'i-1',
        { gpuIndices: [0, 1] },
        { spec: { priority: 10, checkpoint: { intervalSec: 600 } }, ...cp('team-a.a', 60_000) },
      ),
      running(
        'team-a.b',
        'i-1',
        { gpuIndices: [2, 3] },
        { spec: { priority: 10, checkpoint: { intervalSec: 600 } }, ...cp('team-a.b', 500_000) },
      ),
      running('team-a.c', 'i-2', { gpuIndices: [0] }, { spec: { priority: 10 } }),
      running('team-a.d', 'i-2', { gpuIndices: [1] }, { spec: { priority: 10 } }),
      running('team-a.e', 'i-2', { gpuIndices: [2, 3] }, { spec: { priority: 500 } }),
    ];
    const urgent = aJob({ id: 'team-a.urgent', spec: { priority: 800, gpu: { kind: 'whole', count: 2 } } });
    const p = plan(aSnapshot({ groups: [g], nodes, activeJobs: active, pendingJobs: [urgent] }));
    // One victim suffices on i-1; of its two, team-a.a loses the least work since its checkpoint.
    expect(preempts(p).map((a) => a.jobId)).toEqual(['team-a.a']);
    expect(preempts(p)[0]!.reason.message).toContain('team-a.urgent');
    expect(p.waiting.find((w) => w.jobId === 'team-a.urgent')!.reason.message).toContain('being checkpointed');
  });

  it('never preempts work of equal priority, nor work that cannot be interrupted', () => {
    const g = aGroup({ maxSize: 1, desiredCapacity: 1 });
    const equal = running('team-a.eq', 'i-1', { gpuIndices: [0] }, { spec: { priority: 800 } });
    const pinned = running('team-a.pin', 'i-2', { gpuIndices: [0] }, { spec: { priority: 1, interruptible: false } });
    const p = plan(
      aSnapshot({
        groups: [g],
        nodes: [aNode('i-1', { group: g }), aNode('i-2', { group: g })],
        activeJobs: [equal, pinned],
        pendingJobs: [aJob({ id: 'team-a.new', spec: { priority: 800 } })],
      }),
    );
    expect(preempts(p)).toEqual([]);
  });

  it('does not preempt again while earlier victims are still checkpointing', () => {
    const g = aGroup({ maxSize: 1, desiredCapacity: 1 });
    const leaving = running('team-a.leaving', 'i-1', { gpuIndices: [0] }, { state: 'checkpointing', spec: { priority: 1 } });
    const other = running('team-a.other', 'i-2', { gpuIndices: [0] }, { spec: { priority: 1 } });
    const p = plan(
      aSnapshot({
        groups: [g],
        nodes: [aNode('i-1', { group: g }), aNode('i-2', { group: g })],
        activeJobs: [leaving, other],
        pendingJobs: [aJob({ id: 'team-a.hi', spec: { priority: 900 } })],
      }),
    );
    expect(preempts(p)).toEqual([]);
    expect(p.waiting[0]!.reason.message).toContain('already checkpointing');
  });
});

describe('planner: budgets and caps', () => {
  const budget = (action: 'alert' | 'spot-only' | 'hold', amountMicroUsd: number) => ({
    amountMicroUsd,
    period: 'monthly' as const,
    action,
    alertAtPct: [100],
  });

  it('spot-only teams run interruptible work on spot only, and hold the rest', () => {
    const spot = aGroup({ capacityType: 'spot' });
    const od = aGroup();
    const teams = new Map([['team-a', aTeam('team-a', { budget: budget('spot-only', 100) })]]);
    const p = plan(
      aSnapshot({
        groups: [spot, od],
        teams,
        spendMicroUsd: new Map([['team-a', 500]]),
        pendingJobs: [aJob({ id: 'team-a.i' }), aJob({ id: 'team-a.n', spec: { interruptible: false } })],
      }),
    );
    expect(scaleUps(p).map((a) => a.groupId)).toEqual(['g5.xlarge-spot']);
    expect(waitingCode(p, 'team-a.n')).toBe('budget-spot-only');
  });

  it('a team with action hold does not start a job whose expected cost exceeds what is left', () => {
    const g = aGroup();
    const teams = new Map([['team-a', aTeam('team-a', { budget: budget('hold', 5_000_000) })]]);
    const cheap = aJob({ id: 'team-a.short', spec: { expectedRuntimeSec: 3600 } }); // ≈ $1.01
    const dear = aJob({ id: 'team-a.long', spec: { expectedRuntimeSec: 10 * 3600 } }); // ≈ $10.06
    const p = plan(
      aSnapshot({
        groups: [g],
        nodes: [aNode('i-1', { group: g }), aNode('i-2', { group: g })],
        teams,
        spendMicroUsd: new Map([['team-a', 1_000_000]]),
        pendingJobs: [cheap, dear],
      }),
    );
    expect(placements(p).map((a) => a.jobId)).toEqual(['team-a.short']);
    expect(waitingCode(p, 'team-a.long')).toBe('budget-hold');
    expect(p.actions).toContainEqual({ kind: 'hold', jobId: 'team-a.long', reason: expect.objectContaining({ code: 'budget-hold' }) });
  });

  it('a held job is not rewritten when only a figure in its reason moved; holds come after every capacity action', () => {
    const g = aGroup();
    const teams = new Map([['team-a', aTeam('team-a', { budget: budget('hold', 5_000_000) })]]);
    const dear = aJob({
      id: 'team-a.long',
      spec: { expectedRuntimeSec: 10 * 3600 },
      hold: {
        code: 'budget-hold',
        message: "its expected cost ($10.06) is more than what is left of team team-a's budget ($4.10; action hold)",
      },
    });
    const other = aJob({ id: 'team-b.x', team: 'team-b' });
    const p = plan(
      aSnapshot({
        groups: [g],
        teams: new Map([...teams, ['team-b', aTeam('team-b')]]),
        spendMicroUsd: new Map([['team-a', 1_500_000]]), // $3.50 left now, not $4.10
        pendingJobs: [dear, other, aJob({ id: 'team-a.new', spec: { expectedRuntimeSec: 10 * 3600 } })],
      }),
    );
    expect(p.waiting.find((w) => w.jobId === 'team-a.long')?.reason.message).toMatch(/\(\$3\.50; action hold\)/);
    // Only the job not held before gets a hold write.
    expect(p.actions.filter((a) => a.kind === 'hold').map((a) => a.kind === 'hold' && a.jobId)).toEqual(['team-a.new']);
    const kinds = p.actions.map((a) => a.kind);
    expect(kinds.indexOf('scale-up')).toBeGreaterThanOrEqual(0);
    expect(kinds.lastIndexOf('scale-up')).toBeLessThan(kinds.indexOf('hold'));
  });

  it('caps a team at its GPU limit', () => {
    const g = aGroup({ instanceType: 'g5.12xlarge' });
    const teams = new Map([['team-a', aTeam('team-a', { maxGpus: 3 })]]);
    const jobs = [
      aJob({ id: 'team-a.1', spec: { gpu: { kind: 'whole', count: 2 } } }),
      aJob({ id: 'team-a.2', spec: { gpu: { kind: 'whole', count: 2 } } }),
    ];
    const p = plan(aSnapshot({ groups: [g], nodes: [aNode('i-1', { group: g })], teams, pendingJobs: jobs }));
    expect(placements(p).map((a) => a.jobId)).toEqual(['team-a.1']);
    expect(waitingCode(p, 'team-a.2')).toBe('team-gpu-cap');
  });

  it('releases a hold once the budget allows again', () => {
    const g = aGroup();
    const held = aJob({ hold: { code: 'budget-hold', message: 'old' } });
    const p = plan(aSnapshot({ groups: [g], nodes: [aNode('i-1', { group: g })], pendingJobs: [held] }));
    expect(p.actions).toContainEqual({ kind: 'release-hold', jobId: held.id });
    expect(placements(p)).toHaveLength(1);
  });
});

describe('planner: moving work back to spot', () => {
  const spot = aGroup({ instanceType: 'g5.12xlarge', capacityType: 'spot' });
  const od = aGroup({ instanceType: 'g5.12xlarge', desiredCapacity: 1 });
  const onOd = (extra: Parameters<typeof aJob>[0] = {}) =>
    running(
      'team-a.long',
      'i-od',
      { gpuIndices: [0, 1, 2, 3] },
      { spec: { gpu: { kind: 'whole', count: 4 }, checkpoint: { intervalSec: 600 }, expectedRuntimeSec: 48 * 3600 }, ...extra },
    );

  it('moves long checkpointable work from on-demand to free room on a ready spot machine, and says what it saves', () => {
    const spotUp = { ...spot, desiredCapacity: 1 };
    const p = plan(
      aSnapshot({ groups: [spotUp, od], nodes: [aNode('i-od', { group: od }), aNode('i-spot', { group: spotUp })], activeJobs: [onOd()] }),
    );
    expect(preempts(p)).toEqual([
      expect.objectContaining({ jobId: 'team-a.long', reason: expect.objectContaining({ code: 'rebalance-to-spot' }) }),
    ]);
    expect(preempts(p)[0]!.reason.message).toMatch(/about \$[\d.]+ saved over its remaining run against \$[\d.]+ for the move/);
    expect(scaleUps(p)).toEqual([]);
  });

  // The defect: a move preempted the job first and bought spot after, so a spot pool that gave
  // nothing sent the job back to on-demand 10 minutes later, and the next plan moved it again.
  it('makes a move before it breaks anything: buys the spot machine first, waits while it boots, moves the job once it is up', () => {
    const nodes = [aNode('i-od', { group: od })];
    const buying = plan(aSnapshot({ groups: [spot, od], nodes, activeJobs: [onOd()] }));
    expect(preempts(buying)).toEqual([]);
    expect(scaleUps(buying).map((a) => [a.groupId, a.toDesired])).toEqual([[spot.id, 1]]);
    // While the machine boots, the job keeps running and nothing more is bought for it.
    const booting = plan(aSnapshot({ groups: [{ ...spot, desiredCapacity: 1 }, od], nodes, activeJobs: [onOd()] }));
    expect(preempts(booting)).toEqual([]);
    expect(scaleUps(booting)).toEqual([]);
    // A pool that cannot launch costs the job nothing: it is neither moved nor bought for.
    const failing = plan(
      aSnapshot({ groups: [spot, od], nodes, activeJobs: [onOd()], unavailableUntilMs: new Map([[spot.offerings[0]!.id, T0 + 60_000]]) }),
    );
    expect(failing.actions.filter((a) => a.kind === 'preempt' || a.kind === 'scale-up')).toEqual([]);
  });

  it('does not move work that cannot checkpoint, work about to finish, or work whose spot pool is unavailable', () => {
    const nodes = [aNode('i-od', { group: od })];
    const noCp = onOd({ spec: { gpu: { kind: 'whole', count: 4 }, expectedRuntimeSec: 48 * 3600 } });
    const ending = onOd({ spec: { gpu: { kind: 'whole', count: 4 }, checkpoint: { intervalSec: 600 }, expectedRuntimeSec: 3600 + 120 } });
    expect(preempts(plan(aSnapshot({ groups: [spot, od], nodes, activeJobs: [noCp] })))).toEqual([]);
    expect(preempts(plan(aSnapshot({ groups: [spot, od], nodes, activeJobs: [ending] })))).toEqual([]);
    expect(
      preempts(
        plan(
          aSnapshot({
            groups: [spot, od],
            nodes,
            activeJobs: [onOd()],
            unavailableUntilMs: new Map([[spot.offerings[0]!.id, T0 + 60_000]]),
          }),
        ),
      ),
    ).toEqual([]);
  });

  it('sends a moved job to spot, not back to the on-demand machine it left', () => {
    const moved = aJob({
      id: 'team-a.long',
      attempt: 2,
      queuedAtMs: T0 - 30_000,
      requeueReason: { code: 'rebalance-to-spot', message: 'moved' },
      spec: { gpu: { kind: 'whole', count: 4 }, checkpoint: { intervalSec: 600 }, expectedRuntimeSec: 48 * 3600 },
    });
    const p = plan(
      aSnapshot({ groups: [spot, od], nodes: [aNode('i-od', { group: od, record: { idleSinceMs: T0 - 60_000 } })], pendingJobs: [moved] }),
    );
    expect(placements(p)).toEqual([]);
    expect(scaleUps(p).map((a) => a.groupId)).toEqual([spot.id]);
  });
});

describe('planner: scale-in', () => {
  it('never removes a node with running or placed work', () => {
    const g = aGroup({ desiredCapacity: 1 });
    const job = running('team-a.r', 'i-1', { gpuIndices: [0] });
    const p = plan(
      aSnapshot({ groups: [g], nodes: [aNode('i-1', { group: g, record: { idleSinceMs: T0 - 86_400_000 } })], activeJobs: [job] }),
    );
    expect(p.actions.filter((a) => a.kind === 'scale-in')).toEqual([]);
  });

  it('lets go of a machine whose agent went silent or never registered, once it holds no work', () => {
    const g = aGroup({ desiredCapacity: 3 });
    const silent = aNode('i-silent', { group: g, record: { lastHeartbeatAtMs: T0 - 5 * 60_000 } });
    const fresh = aNode('i-booting', { group: g, record: null });
    const never = { ...aNode('i-never', { group: g, record: null }) };
    const neverLaunched = { ...never, instance: { ...never.instance, launchedAtMs: T0 - 30 * 60_000 } };
    const freshLaunched = { ...fresh, instance: { ...fresh.instance, launchedAtMs: T0 - 2 * 60_000 } };
    const p = plan(aSnapshot({ groups: [g], nodes: [silent, freshLaunched, neverLaunched] }));
    const ins = p.actions.filter((a): a is Extract<PlanAction, { kind: 'scale-in' }> => a.kind === 'scale-in');
    expect(ins.map((a) => [a.instanceId, a.reason.code])).toEqual([
      ['i-never', 'scale-in-unhealthy'],
      ['i-silent', 'scale-in-unhealthy'],
    ]);
    expect(ins[1]!.reason.message).toMatch(/its agent has sent no heartbeat for 300 s/);
    // A silent machine that still holds work waits until its work is requeued as lost.
    const busy = running('team-a.r', 'i-silent', { gpuIndices: [0] });
    expect(plan(aSnapshot({ groups: [g], nodes: [silent], activeJobs: [busy] })).actions.filter((a) => a.kind === 'scale-in')).toEqual([]);
  });

  it('replaces a silent machine at its group’s minimum (a dead agent would hold the minimum forever), but keeps an idle one there', () => {
    const g = aGroup({ desiredCapacity: 1, minSize: 1 });
    const silent = aNode('i-silent', { group: g, record: { lastHeartbeatAtMs: T0 - 5 * 60_000 } });
    const ins = plan(aSnapshot({ groups: [g], nodes: [silent] })).actions.filter(
      (a): a is Extract<PlanAction, { kind: 'scale-in' }> => a.kind === 'scale-in',
    );
    expect(ins.map((a) => a.instanceId)).toEqual(['i-silent']);
    expect(ins[0]!.reason.message).toMatch(/its group is at its minimum, so the group launches a machine in its place/);
    const idle = aNode('i-idle', { group: g, record: { idleSinceMs: T0 - 86_400_000 } });
    expect(plan(aSnapshot({ groups: [g], nodes: [idle] })).actions.filter((a) => a.kind === 'scale-in')).toEqual([]);
  });

  it('moves checkpointable work off an underused node when the saving beats the restart cost, and says so', () => {
    const g = aGroup({ instanceType: 'g5.12xlarge', desiredCapacity: 2 });
    const nodes = [aNode('i-busy', { group: g }), aNode('i-light', { group: g })];
    const cp = { intervalSec: 600 };
    const active = [
      running('team-a.b1', 'i-busy', { gpuIndices: [0, 1] }, { spec: { checkpoint: cp, expectedRuntimeSec: 48 * 3600 } }),
      running(
        'team-a.l1',
        'i-light',
        { gpuIndices: [0] },
        {
          spec: { checkpoint: cp, expectedRuntimeSec: 48 * 3600 },
          checkpoint: { jobId: 'team-a.l1', attempt: 1, location: 'x', completedAtMs: T0 - 60_000, progressSec: 3000 },
        },
      ),
    ];
    const p = plan(aSnapshot({ groups: [g], nodes, activeJobs: active }));
    expect(preempts(p)).toEqual([
      expect.objectContaining({ jobId: 'team-a.l1', reason: expect.objectContaining({ code: 'scale-in-consolidate' }) }),
    ]);
    expect(preempts(p)[0]!.reason.message).toMatch(/saves about \$[\d.]+ against \$[\d.]+ of restart cost/);
    // Work without checkpoints stays where it is.
    const noCp = active.map((j) => ({ ...j, spec: { ...j.spec, checkpoint: undefined } }));
    expect(preempts(plan(aSnapshot({ groups: [g], nodes, activeJobs: noCp })))).toEqual([]);
  });
});

// ---- properties ------------------------------------------------------------------------

const SHAPES = [
  { kind: 'whole', count: 1 },
  { kind: 'whole', count: 2 },
  { kind: 'whole', count: 4 },
  { kind: 'whole', count: 8 },
  { kind: 'fraction', milliGpu: 250, memoryMiB: 8000 },
  { kind: 'fraction', milliGpu: 600, memoryMiB: 12_000 },
  { kind: 'mig', profile: '1g.5gb' },
  { kind: 'mig', profile: '3g.20gb' },
  { kind: 'mig', profile: '2g.10gb' },
] as const;

const arbitraryWorld = fc
  .record({
    jobs: fc.array(
      fc.record({
        shape: fc.integer({ min: 0, max: SHAPES.length - 1 }),
        nodes: fc.constantFrom(1, 1, 1, 2),
        interruptible: fc.boolean(),
        priority: fc.integer({ min: 0, max: 3 }),
        team: fc.constantFrom('t1', 't2', 't3'),
      }),
      { maxLength: 30 },
    ),
    nodes: fc.array(
      fc.record({
        kind: fc.constantFrom('g5.12xlarge', 'p3.16xlarge', 'p4d.24xlarge', 'g5.xlarge'),
        spot: fc.boolean(),
        zone: fc.constantFrom('us-east-1a', 'us-east-1b'),
      }),
      { maxLength: 6 },
    ),
    max: fc.integer({ min: 0, max: 4 }),
    held: fc.constantFrom('t1', 'none'),
  })
  .map(({ jobs, nodes, max, held }) => {
    const groups = ['g5.12xlarge', 'p3.16xlarge', 'g5.xlarge'].flatMap((t) => [
      aGroup({ instanceType: t, maxSize: max, zones: ['us-east-1a', 'us-east-1b'] }),
      aGroup({ instanceType: t, capacityType: 'spot', maxSize: max, zones: ['us-east-1a', 'us-east-1b'] }),
    ]);
    const mig = { ...aGroup({ instanceType: 'p4d.24xlarge', maxSize: max, zones: ['us-east-1a'] }), id: 'a100-mig', migEnabled: true };
    groups.push(mig);
    const fleet = nodes.map((n, i) => {
      const group = groups.find(
        (g) =>
          g.offerings[0]!.instanceType === n.kind &&
          (n.kind === 'p4d.24xlarge' || g.offerings[0]!.capacityType === (n.spot ? 'spot' : 'on-demand')),
      )!;
      const it = INSTANCE_TYPES[n.kind]!;
      return aNode(`i-${i}`, {
        group,
        zone: n.zone,
        record: {
          gpus: Array.from({ length: it.gpuCount }, (_, index) => ({
            index,
            model: it.gpuModel,
            memoryMiB: it.gpuMemoryMiB,
            migEnabled: n.kind === 'p4d.24xlarge',
          })),
        },
      });
    });
    const pending = jobs.map((j, i) => {
      const shape = SHAPES[j.shape]!;
      return aJob({
        id: `${j.team}.j${i}`,
        team: j.team,
        spec: { gpu: { ...shape }, nodes: shape.kind === 'whole' ? j.nodes : 1, interruptible: j.interruptible, priority: j.priority },
      });
    });
    const teams = new Map(
      ['t1', 't2', 't3'].map((t) => [
        t,
        t === held ? aTeam(t, { budget: { amountMicroUsd: 1, period: 'monthly', action: 'hold', alertAtPct: [100] } }) : aTeam(t),
      ]),
    );
    const spend = new Map(held === 'none' ? [] : [[held, 10]]);
    return aSnapshot({ groups, nodes: fleet, pendingJobs: pending, teams, spendMicroUsd: spend, prices: undefined });
  });

/** Re-checks a plan's placements against the snapshot with an independent, simple accounting of every GPU. */
function overcommitted(snapshot: Snapshot, p: Plan): string | undefined {
  const use = new Map<string, { whole: number; milli: number; mem: number; mig: { profile: string; start: number }[] }>();
  const add = (nodeId: string, a: NodeAssignment) => {
    for (const gi of a.gpuIndices) {
      const k = `${nodeId}/${gi}`;
      const u = use.get(k) ?? { whole: 0, milli: 0, mem: 0, mig: [] };
      if (a.mig) u.mig.push({ profile: a.mig.profile, start: a.mig.startSlice });
      else if (a.share) {
        u.milli += a.share.milliGpu;
        u.mem += a.share.memoryMiB;
      } else u.whole++;
      use.set(k, u);
    }
  };
  for (const j of snapshot.activeJobs) j.placement?.nodes.forEach((a) => add(a.nodeId, a));
  for (const a of placements(p)) a.placement.nodes.forEach((n) => add(n.nodeId, n));
  for (const [k, u] of use) {
    const [nodeId, gi] = k.split('/');
    const node = snapshot.nodes.find((n) => n.instance.id === nodeId);
    if (!node) return `placement on unknown node ${nodeId}`;
    const gpu = node.record!.gpus[Number(gi)];
    if (!gpu) return `no GPU ${gi} on ${nodeId}`;
    const kinds = (u.whole > 0 ? 1 : 0) + (u.milli > 0 ? 1 : 0) + (u.mig.length > 0 ? 1 : 0);
    if (kinds > 1) return `${k} mixes whole, shared and MIG use`;
    if (u.whole > 1) return `${k} given whole to ${u.whole} jobs`;
    if (u.milli > 1000 || u.mem > gpu.memoryMiB) return `${k} shares over-committed (${u.milli} milli, ${u.mem} MiB)`;
    if (u.mig.length > 0) {
      if (!gpu.migEnabled) return `${k} MIG slice on a GPU not in MIG mode`;
      const problem = validateMigLayout(gpu.model, u.mig);
      if (problem) return `${k}: ${problem}`;
    }
    if ((u.whole > 0 || u.milli > 0) && gpu.migEnabled) return `${k} non-MIG work on a MIG GPU`;
  }
  return undefined;
}

describe('planner properties', () => {
  it('never puts two teams’ host-network work (gang ranks, service replicas) on one machine, unless the config pairs them', () => {
    /** Teams with work on the host's network per machine, after the plan: what ran there plus what it placed there. */
    const hostNetTeams = (s: Snapshot, p: Plan) => {
      const byNode = new Map<string, Set<string>>();
      const note = (job: { team: string; spec: { nodes: number; service?: unknown } }, nodeId: string) => {
        if (job.spec.nodes < 2 && !job.spec.service) return;
        byNode.set(nodeId, (byNode.get(nodeId) ?? new Set()).add(job.team));
      };
      for (const j of s.activeJobs) j.placement?.nodes.forEach((n) => note(j, n.nodeId));
      for (const a of placements(p))
        a.placement.nodes.forEach((n) =>
          note(
            s.pendingJobs.find((j) => j.id === a.jobId)!,
            n.nodeId,
          ),
        );
      return [...byNode.values()].map((teams) => [...teams].sort());
    };
    fc.assert(
      fc.property(arbitraryWorld, fc.boolean(), (s, paired) => {
        const world = paired ? { ...s, policy: { ...s.policy, hostNetworkSharing: [['t1', 't2'] as const] } } : s;
        for (const teams of hostNetTeams(world, plan(world)))
          if (paired) expect(teams.filter((t) => t !== 't1' && t !== 't2').length === 0 || teams.length === 1).toBe(true);
          else expect(teams).toHaveLength(1);
      }),
      { numRuns: 300 },
    );
  });

  it('never over-commits a GPU, a MIG slice or GPU memory', () => {
    fc.assert(
      fc.property(arbitraryWorld, (s) => {
        expect(overcommitted(s, plan(s))).toBeUndefined();
      }),
      { numRuns: 300 },
    );
  });

  it('keeps other work off the GPUs an attempt its job moved on from still holds, until its node reports it stopped or is fenced for certain', () => {
    const g = aGroup({ desiredCapacity: 2, maxSize: 2 });
    // The gang's attempt 1 ran on both machines' one GPU; it was requeued, and its agents have not yet stopped it.
    const gang = aJob({
      id: 'team-a.gang',
      spec: { nodes: 2, gpu: { kind: 'whole', count: 1 } },
      attempt: 2,
      heldAttempts: [
        {
          attempt: 1,
          nodes: ['i-1', 'i-2'].map((nodeId) => ({ nodeId, milliGpu: 1000, gpuIndices: [0] })),
          fromMs: T0 - 3_600_000,
          toMs: T0 - 60_000,
        },
      ],
    });
    const other = aJob({ id: 'team-a.other', spec: { gpu: { kind: 'whole', count: 1 } }, submittedAtMs: T0 - 600_000 });
    const nodes = (assigned: Record<string, number>, lastHeartbeatAtMs = T0) =>
      ['i-1', 'i-2'].map((id) => aNode(id, { group: g, record: { assigned, lastHeartbeatAtMs } }));
    const placed = (ns: ReturnType<typeof nodes>) =>
      placements(plan(aSnapshot({ groups: [g], nodes: ns, pendingJobs: [gang, other] })))
        .map((a) => a.jobId)
        .sort();
    // Their records still assign attempt 1: its processes may run there yet. Neither the gang nor anything else goes on those GPUs.
    expect(placed(nodes({ 'team-a.gang': 1 }))).toEqual([]);
    // Reported stopped (the agents unassigned it): the GPUs are free again (the older job goes first).
    expect(placed(nodes({}))).toEqual(['team-a.other']);
    // Silent past reconcile's patience (its lease has certainly lapsed: fenced, or stopped by the watchdog): free too.
    expect(placed(nodes({ 'team-a.gang': 1 }, T0 - 301_000))).toEqual(['team-a.other']);
  });

  it('places gangs all or nothing, in one zone', () => {
    fc.assert(
      fc.property(arbitraryWorld, (s) => {
        const p = plan(s);
        for (const a of placements(p)) {
          const job = s.pendingJobs.find((j) => j.id === a.jobId)!;
          expect(a.placement.nodes).toHaveLength(job.spec.nodes);
          expect(new Set(a.placement.nodes.map((n) => n.nodeId)).size).toBe(job.spec.nodes);
          const zones = new Set(a.placement.nodes.map((n) => s.nodes.find((x) => x.instance.id === n.nodeId)!.instance.zone));
          expect(zones.size).toBe(1);
        }
      }),
      { numRuns: 200 },
    );
  });

  it('gives the same plan for the same snapshot', () => {
    fc.assert(
      fc.property(arbitraryWorld, (s) => {
        expect(plan(s)).toEqual(plan(s));
      }),
      { numRuns: 100 },
    );
  });

  it('never puts non-interruptible work on spot, in placements or purchases', () => {
    fc.assert(
      fc.property(arbitraryWorld, (s) => {
        const p = plan(s);
        for (const a of placements(p)) {
          const job = s.pendingJobs.find((j) => j.id === a.jobId)!;
          if (!job.spec.interruptible) expect(a.placement.capacityType).toBe('on-demand');
        }
        // Purchases: the same world with only its non-interruptible work buys no spot capacity at all.
        const steady = {
          ...s,
          pendingJobs: s.pendingJobs.filter((j) => !j.spec.interruptible),
          activeJobs: s.activeJobs.filter((j) => !j.spec.interruptible),
        };
        expect(
          scaleUps(plan(steady)).filter((a) => s.groups.find((g) => g.id === a.groupId)!.offerings.some((o) => o.capacityType === 'spot')),
        ).toEqual([]);
      }),
      { numRuns: 200 },
    );
  });

  it('gives a held team no new placement and no purchase', () => {
    fc.assert(
      fc.property(arbitraryWorld, (s) => {
        const p = plan(s);
        const heldTeams = [...s.teams.values()]
          .filter((t) => (s.spendMicroUsd.get(t.id) ?? 0) >= (t.budget?.amountMicroUsd ?? 0) && t.budget?.action === 'hold')
          .map((t) => t.id);
        for (const a of placements(p)) expect(heldTeams).not.toContain(a.jobId.split('.')[0]);
        for (const w of p.waiting) if (heldTeams.includes(w.jobId.split('.')[0]!)) expect(w.reason.code).toBe('budget-hold');
        // No purchase: the held teams' waiting jobs buy nothing; the plan scales as if they were not there.
        const without = { ...s, pendingJobs: s.pendingJobs.filter((j) => !heldTeams.includes(j.team)) };
        const buys = (x: typeof p) => scaleUps(x).map((a) => [a.groupId, a.toDesired]);
        expect(buys(p)).toEqual(buys(plan(without)));
      }),
      { numRuns: 200 },
    );
  });

  it('never takes a group above its maximum, and leaves no job without a reason', () => {
    fc.assert(
      fc.property(arbitraryWorld, (s) => {
        const p = plan(s);
        for (const a of scaleUps(p)) expect(a.toDesired).toBeLessThanOrEqual(s.groups.find((g) => g.id === a.groupId)!.maxSize);
        const accounted = new Set([...placements(p).map((a) => a.jobId), ...p.waiting.map((w) => w.jobId)]);
        for (const j of s.pendingJobs) expect(accounted.has(j.id)).toBe(true);
        for (const w of p.waiting) expect(w.reason.message.length).toBeGreaterThan(10);
      }),
      { numRuns: 200 },
    );
  });
});
