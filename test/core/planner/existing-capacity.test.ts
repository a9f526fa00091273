import { describe, expect, it } from 'vitest';
import { useExistingCapacity } from '../../../core/planner/existing-capacity.ts';
import { aGroup, aJob, aNode, aTeam } from '../../builders.ts';
import { classified, freeWhole, kinds, running } from './support.ts';

describe('planner phase: existing capacity', () => {
  it('gives each job free capacity of its cheapest kind first, so dearer GPUs stay for the work that needs them', () => {
    const a10 = aGroup({ instanceType: 'g5.12xlarge' });
    const v100 = aGroup({ instanceType: 'p3.2xlarge' });
    const nodes = [aNode('i-a10', { group: a10 }), aNode('i-v100', { group: v100 })];
    // By best fit alone the any-model job, served first, would take the full-fitting V100 machine and
    // leave the V100 job to buy one; its cheapest kind per GPU is the A10 machine, so it goes there.
    const anyModel = aJob({ id: 'team-a.any', queuedAtMs: 0 });
    const needsV100 = aJob({ id: 'team-a.v100', queuedAtMs: 1, spec: { gpu: { kind: 'whole', count: 1, models: ['V100'] } } });
    const { st, entries } = classified({ groups: [a10, v100], nodes, pendingJobs: [anyModel, needsV100] });
    expect(entries.map((e) => e.job.id)).toEqual(['team-a.any', 'team-a.v100']);
    expect(useExistingCapacity(st, entries)).toEqual([]);
    const placed = st.actions.flatMap((a) => (a.kind === 'place' ? [[a.jobId, a.placement.nodes[0]!.nodeId]] : []));
    expect(placed).toEqual([
      ['team-a.any', 'i-a10'],
      ['team-a.v100', 'i-v100'],
    ]);
  });

  it("gives room that is nobody's cheapest kind to the work dearest per GPU to buy for, not per job", () => {
    // The live V100 machine has 2 GPUs free and is no job's cheapest kind. The 2-GPU job would cost
    // $2.84/h to buy for ($1.42 per GPU on a g5.12xlarge), each 1-GPU job $2.75/h (an A100 of a
    // p4d). Per job the 2-GPU job is dearer, and taking the room it would leave both 1-GPU jobs to
    // open a $21.96/h p4d; per GPU the 1-GPU jobs are dearer, and the 2-GPU job opens a $5.67/h machine.
    const a10 = aGroup({ instanceType: 'g5.12xlarge' });
    const a100 = aGroup({ instanceType: 'p4d.24xlarge' });
    const v100 = aGroup({ instanceType: 'p3.16xlarge', maxSize: 1, desiredCapacity: 1 });
    const busy = running(
      'team-b.busy',
      'i-v100',
      { gpuIndices: [0, 1, 2, 3, 4, 5] },
      { team: 'team-b', spec: { gpu: { kind: 'whole', count: 6 } } },
    );
    const twoGpus = aJob({ id: 'team-a.two', queuedAtMs: 0, spec: { gpu: { kind: 'whole', count: 2 } } });
    const oneGpu = (id: string) =>
      aJob({ id, queuedAtMs: 1, spec: { gpu: { kind: 'whole', count: 1, models: ['V100', 'A100-40GB', 'A100-80GB'] } } });
    const { st, entries } = classified({
      groups: [a10, a100, v100],
      nodes: [aNode('i-v100', { group: v100 })],
      activeJobs: [busy],
      pendingJobs: [twoGpus, oneGpu('team-a.one-1'), oneGpu('team-a.one-2')],
    });
    expect(useExistingCapacity(st, entries).map((e) => e.job.id)).toEqual(['team-a.two']);
    const placed = st.actions.flatMap((a) => (a.kind === 'place' ? [[a.jobId, a.placement.nodes[0]!.nodeId]] : []));
    expect(placed).toEqual([
      ['team-a.one-1', 'i-v100'],
      ['team-a.one-2', 'i-v100'],
    ]);
  });

  it('parks jobs on booting machines instead of returning them to be bought for, and returns the rest in planning order', () => {
    const g = aGroup({ instanceType: 'g5.12xlarge', desiredCapacity: 1 });
    const jobs = [1, 2, 3].map((i) => aJob({ id: `team-a.${i}`, queuedAtMs: i, spec: { gpu: { kind: 'whole', count: 2 } } }));
    const { st, entries } = classified({ groups: [g], pendingJobs: jobs });
    const toBuy = useExistingCapacity(st, entries);
    expect(toBuy.map((e) => e.job.id)).toEqual(['team-a.3']);
    expect(st.waiting.map((w) => [w.jobId, w.reason.code])).toEqual([
      ['team-a.1', 'waiting-for-boot'],
      ['team-a.2', 'waiting-for-boot'],
    ]);
    expect(freeWhole(st.booting.allNodes())).toEqual({ [`inflight:${g.id}:0`]: 0 });
    expect(kinds(st.actions)).toEqual([]); // a wait on a booting machine is not an action
  });

  it('holds a job its team may not have, and neither places it nor returns it to buy for', () => {
    const g = aGroup({ instanceType: 'g5.12xlarge' });
    const teams = new Map([['team-a', aTeam('team-a', { maxGpus: 1 })]]);
    const { st, entries } = classified({
      groups: [g],
      nodes: [aNode('i-1', { group: g })],
      teams,
      pendingJobs: [aJob({ spec: { gpu: { kind: 'whole', count: 2 } } })],
    });
    expect(useExistingCapacity(st, entries)).toEqual([]);
    expect(kinds(st.actions)).toEqual(['hold']);
    expect(freeWhole(st.ready.allNodes())).toEqual({ 'i-1': 4 });
  });
});

describe('the cadence a placement asks of a checkpointing job (core/save-price.ts)', () => {
  const checkpointing = (id: string) =>
    aJob({ id, spec: { gpu: { kind: 'whole', count: 8 }, checkpoint: { signal: 'SIGUSR1', intervalSec: 3600, gracePeriodSec: 60 } } });

  it('asks for saves more often on a spot pool that takes machines back often, with the rate and the save price that decided it', () => {
    const spot = aGroup({ instanceType: 'p4d.24xlarge', capacityType: 'spot' });
    const od = aGroup({ instanceType: 'p4d.24xlarge', capacityType: 'on-demand' });
    const pool = spot.offerings[0]!.id;
    const { st, entries } = classified({
      groups: [spot, od],
      nodes: [aNode('i-spot', { group: spot }), aNode('i-od', { group: od })],
      pendingJobs: [checkpointing('team-a.on-spot')],
      poolRiskPerHour: new Map([[pool, 1]]),
    });
    useExistingCapacity(st, entries);
    const placed = st.actions.find((a) => a.kind === 'place');
    expect(placed?.kind === 'place' && placed.placement.nodes[0]!.nodeId).toBe('i-spot');
    const saves = placed?.kind === 'place' ? placed.placement.saves : undefined;
    expect(saves).toMatchObject({ by: 'price', hazardPerHour: 1 });
    expect(saves!.everySec).toBeLessThan(3600);
    expect(saves!.savePriceMicroUsd).toBeGreaterThan(0);
  });

  it('keeps the job’s own interval on on-demand capacity, and sets none for a job that does not checkpoint', () => {
    const od = aGroup({ instanceType: 'p4d.24xlarge' });
    const { st, entries } = classified({
      groups: [od],
      nodes: [aNode('i-od', { group: od }), aNode('i-od2', { group: od })],
      pendingJobs: [checkpointing('team-a.saves'), aJob({ id: 'team-a.plain', spec: { gpu: { kind: 'whole', count: 8 } } })],
    });
    useExistingCapacity(st, entries);
    const byJob = new Map(st.actions.flatMap((a) => (a.kind === 'place' ? [[a.jobId, a.placement.saves]] : [])));
    expect(byJob.get('team-a.saves')).toMatchObject({ everySec: 3600, by: 'longest', hazardPerHour: 0 });
    expect(byJob.has('team-a.plain')).toBe(true);
    expect(byJob.get('team-a.plain')).toBeUndefined();
  });
});
