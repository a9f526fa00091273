import { describe, expect, it } from 'vitest';
import type { Job } from '../../core/job.ts';
import { gangRank, judgeWorkEntry } from '../../core/services/node-rules.ts';
import { aJob } from '../builders.ts';

const placedOn = (nodes: string[], extra: Partial<Job> = {}): Job =>
  aJob({
    state: 'running',
    attempt: 2,
    placement: { capacityType: 'spot', nodes: nodes.map((nodeId) => ({ nodeId, gpuIndices: [0] })) },
    ...extra,
  });

describe('a node agent judging its work list', () => {
  it('runs the attempt placed on this node, in every active state', () => {
    for (const state of ['placed', 'running', 'checkpointing'] as const) {
      expect(judgeWorkEntry(placedOn(['i-1'], { state }), 'i-1', 2)).toBe('run');
    }
  });

  it('drops entries for jobs that moved on: gone, finished, newer attempt, or placed elsewhere', () => {
    expect(judgeWorkEntry(undefined, 'i-1', 1)).toBe('stale');
    expect(judgeWorkEntry(placedOn(['i-1'], { state: 'succeeded' }), 'i-1', 2)).toBe('stale');
    expect(judgeWorkEntry(placedOn(['i-1'], { attempt: 3 }), 'i-1', 2)).toBe('stale');
    expect(judgeWorkEntry(placedOn(['i-2']), 'i-1', 2)).toBe('stale');
    expect(judgeWorkEntry(aJob({ state: 'cancelled', attempt: 2 }), 'i-1', 2)).toBe('stale');
  });

  it('waits while the placement has not landed: the entry is written before the job is placed', () => {
    expect(judgeWorkEntry(aJob({ state: 'pending', attempt: 2 }), 'i-1', 2)).toBe('wait');
    expect(judgeWorkEntry(placedOn(['i-1'], { attempt: 1 }), 'i-1', 2)).toBe('wait');
  });

  it('gives each node of a gang its rank; the first node leads', () => {
    const job = placedOn(['i-1', 'i-2', 'i-3']);
    expect(gangRank(job, 'i-1')).toEqual({ rank: 0, size: 3 });
    expect(gangRank(job, 'i-3')).toEqual({ rank: 2, size: 3 });
    expect(gangRank(job, 'i-9')).toBeUndefined();
  });
});
