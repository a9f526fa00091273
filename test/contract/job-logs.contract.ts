import { describe, expect, it } from 'vitest';
import type { JobLogSink, JobLogSource } from '../../core/ports.ts';

/** Line times an hour ago: CloudWatch Logs leaves out events over 14 days old or 2 hours ahead, as the fake does. */
const T = Date.now() - 3_600_000;

/** What every job log store must do: keep each attempt's and rank's lines in order, read back attempt by attempt. */
export function jobLogsContract(name: string, make: () => Promise<JobLogSink & JobLogSource>): void {
  describe(`job logs contract: ${name}`, () => {
    const meta = { team: 'nlp', labels: { project: 'ranking' } };
    it('reads a job’s lines attempt by attempt, ranks in order, each in its written order; --attempt and --since narrow it', async () => {
      const logs = await make();
      await logs.append({ jobId: 'nlp.j', attempt: 2, rank: 0, ...meta, lines: [{ atMs: T + 5000, seq: 0, line: 'second attempt' }] });
      await logs.append({
        jobId: 'nlp.j',
        attempt: 1,
        rank: 0,
        ...meta,
        lines: [
          { atMs: T + 1000, seq: 0, line: 'one' },
          { atMs: T + 1000, seq: 1, line: 'two' },
          { atMs: T + 2000, seq: 2, line: 'three {"not": json}' },
        ],
      });
      await logs.append({ jobId: 'nlp.j', attempt: 1, rank: 1, ...meta, lines: [{ atMs: T + 1500, seq: 0, line: 'rank one' }] });
      await logs.append({ jobId: 'nlp.j', attempt: 1, rank: 0, ...meta, lines: [{ atMs: T + 3000, seq: 3, line: 'four' }] });
      await logs.append({ jobId: 'nlp.other', attempt: 1, rank: 0, ...meta, lines: [{ atMs: T + 1000, seq: 0, line: 'not mine' }] });
      const all = await logs.read('nlp.j');
      expect(all.map((l) => [l.attempt, l.rank, l.line])).toEqual([
        [1, 0, 'one'],
        [1, 0, 'two'],
        [1, 0, 'three {"not": json}'],
        [1, 0, 'four'],
        [1, 1, 'rank one'],
        [2, 0, 'second attempt'],
      ]);
      expect(all[0]).toMatchObject({ atMs: T + 1000, seq: 0 });
      expect((await logs.read('nlp.j', { attempt: 2 })).map((l) => l.line)).toEqual(['second attempt']);
      expect((await logs.read('nlp.j', { sinceMs: T + 2000 })).map((l) => l.line)).toEqual([
        'three {"not": json}',
        'four',
        'second attempt',
      ]);
      expect(await logs.read('nlp.none')).toEqual([]);
    });
  });
}
