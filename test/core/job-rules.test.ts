import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  ACTIVE_STATES,
  assignmentMilliGpu,
  closeAttempt,
  finishCancel,
  isTerminal,
  JOB_STATES,
  jobIdFor,
  newRejectedJob,
  TERMINAL_STATES,
  transition,
  waitMsSoFar,
  type Job,
  type JobEvent,
  type JobState,
} from '../../core/job.ts';
import { reason } from '../../core/reason.ts';
import { aJob, T0 } from '../builders.ts';

/** The job's life rule by rule (job.test.ts follows whole lives). */

const placement = {
  nodes: [{ nodeId: 'i-1', gpuIndices: [0] }],
  capacityType: 'spot' as const,
  milliGpu: 1000,
  priceMicroUsdPerHour: 3_600_000,
};
const inState = (state: JobState, over: Partial<Job> = {}): Job =>
  aJob({
    state,
    ...(state === 'pending' ? {} : { placement, placedAtMs: T0 }),
    ...(state === 'running' || state === 'checkpointing' ? { startedAtMs: T0 } : {}),
    ...over,
  });
const cp = (completedAtMs: number, progressSec: number, attempt = 1) => ({
  jobId: 'team-a.job-1',
  attempt,
  location: `s3://b/${completedAtMs}/`,
  completedAtMs,
  progressSec,
});

describe('which event may happen in which state', () => {
  // Each event, and the states it acts in (a finished job changes for none of them).
  const allowed: [JobEvent, JobState[]][] = [
    [{ type: 'place', attempt: 1, placement }, ['pending']],
    [{ type: 'start', attempt: 1 }, ['placed']],
    [{ type: 'requeue', attempt: 1, reason: reason('node-lost', 'x') }, ['placed', 'running', 'checkpointing']],
    [{ type: 'succeed', attempt: 1 }, ['placed', 'running', 'checkpointing']],
    [{ type: 'fail', attempt: 1, exitCode: 3 }, ['placed', 'running', 'checkpointing']],
    [{ type: 'cancel' }, ['pending', 'placed', 'running', 'checkpointing']],
    [{ type: 'hold', reason: reason('budget-hold', 'x') }, ['pending']],
    [{ type: 'checkpoint-requested', attempt: 1, reason: reason('interrupted', 'x') }, ['running']],
    [{ type: 'checkpoint-done', checkpoint: cp(T0 + 5, 60) }, ['pending', 'placed', 'running', 'checkpointing']],
  ];
  it.each(allowed)('%o changes the job only in the states it belongs to', (event, states) => {
    for (const state of JOB_STATES) {
      const out = transition(inState(state), event, T0 + 60_000);
      if (states.includes(state)) expect(out, `${event.type} in ${state}`).toMatchObject({ ok: true, changed: true });
      else if (isTerminal(state)) expect(out, `${event.type} in ${state}`).toEqual({ ok: true, job: inState(state), changed: false });
      else expect(out.ok === false || !out.changed, `${event.type} in ${state}`).toBe(true);
    }
  });

  it('names the states an event needs when it cannot be applied', () => {
    expect(transition(inState('pending'), { type: 'start', attempt: 1 }, T0)).toEqual({
      ok: false,
      error: 'job team-a.job-1 is pending; "start" is allowed only when placed',
    });
    expect(transition(inState('running'), { type: 'place', attempt: 1, placement }, T0)).toEqual({
      ok: false,
      error: 'job team-a.job-1 is running; "place" is allowed only when pending',
    });
    expect(transition(inState('pending'), { type: 'requeue', attempt: 1, reason: reason('node-lost', 'x') }, T0)).toEqual({
      ok: false,
      error: 'job team-a.job-1 is pending; "requeue" is allowed only when placed or running or checkpointing',
    });
  });

  it('takes a repeated start or checkpoint request as already applied', () => {
    for (const state of ['running', 'checkpointing'] as const) {
      expect(transition(inState(state), { type: 'start', attempt: 1 }, T0)).toEqual({ ok: true, job: inState(state), changed: false });
    }
    expect(transition(inState('checkpointing'), { type: 'checkpoint-requested', attempt: 1 }, T0)).toEqual({
      ok: true,
      job: inState('checkpointing'),
      changed: false,
    });
    expect(transition(inState('pending'), { type: 'checkpoint-requested', attempt: 1 }, T0).ok).toBe(false);
  });

  it('lists the states and which of them are terminal or active', () => {
    expect(JOB_STATES).toEqual(['pending', 'placed', 'running', 'checkpointing', 'succeeded', 'failed', 'cancelled', 'rejected']);
    expect(TERMINAL_STATES).toEqual(['succeeded', 'failed', 'cancelled', 'rejected']);
    expect(ACTIVE_STATES).toEqual(['placed', 'running', 'checkpointing']);
  });
});

describe('event by event', () => {
  it('a checkpoint request on a job not started yet changes nothing; on a running one it records why', () => {
    const why = reason('preempt-for-priority', 'make room');
    expect(transition(inState('placed'), { type: 'checkpoint-requested', attempt: 1, reason: why }, T0)).toEqual({
      ok: true,
      job: inState('placed'),
      changed: false,
    });
    const asked = transition(inState('running'), { type: 'checkpoint-requested', attempt: 1, reason: why }, T0 + 1);
    expect(asked).toMatchObject({
      ok: true,
      changed: true,
      job: { state: 'checkpointing', checkpointReason: why, version: 2, updatedAtMs: T0 + 1 },
    });
    const noWhy = transition(inState('running'), { type: 'checkpoint-requested', attempt: 1 }, T0 + 1);
    expect(noWhy.ok && 'checkpointReason' in noWhy.job).toBe(false);
  });

  it('keeps the newer checkpoint: by time, then by progress at the same time', () => {
    const running = inState('running', { checkpoint: cp(T0 + 100, 600) });
    const newer = transition(running, { type: 'checkpoint-done', checkpoint: cp(T0 + 200, 500) }, T0 + 300);
    expect(newer.ok && newer.changed && newer.job.checkpoint?.completedAtMs).toBe(T0 + 200);
    const older = transition(running, { type: 'checkpoint-done', checkpoint: cp(T0 + 50, 900) }, T0 + 300);
    expect(older).toEqual({ ok: true, job: running, changed: false });
    const sameTimeMore = transition(running, { type: 'checkpoint-done', checkpoint: cp(T0 + 100, 700) }, T0 + 300);
    expect(sameTimeMore.ok && sameTimeMore.changed && sameTimeMore.job.checkpoint?.progressSec).toBe(700);
    const sameTimeLess = transition(running, { type: 'checkpoint-done', checkpoint: cp(T0 + 100, 500) }, T0 + 300);
    expect(sameTimeLess).toEqual({ ok: true, job: running, changed: false });
    const same = transition(running, { type: 'checkpoint-done', checkpoint: cp(T0 + 100, 600) }, T0 + 300);
    expect(same).toEqual({ ok: true, job: running, changed: false });
    const first = transition(inState('running'), { type: 'checkpoint-done', checkpoint: cp(T0 + 1, 1) }, T0 + 300);
    expect(first).toMatchObject({ ok: true, changed: true });
  });

  it('refuses a checkpoint of another job', () => {
    expect(transition(inState('running'), { type: 'checkpoint-done', checkpoint: { ...cp(T0, 1), jobId: 'other.job' } }, T0)).toEqual({
      ok: false,
      error: 'checkpoint of job other.job given to job team-a.job-1',
    });
  });

  it('a failed attempt ends the job with its exit code and closes the attempt', () => {
    const out = transition(inState('running'), { type: 'fail', attempt: 1, exitCode: 137 }, T0 + 3_600_000);
    expect(out).toMatchObject({ ok: true, changed: true, job: { state: 'failed', exitCode: 137, endedAtMs: T0 + 3_600_000 } });
    // A failure is the job's own end, not an interruption: no work is counted as lost.
    expect(out.ok && out.job.usage).toMatchObject({ attempts: 1, heldSec: 3600, costMicroUsd: 3_600_000, reworkSec: 0 });
  });

  it('cancelling a pending job ends it at once and counts its wait', () => {
    const waiting = aJob({ queuedAtMs: T0, waitedMs: 5000 });
    const out = transition(waiting, { type: 'cancel' }, T0 + 60_000);
    expect(out).toMatchObject({ ok: true, changed: true, job: { state: 'cancelled', endedAtMs: T0 + 60_000, waitedMs: 65_000 } });
  });

  it('cancelling a running job asks its agent once', () => {
    const first = transition(inState('running'), { type: 'cancel' }, T0 + 1);
    expect(first).toMatchObject({ ok: true, changed: true, job: { state: 'running', cancelRequested: true } });
    const again = transition((first as { job: Job }).job, { type: 'cancel' }, T0 + 2);
    expect(again).toMatchObject({ ok: true, changed: false });
  });

  it('a hold changes the job only when its code or message does; no reason releases it', () => {
    const held = aJob({ hold: reason('budget-hold', 'over budget') });
    expect(transition(held, { type: 'hold', reason: reason('budget-hold', 'over budget') }, T0)).toEqual({
      ok: true,
      job: held,
      changed: false,
    });
    expect(transition(held, { type: 'hold', reason: reason('budget-hold', 'still over') }, T0)).toMatchObject({
      changed: true,
      job: { hold: { message: 'still over' } },
    });
    expect(transition(held, { type: 'hold', reason: reason('team-gpu-cap', 'over budget') }, T0)).toMatchObject({
      changed: true,
      job: { hold: { code: 'team-gpu-cap' } },
    });
    expect(transition(held, { type: 'release-hold' }, T0)).toMatchObject({ changed: true, job: { hold: undefined } });
    expect(transition(aJob(), { type: 'release-hold' }, T0)).toMatchObject({ changed: false });
  });
});

describe('a requeue of a job whose cancel was asked for', () => {
  it('ends it cancelled, with nothing counted as lost', () => {
    const out = transition(
      inState('running', { cancelRequested: true }),
      { type: 'requeue', attempt: 1, reason: reason('interrupted', 'x') },
      T0 + 600_000,
    );
    expect(out).toMatchObject({ ok: true, changed: true, job: { state: 'cancelled', attempt: 1, endedAtMs: T0 + 600_000 } });
    expect(out.ok && out.job.usage).toMatchObject({ attempts: 1, heldSec: 600, reworkSec: 0 });
  });
});

describe('finishing a cancel', () => {
  it('ends a job whose cancel was asked for, closing its attempt', () => {
    const asked = inState('running', { cancelRequested: true, version: 4 });
    const out = finishCancel(asked, T0 + 1_800_000);
    expect(out).toMatchObject({
      ok: true,
      changed: true,
      job: { state: 'cancelled', version: 5, endedAtMs: T0 + 1_800_000, updatedAtMs: T0 + 1_800_000 },
    });
    expect(out.ok && out.job.usage).toMatchObject({ attempts: 1, heldSec: 1800, reworkSec: 0 });
  });

  it('is a no-op on a cancelled job, and refuses one without a pending cancel or already ended', () => {
    expect(finishCancel(inState('cancelled'), T0)).toEqual({ ok: true, job: inState('cancelled'), changed: false });
    expect(finishCancel(inState('running'), T0)).toEqual({ ok: false, error: 'job team-a.job-1 is running without a pending cancel' });
    expect(finishCancel(inState('succeeded', { cancelRequested: true }), T0)).toEqual({
      ok: false,
      error: 'job team-a.job-1 is succeeded without a pending cancel',
    });
  });
});

describe('what an attempt held', () => {
  it('a whole GPU, a time-sliced share and a MIG slice each hold their own share of a GPU', () => {
    expect(assignmentMilliGpu({ nodeId: 'n', gpuIndices: [0, 1, 2] })).toBe(3000);
    expect(assignmentMilliGpu({ nodeId: 'n', gpuIndices: [0], share: { milliGpu: 250, memoryMiB: 8000 } })).toBe(250);
    expect(assignmentMilliGpu({ nodeId: 'n', gpuIndices: [0], mig: { profile: '3g.40gb', startSlice: 4 } })).toBe(429);
    expect(assignmentMilliGpu({ nodeId: 'n', gpuIndices: [0], mig: { profile: '1g.10gb', startSlice: 0 } })).toBe(143);
  });

  it('counts from placement (or start), and leaves usage alone for an attempt never placed', () => {
    expect(closeAttempt(aJob(), T0 + 1000, true)).toBeUndefined();
    expect(closeAttempt(inState('running', { placedAtMs: undefined, startedAtMs: T0 + 600_000 }), T0 + 1_200_000, false)).toMatchObject({
      heldSec: 600,
    });
    expect(closeAttempt(inState('placed', { placedAtMs: undefined }), T0 + 1000, false)).toBeUndefined();
  });

  it("counts as lost the work since the attempt started, or since this attempt's newest checkpoint", () => {
    const started = inState('running', { startedAtMs: T0 + 60_000 });
    expect(closeAttempt(started, T0 + 660_000, true)?.reworkSec).toBe(600);
    expect(closeAttempt(started, T0 + 660_000, false)?.reworkSec).toBe(0);
    // A checkpoint of this attempt bounds the loss; one of an earlier attempt does not.
    expect(closeAttempt({ ...started, checkpoint: cp(T0 + 360_000, 300, 1) }, T0 + 660_000, true)?.reworkSec).toBe(300);
    expect(closeAttempt({ ...started, attempt: 2, checkpoint: cp(T0 + 360_000, 300, 1) }, T0 + 660_000, true)?.reworkSec).toBe(600);
    // Placed, never started: nothing was run, nothing lost.
    expect(closeAttempt(inState('placed'), T0 + 660_000, true)?.reworkSec).toBe(0);
  });
});

describe('records of a job', () => {
  it('a rejected job keeps the body (cut at 16 KiB) and a spec that can never run', () => {
    const short = newRejectedJob({ id: 'nlp.x', team: 'nlp', submittedAtMs: T0, errors: ['image: is required'], body: 'a'.repeat(16_384) });
    expect(short.rejection?.body).toBe('a'.repeat(16_384));
    const long = newRejectedJob({ id: 'nlp.x', team: 'nlp', submittedAtMs: T0, errors: [], body: 'b'.repeat(16_385) });
    expect(long.rejection?.body).toBe(`${'b'.repeat(16_384)}…`);
    expect(short).toMatchObject({ state: 'rejected', attempt: 0, endedAtMs: T0, rejection: { errors: ['image: is required'] } });
    expect(short.spec).toEqual({
      image: 'rejected',
      command: ['false'],
      secrets: [],
      env: {},
      gpu: { kind: 'whole', count: 1 },
      nodes: 1,
      priority: 0,
      interruptible: true,
      labels: {},
    });
  });

  it('escapes every character outside [A-Za-z0-9_-] of a token at a fixed width: ~ and two hex digits up to U+00FF, ~~ and six above', () => {
    expect(jobIdFor('nlp', 'run-7_b')).toBe('nlp.run-7_b');
    expect(jobIdFor('nlp', 'a b')).toBe('nlp.a~20b');
    expect(jobIdFor('nlp', 'x\ny')).toBe('nlp.x~0ay');
    expect(jobIdFor('nlp', 'é')).toBe('nlp.~e9');
    expect(jobIdFor('nlp', 'Ā')).toBe('nlp.~~000100');
    expect(jobIdFor('nlp', '🚀')).toBe('nlp.~~01f680');
    // The collision the variable width allowed: "run-Ā" and "run-\x10" + "0" were both nlp.run-~100.
    expect(jobIdFor('nlp', 'run-Ā')).not.toBe(jobIdFor('nlp', 'run-\x100'));
  });

  it('two different tokens never give the same job id: the token can be read back from the id (any unicode, lone surrogates included)', () => {
    // A left inverse proves the map injective.
    const tokenOf = (id: string) =>
      id
        .slice('nlp.'.length)
        .replace(/~~([0-9a-f]{6})|~([0-9a-f]{2})/g, (_m, six: string | undefined, two: string | undefined) =>
          String.fromCodePoint(parseInt(six ?? two!, 16)),
        );
    const tricky = fc.string({
      unit: fc.constantFrom('a', '~', '-', '0', '1', 'f', ' ', '.', 'Ā', '\x10', '\u{1F680}', '\ud800'),
      maxLength: 12,
    });
    for (const token of [tricky, fc.string({ unit: 'binary' }), fc.string({ unit: 'binary-ascii' })])
      fc.assert(
        fc.property(token, (t) => {
          expect(tokenOf(jobIdFor('nlp', t))).toBe(t);
        }),
        { numRuns: 2000 },
      );
  });

  it('a job has waited its past waits, plus the current one while it is pending', () => {
    expect(waitMsSoFar(aJob({ queuedAtMs: T0, waitedMs: 1000 }), T0 + 5000)).toBe(6000);
    expect(waitMsSoFar(inState('running', { queuedAtMs: T0, waitedMs: 1000 }), T0 + 5000)).toBe(1000);
  });
});
