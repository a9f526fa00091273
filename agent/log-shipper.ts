import { open } from 'node:fs/promises';
import { isCloudError, messageOf } from '../core/errors.ts';
import type { Clock, JobLogBatch, JobLogSink, LogLine } from '../core/ports.ts';

/** A line longer than this is cut, saying so (CloudWatch Logs takes events up to 256 KiB; a log is for reading). */
export const MAX_LINE_BYTES = 16 * 1024;
/** At most this many lines go in one batch. */
export const MAX_BATCH_LINES = 1000;
/**
 * At most this many bytes of lines go in one batch, counted as they travel (JSON, where a control
 * character takes six): a batch stays far under the agent API's 6 MB request limit and within one
 * CloudWatch Logs PutLogEvents call (1 MiB), whatever the job prints. One line always fits.
 */
export const MAX_BATCH_BYTES = 512 * 1024;

interface Tracked {
  readonly file: string;
  readonly meta: Omit<JobLogBatch, 'lines'>;
  /** Bytes of the file already read, the unfinished last line, and the next line's number. */
  offset: number;
  partial: Buffer;
  seq: number;
  /** Lines read but not yet accepted by the sink (sent again at the next flush). */
  pending: LogLine[];
  /** The flush in progress: flushes of one attempt never overlap. */
  busy: Promise<void>;
}

/**
 * Ships what each attempt writes to its output file to the log sink as it is written: every flush
 * reads the bytes added since the last, cuts them into lines and sends them; the last unfinished
 * line goes once the process has ended. The same path for plain processes and containers (both
 * write to the file), and the file stays on the machine as before. A batch the sink refuses is
 * kept and sent again at the next flush, so a line is lost only with the machine itself, and lines
 * written up to a kill go once the agent sees the process end.
 */
export class LogShipper {
  private readonly tracked = new Map<string, Tracked>();

  constructor(
    private readonly sink: JobLogSink,
    private readonly clock: Clock,
    /** Told of a batch the sink refused for good (it is dropped, not sent again). */
    private readonly warn: (message: string, extra: Record<string, unknown>) => void = () => undefined,
  ) {}

  track(key: string, file: string, meta: Omit<JobLogBatch, 'lines'>): void {
    if (this.tracked.has(key)) return;
    this.tracked.set(key, { file, meta, offset: 0, partial: Buffer.alloc(0), seq: 0, pending: [], busy: Promise.resolve() });
  }

  /** Reads and sends what every attempt wrote since the last flush. */
  async flushAll(): Promise<void> {
    await Promise.all([...this.tracked.keys()].map((k) => this.flush(k, false)));
  }

  /** The attempt's process has ended: send everything, its last unfinished line too, and stop following it. */
  async finish(key: string): Promise<void> {
    await this.flush(key, true);
    const t = this.tracked.get(key);
    if (t && t.pending.length === 0) this.tracked.delete(key);
  }

  private flush(key: string, final: boolean): Promise<void> {
    const t = this.tracked.get(key);
    if (!t) return Promise.resolve();
    // A failed send leaves its lines pending: the next flush (of this chain) sends them again.
    t.busy = t.busy
      .catch(() => undefined)
      .then(() => this.read(t, final))
      .then(() => this.send(t));
    return t.busy;
  }

  private async read(t: Tracked, final: boolean): Promise<void> {
    let fh;
    try {
      fh = await open(t.file, 'r');
    } catch {
      return; // not created yet
    }
    try {
      for (;;) {
        const buf = Buffer.alloc(256 * 1024);
        const { bytesRead } = await fh.read(buf, 0, buf.length, t.offset);
        if (bytesRead === 0) break;
        t.offset += bytesRead;
        this.cut(t, Buffer.concat([t.partial, buf.subarray(0, bytesRead)]));
      }
    } finally {
      await fh.close();
    }
    if (final && t.partial.length > 0) {
      this.push(t, t.partial);
      t.partial = Buffer.alloc(0);
    }
  }

  private cut(t: Tracked, data: Buffer): void {
    let start = 0;
    for (let i = data.indexOf(10); i >= 0; i = data.indexOf(10, start)) {
      this.push(t, data.subarray(start, i));
      start = i + 1;
    }
    t.partial = Buffer.from(data.subarray(start));
    // A line that never ends is shipped in pieces of the longest a line may be.
    while (t.partial.length > MAX_LINE_BYTES) {
      this.push(t, t.partial.subarray(0, MAX_LINE_BYTES));
      t.partial = Buffer.from(t.partial.subarray(MAX_LINE_BYTES));
    }
  }

  private push(t: Tracked, bytes: Buffer): void {
    let text: string;
    if (bytes.length <= MAX_LINE_BYTES) text = bytes.toString('utf8').replace(/\r$/, '');
    else {
      const note = ` … [cut: the line was ${bytes.length} bytes]`;
      text = bytes.subarray(0, MAX_LINE_BYTES - Buffer.byteLength(note)).toString('utf8') + note;
    }
    t.pending.push({ atMs: this.clock.nowMs(), seq: t.seq++, line: text });
  }

  private async send(t: Tracked): Promise<void> {
    while (t.pending.length > 0) {
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
      } catch (error) {
        // Refused for good (malformed, or no longer this machine's to write): sending it again would never end.
        if (!isCloudError(error) || error.retryable) throw error;
        this.warn('job output refused by the log store; those lines are dropped', {
          job: t.meta.jobId,
          attempt: t.meta.attempt,
          lines: lines.length,
          error: messageOf(error),
        });
      }
      t.pending.splice(0, lines.length);
    }
  }
}
