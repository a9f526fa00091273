import { describe, expect, it } from 'vitest';
import { finishCancel, jobIdFor, requeueCounts, transition, type Job, type JobEvent } from '../../core/job.ts';
import { reason } from '../../core/reason.ts';
import { aJob, T0 } from '../builders.ts';

const placement = { nodes: [{ nodeId: 'i-1', gpuIndices: [0] }], capacityType: 'spot' as const };
const lost = reason('node-lost', 'machine went away');

function apply(job: Job, ...events: JobEvent[]): Job {
  return events.reduce((j, e, i) => {
    const r = transition(j, e, T0 + (i + 1) * 1000);
    if (!r.ok) throw new Error(r.error);
    return r.job;
  }, job);
}

describe('job state machine', () => {
  it('runs pending → placed → running → succeeded, bumping the version each time', () => {
    const job = apply(aJob(), { type: 'place', attempt: 1, placement }, { type: 'start', attempt: 1 }, { type: 'succeed', attempt: 1 });
    expect(job).toMatchObject({ state: 'succeeded', version: 4, exitCode: 0, attempt: 1, firstStartedAtMs: T0 + 2000 });
    expect(job.waitedMs).toBe(1000);
  });

  it('requeues an interrupted attempt as a new attempt that keeps its priority and checkpoint', () => {
    const cp = { jobId: 'team-a.job-1', attempt: 1, location: 's3://b/k/', completedAtMs: T0 + 1500, progressSec: 600 };
    const job = apply(
      aJob({ spec: { priority: 700 } }),
      { type: 'place', attempt: 1, placement },
      { type: 'start', attempt: 1 },
      { type: 'checkpoint-done', checkpoint: cp },
      { type: 'requeue', attempt: 1, reason: lost },
    );
    expect(job).toMatchObject({ state: 'pending', attempt: 2, interruptions: 1, checkpoint: cp, requeueReason: lost });
    expect(job.spec.priority).toBe(700);
    expect(job.placement).toBeUndefined();
  });

  it('counts the moves gpu-fleet decided apart from interruptions, and each once', () => {
    const run = (j: Job, attempt: number, why: ReturnType<typeof reason>) =>
      apply(j, { type: 'place', attempt, placement }, { type: 'start', attempt }, { type: 'requeue', attempt, reason: why });
    let job = run(aJob(), 1, reason('rebalance-to-spot', 'moved to spot'));
    job = run(job, 2, lost);
    job = run(job, 3, reason('interrupted', 'spot warning'));
    job = run(job, 4, reason('scale-in-consolidate', 'moved off an underused node'));
    expect(requeueCounts(job)).toEqual({ requeues: 4, interruptions: 2, moves: 2 });
    // A repeated requeue of an attempt that is over changes nothing, the counts included.
    expect(transition(job, { type: 'requeue', attempt: 4, reason: reason('rebalance-to-spot', 'again') }, T0 + 99_000)).toMatchObject({
      changed: false,
    });
    // A record written before moves were counted reads as all interruptions.
    expect(requeueCounts({ interruptions: 3 })).toEqual({ requeues: 3, interruptions: 3, moves: 0 });
  });

  it('ignores a repeated or late requeue for an attempt that is already over', () => {
    const once = apply(
      aJob(),
      { type: 'place', attempt: 1, placement },
      { type: 'start', attempt: 1 },
      { type: 'requeue', attempt: 1, reason: lost },
    );
    const again = transition(once, { type: 'requeue', attempt: 1, reason: lost }, T0 + 10_000);
    expect(again).toEqual({ ok: true, job: once, changed: false });
    const lateStart = transition(once, { type: 'start', attempt: 1 }, T0 + 10_000);
    expect(lateStart).toEqual({ ok: true, job: once, changed: false });
  });

  it('never lets a finished job run again', () => {
    const done = apply(aJob(), { type: 'place', attempt: 1, placement }, { type: 'start', attempt: 1 }, { type: 'succeed', attempt: 1 });
    for (const e of [
      { type: 'place', attempt: 1, placement },
      { type: 'requeue', attempt: 1, reason: lost },
      { type: 'cancel' },
    ] as JobEvent[]) {
      expect(transition(done, e, T0 + 99_000)).toMatchObject({ ok: true, changed: false });
    }
  });

  it('refuses events that make no sense in the current state', () => {
    const r = transition(aJob(), { type: 'succeed', attempt: 1 }, T0);
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.error).toContain('"succeed" is allowed only when placed or running or checkpointing');
  });

  it('keeps only the newest checkpoint', () => {
    const newer = { jobId: 'team-a.job-1', attempt: 1, location: 'b', completedAtMs: T0 + 5000, progressSec: 900 };
    const older = { ...newer, location: 'a', completedAtMs: T0 + 1000, progressSec: 300 };
    const running = apply(
      aJob(),
      { type: 'place', attempt: 1, placement },
      { type: 'start', attempt: 1 },
      { type: 'checkpoint-done', checkpoint: newer },
    );
    expect(transition(running, { type: 'checkpoint-done', checkpoint: older }, T0 + 9000)).toMatchObject({ changed: false });
    const other = transition(running, { type: 'checkpoint-done', checkpoint: { ...newer, jobId: 'someone-else' } }, T0 + 9000);
    expect(other.ok).toBe(false);
  });

  it('cancels a pending job at once and a running one through its agent', () => {
    expect(apply(aJob(), { type: 'cancel' }).state).toBe('cancelled');
    const running = apply(aJob(), { type: 'place', attempt: 1, placement }, { type: 'start', attempt: 1 }, { type: 'cancel' });
    expect(running).toMatchObject({ state: 'running', cancelRequested: true });
    const stopped = finishCancel(running, T0 + 60_000);
    expect(stopped).toMatchObject({ ok: true, changed: true, job: { state: 'cancelled' } });
  });

  it('holds and releases a pending job without changing anything else', () => {
    const hold = reason('budget-hold', 'team spent its budget');
    const held = apply(aJob(), { type: 'hold', reason: hold });
    expect(held.hold).toEqual(hold);
    expect(transition(held, { type: 'hold', reason: hold }, T0 + 5000)).toMatchObject({ changed: false });
    expect(apply(held, { type: 'release-hold' }).hold).toBeUndefined();
  });

  it('derives ids from team and token so that distinct tokens never collide', () => {
    expect(jobIdFor('nlp', 'abc-123')).toBe('nlp.abc-123');
    expect(jobIdFor('nlp', 'a.b')).not.toBe(jobIdFor('nlp', 'a_b'));
    expect(jobIdFor('nlp', 'x')).not.toBe(jobIdFor('vision', 'x'));
  });
});

describe('job usage: what each attempt held and cost', () => {
  const at = (ms: number, job: Job, e: JobEvent) => {
    const r = transition(job, e, ms);
    if (!r.ok) throw new Error(r.error);
    return r.job;
  };
  // Two GPUs of an 8-GPU spot machine: $2/h for the share, $6/h on on-demand.
  const priced = {
    nodes: [{ nodeId: 'i-1', gpuIndices: [0, 1] }],
    capacityType: 'spot' as const,
    milliGpu: 2000,
    priceMicroUsdPerHour: 2_000_000,
    onDemandMicroUsdPerHour: 6_000_000,
  };

  it('adds each attempt from placement to its end, with the work lost since the newest checkpoint when interrupted', () => {
    let job = aJob({ spec: { checkpoint: { intervalSec: 600 } } });
    job = at(T0, job, { type: 'place', attempt: 1, placement: priced });
    job = at(T0 + 60_000, job, { type: 'start', attempt: 1 });
    job = at(T0 + 1_860_000, job, {
      type: 'checkpoint-done',
      checkpoint: { jobId: job.id, attempt: 1, location: 's3://b/k', completedAtMs: T0 + 1_860_000, progressSec: 1800 },
    });
    // Interrupted 10 minutes after its checkpoint, one hour after placement.
    job = at(T0 + 3_600_000, job, { type: 'requeue', attempt: 1, reason: lost });
    expect(job.usage).toEqual({
      attempts: 1,
      heldSec: 3600,
      gpuSec: 7200,
      spotSec: 3600,
      costMicroUsd: 2_000_000,
      onDemandMicroUsd: 6_000_000,
      reworkSec: 1740,
    });
    // The second attempt, half an hour on on-demand at $6/h, succeeds: no rework.
    job = at(T0 + 3_700_000, job, {
      type: 'place',
      attempt: 2,
      placement: { ...priced, capacityType: 'on-demand', priceMicroUsdPerHour: 6_000_000 },
    });
    job = at(T0 + 3_700_000, job, { type: 'start', attempt: 2 });
    job = at(T0 + 5_500_000, job, { type: 'succeed', attempt: 2 });
    expect(job.usage).toMatchObject({
      attempts: 2,
      heldSec: 5400,
      gpuSec: 10_800,
      spotSec: 3600,
      costMicroUsd: 5_000_000,
      onDemandMicroUsd: 9_000_000,
      reworkSec: 1740,
    });
  });

  it('a job whose cancel was asked for ends cancelled when its attempt is requeued, not back in the queue', () => {
    let job = aJob();
    job = at(T0, job, { type: 'place', attempt: 1, placement: priced });
    job = at(T0 + 1000, job, { type: 'start', attempt: 1 });
    job = at(T0 + 2000, job, { type: 'cancel' });
    job = at(T0 + 3000, job, { type: 'requeue', attempt: 1, reason: lost });
    expect(job).toMatchObject({ state: 'cancelled', attempt: 1, endedAtMs: T0 + 3000, usage: { attempts: 1, heldSec: 3 } });
  });
});
