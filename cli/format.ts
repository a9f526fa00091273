import { formatUsd, type MicroUsd } from '../core/money.ts';

/** Aligned table for people: numbers right-aligned, text left-aligned. */
export function table(headers: readonly string[], rows: readonly (readonly (string | number)[])[], maxWidth = MAX_COLUMNS): string {
  const cells = [headers.map(String), ...rows.map((r) => r.map((c) => (typeof c === 'number' ? formatNumber(c) : c)))];
  const numeric = headers.map(
    (_, i) => rows.length > 0 && rows.every((r) => typeof r[i] === 'number' || /^[-$\d.,%× ]+[a-zA-Z%]*$/.test(String(r[i]))),
  );
  const widths = headers.map((_, i) => Math.max(...cells.map((r) => (r[i] ?? '').length)));
  // Too wide for the terminal: the last column (a sentence, as a rule) wraps within what is left of the width.
  const last = headers.length - 1;
  const lastStart = widths.slice(0, last).reduce((a, w) => a + w + 2, 0);
  const wrapLast = last > 0 && !numeric[last] && lastStart + widths[last]! > maxWidth && maxWidth - lastStart >= 20;
  if (wrapLast) widths[last] = maxWidth - lastStart;
  return cells
    .flatMap((r, rowIndex) => {
      const line = (row: readonly string[]) =>
        row
          .map((c, i) => (numeric[i] && rowIndex > 0 ? c.padStart(widths[i]!) : c.padEnd(widths[i]!)))
          .join('  ')
          .trimEnd();
      if (!wrapLast) return [line(r)];
      const [first, ...more] = wrapWords(r[last] ?? '', widths[last]!);
      return [line([...r.slice(0, last), first ?? '']), ...more.map((m) => `${' '.repeat(lastStart)}${m}`)];
    })
    .join('\n');
}

/** The widest a line people read may be. */
export const MAX_COLUMNS = 120;

/** `text` in lines of at most `width` columns, broken at spaces (a word longer than the width keeps its own line). */
export function wrapWords(text: string, width: number): string[] {
  const lines: string[] = [];
  let line = '';
  for (const word of text.split(' ')) {
    const next = line ? `${line} ${word}` : word;
    if (next.length > width && line) {
      lines.push(line);
      line = word;
    } else line = next;
  }
  if (line || lines.length === 0) lines.push(line);
  return lines;
}

/**
 * Text people read, each line longer than {@link MAX_COLUMNS} wrapped at spaces: its continuation
 * lines keep the line's own indentation plus `indent`.
 */
export function paragraph(text: string, indent = '  '): string {
  return text
    .split('\n')
    .flatMap((l) => {
      if (l.length <= MAX_COLUMNS) return [l];
      const lead = /^\s*/.exec(l)![0];
      const [first, ...rest] = wrapWords(l.slice(lead.length), MAX_COLUMNS - lead.length);
      const more = rest.join(' ');
      return [
        `${lead}${first ?? ''}`,
        ...(more ? wrapWords(more, MAX_COLUMNS - lead.length - indent.length).map((r) => `${lead}${indent}${r}`) : []),
      ];
    })
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
