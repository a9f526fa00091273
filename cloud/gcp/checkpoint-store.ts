import type { Bucket, Storage } from '@google-cloud/storage';
import { GpuFleetError } from '../../core/errors.ts';
import type { CheckpointHistory, Clock, JobStore } from '../../core/ports.ts';
import { DOWNLOAD_FILES_PER_CALL, type UploadTarget } from '../aws/agent-api-protocol.ts';
import type { CheckpointUrls } from '../aws/checkpoint-urls.ts';
import { BucketSweep, type ListedObject, type SweepPosition, type SweptBucket } from '../checkpoint-sweep.ts';
import { translateGcpError } from './errors.ts';

/**
 * Cloud Storage as a checkpoint store: a bucket in each GCP region whose machines save there, so a
 * save and its read back stay in the region (no egress, no NAT: Private Google Access). Locations
 * are `gs://bucket/prefix/…`. Through the JSON API with `@google-cloud/storage`: the node agent
 * uploads and reads with its machine's service account (agent/gcs-blobs.ts); the control plane
 * sweeps each bucket by the index's rule and signs V4 read URLs for a machine of another cloud that
 * resumes from a save kept here.
 */

/** `gs://bucket/prefix/` as bucket and key prefix (ending in "/", or empty). */
export function parseGsLocation(location: string): { bucket: string; prefix: string } {
  const m = /^gs:\/\/([a-z0-9][a-z0-9._-]{1,220}[a-z0-9])\/(.*)$/.exec(location);
  if (!m) throw new GpuFleetError(`not a Cloud Storage location (gs://bucket/prefix/): ${location}`);
  const prefix = m[2]!;
  return { bucket: m[1]!, prefix: prefix === '' || prefix.endsWith('/') ? prefix : `${prefix}/` };
}

/** A Cloud Storage call, its failure in the port's vocabulary (with the call and the object). */
export async function gcs<T>(operation: string, resource: string, f: () => Promise<T>): Promise<T> {
  try {
    return await f();
  } catch (error) {
    throw translateGcpError(error, { operation, resource });
  }
}

/** Deletes at once at most this many objects (the JSON API deletes one object a request). */
const DELETES_AT_ONCE = 16;

/** A region's Cloud Storage checkpoint bucket, as a sweep lists and deletes it. */
export class GcsSweptBucket implements SweptBucket {
  readonly prefix: string;
  private readonly bucket: Bucket;

  constructor(
    storage: Storage,
    readonly root: string,
  ) {
    const { bucket, prefix } = parseGsLocation(root);
    this.bucket = storage.bucket(bucket);
    this.prefix = prefix;
  }

  uriOf(key: string): string {
    return `gs://${this.bucket.name}/${key}`;
  }

  async list(prefix: string, page: { startAfter?: string; token?: string; max: number }) {
    // startOffset includes its own name; a sweep's position names no object ("<folder>0"), and a key equal to it is skipped below.
    const [files, next] = await gcs('list checkpoint objects', this.uriOf(prefix), () =>
      this.bucket.getFiles({
        prefix,
        maxResults: page.max,
        autoPaginate: false,
        ...(page.startAfter ? { startOffset: page.startAfter } : {}),
        ...(page.token ? { pageToken: page.token } : {}),
      }),
    );
    const objects: ListedObject[] = [];
    for (const f of files) {
      const updated = Date.parse(String(f.metadata.updated ?? ''));
      if (f.name === page.startAfter || !Number.isFinite(updated)) continue;
      objects.push({ key: f.name, modifiedAtMs: updated });
    }
    const token = (next as { pageToken?: string } | null | undefined)?.pageToken;
    return { objects, ...(token ? { token } : {}) };
  }

  async delete(keys: readonly string[]): Promise<number> {
    for (let i = 0; i < keys.length; i += DELETES_AT_ONCE)
      await Promise.all(
        keys
          .slice(i, i + DELETES_AT_ONCE)
          .map((key) => gcs('delete expired checkpoint', this.uriOf(key), () => this.bucket.file(key).delete({ ignoreNotFound: true }))),
      );
    return keys.length;
  }
}

/** The sweep of one region's Cloud Storage checkpoint bucket (the rule and its order: cloud/checkpoint-sweep.ts). */
export function gcsCheckpointSweep(deps: {
  readonly storage: Storage;
  readonly root: string;
  readonly at: SweepPosition;
  readonly jobs: JobStore;
  readonly checkpoints: CheckpointHistory;
  readonly clock: Clock;
  readonly retentionDays: number;
  readonly budgetMs?: number;
}): BucketSweep {
  return new BucketSweep(new GcsSweptBucket(deps.storage, deps.root), deps.at, deps);
}

/**
 * Read URLs for saves kept in Cloud Storage, for the agent API: a machine of another cloud (an
 * AWS machine resuming a job that last ran on GCP) gets a V4 signed GET per object, signed with the
 * control plane's service account key, lasting `expiresInSec`. Machines write only to their own
 * site's store, so a GCP bucket takes no upload through the API.
 */
export class GcsCheckpointUrls implements CheckpointUrls {
  constructor(
    private readonly storage: Storage,
    private readonly expiresInSec = 3600,
    private readonly clock: Clock = { nowMs: () => Date.now() },
  ) {}

  uploadTargets(location: string): Promise<UploadTarget[]> {
    return Promise.reject(this.noWrites(location));
  }
  partUrls(location: string): Promise<string[]> {
    return Promise.reject(this.noWrites(location));
  }
  finishUpload(location: string): Promise<void> {
    return Promise.reject(this.noWrites(location));
  }

  private noWrites(location: string): GpuFleetError {
    return new GpuFleetError(
      `${location} is in Cloud Storage: a machine saves into its own site's store, and only GCP machines write there`,
    );
  }

  async downloadUrls(location: string, after?: string, limit = DOWNLOAD_FILES_PER_CALL) {
    const { bucket: name, prefix } = parseGsLocation(location);
    const bucket = this.storage.bucket(name);
    // startOffset includes its own name: one more is asked for, and the object named `after` (the last page's last) left out.
    const skip = after === undefined ? undefined : `${prefix}${after}`;
    const [listed, next] = await gcs('list checkpoint', location, () =>
      bucket.getFiles({ prefix, maxResults: limit + (skip ? 1 : 0), autoPaginate: false, ...(skip ? { startOffset: skip } : {}) }),
    );
    const page = listed.filter((f) => f.name !== skip);
    const files = page.slice(0, limit);
    const more = files.length < page.length || (next as { pageToken?: string } | null | undefined)?.pageToken !== undefined;
    const out: { path: string; url: string }[] = [];
    const expires = this.clock.nowMs() + this.expiresInSec * 1000;
    // A folder's marker object ("…/") is no file; it still moves the page on.
    for (const f of files)
      if (!f.name.endsWith('/'))
        out.push({
          path: f.name.slice(prefix.length),
          url: (await gcs('sign checkpoint read', f.name, () => f.getSignedUrl({ version: 'v4', action: 'read', expires })))[0],
        });
    const last = files.at(-1)?.name;
    return { files: out, ...(more && last !== undefined ? { next: last.slice(prefix.length) } : {}) };
  }
}
