import { MoneyError } from './errors.ts';

/**
 * Money is an integer number of micro-dollars (1 USD = 1,000,000 µUSD), never a float.
 * Floats appear only at the edge, when a catalogue publishes a decimal price; they are
 * converted once with {@link microUsdFromUsd} and never used for arithmetic after that.
 */
export type MicroUsd = number;

export const MICRO_USD_PER_USD = 1_000_000;
const MS_PER_HOUR = 3_600_000n;

export { MoneyError };

export function assertMicroUsd(value: number, what = 'amount'): MicroUsd {
  if (!Number.isSafeInteger(value)) {
    throw new MoneyError(`${what} must be a whole number of micro-dollars, got ${value}`, { context: { what, value } });
  }
  return value;
}

/** Converts a published decimal USD price (at most 6 decimals are meaningful) to µUSD. */
export function microUsdFromUsd(usd: number): MicroUsd {
  if (!Number.isFinite(usd)) throw new MoneyError(`price must be a finite number of dollars, got ${usd}`, { context: { value: usd } });
  return Math.round(usd * MICRO_USD_PER_USD);
}

/**
 * Parses a decimal dollar string such as "1500", "1500.25" or "0.000001" exactly, without
 * going through a float. At most 999,999,999 dollars, so the result is always a safe integer. Returns undefined when the text is not a plain non-negative decimal.
 */
export function parseUsd(text: string): MicroUsd | undefined {
  const match = /^(\d{1,9})(?:\.(\d{1,6}))?$/.exec(text.trim());
  if (!match) return undefined;
  const whole = Number(match[1]);
  const fraction = Number((match[2] ?? '').padEnd(6, '0'));
  return whole * MICRO_USD_PER_USD + fraction;
}

/**
 * The cost of holding something priced per hour for a duration, rounded to the nearest
 * micro-dollar (half away from zero). Exact for any duration: the product is taken in BigInt.
 */
export function costForDuration(priceMicroUsdPerHour: MicroUsd, durationMs: number): MicroUsd {
  assertMicroUsd(priceMicroUsdPerHour, 'price per hour');
  if (!Number.isSafeInteger(durationMs) || durationMs < 0) {
    throw new MoneyError(`duration must be a non-negative whole number of milliseconds, got ${durationMs}`, {
      context: { value: durationMs },
    });
  }
  const product = BigInt(priceMicroUsdPerHour) * BigInt(durationMs);
  const half = MS_PER_HOUR / 2n;
  const rounded = product >= 0n ? (product + half) / MS_PER_HOUR : -((-product + half) / MS_PER_HOUR);
  return Number(rounded);
}

/**
 * Splits a total into parts proportional to non-negative integer weights, so that the parts
 * add up to the total exactly (largest remainder; ties go to the earlier weight).
 * Zero total weight gives all of it to nobody: every part is 0 and the caller must decide.
 */
export function allocate(total: MicroUsd, weights: readonly number[]): MicroUsd[] {
  assertMicroUsd(total, 'total');
  for (const w of weights) {
    if (!Number.isSafeInteger(w) || w < 0)
      throw new MoneyError(`weights must be non-negative integers, got ${w}`, { context: { value: w } });
  }
  const sum = weights.reduce((a, b) => a + b, 0);
  if (sum === 0) return weights.map(() => 0);
  if (total < 0) return allocate(-total, weights).map((p) => (p === 0 ? 0 : -p));
  const bigTotal = BigInt(total);
  const bigSum = BigInt(sum);
  const parts = weights.map((w) => (bigTotal * BigInt(w)) / bigSum);
  // Hand what rounding left over to the largest remainders; only weights with a remainder get one.
  const order = weights
    .map((w, i) => ({ i, r: (bigTotal * BigInt(w)) % bigSum }))
    .sort((a, b) => (a.r === b.r ? a.i - b.i : a.r > b.r ? -1 : 1));
  let left = bigTotal - parts.reduce((a, b) => a + b, 0n);
  for (let k = 0; left > 0n; k++) {
    const idx = order[k]!.i;
    parts[idx] = parts[idx]! + 1n;
    left -= 1n;
  }
  return parts.map(Number);
}

/** "$1,234.57" — for people; rounds to cents for display only. */
export function formatUsd(amount: MicroUsd): string {
  const negative = amount < 0;
  const cents = Math.round(Math.abs(amount) / 10_000);
  const dollars = Math.floor(cents / 100).toLocaleString('en-US');
  const rest = String(cents % 100).padStart(2, '0');
  return `${negative ? '-' : ''}$${dollars}.${rest}`;
}

/** A dollar amount as a decimal string with up to 6 places, exact ("12.5", "0.000001"). */
export function usdString(amount: MicroUsd): string {
  const negative = amount < 0;
  const abs = Math.abs(amount);
  const whole = Math.floor(abs / MICRO_USD_PER_USD);
  const frac = String(abs % MICRO_USD_PER_USD)
    .padStart(6, '0')
    .replace(/0+$/, '');
  return `${negative ? '-' : ''}${whole}${frac ? `.${frac}` : ''}`;
}
