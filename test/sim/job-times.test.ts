import { describe, expect, it } from 'vitest';
import { transition, type Job } from '../../core/job.ts';
import { reason } from '../../core/reason.ts';
import { jobTimes, slowdown, spread, withSlowdowns } from '../../cloud/sim/job-times.ts';
import type { SimulationSummary } from '../../cloud/sim/simulation.ts';
import { aJob, T0 } from '../builders.ts';

const MIN = 60_000;
const placement = { nodes: [{ nodeId: 'i-1', gpuIndices: [0] }], capacityType: 'spot' as const };

/** Runs a job through the real transitions: each step is [event, minutes after submission]. */
function lived(id: string, steps: readonly (readonly ['place' | 'start' | 'requeue' | 'succeed', number])[]): Job {
  let job = aJob({ id, submittedAtMs: T0, queuedAtMs: T0 });
  for (const [type, min] of steps) {
    const at = T0 + min * MIN;
    const event =
      type === 'place'
        ? ({ type, attempt: job.attempt, placement } as const)
        : type === 'requeue'
          ? ({ type, attempt: job.attempt, reason: reason('interrupted', 'the spot machine was taken back') } as const)
          : ({ type, attempt: job.attempt } as const);
    const r = transition(job, event, at);
    if (!r.ok) throw new Error(r.error);
    job = r.job;
  }
  return job;
}

describe('job times: what the people who submit jobs feel', () => {
  // Waits 10 min, runs 50, is interrupted, waits 30 min, runs 20 and finishes at 110 min.
  const churned = lived('team-a.churned', [
    ['place', 10],
    ['start', 11],
    ['requeue', 60],
    ['place', 90],
    ['start', 91],
    ['succeed', 110],
  ]);
  const calm = lived('team-a.calm', [
    ['place', 2],
    ['start', 3],
    ['succeed', 60],
  ]);
  const neverRan = aJob({ id: 'team-a.waiting', submittedAtMs: T0, queuedAtMs: T0 });

  it('counts the first wait to the first start and the total wait over every attempt, the current one included', () => {
    const t = jobTimes([churned, calm, neverRan], T0 + 120 * MIN);
    expect(t.firstWaitSec).toEqual(spread([11 * 60, 3 * 60, 120 * 60]));
    // Pending (to each placement; the boots are not waits): churned 10 + 30, calm 2, the job that never ran 120 so far.
    expect(t.totalWaitSec.max).toBe(120 * 60);
    expect(t.totalWaitSec.p50).toBe(40 * 60);
    // Attempts over the jobs that started: 2 and 1.
    expect(t.attempts).toEqual({ p50: 1, p95: 2, p99: 2, max: 2 });
  });

  it('puts each finished job beside the same job under the baseline, over jobs done under both', () => {
    const fast = lived('team-a.churned', [
      ['place', 1],
      ['start', 2],
      ['succeed', 55],
    ]);
    const s = slowdown([churned, calm, neverRan], [fast, calm])!;
    expect(s.jobs).toBe(2);
    expect(s.mean).toBeCloseTo((110 / 55 + 1) / 2, 9);
    expect(s.p99).toBeCloseTo(2, 9);
    expect(slowdown([neverRan], [fast])).toBeUndefined();
  });

  it('gives every policy but the on-demand one its slowdown against the on-demand run', () => {
    const run = (policy: string, jobs: Job[]) => ({ summary: { policy } as SimulationSummary, jobs });
    const [main, od] = withSlowdowns([run('gpu-fleet', [churned]), run('on-demand', [calm, { ...churned, endedAtMs: T0 + 55 * MIN }])]);
    expect(main!.summary.slowdownVsOnDemand?.mean).toBeCloseTo(2, 9);
    expect(od!.summary.slowdownVsOnDemand).toBeUndefined();
  });
});
