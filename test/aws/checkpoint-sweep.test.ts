import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CreateBucketCommand, ListObjectsV2Command, PutObjectCommand, S3Client } from '@aws-sdk/client-s3';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startS3rverProcess, type LocalS3 } from '../../bench/support/s3rver.ts';
import { checkpointSweepFor, S3CheckpointSweep } from '../../cloud/aws/checkpoint-sweep.ts';
import { MemoryCheckpointStore, MemoryJobStore } from '../../cloud/sim/memory-stores.ts';
import { dynamoStores } from '../../cloud/aws/dynamo-store.ts';
import { checkpointFolder, checkpointObjectExpired, isTerminal, JOB_STATES, type CheckpointRef, type Job } from '../../core/job.ts';
import { applyJobEvent } from '../../core/services/job-updates.ts';
import { CloudError } from '../../core/errors.ts';
import { plan } from '../../core/planner/planner.ts';
import { reconcile } from '../../core/reconcile/reconcile.ts';
import { DEFAULT_POLICY } from '../../core/snapshot.ts';
import { defaultTeamTags } from '../../cloud/sim/defaults.ts';
import { createSimEnvironment } from '../../cloud/sim/environment.ts';
import { aJob } from '../builders.ts';
import { startDynalite, type LocalDynamo } from '../support/dynalite.ts';

const DAY = 86_400_000;
const BUCKET = 'gpu-fleet-sweep-test';
const ROOT = `s3://${BUCKET}/checkpoints/`;

describe('the retention the checkpoint index derives (checkpointObjectExpired)', () => {
  const newest: CheckpointRef = {
    jobId: 'nlp.j',
    attempt: 1,
    location: `${ROOT}nlp.j/attempt-1/step-2/`,
    completedAtMs: 0,
    progressSec: 60,
  };
  it("never lets a live job's newest complete checkpoint go, however old, and keeps everything younger than the retention", () => {
    fc.assert(
      fc.property(
        fc.constantFrom(...JOB_STATES),
        fc.integer({ min: 0, max: 400 }),
        fc.integer({ min: 0, max: 400 }),
        fc.boolean(),
        (state, ageDays, endedDaysAgo, inNewest) => {
          const now = 1_800_000_000_000;
          const job: Job = { ...aJob({ id: 'nlp.j', state }), updatedAtMs: now - endedDaysAgo * DAY };
          const objectUri = inNewest ? `${newest.location}rank-0/model.pt` : `${ROOT}nlp.j/attempt-1/step-1/model.pt`;
          const gone = checkpointObjectExpired({
            objectUri,
            modifiedAtMs: now - ageDays * DAY,
            job,
            newest,
            nowMs: now,
            retentionMs: 30 * DAY,
          });
          if (ageDays < 30) expect(gone).toBe(false);
          if (inNewest && !isTerminal(state)) expect(gone).toBe(false);
          // Past the retention: older saves always go; an ended job's newest once it ended that long ago.
          if (ageDays > 30 && !inNewest) expect(gone).toBe(true);
          if (ageDays > 30 && inNewest && isTerminal(state)) expect(gone).toBe(endedDaysAgo >= 30);
        },
      ),
    );
  });
});

describe('the checkpoint sweep on an S3-compatible server (s3rver) and the index on dynalite', () => {
  let s3server: LocalS3;
  let s3: S3Client;
  let db: LocalDynamo;
  beforeAll(async () => {
    s3server = await startS3rverProcess(mkdtempSync(join(tmpdir(), 'sweep-s3-')));
    s3 = new S3Client({
      region: 'us-east-1',
      endpoint: s3server.endpoint,
      forcePathStyle: true,
      credentials: { accessKeyId: 'S3RVER', secretAccessKey: 'S3RVER' },
    });
    await s3.send(new CreateBucketCommand({ Bucket: BUCKET }));
    db = await startDynalite();
  });
  afterAll(async () => {
    s3.destroy();
    await s3server.close();
    await db.close();
  });

  it('deletes older saves, torn uploads, ended and unknown jobs’ checkpoints past the retention, and never a live job’s newest', async () => {
    const writtenAt = Date.now();
    const clock = { ms: writtenAt, nowMs: () => clock.ms };
    const tables = await db.createTables();
    const stores = dynamoStores(db.doc, tables, ROOT, clock);
    const put = (key: string) => s3.send(new PutObjectCommand({ Bucket: BUCKET, Key: key, Body: key }));
    const folder = (id: string, attempt: number) => checkpointFolder(ROOT, id, attempt);
    const keyOf = (uri: string) => uri.slice(`s3://${BUCKET}/`.length);
    // A live job (pending, held by its budget for months): its newest complete save, an older one, and a torn one.
    const live = aJob({ id: 'nlp.held', attempt: 2 });
    await stores.jobs.create(live);
    const liveNewest = {
      jobId: live.id,
      attempt: 1,
      location: `${folder(live.id, 1)}latest@2/`,
      completedAtMs: writtenAt,
      progressSec: 600,
    };
    await stores.checkpoints.markComplete(liveNewest);
    await put(`${keyOf(folder(live.id, 1))}latest/model.pt`);
    await put(`${keyOf(liveNewest.location)}model.pt`);
    await put(`${keyOf(liveNewest.location)}sub/optim.pt`);
    await put(`${keyOf(folder(live.id, 2))}latest/model.pt`); // torn: never completed
    // An ended job, and a folder whose job is no longer on record.
    const done = aJob({ id: 'cv.done', attempt: 1 });
    await stores.jobs.create(done);
    const doneNewest = { jobId: done.id, attempt: 1, location: `${folder(done.id, 1)}step-9/`, completedAtMs: writtenAt, progressSec: 60 };
    await stores.checkpoints.markComplete(doneNewest);
    await applyJobEvent(stores.jobs, done.id, { type: 'cancel' }, writtenAt);
    expect(isTerminal((await stores.jobs.get(done.id))!.state)).toBe(true);
    await put(`${keyOf(doneNewest.location)}model.pt`);
    await put(`${keyOf(folder('nlp.gone', 3))}step-1/model.pt`);
    // A key that is no job folder gpu-fleet wrote is left alone.
    await put('checkpoints/%E0%A4%A/x');
    const keys = async () =>
      ((await s3.send(new ListObjectsV2Command({ Bucket: BUCKET, Prefix: 'checkpoints/' }))).Contents ?? []).map((o) => o.Key!).sort();
    const before = await keys();
    expect(before).toHaveLength(7);

    // One job folder a sweep (no time to spare): the position is kept between sweeps, and the root wraps.
    const sweep = new S3CheckpointSweep({
      s3,
      root: ROOT,
      jobs: stores.jobs,
      checkpoints: stores.checkpoints,
      doc: db.doc,
      table: tables.control,
      clock,
      retentionDays: 30,
      budgetMs: 0,
    });
    // Within the retention, nothing goes.
    clock.ms = writtenAt + 10 * DAY;
    const young = [];
    for (let i = 0; i < 4; i++) young.push(await sweep.sweep());
    expect(young.reduce((n, s) => n + s.deleted, 0)).toBe(0);
    expect(await keys()).toEqual(before);

    // 40 days on: the held job's newest stays; all else of it, the ended job's and the unknown job's go.
    clock.ms = writtenAt + 40 * DAY;
    let deleted = 0;
    let jobs = 0;
    // The young sweeps stopped after the last folder: the next one finds the root's end and wraps, then a round follows.
    for (let i = 0; i < 8 && jobs < 4; i++) {
      const s = await sweep.sweep();
      deleted += s.deleted;
      jobs += s.jobs;
    }
    expect(deleted).toBe(4);
    expect(jobs).toBe(4);
    expect(await keys()).toEqual(
      ['checkpoints/%E0%A4%A/x', `${keyOf(liveNewest.location)}model.pt`, `${keyOf(liveNewest.location)}sub/optim.pt`].sort(),
    );
  });
});

describe('reconcile and the checkpoint sweep', () => {
  it('sweeps once per reconcile that acts (not on a dry run), and a sweep the cloud fails never fails the reconcile', async () => {
    const e = createSimEnvironment({
      startMs: Date.UTC(2026, 10, 2),
      seed: 1,
      teams: ['nlp'],
      teamTags: defaultTeamTags(['nlp']),
      bootSec: 60,
      groups: [{ id: 'v100-od', instanceTypes: ['p3.2xlarge'], zones: ['us-west-2a'], capacityType: 'on-demand', minSize: 0, maxSize: 2 }],
    });
    let calls = 0;
    let fail = false;
    const checkpointSweep = {
      sweep: async () => {
        calls++;
        if (fail) throw new CloudError('throttled', 'SlowDown: reduce your request rate', { operation: 'list checkpoint job folders' });
        return { jobs: 0, deleted: 0, wrapped: true };
      },
    };
    const ports = { ...e.ports, checkpointSweep };
    await reconcile(ports, { planner: plan, policy: DEFAULT_POLICY, holder: 'a', dryRun: true });
    expect(calls).toBe(0);
    expect((await reconcile(ports, { planner: plan, policy: DEFAULT_POLICY, holder: 'a' })).status).toBe('done');
    expect(calls).toBe(1);
    fail = true;
    e.clock.advanceBy(60_000);
    expect((await reconcile(ports, { planner: plan, policy: DEFAULT_POLICY, holder: 'a' })).status).toBe('done');
    expect(calls).toBe(2);
  });
});

describe('which fleets sweep (checkpointSweepFor, built by the reconcile entry alone)', () => {
  it('sweeps an S3 root with a retention the stack set; nothing without one, or for a file:// root', () => {
    const deps = {
      jobs: new MemoryJobStore(),
      checkpoints: new MemoryCheckpointStore({ nowMs: () => 0 }),
      doc: {} as never,
      clock: { nowMs: () => 0 },
    };
    const config = { region: 'us-west-2', checkpointBucket: 'gpu-fleet-checkpoints', tables: { control: 'c' } };
    const s3 = new S3Client({ region: 'us-west-2' });
    expect(checkpointSweepFor({ ...config, checkpointRetentionDays: 30 }, deps, s3)).toBeInstanceOf(S3CheckpointSweep);
    expect(checkpointSweepFor(config, deps, s3)).toBeUndefined();
    expect(checkpointSweepFor({ ...config, checkpointBucket: 'file:///mnt/ckpt/', checkpointRetentionDays: 30 }, deps, s3)).toBeUndefined();
  });
});
