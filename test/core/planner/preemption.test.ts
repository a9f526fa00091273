import { describe, expect, it } from 'vitest';
import { useExistingCapacity } from '../../../core/planner/existing-capacity.ts';
import { buyNewCapacity } from '../../../core/planner/new-capacity.ts';
import { preemptForStuck } from '../../../core/planner/preemption.ts';
import { aGroup, aJob, aNode, T0 } from '../../builders.ts';
import { classified, freeWhole, running } from './support.ts';

function preemptFor(over: Parameters<typeof classified>[0]) {
  const { st, entries } = classified(over);
  const stuck = buyNewCapacity(st, useExistingCapacity(st, entries));
  preemptForStuck(st, stuck);
  return { st, preempts: st.actions.flatMap((a) => (a.kind === 'preempt' ? [a] : [])) };
}

describe('planner phase: preemption', () => {
  const g = aGroup({ instanceType: 'g5.12xlarge', maxSize: 1, desiredCapacity: 1 });
  const node = aNode('i-1', { group: g });
  const cp = (id: string, agoMs: number) => ({
    spec: { priority: 10, checkpoint: { intervalSec: 600 } },
    checkpoint: { jobId: id, attempt: 1, location: 'x', completedAtMs: T0 - agoMs, progressSec: 100 },
  });

  it('takes the fewest victims, then the least work lost, and reserves the room they free', () => {
    const active = [
      running('team-a.recent', 'i-1', { gpuIndices: [0] }, cp('team-a.recent', 60_000)),
      running('team-a.stale', 'i-1', { gpuIndices: [1] }, cp('team-a.stale', 3_000_000)),
      running('team-a.pair', 'i-1', { gpuIndices: [2, 3] }, { spec: { priority: 10, gpu: { kind: 'whole', count: 2 } } }),
    ];
    const urgent = aJob({ id: 'team-a.urgent', spec: { priority: 900 } });
    const { st, preempts } = preemptFor({ groups: [g], nodes: [node], activeJobs: active, pendingJobs: [urgent] });
    expect(preempts.map((a) => [a.jobId, a.reason.code])).toEqual([['team-a.recent', 'preempt-for-priority']]);
    expect(st.preempted.has('team-a.recent')).toBe(true);
    // The freed GPU is taken for the urgent job: the machine shows no free GPU to later jobs of this plan.
    expect(freeWhole(st.ready.allNodes())).toEqual({ 'i-1': 0 });
    expect(st.waiting.find((w) => w.jobId === 'team-a.urgent')!.reason.message).toContain('1 lower-priority job(s) are being checkpointed');
  });

  it('never takes work of equal or higher priority, nor work that cannot be interrupted', () => {
    const active = [
      running('team-a.equal', 'i-1', { gpuIndices: [0, 1] }, { spec: { priority: 900, gpu: { kind: 'whole', count: 2 } } }),
      running(
        'team-a.pinned',
        'i-1',
        { gpuIndices: [2, 3] },
        { spec: { priority: 1, interruptible: false, gpu: { kind: 'whole', count: 2 } } },
      ),
    ];
    const { st, preempts } = preemptFor({
      groups: [g],
      nodes: [node],
      activeJobs: active,
      pendingJobs: [aJob({ id: 'team-a.new', spec: { priority: 900 } })],
    });
    expect(preempts).toEqual([]);
    expect(st.waiting.map((w) => w.reason.code)).toEqual(['group-at-max']);
    // The miss is remembered for the class: a second job like it is not searched again.
    expect(st.noPreemptRoom.size).toBe(1);
  });
});
