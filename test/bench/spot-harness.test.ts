import { execFileSync } from 'node:child_process';
import { resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { benchSpot, type Row } from '../../bench/spot.ts';
import { omniscient } from '../../bench/spot/omniscient.ts';
import { runPolicy } from '../../bench/spot/sim.ts';

const ROOT = resolve(import.meta.dirname, '../..');
const TRACES = resolve(ROOT, 'data/spot/availability');
const PAPER_JOB = { workSec: 48 * 3600, deadlineSec: 60 * 3600, changeoverSec: 720, priceRatio: 3 };

describe('bench:spot', () => {
  it('runs every policy on the shipped traces from the command line and prints the JSON rows the issue names', () => {
    const out = execFileSync(
      process.execPath,
      ['--import', 'tsx', 'bench/spot.ts', '--traces', TRACES, '--runs', '12', '--trace-hours', '200', '--json'],
      { cwd: ROOT, encoding: 'utf8' },
    );
    const rows = JSON.parse(out) as Row[];
    for (const r of rows)
      expect(Object.keys(r).sort()).toEqual(['costRatio', 'deadlineMetPct', 'onDemandHours', 'policy', 'runs', 'spotHours', 'trace']);
    const all = rows.filter((r) => r.trace === 'ALL');
    expect(all.map((r) => r.policy)).toEqual(['greedy', 'uniform-progress', 'gpu-fleet', 'omniscient']);
    expect(new Set(rows.map((r) => r.trace)).size).toBe(5); // four traces and ALL
    for (const r of all) {
      expect(r.runs).toBe(48);
      expect(r.deadlineMetPct).toBe(100);
      // Productive hours add up to the job's 48 h.
      expect(r.onDemandHours + r.spotHours).toBeCloseTo(48, 6);
    }
    const ratio = (p: string) => all.find((r) => r.policy === p)!.costRatio;
    for (const p of ['greedy', 'uniform-progress', 'gpu-fleet']) expect(ratio('omniscient')).toBeLessThanOrEqual(ratio(p) + 1e-12);
  });

  it('explains a bad option and the values allowed', () => {
    let message = '';
    try {
      execFileSync(process.execPath, ['--import', 'tsx', 'bench/spot.ts', '--traces', TRACES, '--policies', 'greedy,clairvoyant'], {
        cwd: ROOT,
        encoding: 'utf8',
        stdio: 'pipe',
      });
    } catch (e) {
      message = String((e as { stderr?: string }).stderr);
    }
    expect(message).toMatch(/unknown policy "clairvoyant"; allowed: greedy, uniform-progress, gpu-fleet, omniscient/);
  });

  it('bills the changeover and costs on-demand at k: all on-demand costs exactly k × (C0 + d)', () => {
    const never = new Array<boolean>(400).fill(false);
    for (const policy of ['greedy', 'uniform-progress', 'gpu-fleet'] as const) {
      const r = runPolicy(policy, never, 0, 600, PAPER_JOB);
      expect(r).toMatchObject({ met: true, spotWorkSec: 0, onDemandWorkSec: 48 * 3600, billedOnDemandSec: 48 * 3600 + 720 });
      expect(r.cost).toBe(3 * (48 * 3600 + 720));
    }
    // Always-available spot: every policy and the optimum run on spot with one changeover.
    const always = new Array<boolean>(400).fill(true);
    expect(omniscient(always, 0, 600, PAPER_JOB).cost).toBe(48 * 3600 + 720);
    expect(runPolicy('gpu-fleet', always, 0, 600, PAPER_JOB).cost).toBe(48 * 3600 + 720);
  });

  it('never lets an online policy beat the omniscient optimum on the same start, and meets every deadline', () => {
    const random = (seed: number) => () => (seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31;
    for (let s = 1; s <= 6; s++) {
      const r = random(s);
      // Spells of availability and outage of random length.
      const avail: boolean[] = [];
      let on = r() < 0.5;
      while (avail.length < 500) {
        const len = 1 + Math.floor(r() * 40);
        for (let i = 0; i < len; i++) avail.push(on);
        on = !on;
      }
      const best = omniscient(avail, 0, 600, PAPER_JOB);
      expect(best.met).toBe(true);
      for (const policy of ['greedy', 'uniform-progress', 'gpu-fleet'] as const) {
        const run = runPolicy(policy, avail, 0, 600, PAPER_JOB);
        expect(run.met).toBe(true);
        expect(best.cost).toBeLessThanOrEqual(run.cost);
      }
    }
  });

  it('uses the same start times for every policy: a rerun with the same seed gives the same rows', async () => {
    const traces = [{ name: 't', gapSec: 600, values: Array.from({ length: 600 }, (_, i) => (Math.floor(i / 37) % 3 === 0 ? 0 : 1)) }];
    const opts = { traces, k: 3, runs: 10, seed: 7, nodes: 1, job: { workSec: 48 * 3600, deadlineSec: 60 * 3600, changeoverSec: 720 } };
    expect(await benchSpot(opts)).toEqual(await benchSpot(opts));
    expect(await benchSpot({ ...opts, seed: 8 })).not.toEqual(await benchSpot(opts));
  });

  it('gives the same rows on worker threads as in one thread, every trace in its order', async () => {
    const wave = (period: number) => Array.from({ length: 600 }, (_, i) => (Math.floor(i / period) % 3 === 0 ? 0 : 1));
    const traces = [
      { name: 'a', gapSec: 600, values: wave(37) },
      { name: 'b', gapSec: 600, values: wave(11) },
      { name: 'c', gapSec: 600, values: wave(23) },
    ];
    const opts = { traces, k: 3, runs: 10, seed: 7, nodes: 1, job: { workSec: 48 * 3600, deadlineSec: 60 * 3600, changeoverSec: 720 } };
    const one = await benchSpot(opts, 1);
    expect(await benchSpot(opts, 2)).toEqual(one);
    expect(one.map((r) => r.trace)).toEqual([...Array(4).fill('a'), ...Array(4).fill('b'), ...Array(4).fill('c'), ...Array(4).fill('ALL')]);
  }, 60_000);
});
