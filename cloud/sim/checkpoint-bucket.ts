import {
  addUsage,
  priceBytes,
  storageUsage,
  storeSiteOf,
  transferUsage,
  type ByteBill,
  type ByteRates,
  type ByteUsage,
  type NetworkLayout,
  type Site,
  type StoreRoot,
} from '../../core/bytes.ts';
import { checkpointObjectExpired, forgettable } from '../../core/job.ts';
import { DAY_MS } from '../../core/period.ts';
import type { CheckpointHistory, CheckpointSweep, Clock, JobStore } from '../../core/ports.ts';

/** One object of the simulated bucket: a rank's part of a save, written whole (the simulated job writes one file). */
interface SimObject {
  readonly jobId: string;
  readonly team: string;
  readonly bytes: number;
  readonly writtenAtMs: number;
}

/**
 * The simulated cloud's checkpoint stores and what they bill (the fleet's own bucket, and a
 * bucket per GCP region where the fleet keeps one): each rank's part of a save is one object,
 * held from its upload until the sweep deletes it (by core/job.ts's rule, as the S3 sweep applies it), and every upload, download and byte-hour stored is counted for the team whose job
 * caused it, on the network path the deployment has (core/bytes.ts). The world only: the sweep's
 * decision is the production rule; the bucket counts.
 */
export class SimCheckpointBucket implements CheckpointSweep {
  private readonly objects = new Map<string, SimObject>();
  private readonly usageByTeam = new Map<string, ByteUsage>();
  private uploads = 0;
  private downloads = 0;
  private deletedObjects = 0;

  constructor(
    private readonly deps: {
      readonly clock: Clock;
      readonly jobs: JobStore;
      readonly checkpoints: CheckpointHistory;
      /** Where the fleet's own bucket is (in the control plane's region). */
      readonly store: Site;
      /** The other sites' buckets (a GCP region's): an object under one of these roots is held and billed there. */
      readonly roots?: readonly StoreRoot[];
      readonly layout: NetworkLayout;
      readonly retentionDays: number;
    },
  ) {}

  private count(team: string, usage: ByteUsage): void {
    this.usageByTeam.set(team, addUsage(this.usageByTeam.get(team) ?? {}, usage));
  }

  /** A rank's part of a save landed at `objectUri` from a machine at `machine` (a part written again replaces the object). */
  put(o: {
    readonly objectUri: string;
    readonly jobId: string;
    readonly team: string;
    readonly bytes: number;
    readonly machine: Site;
  }): void {
    const now = this.deps.clock.nowMs();
    const before = this.objects.get(o.objectUri);
    if (before) this.held(o.objectUri, before, now);
    this.objects.set(o.objectUri, { jobId: o.jobId, team: o.team, bytes: o.bytes, writtenAtMs: now });
    this.count(
      o.team,
      transferUsage({ machine: o.machine, store: this.storeOf(o.objectUri), layout: this.deps.layout, fileBytes: [o.bytes] }, 'up'),
    );
    this.uploads++;
  }

  /** The site of the bucket an object is in. */
  private storeOf(objectUri: string): Site {
    return storeSiteOf(this.deps, objectUri);
  }

  /** A rank's part of a save (at `objectUri`) read back onto a machine at `machine`, to resume from. */
  get(o: { readonly objectUri: string; readonly team: string; readonly bytes: number; readonly machine: Site }): void {
    this.count(
      o.team,
      transferUsage({ machine: o.machine, store: this.storeOf(o.objectUri), layout: this.deps.layout, fileBytes: [o.bytes] }, 'down'),
    );
    this.downloads++;
  }

  /** Whether an object is in the bucket (a resume point must be). */
  has(objectUri: string): boolean {
    return this.objects.has(objectUri);
  }

  /** The storage an object used from when it was written until `untilMs`. */
  private held(objectUri: string, o: SimObject, untilMs: number): void {
    this.count(o.team, storageUsage(this.storeOf(objectUri), o.bytes, Math.max(0, untilMs - o.writtenAtMs)));
    this.objects.delete(objectUri);
  }

  /**
   * The sweep, as the S3 sweep runs it once per reconcile: for every job with objects, the job and
   * its retained saves are read, and the objects the rule lets go are deleted (their storage
   * counted up to now); the superseded saves it listed are then forgotten.
   */
  async sweep(): Promise<{ jobs: number; deleted: number; wrapped: boolean }> {
    const now = this.deps.clock.nowMs();
    const byJob = new Map<string, string[]>();
    for (const [uri, o] of this.objects) {
      const list = byJob.get(o.jobId);
      if (list) list.push(uri);
      else byJob.set(o.jobId, [uri]);
    }
    let deleted = 0;
    for (const [jobId, uris] of byJob) {
      const [job, saves] = await Promise.all([this.deps.jobs.get(jobId), this.deps.checkpoints.retained(jobId)]);
      const kept: string[] = [];
      for (const uri of uris) {
        const o = this.objects.get(uri)!;
        if (
          checkpointObjectExpired({
            objectUri: uri,
            modifiedAtMs: o.writtenAtMs,
            job,
            saves,
            nowMs: now,
            retentionMs: this.deps.retentionDays * DAY_MS,
          })
        ) {
          this.held(uri, o, now);
          deleted++;
        } else kept.push(uri);
      }
      const gone = forgettable(saves, kept);
      if (gone.length > 0) await this.deps.checkpoints.forgetSuperseded(jobId, gone);
    }
    this.deletedObjects += deleted;
    return { jobs: byJob.size, deleted, wrapped: true };
  }

  /** What was moved and kept up to `untilMs` (objects still held are counted to then), per team and in all. */
  account(untilMs: number): BucketAccount {
    const byTeam = new Map<string, ByteUsage>(this.usageByTeam);
    let heldBytes = 0;
    for (const [uri, o] of this.objects) {
      heldBytes += o.bytes;
      byTeam.set(
        o.team,
        addUsage(byTeam.get(o.team) ?? {}, storageUsage(this.storeOf(uri), o.bytes, Math.max(0, untilMs - o.writtenAtMs))),
      );
    }
    const total = [...byTeam.values()].reduce<ByteUsage>((a, b) => addUsage(a, b), {});
    return {
      byTeam,
      total,
      uploads: this.uploads,
      downloads: this.downloads,
      deletedObjects: this.deletedObjects,
      heldObjects: this.objects.size,
      heldBytes,
    };
  }
}

export interface BucketAccount {
  readonly byTeam: ReadonlyMap<string, ByteUsage>;
  readonly total: ByteUsage;
  readonly uploads: number;
  readonly downloads: number;
  readonly deletedObjects: number;
  /** Objects and bytes still in the bucket at the end. */
  readonly heldObjects: number;
  readonly heldBytes: number;
}

/** The bill of an account: per team (each team's usage priced on its own), and the total as their sum. */
export function billOf(
  account: BucketAccount,
  rates: ByteRates,
): { readonly byTeam: ReadonlyMap<string, ByteBill>; readonly total: ByteBill } {
  const byTeam = new Map<string, ByteBill>();
  for (const [team, usage] of [...account.byTeam].sort(([a], [b]) => (a < b ? -1 : 1))) byTeam.set(team, priceBytes(usage, rates));
  const bills = [...byTeam.values()];
  const sum = (f: (b: ByteBill) => number) => bills.reduce((n, b) => n + f(b), 0);
  return {
    byTeam,
    total: {
      storageMicroUsd: sum((b) => b.storageMicroUsd),
      requestsMicroUsd: sum((b) => b.requestsMicroUsd),
      networkMicroUsd: sum((b) => b.networkMicroUsd),
      totalMicroUsd: sum((b) => b.totalMicroUsd),
      unpriced: [...new Set(bills.flatMap((b) => b.unpriced))].sort(),
    },
  };
}
