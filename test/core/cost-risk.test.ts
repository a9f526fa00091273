import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { spotFactor } from '../../core/cost-model.ts';
import { poolRatePerHour, priorRatePerHour } from '../../core/risk.ts';

describe('spot cost model', () => {
  it('is 1 on a pool that is never interrupted', () => {
    expect(spotFactor({ workSec: 36_000, interruptionsPerHour: 0, restartSec: 240 })).toBe(1);
  });

  it('matches the checkpoint/restart formula', () => {
    // λ = 1/h, c = 600 s, r = 240 s: (1/λ + r)(e^{λc} − 1)/c
    const lambda = 1 / 3600;
    const expected = ((1 / lambda + 240) * Math.expm1(lambda * 600)) / 600;
    expect(spotFactor({ workSec: 36_000, checkpointIntervalSec: 600, interruptionsPerHour: 1, restartSec: 240 })).toBeCloseTo(expected, 12);
  });

  it('charges a job without checkpoints for the whole run it loses', () => {
    const withCp = spotFactor({ workSec: 8 * 3600, checkpointIntervalSec: 600, interruptionsPerHour: 0.2, restartSec: 240 });
    const without = spotFactor({ workSec: 8 * 3600, interruptionsPerHour: 0.2, restartSec: 240 });
    expect(withCp).toBeLessThan(1.05);
    expect(without).toBeGreaterThan(2);
    expect(spotFactor({ workSec: 200 * 3600, interruptionsPerHour: 1, restartSec: 240 })).toBe(Infinity);
  });

  it('grows with risk, with the checkpoint interval and with the restart time', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 600, max: 100_000 }),
        fc.double({ min: 0.001, max: 2, noNaN: true }),
        fc.integer({ min: 60, max: 3600 }),
        (work, rate, cp) => {
          const f = (r: number, c: number, restart: number) =>
            spotFactor({ workSec: work, checkpointIntervalSec: c, interruptionsPerHour: r, restartSec: restart });
          expect(f(rate, cp, 240)).toBeGreaterThanOrEqual(1);
          expect(f(rate * 2, cp, 240)).toBeGreaterThanOrEqual(f(rate, cp, 240));
          expect(f(rate, Math.min(work, cp * 2), 240)).toBeGreaterThanOrEqual(f(rate, cp, 240) - 1e-12);
          expect(f(rate, cp, 600)).toBeGreaterThanOrEqual(f(rate, cp, 240));
        },
      ),
    );
  });
});

describe('pool risk', () => {
  it('turns Spot Advisor bands into hourly rates, unknown pools counting as the worst band', () => {
    expect(priorRatePerHour('<5%')).toBeCloseTo(-Math.log(1 - 0.025) / 730, 12);
    expect(priorRatePerHour('>20%')).toBeGreaterThan(priorRatePerHour('10-15%'));
    expect(priorRatePerHour(undefined)).toBe(priorRatePerHour('>20%'));
  });

  it('moves from the prior towards what was observed as evidence accumulates', () => {
    const prior = priorRatePerHour('<5%');
    const observedRate = 10 / 1000;
    const little = poolRatePerHour('<5%', { interruptions: 1, exposureHours: 100 });
    const lots = poolRatePerHour('<5%', { interruptions: 100, exposureHours: 10_000 });
    expect(little).toBeGreaterThan(prior);
    expect(Math.abs(lots - observedRate)).toBeLessThan(Math.abs(little - observedRate));
    expect(poolRatePerHour('<5%', { interruptions: 0, exposureHours: 100_000 })).toBeLessThan(prior);
    expect(poolRatePerHour('<5%', undefined)).toBe(prior);
  });
});
