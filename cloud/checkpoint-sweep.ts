import { checkpointObjectExpired, forgettable, type RetainedSaves } from '../core/job.ts';
import type { CheckpointHistory, CheckpointSweep, Clock, JobStore } from '../core/ports.ts';

const DAY_MS = 86_400_000;
/** Job folders a sweep works on at once: each is a few calls (two reads, a write and its events; a listing and a delete are shared by a batch), mostly waiting on the network. */
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
 * (newest, the one it replaced, the superseded ones) and judges the folder's objects; it deletes
 * what the rule lets go of the whole batch at once, and then tells the index which saves of this
 * root are gone. The objects are those of the page of keys that found the folder, when it holds
 * the folder whole (one listing for a page of folders, not one each): listed before the index was
 * read, so a save recorded meanwhile is left for the next sweep to judge. A folder the page cut is
 * listed on its own after the read: a save that completes meanwhile is not in what was read, so
 * its objects count as unrecorded, which are kept for an hour. One sweep per bucket: the S3
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
      // The next job folders: a page of keys past the last folder swept (plain keys, no delimiter), and the folders they
      // are in, in key order, with their objects. Loose keys under the root are no job's folder.
      const listedFromMs = clock.nowMs();
      const page = await this.bucket.list(prefix, { max: 1000, ...(after ? { startAfter: after } : {}) });
      const folders: { folder: string; objects: ListedObject[] }[] = [];
      for (const o of page.objects) {
        const slash = o.key.indexOf('/', prefix.length);
        if (slash < 0) continue;
        const folder = o.key.slice(0, slash + 1);
        const last = folders[folders.length - 1];
        if (last?.folder === folder) last.objects.push(o);
        else folders.push({ folder, objects: [o] });
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
      // A folder the page holds whole is judged from the page; the last one of a cut page is listed whole on its own.
      const cut = page.token !== undefined ? folders[folders.length - 1] : undefined;
      // A batch of folders at once; the position moves past a batch only once all of it is swept.
      for (let i = 0; i < folders.length; i += concurrency) {
        const batch = folders.slice(i, i + concurrency);
        deleted += await this.sweepBatch(batch.map((f) => (f === cut ? { folder: f.folder } : { ...f, listedFromMs })));
        jobs += batch.length;
        // Past every key of the last folder: "<folder>/" ends in "/", and "0" is the character after it.
        after = `${batch[batch.length - 1]!.folder.slice(0, -1)}0`;
        if (clock.nowMs() >= untilMs) {
          await this.at.keepPosition(after);
          return { jobs, deleted, wrapped: false };
        }
      }
    }
  }

  /**
   * A batch of job folders: each judged, what the rule lets go deleted (S3: one request for the
   * whole batch), then the index told which saves are gone. Returns how many objects were deleted.
   */
  private async sweepBatch(
    batch: readonly { folder: string; objects?: readonly ListedObject[]; listedFromMs?: number }[],
  ): Promise<number> {
    const judged = await Promise.all(batch.map((f) => this.judge(f.folder, f.objects, f.listedFromMs)));
    const expired = judged.flatMap((j) => j?.expired ?? []);
    let deleted = 0;
    for (let i = 0; i < expired.length; i += 1000) deleted += await this.bucket.delete(expired.slice(i, i + 1000));
    await Promise.all(
      judged.map((j) => (j && j.gone.length > 0 ? this.deps.checkpoints.forgetSuperseded(j.jobId, j.gone, j.saves) : undefined)),
    );
    return deleted;
  }

  /**
   * One job's folder judged by the rule (core/job.ts `checkpointObjectExpired`): the objects it
   * lets go, and the saves of which no object is kept. The index is read first, then the folder
   * listed, unless the page that found the folder already holds it whole (listed at `listedFromMs`,
   * before the read: `forgettable` then leaves saves recorded since for the next sweep).
   */
  private async judge(
    folder: string,
    listed: readonly ListedObject[] | undefined,
    listedFromMs: number | undefined,
  ): Promise<{ jobId: string; saves: RetainedSaves; expired: string[]; gone: string[] } | undefined> {
    const name = folder.slice(this.bucket.prefix.length, -1);
    let jobId: string;
    try {
      jobId = decodeURIComponent(name);
    } catch {
      return undefined; // not a folder gpu-fleet wrote: left alone
    }
    const [job, saves] = await Promise.all([this.deps.jobs.get(jobId), this.deps.checkpoints.retained(jobId)]);
    const nowMs = this.deps.clock.nowMs();
    const retentionMs = this.deps.retentionDays * DAY_MS;
    const expired: string[] = [];
    const kept: string[] = [];
    const judgeAll = (objects: readonly ListedObject[]) => {
      for (const o of objects) {
        const objectUri = this.bucket.uriOf(o.key);
        if (checkpointObjectExpired({ objectUri, modifiedAtMs: o.modifiedAtMs, job, saves, nowMs, retentionMs })) expired.push(o.key);
        else kept.push(objectUri);
      }
    };
    if (listed) judgeAll(listed);
    else {
      let token: string | undefined;
      do {
        const page = await this.bucket.list(folder, { max: 1000, ...(token ? { token } : {}) });
        judgeAll(page.objects);
        token = page.token;
      } while (token);
    }
    // The saves of this root of which no object is left (superseded ones, and any the byte log still counts as held): the index forgets them.
    return { jobId, saves, expired, gone: forgettable(saves, kept, this.bucket.root, listed ? listedFromMs : undefined) };
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
