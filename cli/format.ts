import { formatUsd, type MicroUsd } from '../core/money.ts';

/** Aligned table for people: numbers right-aligned, text left-aligned. */
export function table(headers: readonly string[], rows: readonly (readonly (string | number)[])[]): string {
  const cells = [headers.map(String), ...rows.map((r) => r.map((c) => (typeof c === 'number' ? formatNumber(c) : c)))];
  const numeric = headers.map(
    (_, i) => rows.length > 0 && rows.every((r) => typeof r[i] === 'number' || /^[-$\d.,%× ]+[a-zA-Z%]*$/.test(String(r[i]))),
  );
  const widths = headers.map((_, i) => Math.max(...cells.map((r) => (r[i] ?? '').length)));
  return cells
    .map((r, rowIndex) =>
      r
        .map((c, i) => (numeric[i] && rowIndex > 0 ? c.padStart(widths[i]!) : c.padEnd(widths[i]!)))
        .join('  ')
        .trimEnd(),
    )
    .join('\n');
}

/** Two-column key/value listing. */
export function keyValues(pairs: readonly (readonly [string, string])[]): string {
  const width = Math.max(...pairs.map(([k]) => k.length));
  return pairs.map(([k, v]) => `${k.padEnd(width)}  ${v}`).join('\n');
}

export function formatNumber(n: number): string {
  if (Number.isInteger(n)) return n.toLocaleString('en-US');
  return n.toLocaleString('en-US', { maximumFractionDigits: 2, minimumFractionDigits: 2 });
}

/** GPU-hours in the one number format, to `digits` decimals: "6,501.4 GPU-h". */
export function gpuHours(n: number, digits = 1): string {
  return `${n.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits })} GPU-h`;
}

/** A count with its noun, in the one number format: "1 action", "2,181 jobs". */
export function count(n: number, noun: string, plural = `${noun}s`): string {
  return `${formatNumber(n)} ${n === 1 ? noun : plural}`;
}

export function money(amount: MicroUsd): string {
  return formatUsd(amount);
}

export function duration(seconds: number): string {
  if (!Number.isFinite(seconds)) return '-';
  if (seconds < 60) return `${Math.round(seconds)} s`;
  if (seconds < 3600) return `${(seconds / 60).toFixed(1)} min`;
  if (seconds < 86_400) return `${(seconds / 3600).toFixed(1)} h`;
  return `${(seconds / 86_400).toFixed(1)} d`;
}

export function pct(x: number): string {
  return `${x.toFixed(1)}%`;
}
