import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { bestStart, freeStarts, MIG_GPUS, migProfile, validateMigLayout } from '../../core/mig.ts';

interface JsonProfile {
  name: string;
  profile_id: number;
  compute_slices: number;
  memory_slices: number;
  max_instances: number;
  placements: { start: number; size: number }[];
}
const shipped = JSON.parse(readFileSync(new URL('../../data/mig/mig-profiles.json', import.meta.url), 'utf8')) as {
  gpus: { key: string; profiles: JsonProfile[] }[];
};
const KEYS = { 'A100-40GB': 'a100-40gb', 'A100-80GB': 'a100-80gb', H100: 'h100-80gb', H200: 'h200-141gb', B200: 'b200-180gb' } as const;

describe('MIG profile tables', () => {
  it.each(Object.entries(KEYS))('%s matches the shipped NVIDIA reference exactly', (model, key) => {
    const json = shipped.gpus.find((g) => g.key === key)!;
    const ours = MIG_GPUS[model as keyof typeof KEYS]!;
    expect(ours.profiles.map((p) => p.name).sort()).toEqual(json.profiles.map((p) => p.name).sort());
    for (const jp of json.profiles) {
      const p = migProfile(model as keyof typeof KEYS, jp.name)!;
      expect({ id: p.profileId, c: p.computeSlices, m: p.memorySlices, max: p.maxInstances, starts: p.starts }).toEqual({
        id: jp.profile_id,
        c: jp.compute_slices,
        m: jp.memory_slices,
        max: jp.max_instances,
        starts: jp.placements.map((x) => x.start),
      });
      for (const pl of jp.placements) expect(pl.size).toBe(p.memorySlices);
    }
  });

  it('classifies the worked examples of the NVIDIA rules', () => {
    expect(
      validateMigLayout('A100-40GB', [
        { profile: '4g.20gb', start: 0 },
        { profile: '3g.20gb', start: 4 },
      ]),
    ).toBeUndefined();
    expect(
      validateMigLayout('A100-40GB', [
        { profile: '3g.20gb', start: 0 },
        { profile: '3g.20gb', start: 4 },
      ]),
    ).toBeUndefined();
    expect(
      validateMigLayout('A100-40GB', [
        { profile: '3g.20gb', start: 0 },
        { profile: '4g.20gb', start: 0 },
      ]),
    ).toContain('overlaps');
    expect(validateMigLayout('A100-40GB', [{ profile: '1g.5gb', start: 7 }])).toContain('cannot start at memory slice 7');
    expect(validateMigLayout('A100-40GB', [{ profile: '2g.10gb', start: 6 }])).toContain('allowed: 0, 2, 4');
    expect(
      validateMigLayout('A100-40GB', [
        { profile: '1g.5gb+me', start: 0 },
        { profile: '1g.5gb+me', start: 1 },
      ]),
    ).toContain('at most 1');
    expect(validateMigLayout('V100', [])).toContain('does not support MIG');
  });

  it('never finds a valid layout with more than 7 compute slices (R3)', () => {
    const profiles = MIG_GPUS['A100-80GB']!.profiles;
    let worst = 0;
    const search = (mask: number, counts: Map<string, number>, compute: number) => {
      worst = Math.max(worst, compute);
      for (const p of profiles) {
        for (const s of freeStarts({ mask, counts }, p)) {
          const next = new Map(counts);
          next.set(p.name, (next.get(p.name) ?? 0) + 1);
          if (compute + p.computeSlices <= 8) search(mask | (((1 << p.memorySlices) - 1) << s), next, compute + p.computeSlices);
        }
      }
    };
    search(0, new Map(), 0);
    expect(worst).toBe(7);
  });

  it('puts a small slice where it keeps the large placements open', () => {
    const p = migProfile('A100-40GB', '1g.5gb')!;
    // On an empty GPU a 1g slice should not take slice 0, which 4g and 7g need.
    expect(bestStart('A100-40GB', { mask: 0, counts: new Map() }, p)).not.toBe(0);
  });
});

describe('one share of a GPU for a MIG instance', () => {
  it('is its compute slices ÷ 7, from its name, the same in a request, a holding (accrual), team caps and status', async () => {
    const { milliGpusUsed, migComputeSlices } = await import('../../core/gpu.ts');
    const { assignmentMilliGpu } = await import('../../core/job.ts');
    expect(['3g.40gb', '3g.20gb', '1g.10gb', '1g.20gb', '7g.80gb', 'odd'].map(migComputeSlices)).toEqual([3, 3, 1, 1, 7, 1]);
    expect(milliGpusUsed({ kind: 'mig', profile: '3g.40gb' })).toBe(429);
    expect(assignmentMilliGpu({ nodeId: 'n', gpuIndices: [0], mig: { profile: '3g.40gb', startSlice: 4 } })).toBe(429);
    // A request's share no longer depends on its caller passing the slices: before, a MIG request counted one slice.
    expect(milliGpusUsed({ kind: 'mig', profile: '7g.80gb' })).toBe(1000);
  });
});
