import { periodBounds, periodKey } from '../period.ts';
import type { PriceQuote } from '../catalog.ts';
import type { Instance } from '../fleet.ts';
import { assignmentMilliGpu, type Job } from '../job.ts';
import { allocate, costForDuration, type MicroUsd } from '../money.ts';
import type { SpendLedger } from '../ports.ts';
import type { Team } from '../team.ts';

/** Spend on capacity that no job held is counted under this name, so idle capacity shows as such. */
export const IDLE_TEAM = '(idle)';

export interface NodeShare {
  readonly instance: Instance;
  readonly priceMicroUsdPerHour: MicroUsd;
  /** Thousandths of a GPU held, per team; the rest of the node's GPUs is idle. */
  readonly milliGpuByTeam: ReadonlyMap<string, number>;
  readonly totalMilliGpu: number;
}

/** Who holds how much of each billed node right now. */
export function nodeShares(
  instances: readonly Instance[],
  activeJobs: readonly Job[],
  prices: ReadonlyMap<string, PriceQuote>,
  gpuCountOf: (instanceType: string) => number,
): NodeShare[] {
  const byNode = new Map<string, Map<string, number>>();
  for (const job of activeJobs) {
    for (const a of job.placement?.nodes ?? []) {
      const held = assignmentMilliGpu(a);
      const m = byNode.get(a.nodeId) ?? new Map<string, number>();
      m.set(job.team, (m.get(job.team) ?? 0) + held);
      byNode.set(a.nodeId, m);
    }
  }
  return instances
    .filter((i) => i.state === 'pending' || i.state === 'running')
    .map((instance) => ({
      instance,
      priceMicroUsdPerHour:
        prices.get(`${instance.cloud}/${instance.zone}/${instance.instanceType}/${instance.capacityType}`)?.priceMicroUsdPerHour ?? 0,
      milliGpuByTeam: byNode.get(instance.id) ?? new Map(),
      totalMilliGpu: Math.max(1, gpuCountOf(instance.instanceType)) * 1000,
    }));
}

/**
 * What each team owes for [fromMs, toMs): every billed node's price over the part of the window
 * it was up, split by the GPU share each team holds; the unheld part goes to {@link IDLE_TEAM}.
 * The split preserves the total exactly.
 */
export function costByTeam(shares: readonly NodeShare[], fromMs: number, toMs: number): Map<string, MicroUsd> {
  const out = new Map<string, MicroUsd>();
  for (const s of shares) {
    const start = Math.max(fromMs, s.instance.launchedAtMs);
    if (toMs <= start) continue;
    const cost = costForDuration(s.priceMicroUsdPerHour, toMs - start);
    const teams = [...s.milliGpuByTeam.keys()].sort();
    const held = teams.map((t) => Math.min(s.milliGpuByTeam.get(t)!, s.totalMilliGpu));
    const heldSum = held.reduce((a, b) => a + b, 0);
    const parts = allocate(cost, [...held, Math.max(0, s.totalMilliGpu - heldSum)]);
    teams.forEach((t, i) => out.set(t, (out.get(t) ?? 0) + parts[i]!));
    out.set(IDLE_TEAM, (out.get(IDLE_TEAM) ?? 0) + parts[teams.length]!);
  }
  return out;
}

/**
 * Counts each team's spend up to `nowMs`, from its ledger cursor, assuming the holdings seen now
 * held since the cursor (one reconcile interval in steady state). Exactly once: the ledger moves
 * each cursor with a conditional write; a lost race is simply left to the winner. A window never
 * reaches back before the current budget period; after a gap (reconciles that timed out, a
 * degraded provider) it reaches back to the cursor, so the machines that ran through the gap are
 * counted in full. Only a team without a cursor yet starts `maxWindowMs` back.
 */
export async function accrueSpend(
  ledger: SpendLedger,
  input: { teams: readonly Team[]; shares: readonly NodeShare[]; nowMs: number; maxWindowMs: number },
): Promise<Map<string, MicroUsd>> {
  const accrued = new Map<string, MicroUsd>();
  const teamIds = [
    ...new Set([...input.teams.map((t) => t.id), ...input.shares.flatMap((s) => [...s.milliGpuByTeam.keys()]), IDLE_TEAM]),
  ].sort();
  const periodOf = new Map(input.teams.map((t) => [t.id, t.budget?.period ?? 'monthly'] as const));
  for (const team of teamIds) {
    const period = periodOf.get(team) ?? 'monthly';
    const key = periodKey(period, input.nowMs);
    const { startMs } = periodBounds(period, input.nowMs);
    const cursor = await ledger.read(team, key);
    const fromMs = Math.max(startMs, cursor.accruedUntilMs ?? input.nowMs - input.maxWindowMs);
    if (fromMs >= input.nowMs) continue;
    const amount = costByTeam(input.shares, fromMs, input.nowMs).get(team) ?? 0;
    const counted = await ledger.accrue({
      team,
      period: key,
      fromMs: cursor.accruedUntilMs ?? fromMs,
      toMs: input.nowMs,
      amountMicroUsd: amount,
    });
    if (counted) accrued.set(team, amount);
    await accrueDay(ledger, team, input.shares, input.nowMs, input.maxWindowMs);
  }
  return accrued;
}

/** Prefix of the ledger's day periods (`day:2026-11-30`): spend per team and UTC day, for reports' trends. */
export const DAY_PERIOD_PREFIX = 'day:';

/** The same spend counted per UTC day (its own cursor, so a day's total is exact and counted once). */
async function accrueDay(
  ledger: SpendLedger,
  team: string,
  shares: readonly NodeShare[],
  nowMs: number,
  maxWindowMs: number,
): Promise<void> {
  const key = `${DAY_PERIOD_PREFIX}${periodKey('daily', nowMs)}`;
  const { startMs } = periodBounds('daily', nowMs);
  const cursor = await ledger.read(team, key);
  const fromMs = Math.max(startMs, cursor.accruedUntilMs ?? nowMs - maxWindowMs);
  if (fromMs >= nowMs) return;
  const amount = costByTeam(shares, fromMs, nowMs).get(team) ?? 0;
  await ledger.accrue({ team, period: key, fromMs: cursor.accruedUntilMs ?? fromMs, toMs: nowMs, amountMicroUsd: amount });
}
