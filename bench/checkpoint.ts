// Checkpoints at real sizes through the agent API: the real handler (functions/agent-api.ts), the
// real URL signer (S3CheckpointUrls, the AWS SDK's presigner) against a local S3-compatible server
// (s3rver), and the checkpoint index and job records on dynalite. Each shape is driven the way a
// node agent drives it (agent/checkpoint-files.ts, AgentApiBlobs): upload targets a page of files
// at a time, part URLs a page at a time as the upload goes, a sample of the bytes really uploaded
// and completed, the save marked complete, and the folder listed back a page at a time.
// Beside it, in the same process, what the one-answer design (every part URL of a page of files in
// one response, as before) would have answered for the same shape.
//
//   npm run bench:checkpoint -- [--files 8] [--file-gib 80] [--small-files 100000] [--sample-parts 1] [--sample-files 2000] [--json]
//
// Prints, per shape: the parts planned, the calls made (responses), the largest answer in bytes
// (maxResponseBytes) against the function URL's 6 MB, and the one-answer design's largest.
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CreateBucketCommand, S3Client } from '@aws-sdk/client-s3';
import type { LambdaFunctionURLEventWithIAMAuthorizer } from 'aws-lambda';
import { Command } from 'commander';
import {
  ATTEMPT_HEADER,
  claimOf,
  MAX_RESPONSE_BYTES,
  PART_URLS_PER_CALL,
  SINGLE_PUT_MAX_BYTES,
  UPLOAD_FILES_PER_CALL,
  type AgentApiOp,
  type AgentApiRequest,
  type AgentApiResponses,
  type UploadTarget,
} from '../cloud/aws/agent-api-protocol.ts';
import { AttemptCredentials } from '../cloud/aws/attempt-credentials.ts';
import { S3CheckpointUrls } from '../cloud/aws/checkpoint-urls.ts';
import { dynamoStores } from '../cloud/aws/dynamo-store.ts';
import { wholeNumber } from '../cloud/flags.ts';
import { checkJobSpec } from '../core/job-spec.ts';
import { newPendingJob } from '../core/job.ts';
import { applyJobEvent } from '../core/services/job-updates.ts';
import { createAgentApiHandler } from '../functions/agent-api.ts';
import { lambdaContext } from '../functions/context.ts';
import { observability } from '../functions/observability.ts';
import { startDynaliteProcess } from './support/dynalite.ts';
import { startS3rverProcess } from './support/s3rver.ts';

process.env.POWERTOOLS_METRICS_DISABLED = 'true';
process.env.POWERTOOLS_LOG_LEVEL = 'ERROR';

const GIB = 1024 ** 3;
const ROLE = 'gpu-fleet-AgentRole-bench';
const MACHINE = 'i-0b0000000000000a1';
const BUCKET = 'gpu-fleet-checkpoints';
/** A stand-in for a role session token of the length Lambda's are (base64, about 1,100 characters). */
const SESSION_TOKEN = `IQoJb3JpZ2luX2VjE${'A'.repeat(1083)}`;

export interface CheckpointBenchRow {
  readonly shape: string;
  readonly files: number;
  readonly fileBytes: number;
  /** Parts planned over all files (a file up to 64 MiB is one PUT, counted as one part). */
  readonly parts: number;
  /** Agent API calls made for the save and the read back, and their answers' bytes. */
  readonly responses: number;
  readonly responsesByOp: Readonly<Record<string, number>>;
  readonly maxResponseBytes: number;
  readonly limitBytes: number;
  /** The one-answer design's largest answer for the same shape: every part URL of a page of files at once. */
  readonly oneAnswerMaxResponseBytes: number;
  /** What was really uploaded and completed, then listed and read back. */
  readonly sampleObjects: number;
  readonly sampleBytes: number;
  readonly listedBack: number;
  readonly seconds: number;
}

async function put(url: string, body: Uint8Array): Promise<string> {
  const res = await fetch(url, { method: 'PUT', body });
  if (!res.ok) throw new Error(`PUT ${new URL(url).pathname}: ${res.status} ${(await res.text()).slice(0, 300)}`);
  return res.headers.get('etag') ?? '';
}

/** One shape, on fresh servers. */
async function runShape(o: {
  shape: string;
  files: number;
  fileBytes: number;
  samplePartsPerFile: number;
  sampleFiles: number;
}): Promise<CheckpointBenchRow> {
  const started = performance.now();
  const dir = mkdtempSync(join(tmpdir(), 'bench-ckpt-'));
  const s3rver = await startS3rverProcess(dir);
  const s3 = new S3Client({
    region: 'us-east-1',
    endpoint: s3rver.endpoint,
    forcePathStyle: true,
    // Signed as the agent API function signs them: with its role session's token, which every URL carries
    // (a Lambda function's session token runs to about a thousand characters; this one is as long).
    credentials: { accessKeyId: 'S3RVER', secretAccessKey: 'S3RVER', sessionToken: SESSION_TOKEN },
  });
  await s3.send(new CreateBucketCommand({ Bucket: BUCKET }));
  const dynamo = await startDynaliteProcess();
  try {
    const clock = { nowMs: () => Date.now() };
    const stores = dynamoStores(dynamo.doc, await dynamo.createTables(), `s3://${BUCKET}/checkpoints/`, clock);
    const urls = new S3CheckpointUrls(s3);
    const attempts = new AttemptCredentials(randomBytes(32));
    const handler = createAgentApiHandler({
      ...stores,
      urls,
      clock,
      agentRoleName: ROLE,
      attempts,
      obs: observability('bench-checkpoint'),
    });
    const byOp: Record<string, number> = {};
    let maxResponseBytes = 0;
    let responses = 0;
    const call = async <Op extends AgentApiOp>(op: Op, body: AgentApiRequest<Op>): Promise<AgentApiResponses[Op]> => {
      // The machine holds the credential of the job's attempt (handed out with its work list), as the agent's client sends it.
      const claim = claimOf(op, body);
      const event = {
        rawPath: `/v1/${op}`,
        body: JSON.stringify(body),
        headers: claim ? { [ATTEMPT_HEADER]: attempts.mint(MACHINE, claim.jobId, claim.attempt ?? 1) } : {},
        isBase64Encoded: false,
        requestContext: {
          http: { method: 'POST' },
          authorizer: { iam: { userArn: `arn:aws:sts::123456789012:assumed-role/${ROLE}/${MACHINE}` } },
        },
      } as unknown as LambdaFunctionURLEventWithIAMAuthorizer;
      const out = (await handler(event, lambdaContext('agent-api'))) as { statusCode: number; body: string };
      responses++;
      byOp[op] = (byOp[op] ?? 0) + 1;
      maxResponseBytes = Math.max(maxResponseBytes, Buffer.byteLength(out.body));
      if (out.statusCode !== 200) throw new Error(`${op} answered ${out.statusCode}: ${out.body.slice(0, 500)}`);
      return JSON.parse(out.body) as AgentApiResponses[Op];
    };

    // The machine and the job whose checkpoint it saves: an 8-GPU attempt placed on it and running.
    const now = clock.nowMs();
    await stores.nodes.register({
      instanceId: MACHINE,
      groupId: 'p5-spot',
      registeredAtMs: now,
      lastHeartbeatAtMs: now,
      gpus: [],
      healthy: true,
    });
    const spec = checkJobSpec({
      image: 'nvcr.io/nvidia/pytorch:24.08-py3',
      command: ['torchrun', 'train.py'],
      gpu: { kind: 'whole', count: 8 },
      checkpoint: { intervalSec: 1800, gracePeriodSec: 900 },
    });
    if (!spec.ok) throw new Error(spec.errors.join('; '));
    const jobId = 'nlp.bench-checkpoint';
    await stores.jobs.create(newPendingJob({ id: jobId, team: 'nlp', spec: spec.spec, submittedAtMs: now }));
    await stores.nodes.assign(MACHINE, jobId, 1);
    const placement = { capacityType: 'spot' as const, nodes: [{ nodeId: MACHINE, gpuIndices: [0, 1, 2, 3, 4, 5, 6, 7] }] };
    await applyJobEvent(stores.jobs, jobId, { type: 'place', attempt: 1, placement }, now);
    await applyJobEvent(stores.jobs, jobId, { type: 'start', attempt: 1 }, now);
    const location = `${stores.checkpoints.locationFor(jobId, 1)}step-001000/`;

    // The save, as AgentApiBlobs does it: a page of files, then each large file's part URLs a page at a time.
    const names = Array.from({ length: o.files }, (_, i) => `shard-${String(i).padStart(6, '0')}.pt`);
    let parts = 0;
    let oneAnswerMax = 0;
    let sampleObjects = 0;
    let sampleBytes = 0;
    // The body of a sampled single-PUT file (files over SINGLE_PUT_MAX_BYTES go up in parts, each its own body).
    const sampleBody = new Uint8Array(o.fileBytes <= SINGLE_PUT_MAX_BYTES ? o.fileBytes : 0).fill(7);
    for (let i = 0; i < names.length; i += UPLOAD_FILES_PER_CALL) {
      const page = names.slice(i, i + UPLOAD_FILES_PER_CALL).map((path) => ({ path, bytes: o.fileBytes }));
      const { files: targets } = await call('checkpoint/upload', { jobId, location, files: page });
      // The one-answer design's answer for this page: the same targets with every part URL in them.
      const everything: unknown[] = [];
      for (const t of targets) {
        if ('url' in t) {
          parts++;
          everything.push(t);
          if (sampleObjects < o.sampleFiles) {
            await put(t.url, sampleBody);
            sampleObjects++;
            sampleBytes += sampleBody.length;
          }
          continue;
        }
        const multi = t as Extract<UploadTarget, { uploadId: string }>;
        parts += multi.parts;
        const all: string[] = [];
        const etags: { partNumber: number; etag: string }[] = [];
        for (let first = 1; first <= multi.parts; first += PART_URLS_PER_CALL) {
          const count = Math.min(PART_URLS_PER_CALL, multi.parts - first + 1);
          const { urls: page } = await call('checkpoint/upload-parts', {
            jobId,
            location,
            path: multi.path,
            uploadId: multi.uploadId,
            firstPart: first,
            count,
          });
          all.push(...page);
        }
        everything.push({ path: multi.path, uploadId: multi.uploadId, partBytes: multi.partBytes, partUrls: all });
        // The sample: the first parts of the first file really go up, and the upload is completed with them.
        if (sampleObjects < o.sampleFiles && o.samplePartsPerFile > 0) {
          for (let n = 1; n <= Math.min(o.samplePartsPerFile, multi.parts); n++) {
            const body = new Uint8Array(multi.partBytes).fill(n);
            etags.push({ partNumber: n, etag: await put(all[n - 1]!, body) });
            sampleBytes += body.length;
          }
          await call('checkpoint/finish-upload', { jobId, location, path: multi.path, uploadId: multi.uploadId, parts: etags });
          sampleObjects++;
        }
      }
      oneAnswerMax = Math.max(oneAnswerMax, Buffer.byteLength(JSON.stringify({ files: everything })));
    }
    await call('checkpoint/complete', {
      ref: { jobId, attempt: 1, location, completedAtMs: clock.nowMs(), progressSec: 3600 },
      rank: 0,
    });
    // Read back as a new attempt would: the newest complete checkpoint, listed a page at a time.
    const latest = await call('checkpoint/latest', { jobId });
    let listedBack = 0;
    let after: string | undefined;
    do {
      const page = await call('checkpoint/download', { jobId, location: latest.ref!.location, ...(after !== undefined ? { after } : {}) });
      listedBack += page.files.length;
      after = page.next;
    } while (after !== undefined);
    return {
      shape: o.shape,
      files: o.files,
      fileBytes: o.fileBytes,
      parts,
      responses,
      responsesByOp: byOp,
      maxResponseBytes,
      limitBytes: MAX_RESPONSE_BYTES,
      oneAnswerMaxResponseBytes: oneAnswerMax,
      sampleObjects,
      sampleBytes,
      listedBack,
      seconds: Math.round((performance.now() - started) / 10) / 100,
    };
  } finally {
    s3.destroy();
    await s3rver.close();
    await dynamo.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

export async function benchCheckpoint(o: {
  files: number;
  fileGib: number;
  smallFiles: number;
  sampleParts: number;
  sampleFiles: number;
}): Promise<CheckpointBenchRow[]> {
  const rows = [
    await runShape({
      shape: `${o.files} x ${o.fileGib} GiB`,
      files: o.files,
      fileBytes: o.fileGib * GIB,
      samplePartsPerFile: o.sampleParts,
      sampleFiles: 1,
    }),
  ];
  if (o.smallFiles > 0)
    rows.push(
      await runShape({
        shape: `${o.smallFiles.toLocaleString('en-US')} small files`,
        files: o.smallFiles,
        fileBytes: 4096,
        samplePartsPerFile: 0,
        sampleFiles: o.sampleFiles,
      }),
    );
  return rows;
}

const invokedDirectly = process.argv[1] !== undefined && import.meta.url === new URL(`file://${process.argv[1]}`).href;
if (invokedDirectly) {
  const f = new Command('bench:checkpoint')
    .option('--files <n>', 'files of the large checkpoint (a rank per GPU, say)', wholeNumber('--files', 1, 10_000), 8)
    .option('--file-gib <n>', 'GiB per file of the large checkpoint', wholeNumber('--file-gib', 1, 2_000), 80)
    .option('--small-files <n>', 'files of the many-small-files checkpoint (0: none)', wholeNumber('--small-files', 0, 1_000_000), 100_000)
    .option('--sample-parts <n>', 'parts of the first large file really uploaded and completed', wholeNumber('--sample-parts', 0, 100), 1)
    .option('--sample-files <n>', 'small files really uploaded (then listed back)', wholeNumber('--sample-files', 0, 1_000_000), 2000)
    .option('--json', 'print JSON rows')
    .parse()
    .opts<{ files: number; fileGib: number; smallFiles: number; sampleParts: number; sampleFiles: number; json?: boolean }>();
  const rows = await benchCheckpoint(f);
  if (f.json) process.stdout.write(`${JSON.stringify(rows, null, 2)}\n`);
  else {
    const mb = (b: number) => `${(b / 1e6).toFixed(2)} MB`;
    process.stdout.write(
      `checkpoints through the agent API (real handler, real signer, s3rver + dynalite)\n` +
        `shape                     parts  calls  largest answer  one-answer design  sample (objects, bytes)  listed back  s\n` +
        rows
          .map(
            (r) =>
              `${r.shape.padEnd(22)} ${String(r.parts).padStart(8)} ${String(r.responses).padStart(6)} ${mb(r.maxResponseBytes).padStart(15)} ${mb(r.oneAnswerMaxResponseBytes).padStart(18)} ${`${r.sampleObjects}, ${mb(r.sampleBytes)}`.padStart(24)} ${String(r.listedBack).padStart(12)} ${r.seconds.toFixed(1).padStart(6)}`,
          )
          .join('\n') +
        `\nlimit: a function URL's BUFFERED answer is at most 6 MB (${MAX_RESPONSE_BYTES} bytes) → ${rows.every((r) => r.maxResponseBytes < r.limitBytes) ? 'every answer fits' : 'AN ANSWER DOES NOT FIT'}\n`,
    );
  }
}
