import { createWriteStream } from 'node:fs';
import { cp, mkdir, realpath, rm, stat } from 'node:fs/promises';
import { dirname, join, resolve, sep } from 'node:path';
import { partBytesFor } from '../core/bytes.ts';
import { pipeline } from 'node:stream/promises';
import { fileURLToPath } from 'node:url';
import { request as httpRequest, type IncomingMessage } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { GetObjectCommand, ListObjectsV2Command, type S3Client } from '@aws-sdk/client-s3';
import { Upload } from '@aws-sdk/lib-storage';
import { jobOfLocation, type AgentApiClient } from '../cloud/aws/agent-api-client.ts';
import { PART_URLS_PER_CALL, UPLOAD_FILES_PER_CALL } from '../cloud/aws/agent-api-protocol.ts';
import { parseS3Location } from '../cloud/aws/checkpoint-urls.ts';
import { CloudError, GpuFleetError, messageOf } from '../core/errors.ts';
import { closeAll, openJobFile, openJobFolder, readSmall, readStream, type JobFile } from './job-files.ts';

/**
 * Checkpoint files: the protocol between a job and its agent, and the store the agent copies
 * checkpoints to (S3 on AWS, a directory for local use and tests).
 *
 * The protocol (what a job does, in any language):
 * - It writes a checkpoint into a folder of its choice under `$GPU_FLEET_CHECKPOINT_DIR`, say
 *   `step-1200/`, then marks it complete by writing `$GPU_FLEET_CHECKPOINT_DIR/checkpoint.json`
 *   with `{"path": "step-1200", "progressSec": 1234}` (write a temporary file and rename it, so
 *   the agent never reads half a marker). `progressSec`, seconds of work done, is optional.
 * - It writes checkpoints at its own interval, and when it receives `$GPU_FLEET_CHECKPOINT_SIGNAL`
 *   (SIGUSR1 unless its spec says otherwise). After a signal it may exit or keep running.
 * - When resumed, `$GPU_FLEET_RESUME_DIR` holds the newest complete checkpoint folder's files.
 */

export const MARKER_FILE = 'checkpoint.json';

export interface CheckpointMarker {
  /** The folder (relative to the checkpoint directory) that holds the checkpoint. */
  readonly path: string;
  readonly progressSec?: number;
  /** When the agent saw the marker change (its file's modification time). */
  readonly modifiedAtMs: number;
}

export type MarkerRead =
  { readonly ok: true; readonly marker: CheckpointMarker } | { readonly ok: false; readonly problem: string } | undefined;

/** The most a marker may hold: it names a folder and a number. */
export const MARKER_MAX_BYTES = 64 * 1024;

/** The job's newest marker; undefined when it wrote none yet; a problem when it is unusable. */
export async function readMarker(checkpointDir: string): Promise<MarkerRead> {
  const file = join(checkpointDir, MARKER_FILE);
  let body: string;
  let modifiedAtMs: number;
  try {
    // The job owns this folder: the marker is opened without following a link or waiting on a FIFO, judged by its
    // handle (a regular file of the folder, small) and read from that handle, so no swap after a look can redirect it.
    const opened = await openJobFile(file, await realpath(checkpointDir), MARKER_MAX_BYTES);
    try {
      [body, modifiedAtMs] = [await readSmall(opened, MARKER_MAX_BYTES), opened.modifiedAtMs];
    } finally {
      await opened.handle.close();
    }
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    return { ok: false, problem: messageOf(error) };
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(body);
  } catch {
    return { ok: false, problem: `${file} is not JSON; expected {"path": "<folder>", "progressSec": <number>}` };
  }
  const p = parsed as { path?: unknown; progressSec?: unknown };
  if (typeof p.path !== 'string' || p.path === '') return { ok: false, problem: `${file}: "path" must name the checkpoint folder` };
  const folder = resolve(checkpointDir, p.path);
  if (folder === resolve(checkpointDir) || !folder.startsWith(resolve(checkpointDir) + sep)) {
    return { ok: false, problem: `${file}: "path" must be a folder inside the checkpoint directory; got ${JSON.stringify(p.path)}` };
  }
  try {
    if (!(await stat(folder)).isDirectory()) return { ok: false, problem: `${file}: ${p.path} is not a folder` };
    // Links are resolved: a folder (or a parent of it) that links out of the checkpoint directory is refused, so the
    // agent never copies the host's files into a checkpoint the job can read back.
    const [real, root] = await Promise.all([realpath(folder), realpath(checkpointDir)]);
    if (real === root || !real.startsWith(root + sep))
      return { ok: false, problem: `${file}: "path" must be a folder inside the checkpoint directory; ${p.path} links outside it` };
  } catch {
    return { ok: false, problem: `${file}: the folder ${p.path} does not exist` };
  }
  const progress =
    typeof p.progressSec === 'number' && Number.isFinite(p.progressSec) && p.progressSec >= 0 ? Math.floor(p.progressSec) : undefined;
  return {
    ok: true,
    marker: { path: p.path, modifiedAtMs: Math.floor(modifiedAtMs), ...(progress !== undefined ? { progressSec: progress } : {}) },
  };
}

/** Where checkpoints are kept between attempts (and machines). */
export interface CheckpointBlobs {
  /**
   * Copies a local folder to `location` (a folder URI ending in "/"). Idempotent: copying again
   * overwrites. Resolves the sizes of the files it copied: the save's size the index bills.
   * `within` is the folder every file read must lie in (agent/job-files.ts): the job's checkpoint
   * folder, which the agent made and the job cannot swap. Left out, it is `localDir` itself, safe
   * only when no folder from `within` down is the job's to swap (tests, a store of the agent's own).
   */
  upload(localDir: string, location: string, within?: string): Promise<readonly number[]>;
  /** Copies `location` into a local folder; false when nothing is there. */
  download(location: string, localDir: string): Promise<boolean>;
}

/** A folder on this machine (or a mounted file system) as the checkpoint store: `file:///…/` locations. */
export class DirectoryBlobs implements CheckpointBlobs {
  constructor(readonly root: string) {}

  private pathOf(location: string): string {
    if (!location.startsWith('file://')) throw new GpuFleetError(`this checkpoint store keeps file:// locations; got ${location}`);
    const p = fileURLToPath(location);
    const root = resolve(this.root);
    if (resolve(p) !== root && !resolve(p).startsWith(root + sep))
      throw new GpuFleetError(`${location} is outside the checkpoint store ${this.root}`);
    return p;
  }

  async upload(localDir: string, location: string, within = localDir): Promise<readonly number[]> {
    const target = this.pathOf(location);
    const files = await openJobFolder(localDir, within);
    try {
      await rm(target, { recursive: true, force: true });
      await mkdir(target, { recursive: true });
      // Regular files only, each read from the handle it was judged by: a link the job left is not followed, nor copied.
      for (const f of files) {
        const to = join(target, ...f.path.split('/'));
        await mkdir(dirname(to), { recursive: true });
        await pipeline(readStream(f), createWriteStream(to));
      }
      return files.map((f) => f.bytes);
    } finally {
      await closeAll(files);
    }
  }

  async download(location: string, localDir: string): Promise<boolean> {
    const source = this.pathOf(location);
    try {
      if (!(await stat(source)).isDirectory()) return false;
    } catch {
      return false;
    }
    await rm(localDir, { recursive: true, force: true });
    await cp(source, localDir, { recursive: true });
    return true;
  }
}

/** S3 as the checkpoint store: `s3://bucket/prefix/` locations; large files go up in parts. */
export class S3Blobs implements CheckpointBlobs {
  constructor(private readonly s3: S3Client) {}

  private parse(location: string): { bucket: string; prefix: string } {
    return parseS3Location(location);
  }

  async upload(localDir: string, location: string, within = localDir): Promise<readonly number[]> {
    const { bucket, prefix } = this.parse(location);
    const files = await openJobFolder(localDir, within);
    try {
      for (const f of files) {
        // The bucket's default encryption (KMS) applies; large files go up in parts as large as through the agent API (each part is a billed PUT).
        await new Upload({
          client: this.s3,
          params: { Bucket: bucket, Key: prefix + f.path, Body: readStream(f) },
          queueSize: 4,
          partSize: partBytesFor(f.bytes),
        }).done();
      }
      return files.map((f) => f.bytes);
    } finally {
      await closeAll(files);
    }
  }

  async download(location: string, localDir: string): Promise<boolean> {
    const { bucket, prefix } = this.parse(location);
    const keys: string[] = [];
    let token: string | undefined;
    do {
      const page = await this.s3.send(
        new ListObjectsV2Command({ Bucket: bucket, Prefix: prefix, ...(token ? { ContinuationToken: token } : {}) }),
      );
      for (const o of page.Contents ?? []) if (o.Key && !o.Key.endsWith('/')) keys.push(o.Key);
      token = page.IsTruncated ? page.NextContinuationToken : undefined;
    } while (token);
    if (keys.length === 0) return false;
    await rm(localDir, { recursive: true, force: true });
    for (const key of keys) {
      const rel = key.slice(prefix.length);
      const target = resolve(localDir, ...rel.split('/'));
      if (!target.startsWith(resolve(localDir) + sep)) throw new GpuFleetError(`S3 key ${key} would land outside ${localDir}`);
      await mkdir(dirname(target), { recursive: true });
      const obj = await this.s3.send(new GetObjectCommand({ Bucket: bucket, Key: key }));
      await pipeline(obj.Body as NodeJS.ReadableStream, createWriteStream(target));
    }
    return true;
  }
}

/**
 * The checkpoint store through the agent API: the API hands out a presigned URL per object (or per
 * part of a large one) for folders of the jobs this machine holds, and the agent moves the bytes
 * straight to and from S3. The machine itself has no S3 permission on the checkpoints.
 */
export class AgentApiBlobs implements CheckpointBlobs {
  constructor(
    private readonly api: AgentApiClient,
    private readonly root: string,
  ) {}

  private jobOf(location: string): string {
    const jobId = jobOfLocation(this.root, location);
    if (jobId === undefined) throw new GpuFleetError(`${location} is not under the checkpoint root ${this.root}`);
    return jobId;
  }

  async upload(localDir: string, location: string, within = localDir): Promise<readonly number[]> {
    const jobId = this.jobOf(location);
    const files = await openJobFolder(localDir, within);
    try {
      await this.send(jobId, location, files);
    } finally {
      await closeAll(files);
    }
    return files.map((f) => f.bytes);
  }

  private async send(jobId: string, location: string, files: readonly JobFile[]): Promise<void> {
    // Pages of files, then of part URLs, asked for as the upload goes: every answer stays far under the function
    // URL's 6 MB limit, and no URL is handed out long before it is used (they expire).
    for (let i = 0; i < files.length; i += UPLOAD_FILES_PER_CALL) {
      const batch = files.slice(i, i + UPLOAD_FILES_PER_CALL);
      const { files: targets } = await this.api.call('checkpoint/upload', {
        jobId,
        location,
        files: batch.map(({ path, bytes }) => ({ path, bytes })),
      });
      for (const t of targets) {
        const f = batch.find((b) => b.path === t.path)!;
        if ('url' in t) {
          await transfer('PUT', t.url, { file: f, start: 0, bytes: f.bytes });
          continue;
        }
        const parts: { partNumber: number; etag: string }[] = [];
        for (let first = 1; first <= t.parts; first += PART_URLS_PER_CALL) {
          const count = Math.min(PART_URLS_PER_CALL, t.parts - first + 1);
          const { urls } = await this.api.call('checkpoint/upload-parts', {
            jobId,
            location,
            path: t.path,
            uploadId: t.uploadId,
            firstPart: first,
            count,
          });
          for (let k = 0; k < urls.length; k++) {
            const n = first + k;
            const start = (n - 1) * t.partBytes;
            const etag = await transfer('PUT', urls[k]!, { file: f, start, bytes: Math.min(t.partBytes, f.bytes - start) });
            parts.push({ partNumber: n, etag: etag ?? '' });
          }
        }
        await this.api.call('checkpoint/finish-upload', { jobId, location, path: t.path, uploadId: t.uploadId, parts });
      }
    }
  }

  async download(location: string, localDir: string): Promise<boolean> {
    const jobId = this.jobOf(location);
    let any = false;
    let after: string | undefined;
    do {
      const page: { files: readonly { path: string; url: string }[]; next?: string } = await this.api.call('checkpoint/download', {
        jobId,
        location,
        ...(after !== undefined ? { after } : {}),
      });
      if (!any && page.files.length > 0) {
        any = true;
        await rm(localDir, { recursive: true, force: true });
      }
      for (const f of page.files) {
        const target = resolve(localDir, ...f.path.split('/'));
        if (!target.startsWith(resolve(localDir) + sep))
          throw new GpuFleetError(`checkpoint file ${f.path} would land outside ${localDir}`);
        await mkdir(dirname(target), { recursive: true });
        await transfer('GET', f.url, { into: target });
      }
      after = page.next;
    } while (after !== undefined);
    return any;
  }
}

/** One presigned request: a PUT of a file's byte range (with its length, as S3 asks), or a GET into a file. Resolves the ETag. */
function transfer(
  method: 'PUT' | 'GET',
  url: string,
  body: { file: JobFile; start: number; bytes: number } | { into: string },
): Promise<string | undefined> {
  const where = new URL(url);
  const send = where.protocol === 'https:' ? httpsRequest : httpRequest;
  return new Promise((resolvePromise, reject) => {
    const req = send(
      where,
      { method, headers: 'file' in body ? { 'content-length': String(body.bytes) } : {}, timeout: 120_000 },
      (res: IncomingMessage) => {
        const fail = (detail: string) =>
          reject(
            new CloudError(
              res.statusCode === 403 ? 'access-denied' : 'unavailable',
              `${method} ${where.host}${where.pathname} failed: ${res.statusCode} ${detail}`,
              { operation: `checkpoint ${method}` },
            ),
          );
        if ((res.statusCode ?? 0) >= 300) {
          let text = '';
          res.setEncoding('utf8');
          res.on('data', (c: string) => (text += c.slice(0, 500)));
          res.on('end', () => fail(text.slice(0, 500)));
          return;
        }
        const etag = typeof res.headers.etag === 'string' ? res.headers.etag : undefined;
        if ('into' in body) pipeline(res, createWriteStream(body.into)).then(() => resolvePromise(etag), reject);
        else {
          res.resume();
          res.on('end', () => resolvePromise(etag));
        }
      },
    );
    req.on('timeout', () =>
      req.destroy(new CloudError('unavailable', `${method} ${where.host} timed out`, { operation: `checkpoint ${method}` })),
    );
    req.on('error', reject);
    if ('file' in body && body.bytes > 0) pipeline(readStream(body.file, body.start, body.bytes), req).catch(reject);
    else req.end();
  });
}
