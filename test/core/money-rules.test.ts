import { describe, expect, it } from 'vitest';
import type { MoneyError } from '../../core/errors.ts';
import { allocate, assertMicroUsd, costForDuration, formatUsd, microUsdFromUsd, parseUsd, usdString } from '../../core/money.ts';

/** The exact rules of the money arithmetic, case by case (money.test.ts checks the properties). */

const caught = (f: () => unknown): MoneyError => {
  try {
    f();
  } catch (e) {
    return e as MoneyError;
  }
  throw new Error('expected a MoneyError');
};

describe('allocation: largest remainder, ties to the earlier weight', () => {
  it('gives what rounding leaves to the largest remainders, not to the largest weights', () => {
    // 7 × 3/5 = 4.2, 7 × 2/5 = 2.8: the second has the larger remainder and gets the spare micro-dollar.
    expect(allocate(7, [3, 2])).toEqual([4, 3]);
    expect(allocate(5, [1, 3])).toEqual([1, 4]);
    expect(allocate(10, [1, 1, 1])).toEqual([4, 3, 3]);
  });

  it('breaks ties between equal remainders in favour of the earlier weight', () => {
    expect(allocate(1, [1, 1])).toEqual([1, 0]);
    expect(allocate(2, [1, 1, 1])).toEqual([1, 1, 0]);
    expect(allocate(1, [2, 1, 1])).toEqual([1, 0, 0]);
    expect(allocate(3, [1, 2, 1, 2])).toEqual([1, 1, 0, 1]);
  });

  it('gives nothing to anyone when every weight is zero', () => {
    expect(allocate(10, [0, 0])).toEqual([0, 0]);
    expect(allocate(10, [])).toEqual([]);
  });

  it('splits a negative total (a credit) the same way, mirrored, with zero parts staying +0', () => {
    expect(allocate(-7, [3, 2])).toEqual([-4, -3]);
    const parts = allocate(-5, [0, 1]);
    expect(parts).toEqual([0, -5]);
    expect(Object.is(parts[0], 0)).toBe(true);
    expect(allocate(0, [1, 2])).toEqual([0, 0]);
  });

  it('refuses weights that are negative or not whole, and a total that is not whole, naming the value', () => {
    expect(caught(() => allocate(10, [1, -1])).message).toBe('weights must be non-negative integers, got -1');
    expect(caught(() => allocate(10, [1, -1])).context).toEqual({ value: -1 });
    expect(caught(() => allocate(10, [0.5])).message).toBe('weights must be non-negative integers, got 0.5');
    expect(caught(() => allocate(1.5, [1])).message).toBe('total must be a whole number of micro-dollars, got 1.5');
  });
});

describe('the cost of a duration', () => {
  it('rounds half away from zero, for a credit too', () => {
    expect(costForDuration(1, 1_800_000)).toBe(1); // 0.5 µUSD → 1
    expect(costForDuration(-1, 1_800_000)).toBe(-1); // −0.5 µUSD → −1
    expect(costForDuration(-1_000_000, 1_800_000)).toBe(-500_000);
    expect(costForDuration(-3, 1_000_000)).toBe(-1); // −0.833 → −1
    expect(costForDuration(0, 3_600_000)).toBe(0);
    expect(costForDuration(5_000_000, 0)).toBe(0);
  });

  it('refuses a price or a duration it cannot price exactly, naming the value', () => {
    const price = caught(() => costForDuration(1.5, 1000));
    expect(price.message).toBe('price per hour must be a whole number of micro-dollars, got 1.5');
    expect(price.context).toEqual({ what: 'price per hour', value: 1.5 });
    const duration = caught(() => costForDuration(1, -1));
    expect(duration.message).toBe('duration must be a non-negative whole number of milliseconds, got -1');
    expect(duration.context).toEqual({ value: -1 });
    expect(caught(() => costForDuration(1, 0.5)).message).toBe('duration must be a non-negative whole number of milliseconds, got 0.5');
  });
});

describe('conversions', () => {
  it('names what was not a whole number of micro-dollars', () => {
    expect(caught(() => assertMicroUsd(0.1)).message).toBe('amount must be a whole number of micro-dollars, got 0.1');
    expect(caught(() => assertMicroUsd(Number.NaN, 'spend')).message).toBe('spend must be a whole number of micro-dollars, got NaN');
    expect(assertMicroUsd(-5)).toBe(-5);
  });

  it('refuses a price that is not a finite number of dollars', () => {
    for (const v of [Number.NaN, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY]) {
      const e = caught(() => microUsdFromUsd(v));
      expect(e.message).toBe(`price must be a finite number of dollars, got ${v}`);
      expect(e.context).toEqual({ value: v });
    }
    expect(microUsdFromUsd(-0.25)).toBe(-250_000);
  });

  it('reads dollar strings with spaces around them', () => {
    expect(parseUsd(' 12.5 ')).toBe(12_500_000);
    expect(parseUsd('\t7\n')).toBe(7_000_000);
  });

  it('formats zero without a sign, and a negative amount with one', () => {
    expect(formatUsd(0)).toBe('$0.00');
    expect(formatUsd(-1_234_567)).toBe('-$1.23');
    expect(formatUsd(1_234_567_890)).toBe('$1,234.57');
    expect(usdString(0)).toBe('0');
    expect(usdString(-1_500_000)).toBe('-1.5');
    expect(usdString(-1)).toBe('-0.000001');
    expect(usdString(3_000_000)).toBe('3');
  });
});
