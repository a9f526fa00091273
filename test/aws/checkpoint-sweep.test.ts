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
import {
  checkpointFolder,
  checkpointObjectExpired,
  CheckpointRefused,
  forgettable,
  isTerminal,
  NO_SAVES,
  type CheckpointRef,
  type Job,
  type RetainedSaves,
  type SaveMeter,
} from '../../core/job.ts';
import { SAVE_LOG_MAX, saveSizeOf } from '../../core/bytes.ts';

const GIB = 2 ** 30;
import { resumePoint } from '../../core/services/node-rules.ts';
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
  const save = (step: number, completedAtMs = 0): CheckpointRef => ({
    jobId: 'nlp.j',
    attempt: 1,
    location: `${ROOT}nlp.j/attempt-1/step-${step}/`,
    completedAtMs,
    progressSec: step * 60,
  });
  const now = 1_800_000_000_000;
  const saves: RetainedSaves = {
    newest: save(4),
    previous: save(3),
    replacedAtMs: now - 30 * 60_000,
    superseded: [save(1).location, save(2).location],
  };
  const expired = (objectUri: string, state: Job['state'], o: { modifiedAgoMs?: number; endedAgoMs?: number; held?: RetainedSaves } = {}) =>
    checkpointObjectExpired({
      objectUri,
      modifiedAtMs: now - (o.modifiedAgoMs ?? 0),
      job: { ...aJob({ id: 'nlp.j', state }), updatedAtMs: now - (o.endedAgoMs ?? 0) },
      saves: o.held ?? saves,
      nowMs: now,
      retentionMs: 30 * DAY,
    });

  it("keeps a live job's newest save however old, and the one it replaced for an hour; superseded saves go at once", () => {
    expect(expired(`${save(4).location}rank-0/model.pt`, 'running', { modifiedAgoMs: 400 * DAY })).toBe(false);
    expect(expired(`${save(3).location}model.pt`, 'running')).toBe(false);
    expect(expired(`${save(3).location}model.pt`, 'running', { held: { ...saves, replacedAtMs: now - 61 * 60_000 } })).toBe(true);
    expect(expired(`${save(2).location}model.pt`, 'running')).toBe(true);
    expect(expired(`${save(1).location}model.pt`, 'pending')).toBe(true);
  });

  it('keeps an object of no recorded save for an hour (an upload under way), then lets it go', () => {
    expect(expired(`${save(5).location}model.pt`, 'running', { modifiedAgoMs: 59 * 60_000 })).toBe(false);
    expect(expired(`${save(5).location}model.pt`, 'running', { modifiedAgoMs: 61 * 60_000 })).toBe(true);
  });

  it("keeps the save the job's record names as a resume point, even when the index has moved past it", () => {
    const job: Job = { ...aJob({ id: 'nlp.j', state: 'pending' }), checkpoint: save(2) };
    const gone = checkpointObjectExpired({
      objectUri: `${save(2).location}m.pt`,
      modifiedAtMs: 0,
      job,
      saves,
      nowMs: now,
      retentionMs: 30 * DAY,
    });
    expect(gone).toBe(false);
  });

  it("keeps an ended job's newest save for the retention after it ended, and nothing else of it", () => {
    expect(expired(`${save(4).location}model.pt`, 'succeeded', { endedAgoMs: 29 * DAY, modifiedAgoMs: 100 * DAY })).toBe(false);
    expect(expired(`${save(4).location}model.pt`, 'succeeded', { endedAgoMs: 31 * DAY })).toBe(true);
    expect(expired(`${save(3).location}model.pt`, 'cancelled')).toBe(true);
  });

  it('lets a folder of a job not on record go only past the retention', () => {
    const gone = (ageDays: number) =>
      checkpointObjectExpired({
        objectUri: `${ROOT}x/attempt-1/a/m`,
        modifiedAtMs: now - ageDays * DAY,
        job: undefined,
        saves: NO_SAVES,
        nowMs: now,
        retentionMs: 30 * DAY,
      });
    expect(gone(29)).toBe(false);
    expect(gone(31)).toBe(true);
  });

  it('over random save, complete, attach, resume, sweep and end sequences: a resume point is never deleted, and a live job holds at most two complete saves after a sweep (three while its record lags the index), and the byte log bills just the saves the bucket holds', async () => {
    type Step =
      | { kind: 'write'; ranks: 1 | 2 }
      | { kind: 'complete'; which: number; rank: 0 | 1 }
      | { kind: 'advance'; minutes: number }
      | { kind: 'attach' }
      | { kind: 'sweep' }
      | { kind: 'end' };
    // Weighted so that sequences save and complete often and rarely end the job (the checks are on a live job).
    const step: fc.Arbitrary<Step> = fc.oneof(
      { weight: 15, arbitrary: fc.record({ kind: fc.constant('write' as const), ranks: fc.constantFrom(1 as const, 2 as const) }) },
      {
        weight: 20,
        arbitrary: fc.record({ kind: fc.constant('complete' as const), which: fc.nat(8), rank: fc.constantFrom(0 as const, 1 as const) }),
      },
      { weight: 10, arbitrary: fc.record({ kind: fc.constant('advance' as const), minutes: fc.integer({ min: 1, max: 120 }) }) },
      { weight: 5, arbitrary: fc.record({ kind: fc.constant('attach' as const) }) },
      { weight: 10, arbitrary: fc.record({ kind: fc.constant('sweep' as const) }) },
      { weight: 1, arbitrary: fc.record({ kind: fc.constant('end' as const) }) },
    );
    await fc.assert(
      fc.asyncProperty(fc.array(step, { minLength: 20, maxLength: 80, size: 'max' }), async (steps) => {
        const clock = { ms: 1_800_000_000_000, nowMs: () => clock.ms };
        const index = new MemoryCheckpointStore(clock, ROOT);
        const bucket = new Map<string, number>(); // object → when written
        let job: Job = { ...aJob({ id: 'nlp.j', state: 'running' }), updatedAtMs: clock.ms };
        const meter: SaveMeter = { owner: { jobId: job.id, team: job.team } };
        const written: { ref: CheckpointRef; objects: string[]; complete: boolean }[] = [];
        const has = (location: string) => [...bucket.keys()].some((k) => k.startsWith(location));
        for (const s of steps) {
          if (s.kind === 'write') {
            const n = written.length + 1;
            const ref: CheckpointRef = {
              jobId: job.id,
              attempt: 1,
              location: `${checkpointFolder(ROOT, job.id, 1)}step-${n}/`,
              completedAtMs: clock.ms,
              progressSec: n * 600,
              ...(s.ranks > 1 ? { ranks: s.ranks } : {}),
            };
            const objects = s.ranks > 1 ? [0, 1].map((r) => `${ref.location}rank-${r}/model.pt`) : [`${ref.location}model.pt`];
            for (const o of objects) bucket.set(o, clock.ms);
            written.push({ ref, objects, complete: false });
          } else if (s.kind === 'complete' && written.length > 0) {
            // Mostly the newest save written (an upload that lands), sometimes an older one (a late or repeated call).
            const w = written[s.which >= 4 ? written.length - 1 : s.which % written.length]!;
            if (s.rank >= (w.ref.ranks ?? 1) || !w.objects.every((o) => bucket.has(o))) continue;
            try {
              const size = saveSizeOf([GIB]);
              if (await index.markComplete({ ...w.ref, completedAtMs: clock.ms, size }, s.rank, meter)) w.complete = true;
            } catch (error) {
              if (!(error instanceof CheckpointRefused)) throw error;
            }
          } else if (s.kind === 'advance') clock.ms += s.minutes * 60_000;
          else if (s.kind === 'attach') {
            const newest = await index.latest(job.id);
            if (newest) job = { ...job, checkpoint: newest };
          } else if (s.kind === 'end' && !isTerminal(job.state)) job = { ...job, state: 'succeeded', updatedAtMs: clock.ms };
          else if (s.kind === 'sweep') {
            const saves = await index.retained(job.id);
            for (const [objectUri, modifiedAtMs] of [...bucket])
              if (checkpointObjectExpired({ objectUri, modifiedAtMs, job, saves, nowMs: clock.ms, retentionMs: 30 * DAY }))
                bucket.delete(objectUri);
            await index.forgetSuperseded(job.id, forgettable(saves, [...bucket.keys()]));
            // The byte log bills what the bucket holds: after a sweep, its live saves are the complete ones whose objects are there.
            const logged = (await index.byteLogs(clock.ms))[0]?.saves ?? [];
            const billed = logged.filter((r) => r.deletedAtMs === undefined);
            const inBucket = written.filter((w) => w.complete && w.objects.every((o) => bucket.has(o)));
            expect(billed.map((r) => r.location).sort()).toEqual(inBucket.map((w) => w.ref.location).sort());
            expect(billed.reduce((n, r) => n + r.bytes, 0)).toBe(inBucket.reduce((n, w) => n + w.objects.length * GIB, 0));
            expect(logged.length).toBeLessThanOrEqual(SAVE_LOG_MAX);
            if (!isTerminal(job.state)) {
              // What a live job holds after a sweep: its newest save, the one before it, and the one its record names (which
              // lags the index only until the agent attaches the newest): at most two once the record names the newest.
              const held = written.filter((w) => w.complete && w.objects.every((o) => bucket.has(o))).map((w) => w.ref.location);
              const kept = new Set([saves.newest?.location, saves.previous?.location, job.checkpoint?.location]);
              for (const l of held) expect(kept.has(l)).toBe(true);
              if (job.checkpoint?.location === saves.newest?.location) expect(held.length).toBeLessThanOrEqual(2);
            }
          }
          // A resume point is never deleted while the job may run: the one a new attempt would take, and the one the record names.
          if (!isTerminal(job.state)) {
            const resume = resumePoint(job, await index.latest(job.id));
            if (resume)
              for (const w of written.filter((x) => resume.location === x.ref.location))
                for (const o of w.objects) expect(bucket.has(o)).toBe(true);
            if (job.checkpoint) expect(has(job.checkpoint.location)).toBe(true);
          }
        }
      }),
      { numRuns: 300 },
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

  it("deletes superseded saves at once, the save before the newest after an hour, torn uploads after an hour, ended and unknown jobs' past the retention, and never a live job's newest", async () => {
    const writtenAt = Date.now();
    const clock = { ms: writtenAt, nowMs: () => clock.ms };
    const tables = await db.createTables();
    const stores = dynamoStores(db.doc, tables, ROOT, clock);
    const put = (key: string) => s3.send(new PutObjectCommand({ Bucket: BUCKET, Key: key, Body: key }));
    const folder = (id: string, attempt: number) => checkpointFolder(ROOT, id, attempt);
    const keyOf = (uri: string) => uri.slice(`s3://${BUCKET}/`.length);
    // A live job (pending, held by its budget for months): three complete saves one after the other, and a torn one.
    const live = aJob({ id: 'nlp.held', attempt: 2 });
    await stores.jobs.create(live);
    const liveSave = (name: string, progressSec: number) => ({
      jobId: live.id,
      attempt: 1,
      location: `${folder(live.id, 1)}${name}/`,
      completedAtMs: writtenAt,
      progressSec,
    });
    const [first, second, newest] = [liveSave('latest', 300), liveSave('latest@2', 600), liveSave('latest@3', 900)];
    const meterOf = (job: Job): SaveMeter => ({ owner: { jobId: job.id, team: job.team } });
    for (const s of [first, second, newest]) await stores.checkpoints.markComplete({ ...s, size: saveSizeOf([GIB]) }, 0, meterOf(live));
    expect(await stores.checkpoints.retained(live.id)).toMatchObject({
      newest: { ...newest, size: saveSizeOf([GIB]) },
      previous: { ...second, size: saveSizeOf([GIB]) },
      replacedAtMs: writtenAt,
      superseded: [first.location],
    });
    // Each save's bytes are billed from its completion until the sweep deletes it (the byte log, on the index's item).
    const deletedAt = async (job: Job) =>
      Object.fromEntries(
        ((await stores.checkpoints.byteLogs(writtenAt)).find((l) => l.owner.jobId === job.id)?.saves ?? []).map((r) => [
          r.location,
          r.deletedAtMs,
        ]),
      );
    expect(await deletedAt(live)).toEqual({ [first.location]: undefined, [second.location]: undefined, [newest.location]: undefined });
    await put(`${keyOf(first.location)}model.pt`);
    await put(`${keyOf(second.location)}model.pt`);
    await put(`${keyOf(newest.location)}model.pt`);
    await put(`${keyOf(newest.location)}sub/optim.pt`);
    await put(`${keyOf(folder(live.id, 2))}latest/model.pt`); // torn: never completed
    // An ended job, and a folder whose job is no longer on record.
    const done = aJob({ id: 'cv.done', attempt: 1 });
    await stores.jobs.create(done);
    const doneNewest = { jobId: done.id, attempt: 1, location: `${folder(done.id, 1)}step-9/`, completedAtMs: writtenAt, progressSec: 60 };
    await stores.checkpoints.markComplete({ ...doneNewest, size: saveSizeOf([GIB]) }, 0, meterOf(done));
    await applyJobEvent(stores.jobs, done.id, { type: 'cancel' }, writtenAt);
    expect(isTerminal((await stores.jobs.get(done.id))!.state)).toBe(true);
    await put(`${keyOf(doneNewest.location)}model.pt`);
    await put(`${keyOf(folder('nlp.gone', 3))}step-1/model.pt`);
    // A key that is no job folder gpu-fleet wrote is left alone.
    await put('checkpoints/%E0%A4%A/x');
    const keys = async () =>
      ((await s3.send(new ListObjectsV2Command({ Bucket: BUCKET, Prefix: 'checkpoints/' }))).Contents ?? []).map((o) => o.Key!).sort();
    expect(await keys()).toHaveLength(8);

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
    // Sweeps until the root has been gone through once from the start (the first sweep may begin mid-way).
    const round = async () => {
      let deleted = 0;
      let wraps = 0;
      for (let i = 0; i < 12 && wraps < 2; i++) {
        const s = await sweep.sweep();
        deleted += s.deleted;
        if (s.wrapped) wraps++;
      }
      return deleted;
    };
    const remaining = async (...names: string[]) => (await keys()).filter((k) => names.some((n) => k.includes(n)));

    // Half an hour on: the superseded save goes at once and leaves the index's list; the one before the newest and the torn upload stay.
    clock.ms = writtenAt + 30 * 60_000;
    expect(await round()).toBe(1);
    expect(await remaining('/latest/model.pt', 'latest@2', 'latest@3')).toEqual(
      [
        `${keyOf(second.location)}model.pt`,
        `${keyOf(newest.location)}model.pt`,
        `${keyOf(newest.location)}sub/optim.pt`,
        `${keyOf(folder(live.id, 2))}latest/model.pt`,
      ].sort(),
    );
    expect((await stores.checkpoints.retained(live.id)).superseded).toEqual([]);
    const halfHour = writtenAt + 30 * 60_000;
    expect(await deletedAt(live)).toEqual({ [first.location]: halfHour, [second.location]: undefined, [newest.location]: undefined });

    // Two hours on: the save before the newest and the torn upload go.
    clock.ms = writtenAt + 2 * 3_600_000;
    expect(await round()).toBe(2);
    expect(await deletedAt(live)).toEqual({ [first.location]: halfHour, [second.location]: clock.ms, [newest.location]: undefined });
    expect(await deletedAt(done)).toEqual({ [doneNewest.location]: undefined });
    // 40 days on: the ended job's newest and the unknown job's folder go; the held job's newest stays.
    clock.ms = writtenAt + 40 * DAY;
    expect(await round()).toBe(2);
    expect(await keys()).toEqual(
      ['checkpoints/%E0%A4%A/x', `${keyOf(newest.location)}model.pt`, `${keyOf(newest.location)}sub/optim.pt`].sort(),
    );
    expect(await deletedAt(done)).toEqual({ [doneNewest.location]: clock.ms });
  });

  it('judges a folder from the page of keys that found it, and leaves a save that lands between that listing and the index read for the next sweep (its objects were not listed)', async () => {
    const clock = { ms: Date.now(), nowMs: () => clock.ms };
    const tables = await db.createTables();
    const stores = dynamoStores(db.doc, tables, ROOT, clock);
    const bucket = `${BUCKET}-race`;
    await s3.send(new CreateBucketCommand({ Bucket: bucket }));
    const root = `s3://${bucket}/checkpoints/`;
    const job = aJob({ id: 'nlp.race', state: 'running' });
    await stores.jobs.create(job);
    const meter: SaveMeter = { owner: { jobId: job.id, team: job.team } };
    const saveAt = (n: number): CheckpointRef => ({
      jobId: job.id,
      attempt: 1,
      location: `${checkpointFolder(root, job.id, 1)}step-${n}/`,
      completedAtMs: clock.ms,
      progressSec: n * 600,
    });
    const land = async (n: number) => {
      await s3.send(
        new PutObjectCommand({ Bucket: bucket, Key: `${saveAt(n).location.slice(`s3://${bucket}/`.length)}model.pt`, Body: 'x' }),
      );
      await stores.checkpoints.markComplete({ ...saveAt(n), completedAtMs: clock.ms, size: saveSizeOf([GIB]) }, 0, meter);
    };
    for (const n of [1, 2, 3]) await land(n);
    clock.ms += 10 * 60_000;
    // The save of step 4 lands after the sweep's page of keys was listed and before it reads the index.
    let raced = false;
    const checkpoints = Object.create(stores.checkpoints) as typeof stores.checkpoints;
    checkpoints.retained = async (jobId: string) => {
      if (!raced) {
        raced = true;
        await land(4);
      }
      return stores.checkpoints.retained(jobId);
    };
    const sweep = new S3CheckpointSweep({
      s3,
      root,
      jobs: stores.jobs,
      checkpoints,
      doc: db.doc,
      table: tables.control,
      clock,
      retentionDays: 30,
    });
    expect(await sweep.sweep()).toMatchObject({ jobs: 1, deleted: 2, wrapped: true });
    expect(raced).toBe(true);
    // Steps 1 and 2 are superseded (step 4 replaced 3): deleted and closed. Step 4 had no object in the listing, yet it is still billed as held.
    const log = (await stores.checkpoints.byteLogs(clock.ms))[0]!.saves;
    const open = log.filter((r) => r.deletedAtMs === undefined).map((r) => r.location);
    expect(open.sort()).toEqual([saveAt(3).location, saveAt(4).location].sort());
    // The next sweep lists step 4's objects and keeps it.
    expect(await sweep.sweep()).toMatchObject({ deleted: 0 });
    const again = (await stores.checkpoints.byteLogs(clock.ms))[0]!.saves;
    expect(
      again
        .filter((r) => r.deletedAtMs === undefined)
        .map((r) => r.location)
        .sort(),
    ).toEqual([saveAt(3).location, saveAt(4).location].sort());
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
