import { describe, expect, it } from 'vitest';
import { benchLoad } from '../../bench/load.ts';

describe('bench:load', () => {
  it('on dynalite: two reconciles, each with its read/plan/apply times, items, capacity units and their monthly price; the second rewrites no hold', async () => {
    const rows = await benchLoad({ jobs: 600, nodes: 40, teams: 10, store: 'dynalite' });
    expect(rows.map((r) => [r.store, r.reconcile])).toEqual([
      ['dynalite', 1],
      ['dynalite', 2],
    ]);
    for (const r of rows) {
      for (const k of [
        'readSec',
        'planSec',
        'applySec',
        'totalSec',
        'itemsRead',
        'itemsWritten',
        'capacityUnits',
        'usdPerMonth',
        'peakRssMiB',
      ] as const)
        expect(typeof r[k]).toBe('number');
      expect(r.totalSec).toBeGreaterThanOrEqual(r.planSec);
      // Every pending job is read (one query per state and page, not a scan of everything).
      expect(r.itemsRead!).toBeGreaterThanOrEqual(600);
      expect(r.capacityUnits!).toBeGreaterThan(0);
    }
    const [first, second] = rows as [(typeof rows)[0], (typeof rows)[0]];
    // The held team's jobs are held once, in the first reconcile only.
    expect(first.holdsWritten).toBe(60);
    expect(second.holdsWritten).toBe(0);
    // A quiet minute writes what changed only: spend cursors, the decision, the lease and journal; no job, no node.
    const kinds = Object.keys(second.writesByKind ?? {});
    expect(kinds.filter((k) => /jobs|nodes/.test(k))).toEqual([]);
    expect(kinds.filter((k) => /^(GetItem|Query|Scan)/.test(k))).toEqual([]); // reads are not counted as writes
    expect(second.itemsWritten!).toBeLessThan(first.itemsWritten! / 5);
  }, 120_000);
});
