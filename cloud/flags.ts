import { InvalidArgumentError } from 'commander';

/**
 * Parsers for command-line values, for commander's `argParser` (the gpu-fleet CLI, the node
 * agent's commands, the benches). Each returns the value or throws commander's
 * InvalidArgumentError with a message that names the flag, what is allowed and what was given,
 * so a mistake exits with code 2 and says what to write instead.
 */

/** A whole number in [min, max]. */
export function wholeNumber(flag: string, min: number, max: number, unit = ''): (value: string) => number {
  return (value) => {
    const n = Number(value);
    if (!/^-?\d+$/.test(value.trim()) || n < min || n > max) {
      throw new InvalidArgumentError(`${flag} must be a whole number from ${min} to ${max}${unit}, got "${value}"`);
    }
    return n;
  };
}

/** A number (decimals allowed) in [min, max]. */
export function decimalNumber(flag: string, min: number, max: number, unit = ''): (value: string) => number {
  return (value) => {
    const n = Number(value);
    if (value.trim() === '' || !Number.isFinite(n) || n < min || n > max) {
      throw new InvalidArgumentError(`${flag} must be a number from ${min} to ${max}${unit}, got "${value}"`);
    }
    return n;
  };
}

/** One of a fixed set of words. */
export function oneOf<T extends string>(flag: string, allowed: readonly T[]): (value: string) => T {
  return (value) => {
    if (!(allowed as readonly string[]).includes(value))
      throw new InvalidArgumentError(`${flag} must be one of ${allowed.join(', ')}, got "${value}"`);
    return value as T;
  };
}

/** A comma-separated list, each entry checked by `each` (which names the flag in its own errors). */
export function listOf<T>(each: (value: string) => T): (value: string) => T[] {
  return (value) =>
    value
      .split(',')
      .map((v) => v.trim())
      .filter((v) => v !== '')
      .map(each);
}

/** Collects a repeatable flag's values in order. */
export function collect(value: string, previous: readonly string[] = []): string[] {
  return [...previous, value];
}
