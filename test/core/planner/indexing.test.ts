import { describe, expect, it } from 'vitest';
import { planBaseline } from '../../../core/planner/baseline.ts';
import { commitPlacement } from '../../../core/planner/indexing.ts';
import { plan } from '../../../core/planner/planner.ts';
import { aGroup, aJob, aNode, anOffering, aSnapshot, T0 } from '../../builders.ts';
import { freeWhole, indexed, running } from './support.ts';

describe('planner phase: indexing', () => {
  it('files ready, booting and neither machines, with the room running work holds, and emits nothing', () => {
    const g = aGroup({ instanceType: 'g5.12xlarge', desiredCapacity: 5 });
    const nodes = [
      aNode('i-ready', { group: g }),
      aNode('i-pending', { group: g, state: 'pending', record: null }),
      aNode('i-unregistered', { group: g, record: null }),
      aNode('i-sick', { group: g, record: { healthy: false }, schedulable: false }),
      aNode('i-draining', { group: g, record: { draining: { sinceMs: T0, reason: 'spot interruption', deadlineMs: T0 + 120_000 } } }),
    ];
    const job = running('team-a.r', 'i-ready', { gpuIndices: [0, 1] }, { spec: { gpu: { kind: 'whole', count: 2 } } });
    const st = indexed({ groups: [g], nodes, activeJobs: [job] });
    expect(freeWhole(st.ready.allNodes())).toEqual({ 'i-ready': 2 });
    expect(freeWhole(st.booting.allNodes())).toEqual({ 'i-pending': 4, 'i-unregistered': 4 });
    // The unhealthy machine is known (its work is held) but takes no work and is not counted on.
    expect(st.nodeById.has('i-sick')).toBe(true);
    expect(st.nodeById.has('i-draining')).toBe(false);
    expect(st.liveByGroup.get(g.id)).toBe(5);
    expect(st.holders.get('i-ready')!.map((h) => h.job.id)).toEqual(['team-a.r']);
    expect(st.teamUsedMilli.get('team-a')).toBe(2000);
    expect(st.actions).toEqual([]);
  });

  it('counts launches in flight as booting machines of the cheapest offering of the group', () => {
    const g = aGroup({
      id: 'mixed',
      offerings: [anOffering('g5.12xlarge', 'spot'), anOffering('g5.xlarge', 'spot')],
      desiredCapacity: 3,
    });
    const st = indexed({ groups: [g], nodes: [aNode('i-1', { group: g, instanceType: 'g5.xlarge', capacityType: 'spot' })] });
    const inFlight = st.booting.allNodes();
    expect(inFlight.map((n) => [n.id, n.instanceType])).toEqual([
      ['inflight:mixed:0', 'g5.xlarge'],
      ['inflight:mixed:1', 'g5.xlarge'],
    ]);
  });

  it('lists a live machine whose offering left every group, as capacity that cannot be bought', () => {
    const g = aGroup({ instanceType: 'g5.xlarge' });
    const st = indexed({ groups: [g], nodes: [aNode('i-old', { instanceType: 'g5.12xlarge' })] });
    expect(st.allOfferings.map((o) => [o.offering.instanceType, o.groups.length])).toEqual([
      ['g5.12xlarge', 0],
      ['g5.xlarge', 1],
    ]);
  });

  it('commitPlacement takes the room, re-files the machine and records a holder only when there is one', () => {
    const g = aGroup({ instanceType: 'g5.12xlarge' });
    const st = indexed({ groups: [g], nodes: [aNode('i-1', { group: g }), aNode('i-2', { group: g })] });
    const [n1, n2] = [st.nodeById.get('i-1')!, st.nodeById.get('i-2')!];
    const job = running('team-a.x', 'i-1', { gpuIndices: [0, 1, 2] });
    commitPlacement(st, [{ node: n1, assignment: { nodeId: 'i-1', gpuIndices: [0, 1, 2] } }], job);
    commitPlacement(st, [{ node: n2, assignment: { nodeId: 'i-2', gpuIndices: [0] } }], undefined);
    expect(freeWhole(st.ready.allNodes())).toEqual({ 'i-1': 1, 'i-2': 3 });
    // The index now finds i-1 as the fullest machine with a free GPU.
    expect(st.ready.pool(n1.poolKey)!.fullestWithFree(1)?.id).toBe('i-1');
    expect(st.holders.get('i-1')!.map((h) => h.job.id)).toEqual(['team-a.x']);
    expect(st.holders.has('i-2')).toBe(false);
  });
});

describe('a machine whose stored GPU report cannot be read', () => {
  it('is left out of the plan and named in it; the rest of the fleet is planned (issue 63: one bad record stopped every plan)', () => {
    const g = aGroup({ instanceType: 'g5.12xlarge' });
    const mig = { ...aGroup({ instanceType: 'p4d.24xlarge' }), id: 'a100-mig', migEnabled: true };
    const bad = aNode('i-bad', { group: mig });
    // A MIG machine's report with `migDevices: 7`, as a malformed register stored it.
    const gpus = [{ index: 0, model: 'A100-40GB', memoryMiB: 40_960, migEnabled: true, migDevices: 7 }] as never;
    const broken = { ...bad, record: { ...bad.record!, gpus } };
    const s = aSnapshot({ groups: [g, mig], nodes: [broken, aNode('i-good', { group: g })], pendingJobs: [aJob({ id: 'team-a.j' })] });
    const p = plan(s);
    expect(p.unreadableNodes).toEqual([{ nodeId: 'i-bad', problem: expect.stringMatching(/^gpus\[0\]\.migDevices: /) }]);
    expect(p.actions).toContainEqual(
      expect.objectContaining({
        kind: 'place',
        jobId: 'team-a.j',
        placement: expect.objectContaining({ nodes: [expect.objectContaining({ nodeId: 'i-good' })] }),
      }),
    );
    expect(planBaseline(s).actions.some((a) => a.kind === 'place' && a.placement.nodes[0]!.nodeId === 'i-bad')).toBe(false);
  });
});
