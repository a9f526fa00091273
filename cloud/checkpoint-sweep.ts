import { checkpointObjectExpired, forgettable } from '../core/job.ts';
import type { CheckpointHistory, CheckpointSweep, Clock, JobStore } from '../core/ports.ts';

const DAY_MS = 86_400_000;
/** Job folders a sweep works on at once: each is a few calls (two reads, a listing, a delete, a write), mostly waiting on the network. */
export const SWEEP_CONCURRENCY = 32;

/** One object of a listing: its key in the bucket and when it was last written. */
export interface ListedObject {
  readonly key: string;
  readonly modifiedAtMs: number;
}

/**
 * The calls a sweep makes on one bucket (S3, Cloud Storage): list keys under a prefix in key
 * order (from past `startAfter`, or on from a page token), and delete keys.
 */
export interface SweptBucket {
  /** The root swept, `s3://bucket/prefix/` or `gs://bucket/prefix/`: what the index's locations start with. */
  readonly root: string;
  /** The key prefix of the root in its bucket ("" or ending in "/"). */
  readonly prefix: string;
  /** The URI of a key (what the index's locations are compared with). */
  uriOf(key: string): string;
  list(
    prefix: string,
    page: { readonly startAfter?: string; readonly token?: string; readonly max: number },
  ): Promise<{
    readonly objects: readonly ListedObject[];
    /** Where the next page starts, when the listing was cut. */
    readonly token?: string;
  }>;
  /** Deletes the keys (at most 1,000); returns how many are gone (a key already gone counts). */
  delete(keys: readonly string[]): Promise<number>;
}

/** Where the last sweep of a bucket stopped (kept in the control table: cloud/aws/checkpoint-sweep.ts `tablePosition`). */
export interface SweepPosition {
  position(): Promise<string>;
  keepPosition(after: string): Promise<void>;
}

/**
 * A checkpoint bucket's retention, derived from the index (`checkpointObjectExpired`): the
 * bucket's lifecycle expires no checkpoint, and each reconcile sweeps a share of the job folders
 * under the root instead, in key order from where the last sweep stopped (the position is kept in
 * the control table), for at most `budgetMs` (at least one batch of `concurrency` job folders,
 * swept at once, each time). For each job folder it reads the job and the saves the index retains
 * (newest, the one it replaced, the superseded ones), lists the folder's objects, deletes those the
 * rule lets go, and then tells the index which superseded saves of this root are gone. The index
 * is read before the objects are listed: a save that completes meanwhile is not in what was read,
 * so its objects count as unrecorded, which are kept for an hour. One sweep per bucket: the S3
 * bucket of the fleet (cloud/aws/checkpoint-sweep.ts), and each region's Cloud Storage bucket
 * (cloud/gcp/checkpoint-store.ts).
 */
export class BucketSweep implements CheckpointSweep {
  constructor(
    private readonly bucket: SweptBucket,
    private readonly at: SweepPosition,
    private readonly deps: {
      readonly jobs: JobStore;
      readonly checkpoints: CheckpointHistory;
      readonly clock: Clock;
      readonly retentionDays: number;
      /** How long one sweep may run (a share of the reconcile function's time). */
      readonly budgetMs?: number;
      /** Job folders swept at once (default {@link SWEEP_CONCURRENCY}). */
      readonly concurrency?: number;
    },
  ) {}

  async sweep(): Promise<{ jobs: number; deleted: number; wrapped: boolean }> {
    const { clock } = this.deps;
    const { prefix } = this.bucket;
    const untilMs = clock.nowMs() + (this.deps.budgetMs ?? 10_000);
    const concurrency = this.deps.concurrency ?? SWEEP_CONCURRENCY;
    let after = await this.at.position();
    let jobs = 0;
    let deleted = 0;
    for (;;) {
      // The next job folders: a page of keys past the last folder swept (plain keys, no delimiter: each folder is then
      // listed whole), and the folders they are in, in key order. Loose keys under the root are no job's folder.
      const page = await this.bucket.list(prefix, { max: 1000, ...(after ? { startAfter: after } : {}) });
      const folders: string[] = [];
      for (const o of page.objects) {
        const slash = o.key.indexOf('/', prefix.length);
        const folder = slash < 0 ? undefined : o.key.slice(0, slash + 1);
        if (folder && folder !== folders[folders.length - 1]) folders.push(folder);
      }
      const lastKey = page.objects[page.objects.length - 1]?.key;
      if (folders.length === 0 && page.token !== undefined && lastKey) {
        after = lastKey; // a page of loose keys only: past them
        continue;
      }
      if (folders.length === 0) {
        // The whole root is swept: the next sweep starts again from the first job.
        await this.at.keepPosition('');
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
          await this.at.keepPosition(after);
          return { jobs, deleted, wrapped: false };
        }
      }
    }
  }

  /** One job's folder: what the rule lets go is deleted; returns how many objects. */
  private async sweepJob(folder: string): Promise<number> {
    const name = folder.slice(this.bucket.prefix.length, -1);
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
      const page = await this.bucket.list(folder, { max: 1000, ...(token ? { token } : {}) });
      for (const o of page.objects) {
        const objectUri = this.bucket.uriOf(o.key);
        if (checkpointObjectExpired({ objectUri, modifiedAtMs: o.modifiedAtMs, job, saves, nowMs, retentionMs })) expired.push(o.key);
        else kept.push(objectUri);
      }
      token = page.token;
      while (expired.length >= 1000 || (token === undefined && expired.length > 0))
        deleted += await this.bucket.delete(expired.splice(0, 1000));
    } while (token);
    // The saves of this root of which no object is left (superseded ones, and any the byte log still counts as held): the index forgets them.
    const gone = forgettable(saves, kept, this.bucket.root);
    if (gone.length > 0) await this.deps.checkpoints.forgetSuperseded(jobId, gone, saves);
    return deleted;
  }
}

/**
 * Several buckets' sweeps as one (the fleet's S3 bucket and each GCP region's bucket), run in
 * turn; one that fails does not stop the others, and the first failure is thrown once all ran.
 */
export function sweepsInTurn(sweeps: readonly CheckpointSweep[]): CheckpointSweep | undefined {
  if (sweeps.length <= 1) return sweeps[0];
  return {
    async sweep() {
      let jobs = 0;
      let deleted = 0;
      let wrapped = true;
      let failed: unknown;
      for (const s of sweeps) {
        try {
          const out = await s.sweep();
          jobs += out.jobs;
          deleted += out.deleted;
          wrapped &&= out.wrapped;
        } catch (error) {
          failed ??= error;
          wrapped = false;
        }
      }
      if (failed !== undefined) throw failed;
      return { jobs, deleted, wrapped };
    },
  };
}
