import { describe, expect, it } from 'vitest';
import { BUDGET_TAGS, budgetStatus, isValidTeamId, teamFromTags } from '../../core/budget.ts';
import type { Team } from '../../core/team.ts';

/** What each tag does, value by value: the tests a budget's reader must not get wrong. */

const base = { 'gpu-fleet:team': 'nlp', 'gpu-fleet:budget-usd': '1000' };
const read = (extra: Record<string, string>, previous?: Team) => teamFromTags('nlp', { ...base, ...extra }, previous);

describe('budget status, state by state', () => {
  const team = (action: 'alert' | 'hold' | 'spot-only', alertAtPct = [50, 80, 100]): Team => ({
    id: 'nlp',
    weight: 1,
    tagProblems: [],
    budget: { amountMicroUsd: 1_000_000_000, period: 'weekly', action, alertAtPct },
  });

  it('is ok below every threshold, and says so', () => {
    expect(budgetStatus(team('hold'), 499_999_999)).toEqual({
      state: 'ok',
      spentMicroUsd: 499_999_999,
      budgetMicroUsd: 1_000_000_000,
      crossedAlertPct: [],
      message: 'team nlp is within budget',
    });
  });

  it('warns at each threshold reached, naming the highest one crossed', () => {
    expect(budgetStatus(team('hold'), 500_000_000)).toMatchObject({
      state: 'warn',
      crossedAlertPct: [50],
      message: 'team nlp passed 50% of its weekly budget',
    });
    expect(budgetStatus(team('hold'), 800_000_000)).toMatchObject({
      state: 'warn',
      crossedAlertPct: [50, 80],
      message: 'team nlp passed 80% of its weekly budget',
    });
  });

  it('once spent, does what the action says', () => {
    expect(budgetStatus(team('hold'), 1_000_000_000)).toMatchObject({
      state: 'hold',
      crossedAlertPct: [50, 80, 100],
      message: 'team nlp spent its weekly budget; no new work is started (action hold)',
    });
    expect(budgetStatus(team('spot-only'), 1_200_000_000)).toMatchObject({
      state: 'spot-only',
      message: 'team nlp spent its weekly budget; only interruptible work on spot (action spot-only)',
    });
    expect(budgetStatus(team('alert'), 1_000_000_000)).toMatchObject({
      state: 'warn',
      message: 'team nlp spent its weekly budget; work carries on (action alert)',
    });
    // Spent but no threshold at 100: still spent.
    expect(budgetStatus(team('hold', [50]), 1_000_000_000).state).toBe('hold');
  });

  it('holds a team with no valid budget and quotes its tag problems', () => {
    const none: Team = { id: 'vision', weight: 1, tagProblems: [] };
    expect(budgetStatus(none, 0)).toEqual({
      state: 'hold',
      spentMicroUsd: 0,
      crossedAlertPct: [],
      message: 'team vision has no valid budget; new work is held until one is tagged',
    });
    const broken: Team = { id: 'vision', weight: 1, tagProblems: ['a is wrong', 'b is missing'] };
    expect(budgetStatus(broken, 5).message).toBe(
      'team vision has no valid budget (a is wrong; b is missing); new work is held until one is tagged',
    );
  });
});

describe('each budget tag, value by value', () => {
  it('defaults: monthly, hold, alerts at 80 and 100, weight 1, no GPU cap', () => {
    expect(teamFromTags('nlp', base)).toEqual({
      id: 'nlp',
      weight: 1,
      tagProblems: [],
      budget: { amountMicroUsd: 1_000_000_000, period: 'monthly', action: 'hold', alertAtPct: [80, 100] },
    });
  });

  it('reads the period tag: weekly, daily; an unknown period is reported and the last valid one kept', () => {
    expect(read({ 'gpu-fleet:budget-period': 'weekly' }).budget?.period).toBe('weekly');
    expect(read({ 'gpu-fleet:budget-period': 'daily' }).budget?.period).toBe('daily');
    expect(read({ 'gpu-fleet:budget-period': ' daily ' }).budget?.period).toBe('daily');
    const weekly = read({ 'gpu-fleet:budget-period': 'weekly' });
    const bad = read({ 'gpu-fleet:budget-period': 'fortnightly' }, weekly);
    expect(bad.budget?.period).toBe('weekly');
    expect(bad.tagProblems).toEqual(['gpu-fleet:budget-period="fortnightly" is not allowed (allowed: monthly, weekly, daily)']);
    expect(read({ 'gpu-fleet:budget-period': 'fortnightly' }).budget?.period).toBe('monthly');
    // Without a period tag, the previous period stays.
    expect(read({}, weekly).budget?.period).toBe('weekly');
  });

  it('reads the action tag, keeping the last valid action over a bad one', () => {
    expect(read({ 'gpu-fleet:budget-action': 'alert' }).budget?.action).toBe('alert');
    expect(read({ 'gpu-fleet:budget-action': 'spot-only' }).budget?.action).toBe('spot-only');
    const alert = read({ 'gpu-fleet:budget-action': 'alert' });
    expect(read({}, alert).budget?.action).toBe('alert');
    expect(read({ 'gpu-fleet:budget-action': 'lift' }, alert).budget?.action).toBe('alert');
    expect(read({ 'gpu-fleet:budget-action': 'lift' }).budget?.action).toBe('hold');
  });

  it('reads alert thresholds separated by "/", ",", "+" or spaces, sorted, without repeats', () => {
    expect(read({ 'gpu-fleet:budget-alert-at': '100/50/80' }).budget?.alertAtPct).toEqual([50, 80, 100]);
    expect(read({ 'gpu-fleet:budget-alert-at': '90, 50' }).budget?.alertAtPct).toEqual([50, 90]);
    expect(read({ 'gpu-fleet:budget-alert-at': '25+75' }).budget?.alertAtPct).toEqual([25, 75]);
    expect(read({ 'gpu-fleet:budget-alert-at': '/60//60 ' }).budget?.alertAtPct).toEqual([60]);
    expect(read({ 'gpu-fleet:budget-alert-at': '1/100' }).budget?.alertAtPct).toEqual([1, 100]);
    expect(read({ 'gpu-fleet:budget-alert-at': '1/2/3/4/5/6/7/8/9/10' }).budget?.alertAtPct).toHaveLength(10);
  });

  it('refuses alert thresholds outside 1–100, not whole, more than ten, or none, keeping the last valid ones', () => {
    const kept = read({ 'gpu-fleet:budget-alert-at': '40/90' });
    const problem = (v: string) =>
      `gpu-fleet:budget-alert-at="${v}" is not allowed (allowed: up to 10 whole percentages from 1 to 100, separated by "/", e.g. "50/80/100")`;
    for (const v of ['0/50', '50/101', '50.5', 'x50', '50x', '1/2/3/4/5/6/7/8/9/10/11', '///', '-5', '1000']) {
      const t = read({ 'gpu-fleet:budget-alert-at': v }, kept);
      expect(t.budget?.alertAtPct, v).toEqual([40, 90]);
      expect(t.tagProblems, v).toEqual([problem(v)]);
    }
    expect(read({ 'gpu-fleet:budget-alert-at': '0' }).budget?.alertAtPct).toEqual([80, 100]);
  });

  it('reads the GPU cap as a whole number only, and keeps the last valid cap', () => {
    expect(read({ 'gpu-fleet:max-gpus': '0' }).maxGpus).toBe(0);
    expect(read({ 'gpu-fleet:max-gpus': '999999' }).maxGpus).toBe(999_999);
    const capped = read({ 'gpu-fleet:max-gpus': '16' });
    for (const v of ['eight', '8 GPUs', 'x8', '1000000', '-1', '1.5']) {
      const t = read({ 'gpu-fleet:max-gpus': v }, capped);
      expect(t.maxGpus, v).toBe(16);
      expect(t.tagProblems, v).toEqual([`gpu-fleet:max-gpus="${v}" is not allowed (allowed: a whole number of GPUs, 0 to 999999)`]);
    }
    expect(read({ 'gpu-fleet:max-gpus': 'eight' }).maxGpus).toBeUndefined();
    expect('maxGpus' in read({})).toBe(false);
  });

  it('reads the weight from 1 to 9999; 0, decimals and words are refused and the last weight kept', () => {
    expect(read({ 'gpu-fleet:weight': '1' }).weight).toBe(1);
    expect(read({ 'gpu-fleet:weight': '9999' }).weight).toBe(9999);
    expect(read({ 'gpu-fleet:weight': '25' }).weight).toBe(25);
    const heavy = read({ 'gpu-fleet:weight': '4' });
    for (const v of ['0', '10000', 'x3', '3x', '2.5', 'heavy', '-2']) {
      const t = read({ 'gpu-fleet:weight': v }, heavy);
      expect(t.weight, v).toBe(4);
      expect(t.tagProblems, v).toEqual([`gpu-fleet:weight="${v}" is not allowed (allowed: a whole number from 1 to 9999)`]);
    }
    expect(read({ 'gpu-fleet:weight': '0' }).weight).toBe(1);
    // 1 is a weight of its own, not a fallback: it replaces a heavier one.
    expect(read({ 'gpu-fleet:weight': '1' }, heavy).weight).toBe(1);
  });

  it('says the amount is missing, and keeps the last valid amount when it is removed', () => {
    const none = teamFromTags('nlp', { 'gpu-fleet:team': 'nlp' });
    expect(none.budget).toBeUndefined();
    expect(none.tagProblems).toEqual(['gpu-fleet:budget-usd is missing']);
    const kept = teamFromTags('nlp', { 'gpu-fleet:team': 'nlp' }, read({}));
    expect(kept.budget?.amountMicroUsd).toBe(1_000_000_000);
    expect(kept.tagProblems).toEqual(['gpu-fleet:budget-usd is missing; the last valid amount ($1,000.00) still applies']);
  });

  it('keeps the last GPU cap when its tag is removed, and says so (a removed limit is never lifted silently)', () => {
    const capped = read({ 'gpu-fleet:max-gpus': '8' });
    const kept = teamFromTags('nlp', { 'gpu-fleet:team': 'nlp', 'gpu-fleet:budget-usd': '1000' }, capped);
    expect(kept.maxGpus).toBe(8);
    expect(kept.tagProblems).toEqual(['gpu-fleet:max-gpus is missing; the last cap (8 GPUs) still applies (set it to 999999 to lift it)']);
    expect(teamFromTags('nlp', { 'gpu-fleet:budget-usd': '1000', 'gpu-fleet:max-gpus': '999999' }, capped).maxGpus).toBe(999_999);
  });

  it('trims values before reading them', () => {
    const t = teamFromTags('nlp', { 'gpu-fleet:budget-usd': ' 250.5 ', 'gpu-fleet:budget-action': ' alert ', 'gpu-fleet:weight': ' 2 ' });
    expect(t.budget).toMatchObject({ amountMicroUsd: 250_500_000, action: 'alert' });
    expect(t.weight).toBe(2);
    expect(t.tagProblems).toEqual([]);
  });

  it('reports unknown gpu-fleet keys, but not the group tags gpu-fleet itself sets, nor other tags', () => {
    const t = read({ 'gpu-fleet:managed': 'true', 'gpu-fleet:capacity-type': 'spot', 'team-owner': 'x', 'gpu-fleet:budget': '5' });
    expect(t.tagProblems).toEqual([`unknown tag gpu-fleet:budget (known: ${Object.values(BUDGET_TAGS).join(', ')})`]);
  });
});

describe('team ids', () => {
  it('are lower-case letters, digits and "-", 1 to 32 characters, starting with a letter or digit', () => {
    for (const ok of ['nlp', 'a', '9', 'team-2', 'a'.repeat(32)]) expect(isValidTeamId(ok), ok).toBe(true);
    for (const bad of ['', '-nlp', 'NLP', 'nlp_x', 'a'.repeat(33), 'nlp ', ' nlp', 'x/nlp', 'nlp!'])
      expect(isValidTeamId(bad), bad).toBe(false);
  });
});
