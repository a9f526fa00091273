import {
  priceBytes,
  teamByteUsage,
  type ByteCarry,
  type ByteEvent,
  type ByteRates,
  type NetworkLayout,
  type StoreSites,
} from '../bytes.ts';
import { billedPrice, offeringId, type PriceQuote } from '../catalog.ts';
import type { Instance, NodeRecord } from '../fleet.ts';
import { ACTIVE_STATES, assignmentMilliGpu, type Job } from '../job.ts';
import { allocate, costForDuration, type MicroUsd } from '../money.ts';
import { periodBounds, periodKey } from '../period.ts';
import type { CheckpointHistory, SpendLedger } from '../ports.ts';
import type { BudgetPeriod, Team } from '../team.ts';
import type { Reservation } from '../reservation.ts';

/** Spend on capacity that no job held is counted under this name, so idle capacity shows as such. */
export const IDLE_TEAM = '(idle)';

/** The part of a reservation no machine runs in is paid anyway: it is counted under this name, `(reserved unused) cr-…`. */
export const RESERVED_UNUSED_PREFIX = '(reserved unused) ';

/**
 * The unused part of each reservation as a meter of its own: its rate × the slots no machine of
 * it runs in (as listed now), over its term, held by `(reserved unused) <id>`, so the ledger
 * counts a reservation in full, used (by the teams, through their machines) or not. The count
 * listed now stands for the whole window accrual looks at (one reconcile interval, longer after
 * a gap): an approximation within a machine's launch or end per interval.
 */
export function unusedReservationMeters(
  reservations: ReadonlyMap<string, Reservation> | undefined,
  instances: readonly Instance[],
  sinceMs: number,
): MachineMeter[] {
  if (!reservations || reservations.size === 0) return [];
  const used = new Map<string, number>();
  for (const i of instances)
    if (i.reservationId !== undefined && BILLED.has(i.state)) used.set(i.reservationId, (used.get(i.reservationId) ?? 0) + 1);
  const out: MachineMeter[] = [];
  for (const r of [...reservations.values()].sort((a, b) => (a.id < b.id ? -1 : 1))) {
    if (r.state !== 'active') continue;
    const unused = Math.max(0, r.totalCount - (used.get(r.id) ?? 0));
    if (unused === 0) continue;
    const fromMs = Math.max(sinceMs, r.startMs ?? sinceMs);
    out.push({
      id: `reservation/${r.id}`,
      priceMicroUsdPerHour: r.priceMicroUsdPerHour * unused,
      launchedAtMs: fromMs,
      ...(r.endMs !== undefined ? { endedAtMs: r.endMs } : {}),
      totalMilliGpu: 1000,
      holdings: [{ team: `${RESERVED_UNUSED_PREFIX}${r.id}`, milliGpu: 1000, fromMs }],
    });
  }
  return out;
}

/** One attempt's hold on part of a machine: its team's GPUs there, from placement to its end (open while it runs). */
export interface Holding {
  readonly team: string;
  readonly milliGpu: number;
  readonly fromMs: number;
  readonly toMs?: number;
}

/**
 * One machine's bill and who held it: its price from launch to its end (open while it runs), and
 * every attempt's holding on it over the time accrual looks at.
 */
export interface MachineMeter {
  readonly id: string;
  readonly priceMicroUsdPerHour: MicroUsd;
  readonly launchedAtMs: number;
  readonly endedAtMs?: number;
  readonly totalMilliGpu: number;
  readonly holdings: readonly Holding[];
}

/** The states in which a listed machine is on the bill (booting, in service, held by a hook, stopping). */
const BILLED: ReadonlySet<Instance['state']> = new Set(['pending', 'pending-wait', 'running', 'terminating-wait', 'stopping']);

/**
 * Every machine's bill and holdings, as the cloud and the node records say: machines the cloud
 * lists (their price now), and machines it no longer lists whose record has their billing facts
 * (stamped when they were listed), ended when the cloud's state change said (see endOf without one). Holdings come from the jobs given: each active attempt from its
 * placement, and each finished attempt the job keeps (core/job.ts `heldAttempts`) over its span.
 */
export function machineMeters(input: {
  instances: readonly Instance[];
  records: readonly NodeRecord[];
  jobs: readonly Job[];
  prices: ReadonlyMap<string, PriceQuote>;
  gpuCountOf: (instanceType: string) => number;
  nowMs: number;
  /** How long an agent may be silent before its machine counts as gone (the policy's heartbeat timeout). */
  heartbeatTimeoutMs: number;
}): MachineMeter[] {
  const holdings = new Map<string, Holding[]>();
  const hold = (nodeId: string, h: Holding) => {
    const list = holdings.get(nodeId);
    if (list) list.push(h);
    else holdings.set(nodeId, [h]);
  };
  const seenJobs = new Set<string>();
  for (const job of input.jobs) {
    if (seenJobs.has(job.id)) continue;
    seenJobs.add(job.id);
    const fromMs = job.placedAtMs ?? job.startedAtMs;
    if (ACTIVE_STATES.includes(job.state) && job.placement && fromMs !== undefined)
      for (const a of job.placement.nodes) hold(a.nodeId, { team: job.team, milliGpu: assignmentMilliGpu(a), fromMs });
    for (const h of job.heldAttempts ?? [])
      for (const n of h.nodes) hold(n.nodeId, { team: job.team, milliGpu: n.milliGpu, fromMs: h.fromMs, toMs: h.toMs });
  }
  const records = new Map(input.records.map((r) => [r.instanceId, r]));
  const out: MachineMeter[] = [];
  const listed = new Set<string>();
  for (const i of input.instances) {
    listed.add(i.id);
    const record = records.get(i.id);
    const quote = input.prices.get(offeringId(i));
    const price = (quote ? billedPrice(quote) : undefined) ?? record?.meter?.priceMicroUsdPerHour ?? 0;
    const totalMilliGpu = Math.max(1, input.gpuCountOf(i.instanceType)) * 1000;
    if (BILLED.has(i.state)) {
      out.push({
        id: i.id,
        priceMicroUsdPerHour: price,
        launchedAtMs: i.launchedAtMs,
        ...(record?.endedAtMs !== undefined ? { endedAtMs: record.endedAtMs } : {}),
        totalMilliGpu,
        holdings: holdings.get(i.id) ?? [],
      });
    } else if (record) {
      out.push({
        id: i.id,
        priceMicroUsdPerHour: price,
        launchedAtMs: i.launchedAtMs,
        endedAtMs: endOf(record, i.launchedAtMs, input.nowMs, input.heartbeatTimeoutMs),
        totalMilliGpu,
        holdings: holdings.get(i.id) ?? [],
      });
    }
  }
  for (const r of input.records) {
    if (listed.has(r.instanceId) || !r.meter) continue;
    out.push({
      id: r.instanceId,
      priceMicroUsdPerHour: r.meter.priceMicroUsdPerHour,
      launchedAtMs: r.meter.launchedAtMs,
      endedAtMs: endOf(r, r.meter.launchedAtMs, input.nowMs, input.heartbeatTimeoutMs),
      totalMilliGpu: Math.max(1, r.meter.gpuCount) * 1000,
      holdings: holdings.get(r.instanceId) ?? [],
    });
  }
  return out.sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
}

/**
 * When a machine the cloud no longer bills ended: as its cloud said; or, with no word yet (the
 * state change is usually seconds behind), now, but never later than its agent's last heartbeat
 * plus the heartbeat timeout (a machine whose agent is silent that long is counted as gone then).
 * So a late state change costs nothing when it lands before the next reconcile, and a lost one
 * overcounts a machine by at most the heartbeat timeout.
 */
function endOf(record: NodeRecord, launchedAtMs: number, nowMs: number, silentMs: number): number {
  return record.endedAtMs ?? Math.max(launchedAtMs, Math.min(nowMs, record.lastHeartbeatAtMs + silentMs));
}

/**
 * What each team owes for [fromMs, toMs): every machine's price over the part of the window it
 * was up, split, moment by moment, by the GPU share each team's attempts held then; the unheld
 * part goes to {@link IDLE_TEAM}. A machine's cost over the window is priced once and cut at the
 * moments its holdings change, so the parts add up to it exactly.
 */
export function costByTeam(machines: readonly MachineMeter[], fromMs: number, toMs: number): Map<string, MicroUsd> {
  const out = new Map<string, MicroUsd>();
  const add = (team: string, amount: MicroUsd) => out.set(team, (out.get(team) ?? 0) + amount);
  for (const m of machines) {
    const start = Math.max(fromMs, m.launchedAtMs);
    const end = Math.min(toMs, m.endedAtMs ?? toMs);
    if (end <= start) continue;
    const inWindow = m.holdings.filter((h) => h.fromMs < end && (h.toMs ?? end) > start);
    const cuts = new Set<number>([start, end]);
    for (const h of inWindow) {
      if (h.fromMs > start) cuts.add(h.fromMs);
      if (h.toMs !== undefined && h.toMs < end) cuts.add(h.toMs);
    }
    const times = [...cuts].sort((a, b) => a - b);
    let priced = 0;
    for (let k = 1; k < times.length; k++) {
      const a = times[k - 1]!;
      const b = times[k]!;
      const upTo = costForDuration(m.priceMicroUsdPerHour, b - start);
      const cost = upTo - priced;
      priced = upTo;
      const held = new Map<string, number>();
      for (const h of inWindow) if (h.fromMs <= a && (h.toMs ?? end) >= b) held.set(h.team, (held.get(h.team) ?? 0) + h.milliGpu);
      const teams = [...held.keys()].sort();
      const weights = teams.map((t) => Math.min(held.get(t)!, m.totalMilliGpu));
      const heldSum = weights.reduce((x, y) => x + y, 0);
      const parts = allocate(cost, [...weights, Math.max(0, m.totalMilliGpu - heldSum)]);
      teams.forEach((t, i) => add(t, parts[i]!));
      add(IDLE_TEAM, parts[teams.length]!);
    }
  }
  return out;
}

/**
 * Where the checkpoint bytes' bill comes from: the checkpoint index's byte events not counted yet
 * (core/ports.ts `CheckpointHistory.byteEvents`), and what to forget once counted; the stores'
 * sites, the deployment's network path and the byte price table. What each team holds between
 * events is carried in its budget row (core/bytes.ts `ByteCarry`), so a count reads only what
 * changed since the last one, whatever the number of saves held.
 */
export interface ByteMeter extends StoreSites {
  readonly events: () => Promise<readonly ByteEvent[]>;
  readonly forget: (ids: readonly string[]) => Promise<void>;
  /** Every team that may hold bytes (its budget row carries them): counted each time, with events or without. */
  readonly teams: () => Promise<readonly string[]>;
  readonly layout: NetworkLayout;
  readonly rates: ByteRates;
}

/** The byte meter over a checkpoint index's events: what a deployment's reconcile and the simulation both count from. */
export function byteMeterOf(
  history: Pick<CheckpointHistory, 'byteEvents' | 'forgetByteEvents' | 'byteTeams'>,
  where: StoreSites & { readonly layout: NetworkLayout; readonly rates: ByteRates },
): ByteMeter {
  return {
    ...where,
    events: () => history.byteEvents(),
    forget: (ids) => history.forgetByteEvents(ids),
    teams: () => history.byteTeams(),
  };
}

/** Prefix of the ledger's day periods (`day:2026-11-30`): spend per team and UTC day, for reports' trends. */
export const DAY_PERIOD_PREFIX = 'day:';
/**
 * Prefix of the ledger's byte day periods (`bytes:day:2026-11-30`): of a team's spend that day, its
 * checkpoint bytes (storage, requests, transfer), for reports. Counted apart, never added again to
 * the team's spend: its day and budget periods hold it already.
 */
export const BYTES_DAY_PERIOD_PREFIX = 'bytes:day:';

/** Whether a ledger row's period is a team's budget period (what its spend and budget hold), not one of the day rows beside it. */
export function isBudgetPeriod(period: string): boolean {
  return !period.startsWith(DAY_PERIOD_PREFIX) && !period.startsWith(BYTES_DAY_PERIOD_PREFIX);
}

/** One ledger window to count: a team's period (its budget's, or a UTC day) from its cursor to `toMs`. */
interface Window {
  readonly team: string;
  readonly key: string;
  readonly cursorMs: number | undefined;
  readonly fromMs: number;
  readonly toMs: number;
  /** The team's byte carry as its budget row holds it (on the budget period's windows only). */
  readonly carry?: ByteCarry;
}

/**
 * Counts each team's spend up to `nowMs`, from its ledger cursor, by the holdings over the window
 * (not by what runs at the moment of the reconcile): an attempt that started and ended between two
 * reconciles is charged to its team, a machine's minutes after its last listing up to its end are
 * charged too. Exactly once: the ledger moves each cursor with a conditional write; a lost race
 * is simply left to the winner. After a gap (reconciles that timed out, a degraded provider) a
 * window reaches back to the cursor, so the machines that ran through the gap are counted in full;
 * only a team without a cursor yet starts `maxWindowMs` back. A new period first closes the old
 * one up to its end, so no minute falls between two periods.
 *
 * `machines(sinceMs)` gives the meters over [sinceMs, nowMs) (the caller reads the jobs that
 * ended since then); it is asked once, for the oldest window (again if a team seen only in the
 * holdings has an older cursor). `bytes`, when given, adds each team's checkpoint bytes over each
 * window (storage while held, uploads and reads on the deployment's path: core/bytes.ts
 * `teamByteUsage`) from the byte events since the last count and what the team's budget row
 * carries, so budgets count them; the events are forgotten once the carry that charged them is
 * written.
 */
export async function accrueSpend(
  ledger: SpendLedger,
  input: {
    teams: readonly Team[];
    nowMs: number;
    maxWindowMs: number;
    machines: (sinceMs: number) => Promise<readonly MachineMeter[]>;
    bytes?: ByteMeter;
  },
): Promise<Map<string, MicroUsd>> {
  const periodOf = new Map(input.teams.map((t) => [t.id, t.budget?.period ?? 'monthly'] as const));
  const windowsOf = async (team: string): Promise<Window[]> => {
    const period = periodOf.get(team) ?? 'monthly';
    return [
      ...(await windowsFor(ledger, team, period, '', input.nowMs, input.maxWindowMs)),
      ...(await windowsFor(ledger, team, 'daily', DAY_PERIOD_PREFIX, input.nowMs, input.maxWindowMs)),
      ...(input.bytes ? await windowsFor(ledger, team, 'daily', BYTES_DAY_PERIOD_PREFIX, input.nowMs, input.maxWindowMs) : []),
    ];
  };
  const known = [...new Set([...input.teams.map((t) => t.id), IDLE_TEAM])].sort();
  const windows: Window[] = [];
  for (const team of known) windows.push(...(await windowsOf(team)));
  const oldest = (ws: readonly Window[]) => Math.min(input.nowMs, ...ws.map((w) => w.fromMs));
  let sinceMs = oldest(windows);
  let machines = await input.machines(sinceMs);
  const events = input.bytes ? await input.bytes.events() : [];
  const byteTeams = input.bytes ? await input.bytes.teams() : [];
  const extra = [...new Set([...machines.flatMap((m) => m.holdings.map((h) => h.team)), ...events.map((e) => e.owner.team), ...byteTeams])]
    .filter((t) => !known.includes(t))
    .sort();
  for (const team of extra) windows.push(...(await windowsOf(team)));
  if (oldest(windows) < sinceMs) {
    sinceMs = oldest(windows);
    machines = await input.machines(sinceMs);
  }
  const costs = new Map<string, Map<string, MicroUsd>>();
  const costOver = (fromMs: number, toMs: number) => {
    const k = `${fromMs}/${toMs}`;
    let c = costs.get(k);
    if (!c) costs.set(k, (c = costByTeam(machines, fromMs, toMs)));
    return c;
  };
  // Each team's bytes, from what its budget row carries and its events since: per window, and the carry to write with its budget row.
  const byteAmount = new Map<Window, MicroUsd>();
  const bytesOf = new Map<string, { next: ByteCarry; ids: string[] }>();
  if (input.bytes) {
    for (const team of new Set(windows.map((w) => w.team))) {
      const own = windows.filter((w) => w.team === team);
      const carry = own.find((w) => w.carry)?.carry;
      const mine = events.filter((e) => e.owner.team === team);
      if (!carry && mine.length === 0) continue;
      const out = teamByteUsage({ carry, events: mine, windows: own, nowMs: input.nowMs, where: input.bytes });
      own.forEach((w, i) => byteAmount.set(w, priceBytes(out.usage[i]!, input.bytes!.rates).totalMicroUsd));
      bytesOf.set(team, { next: out.next, ids: [...out.fresh.map((e) => e.id), ...out.repeats] });
    }
  }
  const accrued = new Map<string, MicroUsd>();
  const carried = new Set<string>();
  for (const w of windows) {
    const bytes = byteAmount.get(w) ?? 0;
    const amount = w.key.startsWith(BYTES_DAY_PERIOD_PREFIX) ? bytes : (costOver(w.fromMs, w.toMs).get(w.team) ?? 0) + bytes;
    // The carry goes with the team's budget row up to now: the bytes it counted and the events it charged, in one write.
    const carry = isBudgetPeriod(w.key) && w.toMs === input.nowMs ? bytesOf.get(w.team)?.next : undefined;
    const counted = await ledger.accrue({
      team: w.team,
      period: w.key,
      fromMs: w.cursorMs ?? w.fromMs,
      toMs: w.toMs,
      amountMicroUsd: amount,
      ...(carry ? { carry } : {}),
    });
    if (counted && carry) carried.add(w.team);
    if (counted && isBudgetPeriod(w.key) && w.toMs === input.nowMs) accrued.set(w.team, (accrued.get(w.team) ?? 0) + amount);
  }
  // The events now charged (or seen charged before) leave the index; a team whose row another writer moved keeps them for the next count.
  const done = [...carried].flatMap((t) => bytesOf.get(t)!.ids);
  if (input.bytes && done.length > 0) await input.bytes.forget(done);
  return accrued;
}

/**
 * The windows one team's period needs counted: from its cursor in the current period to now;
 * and, at the start of a period (no cursor yet), the previous period's rest up to its end.
 */
async function windowsFor(
  ledger: SpendLedger,
  team: string,
  period: BudgetPeriod,
  prefix: string,
  nowMs: number,
  maxWindowMs: number,
): Promise<Window[]> {
  const key = `${prefix}${periodKey(period, nowMs)}`;
  const { startMs } = periodBounds(period, nowMs);
  const cursor = await ledger.read(team, key);
  const out: Window[] = [];
  // The budget row carries the team's bytes: this period's row, else (before its first count) the last period's.
  let carry = prefix === '' ? cursor.carry : undefined;
  let fromMs = Math.max(startMs, cursor.accruedUntilMs ?? nowMs - maxWindowMs);
  if (cursor.accruedUntilMs === undefined) {
    // Nothing counted in this period yet: if the previous one was being counted, end it first and start this one at its start.
    const prevKey = `${prefix}${periodKey(period, startMs - 1)}`;
    const prev = await ledger.read(team, prevKey);
    if (prefix === '') carry ??= prev.carry;
    if (prev.accruedUntilMs !== undefined) {
      if (prev.accruedUntilMs < startMs)
        out.push({ team, key: prevKey, cursorMs: prev.accruedUntilMs, fromMs: prev.accruedUntilMs, toMs: startMs });
      fromMs = startMs;
    }
  }
  if (fromMs < nowMs) out.push({ team, key, cursorMs: cursor.accruedUntilMs, fromMs, toMs: nowMs });
  return carry ? out.map((w) => ({ ...w, carry })) : out;
}
