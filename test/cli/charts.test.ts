import { describe, expect, it } from 'vitest';
import { colorsByName, niceTicks, stackedChart } from '../../cli/charts.ts';

describe('charts people read', () => {
  it('put ticks at round values up to the data, whole ones for counts of days', () => {
    // Before: 0 / 851 / 1.7k / 2.6k for a maximum of 3,404.
    expect(niceTicks(3_404)).toEqual([0, 1000, 2000, 3000, 4000]);
    expect(niceTicks(2_581)).toEqual([0, 1000, 2000, 3000]);
    expect(niceTicks(0.37)).toEqual([0, 0.1, 0.2, 0.3, 0.4]);
    expect(niceTicks(1, true)).toEqual([0, 1]);
    expect(niceTicks(6, true)).toEqual([0, 2, 4, 6]);
    expect(niceTicks(0)).toEqual([0]);
  });

  it('give a name the same colour in every chart of a page, and draw a single day one day wide', () => {
    const colors = colorsByName(['vision', 'nlp', '(idle)', 'nlp'], new Map([['(idle)', '#9aa4ab']]));
    expect(colors.get('(idle)')).toBe('#9aa4ab');
    expect(colorsByName(['vision', 'nlp']).get('nlp')).toBe(colors.get('nlp'));
    expect(colors.get('nlp')).not.toBe(colors.get('vision'));
    const svg = stackedChart({ id: 'd', title: 't', xLabel: 'days', series: [{ name: 'nlp', color: '#000', points: [[0, 5]] }] });
    expect(svg).toContain('data-points="2"');
  });
});
