import { z } from 'zod';
import type { Draining, NodeRecord } from '../../core/fleet.ts';
import type { CheckpointRef, Job } from '../../core/job.ts';
import type { WriteResult } from '../../core/ports.ts';

/**
 * The agent API's wire format: what a node agent sends to the API function (functions/agent-api.ts)
 * and what it gets back. One POST per call, to `<function URL>/v1/<op>`, with a JSON body; the
 * request is signed (SigV4, service `lambda`) with the machine's instance role, and the API takes
 * the caller's machine from that signature, never from the body, and the times of a node's
 * registration and heartbeats from its own clock. Errors come back as
 * `{ error, code }` with status 400 (the request is malformed), 403 (the caller may not) or 500.
 */

const object = z.custom<Record<string, unknown>>((v) => typeof v === 'object' && v !== null && !Array.isArray(v), 'an object');
const jobId = z.string().min(1).max(256);
const attempt = z.number().int().min(1);
const timeMs = z.number().int().min(0);
const health = z.object({ healthy: z.boolean(), problem: z.string().max(2000).optional() });

/** A checkpoint file, named by its path under the folder ("/"-separated, no "." or ".." parts). */
const filePath = z
  .string()
  .min(1)
  .max(1024)
  .refine(
    (p) => !p.startsWith('/') && p.split('/').every((s) => s !== '' && s !== '.' && s !== '..'),
    'a relative path with no empty, "." or ".." part',
  );

export const AGENT_API = {
  'node/register': z.object({
    record: z.object({
      groupId: z.string().min(1).max(256),
      gpus: z.array(object).max(64),
      address: z.string().max(64).optional(),
      healthy: z.boolean(),
      healthProblem: z.string().max(2000).optional(),
    }),
  }),
  'node/heartbeat': z.object({ health: health.optional() }),
  'node/get': z.object({ instanceId: z.string().min(1).max(128) }),
  'node/unassign': z.object({ jobId, attempt }),
  'node/drain': z.object({
    drain: z.object({ sinceMs: timeMs, reason: z.string().min(1).max(2000), deadlineMs: timeMs, groupId: z.string().max(256).optional() }),
  }),
  'job/get': z.object({ jobId }),
  'job/update': z.object({ next: object, expectedVersion: z.number().int().min(0) }),
  'checkpoint/latest': z.object({ jobId }),
  'checkpoint/complete': z.object({ ref: object, rank: z.number().int().min(0).max(4096) }),
  'checkpoint/upload': z.object({
    jobId,
    location: z.string().min(1).max(2048),
    files: z
      .array(z.object({ path: filePath, bytes: z.number().int().min(0) }))
      .min(1)
      .max(100),
  }),
  'checkpoint/finish-upload': z.object({
    jobId,
    location: z.string().min(1).max(2048),
    path: filePath,
    uploadId: z.string().min(1).max(1024),
    parts: z
      .array(z.object({ partNumber: z.number().int().min(1).max(10_000), etag: z.string().min(1).max(256) }))
      .min(1)
      .max(10_000),
  }),
  'checkpoint/download': z.object({ jobId, location: z.string().min(1).max(2048) }),
} as const;

export type AgentApiOp = keyof typeof AGENT_API;
export type AgentApiRequest<Op extends AgentApiOp> = z.infer<(typeof AGENT_API)[Op]>;

/** Where one file of a checkpoint goes: one presigned PUT, or the parts of a multipart upload (each a presigned PUT of `partBytes`, the last shorter). */
export type UploadTarget =
  | { readonly path: string; readonly url: string }
  | { readonly path: string; readonly uploadId: string; readonly partBytes: number; readonly partUrls: readonly string[] };

export interface AgentApiResponses {
  'node/register': Record<string, never>;
  'node/heartbeat': { known: boolean };
  'node/get': { record?: NodeRecord };
  'node/unassign': Record<string, never>;
  'node/drain': { record: NodeRecord };
  'job/get': { job?: Job };
  'job/update': WriteResult;
  'checkpoint/latest': { ref?: CheckpointRef };
  'checkpoint/complete': { complete: boolean };
  'checkpoint/upload': { files: readonly UploadTarget[] };
  'checkpoint/finish-upload': Record<string, never>;
  'checkpoint/download': { files: readonly { readonly path: string; readonly url: string }[] };
}

export type DrainRequest = Draining & { groupId?: string };

/** Files up to this size go up in one PUT; larger ones in parts. */
export const SINGLE_PUT_MAX_BYTES = 64 * 1024 * 1024;
/** A multipart upload's parts are at least this big, and there are at most {@link MAX_PARTS} of them (S3 allows 10,000 of up to 5 GiB). */
export const MIN_PART_BYTES = 64 * 1024 * 1024;
export const MAX_PARTS = 500;
export const MAX_PART_BYTES = 5 * 1024 ** 3;

/** The part size for a file of `bytes`: the smallest whole MiB ≥ {@link MIN_PART_BYTES} that needs no more than {@link MAX_PARTS} parts. */
export function partBytesFor(bytes: number): number {
  const mib = 1024 * 1024;
  return Math.max(MIN_PART_BYTES, Math.ceil(bytes / MAX_PARTS / mib) * mib);
}

/** The caller's machine, from the IAM identity the function URL checked: the instance id is the session name EC2 gives the instance role. */
export function callerMachine(userArn: string | undefined, agentRoleName: string): string | { error: string } {
  const m = /^arn:aws[a-z-]*:sts::\d{12}:assumed-role\/([^/]+)\/(i-[0-9a-f]{8,17})$/.exec(userArn ?? '');
  if (!m) return { error: `the caller ${userArn ?? '(unsigned)'} is not a machine's instance role session` };
  if (m[1] !== agentRoleName) return { error: `the caller's role ${m[1]} is not the node agent's role (${agentRoleName})` };
  return m[2]!;
}
