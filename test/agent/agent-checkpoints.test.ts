import { copyFileSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import type { CheckpointBlobs } from '../../agent/checkpoint-files.ts';
import { ProcessRunner, safeJobName, type JobRunner } from '../../agent/runner.ts';
import { reason } from '../../core/reason.ts';
import { applyJobEvent } from '../../core/services/job-updates.ts';
import { lostReason } from '../../core/reconcile/reconcile.ts';
import { DEFAULT_POLICY } from '../../core/snapshot.ts';
import { agentWorld, COUNTER_JOB, waitFor } from '../support/agent-world.ts';

// The three ways the agent used to lose work or run a job twice (issue 17), each with real child processes.

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});
function world() {
  const w = agentWorld();
  cleanups.push(() => w.shutdown());
  return w;
}
const dir = (name: string) => mkdtempSync(join(tmpdir(), `${name}-`));
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const interrupt = reason('interrupted', 'test: its machine got a spot interruption notice');

/** A checkpoint store whose uploads hang until released (a checkpoint of tens of GB on a slow link). */
function stalledBlobs(inner: CheckpointBlobs) {
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  const started: number[] = [];
  const blobs: CheckpointBlobs = {
    upload: async (localDir, location) => {
      started.push(Date.now());
      await gate;
      return inner.upload(localDir, location);
    },
    download: (location, localDir) => inner.download(location, localDir),
  };
  return { blobs, started, release };
}

describe('node agent: checkpoints never hold the node hostage', () => {
  it('keeps sending heartbeats while a checkpoint upload outlasts the heartbeat timeout, and nothing is requeued', async () => {
    const w = world();
    const slow = stalledBlobs(w.blobs);
    cleanups.push(slow.release);
    const a = w.agent('i-a', { blobs: slow.blobs, config: { heartbeatSec: 0.1, noticeSec: 0.1 } });
    await a.start();
    await w.submit('nlp.big', { command: ['node', COUNTER_JOB, '100000', '20', '5'] });
    await w.place('nlp.big', ['i-a']);
    await waitFor('the upload to start', () => slow.started.length > 0);
    const uploadFrom = slow.started[0]!;
    // The upload stays in flight (its gate is shut) while heartbeats go on: beats that started well after it, one after another.
    // (Waited for rather than slept for: on a loaded machine one beat, which runs nvidia-smi, can take a second.)
    const beatsAfter = new Set<number>();
    await waitFor('heartbeats while the upload is held', async () => {
      const at = (await w.nodes.get('i-a'))!.lastHeartbeatAtMs;
      if (at > uploadFrom + 800) beatsAfter.add(at);
      return beatsAfter.size >= 2;
    });
    expect(slow.started).toHaveLength(1);
    const record = (await w.nodes.get('i-a'))!;
    // A control plane with a 0.5 s heartbeat timeout, looking right after the newest beat, sees the node alive.
    expect(lostReason(undefined, record, record.lastHeartbeatAtMs + 100, { ...DEFAULT_POLICY, heartbeatTimeoutSec: 0.5 })).toBeUndefined();
    expect(await w.jobs.get('nlp.big')).toMatchObject({ state: 'running', attempt: 1 });
    expect(a.running()).toEqual([expect.objectContaining({ jobId: 'nlp.big', attempt: 1 })]);
    slow.release();
    await waitFor('the checkpoint to be saved', async () => (await w.jobs.get('nlp.big'))!.checkpoint);
  });

  it('a requested checkpoint whose upload keeps failing ends the attempt: retried within its allowance, then requeued', async () => {
    const w = world();
    const tries: number[] = [];
    const failing: CheckpointBlobs = {
      upload: async () => {
        tries.push(Date.now());
        throw new Error('SlowDown: Please reduce your request rate (503)');
      },
      download: (location, localDir) => w.blobs.download(location, localDir),
    };
    // A 1 MiB checkpoint: allowance 1 s ÷ bandwidth + 3 s margin, so one retry (after 2 s) fits and the next (4 s later) does not.
    const a = w.agent('i-a', { blobs: failing, config: { checkpointTiming: { uploadMiBPerSec: 500, uploadMarginSec: 3 } } });
    await a.heartbeat();
    await w.submit('nlp.unlucky', {
      command: ['node', COUNTER_JOB, '100000', '20', '0'],
      checkpoint: { intervalSec: 600, gracePeriodSec: 5, sizeGiB: 0.001 },
    });
    await w.place('nlp.unlucky', ['i-a']);
    await a.heartbeat();
    const pid = a.running()[0]!.pid!;
    await sleep(200);
    await applyJobEvent(w.jobs, 'nlp.unlucky', { type: 'checkpoint-requested', attempt: 1, reason: interrupt }, Date.now());
    await a.heartbeat();
    await a.settled();
    const job = (await w.jobs.get('nlp.unlucky'))!;
    expect(job).toMatchObject({ state: 'pending', attempt: 2 });
    expect(job.checkpoint).toBeUndefined(); // nothing was ever saved: it restarts from scratch
    expect(tries.length).toBe(2);
    expect(() => process.kill(pid, 0)).toThrow();
    expect((await w.nodes.get('i-a'))!.assigned).toEqual({});
    expect(w.logs).toContainEqual(
      expect.objectContaining({
        message: 'stopped without a new checkpoint',
        extra: expect.objectContaining({ why: expect.stringMatching(/SlowDown/) }),
      }),
    );
  });
});

describe('node agent: gangs', () => {
  it('a follower that cannot start requeues the whole attempt, and the leader stops its rank', async () => {
    const w = world();
    const real = new ProcessRunner();
    const broken: JobRunner = {
      kind: 'process',
      start: async () => {
        throw new Error('CUDA_ERROR_NO_DEVICE: no CUDA-capable device is detected');
      },
      cleanUpLeftovers: () => real.cleanUpLeftovers(),
    };
    const a = w.agent('i-a');
    const b = w.agent('i-b', { runner: broken });
    await a.heartbeat();
    await b.heartbeat();
    await w.submit('nlp.gang', { command: ['node', COUNTER_JOB, '100000', '20'], nodes: 2 });
    await w.place('nlp.gang', ['i-a', 'i-b']);
    await a.heartbeat();
    const leaderPid = a.running()[0]!.pid!;
    expect((await w.jobs.get('nlp.gang'))!.state).toBe('running');
    await b.heartbeat();
    const job = (await w.jobs.get('nlp.gang'))!;
    expect(job).toMatchObject({ state: 'pending', attempt: 2, requeueReason: { code: 'start-failed' } });
    expect(job.requeueReason!.message).toMatch(/node i-b could not start it: CUDA_ERROR_NO_DEVICE/);
    // At their next heartbeat both see the attempt moved on: the leader stops its rank, the follower drops the entry.
    await a.heartbeat();
    await b.heartbeat();
    expect(a.running()).toEqual([]);
    expect(() => process.kill(leaderPid, 0)).toThrow();
    expect((await w.nodes.get('i-a'))!.assigned).toEqual({});
    expect((await w.nodes.get('i-b'))!.assigned).toEqual({});
  });

  it('every rank saves its own part of a sharded checkpoint, and each rank resumes from its own part', async () => {
    const w = world();
    const workA = dir('agent-a');
    const workB = dir('agent-b');
    const a = w.agent('i-a', { workDir: workA });
    const b = w.agent('i-b', { workDir: workB });
    await a.heartbeat();
    await b.heartbeat();
    await w.submit('nlp.fsdp', {
      command: ['node', COUNTER_JOB, '100000', '20', '10'],
      nodes: 2,
      env: { SIGNAL_CHECKPOINT_NAME: 'on-signal' },
    });
    await w.place('nlp.fsdp', ['i-a', 'i-b']);
    await a.heartbeat();
    await b.heartbeat();
    // The checkpoint is complete only when both ranks have saved their parts.
    const cp = await waitFor('a checkpoint with both parts', async () => {
      await a.watch();
      await b.watch();
      return (await w.jobs.get('nlp.fsdp'))!.checkpoint;
    }).catch((e) => {
      console.log(JSON.stringify(w.logs, null, 1));
      throw e;
    });
    expect(cp.ranks).toBe(2);
    await applyJobEvent(w.jobs, 'nlp.fsdp', { type: 'checkpoint-requested', attempt: 1, reason: interrupt }, Date.now());
    await a.heartbeat();
    await b.heartbeat();
    await Promise.all([a.settled(), b.settled()]);
    const requeued = (await w.jobs.get('nlp.fsdp'))!;
    // Requeued from the checkpoint both ranks took on the request, not the older periodic one.
    expect(requeued).toMatchObject({
      state: 'pending',
      attempt: 2,
      checkpoint: { ranks: 2, location: expect.stringMatching(/on-signal\/$/) },
    });
    // In the store: one part per rank, each written by its own rank.
    const parts = readdirSync(w.storeRoot, { recursive: true, withFileTypes: true })
      .filter((e) => e.isFile() && e.name === 'state.json')
      .map((e) => join(e.parentPath, e.name))
      .filter((p) => p.includes(requeued.checkpoint!.location.split('/').filter(Boolean).at(-1)!));
    expect(parts.map((p) => [/rank-(\d)/.exec(p)?.[1], JSON.parse(readFileSync(p, 'utf8')).rank]).sort()).toEqual([
      ['0', '0'],
      ['1', '1'],
    ]);
    // Attempt 2 with the nodes swapped: rank 0 now runs on i-b, and still gets rank 0's part.
    await w.place('nlp.fsdp', ['i-b', 'i-a']);
    await b.heartbeat();
    await a.heartbeat();
    const startOf = (work: string) =>
      waitFor('the rank to print its start', () => {
        try {
          return w.output(work, 'nlp.fsdp', 2).find((l) => l.event === 'start');
        } catch {
          return undefined; // its log is not written yet
        }
      });
    const leader = await startOf(workB);
    expect(leader).toMatchObject({ rank: '0', resumedRank: '0' });
    expect(await startOf(workA)).toMatchObject({ rank: '1', resumedRank: '1' });
    expect(Number(leader.step)).toBeGreaterThan(0);
  });
});

describe('node agent: a save never writes into a complete checkpoint', () => {
  it('a job that always saves to latest/, its machine lost mid-upload, resumes from the previous complete save byte for byte', async () => {
    const w = world();
    // The machine dies during its second upload: that save's first file lands (S3 overwrites object by object), the rest never do.
    let uploads = 0;
    let tornAt: string | undefined;
    let die!: (e: Error) => void;
    const dead = new Promise<never>((_, reject) => (die = reject));
    dead.catch(() => undefined);
    const torn: CheckpointBlobs = {
      upload: async (localDir, location) => {
        if (++uploads === 1) return w.blobs.upload(localDir, location);
        const target = fileURLToPath(location);
        mkdirSync(target, { recursive: true });
        copyFileSync(join(localDir, 'payload.bin'), join(target, 'payload.bin'));
        tornAt = location;
        return dead;
      },
      download: (location, localDir) => w.blobs.download(location, localDir),
    };
    cleanups.push(() => die(new Error('the machine is gone')));
    const a = w.agent('i-a', { blobs: torn });
    const workB = dir('agent-b');
    const b = w.agent('i-b', { workDir: workB });
    await a.heartbeat();
    await b.heartbeat();
    await w.submit('nlp.latest', {
      command: ['node', COUNTER_JOB, '100000', '20', '10'],
      env: { CHECKPOINT_NAME: 'latest', CHECKPOINT_PAYLOAD_KIB: '256' },
    });
    await w.place('nlp.latest', ['i-a']);
    await a.heartbeat();
    const first = await waitFor('the first complete save', async () => {
      await a.watch();
      return (await w.jobs.get('nlp.latest'))!.checkpoint;
    });
    const firstDir = fileURLToPath(first.location);
    const saved = new Map(readdirSync(firstDir).map((f) => [f, readFileSync(join(firstDir, f))]));
    expect([...saved.keys()].sort()).toEqual(['payload.bin', 'state.json']);
    await waitFor('the second save to be torn', async () => {
      await a.watch();
      return tornAt;
    });
    // The torn save went to a folder of its own: the complete one is as it was.
    expect(tornAt).not.toBe(first.location);
    expect(tornAt).toMatch(/\/attempt-1\/latest@2\/$/);
    // The machine is lost (it is never heard from again): its attempt goes back to the queue, as reconcile does, and runs elsewhere.
    await applyJobEvent(
      w.jobs,
      'nlp.latest',
      { type: 'requeue', attempt: 1, reason: reason('node-lost', 'test: i-a stopped answering') },
      Date.now(),
    );
    expect((await w.checkpoints.latest('nlp.latest'))!.location).toBe(first.location);
    await w.place('nlp.latest', ['i-b']);
    await b.heartbeat();
    const start = await waitFor('attempt 2 to start', () => {
      try {
        return w.output(workB, 'nlp.latest', 2).find((l) => l.event === 'start');
      } catch {
        return undefined;
      }
    });
    expect(start.step).toBe(first.progressSec);
    const resumeDir = join(workB, 'jobs', safeJobName('nlp.latest'), 'attempt-2', 'resume');
    for (const [file, bytes] of saved) expect(readFileSync(join(resumeDir, file)).equals(bytes), file).toBe(true);
  });
});

describe('node agent: which checkpoint a new attempt resumes from', () => {
  it("resumes from the index's newest complete checkpoint, though the job's record names an older one (a save that completed after the requeue)", async () => {
    const w = world();
    const a = w.agent('i-r');
    await a.heartbeat();
    const job = await w.submit('nlp.late', { command: ['node', COUNTER_JOB, '40', '20', '0'] });
    // Two saves of attempt 1: step 10, which the record names, and step 20, whose upload ended after the attempt was requeued.
    const save = async (step: number, completedAtMs: number) => {
      const local = dir(`step-${step}`);
      writeFileSync(join(local, 'state.json'), JSON.stringify({ step }));
      const ref = {
        jobId: job.id,
        attempt: 1,
        location: `${w.checkpoints.locationFor(job.id, 1)}step-${step}/`,
        completedAtMs,
        progressSec: step,
      };
      await w.blobs.upload(local, ref.location);
      await w.checkpoints.markComplete(ref);
      return ref;
    };
    const older = await save(10, Date.now() - 60_000);
    await save(20, Date.now() - 30_000);
    await w.jobs.update({ ...job, attempt: 2, checkpoint: older, version: job.version + 1 }, job.version);
    await w.place(job.id, ['i-r']);
    await a.heartbeat();
    const workDir = (a as unknown as { config: { workDir: string } }).config.workDir;
    const start = await waitFor('the attempt to start', () => {
      try {
        return w.output(workDir, job.id, 2)[0];
      } catch {
        return undefined; // its output file is not there yet
      }
    });
    expect(start).toMatchObject({ event: 'start', step: 20 });
  });
});

describe('node agent: how often a job is asked to save', () => {
  it('hands the job the cadence its placement chose (the save price against the pool’s take-backs), not the spec’s longest gap', async () => {
    const w = world();
    const work = dir('agent-cadence');
    const workB = dir('agent-cadence-b');
    const a = w.agent('i-a', { workDir: work });
    const b = w.agent('i-b', { workDir: workB });
    await a.heartbeat();
    await b.heartbeat();
    await w.submit('nlp.risky', {
      command: ['node', COUNTER_JOB, '100000', '20', '20'],
      checkpoint: { intervalSec: 1800, gracePeriodSec: 10 },
    });
    await w.place('nlp.risky', ['i-a'], [0], [], {
      saves: { everySec: 420, hazardPerHour: 2.5, savePriceMicroUsd: 1_234_567, by: 'price' },
    });
    await w.submit('nlp.steady', {
      command: ['node', COUNTER_JOB, '100000', '20', '20'],
      checkpoint: { intervalSec: 1800, gracePeriodSec: 10 },
    });
    await w.place('nlp.steady', ['i-b']);
    await a.heartbeat();
    await b.heartbeat();
    const startOf = (jobId: string, workDir: string) =>
      waitFor(`${jobId} to start`, () => {
        try {
          return w.output(workDir, jobId, 1).find((l) => l.event === 'start');
        } catch {
          return undefined;
        }
      });
    expect((await startOf('nlp.risky', work)).saveEverySec).toBe('420');
    expect((await startOf('nlp.steady', workB)).saveEverySec).toBe('1800');
  });
});
