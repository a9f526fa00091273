import { formatUsd, parseUsd, type MicroUsd } from './money.ts';
import type { Budget, BudgetAction, BudgetPeriod, BudgetState, Team } from './team.ts';

export interface BudgetStatus {
  readonly state: BudgetState;
  readonly spentMicroUsd: MicroUsd;
  readonly budgetMicroUsd?: MicroUsd;
  /** Thresholds (percent) crossed so far. */
  readonly crossedAlertPct: readonly number[];
  readonly message: string;
}

/**
 * A team's standing from its budget and what it spent this period. A team whose budget was
 * never valid is `hold`: a missing or broken tag never means "unlimited".
 */
export function budgetStatus(team: Team, spentMicroUsd: MicroUsd, committedMicroUsd: MicroUsd = 0): BudgetStatus {
  const budget = team.budget;
  if (!budget) {
    const why = team.tagProblems.length > 0 ? ` (${team.tagProblems.join('; ')})` : '';
    return {
      state: 'hold',
      spentMicroUsd,
      crossedAlertPct: [],
      message: `team ${team.id} has no valid budget${why}; new work is held until one is tagged`,
    };
  }
  // Alerts follow what was spent; the limits of hold, spot-only and stop count what running work will still cost too.
  const crossed = budget.alertAtPct.filter((pct) => spentMicroUsd * 100 >= budget.amountMicroUsd * pct);
  const base = { spentMicroUsd, budgetMicroUsd: budget.amountMicroUsd, crossedAlertPct: crossed };
  if (budget.action === 'alert' && spentMicroUsd >= budget.amountMicroUsd)
    return { ...base, state: 'warn', message: `team ${team.id} spent its ${budget.period} budget; work carries on (action alert)` };
  if (budget.action === 'stop' && spentMicroUsd >= budget.amountMicroUsd)
    return {
      ...base,
      state: 'stop',
      message: `team ${team.id} spent its ${budget.period} budget; its running work is checkpointed and requeued, and no work runs until the next period or a larger budget (action stop)`,
    };
  if (budget.action !== 'alert' && spentMicroUsd + committedMicroUsd >= budget.amountMicroUsd) {
    const state: BudgetState = budget.action === 'spot-only' ? 'spot-only' : 'hold';
    const what =
      budget.action === 'spot-only'
        ? 'only interruptible work on spot (action spot-only)'
        : `no new work is started (action ${budget.action})`;
    const how =
      spentMicroUsd >= budget.amountMicroUsd
        ? `spent its ${budget.period} budget`
        : `has spent ${formatUsd(spentMicroUsd)} of its ${budget.period} budget of ${formatUsd(budget.amountMicroUsd)} and its running work will cost about ${formatUsd(committedMicroUsd)} more`;
    return { ...base, state, message: `team ${team.id} ${how}; ${what}` };
  }
  if (crossed.length > 0) {
    return { ...base, state: 'warn', message: `team ${team.id} passed ${crossed[crossed.length - 1]}% of its ${budget.period} budget` };
  }
  return { ...base, state: 'ok', message: `team ${team.id} is within budget` };
}

/** The tag keys gpu-fleet reads. */
export const BUDGET_TAGS = {
  team: 'gpu-fleet:team',
  amount: 'gpu-fleet:budget-usd',
  period: 'gpu-fleet:budget-period',
  action: 'gpu-fleet:budget-action',
  alertAt: 'gpu-fleet:budget-alert-at',
  maxGpus: 'gpu-fleet:max-gpus',
  weight: 'gpu-fleet:weight',
} as const;

const PERIODS: readonly BudgetPeriod[] = ['monthly', 'weekly', 'daily'];
const ACTIONS: readonly BudgetAction[] = ['alert', 'spot-only', 'hold', 'stop'];
const TEAM_RE = /^[a-z0-9][a-z0-9-]{0,31}$/;

export function isValidTeamId(team: string): boolean {
  return TEAM_RE.test(team);
}

/**
 * Reads a team's budget from its tags. Each invalid value is reported and the previous valid
 * value is kept (from `previous`); a budget that was never valid stays absent, which means
 * `hold`. Unknown `gpu-fleet:` keys are reported too, since they are usually typos.
 */
export function teamFromTags(team: string, tags: Readonly<Record<string, string>>, previous?: Team): Team {
  const problems: string[] = [];
  // The last valid settings, with or without an amount then.
  const prev = previous?.budget;
  const prevSettings = previous?.budget ?? previous?.budgetSettings;
  const get = (key: string): string | undefined => {
    const v = tags[key];
    return v === undefined ? undefined : v.trim();
  };

  let amount = prev?.amountMicroUsd;
  const amountText = get(BUDGET_TAGS.amount);
  if (amountText !== undefined) {
    const parsed = parseUsd(amountText);
    if (parsed === undefined)
      problems.push(
        `${BUDGET_TAGS.amount}="${amountText}" is not a dollar amount (allowed: digits with up to 6 decimals, e.g. "2500" or "2500.50")`,
      );
    else amount = parsed;
  } else if (prev === undefined) {
    problems.push(`${BUDGET_TAGS.amount} is missing`);
  } else {
    // A removed budget tag does not lift the budget: the last valid one applies, and it is reported.
    problems.push(`${BUDGET_TAGS.amount} is missing; the last valid amount (${formatUsd(prev.amountMicroUsd)}) still applies`);
  }

  let period: BudgetPeriod = prevSettings?.period ?? 'monthly';
  const periodText = get(BUDGET_TAGS.period);
  if (periodText !== undefined) {
    if ((PERIODS as readonly string[]).includes(periodText)) period = periodText as BudgetPeriod;
    else problems.push(`${BUDGET_TAGS.period}="${periodText}" is not allowed (allowed: ${PERIODS.join(', ')})`);
  }

  let action: BudgetAction = prevSettings?.action ?? 'hold';
  const actionText = get(BUDGET_TAGS.action);
  if (actionText !== undefined) {
    if ((ACTIONS as readonly string[]).includes(actionText)) action = actionText as BudgetAction;
    else problems.push(`${BUDGET_TAGS.action}="${actionText}" is not allowed (allowed: ${ACTIONS.join(', ')})`);
  }

  let alertAtPct: readonly number[] = prevSettings?.alertAtPct ?? [80, 100];
  const alertText = get(BUDGET_TAGS.alertAt);
  if (alertText !== undefined) {
    // AWS tag values cannot hold commas on most services: "/" (or spaces, "+") separate too.
    const parts = alertText.split(/[,/+\s]+/).filter((p) => p !== '');
    const nums = parts.map((p) => (/^\d{1,3}$/.test(p) ? Number(p) : NaN));
    if (parts.length === 0 || parts.length > 10 || nums.some((n) => !Number.isInteger(n) || n < 1 || n > 100)) {
      problems.push(
        `${BUDGET_TAGS.alertAt}="${alertText}" is not allowed (allowed: up to 10 whole percentages from 1 to 100, separated by "/", e.g. "50/80/100")`,
      );
    } else {
      alertAtPct = [...new Set(nums)].sort((a, b) => a - b);
    }
  }

  let maxGpus = previous?.maxGpus;
  const maxText = get(BUDGET_TAGS.maxGpus);
  if (maxText !== undefined) {
    if (/^\d{1,6}$/.test(maxText)) maxGpus = Number(maxText);
    else problems.push(`${BUDGET_TAGS.maxGpus}="${maxText}" is not allowed (allowed: a whole number of GPUs, 0 to 999999)`);
  } else if (maxGpus !== undefined) {
    // As with the amount, a removed cap is not lifted silently: the last one applies, and it is said.
    problems.push(`${BUDGET_TAGS.maxGpus} is missing; the last cap (${maxGpus} GPUs) still applies (set it to 999999 to lift it)`);
  }

  let weight = previous?.weight ?? 1;
  const weightText = get(BUDGET_TAGS.weight);
  if (weightText !== undefined) {
    if (/^\d{1,4}$/.test(weightText) && Number(weightText) >= 1) weight = Number(weightText);
    else problems.push(`${BUDGET_TAGS.weight}="${weightText}" is not allowed (allowed: a whole number from 1 to 9999)`);
  }

  const known = new Set<string>(Object.values(BUDGET_TAGS));
  for (const key of Object.keys(tags)) {
    if (key.startsWith('gpu-fleet:') && !known.has(key) && key !== 'gpu-fleet:managed' && key !== 'gpu-fleet:capacity-type') {
      problems.push(`unknown tag ${key} (known: ${[...known].join(', ')})`);
    }
  }

  const budget: Budget | undefined = amount === undefined ? undefined : { amountMicroUsd: amount, period, action, alertAtPct };
  return {
    id: team,
    weight,
    tagProblems: problems,
    ...(budget ? { budget } : { budgetSettings: { period, action, alertAtPct } }),
    ...(maxGpus !== undefined ? { maxGpus } : {}),
  };
}
