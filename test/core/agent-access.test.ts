import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { checkpointFolder, finishCancel, transition, type CheckpointRef, type Job, type JobEvent, type SaveMeter } from '../../core/job.ts';
import { SAVE_PART_MAX_REQUESTS, saveSizeOf } from '../../core/bytes.ts';
import type { CheckpointStore } from '../../core/ports.ts';
import { reason, type Reason } from '../../core/reason.ts';
import { outOfMemory } from '../../core/container-limits.ts';
import type { AttemptGpuUse } from '../../core/gpu-use.ts';
import {
  AGENT_CLOCK_SKEW_MS,
  AgentRefused,
  agentView,
  agentCheckpointReadProblem,
  agentCheckpointWriteProblem,
  agentJobWriteProblem,
  attemptOfLocation,
  mayReadJob,
} from '../../core/services/agent-access.ts';
import { aJob } from '../builders.ts';

const ROOT = 's3://ckpt-bucket/checkpoints/';
const folder = (jobId: string, attempt: number) => checkpointFolder(ROOT, jobId, attempt);
const T = 1_800_000_000_000;
const N0 = 'i-0aaaaaaaa0';
const N1 = 'i-0aaaaaaaa1';
const OTHER = 'i-0bbbbbbbb9';

/** A job placed on a gang of two (N0 leads), in one of the states an agent writes from. */
function placedJob(state: 'placed' | 'running' | 'checkpointing', extra: Partial<Job> = {}): Job {
  const pending = aJob({ id: 'nlp.j1', team: 'nlp', attempt: 2, version: 4, spec: { nodes: 2 } });
  return {
    ...pending,
    state,
    placement: {
      capacityType: 'spot',
      nodes: [
        { nodeId: N0, gpuIndices: [0] },
        { nodeId: N1, gpuIndices: [0] },
      ],
    },
    placedAtMs: T - 600_000,
    ...(state !== 'placed' ? { startedAtMs: T - 590_000, firstStartedAtMs: T - 590_000 } : {}),
    ...(state === 'checkpointing' ? { checkpointRequestedAtMs: T - 5_000, checkpointReason: reason('interrupted', 'spot') } : {}),
    updatedAtMs: T - 1_000,
    ...extra,
  };
}
const cp = (attempt: number, at: number): CheckpointRef => ({
  jobId: 'nlp.j1',
  attempt,
  location: `${folder('nlp.j1', attempt)}step-9/`,
  completedAtMs: at,
  progressSec: 900,
  ranks: 2,
});

/** The events an agent sends, and who may send them. */
function agentEvents(job: Job): { event: JobEvent | 'finish-cancel'; leaderOnly: boolean }[] {
  const a = job.attempt;
  return [
    { event: { type: 'start', attempt: a }, leaderOnly: true },
    { event: { type: 'checkpoint-requested', attempt: a, reason: reason('interrupted', 'spot') }, leaderOnly: false },
    { event: { type: 'checkpoint-done', checkpoint: cp(a, T - 100) }, leaderOnly: false },
    { event: { type: 'requeue', attempt: a, reason: reason('interrupted', 'spot') }, leaderOnly: false },
    { event: { type: 'succeed', attempt: a }, leaderOnly: true },
    { event: { type: 'fail', attempt: a, exitCode: 3 }, leaderOnly: false },
    { event: { type: 'fail', attempt: a, exitCode: 137, failure: outOfMemory(668) }, leaderOnly: false },
    { event: 'finish-cancel', leaderOnly: true },
  ];
}
function apply(job: Job, e: JobEvent | 'finish-cancel', at: number) {
  return e === 'finish-cancel' ? finishCancel(job, at) : transition(job, e, at);
}
/** Through JSON, as the write reaches the API. */
const wire = (j: Job): Job => JSON.parse(JSON.stringify(j)) as Job;

describe('what an agent may write to a job', () => {
  it('accepts every write an agent makes, from the rank that may make it, and nothing from a machine that does not hold the job', () => {
    fc.assert(
      fc.property(
        fc.constantFrom('placed', 'running', 'checkpointing' as const),
        fc.boolean(),
        fc.integer({ min: -AGENT_CLOCK_SKEW_MS, max: AGENT_CLOCK_SKEW_MS }),
        (state, cancelRequested, skew) => {
          const stored = placedJob(state as 'placed', cancelRequested ? { cancelRequested: true } : {});
          for (const { event, leaderOnly } of agentEvents(stored)) {
            const at = T + skew;
            const r = apply(stored, event, at);
            if (!r.ok || !r.changed) continue;
            const next = wire(r.job);
            const latest = event !== 'finish-cancel' && event.type === 'checkpoint-done' ? event.checkpoint : undefined;
            expect(agentJobWriteProblem(stored, next, N0, T, latest), JSON.stringify(event)).toBeUndefined();
            const asFollower = agentJobWriteProblem(stored, next, N1, T, latest);
            if (!leaderOnly) expect(asFollower, JSON.stringify(event)).toBeUndefined();
            expect(agentJobWriteProblem(stored, next, OTHER, T, latest)).toMatch(/does not hold job nlp\.j1/);
          }
        },
      ),
    );
  });

  it('refuses a success or a start from a follower rank: only the leader ends or starts a gang', () => {
    const stored = placedJob('running');
    const done = wire((transition(stored, { type: 'succeed', attempt: 2 }, T) as { job: Job }).job);
    expect(agentJobWriteProblem(stored, done, N1, T, undefined)).toMatch(
      /only the first rank .* succeeded; machine i-0aaaaaaaa1 is rank 1/,
    );
    const started = wire((transition(placedJob('placed'), { type: 'start', attempt: 2 }, T) as { job: Job }).job);
    expect(agentJobWriteProblem(placedJob('placed'), started, N1, T, undefined)).toMatch(/only the first rank/);
  });

  it('takes a failure’s reason only as one an agent may know (out of memory), never another code or a long text', () => {
    const stored = placedJob('running');
    const failWith = (failure: Reason) =>
      wire((transition(stored, { type: 'fail', attempt: 2, exitCode: 137, failure }, T) as { job: Job }).job);
    expect(agentJobWriteProblem(stored, failWith(outOfMemory(512)), N1, T, undefined)).toBeUndefined();
    expect(agentJobWriteProblem(stored, failWith(reason('budget-stop', 'its team’s budget')), N0, T, undefined)).toMatch(
      /an agent may give a failure only as one of out-of-memory/,
    );
    expect(agentJobWriteProblem(stored, failWith(reason('out-of-memory', 'x'.repeat(501))), N0, T, undefined)).toMatch(
      /at most 500 characters/,
    );
  });

  it('refuses an exit code or a reason of the wrong shape, which the transition would store as given (issue 63: found by the API fuzz test)', () => {
    const stored = placedJob('running');
    const failed = wire((transition(stored, { type: 'fail', attempt: 2, exitCode: 3 }, T) as { job: Job }).job);
    for (const exitCode of ['', '3', 1.5, 2 ** 40, null] as unknown as number[])
      expect(agentJobWriteProblem(stored, { ...failed, exitCode }, N0, T, undefined), String(exitCode)).toMatch(
        /^an exit code is a whole number/,
      );
    const requeued = wire(
      (transition(stored, { type: 'requeue', attempt: 2, reason: reason('interrupted', 'spot') }, T) as { job: Job }).job,
    );
    expect(agentJobWriteProblem(stored, requeued, N0, T, undefined)).toBeUndefined();
    for (const bad of [{ code: 7, message: 'x' }, { code: 'interrupted' }, { code: 'Interrupted!', message: 'x' }, 'spot'])
      expect(agentJobWriteProblem(stored, { ...requeued, requeueReason: bad as never }, N0, T, undefined), JSON.stringify(bad)).toMatch(
        /^requeueReason: a reason is/,
      );
  });

  it('refuses any change beyond the transition: spec, team, usage, holdings, priority, attempt, placement, or a time far from the API’s', () => {
    const stored = placedJob('running');
    const ok = wire((transition(stored, { type: 'fail', attempt: 2, exitCode: 3 }, T) as { job: Job }).job);
    expect(agentJobWriteProblem(stored, ok, N0, T, undefined)).toBeUndefined();
    const tampered: Job[] = [
      { ...ok, spec: { ...ok.spec, image: 'evil/miner:1' } },
      { ...ok, spec: { ...ok.spec, priority: 1000 } },
      { ...ok, team: 'vision' },
      { ...ok, usage: { ...ok.usage!, heldSec: 1 } },
      { ...ok, heldAttempts: [] },
      { ...ok, attempt: 9 },
      { ...ok, placement: { capacityType: 'on-demand', nodes: [{ nodeId: N0, gpuIndices: [0, 1, 2, 3] }] } },
      { ...ok, endedAtMs: T - 3_600_000 },
    ];
    for (const next of tampered)
      expect(agentJobWriteProblem(stored, next, N0, T, undefined), JSON.stringify(next)).toMatch(/not a change an agent makes/);
    const late = wire((transition(stored, { type: 'fail', attempt: 2, exitCode: 3 }, T + AGENT_CLOCK_SKEW_MS + 1) as { job: Job }).job);
    expect(agentJobWriteProblem(stored, late, N0, T, undefined)).toMatch(/more than 300 s from the API's clock/);
    expect(agentJobWriteProblem(stored, { ...ok, id: 'cv.other' }, N0, T, undefined)).toMatch(/is for job cv\.other/);
  });

  it('takes the attempt’s measured GPU use with the event that ends it, checked for shape, and nothing that rewrites an earlier attempt’s', () => {
    const earlier: AttemptGpuUse = {
      attempt: 1,
      rank: 0,
      looks: 40,
      devices: 1,
      busyDevices: 1,
      model: 'T4',
      deviceMemoryMiB: 15_360,
      peakMemoryMiB: 3_000,
      meanSmPct: 20,
      p95SmPct: 31,
    };
    const stored = placedJob('running', {
      usage: {
        attempts: 1,
        heldSec: 600,
        gpuSec: 600,
        spotSec: 600,
        costMicroUsd: 1,
        onDemandMicroUsd: 1,
        reworkSec: 0,
        gpuUse: [earlier],
      },
    });
    const gpuUse: AttemptGpuUse = { ...earlier, attempt: 2, looks: 12, peakMemoryMiB: 4_100, p95SmPct: 44 };
    const ends: (JobEvent | 'finish-cancel')[] = [
      { type: 'succeed', attempt: 2, gpuUse },
      { type: 'fail', attempt: 2, exitCode: 3, gpuUse },
      { type: 'requeue', attempt: 2, reason: reason('interrupted', 'spot'), gpuUse },
    ];
    for (const e of ends) {
      const next = wire((transition(stored, e as JobEvent, T) as { job: Job }).job);
      expect(next.usage!.gpuUse).toEqual([earlier, gpuUse]);
      expect(agentJobWriteProblem(stored, next, N0, T, undefined), JSON.stringify(e)).toBeUndefined();
    }
    const cancelling = { ...stored, cancelRequested: true };
    const cancelled = wire((finishCancel(cancelling, T, gpuUse) as { job: Job }).job);
    expect(agentJobWriteProblem(cancelling, cancelled, N0, T, undefined)).toBeUndefined();
    // Use for another attempt is not taken; figures no agent measures are refused, saying what is wrong.
    expect(
      (transition(stored, { type: 'succeed', attempt: 2, gpuUse: { ...gpuUse, attempt: 1 } }, T) as { job: Job }).job.usage!.gpuUse,
    ).toEqual([earlier]);
    const bad = wire((transition(stored, { type: 'succeed', attempt: 2, gpuUse: { ...gpuUse, p95SmPct: 150 } }, T) as { job: Job }).job);
    expect(agentJobWriteProblem(stored, bad, N0, T, undefined)).toMatch(/p95SmPct must be a percentage from 0 to 100, got 150/);
    const ok = wire((transition(stored, { type: 'succeed', attempt: 2, gpuUse }, T) as { job: Job }).job);
    const rewritten = { ...ok, usage: { ...ok.usage!, gpuUse: [{ ...earlier, peakMemoryMiB: 1 }, gpuUse] } };
    expect(agentJobWriteProblem(stored, rewritten, N0, T, undefined)).toMatch(/not a change an agent makes/);
  });

  it('takes a replica’s readiness from the machine that runs it, and from no other; not for a job that is no replica', () => {
    const pending = aJob({
      id: 'nlp.chat-r1',
      team: 'nlp',
      spec: {
        name: 'chat-r1',
        service: { port: 8000, replicas: { min: 1, max: 2 }, targets: [{ metric: 'requests-per-second', perReplica: 2 }] },
      },
    });
    const replica: Job = {
      ...pending,
      state: 'running',
      placement: { capacityType: 'spot', nodes: [{ nodeId: N0, gpuIndices: [0] }] },
      startedAtMs: T - 60_000,
      updatedAtMs: T - 1_000,
    };
    const up = transition(replica, { type: 'replica-health', attempt: 1, answering: true }, T);
    expect(up.ok && up.changed && up.job.replicaHealth).toEqual({ attempt: 1, answering: true, sinceMs: T });
    expect(agentJobWriteProblem(replica, (up as { job: Job }).job, N0, T, undefined)).toBeUndefined();
    expect(agentJobWriteProblem(replica, (up as { job: Job }).job, OTHER, T, undefined)).toMatch(/does not hold job nlp.chat-r1/);
    // The same finding again changes nothing; an older attempt's is ignored.
    const again = transition((up as { job: Job }).job, { type: 'replica-health', attempt: 1, answering: true }, T + 5);
    expect(again.ok && again.changed).toBe(false);
    expect(transition(replica, { type: 'replica-health', attempt: 0, answering: true }, T)).toMatchObject({ ok: true, changed: false });
    const batch = placedJob('running');
    expect(transition(batch, { type: 'replica-health', attempt: 2, answering: true }, T)).toEqual({
      ok: false,
      error: 'job nlp.j1 is not a service replica: it has no readiness to report',
    });
    // A readiness the agent makes up (dated otherwise than the write) is not the transition.
    const forged = { ...(up as { job: Job }).job, replicaHealth: { attempt: 1, answering: true, sinceMs: T - 3_600_000 } };
    expect(agentJobWriteProblem(replica, forged, N0, T, undefined)).toMatch(/not a change an agent makes/);
  });

  it('attaches only the job’s newest complete checkpoint: not one the agent made up, nor another job’s', () => {
    const stored = placedJob('running');
    const made = cp(2, T - 100);
    const next = wire((transition(stored, { type: 'checkpoint-done', checkpoint: made }, T) as { job: Job }).job);
    expect(agentJobWriteProblem(stored, next, N1, T, made)).toBeUndefined();
    expect(agentJobWriteProblem(stored, next, N1, T, undefined)).toMatch(/not its newest complete checkpoint/);
    expect(agentJobWriteProblem(stored, next, N1, T, { ...made, progressSec: 10 })).toMatch(/not its newest complete checkpoint/);
  });
});

describe('what an agent may read, and which checkpoint folders it may write', () => {
  it('reads a job on its work list or one it holds or held, and no other', () => {
    const job = placedJob('running', { heldAttempts: [{ attempt: 1, nodes: [{ nodeId: OTHER, milliGpu: 1000 }], fromMs: 0, toMs: 1 }] });
    expect(mayReadJob(job, N1, undefined)).toBe(true);
    expect(mayReadJob(job, OTHER, undefined)).toBe(true); // it ran attempt 1
    expect(mayReadJob(job, 'i-0ccccccccc', undefined)).toBe(false);
    const record = {
      instanceId: 'i-0ccccccccc',
      groupId: 'g',
      registeredAtMs: 0,
      lastHeartbeatAtMs: 0,
      gpus: [],
      healthy: true,
      assigned: { 'nlp.j1': 3 },
    };
    expect(mayReadJob(job, 'i-0ccccccccc', record)).toBe(true); // placed there next
  });

  it('writes only the folders of attempts it holds or held, with no way out of them', () => {
    const job = placedJob('running', { heldAttempts: [{ attempt: 1, nodes: [{ nodeId: OTHER, milliGpu: 1000 }], fromMs: 0, toMs: 1 }] });
    expect(agentCheckpointWriteProblem(job, N0, `${folder('nlp.j1', 2)}step-9/`, folder)).toBeUndefined();
    expect(agentCheckpointWriteProblem(job, N0, `${folder('nlp.j1', 2)}step-9/rank-1/`, folder)).toBeUndefined();
    expect(agentCheckpointWriteProblem(job, OTHER, `${folder('nlp.j1', 1)}step-1/`, folder)).toBeUndefined(); // a late upload of the attempt it ran
    expect(agentCheckpointWriteProblem(job, N0, `${folder('nlp.j1', 1)}step-1/`, folder)).toMatch(/did not hold attempt 1/);
    expect(agentCheckpointWriteProblem(job, OTHER, `${folder('nlp.j1', 2)}x/`, folder)).toMatch(/did not hold attempt 2/);
    for (const bad of [
      `${folder('nlp.j1', 2)}../../cv.j9/attempt-1/`,
      `${folder('nlp.j1', 2)}a/./b/`,
      `${folder('nlp.j1', 2)}a//b/`,
      `${folder('cv.j9', 2)}x/`,
      `${ROOT}nlp.j1/attempt-0/`,
      `${ROOT}nlp.j1/attempt-02/`,
      `${ROOT}nlp.j1/`,
      's3://other-bucket/checkpoints/nlp.j1/attempt-2/',
    ])
      expect(agentCheckpointWriteProblem(job, N0, bad, folder), bad).toMatch(/is not a checkpoint folder of job nlp\.j1/);
    expect(attemptOfLocation('nlp.j1', `${folder('nlp.j1', 12)}a/b/`, folder)).toBe(12);
  });

  it('reads the checkpoint folders of a job it may read, and no others', () => {
    const job = placedJob('running');
    expect(agentCheckpointReadProblem(job, N0, undefined, `${folder('nlp.j1', 1)}step-1/`, folder)).toBeUndefined();
    expect(agentCheckpointReadProblem(job, OTHER, undefined, `${folder('nlp.j1', 1)}step-1/`, folder)).toMatch(/has no part in job/);
    expect(agentCheckpointReadProblem(job, N0, undefined, `${folder('cv.j9', 1)}step-1/`, folder)).toMatch(/not a checkpoint folder/);
  });
});

describe('the stores as one machine’s agent sees them (agentView)', () => {
  async function world(labels?: Record<string, string>) {
    const { MemoryCheckpointStore, MemoryJobStore, MemoryNodeStore } = await import('../../cloud/sim/memory-stores.ts');
    const stores = {
      jobs: new MemoryJobStore(),
      nodes: new MemoryNodeStore(),
      checkpoints: new MemoryCheckpointStore({ nowMs: () => T }, ROOT),
    };
    const placed = placedJob('running');
    const job = labels ? { ...placed, spec: { ...placed.spec, labels } } : placed;
    await stores.jobs.create(job);
    for (const n of [N0, N1, OTHER]) {
      await stores.nodes.register({ instanceId: n, groupId: 'g', registeredAtMs: 0, lastHeartbeatAtMs: 0, gpus: [], healthy: true });
    }
    await stores.nodes.assign(N0, job.id, job.attempt);
    await stores.nodes.assign(N1, job.id, job.attempt);
    const clock = { nowMs: () => T };
    return { stores, job, as: (n: string) => agentView({ ...stores, history: stores.checkpoints }, n, clock) };
  }

  it('records a checkpoint part only for the machine’s own rank, with as many parts as the attempt has machines', async () => {
    const { as, stores } = await world();
    const part = cp(2, T - 100);
    await expect(as(N1).checkpoints.markComplete(part, 0)).rejects.toThrow(/machine i-0aaaaaaaa1 is not rank 0 of attempt 2/);
    await expect(as(N0).checkpoints.markComplete({ ...part, ranks: 1 }, 0)).rejects.toThrow(/ran on 2 machines; .* not 1/);
    await expect(as(OTHER).checkpoints.markComplete(part, 0)).rejects.toThrow(AgentRefused);
    await expect(as(N0).checkpoints.markComplete({ ...part, attempt: 1 }, 0)).rejects.toThrow(/is of attempt 2, not 1/);
    // A completion dated ahead of the API's clock (a clock running fast, or a lie) would outvote every later checkpoint.
    await expect(as(N0).checkpoints.markComplete({ ...part, completedAtMs: T + 3_600_000 }, 0)).rejects.toThrow(
      /is dated 1800003600000, more than 300 s from the API's clock \(1800000000000\)/,
    );
    await expect(as(N0).checkpoints.markComplete({ ...part, progressSec: -5 }, 0)).rejects.toThrow(/gives progress -5/);
    expect(await as(N0).checkpoints.markComplete(part, 0)).toBe(false);
    expect(await as(N1).checkpoints.markComplete(part, 1)).toBe(true);
    expect(await stores.checkpoints.latest('nlp.j1')).toEqual(part);
  });

  it('refuses progress the attempt cannot have made, and the newest honest save stays the newest', async () => {
    const { as, stores } = await world();
    // Placed 600 s ago, resumed from nothing: at most 600 s of work, plus the 300 s of clock skew allowed.
    const part = cp(2, T - 100);
    for (const progressSec of [Number.MAX_SAFE_INTEGER, 901])
      await expect(
        as(N0).checkpoints.markComplete({ ...part, location: `${folder('nlp.j1', 2)}lie-${progressSec}/`, progressSec }, 0),
      ).rejects.toThrow(`claims ${progressSec} s of progress; attempt 2 can have made at most 900 s`);
    expect(await stores.checkpoints.latest('nlp.j1')).toBeUndefined();
    expect(await as(N0).checkpoints.markComplete(part, 0)).toBe(false);
    expect(await as(N1).checkpoints.markComplete(part, 1)).toBe(true);
    // The honest save (900 s) is the newest; a later claim is bounded from it: 900 + 600 + 300.
    const later = { ...part, location: `${folder('nlp.j1', 2)}step-10/` };
    await expect(as(N0).checkpoints.markComplete({ ...later, progressSec: 1801 }, 0)).rejects.toThrow(/at most 1800 s/);
    expect(await stores.checkpoints.latest('nlp.j1')).toEqual(part);
    expect(await as(N0).checkpoints.markComplete({ ...later, progressSec: 1500 }, 0)).toBe(false);
    expect(await as(N1).checkpoints.markComplete({ ...later, progressSec: 1500 }, 1)).toBe(true);
    expect((await stores.checkpoints.latest('nlp.j1'))!.progressSec).toBe(1500);
  });

  it('bills a save’s bytes to the job’s team and project from the records, from the machine’s site, never from the call', async () => {
    const { as, stores } = await world({ project: 'llm-7b' });
    for (const [n, zone] of [
      [N0, 'us-east-1a'],
      [N1, 'us-east-1b'],
    ] as const)
      await stores.nodes.noteMeter(n, {
        offeringId: `aws/${zone}/p4d.24xlarge/spot`,
        priceMicroUsdPerHour: 1,
        launchedAtMs: 0,
        gpuCount: 8,
      });
    const size = saveSizeOf([10 * 2 ** 30, 4096]);
    const part: CheckpointRef = { ...cp(2, T - 100), size };
    for (const bad of [
      { ...size, bytes: -1 },
      { ...size, bytes: 1.5 },
      { ...size, writeRequests: SAVE_PART_MAX_REQUESTS + 1 },
      { ...size, bytes: '10' as unknown as number },
    ])
      await expect(as(N0).checkpoints.markComplete({ ...part, size: bad }, 0)).rejects.toThrow(
        /size\.\w+ is .*; it must be a whole number from 0 to/,
      );
    expect(await as(N0).checkpoints.markComplete(part, 0)).toBe(false);
    // A meter passed by the caller is no part of what the machine may say.
    const forged: SaveMeter = { owner: { jobId: 'cv.x', team: 'cv' } };
    expect(await (as(N1).checkpoints.markComplete as CheckpointStore['markComplete'])(part, 1, forged)).toBe(true);
    const [log] = await stores.checkpoints.byteLogs(0);
    expect(log!.owner).toEqual({ jobId: 'nlp.j1', team: 'nlp', project: 'llm-7b' });
    expect(log!.saves).toEqual([
      {
        location: part.location,
        bytes: 2 * size.bytes,
        writeRequests: 2 * size.writeRequests,
        readRequests: 2 * size.readRequests,
        parts: 2,
        savedAtMs: T,
        machine: { cloud: 'aws', region: 'us-east-1', zone: 'us-east-1b' },
      },
    ]);
    // A read back is noted once per attempt and machine, a rank's part as its share; a refused read is not noted.
    await expect(as(OTHER).readCheckpoint('nlp.j1', `${part.location}rank-0/`)).rejects.toThrow(AgentRefused);
    await as(N0).readCheckpoint('nlp.j1', `${part.location}rank-0/`);
    await as(N0).readCheckpoint('nlp.j1', `${part.location}rank-0/`);
    const reads = (await stores.checkpoints.byteLogs(0))[0]!.saves[0]!.reads;
    expect(reads).toEqual([
      {
        key: `2/${N0}`,
        atMs: T,
        bytes: size.bytes,
        readRequests: size.readRequests,
        machine: { cloud: 'aws', region: 'us-east-1', zone: 'us-east-1a' },
      },
    ]);
  });

  it('never lets a machine write into the newest complete checkpoint: each save takes a folder of its own', async () => {
    const { as } = await world();
    const part = cp(2, T - 100);
    await as(N0).checkpoints.markComplete(part, 0);
    await as(N1).checkpoints.markComplete(part, 1);
    await expect(as(N0).checkCheckpointWrite('nlp.j1', `${part.location}rank-0/`)).rejects.toThrow(
      /is in the newest complete checkpoint of job nlp.j1; a save goes to a folder of its own/,
    );
    await expect(as(N0).checkCheckpointWrite('nlp.j1', `${folder('nlp.j1', 2)}step-9@2/rank-0/`)).resolves.toBeUndefined();
  });

  it('takes a job’s folders under another site’s root (a GCP region’s bucket) as its own, and no other root', async () => {
    const { stores } = await world();
    const GS = 'gs://fleet-us-central1/checkpoints/';
    const view = (n: string, otherRoots?: readonly string[]) =>
      agentView({ ...stores, history: stores.checkpoints, ...(otherRoots ? { otherRoots } : {}) }, n, { nowMs: () => T });
    const there = `${GS}nlp.j1/attempt-2/step-3/`;
    // Without the root on record, a gs:// folder is no folder of the job's.
    await expect(view(N0).checkCheckpointWrite('nlp.j1', there)).rejects.toThrow(/is not a checkpoint folder of job nlp.j1/);
    await expect(view(N0, [GS]).checkCheckpointWrite('nlp.j1', there)).resolves.toBeUndefined();
    await expect(view(N0, [GS]).checkCheckpointRead('nlp.j1', there)).resolves.toBeUndefined();
    // The same holding rules as under the index's root: another job's folder there, or a machine with no part in the job.
    await expect(view(N0, [GS]).checkCheckpointRead('nlp.j1', `${GS}vision.j9/attempt-1/s/`)).rejects.toThrow(/not a checkpoint folder/);
    await expect(view(OTHER, [GS]).checkCheckpointRead('nlp.j1', there)).rejects.toThrow(/has no part in job nlp.j1/);
    await expect(view(N0, [GS]).checkCheckpointWrite('nlp.j1', `gs://another-bucket/checkpoints/nlp.j1/attempt-2/s/`)).rejects.toThrow(
      /is not a checkpoint folder of job nlp.j1/,
    );
    // A save there is recorded like one in the index's root.
    const save = { ...cp(2, T - 100), location: there };
    expect(await view(N0, [GS]).checkpoints.markComplete(save, 0)).toBe(false);
    expect(await view(N1, [GS]).checkpoints.markComplete(save, 1)).toBe(true);
    expect((await stores.checkpoints.latest('nlp.j1'))?.location).toBe(there);
  });

  it('still records a late part of an attempt the machine held, after the job moved on', async () => {
    const { as, stores, job } = await world();
    const moved = transition(job, { type: 'requeue', attempt: 2, reason: reason('interrupted', 'spot') }, T - 10);
    await stores.jobs.update((moved as { job: Job }).job, job.version);
    const late: CheckpointRef = { ...cp(2, T - 50), ranks: 2 };
    expect(await as(N1).checkpoints.markComplete(late, 1)).toBe(false);
    await expect(as(N1).jobs.update({ ...(moved as { job: Job }).job, version: 99 }, 5)).rejects.toThrow(/does not hold job/);
  });

  it('writes only its own record, at the view’s clock, and reads another’s only when they share a job', async () => {
    const { as, stores } = await world();
    await expect(as(N0).nodes.heartbeat(N1, T)).rejects.toThrow(/may not send the heartbeat of machine i-0aaaaaaaa1/);
    await expect(as(N0).nodes.markDraining(OTHER, { sinceMs: T, reason: 'x', deadlineMs: T })).rejects.toThrow(AgentRefused);
    await expect(as(N0).nodes.unassign(N1, 'nlp.j1', 2)).rejects.toThrow(AgentRefused);
    await expect(as(N0).nodes.list()).rejects.toThrow(/not something a node agent does/);
    expect(await as(N0).nodes.heartbeat(N0, 5)).toBe(true);
    expect((await stores.nodes.get(N0))!.lastHeartbeatAtMs).toBe(T);
    expect((await as(N1).nodes.get(N0))!.instanceId).toBe(N0); // its gang's leader
    await expect(as(OTHER).nodes.get(N0)).rejects.toThrow(/shares no job/);
    // A drain mark with a lifecycle hook is the control plane's: the agent's drain carries none.
    await as(N0).nodes.markDraining(N0, { sinceMs: T, reason: 'x', deadlineMs: T + 1, lifecycle: { groupId: 'g', hookName: 'h' } });
    expect((await stores.nodes.get(N0))!.draining).toEqual({ sinceMs: T, reason: 'x', deadlineMs: T + 1 });
  });
});
