import { closeSync, fstatSync, openSync, renameSync, writeSync } from 'node:fs';
import type { Readable } from 'node:stream';

/** A line longer than this is cut into pieces of this many bytes (CloudWatch Logs takes events up to 256 KiB; a log is for reading). */
export const MAX_LINE_BYTES = 16 * 1024;
/** `output.log` is rotated once it passes this size: it becomes `output.log.1` (the one before goes), and a new one starts. */
export const OUTPUT_LOG_MAX_BYTES = 64 * 1024 * 1024;
const NEWLINE = Buffer.from('\n');

/**
 * What one attempt prints, as the agent receives it from the job's pipes: cut into lines (each
 * stream on its own, so stdout and stderr never splice into one line), each line written to the
 * attempt's `output.log` and handed on (to the log shipper). The agent is the file's only writer,
 * so it rotates it without losing a byte: past {@link OUTPUT_LOG_MAX_BYTES} the file is renamed to
 * `output.log.1` and a new one begun, and the machine keeps at most two files' worth of a job's
 * output, however much it prints. Everything here is synchronous: a chunk is written and handed on
 * before the pipe is read again, so the job's output never waits in the agent's memory.
 */
export class JobOutput {
  private fd: number;
  private size: number;
  private readonly partial = new Map<string, Buffer>();
  private closed = false;

  constructor(
    private readonly file: string,
    private readonly onLine: (line: Buffer) => void = () => undefined,
    private readonly maxBytes: number = OUTPUT_LOG_MAX_BYTES,
  ) {
    this.fd = openSync(file, 'a');
    this.size = fstatSync(this.fd).size;
  }

  /** Takes what a stream gave; `stream` names it ("out", "err"), so each stream's lines are whole. */
  write(chunk: Buffer, stream = 'out'): void {
    if (this.closed || chunk.length === 0) return;
    let data = this.partial.has(stream) ? Buffer.concat([this.partial.get(stream)!, chunk]) : chunk;
    const last = data.lastIndexOf(10);
    if (last >= 0) {
      // The whole lines go to the file in one write (as printed), then one by one to the shipper.
      this.append(data.subarray(0, last + 1));
      let start = 0;
      for (let i = data.indexOf(10); i >= 0 && i <= last; i = data.indexOf(10, start)) {
        this.hand(data.subarray(start, i));
        start = i + 1;
      }
      data = data.subarray(last + 1);
    }
    // A line that never ends goes in pieces of the longest a line may be.
    while (data.length >= MAX_LINE_BYTES) {
      const cut = pieceEnd(data);
      this.append(Buffer.concat([data.subarray(0, cut), NEWLINE]));
      this.hand(data.subarray(0, cut));
      data = data.subarray(cut);
    }
    if (data.length > 0) this.partial.set(stream, Buffer.from(data));
    else this.partial.delete(stream);
  }

  /** Reads a stream to its end into this output. */
  follow(readable: Readable | null | undefined, stream: string): Promise<void> {
    if (!readable) return Promise.resolve();
    return new Promise((resolve) => {
      readable.on('data', (b: Buffer) => this.write(b, stream));
      readable.once('close', resolve);
      readable.once('error', () => resolve());
    });
  }

  /** The job has ended: each stream's unfinished last line goes as a line, and the file is closed. */
  end(): void {
    if (this.closed) return;
    for (const rest of this.partial.values()) {
      this.append(Buffer.concat([rest, NEWLINE]));
      this.hand(rest);
    }
    this.partial.clear();
    this.closed = true;
    closeSync(this.fd);
  }

  /** Whole lines to the file, which is rotated first when they would take it past its size. */
  private append(lines: Buffer): void {
    if (this.size > 0 && this.size + lines.length > this.maxBytes) this.rotate();
    writeSync(this.fd, lines);
    this.size += lines.length;
  }

  /** One line to the shipper: without its carriage return, in pieces of at most {@link MAX_LINE_BYTES}. */
  private hand(bytes: Buffer): void {
    while (bytes.length > MAX_LINE_BYTES) {
      const cut = pieceEnd(bytes);
      this.onLine(bytes.subarray(0, cut));
      bytes = bytes.subarray(cut);
    }
    this.onLine(bytes.at(-1) === 13 ? bytes.subarray(0, -1) : bytes);
  }

  private rotate(): void {
    closeSync(this.fd);
    renameSync(this.file, `${this.file}.1`);
    this.fd = openSync(this.file, 'a');
    this.size = 0;
  }
}

/** Where the first piece of a long line ends: at most {@link MAX_LINE_BYTES}, never inside a UTF-8 character. */
function pieceEnd(bytes: Buffer): number {
  let cut = MAX_LINE_BYTES;
  // A continuation byte (10xxxxxx) is inside a character: back off to its first byte (at most three back).
  for (let back = 0; back < 3 && cut > 1 && (bytes[cut]! & 0xc0) === 0x80; back++) cut--;
  return cut;
}
