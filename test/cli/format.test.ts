import { describe, expect, it } from 'vitest';
import { count, formatNumber } from '../../cli/format.ts';

describe('the one number format for people', () => {
  it('writes thousands with separators and counts with a noun that agrees with the number', () => {
    expect(formatNumber(25_708)).toBe('25,708');
    expect(count(1, 'action')).toBe('1 action');
    expect(count(0, 'action')).toBe('0 actions');
    expect(count(2_181, 'job')).toBe('2,181 jobs');
    expect(count(1, 'active job')).toBe('1 active job');
    expect(count(3, 'policy', 'policies')).toBe('3 policies');
  });
});
