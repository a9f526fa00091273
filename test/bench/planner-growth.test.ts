import { describe, expect, it } from 'vitest';
import { growthExponent } from '../../bench/planner/growth.ts';
import { scenarioNamed, SWEEP } from '../../bench/planner/scenarios.ts';

describe('bench:planner --sweep', () => {
  it('fits the growth exponent as the log-log slope: 1 for linear, 2 for quadratic, about 1.1 for n log n over 1k → 100k', () => {
    const sizes = [1_000, 10_000, 100_000];
    expect(growthExponent(sizes.map((n) => [n, 3 * n]))).toBeCloseTo(1, 10);
    expect(growthExponent(sizes.map((n) => [n, n * n]))).toBeCloseTo(2, 10);
    const nLogN = growthExponent(sizes.map((n) => [n, n * Math.log(n)]));
    expect(nLogN).toBeGreaterThan(1.1);
    expect(nLogN).toBeLessThan(1.15);
  });

  it('sweeps one axis at a time around 10k × 200 × 1,000, plus the corner, each scenario once', () => {
    const center = SWEEP.find((s) => s.name === '10k-jobs/200-offerings/1000-nodes')!;
    expect(center.axes).toEqual(['jobs', 'nodes', 'offerings']);
    expect(
      SWEEP.filter((s) => s.axes.includes('jobs'))
        .map((s) => s.jobs)
        .sort((a, b) => a - b),
    ).toEqual([1_000, 10_000, 100_000]);
    expect(
      SWEEP.filter((s) => s.axes.includes('nodes'))
        .map((s) => s.liveNodes)
        .sort((a, b) => a - b),
    ).toEqual([100, 1_000, 10_000]);
    expect(
      SWEEP.filter((s) => s.axes.includes('offerings'))
        .map((s) => s.offerings)
        .sort((a, b) => a - b),
    ).toEqual([50, 200, 500]);
    expect(SWEEP.find((s) => s.axes.includes('corner'))).toMatchObject({ jobs: 100_000, offerings: 500, liveNodes: 10_000 });
    expect(new Set(SWEEP.map((s) => s.name)).size).toBe(SWEEP.length);
    // A child process finds its scenario by name alone.
    expect(scenarioNamed('100k-jobs/500-offerings/10000-nodes')).toMatchObject({ jobs: 100_000, offerings: 500, liveNodes: 10_000 });
    expect(scenarioNamed('10k jobs')).toBeUndefined();
  });
});
