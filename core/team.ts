import type { MicroUsd } from './money.ts';

export type BudgetPeriod = 'monthly' | 'weekly' | 'daily';
/** What happens once a team's budget for the period is spent. */
export type BudgetAction = 'alert' | 'spot-only' | 'hold' | 'stop';
/**
 * A team's standing: ok, past an alert threshold, or restricted by its budget: `hold` (no new
 * work), `spot-only`, or `stop` (spent: running work is checkpointed and requeued, held).
 */
export type BudgetState = 'ok' | 'warn' | 'spot-only' | 'hold' | 'stop';

export interface Budget {
  readonly amountMicroUsd: MicroUsd;
  readonly period: BudgetPeriod;
  readonly action: BudgetAction;
  /** Alert thresholds in percent of the amount, ascending (e.g. 50, 80, 100). */
  readonly alertAtPct: readonly number[];
}

export interface Team {
  readonly id: string;
  /** Share of the fleet's GPUs under contention (weighted fair share). */
  readonly weight: number;
  /** Undefined when the team has never had a valid budget: treated as `hold`, never unlimited. */
  readonly budget?: Budget;
  /** Without a valid amount: the last valid period, action and thresholds, kept for when an amount is tagged. */
  readonly budgetSettings?: Omit<Budget, 'amountMicroUsd'>;
  /** Most GPUs (in whole-GPU equivalents) the team may hold at once; undefined for no cap. */
  readonly maxGpus?: number;
  /** Problems found in the team's budget tags; the last valid values stay in force. */
  readonly tagProblems: readonly string[];
}

export interface TeamSpend {
  readonly team: string;
  /** Period key, e.g. "2026-11", "2026-W48" or "2026-11-30". */
  readonly period: string;
  readonly spentMicroUsd: MicroUsd;
}
