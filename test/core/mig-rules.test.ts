import { describe, expect, it } from 'vitest';
import { bestStart, migProfile, modelsWithProfile, roomAfter, validateMigLayout } from '../../core/mig.ts';

/** The MIG table's lookups and placement choice, case by case (mig.test.ts checks the table and the rules). */

const state = (usedSlices: readonly number[]) => ({
  mask: usedSlices.reduce((m, s) => m | (1 << s), 0),
  counts: new Map<string, number>(),
});

describe('MIG lookups', () => {
  it('names the models that offer a profile', () => {
    expect(modelsWithProfile('1g.10gb')).toEqual(['A100-40GB', 'A100-80GB', 'H100']); // a 1g.10gb is the A100-40GB's double-memory slice
    expect(modelsWithProfile('1g.5gb')).toEqual(['A100-40GB']);
    expect(modelsWithProfile('7g.141gb')).toEqual(['H200']);
    expect(modelsWithProfile('9g.1tb')).toEqual([]);
  });

  it('gives the nominal memory of a profile in MiB, and nothing for a GPU without MIG', () => {
    expect(migProfile('A100-80GB', '3g.40gb')?.memoryMiB).toBe(40 * 1024);
    expect(migProfile('H200', '1g.18gb')?.memoryMiB).toBe(18 * 1024);
    expect(migProfile('T4', '1g.5gb')).toBeUndefined();
    expect(roomAfter('T4', 0)).toBe(0);
  });

  it('refuses a layout with a profile the GPU does not have', () => {
    expect(validateMigLayout('H100', [{ profile: '1g.5gb', start: 0 }])).toBe('H100 has no MIG profile 1g.5gb');
    expect(validateMigLayout('T4', [])).toBe('T4 does not support MIG');
  });
});

describe('where a new GPU instance goes', () => {
  it('weighs the room left by the size of what could still be placed, not by the count of placements', () => {
    // Slice 0 in use: a 1g.20gb (two slices) at 2 keeps the big 4-slice placement at 4 open;
    // at 6 it would leave more, smaller, placements.
    expect(bestStart('H100', state([0]), migProfile('H100', '1g.20gb')!)).toBe(2);
    expect(bestStart('H100', state([2]), migProfile('H100', '1g.20gb')!)).toBe(0);
  });

  it('takes the lowest start among equally good ones', () => {
    expect(bestStart('H100', state([0, 1]), migProfile('H100', '1g.10gb')!)).toBe(2);
    expect(bestStart('H100', state([0, 2]), migProfile('H100', '1g.10gb')!)).toBe(1);
    expect(bestStart('H100', state([4]), migProfile('H100', '2g.20gb')!)).toBe(0);
  });
});
