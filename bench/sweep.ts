// The checkpoint sweep's pace against a large fleet's save rate: the real sweep (S3CheckpointSweep)
// over a local S3-compatible server (s3rver) and the real index and job records on dynalite.
//
//   npm run bench:sweep -- [--jobs 600] [--latency-ms 25] [--concurrency 16] [--json]
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
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CreateBucketCommand, PutObjectCommand, S3Client } from '@aws-sdk/client-s3';
import { Command } from 'commander';
import { S3CheckpointSweep } from '../cloud/aws/checkpoint-sweep.ts';
import { SWEEP_CONCURRENCY } from '../cloud/checkpoint-sweep.ts';
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
  /** S3 and DynamoDB requests the sweep sent, per folder. */
  readonly s3CallsPerFolder: number;
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

async function main(): Promise<void> {
  const flags = new Command()
    .option('--jobs <n>', 'job folders to sweep', wholeNumber('--jobs', 1, 100_000), 600)
    .option('--latency-ms <ms>', 'delay added to every S3 and DynamoDB call', decimalNumber('--latency-ms', 0, 1000), 25)
    .option('--concurrency <n>', 'folders at once in the second run (default SWEEP_CONCURRENCY)', wholeNumber('--concurrency', 1, 256))
    .option('--json', 'print JSON')
    .parse()
    .opts<{ jobs: number; latencyMs: number; concurrency?: number; json?: boolean }>();
  const dir = mkdtempSync(join(tmpdir(), 'sweep-bench-'));
  const s3server = await startS3rverProcess(dir);
  const db = await startDynaliteProcess();
  try {
    const rows: Row[] = [];
    for (const concurrency of [1, flags.concurrency ?? SWEEP_CONCURRENCY]) {
      const tables = await db.createTables();
      // The saves were recorded a while ago (they are superseded at the save rate, every 600 s), not in the last minute.
      const clock = { ms: Date.now() - 20 * 60_000, nowMs: () => clock.ms };
      const s3 = new S3Client({
        region: 'us-east-1',
        endpoint: s3server.endpoint,
        forcePathStyle: true,
        credentials: { accessKeyId: 'S3RVER', secretAccessKey: 'S3RVER' },
      });
      const bucket = `${BUCKET}-${concurrency}`;
      await s3.send(new CreateBucketCommand({ Bucket: bucket }));
      const root = `s3://${bucket}/checkpoints/`;
      const storesHere = dynamoStores(db.doc, tables, root, clock);
      // The fleet's folders: three saves each, the first superseded by the next two.
      for (let j = 0; j < flags.jobs; j++) {
        const job = newPendingJob({ id: `nlp.bench-${String(j).padStart(6, '0')}`, team: 'nlp', spec: SPEC, submittedAtMs: clock.ms });
        await storesHere.jobs.create(job);
        for (let k = 1; k <= 3; k++) {
          const location = `${checkpointFolder(root, job.id, 1)}step-${k}/`;
          const key = location.slice(`s3://${bucket}/`.length);
          await Promise.all(
            ['model.pt', 'optim.pt'].map((f) => s3.send(new PutObjectCommand({ Bucket: bucket, Key: `${key}${f}`, Body: f }))),
          );
          // Sized and metered as the agent API records a save, so the index keeps its byte log and puts its byte events.
          await storesHere.checkpoints.markComplete(
            { jobId: job.id, attempt: 1, location, completedAtMs: clock.ms, progressSec: k * 600, size: saveSizeOf([2 ** 30, 2 ** 30]) },
            0,
            { owner: { jobId: job.id, team: 'nlp' }, machine: { cloud: 'aws', region: 'us-east-1', zone: 'us-east-1a' } },
          );
        }
      }
      // The sweep's own clients, each call delayed: S3, and the stores on a document client of their own.
      const s3Calls = { n: 0 };
      const dynamoCalls = { n: 0 };
      const slowDoc = withLatency(
        documentClient({ endpoint: db.endpoint, region: 'us-east-1', credentials: { accessKeyId: 'test', secretAccessKey: 'test' } }),
        flags.latencyMs,
        dynamoCalls,
      );
      const slow = dynamoStores(slowDoc, tables, root, clock);
      const sweep = new S3CheckpointSweep({
        s3: withLatency(
          new S3Client({
            region: 'us-east-1',
            endpoint: s3server.endpoint,
            forcePathStyle: true,
            credentials: { accessKeyId: 'S3RVER', secretAccessKey: 'S3RVER' },
          }),
          flags.latencyMs,
          s3Calls,
        ),
        root,
        jobs: slow.jobs,
        checkpoints: slow.checkpoints,
        doc: slowDoc,
        table: tables.control,
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
        s3CallsPerFolder: perFolder(s3Calls.n),
        dynamoCallsPerFolder: perFolder(dynamoCalls.n),
        cpuMsPerFolder: perFolder((used.user + used.system) / 1000),
      });
      s3.destroy();
    }
    const jobs = FLEET_GPUS / GPUS_PER_JOB;
    const neededPerSec = jobs / SAVE_EVERY_SEC / SWEEP_SHARE;
    if (flags.json) {
      console.log(JSON.stringify({ latencyMs: flags.latencyMs, neededFoldersPerSec: Math.round(neededPerSec * 10) / 10, rows }, null, 2));
      return;
    }
    console.log(`sweep of ${flags.jobs} job folders (3 saves each, 1 superseded), every call +${flags.latencyMs} ms`);
    console.log('concurrency  folders  deleted  wall ms  folders/s  S3 calls/folder  DynamoDB calls/folder  sweep CPU ms/folder');
    for (const r of rows)
      console.log(
        `${String(r.concurrency).padStart(11)}  ${String(r.folders).padStart(7)}  ${String(r.deleted).padStart(7)}  ${String(r.wallMs).padStart(7)}  ${String(r.foldersPerSec).padStart(9)}  ${String(r.s3CallsPerFolder).padStart(15)}  ${String(r.dynamoCallsPerFolder).padStart(21)}  ${String(r.cpuMsPerFolder).padStart(19)}`,
      );
    console.log(
      `needed for ${FLEET_GPUS.toLocaleString('en-US')} GPUs (${Math.round(jobs).toLocaleString('en-US')} jobs saving every ${SAVE_EVERY_SEC} s, swept 10 s of every 60 s): ${neededPerSec.toFixed(1)} folders/s`,
    );
  } finally {
    await s3server.close();
    await db.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

await main();
