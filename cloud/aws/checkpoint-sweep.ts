import { DeleteObjectsCommand, ListObjectsV2Command, S3Client } from '@aws-sdk/client-s3';
import { GetCommand, PutCommand, type DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import { checkpointObjectExpired, forgettable } from '../../core/job.ts';
import type { CheckpointHistory, CheckpointSweep, Clock, JobStore } from '../../core/ports.ts';
import { parseS3Location } from './checkpoint-urls.ts';
import { checkpointRoot } from './dynamo-store.ts';
import { translateAwsError } from './errors.ts';

const DAY_MS = 86_400_000;
/** Job folders a sweep works on at once: each is a few calls (two reads, a listing, a delete, a write), mostly waiting on the network. */
export const SWEEP_CONCURRENCY = 32;

/**
 * The checkpoint bucket's retention, derived from the index (`checkpointObjectExpired`): the
 * bucket's lifecycle expires no checkpoint, and each reconcile sweeps a share of the job folders
 * under the root instead, in key order from where the last sweep stopped (the position is kept in
 * the control table), for at most `budgetMs` (at least one batch of `concurrency` job folders,
 * swept at once, each time). For each job
 * folder it reads the job and the saves the index retains (newest, the one it replaced, the
 * superseded ones), lists the folder's objects, deletes those the rule lets go (DeleteObjects,
 * 1,000 keys a call), and then tells the index which superseded saves are gone. The index is read
 * before the objects are listed: a save that completes meanwhile is not in what was read, so its
 * objects count as unrecorded, which are kept for an hour.
 */
export class S3CheckpointSweep implements CheckpointSweep {
  private readonly bucket: string;
  private readonly prefix: string;

  constructor(
    private readonly deps: {
      readonly s3: S3Client;
      /** The checkpoint root, `s3://bucket/prefix/` (what the index's locations start with). */
      readonly root: string;
      readonly jobs: JobStore;
      readonly checkpoints: CheckpointHistory;
      /** Where the sweep's position is kept: the control table. */
      readonly doc: DynamoDBDocumentClient;
      readonly table: string;
      readonly clock: Clock;
      readonly retentionDays: number;
      /** How long one sweep may run (a share of the reconcile function's time). */
      readonly budgetMs?: number;
      /** Job folders swept at once (default {@link SWEEP_CONCURRENCY}). */
      readonly concurrency?: number;
    },
  ) {
    const { bucket, prefix } = parseS3Location(deps.root);
    this.bucket = bucket;
    this.prefix = prefix;
  }

  async sweep(): Promise<{ jobs: number; deleted: number; wrapped: boolean }> {
    const { clock } = this.deps;
    const startedMs = clock.nowMs();
    const untilMs = startedMs + (this.deps.budgetMs ?? 10_000);
    const concurrency = this.deps.concurrency ?? SWEEP_CONCURRENCY;
    let after = await this.position();
    let jobs = 0;
    let deleted = 0;
    for (;;) {
      // The next job folders: a page of keys past the last folder swept (plain keys, no delimiter: each folder is then
      // listed whole), and the folders they are in, in key order. Loose keys under the root are no job's folder.
      const page = await this.call('list checkpoint job folders', this.prefix, () =>
        this.deps.s3.send(
          new ListObjectsV2Command({ Bucket: this.bucket, Prefix: this.prefix, MaxKeys: 1000, ...(after ? { StartAfter: after } : {}) }),
        ),
      );
      const folders: string[] = [];
      for (const o of page.Contents ?? []) {
        const slash = o.Key ? o.Key.indexOf('/', this.prefix.length) : -1;
        const folder = slash < 0 ? undefined : o.Key!.slice(0, slash + 1);
        if (folder && folder !== folders[folders.length - 1]) folders.push(folder);
      }
      const lastKey = page.Contents?.[page.Contents.length - 1]?.Key;
      if (folders.length === 0 && page.IsTruncated && lastKey) {
        after = lastKey; // a page of loose keys only: past them
        continue;
      }
      if (folders.length === 0) {
        // The whole root is swept: the next sweep starts again from the first job.
        await this.keepPosition('');
        return { jobs, deleted, wrapped: true };
      }
      // A batch of folders at once; the position moves past a batch only once all of it is swept.
      for (let i = 0; i < folders.length; i += concurrency) {
        const batch = folders.slice(i, i + concurrency);
        const counts = await Promise.all(batch.map((folder) => this.sweepJob(folder)));
        deleted += counts.reduce((a, b) => a + b, 0);
        jobs += batch.length;
        // Past every key of the last folder: "<folder>/" ends in "/", and "0" is the character after it.
        after = `${batch[batch.length - 1]!.slice(0, -1)}0`;
        if (clock.nowMs() >= untilMs) {
          await this.keepPosition(after);
          return { jobs, deleted, wrapped: false };
        }
      }
    }
  }

  /** One job's folder: what the rule lets go is deleted; returns how many objects. */
  private async sweepJob(folder: string): Promise<number> {
    const name = folder.slice(this.prefix.length, -1);
    let jobId: string;
    try {
      jobId = decodeURIComponent(name);
    } catch {
      return 0; // not a folder gpu-fleet wrote: left alone
    }
    const [job, saves] = await Promise.all([this.deps.jobs.get(jobId), this.deps.checkpoints.retained(jobId)]);
    const nowMs = this.deps.clock.nowMs();
    const retentionMs = this.deps.retentionDays * DAY_MS;
    const expired: string[] = [];
    const kept: string[] = [];
    let deleted = 0;
    let token: string | undefined;
    do {
      const page = await this.call('list checkpoint objects', folder, () =>
        this.deps.s3.send(
          new ListObjectsV2Command({ Bucket: this.bucket, Prefix: folder, ...(token ? { ContinuationToken: token } : {}) }),
        ),
      );
      for (const o of page.Contents ?? []) {
        if (!o.Key || !o.LastModified) continue;
        const objectUri = `s3://${this.bucket}/${o.Key}`;
        if (checkpointObjectExpired({ objectUri, modifiedAtMs: o.LastModified.getTime(), job, saves, nowMs, retentionMs }))
          expired.push(o.Key);
        else kept.push(objectUri);
      }
      token = page.IsTruncated ? page.NextContinuationToken : undefined;
      while (expired.length >= 1000 || (token === undefined && expired.length > 0)) deleted += await this.delete(expired.splice(0, 1000));
    } while (token);
    // The saves of which no object is left (superseded ones, and any the byte log still counts as held): the index forgets them.
    const gone = forgettable(saves, kept);
    if (gone.length > 0) await this.deps.checkpoints.forgetSuperseded(jobId, gone, saves);
    return deleted;
  }

  private async delete(keys: readonly string[]): Promise<number> {
    const out = await this.call('delete expired checkpoints', keys[0]!, () =>
      this.deps.s3.send(new DeleteObjectsCommand({ Bucket: this.bucket, Delete: { Objects: keys.map((Key) => ({ Key })), Quiet: true } })),
    );
    const failed = out.Errors ?? [];
    if (failed.length > 0)
      throw translateAwsError(
        new Error(`${failed.length} of ${keys.length} objects not deleted: ${failed[0]!.Code} ${failed[0]!.Message}`),
        {
          operation: 'delete expired checkpoints',
          resource: failed[0]!.Key ?? '',
        },
      );
    return keys.length;
  }

  private async position(): Promise<string> {
    const out = await this.call('read checkpoint sweep position', 'sweep', () =>
      this.deps.doc.send(new GetCommand({ TableName: this.deps.table, Key: { pk: 'sweep', sk: 'checkpoints' }, ConsistentRead: true })),
    );
    return (out.Item?.after as string | undefined) ?? '';
  }

  private async keepPosition(after: string): Promise<void> {
    await this.call('keep checkpoint sweep position', 'sweep', () =>
      this.deps.doc.send(new PutCommand({ TableName: this.deps.table, Item: { pk: 'sweep', sk: 'checkpoints', after } })),
    );
  }

  private async call<T>(operation: string, resource: string, f: () => Promise<T>): Promise<T> {
    try {
      return await f();
    } catch (error) {
      throw translateAwsError(error, { operation, resource });
    }
  }
}

/**
 * The sweep for a fleet's config, when it has one: an S3 checkpoint root and a retention (the
 * stack sets GPU_FLEET_CHECKPOINT_RETENTION_DAYS on its reconcile function). Built by the
 * reconcile entry alone, so the other functions carry no S3 client.
 */
export function checkpointSweepFor(
  config: {
    readonly region: string;
    readonly checkpointBucket: string;
    readonly checkpointRetentionDays?: number;
    readonly tables: { readonly control: string };
  },
  deps: { readonly jobs: JobStore; readonly checkpoints: CheckpointHistory; readonly doc: DynamoDBDocumentClient; readonly clock: Clock },
  s3: S3Client = new S3Client({ region: config.region, retryMode: 'adaptive', maxAttempts: 5 }),
): S3CheckpointSweep | undefined {
  const root = checkpointRoot(config.checkpointBucket);
  if (config.checkpointRetentionDays === undefined || !root.startsWith('s3://')) return undefined;
  return new S3CheckpointSweep({ s3, root, ...deps, table: config.tables.control, retentionDays: config.checkpointRetentionDays });
}
