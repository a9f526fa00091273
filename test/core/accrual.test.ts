import { describe, expect, it } from 'vitest';
import type { Instance, NodeRecord } from '../../core/fleet.ts';
import {
  BYTES_DAY_PERIOD_PREFIX,
  DAY_PERIOD_PREFIX,
  IDLE_TEAM,
  RESERVED_UNUSED_PREFIX,
  accrueSpend,
  costByTeam,
  machineMeters,
  unusedReservationMeters,
  type ByteMeter,
  type MachineMeter,
} from '../../core/services/accrual.ts';
import { byteEventsSince, logRead, saveSizeOf, type ByteLog, type Site } from '../../core/bytes.ts';
import { shippedByteRates } from '../../cloud/prices.ts';
import type { SpendAccrual, SpendLedger } from '../../core/ports.ts';
import { MemorySpendLedger } from '../../cloud/sim/memory-stores.ts';
import { aJob, aReservation, aTeam, T0 } from '../builders.ts';

/** Spend per team: who holds which share of each machine, and how the ledger counts it. */

const H = 3_600_000;
const inst = (id: string, over: Partial<Instance> = {}): Instance => ({
  id,
  groupId: 'g',
  cloud: 'aws',
  region: 'us-east-1',
  zone: 'us-east-1a',
  instanceType: 'p3.16xlarge',
  capacityType: 'on-demand',
  state: 'running',
  launchedAtMs: T0 - 10 * H,
  ...over,
});
const price = (id: string, priceMicroUsdPerHour: number) =>
  [id, { offeringId: id, priceMicroUsdPerHour, onDemandMicroUsdPerHour: priceMicroUsdPerHour, source: 'test' }] as const;
const prices = new Map([price('aws/us-east-1a/p3.16xlarge/on-demand', 8_000_000), price('aws/us-east-1a/p3.16xlarge/spot', 2_400_000)]);

const record = (id: string, over: Partial<NodeRecord> = {}): NodeRecord => ({
  instanceId: id,
  groupId: 'g',
  registeredAtMs: T0 - 10 * H,
  lastHeartbeatAtMs: T0,
  gpus: [],
  healthy: true,
  ...over,
});
const running = (team: string, node: string, gpus: number[], extra: object = {}, placedAtMs = T0 - H) =>
  aJob({
    id: `${team}.${node}.${gpus.join('-')}`,
    team,
    state: 'running',
    placedAtMs,
    placement: { nodes: [{ nodeId: node, gpuIndices: gpus, ...extra }], capacityType: 'on-demand' },
  });
const summary = (ms: readonly MachineMeter[]) =>
  ms.map((m) => [
    m.id,
    m.priceMicroUsdPerHour,
    m.endedAtMs ?? null,
    m.holdings.map((h) => `${h.team}:${h.milliGpu}@${h.fromMs - T0}..${h.toMs === undefined ? '' : h.toMs - T0}`),
  ]);

describe('which machines are on the bill, and who held them when', () => {
  it("adds each team's GPUs on each machine from its placement: whole GPUs, shares and MIG slices", () => {
    const meters = machineMeters({
      instances: [inst('i-1'), inst('i-2', { capacityType: 'spot' }), inst('i-3', { state: 'pending' })],
      records: [],
      jobs: [
        running('nlp', 'i-1', [0, 1, 2]),
        running('nlp', 'i-1', [3], { share: { milliGpu: 250, memoryMiB: 4000 } }),
        running('vision', 'i-1', [4], { mig: { profile: '3g.40gb', startSlice: 0 } }),
        running('vision', 'i-2', [0]),
        aJob({ id: 'nlp.queued', team: 'nlp' }), // no placement: holds nothing
      ],
      prices,
      gpuCountOf: () => 8,
      nowMs: T0,
      heartbeatTimeoutMs: 90_000,
    });
    expect(summary(meters)).toEqual([
      ['i-1', 8_000_000, null, [`nlp:3000@${-H}..`, `nlp:250@${-H}..`, `vision:429@${-H}..`]],
      ['i-2', 2_400_000, null, [`vision:1000@${-H}..`]],
      ['i-3', 8_000_000, null, []],
    ]);
  });

  it("keeps a finished attempt's holding over its span, and counts a job once however often it is given", () => {
    const done = aJob({
      id: 'nlp.done',
      team: 'nlp',
      state: 'succeeded',
      heldAttempts: [
        { attempt: 1, nodes: [{ nodeId: 'i-1', milliGpu: 2000 }], fromMs: T0 - 3 * H, toMs: T0 - 2 * H },
        { attempt: 2, nodes: [{ nodeId: 'i-1', milliGpu: 1000 }], fromMs: T0 - 90_000, toMs: T0 - 30_000 },
      ],
    });
    const meters = machineMeters({
      instances: [inst('i-1')],
      records: [],
      jobs: [done, done],
      prices,
      gpuCountOf: () => 8,
      nowMs: T0,
      heartbeatTimeoutMs: 90_000,
    });
    expect(summary(meters)[0]![3]).toEqual([`nlp:2000@${-3 * H}..${-2 * H}`, 'nlp:1000@-90000..-30000']);
  });

  it('bills every listed state a machine is paid in (a hook holding it included); an ended machine until its end', () => {
    const meters = machineMeters({
      instances: [
        inst('booting', { state: 'pending-wait' }),
        inst('held', { state: 'terminating-wait' }),
        inst('leaving', { state: 'stopping' }),
        inst('gone-unknown', { state: 'terminated' }),
        inst('gone', { state: 'terminated' }),
        inst('odd', { instanceType: 'x9.mega' }),
      ],
      // The cloud said when 'gone' ended; 'gone-unknown' has no record (its agent never registered): nothing more is counted.
      records: [record('gone', { endedAtMs: T0 - 5_000 })],
      jobs: [],
      prices,
      gpuCountOf: (t) => (t === 'x9.mega' ? 0 : 8),
      nowMs: T0,
      heartbeatTimeoutMs: 90_000,
    });
    expect(meters.map((m) => [m.id, m.priceMicroUsdPerHour, m.endedAtMs ?? null, m.totalMilliGpu])).toEqual([
      ['booting', 8_000_000, null, 8000],
      ['gone', 8_000_000, T0 - 5_000, 8000],
      ['held', 8_000_000, null, 8000],
      ['leaving', 8_000_000, null, 8000],
      ['odd', 0, null, 1000],
    ]);
  });

  it('still bills a machine its cloud no longer lists, from the facts stamped on its record: to its end, or (no word yet) now, at most a heartbeat timeout past its agent', () => {
    const meter = { offeringId: 'aws/us-east-1a/p3.16xlarge/spot', priceMicroUsdPerHour: 2_400_000, launchedAtMs: T0 - H, gpuCount: 8 };
    const meters = machineMeters({
      instances: [],
      records: [
        record('ended', { meter, endedAtMs: T0 - 20_000 }),
        record('silent', { meter, lastHeartbeatAtMs: T0 - 300_000 }),
        record('just-gone', { meter, lastHeartbeatAtMs: T0 - 20_000 }),
        record('never-stamped', { endedAtMs: T0 - 1_000 }),
      ],
      jobs: [running('nlp', 'ended', [0, 1])],
      prices,
      gpuCountOf: () => 8,
      nowMs: T0,
      heartbeatTimeoutMs: 90_000,
    });
    expect(summary(meters)).toEqual([
      ['ended', 2_400_000, T0 - 20_000, [`nlp:2000@${-H}..`]],
      ['just-gone', 2_400_000, T0, []],
      ['silent', 2_400_000, T0 - 210_000, []],
    ]);
  });
});

describe('what each team owes for a window', () => {
  const share = (over: Partial<MachineMeter> & { held: Record<string, number> }): MachineMeter => ({
    id: 'i-1',
    priceMicroUsdPerHour: 8_000_000,
    launchedAtMs: T0 - 10 * H,
    totalMilliGpu: 8000,
    holdings: Object.entries(over.held).map(([team, milliGpu]) => ({ team, milliGpu, fromMs: T0 - 10 * H })),
    ...over,
  });

  it("splits each machine's price by the GPU share each team holds, the rest to (idle), exactly", () => {
    const out = costByTeam([share({ held: { nlp: 3000, vision: 1000 } }), share({ id: 'i-2', held: { vision: 2000 } })], T0, T0 + H);
    expect(Object.fromEntries(out)).toEqual({ nlp: 3_000_000, vision: 1_000_000 + 2_000_000, [IDLE_TEAM]: 4_000_000 + 6_000_000 });
  });

  it('counts a machine from its launch only, and not at all in a window it was not up for', () => {
    const late = share({ launchedAtMs: T0 + H / 2, held: { nlp: 8000 } });
    expect(Object.fromEntries(costByTeam([late], T0, T0 + H))).toEqual({ nlp: 4_000_000, [IDLE_TEAM]: 0 });
    expect(costByTeam([late], T0, T0 + H / 2).size).toBe(0);
    expect(costByTeam([late], T0, T0 + H / 4).size).toBe(0);
  });

  it('caps a team at the machine (shares beyond it are not billed twice), and breaks remainder ties by team name', () => {
    expect(Object.fromEntries(costByTeam([share({ held: { nlp: 9000 } })], T0, T0 + H))).toEqual({ nlp: 8_000_000, [IDLE_TEAM]: 0 });
    // 1 µUSD between two equal holders: the first by name gets it.
    const tiny = share({ priceMicroUsdPerHour: 1, totalMilliGpu: 2000, held: { zeta: 1000, alpha: 1000 } });
    expect(Object.fromEntries(costByTeam([tiny], T0, T0 + H))).toEqual({ alpha: 1, zeta: 0, [IDLE_TEAM]: 0 });
  });
});

/** One $8/h machine with 8 GPUs, up for days, held by each team since long before (a MachineMeter source for accrueSpend). */
const meters = (held: Record<string, number>) => async (): Promise<MachineMeter[]> => [
  {
    id: 'i-1',
    priceMicroUsdPerHour: 8_000_000,
    launchedAtMs: T0 - 10 * H,
    totalMilliGpu: 8000,
    holdings: Object.entries(held).map(([team, milliGpu]) => ({ team, milliGpu, fromMs: T0 - 10 * H })),
  },
];

describe('the names spend is kept under', () => {
  it('idle capacity is the team "(idle)", and days are periods "day:YYYY-MM-DD" (reports read both)', async () => {
    const ledger = new MemorySpendLedger();
    const held = meters({ nlp: 4000 });
    await accrueSpend(ledger, { teams: [aTeam('nlp')], machines: held, nowMs: T0 + H, maxWindowMs: 60_000 });
    const rows = (await ledger.list()).map((r) => `${r.team} ${r.period}`).sort();
    expect(rows).toEqual(['(idle) 2026-11', '(idle) day:2026-11-02', 'nlp 2026-11', 'nlp day:2026-11-02']);
  });
});

describe('accrueSpend: counting each team once per window in the ledger', () => {
  const teams = [aTeam('nlp'), aTeam('vision', { budget: { amountMicroUsd: 1, period: 'weekly', action: 'hold', alertAtPct: [100] } })];
  const maxWindowMs = 2 * 60_000;
  const now = T0 + 12 * H; // 2026-11-02, a Monday, noon

  it('counts the window since each cursor, per team in its own budget period, and per day', async () => {
    const ledger = new MemorySpendLedger();
    const first = await accrueSpend(ledger, { teams, machines: meters({ nlp: 4000, vision: 2000 }), nowMs: now, maxWindowMs });
    // No cursor yet: the window reaches back at most maxWindowMs.
    expect(Object.fromEntries(first)).toEqual({ nlp: 133_333, vision: 66_667, [IDLE_TEAM]: 66_667 });
    expect((await ledger.read('nlp', '2026-11')).spentMicroUsd).toBe(133_333);
    expect((await ledger.read('vision', '2026-W45')).spentMicroUsd).toBe(66_667);
    expect((await ledger.read(IDLE_TEAM, '2026-11')).spentMicroUsd).toBe(66_667);
    expect((await ledger.read('nlp', `${DAY_PERIOD_PREFIX}2026-11-02`)).spentMicroUsd).toBe(133_333);
    // A minute later, one minute more.
    const second = await accrueSpend(ledger, { teams, machines: meters({ nlp: 4000, vision: 2000 }), nowMs: now + 60_000, maxWindowMs });
    expect(Object.fromEntries(second)).toEqual({ nlp: 66_667, vision: 33_333, [IDLE_TEAM]: 33_333 });
    expect((await ledger.read('nlp', '2026-11')).spentMicroUsd).toBe(200_000);
    expect((await ledger.read('nlp', '2026-11')).accruedUntilMs).toBe(now + 60_000);
    expect((await ledger.read('nlp', `${DAY_PERIOD_PREFIX}2026-11-02`)).accruedUntilMs).toBe(now + 60_000);
  });

  it('counts teams seen only on the machines, under the monthly period', async () => {
    const ledger = new MemorySpendLedger();
    const out = await accrueSpend(ledger, { teams: [], machines: meters({ speech: 8000 }), nowMs: now, maxWindowMs });
    expect(Object.fromEntries(out)).toEqual({ speech: 266_667, [IDLE_TEAM]: 0 });
    expect((await ledger.read('speech', '2026-11')).spentMicroUsd).toBe(266_667);
  });

  it('adds each team’s checkpoint bytes (their uploads and reads on the path, and storage while held), once', async () => {
    const ledger = new MemorySpendLedger();
    const machine: Site = { cloud: 'aws', region: 'us-east-1', zone: 'us-east-1a' };
    // 100 GB saved 30 s before the reconcile and read back 10 s before it, through a NAT gateway ($0.045/GB each way).
    const log: ByteLog = {
      owner: { jobId: 'speech.asr', team: 'speech', project: 'asr' },
      saves: [{ location: 's3://b/checkpoints/speech.asr/attempt-1/s1/', ...saveSizeOf([100e9]), savedAtMs: now - 30_000, machine }],
    };
    const read = logRead(log, log.saves[0]!.location, { key: '2/i-2', atMs: now - 10_000, machine })!;
    let events = byteEventsSince(read, 0);
    const bytes: ByteMeter = {
      events: async () => events,
      forget: async (ids) => {
        events = events.filter((e) => !ids.includes(e.id));
      },
      teams: async () => ['speech'],
      store: { cloud: 'aws', region: 'us-east-1' },
      layout: { s3Path: 'nat', natZones: ['us-east-1a'] },
      rates: shippedByteRates(),
    };
    const first = await accrueSpend(ledger, { teams, machines: meters({ nlp: 8000 }), bytes, nowMs: now, maxWindowMs });
    // A team seen only in the byte logs is counted too; NAT processing both ways is $9 of it, the requests and 30 s of storage the rest.
    const nat = 2 * 100 * 45_000;
    const requests = Math.round((saveSizeOf([100e9]).writeRequests * 5_000 + saveSizeOf([100e9]).readRequests * 400) / 1000);
    const storage = Math.round((100 * 23_000 * 30) / 3600 / 730);
    expect(first.get('speech')).toBe(nat + requests + storage);
    expect(first.get('nlp')).toBe(266_667);
    expect((await ledger.read('speech', '2026-11')).spentMicroUsd).toBe(nat + requests + storage);
    // Counted apart per day too (for reports): the bytes alone, never added again to the team's spend.
    expect((await ledger.read('speech', `${BYTES_DAY_PERIOD_PREFIX}2026-11-02`)).spentMicroUsd).toBe(nat + requests + storage);
    expect((await ledger.read('nlp', `${BYTES_DAY_PERIOD_PREFIX}2026-11-02`)).spentMicroUsd).toBe(0);
    // Counted, the events leave the index; the team's budget row carries what it holds.
    expect(events).toEqual([]);
    expect((await ledger.read('speech', '2026-11')).carry).toMatchObject({ atMs: now, held: { 'aws:us-east-1': 100e9 } });
    // A minute later: a minute of storage, and nothing moved twice.
    const second = await accrueSpend(ledger, { teams, machines: meters({ nlp: 8000 }), bytes, nowMs: now + 60_000, maxWindowMs });
    expect(second.get('speech')).toBe(Math.round((100 * 23_000 * 60) / 3600 / 730));
  });

  it('never reaches back before the period began, and counts nothing twice at the same instant', async () => {
    const ledger = new MemorySpendLedger();
    const midnight = Date.UTC(2026, 11, 1, 0, 0, 30); // 30 s into a month and a day
    const out = await accrueSpend(ledger, { teams, machines: meters({ nlp: 8000 }), nowMs: midnight, maxWindowMs });
    expect(out.get('nlp')).toBe(66_667); // 30 s, not 2 min
    expect((await ledger.read('nlp', `${DAY_PERIOD_PREFIX}2026-12-01`)).spentMicroUsd).toBe(66_667);
    const again = await accrueSpend(ledger, { teams, machines: meters({ nlp: 8000 }), nowMs: midnight, maxWindowMs });
    expect(again.size).toBe(0);
    expect((await ledger.read('nlp', '2026-12')).spentMicroUsd).toBe(66_667);
  });

  it('ends the old period at its end before counting the new one, so no second falls between two periods', async () => {
    const ledger = new MemorySpendLedger();
    const before = Date.UTC(2026, 10, 30, 23, 59, 30); // 30 s before a new month and day
    await accrueSpend(ledger, { teams, machines: meters({ nlp: 8000 }), nowMs: before, maxWindowMs });
    const after = Date.UTC(2026, 11, 1, 0, 0, 30);
    await accrueSpend(ledger, { teams, machines: meters({ nlp: 8000 }), nowMs: after, maxWindowMs });
    const nov = await ledger.read('nlp', '2026-11');
    expect(nov.accruedUntilMs).toBe(Date.UTC(2026, 11, 1));
    expect(nov.spentMicroUsd).toBe(266_667 + 66_667); // its first 2 min, then the last 30 s of November
    expect(await ledger.read('nlp', '2026-12')).toMatchObject({ spentMicroUsd: 66_667, accruedUntilMs: after });
    expect((await ledger.read('nlp', `${DAY_PERIOD_PREFIX}2026-11-30`)).accruedUntilMs).toBe(Date.UTC(2026, 11, 1));
    expect((await ledger.read('nlp', `${DAY_PERIOD_PREFIX}2026-12-01`)).spentMicroUsd).toBe(66_667);
  });

  it('counts the whole gap since the cursor for a machine that ran through it, and leaves a window another writer counted to it', async () => {
    const ledger = new MemorySpendLedger();
    await accrueSpend(ledger, { teams, machines: meters({ nlp: 8000 }), nowMs: now, maxWindowMs });
    // 30 minutes without a reconcile: the machine's 30 minutes at $8/h are counted, not the last two.
    const afterGap = await accrueSpend(ledger, { teams, machines: meters({ nlp: 8000 }), nowMs: now + 30 * 60_000, maxWindowMs });
    expect(afterGap.get('nlp')).toBe(4_000_000);
    const refusing: SpendLedger = {
      read: (t, p) => ledger.read(t, p),
      list: () => ledger.list(),
      accrue: async (_e: SpendAccrual) => false,
    };
    const lost = await accrueSpend(refusing, { teams, machines: meters({ nlp: 8000 }), nowMs: now + 31 * 60_000, maxWindowMs });
    expect(lost.size).toBe(0);
  });

  it('names the windows it counts from the cursor, so a repeat is recognised', async () => {
    const calls: SpendAccrual[] = [];
    const ledger = new MemorySpendLedger();
    const recording: SpendLedger = {
      read: (t, p) => ledger.read(t, p),
      list: () => ledger.list(),
      accrue: async (e) => {
        calls.push(e);
        return ledger.accrue(e);
      },
    };
    await accrueSpend(recording, { teams: [aTeam('nlp')], machines: meters({ nlp: 8000 }), nowMs: now, maxWindowMs });
    await accrueSpend(recording, { teams: [aTeam('nlp')], machines: meters({ nlp: 8000 }), nowMs: now + 60_000, maxWindowMs });
    // At the same instant again there is no window left to count: no call at all.
    await accrueSpend(recording, { teams: [aTeam('nlp')], machines: meters({ nlp: 8000 }), nowMs: now + 60_000, maxWindowMs });
    const nlp = calls.filter((c) => c.team === 'nlp');
    expect(nlp.map((c) => [c.period, c.fromMs, c.toMs, c.amountMicroUsd])).toEqual([
      ['2026-11', now - maxWindowMs, now, 266_667],
      [`${DAY_PERIOD_PREFIX}2026-11-02`, now - maxWindowMs, now, 266_667],
      ['2026-11', now, now + 60_000, 133_333],
      [`${DAY_PERIOD_PREFIX}2026-11-02`, now, now + 60_000, 133_333],
    ]);
  });
});

describe('unused reserved capacity', () => {
  it('is counted at its rate for the slots no machine runs in, under (reserved unused) <id>, only while the reservation is active', () => {
    const H = 3_600_000;
    const r = aReservation({ availableCount: 3 });
    const running = {
      id: 'i-1',
      groupId: 'g',
      cloud: 'aws' as const,
      region: 'us-east-1',
      zone: 'us-east-1a',
      instanceType: 'g5.xlarge',
      capacityType: 'reserved' as const,
      reservationId: r.id,
      state: 'running' as const,
      launchedAtMs: 0,
    };
    const gone = { ...running, id: 'i-2', state: 'terminated' as const };
    const meters = unusedReservationMeters(new Map([[r.id, r]]), [running, gone], 0);
    expect(meters).toHaveLength(1);
    const cost = costByTeam(meters, 0, H);
    expect(cost.get(`${RESERVED_UNUSED_PREFIX}${r.id}`)).toBe(3 * 1_006_000);
    expect(cost.get(IDLE_TEAM) ?? 0).toBe(0);
    // Fully used, or not active (scheduled, expired): nothing unused to count.
    const four = [0, 1, 2, 3].map((k) => ({ ...running, id: `i-${k}` }));
    expect(unusedReservationMeters(new Map([[r.id, r]]), four, 0)).toEqual([]);
    expect(unusedReservationMeters(new Map([[r.id, { ...r, state: 'scheduled' as const }]]), [], 0)).toEqual([]);
    // A block that ends within the window is counted to its end.
    const block = { ...r, kind: 'capacity-block' as const, endMs: H / 2 };
    expect(costByTeam(unusedReservationMeters(new Map([[r.id, block]]), [], 0), 0, H).get(`${RESERVED_UNUSED_PREFIX}${r.id}`)).toBe(
      2 * 1_006_000,
    );
  });
});
