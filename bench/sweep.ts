// The checkpoint sweep's pace against a large fleet's save rate: the real sweep (BucketSweep) over
// a local S3-compatible server (s3rver), or with --store gcs over a local Cloud Storage server
// (bench/support/fake-gcs.ts, through the real @google-cloud/storage client: the JSON API deletes
// one object a request), and the real index and job records on dynalite.
//
//   npm run bench:sweep -- [--store s3|gcs] [--jobs 600] [--latency-ms 25] [--concurrency 16] [--json]
//
// Each job folder holds what a live job has between two sweeps at the cadence of the built-in
// trace (a save every 600 s): a superseded save, the save before the newest and the newest (two
// files each, recorded with their sizes as the agent API records them, so forgetting a save also
// puts its byte event); the sweep deletes the superseded one. The sweep is timed one folder at a time
// (concurrency 1, as before) and SWEEP_CONCURRENCY folders at once, in the same process, with every
// S3 and DynamoDB call delayed by `--latency-ms` (a stand-in for the service's round trip, which a
// local server does not have; 25 ms is a typical S3 LIST or DynamoDB read from Lambda).
//
// The figure to keep pace with: a 10,000-GPU fleet of the trace's jobs (1.5 GPUs a job on average)
// runs about 6,700 jobs; each saves every 600 s, and each job folder must be swept within one
// save interval for a live job to hold at most two complete saves between sweeps: 11 folders a
// second, on average, of the time the sweep is given (10 s of each 60 s reconcile: 67 a second).
import { generateKeyPairSync } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CreateBucketCommand, PutObjectCommand, S3Client } from '@aws-sdk/client-s3';
import { Command } from 'commander';
import { S3SweptBucket, sweepPositionKey, tablePosition } from '../cloud/aws/checkpoint-sweep.ts';
import { BucketSweep, SWEEP_CONCURRENCY, type SweptBucket } from '../cloud/checkpoint-sweep.ts';
import { GcsSweptBucket } from '../cloud/gcp/checkpoint-store.ts';
import { gcsStorage } from '../cloud/gcp/storage.ts';
import { UsageError } from '../core/errors.ts';
import { FakeGcs } from './support/fake-gcs.ts';
import { documentClient, dynamoStores } from '../cloud/aws/dynamo-store.ts';
import { decimalNumber, wholeNumber } from '../cloud/flags.ts';
import { saveSizeOf } from '../core/bytes.ts';
import { checkJobSpec } from '../core/job-spec.ts';
import { checkpointFolder, newPendingJob } from '../core/job.ts';
import { startDynaliteProcess } from './support/dynalite.ts';
import { startS3rverProcess } from './support/s3rver.ts';

const BUCKET = 'gpu-fleet-sweep-bench';
/** The fleet the figure is for, and the trace's shape. */
const FLEET_GPUS = 10_000;
const GPUS_PER_JOB = 1.5;
const SAVE_EVERY_SEC = 600;
const SWEEP_SHARE = 10 / 60;

const checked = checkJobSpec({
  image: 'pytorch/pytorch:2.3.0',
  command: ['python', 'train.py'],
  gpu: { kind: 'whole', count: 1 },
  checkpoint: { intervalSec: 600 },
});
if (!checked.ok) throw new Error(`the bench's job spec: ${checked.errors.join('; ')}`);
const SPEC = checked.spec;

interface Row {
  readonly concurrency: number;
  readonly folders: number;
  readonly deleted: number;
  readonly wallMs: number;
  readonly foldersPerSec: number;
  /** Bucket and DynamoDB requests the sweep sent, per folder. */
  readonly storeCallsPerFolder: number;
  readonly dynamoCallsPerFolder: number;
  /** The sweep's own CPU time (this process; the servers run in their own), per folder. */
  readonly cpuMsPerFolder: number;
}

/** Delays every call of an SDK client by `ms` (before it is sent), as a service's round trip would, and counts the calls. */
function withLatency<T extends { middlewareStack: { add: (...a: never[]) => void } }>(client: T, ms: number, calls: { n: number }): T {
  const stack = client.middlewareStack as unknown as { add: (mw: unknown, o: unknown) => void };
  // Counted once a call (the initialize step runs once per send), delayed once a request sent.
  stack.add(
    (next: (args: unknown) => Promise<unknown>) => async (args: unknown) => {
      calls.n++;
      return next(args);
    },
    { step: 'initialize', name: 'benchCalls' },
  );
  stack.add(
    (next: (args: unknown) => Promise<unknown>) => async (args: unknown) => {
      if (ms > 0) await new Promise((r) => setTimeout(r, ms));
      return next(args);
    },
    { step: 'finalizeRequest', name: 'benchLatency' },
  );
  return client;
}

/** The bucket a run sweeps: where its objects are put (as the machines wrote them), and the sweep's view of it. */
interface BenchBucket {
  readonly root: string;
  put(key: string, body: string, updatedMs: number): Promise<void>;
  /** The sweep's bucket, each call delayed by the round trip and counted. */
  swept(): SweptBucket;
  calls(): number;
  close(): Promise<void>;
}

async function s3Bucket(endpoint: string, name: string, latencyMs: number): Promise<BenchBucket> {
  const credentials = { accessKeyId: 'S3RVER', secretAccessKey: 'S3RVER' };
  const s3 = new S3Client({ region: 'us-east-1', endpoint, forcePathStyle: true, credentials });
  await s3.send(new CreateBucketCommand({ Bucket: name }));
  const counted = { n: 0 };
  const sweeping = withLatency(new S3Client({ region: 'us-east-1', endpoint, forcePathStyle: true, credentials }), latencyMs, counted);
  const root = `s3://${name}/checkpoints/`;
  return {
    root,
    put: async (key, body) => void (await s3.send(new PutObjectCommand({ Bucket: name, Key: key, Body: body }))),
    swept: () => new S3SweptBucket(sweeping, root),
    calls: () => counted.n,
    close: async () => {
      s3.destroy();
      sweeping.destroy();
    },
  };
}

/** A Cloud Storage bucket on the local server (bench/support/fake-gcs.ts, in this process), through the real client. */
async function gcsBucket(name: string, latencyMs: number): Promise<BenchBucket> {
  const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  const key = privateKey.export({ type: 'pkcs8', format: 'pem' }) as string;
  const email = 'gpu-fleet@bench.iam.gserviceaccount.com';
  const server = new FakeGcs([name]).allowToken('bench-token').allowSigner(email, key);
  const endpoint = await server.start();
  const storage = gcsStorage({ credentials: { client_email: email, private_key: key }, projectId: 'bench', apiEndpoint: endpoint });
  (await storage.authClient.getClient()).setCredentials({
    access_token: 'bench-token',
    expiry_date: Date.now() + 3_600_000,
    token_type: 'Bearer',
  });
  const root = `gs://${name}/checkpoints/`;
  let before = 0;
  return {
    root,
    put: async (k, body, updatedMs) => server.put(name, k, body, updatedMs),
    swept: () => {
      server.delayMs = latencyMs;
      before = server.requests;
      return new GcsSweptBucket(storage, root);
    },
    calls: () => server.requests - before,
    close: () => server.stop(),
  };
}

async function main(): Promise<void> {
  const flags = new Command()
    .option('--jobs <n>', 'job folders to sweep', wholeNumber('--jobs', 1, 100_000), 600)
    .option('--latency-ms <ms>', 'delay added to every bucket and DynamoDB call', decimalNumber('--latency-ms', 0, 1000), 25)
    .option('--concurrency <n>', 'folders at once in the second run (default SWEEP_CONCURRENCY)', wholeNumber('--concurrency', 1, 256))
    .option('--store <kind>', 's3 (s3rver) or gcs (a local Cloud Storage server, the real client)', 's3')
    .option('--json', 'print JSON')
    .parse()
    .opts<{ jobs: number; latencyMs: number; concurrency?: number; store: string; json?: boolean }>();
  if (flags.store !== 's3' && flags.store !== 'gcs') throw new UsageError(`--store ${flags.store}: allowed are s3 and gcs`);
  const dir = mkdtempSync(join(tmpdir(), 'sweep-bench-'));
  const s3server = flags.store === 's3' ? await startS3rverProcess(dir) : undefined;
  const db = await startDynaliteProcess();
  try {
    const rows: Row[] = [];
    for (const concurrency of [1, flags.concurrency ?? SWEEP_CONCURRENCY]) {
      const tables = await db.createTables();
      // The saves were recorded a while ago (they are superseded at the save rate, every 600 s), not in the last minute.
      const clock = { ms: Date.now() - 20 * 60_000, nowMs: () => clock.ms };
      const name = `${BUCKET}-${concurrency}`;
      const bucket = s3server ? await s3Bucket(s3server.endpoint, name, flags.latencyMs) : await gcsBucket(name, flags.latencyMs);
      const root = bucket.root;
      const machine =
        flags.store === 'gcs'
          ? { cloud: 'gcp' as const, region: 'us-central1', zone: 'us-central1-a' }
          : { cloud: 'aws' as const, region: 'us-east-1', zone: 'us-east-1a' };
      const storesHere = dynamoStores(db.doc, tables, root, clock);
      // The fleet's folders: three saves each, the first superseded by the next two.
      for (let j = 0; j < flags.jobs; j++) {
        const job = newPendingJob({ id: `nlp.bench-${String(j).padStart(6, '0')}`, team: 'nlp', spec: SPEC, submittedAtMs: clock.ms });
        await storesHere.jobs.create(job);
        for (let k = 1; k <= 3; k++) {
          const location = `${checkpointFolder(root, job.id, 1)}step-${k}/`;
          const key = location.slice(root.indexOf('/', root.indexOf('://') + 3) + 1);
          await Promise.all(['model.pt', 'optim.pt'].map((f) => bucket.put(`${key}${f}`, f, clock.ms)));
          // Sized and metered as the agent API records a save, so the index keeps its byte log and puts its byte events.
          await storesHere.checkpoints.markComplete(
            { jobId: job.id, attempt: 1, location, completedAtMs: clock.ms, progressSec: k * 600, size: saveSizeOf([2 ** 30, 2 ** 30]) },
            0,
            { owner: { jobId: job.id, team: 'nlp' }, machine },
          );
        }
      }
      // The sweep's own clients, each call delayed: the bucket's, and the stores on a document client of their own.
      const dynamoCalls = { n: 0 };
      const slowDoc = withLatency(
        documentClient({ endpoint: db.endpoint, region: 'us-east-1', credentials: { accessKeyId: 'test', secretAccessKey: 'test' } }),
        flags.latencyMs,
        dynamoCalls,
      );
      const slow = dynamoStores(slowDoc, tables, root, clock);
      const sweep = new BucketSweep(bucket.swept(), tablePosition(slowDoc, tables.control, sweepPositionKey(root, true)), {
        jobs: slow.jobs,
        checkpoints: slow.checkpoints,
        clock: { nowMs: () => Date.now() },
        retentionDays: 30,
        budgetMs: 3_600_000,
        concurrency,
      });
      const started = performance.now();
      const cpu = process.cpuUsage();
      const out = await sweep.sweep();
      const wallMs = performance.now() - started;
      const used = process.cpuUsage(cpu);
      const perFolder = (n: number) => Math.round((n / out.jobs) * 100) / 100;
      rows.push({
        concurrency,
        folders: out.jobs,
        deleted: out.deleted,
        wallMs: Math.round(wallMs),
        foldersPerSec: Math.round((out.jobs / wallMs) * 10_000) / 10,
        storeCallsPerFolder: perFolder(bucket.calls()),
        dynamoCallsPerFolder: perFolder(dynamoCalls.n),
        cpuMsPerFolder: perFolder((used.user + used.system) / 1000),
      });
      await bucket.close();
    }
    const jobs = FLEET_GPUS / GPUS_PER_JOB;
    const neededPerSec = jobs / SAVE_EVERY_SEC / SWEEP_SHARE;
    if (flags.json) {
      console.log(
        JSON.stringify(
          { store: flags.store, latencyMs: flags.latencyMs, neededFoldersPerSec: Math.round(neededPerSec * 10) / 10, rows },
          null,
          2,
        ),
      );
      return;
    }
    console.log(`sweep of ${flags.jobs} ${flags.store} job folders (3 saves each, 1 superseded), every call +${flags.latencyMs} ms`);
    console.log(
      `concurrency  folders  deleted  wall ms  folders/s  ${flags.store === 's3' ? 'S3' : 'GCS'} calls/folder  DynamoDB calls/folder  sweep CPU ms/folder${flags.store === 'gcs' ? ' (with the server)' : ''}`,
    );
    for (const r of rows)
      console.log(
        `${String(r.concurrency).padStart(11)}  ${String(r.folders).padStart(7)}  ${String(r.deleted).padStart(7)}  ${String(r.wallMs).padStart(7)}  ${String(r.foldersPerSec).padStart(9)}  ${String(r.storeCallsPerFolder).padStart(16)}  ${String(r.dynamoCallsPerFolder).padStart(21)}  ${String(r.cpuMsPerFolder).padStart(19)}`,
      );
    console.log(
      `needed for ${FLEET_GPUS.toLocaleString('en-US')} GPUs (${Math.round(jobs).toLocaleString('en-US')} jobs saving every ${SAVE_EVERY_SEC} s, swept 10 s of every 60 s): ${neededPerSec.toFixed(1)} folders/s`,
    );
  } finally {
    await s3server?.close();
    await db.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

await main();
