import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { budgetStatus, teamFromTags } from '../../core/budget.ts';
import { dayKey, dayStartMs, forecastSpend, periodBounds, periodKey, reportPeriod } from '../../core/period.ts';
import { aTeam } from '../builders.ts';

const tags = (extra: Record<string, string> = {}) => ({
  'gpu-fleet:team': 'nlp',
  'gpu-fleet:budget-usd': '2500',
  'gpu-fleet:budget-period': 'monthly',
  'gpu-fleet:budget-action': 'hold',
  'gpu-fleet:budget-alert-at': '50/80/100',
  ...extra,
});

describe('budget periods', () => {
  it('names months, ISO weeks and days in UTC', () => {
    const t = Date.UTC(2026, 10, 30, 23, 59);
    expect(periodKey('monthly', t)).toBe('2026-11');
    expect(periodKey('daily', t)).toBe('2026-11-30');
    expect(periodKey('weekly', t)).toBe('2026-W49');
    expect(periodKey('weekly', Date.UTC(2027, 0, 1))).toBe('2026-W53');
  });

  it('bounds always contain the instant and have the right length', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: Date.UTC(2000, 0, 1), max: Date.UTC(2100, 0, 1) }),
        fc.constantFrom('monthly', 'weekly', 'daily' as const),
        (t, p) => {
          const { startMs, endMs } = periodBounds(p, t);
          expect(startMs).toBeLessThanOrEqual(t);
          expect(endMs).toBeGreaterThan(t);
          expect(periodKey(p, startMs)).toBe(periodKey(p, t));
          expect(periodKey(p, endMs)).not.toBe(periodKey(p, t));
        },
      ),
    );
  });
});

describe('budget forecast', () => {
  const nov = periodBounds('monthly', Date.UTC(2026, 10, 15));
  const day = 86_400_000;

  it('extends the spend at the rate since spending began in the period, not since the period began', () => {
    // $100 spent over one day of a run that began on the 2nd: $100 a day for the 28 days left.
    const now = Date.UTC(2026, 10, 3);
    expect(forecastSpend(100_000_000, nov, now, Date.UTC(2026, 10, 2))).toBe(100_000_000 + 28 * 100_000_000);
    // Without knowing when spending began, the period's start is used (the rate of a whole-month spender).
    expect(forecastSpend(100_000_000, nov, now)).toBe(100_000_000 + 14 * 100_000_000);
    // A first day of spend before the period (or after now) is clamped to the period and to now.
    expect(forecastSpend(100_000_000, nov, now, Date.UTC(2026, 9, 20))).toBe(forecastSpend(100_000_000, nov, now));
  });

  it('is the spend itself when nothing was spent or the period is over, and never below it', () => {
    expect(forecastSpend(0, nov, nov.startMs + 3 * day)).toBe(0);
    expect(forecastSpend(5_000_000, nov, nov.endMs + day)).toBe(5_000_000);
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 1e12 }),
        fc.integer({ min: 0, max: 30 * day }),
        fc.integer({ min: 0, max: 30 * day }),
        (spent, at, since) => forecastSpend(spent, nov, nov.startMs + at, nov.startMs + since) >= spent,
      ),
    );
  });
});

describe('budget tags', () => {
  it('reads a complete set of tags', () => {
    const team = teamFromTags('nlp', tags({ 'gpu-fleet:max-gpus': '64', 'gpu-fleet:weight': '3' }));
    expect(team).toEqual({
      id: 'nlp',
      weight: 3,
      maxGpus: 64,
      tagProblems: [],
      budget: { amountMicroUsd: 2_500_000_000, period: 'monthly', action: 'hold', alertAtPct: [50, 80, 100] },
    });
  });

  it('reports an invalid value and keeps the last valid one', () => {
    const previous = teamFromTags('nlp', tags());
    const broken = teamFromTags('nlp', tags({ 'gpu-fleet:budget-usd': 'lots', 'gpu-fleet:budget-action': 'ignore' }), previous);
    expect(broken.budget).toEqual(previous.budget);
    expect(broken.tagProblems).toEqual([
      'gpu-fleet:budget-usd="lots" is not a dollar amount (allowed: digits with up to 6 decimals, e.g. "2500" or "2500.50")',
      'gpu-fleet:budget-action="ignore" is not allowed (allowed: alert, spot-only, hold, stop)',
    ]);
  });

  it('treats a team whose budget was never valid as hold, never as unlimited', () => {
    const team = teamFromTags('nlp', { 'gpu-fleet:team': 'nlp', 'gpu-fleet:budget-usd': '1e9' });
    expect(team.budget).toBeUndefined();
    expect(budgetStatus(team, 0).state).toBe('hold');
    expect(budgetStatus(teamFromTags('x', {}), 0).state).toBe('hold');
  });

  it('reports unknown gpu-fleet tags, which are usually typos', () => {
    expect(teamFromTags('nlp', tags({ 'gpu-fleet:budget-usd-monthly': '5' })).tagProblems).toEqual([
      expect.stringContaining('unknown tag gpu-fleet:budget-usd-monthly'),
    ]);
  });

  it('no tag value, however hostile, lifts a held team out of hold', () => {
    fc.assert(
      fc.property(
        fc.dictionary(
          fc.constantFrom(
            'gpu-fleet:budget-usd',
            'gpu-fleet:budget-action',
            'gpu-fleet:budget-period',
            'gpu-fleet:budget-alert-at',
            'gpu-fleet:max-gpus',
            'gpu-fleet:weight',
            'gpu-fleet:other',
          ),
          fc.string(),
        ),
        (t) => {
          const team = teamFromTags('nlp', t);
          if (team.budget === undefined) expect(budgetStatus(team, 0).state).toBe('hold');
          else {
            expect(Number.isSafeInteger(team.budget.amountMicroUsd)).toBe(true);
            expect(team.budget.amountMicroUsd).toBeGreaterThanOrEqual(0);
            if (t['gpu-fleet:budget-action'] !== 'alert' && t['gpu-fleet:budget-action'] !== 'spot-only')
              expect(team.budget.action).toBe('hold');
          }
        },
      ),
    );
  });
});

describe('budget status', () => {
  const budget = { amountMicroUsd: 1_000_000_000, period: 'monthly' as const, action: 'spot-only' as const, alertAtPct: [50, 80, 100] };
  it.each([
    [100_000_000, 'ok', []],
    [500_000_000, 'warn', [50]],
    [850_000_000, 'warn', [50, 80]],
    [1_000_000_000, 'spot-only', [50, 80, 100]],
  ])('spent %i µUSD of 1000 USD → %s', (spent, state, crossed) => {
    const s = budgetStatus(aTeam('nlp', { budget }), spent);
    expect(s.state).toBe(state);
    expect(s.crossedAlertPct).toEqual(crossed);
  });

  it('action alert keeps a spent team running with a warning', () => {
    expect(budgetStatus(aTeam('nlp', { budget: { ...budget, action: 'alert' } }), 2_000_000_000).state).toBe('warn');
  });
});

describe('report periods (core/period.ts, shared with budgets)', () => {
  const now = Date.UTC(2026, 10, 18, 15, 30);
  it('reads a month, a day, the last N days and the default month', () => {
    expect(reportPeriod('2026-02', now)).toEqual({ label: '2026-02', startMs: Date.UTC(2026, 1, 1), endMs: Date.UTC(2026, 2, 1) });
    expect(reportPeriod('2026-11-30', now)).toEqual({ label: '2026-11-30', startMs: Date.UTC(2026, 10, 30), endMs: Date.UTC(2026, 11, 1) });
    expect(reportPeriod('last-7d', now)).toEqual({ label: 'last-7d', startMs: Date.UTC(2026, 10, 12), endMs: Date.UTC(2026, 10, 19) });
    expect(reportPeriod(undefined, now)).toEqual({ label: '2026-11', startMs: Date.UTC(2026, 10, 1), endMs: Date.UTC(2026, 11, 1) });
  });

  it('a month report covers exactly the budget month, and a day the ledger day', () => {
    expect(reportPeriod('2026-11', now)).toEqual({ label: periodKey('monthly', now), ...periodBounds('monthly', now) });
    expect(reportPeriod(dayKey(now), now)).toEqual({ label: '2026-11-18', ...periodBounds('daily', now) });
  });

  it('names no period for text that is not one', () => {
    for (const bad of ['2026-13', '2026-00', '2026-02-30', 'last-0d', 'last-1000d', 'yesterday', '2026-1'])
      expect(reportPeriod(bad, now)).toBeUndefined();
    expect(dayStartMs('2026-02-29')).toBeUndefined();
    expect(dayStartMs('2028-02-29')).toBe(Date.UTC(2028, 1, 29));
  });
});
