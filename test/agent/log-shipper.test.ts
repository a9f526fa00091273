import { existsSync, mkdtempSync, readFileSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { JobOutput } from '../../agent/job-output.ts';
import { LogShipper, MAX_BATCH_BYTES, MAX_HELD_LINES, MAX_LINE_BYTES, MAX_PENDING_LINES } from '../../agent/log-shipper.ts';
import { CloudError } from '../../core/errors.ts';
import type { JobLogBatch } from '../../core/ports.ts';

const clock = { nowMs: () => 1_800_000_000_000 };
const meta = { jobId: 'nlp.j', attempt: 1, rank: 0, team: 'nlp', labels: {} };
const outputFile = () => join(mkdtempSync(join(tmpdir(), 'shipper-')), 'output.log');
const throttled = () => new CloudError('throttled', 'Rate exceeded', { operation: 'logs/put' });

/** A job's output through the agent's path: the file, then the shipper. */
function pipeline(sink: (b: JobLogBatch) => Promise<void>, warn?: (m: string, extra: Record<string, unknown>) => void) {
  const shipper = new LogShipper({ append: sink }, clock, warn);
  shipper.track('k', meta);
  const file = outputFile();
  const output = new JobOutput(file, (line) => shipper.line('k', line));
  return { shipper, output, file };
}

describe('job output: the file the agent writes, and what it ships', () => {
  it('sends a thousand of the longest lines, each a worst case on the wire, in batches far under the 6 MB limit', async () => {
    const batches: JobLogBatch[] = [];
    const { shipper, output } = pipeline(async (b) => void batches.push(b));
    // A control character takes six bytes in JSON: 16 KiB of them is about 96 KiB on the wire.
    for (let i = 0; i < 1000; i++) {
      output.write(Buffer.from(`${'\u0001'.repeat(MAX_LINE_BYTES - 1)}\n`));
      if (i % 50 === 49) await shipper.flushAll();
    }
    output.end();
    await shipper.finish('k');
    expect(batches.flatMap((b) => b.lines.map((l) => l.seq))).toEqual(Array.from({ length: 1000 }, (_, i) => i));
    const wire = batches.map((b) => Buffer.byteLength(JSON.stringify(b.lines)));
    expect(Math.max(...wire)).toBeLessThanOrEqual(MAX_BATCH_BYTES + 1);
    expect(batches.length).toBeGreaterThan(100);
    expect(shipper.counts).toMatchObject({ shipped: 1000, dropped: 0 });
  });

  it('ships a line longer than a log line may be in pieces that join to the whole, and a last line with no newline', async () => {
    const batches: JobLogBatch[] = [];
    const { shipper, output, file } = pipeline(async (b) => void batches.push(b));
    const long = 'x'.repeat(200_000);
    output.write(Buffer.from(`start\n${long.slice(0, 70_000)}`));
    output.write(Buffer.from(`${long.slice(70_000)}\nend`));
    output.end();
    await shipper.finish('k');
    const lines = batches.flatMap((b) => b.lines.map((l) => l.line));
    expect(lines[0]).toBe('start');
    expect(lines.at(-1)).toBe('end');
    expect(lines.slice(1, -1).join('')).toBe(long);
    expect(lines.slice(1, -1).every((l) => Buffer.byteLength(l) <= MAX_LINE_BYTES)).toBe(true);
    expect(readFileSync(file, 'utf8').split('\n').slice(1, -2).join('')).toBe(long);
  });

  it('never splices a line of stdout with one of stderr, whatever the order their pieces come in', async () => {
    const batches: JobLogBatch[] = [];
    const { shipper, output } = pipeline(async (b) => void batches.push(b));
    output.write(Buffer.from('loss='), 'out');
    output.write(Buffer.from('warning: slow\n'), 'err');
    output.write(Buffer.from('0.25\n'), 'out');
    output.end();
    await shipper.finish('k');
    expect(batches.flatMap((b) => b.lines.map((l) => l.line))).toEqual(['warning: slow', 'loss=0.25']);
  });

  it('rotates output.log past its size without losing a line: the file and the one before hold the newest lines in order', () => {
    const file = outputFile();
    const output = new JobOutput(file, () => undefined, 10_000);
    for (let i = 0; i < 3000; i++) output.write(Buffer.from(`line ${i}\n`));
    output.end();
    expect(statSync(file).size).toBeLessThanOrEqual(10_000);
    expect(statSync(`${file}.1`).size).toBeLessThanOrEqual(10_000);
    expect(existsSync(`${file}.2`)).toBe(false);
    const kept = (readFileSync(`${file}.1`, 'utf8') + readFileSync(file, 'utf8')).trimEnd().split('\n');
    const first = Number(kept[0]!.slice(5));
    expect(first).toBeGreaterThan(0); // the oldest went with the rotation before
    expect(kept).toEqual(Array.from({ length: 3000 - first }, (_, i) => `line ${first + i}`));
  });

  it('keeps a batch the store could not take for now and sends it again; drops one it refuses for good (never sent forever)', async () => {
    const sent: string[][] = [];
    const warnings: string[] = [];
    let answer: CloudError | undefined = throttled();
    const { shipper, output } = pipeline(
      async (b) => {
        sent.push(b.lines.map((l) => l.line));
        if (answer) throw answer;
      },
      (m) => warnings.push(m),
    );
    output.write(Buffer.from('one\ntwo\n'));
    await shipper.flushAll(); // throttled: kept
    answer = new CloudError('invalid-request', 'the agent API refused logs/put (400): lines.0.line: too long', { operation: 'logs/put' });
    await shipper.flushAll(); // refused for good: dropped
    answer = undefined;
    output.write(Buffer.from('three\n'));
    await shipper.flushAll();
    expect(sent).toEqual([['one', 'two'], ['one', 'two'], ['three']]);
    expect(warnings).toEqual([
      'the log store did not take job output for now; sending it again at the next flush',
      'job output refused by the log store; those lines are dropped',
      'the log store takes job output again',
    ]);
    expect(shipper.counts).toMatchObject({ shipped: 1, refused: 2, retried: 1, dropped: 0 });
  });

  it('holds a bounded number of lines while the store is throttled, counts the rest as dropped, and says where they went missing', async () => {
    let open = false;
    const batches: JobLogBatch[] = [];
    const warnings: { m: string; extra: Record<string, unknown> }[] = [];
    const { shipper, output } = pipeline(
      async (b) => {
        if (!open) throw throttled();
        batches.push(b);
      },
      (m, extra) => warnings.push({ m, extra }),
    );
    const total = 50_000;
    for (let i = 0; i < total; i++) {
      output.write(Buffer.from(`step ${i} loss=0.5\n`));
      if (i % 5000 === 0) await shipper.flushAll();
    }
    const held = total - shipper.counts.dropped;
    expect(held).toBeLessThanOrEqual(MAX_PENDING_LINES);
    expect(shipper.counts.dropped).toBeGreaterThan(0);
    open = true;
    await shipper.flushAll();
    output.write(Buffer.from('after the outage\n'));
    output.end();
    await shipper.finish('k');
    const lines = batches.flatMap((b) => b.lines);
    // What was held goes in order, then the marker, then what came once there was room.
    expect(lines.slice(0, held).map((l) => l.line)).toEqual(Array.from({ length: held }, (_, i) => `step ${i} loss=0.5`));
    const marker = lines[held]!;
    expect(marker.line).toMatch(
      new RegExp(`^\\[gpu-fleet\\] ${total - held} line\\(s\\) of output \\(\\d+ bytes\\) were not shipped here`),
    );
    // A dropped line keeps its number: the gap is where the lines were.
    expect(marker.seq).toBe(total);
    expect(lines.at(-1)).toMatchObject({ line: 'after the outage', seq: total + 1 });
    expect(shipper.counts).toMatchObject({ shipped: held + 2, dropped: total - held });
    expect(warnings.map((w) => w.m)).toContain(
      "dropped job output the log store could not take in time; a marker line stands in the job's log",
    );
    expect(shipper.waiting('k')).toBe(false);
  });

  it('bounds what all attempts together hold, not only each one', async () => {
    const shipper = new LogShipper({ append: async () => Promise.reject(throttled()) }, clock);
    for (let a = 0; a < 10; a++) {
      shipper.track(`k${a}`, { ...meta, attempt: a });
      for (let i = 0; i < MAX_PENDING_LINES; i++) shipper.line(`k${a}`, Buffer.from('x'));
    }
    expect(10 * MAX_PENDING_LINES - shipper.counts.dropped).toBe(MAX_HELD_LINES);
  });
});
