import { appendFileSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { LogShipper, MAX_BATCH_BYTES, MAX_LINE_BYTES } from '../../agent/log-shipper.ts';
import { CloudError } from '../../core/errors.ts';
import type { JobLogBatch } from '../../core/ports.ts';

const clock = { nowMs: () => 1_800_000_000_000 };
const meta = { jobId: 'nlp.j', attempt: 1, rank: 0, team: 'nlp', labels: {} };
const outputFile = () => join(mkdtempSync(join(tmpdir(), 'shipper-')), 'output.log');

describe('job output shipping: batches bounded by bytes as well as lines', () => {
  it('sends a thousand of the longest lines, each a worst case on the wire, in batches far under the 6 MB limit', async () => {
    const file = outputFile();
    // A control character takes six bytes in JSON: 16 KiB of them is about 96 KiB on the wire.
    writeFileSync(file, `${'\u0001'.repeat(MAX_LINE_BYTES)}\n`.repeat(1000));
    const batches: JobLogBatch[] = [];
    const shipper = new LogShipper({ append: async (b) => void batches.push(b) }, clock);
    shipper.track('k', file, meta);
    await shipper.finish('k');
    expect(batches.flatMap((b) => b.lines.map((l) => l.seq))).toEqual(Array.from({ length: 1000 }, (_, i) => i));
    const wire = batches.map((b) => Buffer.byteLength(JSON.stringify(b.lines)));
    expect(Math.max(...wire)).toBeLessThanOrEqual(MAX_BATCH_BYTES + 1);
    expect(batches.length).toBeGreaterThan(100);
  });

  it('cuts one oversized line, saying so, and sends it once', async () => {
    const file = outputFile();
    writeFileSync(file, `start\n${'x'.repeat(200_000)}\nend\n`);
    const batches: JobLogBatch[] = [];
    const shipper = new LogShipper({ append: async (b) => void batches.push(b) }, clock);
    shipper.track('k', file, meta);
    await shipper.flushAll();
    await shipper.finish('k');
    const lines = batches.flatMap((b) => b.lines.map((l) => l.line));
    expect(lines).toHaveLength(3);
    expect(lines[1]).toMatch(/^x+ … \[cut: the line was 200000 bytes\]$/);
    expect(Buffer.byteLength(lines[1]!)).toBeLessThanOrEqual(MAX_LINE_BYTES);
    expect([lines[0], lines[2]]).toEqual(['start', 'end']);
  });

  it('keeps a batch the sink could not take for now, and drops one it refuses for good (never sent forever)', async () => {
    const file = outputFile();
    writeFileSync(file, 'one\ntwo\n');
    const sent: string[][] = [];
    const warnings: string[] = [];
    let answer: CloudError | undefined = new CloudError('throttled', 'slow down', { operation: 'logs/put' });
    const shipper = new LogShipper(
      {
        append: async (b) => {
          sent.push(b.lines.map((l) => l.line));
          if (answer) throw answer;
        },
      },
      clock,
      (m) => warnings.push(m),
    );
    shipper.track('k', file, meta);
    await expect(shipper.flushAll()).rejects.toThrow(/slow down/);
    // Refused for good: dropped with a warning, and the next flush sends only what came after.
    answer = new CloudError('invalid-request', 'the agent API refused logs/put (400): lines.0.line: too long', { operation: 'logs/put' });
    await shipper.flushAll();
    answer = undefined;
    appendFileSync(file, 'three\n');
    await shipper.flushAll();
    expect(sent).toEqual([['one', 'two'], ['one', 'two'], ['three']]);
    expect(warnings).toEqual(['job output refused by the log store; those lines are dropped']);
  });
});
