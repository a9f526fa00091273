import { isCloudError, messageOf } from '../core/errors.ts';
import type { Clock, JobLogBatch, JobLogSink, LogLine } from '../core/ports.ts';
import { MAX_LINE_BYTES } from './job-output.ts';

export { MAX_LINE_BYTES };
/** At most this many lines go in one batch. */
export const MAX_BATCH_LINES = 1000;
/**
 * At most this many bytes of lines go in one batch, counted as they travel (JSON, where a control
 * character takes six): a batch stays far under the agent API's 6 MB request limit and within one
 * CloudWatch Logs PutLogEvents call (1 MiB), whatever the job prints. One line always fits.
 */
export const MAX_BATCH_BYTES = 512 * 1024;
/** What one attempt may have waiting to be sent: ten batches' lines, four batches' bytes. */
export const MAX_PENDING_LINES = 10 * MAX_BATCH_LINES;
export const MAX_PENDING_BYTES = 4 * MAX_BATCH_BYTES;
/** What all the machine's attempts together may have waiting (a machine runs tens of attempts on MIG slices). */
export const MAX_HELD_LINES = 4 * MAX_PENDING_LINES;
export const MAX_HELD_BYTES = 4 * MAX_PENDING_BYTES;
/** A waiting line's cost besides its text: the object, its number and time. */
const LINE_OVERHEAD_BYTES = 64;

/** What the shipper has done since the agent started, for the agent's metrics and the operator. */
export interface ShipperCounts {
  /** Lines the log store took. */
  shipped: number;
  /** Lines dropped because the log store was throttled or behind, and their bytes. */
  dropped: number;
  droppedBytes: number;
  /** Lines the log store refused for good (malformed, or no longer this machine's to write). */
  refused: number;
  /** Sends that failed for now (throttled, unreachable): their lines waited for the next flush. */
  retried: number;
  /** Marker lines put where lines were dropped. */
  markers: number;
}

interface Tracked {
  readonly meta: Omit<JobLogBatch, 'lines'>;
  /** The next line's number: a dropped line takes its number too, so a reader sees where lines are missing. */
  seq: number;
  /** Lines not yet taken by the sink, and what they hold. */
  pending: LogLine[];
  /** What each waiting line counts against the bounds, in order, and their sum. */
  costs: number[];
  pendingBytes: number;
  /** Lines dropped since the last marker line. */
  dropped: number;
  droppedBytes: number;
  /** The attempt has ended: nothing more comes. */
  ended: boolean;
  /** The send in progress: sends of one attempt never overlap. */
  busy: Promise<void>;
  /** Flushes queued or under way for it: a full batch starts one only when none is. */
  flushes: number;
  /** After a send that failed for now, no send before this time but the flushes' own (the store is not hammered). */
  quietUntilMs: number;
}

/**
 * Ships each attempt's output lines to the log sink (CloudWatch Logs, through the agent API) in
 * batches within the store's limits, holding a bounded number of them. Lines come as the job
 * prints them ({@link JobOutput} hands them over); each flush sends what waits. When the store is
 * throttled or unreachable, what waits is sent again at the next flush; when more arrives than may
 * wait ({@link MAX_PENDING_LINES}/{@link MAX_PENDING_BYTES} an attempt, {@link MAX_HELD_LINES}/
 * {@link MAX_HELD_BYTES} the machine), new lines are dropped and counted, and once there is room
 * a marker line says how many went missing there. The agent's memory stays the same whatever a
 * job prints; the machine's `output.log` still holds every line until it rotates.
 */
export class LogShipper {
  private readonly tracked = new Map<string, Tracked>();
  private heldLines = 0;
  private heldBytes = 0;
  readonly counts: ShipperCounts = { shipped: 0, dropped: 0, droppedBytes: 0, refused: 0, retried: 0, markers: 0 };
  private failing = false;

  constructor(
    private readonly sink: JobLogSink,
    private readonly clock: Clock,
    /** Told of lines dropped or refused, and of a log store that stopped taking lines. */
    private readonly warn: (message: string, extra: Record<string, unknown>) => void = () => undefined,
  ) {}

  track(key: string, meta: Omit<JobLogBatch, 'lines'>): void {
    if (this.tracked.has(key)) return;
    this.tracked.set(key, {
      meta,
      seq: 0,
      pending: [],
      costs: [],
      pendingBytes: 0,
      dropped: 0,
      droppedBytes: 0,
      ended: false,
      busy: Promise.resolve(),
      flushes: 0,
      quietUntilMs: 0,
    });
  }

  /** One line the attempt printed (without its newline, at most {@link MAX_LINE_BYTES}). */
  line(key: string, bytes: Buffer): void {
    const t = this.tracked.get(key);
    if (!t || t.ended) return;
    const cost = bytes.length + LINE_OVERHEAD_BYTES;
    if (t.dropped > 0 || !this.room(t, cost)) {
      // Dropped lines are only counted: dropping holds nothing. The marker comes once the sink has caught up.
      if (t.dropped === 0 || !this.room(t, cost + MARKER_COST)) {
        t.dropped++;
        t.droppedBytes += bytes.length;
        this.counts.dropped++;
        this.counts.droppedBytes += bytes.length;
        t.seq++;
        return;
      }
      this.mark(t);
    }
    this.hold(t, { atMs: this.clock.nowMs(), seq: t.seq++, line: bytes.toString('utf8') }, cost);
    // A batch's worth waits: it goes now, not at the next flush (a job that prints fast is shipped as fast as the store takes it).
    if (t.flushes === 0 && t.pending.length >= MAX_BATCH_LINES && this.clock.nowMs() >= t.quietUntilMs) void this.flush(key);
  }

  /** Sends what waits for every attempt. A send that fails for now leaves its lines for the next flush. */
  async flushAll(): Promise<void> {
    await Promise.all([...this.tracked.keys()].map((k) => this.flush(k)));
  }

  /** The attempt's output has ended: send what waits (saying what was dropped), and stop following it once all is sent. */
  async finish(key: string): Promise<void> {
    const t = this.tracked.get(key);
    if (!t) return;
    t.ended = true;
    await this.flush(key);
  }

  /** Whether the attempt has lines waiting (or a marker still to send). */
  waiting(key: string): boolean {
    const t = this.tracked.get(key);
    return !!t && (t.pending.length > 0 || t.dropped > 0);
  }

  private room(t: Tracked, cost: number): boolean {
    return (
      t.pending.length < MAX_PENDING_LINES &&
      t.pendingBytes + cost <= MAX_PENDING_BYTES &&
      this.heldLines < MAX_HELD_LINES &&
      this.heldBytes + cost <= MAX_HELD_BYTES
    );
  }

  private hold(t: Tracked, line: LogLine, cost: number): void {
    t.pending.push(line);
    t.costs.push(cost);
    t.pendingBytes += cost;
    this.heldLines++;
    this.heldBytes += cost;
  }

  /** The line that stands where lines were dropped. */
  private mark(t: Tracked): void {
    const text =
      `[gpu-fleet] ${t.dropped} line(s) of output (${t.droppedBytes} bytes) were not shipped here: the log store was ` +
      "throttled or behind. The machine's output.log for this attempt holds them until it rotates.";
    this.warn("dropped job output the log store could not take in time; a marker line stands in the job's log", {
      job: t.meta.jobId,
      attempt: t.meta.attempt,
      rank: t.meta.rank,
      lines: t.dropped,
      bytes: t.droppedBytes,
    });
    t.dropped = 0;
    t.droppedBytes = 0;
    this.counts.markers++;
    this.hold(t, { atMs: this.clock.nowMs(), seq: t.seq++, line: text }, MARKER_COST);
  }

  private flush(key: string): Promise<void> {
    const t = this.tracked.get(key);
    if (!t) return Promise.resolve();
    t.flushes++;
    t.busy = t.busy
      .catch(() => undefined)
      .then(() => this.send(t))
      .finally(() => t.flushes--)
      .then(() => {
        // An ended attempt with nothing left to send is followed no more (one the store could not take waits for the next flush).
        if (t.ended && t.pending.length === 0 && t.dropped === 0) this.tracked.delete(key);
      });
    return t.busy;
  }

  private async send(t: Tracked): Promise<void> {
    for (;;) {
      // Lines were dropped and there is room now (or the attempt ended): the marker goes next.
      if (t.dropped > 0 && (t.ended || this.room(t, MARKER_COST))) this.mark(t);
      if (t.pending.length === 0) return;
      let bytes = 0;
      let n = 0;
      while (n < t.pending.length && n < MAX_BATCH_LINES) {
        const size = Buffer.byteLength(JSON.stringify(t.pending[n])) + 1;
        if (n > 0 && bytes + size > MAX_BATCH_BYTES) break;
        bytes += size;
        n++;
      }
      const lines = t.pending.slice(0, n);
      try {
        await this.sink.append({ ...t.meta, lines });
        this.counts.shipped += lines.length;
        if (this.failing) this.warn('the log store takes job output again', {});
        this.failing = false;
      } catch (error) {
        if (!isCloudError(error) || error.retryable) {
          // Throttled or unreachable: the lines wait (within the bounds) for the next flush.
          this.counts.retried++;
          t.quietUntilMs = this.clock.nowMs() + QUIET_AFTER_FAILURE_MS;
          if (!this.failing)
            this.warn('the log store did not take job output for now; sending it again at the next flush', {
              job: t.meta.jobId,
              error: messageOf(error),
            });
          this.failing = true;
          return;
        }
        // Refused for good (malformed, or no longer this machine's to write): sending it again would never end.
        this.counts.refused += lines.length;
        this.warn('job output refused by the log store; those lines are dropped', {
          job: t.meta.jobId,
          attempt: t.meta.attempt,
          lines: lines.length,
          error: messageOf(error),
        });
      }
      t.pending.splice(0, lines.length);
      const freed = t.costs.splice(0, lines.length).reduce((sum, c) => sum + c, 0);
      t.pendingBytes -= freed;
      this.heldLines -= lines.length;
      this.heldBytes -= freed;
    }
  }
}

/** How long after a send that failed for now a full batch waits for the next flush rather than going at once. */
const QUIET_AFTER_FAILURE_MS = 1000;

/** What a marker line holds at most (its text and overhead). */
const MARKER_COST = 256 + LINE_OVERHEAD_BYTES;
