import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { stoppedByWatchdog, watchdogLook } from '../../agent/watchdog.ts';

const NOW = 1_800_000_000_000;

/** One look with a stand-in for the engine that records what it was asked to stop. */
async function look(leaseText: string | undefined) {
  const leaseFile = join(mkdtempSync(join(tmpdir(), 'watchdog-')), 'lease.json');
  if (leaseText !== undefined) writeFileSync(leaseFile, leaseText);
  const asked: number[] = [];
  const result = await watchdogLook({
    leaseFile,
    nowMs: NOW,
    stopJobContainers: async (graceSec) => {
      asked.push(graceSec);
      return ['gpu-fleet-nlp.a-a1-r0'];
    },
  });
  return { result, asked, leaseFile };
}

const mark = (renewedAtMs: unknown) => JSON.stringify({ renewedAtMs, leaseSec: 180, fenceGraceSec: 60 });

describe("the machine's watchdog, one look", () => {
  it('keeps everything while the lease is within its lease and fence, and stops nothing', async () => {
    const { result, asked } = await look(mark(NOW - 240_000));
    expect(result).toMatchObject({ verdict: 'keep', stopped: [] });
    expect(asked).toEqual([]);
  });

  it('stops every job container past the lease and fence, within the stop grace, and names them for the next agent', async () => {
    const { result, asked, leaseFile } = await look(mark(NOW - 240_001));
    expect(result).toMatchObject({ verdict: 'stop', stopped: ['gpu-fleet-nlp.a-a1-r0'] });
    expect(result.why).toMatch(/240 s ago, past its lease \(180 s\) and fence \(60 s\)/);
    expect(asked).toEqual([30]);
    expect(stoppedByWatchdog(leaseFile)).toEqual(['gpu-fleet-nlp.a-a1-r0']);
  });

  it('stops them when no lease vouches for them: no file, not JSON, or not whole numbers', async () => {
    for (const text of [
      undefined,
      '{',
      mark('soon'),
      mark(NOW - 0.5),
      mark(-1),
      JSON.stringify({ renewedAtMs: NOW, leaseSec: 0, fenceGraceSec: 60 }),
    ]) {
      const { result } = await look(text);
      expect(result.verdict, String(text)).toBe('stop');
      expect(result.why).toMatch(/no lease file readable|is not \{renewedAtMs, leaseSec, fenceGraceSec\} as whole numbers/);
    }
  });
});
