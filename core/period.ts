import type { BudgetPeriod } from './team.ts';

/** Hours in a billing month, as AWS and GCP prorate monthly prices (and AWS's Spot Advisor states its monthly rates). */
export const HOURS_PER_MONTH = 730;

/**
 * Calendar periods in UTC, for budgets (a team's budget is per month, ISO week or day), the
 * spend ledger (which also counts per day, for trends) and reports (a month, a day, or the
 * last N days). One place for the date arithmetic, so a budget and a report agree on where a
 * period starts and ends.
 */

export const DAY_MS = 86_400_000;

/** The key of the budget period that contains `atMs` (UTC): "2026-11", "2026-W48", "2026-11-30". */
export function periodKey(period: BudgetPeriod, atMs: number): string {
  const d = new Date(atMs);
  const y = d.getUTCFullYear();
  const m = String(d.getUTCMonth() + 1).padStart(2, '0');
  switch (period) {
    case 'monthly':
      return `${y}-${m}`;
    case 'daily':
      return `${y}-${m}-${String(d.getUTCDate()).padStart(2, '0')}`;
    case 'weekly': {
      const { year, week } = isoWeek(atMs);
      return `${year}-W${String(week).padStart(2, '0')}`;
    }
  }
}

/** Start and end (exclusive) of the period containing `atMs`, in ms. */
export function periodBounds(period: BudgetPeriod, atMs: number): { startMs: number; endMs: number } {
  const d = new Date(atMs);
  const y = d.getUTCFullYear();
  const mo = d.getUTCMonth();
  const day = d.getUTCDate();
  switch (period) {
    case 'monthly':
      return { startMs: Date.UTC(y, mo, 1), endMs: Date.UTC(y, mo + 1, 1) };
    case 'daily':
      return { startMs: Date.UTC(y, mo, day), endMs: Date.UTC(y, mo, day + 1) };
    case 'weekly': {
      const dow = (d.getUTCDay() + 6) % 7; // Monday = 0
      const start = Date.UTC(y, mo, day - dow);
      return { startMs: start, endMs: start + 7 * DAY_MS };
    }
  }
}

function isoWeek(atMs: number): { year: number; week: number } {
  const d = new Date(atMs);
  const target = Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), d.getUTCDate());
  const dow = (new Date(target).getUTCDay() + 6) % 7;
  const thursday = target - dow * DAY_MS + 3 * DAY_MS;
  const year = new Date(thursday).getUTCFullYear();
  const week = 1 + Math.floor((thursday - Date.UTC(year, 0, 1)) / (7 * DAY_MS));
  return { year, week };
}

/** A span of time a report covers: [startMs, endMs), with the words that named it. */
export interface ReportPeriod {
  readonly label: string;
  readonly startMs: number;
  readonly endMs: number;
}

/**
 * The period a report names: a month (`2026-11`), a day (`2026-11-30`), the last N days up to
 * and including today (`last-7d`, N from 1 to 999), or, when nothing is given, the month of
 * `nowMs`. Undefined when the text names no period.
 */
export function reportPeriod(text: string | undefined, nowMs: number): ReportPeriod | undefined {
  if (text === undefined || text === '') {
    const { startMs, endMs } = periodBounds('monthly', nowMs);
    return { label: periodKey('monthly', nowMs), startMs, endMs };
  }
  let m = /^(\d{4})-(\d{2})$/.exec(text);
  if (m) {
    const month = Number(m[2]);
    if (month < 1 || month > 12) return undefined;
    return { label: text, ...periodBounds('monthly', Date.UTC(Number(m[1]), month - 1, 1)) };
  }
  m = /^(\d{4})-(\d{2})-(\d{2})$/.exec(text);
  if (m) {
    const start = dayStartMs(text);
    if (start === undefined) return undefined;
    return { label: text, startMs: start, endMs: start + DAY_MS };
  }
  m = /^last-(\d{1,3})d$/.exec(text);
  if (m && Number(m[1]) >= 1) {
    const endMs = periodBounds('daily', nowMs).endMs;
    return { label: text, startMs: endMs - Number(m[1]) * DAY_MS, endMs };
  }
  return undefined;
}

/** Midnight UTC of a calendar day written `YYYY-MM-DD`, or undefined when there is no such day. */
export function dayStartMs(day: string): number | undefined {
  const m = /^(\d{4})-(\d{2})-(\d{2})$/.exec(day);
  if (!m) return undefined;
  const ms = Date.UTC(Number(m[1]), Number(m[2]) - 1, Number(m[3]));
  return periodKey('daily', ms) === day ? ms : undefined;
}

/** `YYYY-MM-DD` of the UTC day that holds `atMs`. */
export function dayKey(atMs: number): string {
  return periodKey('daily', atMs);
}

/**
 * The spend a period will have at its end if it goes on at the rate seen so far. The rate is
 * measured from when spending began in the period (`spendingSinceMs`, e.g. the first day with
 * spend), not from the period's start: a team, or a simulation, that began mid-period would
 * otherwise have its rate spread over days it did not exist (half the real rate after one day of
 * a run that began on the 2nd).
 */
export function forecastSpend(
  spentMicroUsd: number,
  bounds: { startMs: number; endMs: number },
  nowMs: number,
  spendingSinceMs?: number,
): number {
  const from = Math.min(nowMs, Math.max(bounds.startMs, spendingSinceMs ?? bounds.startMs));
  if (spentMicroUsd <= 0 || nowMs >= bounds.endMs) return spentMicroUsd;
  const elapsed = Math.max(60_000, nowMs - from);
  return Math.round(spentMicroUsd + (spentMicroUsd * (bounds.endMs - nowMs)) / elapsed);
}
