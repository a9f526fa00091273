import { describe, expect, it } from 'vitest';
import type { PlanAction } from '../../../core/plan.ts';
import { landMovesToSpot, prepareMovesToSpot } from '../../../core/planner/back-to-spot.ts';
import { consolidate } from '../../../core/planner/consolidation.ts';
import { deadlineMoves } from '../../../core/planner/deadline-moves.ts';
import { scaleIn } from '../../../core/planner/scale-in.ts';
import { wait } from '../../../core/planner/state.ts';
import { aGroup, aJob, aNode, T0 } from '../../builders.ts';
import { classified, freeWhole, running } from './support.ts';

const ids = (actions: readonly PlanAction[]) =>
  actions.map((a) =>
    a.kind === 'scale-in' ? `${a.instanceId}:${a.reason.code}` : a.kind === 'preempt' ? `${a.jobId}:${a.reason.code}` : a.kind,
  );

describe('planner phase: disruption steps', () => {
  it('scale-in: empty past the cool-down oldest first, draining with no work at once, never below the minimum; it only returns actions', () => {
    const g = aGroup({ desiredCapacity: 4, minSize: 2 });
    const nodes = [
      aNode('i-new-idle', { group: g, record: { idleSinceMs: T0 - 60_000 } }),
      aNode('i-old-idle', { group: g, record: { idleSinceMs: T0 - 3_600_000 } }),
      aNode('i-older-idle', { group: g, record: { idleSinceMs: T0 - 7_200_000 } }),
      aNode('i-drained', { group: g, record: { draining: { sinceMs: T0, reason: 'rebalance', deadlineMs: T0 + 120_000 } } }),
    ];
    const { st } = classified({ groups: [g], nodes });
    const actions = scaleIn(st);
    // Two may go (4 − minimum 2): the draining machine first, then the longest idle.
    expect(ids(actions)).toEqual(['i-drained:scale-in-idle', 'i-older-idle:scale-in-idle']);
    expect(st.actions).toEqual([]);
  });

  it('consolidation: one underused machine per plan, and none while work waits for capacity', () => {
    const g = aGroup({ instanceType: 'g5.12xlarge', desiredCapacity: 2 });
    const nodes = [aNode('i-busy', { group: g }), aNode('i-light', { group: g })];
    const cp = { intervalSec: 600 };
    const long = { checkpoint: cp, expectedRuntimeSec: 48 * 3600 };
    const active = [
      running('team-a.b1', 'i-busy', { gpuIndices: [0, 1] }, { spec: long }),
      running(
        'team-a.l1',
        'i-light',
        { gpuIndices: [0] },
        {
          spec: long,
          checkpoint: { jobId: 'team-a.l1', attempt: 1, location: 'x', completedAtMs: T0 - 60_000, progressSec: 3000 },
        },
      ),
    ];
    const { st } = classified({ groups: [g], nodes, activeJobs: active });
    expect(ids(consolidate(st, new Set()))).toEqual(['team-a.l1:scale-in-consolidate']);
    // i-busy is underused too (2 of 4 GPUs) but waits for another plan; the step wrote nothing itself.
    expect(st.actions).toEqual([]);
    wait(st, aJob({ id: 'team-a.waiting' }), { code: 'waiting-for-capacity', message: 'x' });
    expect(consolidate(st, new Set())).toEqual([]);
  });

  it('back to spot: lands moves on free room of ready spot machines, biggest saving first, at most the policy number per plan', () => {
    const spot = aGroup({ instanceType: 'g5.12xlarge', capacityType: 'spot', desiredCapacity: 1 });
    const od = aGroup({ instanceType: 'g5.12xlarge', desiredCapacity: 2 });
    const onOd = (id: string, nodeId: string, hours: number) =>
      running(
        id,
        nodeId,
        { gpuIndices: [0, 1, 2, 3] },
        {
          spec: { gpu: { kind: 'whole', count: 4 }, checkpoint: { intervalSec: 600 }, expectedRuntimeSec: hours * 3600 },
        },
      );
    const { st } = classified({
      groups: [spot, od],
      nodes: [aNode('i-od1', { group: od }), aNode('i-od2', { group: od }), aNode('i-spot', { group: spot })],
      activeJobs: [onOd('team-a.short', 'i-od1', 12), onOd('team-a.long', 'i-od2', 48)],
      policy: { moveToSpotPerPlan: 1 },
    });
    const { actions, left } = landMovesToSpot(st, new Set());
    expect(ids(actions)).toEqual(['team-a.long:rebalance-to-spot']);
    expect(actions[0]!.kind === 'preempt' && actions[0]!.reason.message).toMatch(/to spot \(g5\.12xlarge/);
    // The spot machine's room is taken by the move; the other job is left for a machine of its own.
    expect(freeWhole(st.ready.allNodes().filter((n) => n.id === 'i-spot'))).toEqual({ 'i-spot': 0 });
    expect(left.map((c) => c.entry.job.id)).toEqual(['team-a.short']);
    prepareMovesToSpot(st, left);
    expect(st.groups.get(spot.id)!.added).toHaveLength(1);
    expect(st.groups.get(od.id)!.added).toHaveLength(0);
  });

  it('deadline moves: work on spot whose slack ran out goes to on-demand once, a gang too; work without checkpoints stays', () => {
    const spot = aGroup({ instanceType: 'g5.12xlarge', capacityType: 'spot', desiredCapacity: 3 });
    const od = aGroup({ instanceType: 'g5.12xlarge' });
    // 4 h of work left (5 h expected, 1 h run) and 4 h 35 min to the deadline: the policy's 30 min margin leaves 5 min.
    const deadline = new Date(T0 + 4 * 3600_000 + 35 * 60_000).toISOString();
    const spec = {
      deadline,
      checkpoint: { intervalSec: 600 },
      expectedRuntimeSec: 4 * 3600 + 3600,
      gpu: { kind: 'whole' as const, count: 4 },
    };
    const gang = aJob({
      id: 'team-a.gang',
      state: 'running',
      startedAtMs: T0 - 3_600_000,
      spec: { ...spec, nodes: 2 },
      placement: {
        nodes: [
          { nodeId: 'i-1', gpuIndices: [0, 1, 2, 3] },
          { nodeId: 'i-2', gpuIndices: [0, 1, 2, 3] },
        ],
        capacityType: 'spot',
      },
    });
    const noCp = running('team-a.nocp', 'i-3', { gpuIndices: [0, 1, 2, 3] }, { spec: { ...spec, checkpoint: undefined } });
    const { st } = classified({
      groups: [spot, od],
      nodes: ['i-1', 'i-2', 'i-3'].map((id) => aNode(id, { group: spot })),
      activeJobs: [gang, noCp],
    });
    expect(ids(deadlineMoves(st))).toEqual(['team-a.gang:deadline-on-demand']);
  });
});
