import { generateKeyPairSync } from 'node:crypto';
import { mkdir, mkdtemp, readFile, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Storage } from '@google-cloud/storage';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BlobsByScheme, GcsBlobs } from '../../agent/gcs-blobs.ts';
import { DirectoryBlobs } from '../../agent/checkpoint-files.ts';
import { BucketSweep } from '../../cloud/checkpoint-sweep.ts';
import { GcsCheckpointUrls, GcsSweptBucket, parseGsLocation } from '../../cloud/gcp/checkpoint-store.ts';
import { gcsStorage } from '../../cloud/gcp/storage.ts';
import { MemoryCheckpointStore, MemoryJobStore, MemoryNodeStore } from '../../cloud/sim/memory-stores.ts';
import { saveSizeOf, storeKindOf } from '../../core/bytes.ts';
import { CloudError } from '../../core/errors.ts';
import { checkpointFolder, type CheckpointRef } from '../../core/job.ts';
import { aJob } from '../builders.ts';
import { FakeGcs } from '../../bench/support/fake-gcs.ts';
import { S3Client } from '@aws-sdk/client-s3';
import type { LambdaFunctionURLEventWithIAMAuthorizer } from 'aws-lambda';
import { S3CheckpointUrls } from '../../cloud/aws/checkpoint-urls.ts';
import { createAgentApiHandler } from '../../functions/agent-api.ts';
import { lambdaContext } from '../../functions/context.ts';
import { observability } from '../../functions/observability.ts';
import { credentialHeaders, testAttempts } from '../support/attempt-credentials.ts';

const BUCKET = 'gpu-fleet-ckpt-us-central1';
/** The sweep's bucket, holding only what its test puts there. */
const SWEPT = 'gpu-fleet-ckpt-swept';
const SWEPT_ROOT = `gs://${SWEPT}/checkpoints/`;
const ROOT = `gs://${BUCKET}/checkpoints/`;
const EMAIL = 'gpu-fleet@example-project.iam.gserviceaccount.com';
const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
const KEY = privateKey.export({ type: 'pkcs8', format: 'pem' }) as string;
const MIB = 1024 * 1024;

/** The client gpu-fleet builds from a service account key, its access token already fetched (no token endpoint here). */
async function storageFor(endpoint: string, token = 'token-of-the-service-account'): Promise<Storage> {
  const storage = gcsStorage({
    credentials: { client_email: EMAIL, private_key: KEY },
    projectId: 'example-project',
    apiEndpoint: endpoint,
  });
  (await storage.authClient.getClient()).setCredentials({ access_token: token, expiry_date: Date.now() + 3_600_000, token_type: 'Bearer' });
  return storage;
}

describe('Cloud Storage as a region’s checkpoint store, against a local Cloud Storage server', () => {
  const gcs = new FakeGcs([BUCKET, SWEPT]).allowToken('token-of-the-service-account').allowSigner(EMAIL, KEY);
  let storage: Storage;
  let work: string;
  beforeAll(async () => {
    storage = await storageFor(await gcs.start());
    work = await mkdtemp(join(tmpdir(), 'gcs-blobs-'));
  });
  afterAll(() => gcs.stop());

  it('uploads a save (a small file in one request, a large one in a resumable upload) and reads it back byte for byte; one Class A operation a file', async () => {
    const save = join(work, 'ckpt', 'step-10');
    await mkdir(join(save, 'shards'), { recursive: true });
    const big = Buffer.alloc(9 * MIB + 123, 7);
    big.write('the end', big.length - 7);
    await writeFile(join(save, 'shards', 'model.bin'), big);
    await writeFile(join(save, 'meta.json'), '{"step":10}');
    const location = `${checkpointFolder(ROOT, 'nlp.train', 2)}step-10/`;
    const before = gcs.operations.classA;
    const sizes = await new GcsBlobs(storage).upload(save, location, join(work, 'ckpt'));
    expect([...sizes].sort((a, b) => a - b)).toEqual([11, big.length]);
    expect(gcs.operations.classA - before).toBe(2);
    // What the index bills for it: a Cloud Storage upload is one operation whatever its size (S3 would make 4 PUTs for the large file).
    expect(saveSizeOf(sizes, storeKindOf(location)).writeRequests).toBe(2);
    expect(saveSizeOf(sizes, 's3').writeRequests).toBe(1 + 1);
    expect(gcs.names(BUCKET)).toEqual([
      'checkpoints/nlp.train/attempt-2/step-10/meta.json',
      'checkpoints/nlp.train/attempt-2/step-10/shards/model.bin',
    ]);

    const back = join(work, 'resume');
    expect(await new GcsBlobs(storage).download(location, back)).toBe(true);
    expect((await readFile(join(back, 'shards', 'model.bin'))).equals(big)).toBe(true);
    expect(await readFile(join(back, 'meta.json'), 'utf8')).toBe('{"step":10}');
    expect(await new GcsBlobs(storage).download(`${ROOT}nobody/attempt-1/`, join(work, 'none'))).toBe(false);
  });

  it('a machine without the bucket’s credentials is refused, as an access error that names the object', async () => {
    const stranger = await storageFor(gcs.endpoint, 'someone-elses-token');
    const save = join(work, 'other');
    await mkdir(save, { recursive: true });
    await writeFile(join(save, 'x.bin'), 'x');
    const err = await new GcsBlobs(stranger).upload(save, `${ROOT}j/attempt-1/s/`).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(CloudError);
    expect((err as CloudError).code).toBe('access-denied');
    expect((err as CloudError).message).toContain(`gs://${BUCKET}/checkpoints/j/attempt-1/s/x.bin`);
    expect(gcs.refused.length).toBeGreaterThan(0);
  });

  it('a machine saves into its own store and resumes from the store the save is in, by scheme', async () => {
    const local = join(work, 'local-store');
    const blobs = new BlobsByScheme({ gs: new GcsBlobs(storage), file: new DirectoryBlobs(local) });
    const save = join(work, 'by-scheme');
    await mkdir(save, { recursive: true });
    await writeFile(join(save, 'w.bin'), 'weights');
    await blobs.upload(save, `${ROOT}moved/attempt-1/s/`);
    expect(await blobs.download(`${ROOT}moved/attempt-1/s/`, join(work, 'moved-back'))).toBe(true);
    await expect(blobs.upload(save, 's3://b/p/x/')).rejects.toThrow(
      /no checkpoint store on this machine reads s3:\/\/b\/p\/x\/; it has gs:\/\/, file:\/\//,
    );
  });

  it('signs V4 read URLs the server accepts for a machine of another cloud; a changed or expired URL is refused', async () => {
    gcs.put(BUCKET, 'checkpoints/moved/attempt-3/s/a b.bin', 'alpha');
    gcs.put(BUCKET, 'checkpoints/moved/attempt-3/s/z.bin', 'zulu');
    const urls = new GcsCheckpointUrls(storage, 600, { nowMs: () => Date.now() });
    const first = await urls.downloadUrls(`${ROOT}moved/attempt-3/s/`, undefined, 1);
    expect(first.files.map((f) => f.path)).toEqual(['a b.bin']);
    expect(first.next).toBe('a b.bin');
    const second = await urls.downloadUrls(`${ROOT}moved/attempt-3/s/`, first.next, 1);
    expect(second.files.map((f) => f.path)).toEqual(['z.bin']);
    expect(second.next).toBeUndefined();

    const url = first.files[0]!.url;
    expect(url).toContain('X-Goog-Algorithm=GOOG4-RSA-SHA256');
    expect(await (await fetch(url)).text()).toBe('alpha');
    // The same signature for another object, or a longer life, no longer matches.
    const other = await fetch(url.replace('a%20b.bin', 'z.bin'));
    expect(other.status).toBe(403);
    expect(await other.text()).toContain('SignatureDoesNotMatch');
    expect((await fetch(url.replace('X-Goog-Expires=600', 'X-Goog-Expires=6000'))).status).toBe(403);
    const clock = gcs.nowMs;
    gcs.nowMs = () => Date.now() + 601_000;
    try {
      const late = await fetch(url);
      expect(late.status).toBe(400);
      expect(await late.text()).toContain('ExpiredToken');
    } finally {
      gcs.nowMs = clock;
    }
    await expect(urls.uploadTargets(`${ROOT}moved/attempt-3/t/`)).rejects.toThrow(/only GCP machines write there/);
  });

  it('an AWS machine resuming a job moved from GCP reads its save through the agent API, by URLs the server accepts; it may not write there', async () => {
    const now = Date.now();
    const jobs = new MemoryJobStore();
    const me = 'i-0aaaaaaaa1';
    await jobs.create({
      ...aJob({ id: 'nlp.moved', team: 'nlp', attempt: 2 }),
      state: 'running',
      placement: { capacityType: 'spot', nodes: [{ nodeId: me, gpuIndices: [0] }] },
    });
    const save = `${ROOT}nlp.moved/attempt-1/step-40/`;
    gcs.put(BUCKET, `${parseGsLocation(save).prefix}weights.bin`, 'moved weights');
    const handlerWith = (gcsUrls?: GcsCheckpointUrls) =>
      createAgentApiHandler({
        jobs,
        nodes: new MemoryNodeStore(),
        checkpoints: new MemoryCheckpointStore({ nowMs: () => now }, 's3://ckpt/checkpoints/'),
        urls: new S3CheckpointUrls(new S3Client({ region: 'us-west-2', credentials: { accessKeyId: 'AKID', secretAccessKey: 's' } })),
        ...(gcsUrls ? { gcsUrls, otherRoots: [ROOT] } : {}),
        clock: { nowMs: () => now },
        agentRoleName: 'AgentRole',
        attempts: testAttempts(),
        obs: observability('agent-api-test'),
      });
    const call = async (handler: ReturnType<typeof handlerWith>, path: string, body: unknown) => {
      const event = {
        rawPath: path,
        body: JSON.stringify(body),
        headers: credentialHeaders(me, path, JSON.stringify(body), 2),
        isBase64Encoded: false,
        requestContext: {
          http: { method: 'POST' },
          authorizer: { iam: { userArn: `arn:aws:sts::123456789012:assumed-role/AgentRole/${me}` } },
        },
      } as unknown as LambdaFunctionURLEventWithIAMAuthorizer;
      const out = (await handler(event, lambdaContext('agent-api'))) as { statusCode: number; body: string };
      return { status: out.statusCode, body: JSON.parse(out.body) as Record<string, unknown> };
    };
    const api = handlerWith(new GcsCheckpointUrls(storage, 600, { nowMs: () => now }));
    const got = await call(api, '/v1/checkpoint/download', { jobId: 'nlp.moved', location: save });
    expect(got.status).toBe(200);
    const files = got.body.files as { path: string; url: string }[];
    expect(files.map((f) => f.path)).toEqual(['weights.bin']);
    expect(await (await fetch(files[0]!.url)).text()).toBe('moved weights');
    // Another job's folder in that bucket is refused, as under the fleet's own root.
    expect(await call(api, '/v1/checkpoint/download', { jobId: 'nlp.moved', location: `${ROOT}vision.other/attempt-1/s/` })).toMatchObject({
      status: 403,
    });
    // The API never writes into another cloud's bucket.
    expect(
      await call(api, '/v1/checkpoint/upload', {
        jobId: 'nlp.moved',
        location: `${ROOT}nlp.moved/attempt-2/step-41/`,
        files: [{ path: 'w.bin', bytes: 10 }],
      }),
    ).toMatchObject({ status: 400, body: { error: expect.stringMatching(/never another cloud's/) } });
    // A fleet without the GCP key says why it cannot sign the read.
    expect(await call(handlerWith(), '/v1/checkpoint/download', { jobId: 'nlp.moved', location: save })).toMatchObject({
      status: 403,
      body: { error: expect.stringMatching(/is not a checkpoint folder of job nlp\.moved/) },
    });
  });

  it('the sweep deletes a live job’s superseded save from the bucket and keeps its resume point; a save in another cloud’s bucket is left to that bucket’s sweep', async () => {
    const now = { ms: Date.parse('2026-12-06T12:00:00Z') };
    const clock = { nowMs: () => now.ms };
    const jobs = new MemoryJobStore();
    const index = new MemoryCheckpointStore(clock, SWEPT_ROOT);
    await jobs.create({ ...aJob({ id: 'vision.j', team: 'vision', state: 'running' }), attempt: 2 });
    const ref = (location: string, progressSec: number): CheckpointRef => ({
      jobId: 'vision.j',
      attempt: 2,
      location,
      completedAtMs: now.ms,
      progressSec,
    });
    const inS3 = 's3://gpu-fleet-checkpoints/checkpoints/vision.j/attempt-1/s1/';
    const old = `${SWEPT_ROOT}vision.j/attempt-2/s2/`;
    const mid = `${SWEPT_ROOT}vision.j/attempt-2/s3/`;
    const newest = `${SWEPT_ROOT}vision.j/attempt-2/s4/`;
    for (const [i, l] of [inS3, old, mid, newest].entries()) {
      await index.markComplete(ref(l, (i + 1) * 600));
      now.ms += 60_000;
    }
    for (const l of [old, mid, newest]) gcs.put(SWEPT, `${parseGsLocation(l).prefix}model.bin`, 'w', now.ms - 120_000);
    const position = { at: '' };
    const sweep = new BucketSweep(
      new GcsSweptBucket(storage, SWEPT_ROOT),
      { position: async () => position.at, keepPosition: async (a) => void (position.at = a) },
      { jobs, checkpoints: index, clock, retentionDays: 30 },
    );
    const out = await sweep.sweep();
    expect(out).toMatchObject({ jobs: 1, deleted: 1, wrapped: true });
    expect(gcs.names(SWEPT)).toEqual(['checkpoints/vision.j/attempt-2/s3/model.bin', 'checkpoints/vision.j/attempt-2/s4/model.bin']);
    const held = await index.retained('vision.j');
    // The S3 save is superseded too, but this listing cannot see S3: it stays listed for the S3 sweep to delete.
    expect(held.superseded).toEqual([inS3]);
    expect(held.newest?.location).toBe(newest);
  });
});
