import { describe, expect, it } from 'vitest';
import { count, formatNumber, gpuHours } from '../../cli/format.ts';

describe('the one number format for people', () => {
  it('writes thousands with separators and counts with a noun that agrees with the number', () => {
    expect(formatNumber(25_708)).toBe('25,708');
    expect(count(1, 'action')).toBe('1 action');
    expect(count(0, 'action')).toBe('0 actions');
    expect(count(2_181, 'job')).toBe('2,181 jobs');
    expect(count(1, 'active job')).toBe('1 active job');
    expect(count(3, 'policy', 'policies')).toBe('3 policies');
  });

  it('writes GPU-hours with separators and a fixed number of decimals', () => {
    expect(gpuHours(6501.44)).toBe('6,501.4 GPU-h');
    expect(gpuHours(0.1749, 2)).toBe('0.17 GPU-h');
    expect(gpuHours(3)).toBe('3.0 GPU-h');
  });
});
