import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { allocate, costForDuration, formatUsd, microUsdFromUsd, MoneyError, parseUsd, usdString } from '../../core/money.ts';

describe('money', () => {
  it('converts published decimal prices to whole micro-dollars', () => {
    expect(microUsdFromUsd(3.06)).toBe(3_060_000);
    expect(microUsdFromUsd(21.957642)).toBe(21_957_642);
    expect(microUsdFromUsd(0.1 + 0.2)).toBe(300_000);
  });

  it('parses dollar strings exactly and refuses anything else', () => {
    expect(parseUsd('2500')).toBe(2_500_000_000);
    expect(parseUsd('2500.5')).toBe(2_500_500_000);
    expect(parseUsd('0.000001')).toBe(1);
    for (const bad of ['', '-5', '1e3', '12.3456789', 'abc', '1,000', 'NaN', 'Infinity', '1000000000'])
      expect(parseUsd(bad)).toBeUndefined();
  });

  it('prices a duration exactly, rounding to the nearest micro-dollar', () => {
    expect(costForDuration(3_060_000, 3_600_000)).toBe(3_060_000);
    expect(costForDuration(3_060_000, 60_000)).toBe(51_000);
    expect(costForDuration(1, 1_800_000)).toBe(1); // half rounds away from zero
    expect(costForDuration(1, 1_799_999)).toBe(0);
    // Far beyond 2^53 in the intermediate product: still exact.
    expect(costForDuration(98_320_000, 365 * 24 * 3_600_000)).toBe(98_320_000 * 365 * 24);
    expect(() => costForDuration(1.5, 1000)).toThrow(MoneyError);
    expect(() => costForDuration(100, -1)).toThrow(/non-negative/);
  });

  it('formats amounts for people and as exact decimals', () => {
    expect(formatUsd(1_234_567_891)).toBe('$1,234.57');
    expect(formatUsd(-5_000)).toBe('-$0.01');
    expect(usdString(2_500_500_000)).toBe('2500.5');
    expect(usdString(1)).toBe('0.000001');
  });

  it('allocation always preserves the total exactly', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: -1e12, max: 1e12 }),
        fc.array(fc.nat({ max: 1e6 }), { minLength: 1, maxLength: 20 }),
        (total, weights) => {
          const parts = allocate(total, weights);
          const sum = weights.reduce((a, b) => a + b, 0);
          expect(parts).toHaveLength(weights.length);
          if (sum === 0) expect(parts.every((p) => p === 0)).toBe(true);
          else expect(parts.reduce((a, b) => a + b, 0)).toBe(total);
          parts.forEach((p) => expect(Number.isSafeInteger(p)).toBe(true));
          // Zero weight gets nothing.
          weights.forEach((w, i) => w === 0 && sum > 0 && expect(parts[i]).toBe(0));
        },
      ),
    );
  });

  it('allocation is proportional within one micro-dollar', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 1e10 }),
        fc.array(fc.integer({ min: 1, max: 1000 }), { minLength: 1, maxLength: 8 }),
        (total, weights) => {
          const sum = weights.reduce((a, b) => a + b, 0);
          allocate(total, weights).forEach((p, i) => expect(Math.abs(p - (total * weights[i]!) / sum)).toBeLessThanOrEqual(1));
        },
      ),
    );
  });

  it('cost is additive over split durations within rounding', () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 1e8 }), fc.integer({ min: 0, max: 1e9 }), fc.integer({ min: 0, max: 1e9 }), (price, a, b) => {
        const whole = costForDuration(price, a + b);
        expect(Math.abs(whole - (costForDuration(price, a) + costForDuration(price, b)))).toBeLessThanOrEqual(1);
      }),
    );
  });

  it('usdString and parseUsd round-trip every non-negative amount', () => {
    fc.assert(
      fc.property(
        fc.maxSafeNat().map((n) => n % 1_000_000_000_000_000),
        (amount) => {
          expect(parseUsd(usdString(amount))).toBe(amount);
        },
      ),
    );
  });
});
