import { BUDGET_TAGS, budgetStatus, teamFromTags } from '../../core/budget.ts';
import { dayStartMs, forecastSpend, periodBounds, periodKey } from '../../core/period.ts';
import { ACTIVE_STATES, usageSoFar } from '../../core/job.ts';
import { teamsInForce } from '../../core/services/snapshot-reader.ts';
import { committedCostMicroUsd } from '../../core/cost-model.ts';
import { DAY_PERIOD_PREFIX, RESERVED_UNUSED_PREFIX } from '../../core/services/accrual.ts';
import type { Team } from '../../core/team.ts';
import { UsageError } from '../../core/errors.ts';
import type { FleetFlags } from '../fleet.ts';
import { money, pct, table } from '../format.ts';
import { print, teamFlag, withFleet, type Io } from './shared.ts';

export interface BudgetFlags extends FleetFlags {
  readonly team?: string;
  readonly json?: boolean;
}

interface BudgetRow {
  team: string;
  period: string;
  spentMicroUsd: number;
  committedMicroUsd: number;
  budgetMicroUsd: number | undefined;
  usedPct: number | undefined;
  forecastMicroUsd: number;
  forecastPct: number | undefined;
  action: string | undefined;
  state: string;
  message: string;
  tagProblems: readonly string[];
  /** Of the spend, what the team's work ran on reserved capacity (billed at the reservations' rates), jobs touching the period. */
  reservedMicroUsd: number;
}

export async function budgetCommand(flags: BudgetFlags, io: Io): Promise<void> {
  const only = teamFlag(flags.team);
  await withFleet(flags, io, async (fleet) => {
    const now = fleet.clock.nowMs();
    // The same reader reconcile uses, with the last valid values it keeps: what is shown is what is enforced.
    const tagSets = await fleet.budgets.readTeamTags();
    const memory = fleet.budgetMemory ? await fleet.budgetMemory.load() : new Map<string, Team>();
    const inForce = teamsInForce(tagSets, memory);
    const byTeam = new Map([...inForce].filter(([id]) => !only || id === only));
    if (only && !byTeam.has(only))
      throw new UsageError(
        `no team ${only}: no resource carries gpu-fleet:team=${only}; teams: ${[...inForce.keys()].join(', ') || '(none)'}`,
      );
    const rows: BudgetRow[] = [];
    // The days each team spent on: its forecast runs from the first one in the period.
    const spendDays = (await fleet.ledger.list()).filter((r) => r.period.startsWith(DAY_PERIOD_PREFIX) && r.spentMicroUsd > 0);
    // What running work will still cost, as reconcile counts it against hold, spot-only and stop.
    const active = await fleet.jobs.listByState(ACTIVE_STATES);
    const committed = committedCostMicroUsd(active, now, fleet.policy, fleet.policy.reconcileIntervalSec);
    // Work on reserved capacity, per team: what its running jobs and those ended in its period ran there
    // (the jobs that ended since the earliest period start shown, not every job there is).
    const earliest = Math.min(now, ...[...byTeam.values()].map((t) => periodBounds(t.budget?.period ?? 'monthly', now).startMs));
    const touching = [...active, ...(await fleet.jobs.listEndedSince(earliest, now))];
    const reservedOf = (teamId: string, startMs: number) =>
      touching
        .filter((j) => j.team === teamId && (j.endedAtMs === undefined || j.endedAtMs >= startMs))
        .reduce((sum, j) => sum + (usageSoFar(j, now)?.reservedMicroUsd ?? 0), 0);
    for (const team of [...byTeam.values()].sort((a, b) => a.id.localeCompare(b.id))) {
      const period = team.budget?.period ?? 'monthly';
      const key = periodKey(period, now);
      const { startMs, endMs } = periodBounds(period, now);
      const spent = (await fleet.ledger.read(team.id, key)).spentMicroUsd;
      const committedMicroUsd = committed.get(team.id) ?? 0;
      const status = budgetStatus(team, spent, committedMicroUsd);
      const firstDay = spendDays
        .filter((r) => r.team === team.id)
        .map((r) => dayStartMs(r.period.slice(DAY_PERIOD_PREFIX.length)))
        .filter((at): at is number => at !== undefined && at >= startMs && at < endMs && at <= now);
      const forecast = forecastSpend(spent, { startMs, endMs }, now, firstDay.length > 0 ? Math.min(...firstDay) : undefined);
      rows.push({
        team: team.id,
        period: key,
        spentMicroUsd: spent,
        committedMicroUsd,
        budgetMicroUsd: team.budget?.amountMicroUsd,
        usedPct: team.budget ? (100 * spent) / team.budget.amountMicroUsd : undefined,
        forecastMicroUsd: forecast,
        forecastPct: team.budget ? (100 * forecast) / team.budget.amountMicroUsd : undefined,
        action: team.budget?.action,
        state: status.state,
        message: status.message,
        tagProblems: team.tagProblems,
        reservedMicroUsd: reservedOf(team.id, startMs),
      });
    }
    // Reservations no machine ran in this month: paid all the same (counted by reconcile under "(reserved unused) cr-…").
    const month = periodKey('monthly', now);
    const unused = (await fleet.ledger.list()).filter(
      (r) => r.team.startsWith(RESERVED_UNUSED_PREFIX) && r.period === month && r.spentMicroUsd > 0,
    );
    print(io, flags.json, rows, () => {
      const out = [
        table(
          ['team', 'period', 'spent', 'on reserved', 'committed', 'budget', 'used', 'forecast', 'state', 'when over'],
          rows.map((r) => [
            r.team,
            r.period,
            money(r.spentMicroUsd),
            r.reservedMicroUsd > 0 ? money(r.reservedMicroUsd) : '-',
            money(r.committedMicroUsd),
            r.budgetMicroUsd !== undefined ? money(r.budgetMicroUsd) : '-',
            r.usedPct !== undefined ? pct(r.usedPct) : '-',
            `${money(r.forecastMicroUsd)}${r.forecastPct !== undefined ? ` (${pct(r.forecastPct)})` : ''}`,
            r.state,
            r.action ?? '-',
          ]),
        ),
      ];
      const problems = rows.flatMap((r) => r.tagProblems.map((p) => `  ${r.team}: ${p}`));
      if (problems.length > 0)
        out.push('', 'Tag problems (a bad tag never lifts a budget: the last valid value, or hold, applies)', ...problems);
      const notes = rows.filter((r) => r.state !== 'ok').map((r) => `  ${r.team}: ${r.message}`);
      if (notes.length > 0) out.push('', ...notes);
      if (unused.length > 0)
        out.push(
          '',
          `Reserved capacity no machine ran in, ${month} (paid all the same; no team's budget carries it)`,
          ...unused.map((u) => `  ${u.team.slice(RESERVED_UNUSED_PREFIX.length)}: ${money(u.spentMicroUsd)}`),
        );
      out.push(
        '',
        "committed: what running work will still cost (each attempt's price times its expected remaining runtime); hold, spot-only and stop count it with the spend",
        "forecast: this period's spend so far, extended to the period's end at the rate since the team's first day of spend in it",
        "budgets are read only from each team's own queue; tags on any other resource are listed as tag problems and change nothing",
      );
      return out.join('\n');
    });
  });
}

export interface BudgetSetFlags extends FleetFlags {
  readonly team?: string;
  readonly usd?: string;
  readonly period?: string;
  readonly action?: string;
  readonly alertAt?: string;
  readonly maxGpus?: string;
  readonly weight?: string;
  readonly json?: boolean;
}

/**
 * Sets a team's budget: `gpu-fleet:*` tags on its queue, checked first as reconcile reads them (a
 * bad value is refused here, and never written). Whether the caller may is the platform's choice:
 * the admin role may always; a team's role only on its own queue, and only where the fleet config
 * lets the team set its own budget (`teams[].setsOwnBudget`). A refusal says which it is.
 */
export async function budgetSetCommand(flags: BudgetSetFlags, io: Io): Promise<void> {
  const team = teamFlag(flags.team, true)!;
  const given: Record<string, string> = {};
  const put = (key: string, value: string | undefined) => {
    if (value !== undefined) given[key] = value.trim();
  };
  put(BUDGET_TAGS.amount, flags.usd);
  put(BUDGET_TAGS.period, flags.period);
  put(BUDGET_TAGS.action, flags.action);
  put(BUDGET_TAGS.alertAt, flags.alertAt);
  put(BUDGET_TAGS.maxGpus, flags.maxGpus);
  put(BUDGET_TAGS.weight, flags.weight);
  if (Object.keys(given).length === 0)
    throw new UsageError('budget set: give at least one of --usd, --period, --action, --alert-at, --max-gpus, --weight');
  // The same reading reconcile makes: a value it would refuse is refused now, before anything is written.
  const problems = teamFromTags(team, given).tagProblems.filter((p) => Object.keys(given).some((k) => p.startsWith(`${k}=`)));
  if (problems.length > 0) throw new UsageError(`budget set --team ${team}: ${problems.join('; ')}`);
  await withFleet(flags, io, async (fleet) => {
    if (fleet.viewer.kind === 'team' && fleet.viewer.team !== team)
      throw new UsageError(
        `budget set --team ${team}: refused: this role is team ${fleet.viewer.team}'s and may never tag another team's queue`,
      );
    await fleet.setBudgetTags(team, given);
  });
  const set = Object.entries(given).map(([k, v]) => `${k}=${v}`);
  print(io, flags.json, { team, tags: given }, () => `team ${team}'s queue tagged: ${set.join(', ')}; reconcile reads it within a minute`);
}
