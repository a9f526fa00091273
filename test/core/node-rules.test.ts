import { describe, expect, it } from 'vitest';
import type { Job } from '../../core/job.ts';
import { reason } from '../../core/reason.ts';
import {
  afterCheckpoint,
  checkpointLimits,
  checkpointSizeMiB,
  checkpointTimeoutSec,
  checkpointVerdict,
  type SaveWatch,
  exitReport,
  gangRank,
  judgeWorkEntry,
  leaseLapsed,
  watchdogStops,
  fencedBySec,
  nextNodeStep,
  onLeaseLapsed,
  onMachineNotice,
  planWorkList,
  processEnd,
  WATCHDOG_STOPPED,
  saveLocation,
  uploadAllowanceSec,
  uploadRetryDelayMs,
} from '../../core/services/node-rules.ts';
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

const why = reason('interrupted', 'its machine got a spot interruption notice');
const cp = { intervalSec: 600, signal: 'SIGUSR1' as const, gracePeriodSec: 30 };

describe('the next step for one work-list entry', () => {
  const job = (extra: Partial<Job> = {}) => placedOn(['i-1', 'i-2'], { spec: { ...aJob().spec, checkpoint: cp }, ...extra });

  it('launches each node its own rank, runs what runs, and reports what ended by itself', () => {
    expect(nextNodeStep(job(), 'i-2', 2, undefined)).toEqual({ kind: 'launch', rank: 1, size: 2 });
    expect(nextNodeStep(job(), 'i-1', 2, { rank: 0 })).toEqual({ kind: 'run' });
    expect(nextNodeStep(job(), 'i-1', 2, { rank: 0, exitCode: 3 })).toEqual({ kind: 'report-exit', exitCode: 3 });
    expect(nextNodeStep(job({ attempt: 3 }), 'i-1', 2, { rank: 0 })).toEqual({ kind: 'drop' });
  });

  it('every rank checkpoints a job asked to; with nothing running here, the job is requeued from the store', () => {
    const asked = job({ state: 'checkpointing', checkpointReason: why });
    expect(nextNodeStep(asked, 'i-2', 2, { rank: 1 })).toEqual({ kind: 'checkpoint', then: 'requeue', reason: why });
    expect(nextNodeStep(asked, 'i-1', 2, undefined)).toEqual({ kind: 'requeue-from-store', reason: why, records: true });
    // Only the leader writes the requeue: a follower with nothing running has nothing to write.
    expect(nextNodeStep(asked, 'i-2', 2, undefined)).toEqual({ kind: 'requeue-from-store', reason: why, records: false });
    expect(nextNodeStep(asked, 'i-1', 2, { rank: 0, checkpointing: 'requeue' })).toEqual({ kind: 'busy' });
  });

  it('a cancel checkpoints a job that can, stops one that cannot, and records one with nothing running', () => {
    expect(nextNodeStep(job({ cancelRequested: true }), 'i-1', 2, { rank: 0 })).toMatchObject({ kind: 'checkpoint', then: 'cancel' });
    const plain = placedOn(['i-1'], { cancelRequested: true });
    expect(nextNodeStep(plain, 'i-1', 2, { rank: 0 })).toEqual({ kind: 'stop-cancel', records: true });
    expect(nextNodeStep(plain, 'i-1', 2, undefined)).toEqual({ kind: 'finish-cancel', records: true });
    const gang = placedOn(['i-1', 'i-2'], { cancelRequested: true });
    expect(nextNodeStep(gang, 'i-2', 2, { rank: 1 })).toEqual({ kind: 'stop-cancel', records: false });
  });

  it('plans a look at the whole list: what moved on stops first, a save under way for it ends first, every entry its step', () => {
    const mine = job();
    const moved = placedOn(['i-9'], { id: 'nlp.moved' });
    const plan = planWorkList(
      'i-1',
      [
        { jobId: mine.id, attempt: 2, job: mine, local: { rank: 0 } },
        { jobId: 'nlp.moved', attempt: 2, job: moved, local: undefined },
      ],
      [
        { jobId: mine.id, attempt: 2, busy: false },
        { jobId: 'nlp.moved', attempt: 2, busy: false },
        { jobId: 'nlp.saving', attempt: 1, busy: true },
        // An older attempt of a job whose newer one is listed: moved on all the same.
        { jobId: mine.id, attempt: 1, busy: false },
      ],
    );
    expect(plan.stop).toEqual([
      { jobId: 'nlp.moved', attempt: 2, busy: false },
      { jobId: mine.id, attempt: 1, busy: false },
    ]);
    expect(plan.finishing).toEqual([{ jobId: 'nlp.saving', attempt: 1, busy: true }]);
    expect(plan.steps.map((s) => [s.jobId, s.step.kind])).toEqual([
      [mine.id, 'run'],
      ['nlp.moved', 'drop'],
    ]);
  });

  it("a process the machine's watchdog stopped is no end of the job's: back to the queue from its newest checkpoint", () => {
    expect(processEnd(143, true)).toEqual({ kind: 'requeue', reason: WATCHDOG_STOPPED });
    expect(processEnd(143, false)).toEqual({ kind: 'exit', exitCode: 143 });
    expect(processEnd(0, false)).toEqual({ kind: 'exit', exitCode: 0 });
  });

  it("the leader's success ends the job; a follower's does not; any rank's failure fails it", () => {
    expect(exitReport(0, 0)).toEqual({ event: 'succeed', exitCode: 0 });
    expect(exitReport(1, 0)).toBeUndefined();
    expect(exitReport(1, 2)).toEqual({ event: 'fail', exitCode: 2 });
  });
});

describe('how a checkpoint asked for ends', () => {
  const job = placedOn(['i-1'], { spec: { ...aJob().spec, checkpoint: cp } });

  it('saved: requeued with the reason given; not saved: requeued all the same, from the newest earlier checkpoint', () => {
    expect(afterCheckpoint(job, 'requeue', why, { kind: 'saved' })).toEqual({ event: 'requeue', reason: why });
    const notSaved = afterCheckpoint(job, 'requeue', why, { kind: 'not-saved', why: 'its upload failed: 503' });
    expect(notSaved).toMatchObject({ event: 'requeue', reason: { code: 'interrupted' } });
    expect(notSaved.event === 'requeue' && notSaved.reason.message).toMatch(/no new checkpoint was saved \(its upload failed: 503\)/);
  });

  it('a process that ended before it was asked decides by its own exit; a cancel is a cancel whatever the save did', () => {
    expect(afterCheckpoint(job, 'requeue', why, { kind: 'exited-before', exitCode: 0 })).toEqual({ event: 'succeed' });
    expect(afterCheckpoint(job, 'requeue', why, { kind: 'exited-before', exitCode: 9 })).toEqual({ event: 'fail', exitCode: 9 });
    expect(afterCheckpoint(job, 'cancel', why, { kind: 'not-saved', why: 'x' })).toEqual({ event: 'cancel' });
  });
});

describe('the verdict on a checkpoint under way, from what the node sees (checkpointVerdict)', () => {
  const base: SaveWatch = { nowMs: 10_000, writeByMs: 20_000, uploadByMs: 80_000, graceSec: 10, wroteNew: false, ended: false };

  it('waits for the marker within the grace; none by then, or the process gone without one: not saved', () => {
    expect(checkpointVerdict(base)).toBeUndefined();
    expect(checkpointVerdict({ ...base, nowMs: 20_000 })).toEqual({ kind: 'not-saved', why: 'it wrote none within its 10 s grace' });
    expect(checkpointVerdict({ ...base, ended: true })).toEqual({ kind: 'not-saved', why: 'it wrote none within its 10 s grace' });
  });

  it('once written, waits for its upload within the allowance; a failed or late upload is not saved, a finished one is', () => {
    const wrote = { ...base, wroteNew: true, nowMs: 30_000 };
    expect(checkpointVerdict(wrote)).toBeUndefined();
    // The write limit is past, but the marker came: only the upload's allowance counts now.
    expect(checkpointVerdict({ ...wrote, ended: true })).toBeUndefined();
    expect(checkpointVerdict({ ...wrote, nowMs: 80_000 })).toEqual({
      kind: 'not-saved',
      why: 'its upload did not finish within the allowance',
    });
    expect(checkpointVerdict({ ...wrote, newestSave: { ok: false, error: 'AccessDenied' } })).toEqual({
      kind: 'not-saved',
      why: 'its upload failed: AccessDenied',
    });
    expect(checkpointVerdict({ ...wrote, newestSave: { ok: true, complete: true } })).toEqual({ kind: 'saved' });
  });

  it("a gang's leader, its part saved, waits for the index to hold every rank's, within the allowance", () => {
    const part = { ...base, wroteNew: true, nowMs: 30_000, newestSave: { ok: true, complete: false } as const };
    expect(checkpointVerdict({ ...part, gangSaved: false })).toBeUndefined();
    expect(checkpointVerdict({ ...part, gangSaved: true })).toEqual({ kind: 'saved' });
    expect(checkpointVerdict({ ...part, gangSaved: false, nowMs: 80_000 })).toEqual({
      kind: 'not-saved',
      why: 'the other ranks did not save their parts within the allowance',
    });
    // A follower (or one machine) whose part is in has done its share.
    expect(checkpointVerdict(part)).toEqual({ kind: 'saved' });
  });

  it('a process that had ended before it was asked decides by its exit; a job without checkpoints saves none', () => {
    expect(checkpointVerdict({ ...base, endedBeforeExitCode: 3, wroteNew: true })).toEqual({ kind: 'exited-before', exitCode: 3 });
    expect(checkpointVerdict({ ...base, graceSec: undefined })).toEqual({ kind: 'not-saved', why: 'no checkpoint support' });
  });
});

describe('how long a checkpoint may take', () => {
  it("is the spec's size, else the GPU memory the attempt holds on that node", () => {
    const gpus = [
      { index: 0, model: 'A100-80GB' as const, memoryMiB: 81_920 },
      { index: 1, model: 'A100-80GB' as const, memoryMiB: 81_920 },
    ];
    const two = aJob({ placement: { capacityType: 'spot', nodes: [{ nodeId: 'i-1', gpuIndices: [0, 1] }] } });
    expect(checkpointSizeMiB(two, gpus)).toBe(163_840);
    expect(checkpointSizeMiB({ ...two, spec: { ...two.spec, checkpoint: { ...cp, sizeGiB: 2.5 } } }, gpus)).toBe(2560);
    const slice = aJob({
      placement: { capacityType: 'spot', nodes: [{ nodeId: 'i-1', gpuIndices: [0], mig: { profile: '3g.40gb', startSlice: 0 } }] },
    });
    expect(checkpointSizeMiB(slice, gpus)).toBe(40_960);
  });

  it('uploads get size ÷ bandwidth + margin; a spot warning bounds the write and the upload', () => {
    expect(uploadAllowanceSec(16_384)).toBe(33 + 120);
    expect(uploadAllowanceSec(16_384, { uploadMiBPerSec: 10, uploadMarginSec: 0 })).toBe(1639);
    expect(checkpointLimits({ graceSec: 30, sizeMiB: 16_384, requestedAtMs: 0 })).toEqual({ writeByMs: 30_000, uploadByMs: 183_000 });
    expect(checkpointLimits({ graceSec: 30, sizeMiB: 16_384, requestedAtMs: 0, hardDeadlineMs: 100_000 })).toEqual({
      writeByMs: 30_000,
      uploadByMs: 100_000,
    });
    expect(checkpointTimeoutSec(placedOn(['i-1'], { spec: { ...aJob().spec, checkpoint: cp } }), 16_384)).toBe(30 + 153 + 60);
  });

  it('retries back off from 2 s, doubling, to at most a minute', () => {
    expect([1, 2, 3, 4, 5, 6, 10].map(uploadRetryDelayMs)).toEqual([2000, 4000, 8000, 16_000, 32_000, 60_000, 60_000]);
  });
});

describe("a machine's own notice (the rule the agent and the simulated machines follow)", () => {
  const at = (key: string, over: { checkpointable?: boolean; busy?: boolean; gracePeriodSec?: number } = {}) => ({
    key,
    checkpointable: over.checkpointable ?? true,
    busy: over.busy ?? false,
    gracePeriodSec: over.gracePeriodSec ?? 30,
    sizeMiB: 1024,
  });

  it('on a GCE preemption (30 s ahead): drains with the deadline a margin before, checkpoints what can, lets the rest run until the deadline', () => {
    const now = 1_000_000;
    const out = onMachineNotice(
      { kind: 'interruption', actionAtMs: now + 30_000, what: 'preempted notice (instance/preempted)' },
      now,
      20,
      [at('a'), at('b', { checkpointable: false }), at('c', { busy: true })],
    );
    expect(out.deadlineMs).toBe(now + 10_000);
    expect(out.drainReason).toBe('preempted notice (instance/preempted) seen by the node agent');
    expect(out.reason).toEqual({
      code: 'interrupted',
      message: expect.stringMatching(/got a preempted notice .*checkpointed and requeued/),
    });
    expect(out.steps).toEqual([
      // Its grace (30 s) is longer than the 10 s to the deadline: it gets its grace, not less, to write and upload it.
      { key: 'a', kind: 'checkpoint', plan: { then: 'requeue', reason: out.reason, writeByMs: now + 30_000, uploadByMs: now + 30_000 } },
      {
        key: 'b',
        kind: 'requeue-at',
        atMs: now + 10_000,
        plan: expect.objectContaining({
          then: 'requeue',
          reason: { code: 'interrupted', message: 'its machine got a preempted notice (instance/preempted)' },
        }),
      },
      { key: 'c', kind: 'keep' },
    ]);
  });

  it('a notice time already past (clock skew) still gives the checkpoint its grace; a rebalance has no deadline and keeps what cannot checkpoint', () => {
    const now = 5_000_000;
    const late = onMachineNotice({ kind: 'interruption', actionAtMs: now - 60_000, what: 'terminate notice' }, now, 20, [
      at('a', { gracePeriodSec: 45 }),
    ]);
    expect(late.deadlineMs).toBe(now);
    expect(late.steps).toEqual([
      { key: 'a', kind: 'checkpoint', plan: { then: 'requeue', reason: late.reason, writeByMs: now + 45_000, uploadByMs: now + 45_000 } },
    ]);
    const rebalance = onMachineNotice({ kind: 'rebalance', what: 'rebalance recommendation' }, now, 20, [
      at('a'),
      at('b', { checkpointable: false }),
    ]);
    expect(rebalance.deadlineMs).toBe(now + 7 * 86_400_000);
    // No deadline: the grace to write it, then the upload's own allowance (1 GiB at the assumed rate, plus the margin).
    expect(rebalance.steps).toEqual([
      {
        key: 'a',
        kind: 'checkpoint',
        plan: {
          then: 'requeue',
          reason: rebalance.reason,
          writeByMs: now + 30_000,
          uploadByMs: now + 30_000 + uploadAllowanceSec(1024) * 1000,
        },
      },
      { key: 'b', kind: 'keep' },
    ]);
  });
});

describe('where each save of a checkpoint goes (saveLocation)', () => {
  const folder = 's3://b/checkpoints/nlp.j/attempt-3/';
  it('gives a folder saved again a name of its own, never one the attempt used', () => {
    const used = new Set<string>();
    const take = (path: string) => {
      const at = saveLocation(folder, path, used);
      used.add(at);
      return at;
    };
    expect(take('latest/')).toBe(`${folder}latest/`);
    expect(take('latest')).toBe(`${folder}latest@2/`);
    expect(take('latest')).toBe(`${folder}latest@3/`);
    expect(take('step-000100')).toBe(`${folder}step-000100/`);
    // A job folder literally named like a repeat does not make two saves share one.
    expect(take('step-000100@2')).toBe(`${folder}step-000100@2/`);
    expect(take('step-000100')).toBe(`${folder}step-000100@3/`);
    expect(new Set(used).size).toBe(6);
  });

  it("names the same folder on every rank that took the same markers in order (a gang's parts make one save)", () => {
    const paths = ['latest', 'step-10', 'latest', 'latest'];
    const rank = () => {
      const used = new Set<string>();
      return paths.map((p) => {
        const at = saveLocation(folder, p, used);
        used.add(at);
        return at;
      });
    };
    expect(rank()).toEqual(rank());
  });
});

describe("the agent's lease", () => {
  const lease = { leaseSec: 180, fenceGraceSec: 60 };
  it('lapses only once nothing renewed it for the whole lease', () => {
    expect(leaseLapsed(0, 180_000, lease)).toBe(false);
    expect(leaseLapsed(0, 180_001, lease)).toBe(true);
  });

  it("has the machine's watchdog stop the containers only past the lease and the fence, so all are gone by the fence's end, before reconcile requeues", () => {
    expect(watchdogStops(0, 240_000, lease)).toBe(false); // the agent's own fence may still be saving
    expect(watchdogStops(0, 240_001, lease)).toBe(true);
    expect(watchdogStops(undefined, 0, lease)).toBe(true); // no renewal on record: nothing of an agent vouches for them
    // Stopped within the stop grace: gone by fencedBySec, which is inside reconcile's patience with a margin for clocks.
    expect(fencedBySec(lease, 30)).toBe(270);
  });

  it('fences every attempt: checkpoint by the end of the fence, stop at once what cannot checkpoint, leave what is already stopping', () => {
    const now = 200_000;
    const out = onLeaseLapsed(
      0,
      now,
      [
        { key: 'cp', checkpointable: true, busy: false, gracePeriodSec: 30, sizeMiB: 1024 },
        { key: 'plain', checkpointable: false, busy: false, gracePeriodSec: 30, sizeMiB: 1024 },
        { key: 'busy', checkpointable: true, busy: true, gracePeriodSec: 30, sizeMiB: 1024 },
      ],
      lease,
    );
    expect(out.stopByMs).toBe(now + 60_000);
    expect(out.reason).toMatchObject({ code: 'fenced', message: expect.stringMatching(/for 200 s \(lease 180 s\)/) });
    expect(out.steps).toEqual([
      { key: 'cp', kind: 'checkpoint', plan: { then: 'requeue', reason: out.reason, writeByMs: now + 30_000, uploadByMs: now + 60_000 } },
      // Nothing to save: stopped now, its limits now.
      { key: 'plain', kind: 'requeue-at', atMs: now, plan: { then: 'requeue', reason: out.reason, writeByMs: now, uploadByMs: now } },
      { key: 'busy', kind: 'keep' },
    ]);
  });
});
