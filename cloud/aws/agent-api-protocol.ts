import '../../core/schema.ts';
import * as z from 'zod/mini';
import type { Draining, NodeRecord } from '../../core/fleet.ts';
import { GPU_REPORT } from '../../core/gpu.ts';
import type { CheckpointRef, Job } from '../../core/job.ts';
import type { WriteResult } from '../../core/ports.ts';

/**
 * The agent API's wire format: what a node agent sends to the API function (functions/agent-api.ts)
 * and what it gets back. One POST per call, to `<function URL>/v1/<op>`, with a JSON body; the
 * request is signed (SigV4, service `lambda`) with the machine's instance role, and the API takes
 * the caller's machine from that signature, never from the body, and the times of a node's
 * registration and heartbeats from its own clock. Errors come back as
 * `{ error, code }` with status 400 (the request is malformed), 403 (the caller may not), 409 (a
 * checkpoint completion the index refused), 503 (worth retrying) or 500.
 */

const object = z.custom<Record<string, unknown>>((v) => typeof v === 'object' && v !== null && !Array.isArray(v), { error: 'an object' });
const text = (min: number, max: number) => z.string().check(z.minLength(min), z.maxLength(max));
const int = (min: number, max = Number.MAX_SAFE_INTEGER) => z.number().check(z.int(), z.gte(min), z.lte(max));
const jobId = text(1, 256);
const attempt = int(1);
const timeMs = int(0);
const location = text(1, 2048);
const health = z.strictObject({ healthy: z.boolean(), problem: z.optional(text(0, 2000)) });

/** A checkpoint file, named by its path under the folder ("/"-separated, no "." or ".." parts). */
const filePath = text(1, 1024).check(
  z.refine((p: string) => !p.startsWith('/') && p.split('/').every((s) => s !== '' && s !== '.' && s !== '..'), {
    error: 'a relative path with no empty, "." or ".." part',
  }),
);

/**
 * The most a function URL in BUFFERED mode (the default, and this stack's) returns: "The maximum
 * payload size is 6 MB" (Lambda developer guide, "Invoking a response streaming enabled function
 * using Lambda function URLs"; the request is limited alike). Each call's
 * answer is bounded well under it by the pages below, whatever the checkpoint's size or file
 * count: a page of {@link UPLOAD_FILES_PER_CALL} targets, {@link PART_URLS_PER_CALL} part URLs or
 * {@link DOWNLOAD_FILES_PER_CALL} download URLs, each URL at most about 6 KB (a 2,048-character
 * location, a 1,024-character path, escaped, and the signature). The handler refuses to send a
 * response over the limit rather than have the function fail.
 */
export const MAX_RESPONSE_BYTES = 6 * 1000 * 1000;
export const UPLOAD_FILES_PER_CALL = 100;
export const PART_URLS_PER_CALL = 200;
export const DOWNLOAD_FILES_PER_CALL = 200;

export const AGENT_API = {
  'node/register': z.strictObject({
    record: z.strictObject({
      groupId: text(1, 256),
      gpus: GPU_REPORT,
      address: z.optional(text(0, 64)),
      healthy: z.boolean(),
      healthProblem: z.optional(text(0, 2000)),
    }),
  }),
  'node/heartbeat': z.strictObject({ health: z.optional(health) }),
  'node/get': z.strictObject({ instanceId: text(1, 128) }),
  'node/unassign': z.strictObject({ jobId, attempt }),
  'node/images': z.strictObject({ images: z.array(text(1, 512)).check(z.maxLength(64)) }),
  // A machine being prepared in its group's warm pool: what it pulls before it is stopped, then its launch hook let go.
  'node/warm-images': z.strictObject({
    machine: z.strictObject({
      cloud: z.enum(['aws', 'gcp']),
      region: text(1, 64),
      zone: text(1, 64),
      instanceType: text(1, 64),
      capacityType: z.enum(['spot', 'on-demand', 'reserved']),
      migMode: z.boolean(),
    }),
  }),
  'node/launch-ready': z.strictObject({ groupName: text(1, 255) }),
  // A warned machine's replica leaving its service's target group, as late as lets it drain before the machine stops.
  'service/leave': z.strictObject({ jobId, attempt }),
  // The values of the secrets the attempt's job names by reference (core/secrets.ts), for its container's env file only.
  'attempt/secrets': z.strictObject({ jobId, attempt }),
  'node/drain': z.strictObject({
    drain: z.strictObject({ sinceMs: timeMs, reason: text(1, 2000), deadlineMs: timeMs, groupId: z.optional(text(0, 256)) }),
  }),
  'job/get': z.strictObject({ jobId }),
  'job/update': z.strictObject({ next: object, expectedVersion: int(0) }),
  'checkpoint/latest': z.strictObject({ jobId }),
  'checkpoint/complete': z.strictObject({ ref: object, rank: int(0, 4096) }),
  'checkpoint/upload': z.strictObject({
    jobId,
    location,
    files: z.array(z.strictObject({ path: filePath, bytes: int(0) })).check(z.minLength(1), z.maxLength(UPLOAD_FILES_PER_CALL)),
  }),
  'checkpoint/upload-parts': z.strictObject({
    jobId,
    location,
    path: filePath,
    uploadId: text(1, 1024),
    firstPart: int(1, 10_000),
    count: int(1, PART_URLS_PER_CALL),
  }),
  'checkpoint/finish-upload': z.strictObject({
    jobId,
    location,
    path: filePath,
    uploadId: text(1, 1024),
    parts: z.array(z.strictObject({ partNumber: int(1, 10_000), etag: text(1, 256) })).check(z.minLength(1), z.maxLength(10_000)),
  }),
  'checkpoint/download': z.strictObject({ jobId, location, after: z.optional(filePath) }),
  'service/metrics': z.strictObject({
    jobId,
    attempt,
    samples: z
      .array(
        z.strictObject({
          metric: z.enum(['waiting-requests', 'running-requests']),
          value: z.number().check(z.gte(0), z.lte(1e9)),
          atMs: timeMs,
        }),
      )
      .check(z.minLength(1), z.maxLength(20)),
  }),
  'logs/put': z.strictObject({
    jobId,
    attempt,
    rank: int(0, 4096),
    lines: z.array(z.strictObject({ atMs: timeMs, seq: int(0), line: text(0, 16 * 1024) })).check(z.minLength(1), z.maxLength(1000)),
  }),
} as const;

export type AgentApiOp = keyof typeof AGENT_API;
export type AgentApiRequest<Op extends AgentApiOp> = z.infer<(typeof AGENT_API)[Op]>;

/**
 * Where one file of a checkpoint goes: one presigned PUT, or a multipart upload of `parts` parts of
 * `partBytes` each (the last shorter), whose part URLs the agent asks for a page at a time
 * (`checkpoint/upload-parts`) as the upload goes.
 */
export type UploadTarget =
  | { readonly path: string; readonly url: string }
  | { readonly path: string; readonly uploadId: string; readonly partBytes: number; readonly parts: number };

export interface AgentApiResponses {
  'node/register': Record<string, never>;
  'node/heartbeat': { known: boolean };
  /**
   * The machine's own record comes with a credential for each attempt on its work list
   * (cloud/aws/attempt-credentials.ts); another machine's record, with none.
   */
  'node/get': { record?: NodeRecord; credentials?: readonly AttemptCredential[] };
  'node/unassign': Record<string, never>;
  'node/images': { known: boolean };
  'node/warm-images': { images: readonly string[] };
  'node/launch-ready': Record<string, never>;
  'service/leave': Record<string, never>;
  'attempt/secrets': { values: Record<string, string> };
  'node/drain': { record: NodeRecord };
  'job/get': { job?: Job };
  'job/update': WriteResult;
  'checkpoint/latest': { ref?: CheckpointRef };
  'checkpoint/complete': { complete: boolean };
  'checkpoint/upload': { files: readonly UploadTarget[] };
  'checkpoint/upload-parts': { urls: readonly string[] };
  'checkpoint/finish-upload': Record<string, never>;
  /** A page of the folder's files in path order; `next` (the last path) asks for the page after it. */
  'checkpoint/download': { files: readonly { readonly path: string; readonly url: string }[]; next?: string };
  'logs/put': Record<string, never>;
  'service/metrics': Record<string, never>;
}

export type DrainRequest = Draining & { groupId?: string };

/** The request header that carries an attempt's credential (cloud/aws/attempt-credentials.ts) to the agent API. */
export const ATTEMPT_HEADER = 'x-gpu-fleet-attempt';

/** An attempt's credential, as `node/get` hands it to the machine that runs the attempt. */
export interface AttemptCredential {
  readonly jobId: string;
  readonly attempt: number;
  readonly credential: string;
}

/**
 * What a call acts for, and so the attempt credential it must carry (header `x-gpu-fleet-attempt`):
 * the job, and the attempt where the call names one (an attempt's writes: its checkpoint files by
 * their folder, `attempt-N/`). A read of the job (its spec and variables, its newest save, a save's
 * files) takes a credential of any attempt of it the machine was given; `job/update` one of the
 * attempt the stored job is at (the API checks it against the record). Undefined for the machine's
 * own calls (its record, its heartbeat, its drain mark, its work list, its launch hook).
 */
export function claimOf<Op extends AgentApiOp>(op: Op, body: AgentApiRequest<Op>): { jobId: string; attempt?: number } | undefined {
  const b = body as Record<string, unknown>;
  switch (op) {
    case 'job/get':
    case 'checkpoint/latest':
    case 'checkpoint/download':
      return { jobId: b.jobId as string };
    // A body that names no job is malformed: the call itself says so (400), no credential is asked for.
    case 'job/update': {
      const next = b.next as { id?: unknown };
      return typeof next.id === 'string' ? { jobId: next.id } : undefined;
    }
    case 'checkpoint/complete': {
      const ref = b.ref as { jobId?: unknown; attempt?: unknown };
      return typeof ref.jobId === 'string' ? { jobId: ref.jobId, attempt: typeof ref.attempt === 'number' ? ref.attempt : 0 } : undefined;
    }
    case 'checkpoint/upload':
    case 'checkpoint/upload-parts':
    case 'checkpoint/finish-upload':
      return { jobId: b.jobId as string, attempt: attemptOfFolder(b.location as string) };
    case 'logs/put':
    case 'attempt/secrets':
    case 'service/leave':
    case 'service/metrics':
      return { jobId: b.jobId as string, attempt: b.attempt as number };
    default:
      return undefined;
  }
}

/** The attempt a checkpoint location's folder names (`…/attempt-N/…`, the last such part), or 0 when it names none. */
export function attemptOfFolder(location: string): number {
  const all = [...location.matchAll(/\/attempt-([1-9]\d{0,15})\//g)];
  const n = Number(all[all.length - 1]?.[1] ?? 0);
  return Number.isSafeInteger(n) ? n : 0;
}

// The upload sizes are core's (core/bytes.ts): the simulation bills the same requests the agent makes.
export { MAX_PART_BYTES, MAX_PARTS, MIN_PART_BYTES, partBytesFor, SINGLE_PUT_MAX_BYTES } from '../../core/bytes.ts';

/** The caller's machine, from the IAM identity the function URL checked: the instance id is the session name EC2 gives the instance role. */
export function callerMachine(userArn: string | undefined, agentRoleName: string): string | { error: string } {
  const m = /^arn:aws[a-z-]*:sts::\d{12}:assumed-role\/([^/]+)\/(i-[0-9a-f]{8,17})$/.exec(userArn ?? '');
  if (!m) return { error: `the caller ${userArn ?? '(unsigned)'} is not a machine's instance role session` };
  if (m[1] !== agentRoleName) return { error: `the caller's role ${m[1]} is not the node agent's role (${agentRoleName})` };
  return m[2]!;
}
