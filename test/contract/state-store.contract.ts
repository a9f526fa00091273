import { describe, expect, it } from 'vitest';
import type { NodeRecord } from '../../core/fleet.ts';
import type { PlanAction } from '../../core/plan.ts';
import type {
  CheckpointHistory,
  CheckpointStore,
  FamilyRunStore,
  DecisionLog,
  DecisionRecord,
  LeaseStore,
  NodeStore,
  PlanJournal,
  PoolHistory,
  SpendLedger,
} from '../../core/ports.ts';
import { aRightsizeRun, T0 } from '../builders.ts';
import type { CheckpointRef, SaveMeter } from '../../core/job.ts';
import { saveSizeOf } from '../../core/bytes.ts';
import { sharedEventMarks, permutations } from '../support/shared-events.ts';

const record = (id: string, at = T0): NodeRecord => ({
  instanceId: id,
  groupId: 'g',
  registeredAtMs: at,
  lastHeartbeatAtMs: at,
  healthy: true,
  gpus: [{ index: 0, model: 'A10G', memoryMiB: 24_576 }],
});

export function nodeStoreContract(name: string, make: () => Promise<NodeStore>): void {
  describe(`NodeStore contract: ${name}`, () => {
    it('registers idempotently and keeps the first registration time', async () => {
      const s = await make();
      await s.register(record('i-1'));
      await s.register(record('i-1', T0 + 5000));
      expect(await s.get('i-1')).toMatchObject({ registeredAtMs: T0, lastHeartbeatAtMs: T0 + 5000 });
      expect(await s.get('i-2')).toBeUndefined();
    });

    it('takes heartbeats for known nodes only and never moves them backwards', async () => {
      const s = await make();
      expect(await s.heartbeat('i-1', T0)).toBe(false);
      await s.register(record('i-1'));
      expect(await s.heartbeat('i-1', T0 + 15_000, { healthy: false, problem: 'nvidia-smi failed' })).toBe(true);
      await s.heartbeat('i-1', T0 + 5_000);
      expect(await s.get('i-1')).toMatchObject({ lastHeartbeatAtMs: T0 + 15_000, healthy: false, healthProblem: 'nvidia-smi failed' });
    });

    it('merges draining marks from the shared events in every order: the earliest deadline and the lifecycle hook win', async () => {
      const expected = {
        sinceMs: T0,
        reason: 'spot interruption warning',
        deadlineMs: T0 + 60_000 + 120_000 - 20_000,
        lifecycle: { groupId: 'g', hookName: 'cluster-termination-handler', token: '0befcbdb-6ecd-498a-9ff7-ae9b54447cd6' },
      };
      for (const order of permutations(sharedEventMarks())) {
        const s = await make();
        await s.register(record('i-1'));
        let tightest = Number.POSITIVE_INFINITY;
        for (const mark of [...order, order[0]!]) {
          const after = (await s.markDraining('i-1', mark)).draining!;
          // Never loosened on the way: each notice can only bring the deadline forward.
          expect(after.deadlineMs).toBeLessThanOrEqual(tightest);
          tightest = after.deadlineMs;
        }
        expect((await s.get('i-1'))!.draining, order.map((m) => m.reason).join(' → ')).toEqual(expected);
      }
    });

    it('a later hook with its token replaces one without; a later deadline changes nothing; an unseen node gets a record', async () => {
      const s = await make();
      await s.register(record('i-1'));
      const first = await s.markDraining('i-1', { sinceMs: T0, reason: 'spot interruption', deadlineMs: T0 + 120_000 });
      const second = await s.markDraining('i-1', { sinceMs: T0 + 10, reason: 'rebalance', deadlineMs: T0 + 999_999 });
      expect(second.draining).toEqual(first.draining);
      await s.markDraining('i-1', {
        sinceMs: T0 + 20,
        reason: 'hook',
        deadlineMs: T0 + 300_000,
        lifecycle: { groupId: 'g', hookName: 'h' },
      });
      await s.markDraining('i-1', {
        sinceMs: T0 + 30,
        reason: 'hook',
        deadlineMs: T0 + 300_000,
        lifecycle: { groupId: 'g', hookName: 'h', token: 't-1' },
      });
      expect((await s.get('i-1'))!.draining).toEqual({ ...first.draining, lifecycle: { groupId: 'g', hookName: 'h', token: 't-1' } });
      await s.register(record('i-1', T0 + 20_000));
      expect((await s.get('i-1'))!.draining?.lifecycle?.token).toBe('t-1');
      const unknown = await s.markDraining('i-9', { sinceMs: T0, reason: 'terminated', deadlineMs: T0, groupId: 'g' });
      expect(unknown.draining?.reason).toBe('terminated');
      expect((await s.get('i-9'))!.draining?.reason).toBe('terminated');
    });

    it('concurrent notices all land: the mark ends as tight as the tightest', async () => {
      const s = await make();
      await s.register(record('i-1'));
      await Promise.all(
        [300, 120, 900, 60, 600].map((sec) => s.markDraining('i-1', { sinceMs: T0, reason: `in ${sec} s`, deadlineMs: T0 + sec * 1000 })),
      );
      expect((await s.get('i-1'))!.draining).toMatchObject({ deadlineMs: T0 + 60_000, reason: 'in 60 s' });
    });

    it('sets and clears idle time, lists, and forgets nodes idempotently', async () => {
      const s = await make();
      await s.register(record('i-2'));
      await s.register(record('i-1'));
      await s.setIdleSince('i-1', T0 + 1);
      expect((await s.get('i-1'))!.idleSinceMs).toBe(T0 + 1);
      await s.setIdleSince('i-1', undefined);
      expect((await s.get('i-1'))!.idleSinceMs).toBeUndefined();
      expect((await s.list()).map((r) => r.instanceId)).toEqual(['i-1', 'i-2']);
      await s.remove('i-1');
      await s.remove('i-1');
      expect((await s.list()).map((r) => r.instanceId)).toEqual(['i-2']);
    });

    it('keeps a work list per node: newer attempts replace older pointers, never the other way', async () => {
      const s = await make();
      expect(await s.assign('i-1', 'nlp.a', 1)).toBe(false); // no record: nothing written
      expect(await s.get('i-1')).toBeUndefined();
      await s.register(record('i-1'));
      expect(await s.assign('i-1', 'nlp.a', 1)).toBe(true);
      expect(await s.assign('i-1', 'nlp.a', 1)).toBe(true); // repeat
      expect(await s.assign('i-1', 'nlp.b/x:y', 2)).toBe(true); // any characters in an id
      expect((await s.get('i-1'))!.assigned).toEqual({ 'nlp.a': 1, 'nlp.b/x:y': 2 });
      await s.assign('i-1', 'nlp.a', 3);
      await s.assign('i-1', 'nlp.a', 2); // late, older: ignored
      expect((await s.get('i-1'))!.assigned!['nlp.a']).toBe(3);
      await s.unassign('i-1', 'nlp.a', 2); // an older attempt cannot drop the newer pointer
      expect((await s.get('i-1'))!.assigned!['nlp.a']).toBe(3);
      await s.unassign('i-1', 'nlp.a', 3);
      await s.unassign('i-1', 'nlp.a', 3);
      await s.unassign('i-9', 'nlp.a', 3);
      expect((await s.get('i-1'))!.assigned).toEqual({ 'nlp.b/x:y': 2 });
    });

    it("sets a node's images to pull ahead, keeps them across re-registration and heartbeats, and clears them with an empty list", async () => {
      const s = await make();
      expect(await s.setPrefetch('i-1', ['vllm/vllm-openai:v0.6.3'])).toBe(false); // no record: nothing written
      expect(await s.get('i-1')).toBeUndefined();
      await s.register(record('i-1'));
      expect((await s.get('i-1'))!.prefetchImages).toBeUndefined();
      expect(await s.setPrefetch('i-1', ['nvcr.io/nvidia/tritonserver:24.08-py3', 'vllm/vllm-openai:v0.6.3'])).toBe(true);
      await s.register(record('i-1', T0 + 1000));
      await s.heartbeat('i-1', T0 + 2000);
      expect((await s.get('i-1'))!.prefetchImages).toEqual(['nvcr.io/nvidia/tritonserver:24.08-py3', 'vllm/vllm-openai:v0.6.3']);
      expect(await s.setPrefetch('i-1', [])).toBe(true);
      expect((await s.get('i-1'))!.prefetchImages).toBeUndefined();
    });

    it('records the images a node holds, sorted, kept across re-registration, cleared with an empty list', async () => {
      const s = await make();
      expect(await s.noteImages('i-1', ['vllm/vllm-openai:v0.6.3'])).toBe(false);
      await s.register(record('i-1'));
      expect(await s.noteImages('i-1', ['vllm/vllm-openai:v0.6.3', 'acme/a:1'])).toBe(true);
      await s.register(record('i-1', T0 + 1000));
      expect((await s.get('i-1'))!.images).toEqual(['acme/a:1', 'vllm/vllm-openai:v0.6.3']);
      expect(await s.noteImages('i-1', [])).toBe(true);
      expect((await s.get('i-1'))!.images).toBeUndefined();
    });

    it('keeps the work list across re-registration, heartbeats and draining', async () => {
      const s = await make();
      await s.register(record('i-1'));
      await s.assign('i-1', 'nlp.a', 1);
      await s.register(record('i-1', T0 + 1000));
      await s.heartbeat('i-1', T0 + 2000);
      await s.markDraining('i-1', { sinceMs: T0 + 3000, reason: 'rebalance', deadlineMs: T0 + 9000 });
      await s.setIdleSince('i-1', T0 + 4000);
      expect((await s.get('i-1'))!.assigned).toEqual({ 'nlp.a': 1 });
      const drainedFirst = await s.markDraining('i-2', { sinceMs: T0, reason: 'terminated', deadlineMs: T0 });
      expect(drainedFirst.instanceId).toBe('i-2');
      expect(await s.assign('i-2', 'nlp.c', 1)).toBe(true);
      expect((await s.get('i-2'))!.assigned).toEqual({ 'nlp.c': 1 });
    });

    it("stamps a registered node's billing facts once, keeps them and its end across re-registration; the earliest end wins", async () => {
      const s = await make();
      const meter = { offeringId: 'aws/us-east-1a/g5.xlarge/spot', priceMicroUsdPerHour: 400_000, launchedAtMs: T0 - 60_000, gpuCount: 1 };
      expect(await s.noteMeter('i-9', meter)).toBe(false); // no record: nothing written
      expect(await s.get('i-9')).toBeUndefined();
      await s.register(record('i-1'));
      expect(await s.noteMeter('i-1', meter)).toBe(true);
      expect(await s.noteMeter('i-1', { ...meter, priceMicroUsdPerHour: 1 })).toBe(true);
      await s.noteEnded('i-1', T0 + 9000);
      await s.noteEnded('i-1', T0 + 7000);
      await s.noteEnded('i-1', T0 + 8000);
      await s.noteEnded('i-9', T0); // unknown: left alone
      await s.register(record('i-1', T0 + 10_000));
      expect(await s.get('i-1')).toMatchObject({ meter, endedAtMs: T0 + 7000, lastHeartbeatAtMs: T0 + 10_000 });
      expect((await s.list()).find((r) => r.instanceId === 'i-1')).toMatchObject({ meter, endedAtMs: T0 + 7000 });
      expect(await s.get('i-9')).toBeUndefined();
    });

    it('lets racing writers all land their pointers', async () => {
      const s = await make();
      await s.register(record('i-1'));
      await Promise.all(Array.from({ length: 8 }, (_, k) => s.assign('i-1', `nlp.j${k}`, 1)));
      expect(Object.keys((await s.get('i-1'))!.assigned ?? {}).sort()).toEqual(Array.from({ length: 8 }, (_, k) => `nlp.j${k}`));
    });
  });
}

export function spendLedgerContract(name: string, make: () => Promise<SpendLedger>): void {
  describe(`SpendLedger contract: ${name}`, () => {
    it('counts each window exactly once and moves the cursor', async () => {
      const l = await make();
      expect(await l.read('nlp', '2026-11')).toEqual({ spentMicroUsd: 0, accruedUntilMs: undefined });
      expect(await l.accrue({ team: 'nlp', period: '2026-11', fromMs: T0, toMs: T0 + 60_000, amountMicroUsd: 500 })).toBe(true);
      expect(await l.accrue({ team: 'nlp', period: '2026-11', fromMs: T0, toMs: T0 + 60_000, amountMicroUsd: 500 })).toBe(true); // a repeat
      expect(await l.accrue({ team: 'nlp', period: '2026-11', fromMs: T0 + 60_000, toMs: T0 + 120_000, amountMicroUsd: 700 })).toBe(true);
      expect(await l.read('nlp', '2026-11')).toEqual({ spentMicroUsd: 1200, accruedUntilMs: T0 + 120_000 });
    });

    it('refuses a window that does not start at the cursor', async () => {
      const l = await make();
      await l.accrue({ team: 'nlp', period: '2026-11', fromMs: T0, toMs: T0 + 60_000, amountMicroUsd: 500 });
      expect(await l.accrue({ team: 'nlp', period: '2026-11', fromMs: T0 + 30_000, toMs: T0 + 90_000, amountMicroUsd: 500 })).toBe(false);
      expect((await l.read('nlp', '2026-11')).spentMicroUsd).toBe(500);
    });

    it('lets one of two racing writers count a window', async () => {
      const l = await make();
      await l.accrue({ team: 'nlp', period: '2026-11', fromMs: T0, toMs: T0 + 1, amountMicroUsd: 1 });
      await Promise.all([
        l.accrue({ team: 'nlp', period: '2026-11', fromMs: T0 + 1, toMs: T0 + 60_000, amountMicroUsd: 10 }),
        l.accrue({ team: 'nlp', period: '2026-11', fromMs: T0 + 1, toMs: T0 + 61_000, amountMicroUsd: 10 }),
      ]);
      expect((await l.read('nlp', '2026-11')).spentMicroUsd).toBe(11);
    });

    it('keeps a byte carry with the cursor, written only with a window it counts', async () => {
      const l = await make();
      const carry = { atMs: T0 + 60_000, held: { 'aws:us-east-1': 5 * 2 ** 30 }, seen: [{ atMs: T0 + 60_000, ids: ['s1x', 'r2y'] }] };
      expect(await l.accrue({ team: 'nlp', period: '2026-11', fromMs: T0, toMs: T0 + 60_000, amountMicroUsd: 5, carry })).toBe(true);
      expect(await l.read('nlp', '2026-11')).toEqual({ spentMicroUsd: 5, accruedUntilMs: T0 + 60_000, carry });
      // A window that is not counted (another writer moved the cursor) leaves the carry as it was.
      const other = { ...carry, atMs: T0 + 90_000, held: {} };
      expect(
        await l.accrue({ team: 'nlp', period: '2026-11', fromMs: T0 + 30_000, toMs: T0 + 90_000, amountMicroUsd: 5, carry: other }),
      ).toBe(false);
      expect((await l.read('nlp', '2026-11')).carry).toEqual(carry);
      // A window counted without one keeps it too.
      await l.accrue({ team: 'nlp', period: '2026-11', fromMs: T0 + 60_000, toMs: T0 + 120_000, amountMicroUsd: 1 });
      expect((await l.read('nlp', '2026-11')).carry).toEqual(carry);
    });

    it('keeps teams and periods apart and lists them', async () => {
      const l = await make();
      await l.accrue({ team: 'nlp', period: '2026-11', fromMs: T0, toMs: T0 + 1, amountMicroUsd: 3 });
      await l.accrue({ team: 'nlp', period: '2026-12', fromMs: T0, toMs: T0 + 1, amountMicroUsd: 4 });
      await l.accrue({ team: 'vision', period: '2026-11', fromMs: T0, toMs: T0 + 1, amountMicroUsd: 5 });
      const rows = (await l.list()).map((r) => `${r.team}/${r.period}=${r.spentMicroUsd}`).sort();
      expect(rows).toEqual(['nlp/2026-11=3', 'nlp/2026-12=4', 'vision/2026-11=5']);
    });
  });
}

export function leaseStoreContract(name: string, make: () => Promise<LeaseStore>): void {
  describe(`LeaseStore contract: ${name}`, () => {
    it('gives the lease to one holder until it expires or is released', async () => {
      const s = await make();
      expect(await s.acquire('reconcile', 'a', T0, 60_000)).toBe(true);
      expect(await s.acquire('reconcile', 'b', T0 + 1000, 60_000)).toBe(false);
      expect(await s.acquire('reconcile', 'a', T0 + 2000, 60_000)).toBe(true); // renewal
      expect(await s.acquire('reconcile', 'b', T0 + 62_001, 60_000)).toBe(true); // expired
      await s.release('reconcile', 'a'); // not a's any more: nothing happens
      expect(await s.acquire('reconcile', 'a', T0 + 63_000, 60_000)).toBe(false);
      await s.release('reconcile', 'b');
      expect(await s.acquire('reconcile', 'a', T0 + 64_000, 60_000)).toBe(true);
    });

    it('lets exactly one of two racing holders win', async () => {
      const s = await make();
      const won = await Promise.all(['a', 'b', 'c'].map((h) => s.acquire('race', h, T0, 60_000)));
      expect(won.filter(Boolean)).toHaveLength(1);
    });
  });
}

export function decisionLogContract(name: string, make: () => Promise<DecisionLog>): void {
  const d = (id: string, atMs: number): DecisionRecord => ({
    id,
    atMs,
    dryRun: false,
    inputs: { pendingJobs: 1, activeJobs: 0, nodes: 0, groups: [] },
    plan: { actions: [], waiting: [], addedCostMicroUsdPerHour: 0, addedExpectedCostMicroUsdPerHour: 0 },
    applied: 0,
    errors: [],
    planMs: 1,
  });
  describe(`DecisionLog contract: ${name}`, () => {
    it('stores records idempotently by id and returns the newest first', async () => {
      const log = await make();
      await log.record(d('decision-1', T0));
      await log.record(d('decision-2', T0 + 60_000));
      await log.record({ ...d('decision-1', T0), applied: 3 });
      expect((await log.get('decision-1'))!.applied).toBe(3);
      expect((await log.recent(5)).map((r) => r.id)).toEqual(['decision-2', 'decision-1']);
      expect(await log.get('decision-9')).toBeUndefined();
    });
  });
}

/** A store's own clock, moved by the contract: the server's time, apart from the machines' dates. */
export class ContractClock {
  constructor(public ms = T0) {}
  nowMs(): number {
    return this.ms;
  }
}

export function checkpointStoreContract(name: string, make: (clock: ContractClock) => Promise<CheckpointStore & CheckpointHistory>): void {
  describe(`CheckpointStore contract: ${name}`, () => {
    it('remembers the save the newest replaced and when, lists older replaced saves for the sweep, and forgets those swept', async () => {
      const clock = new ContractClock(T0 + 10);
      const s = await make(clock);
      expect(await s.retained('nlp.h')).toEqual({ superseded: [] });
      const loc = s.locationFor('nlp.h', 1);
      const saveAt = (n: number) => ({
        jobId: 'nlp.h',
        attempt: 1,
        location: `${loc}s${n}/`,
        completedAtMs: clock.ms,
        progressSec: n * 600,
      });
      const [a, b] = [saveAt(1), saveAt(2)];
      await s.markComplete(a);
      expect(await s.retained('nlp.h')).toEqual({ newest: a, superseded: [] });
      clock.ms += 1000;
      await s.markComplete(b);
      expect(await s.retained('nlp.h')).toEqual({ newest: b, previous: a, replacedAtMs: clock.ms, superseded: [] });
      clock.ms += 1000;
      const c = saveAt(3);
      await s.markComplete(c);
      await s.markComplete(c); // a retried call changes nothing
      // The same location saved again with more progress replaces the newest in place.
      const c2 = { ...c, progressSec: 2000 };
      await s.markComplete(c2);
      expect(await s.retained('nlp.h')).toEqual({ newest: c2, previous: b, replacedAtMs: clock.ms, superseded: [a.location] });
      await s.forgetSuperseded('nlp.h', [a.location, `${loc}never/`]);
      await s.forgetSuperseded('nlp.h', [a.location]);
      expect((await s.retained('nlp.h')).superseded).toEqual([]);
      expect(await s.latest('nlp.h')).toEqual(c2);
      // A sweep's read gone stale (a newer save completed since): what the newer save wrote is kept, and the swept location forgotten.
      const stale = await s.retained('nlp.h');
      const d = saveAt(4);
      clock.ms += 1000;
      await s.markComplete(d);
      const e = saveAt(5);
      await s.markComplete(e);
      expect((await s.retained('nlp.h')).superseded).toEqual([b.location, c.location]);
      await s.forgetSuperseded('nlp.h', [b.location], { ...stale, superseded: [b.location] });
      expect(await s.retained('nlp.h')).toEqual({ newest: e, previous: d, replacedAtMs: clock.ms, superseded: [c.location] });
      await s.forgetSuperseded('nlp.none', [a.location]); // a job with no saves: nothing to forget
      expect(await s.retained('nlp.none')).toEqual({ superseded: [] });
    });

    it('keeps each save’s bytes from its completion to its deletion in a byte log, with each read once per key', async () => {
      const clock = new ContractClock(T0 + 10);
      const s = await make(clock);
      const loc = s.locationFor('nlp.b', 1);
      const meter: SaveMeter = {
        owner: { jobId: 'nlp.b', team: 'nlp', project: 'p1' },
        machine: { cloud: 'aws', region: 'us-east-1', zone: 'us-east-1a' },
      };
      const size = saveSizeOf([3 * 2 ** 30]);
      const saveAt = (n: number, ranks = 1) => ({
        jobId: 'nlp.b',
        attempt: 1,
        location: `${loc}s${n}/`,
        completedAtMs: clock.ms,
        progressSec: n * 600,
        size,
        ...(ranks > 1 ? { ranks } : {}),
      });
      expect(await s.byteLogs(T0)).toEqual([]);
      // No size, or no meter: nothing is logged (a save from an agent that does not measure it).
      await s.markComplete({ ...saveAt(1), size: undefined } as CheckpointRef, 0, meter);
      await s.markComplete(saveAt(2));
      expect(await s.byteLogs(T0)).toEqual([]);
      const t3 = (clock.ms += 1000);
      const [a, b] = [saveAt(3), saveAt(4, 2)];
      await s.markComplete(a, 0, meter);
      await s.markComplete(a, 0, meter); // a retried call logs nothing more
      const t4 = (clock.ms += 1000);
      await s.markComplete(b, 0, meter);
      expect(await s.markComplete(b, 1, meter)).toBe(true);
      const [log] = await s.byteLogs(T0);
      expect(log!.owner).toEqual(meter.owner);
      expect(log!.saves).toEqual([
        { location: a.location, ...size, savedAtMs: t3, machine: meter.machine },
        {
          location: b.location,
          bytes: 2 * size.bytes,
          writeRequests: 2 * size.writeRequests,
          readRequests: 2 * size.readRequests,
          parts: 2,
          savedAtMs: t4,
          machine: meter.machine,
        },
      ]);
      // A read of one rank's part is its share; the same attempt and machine reading again is not billed twice.
      const t5 = (clock.ms += 1000);
      await s.noteRead('nlp.b', `${b.location}rank-1/`, { key: '2/i-1', atMs: t5 });
      await s.noteRead('nlp.b', `${b.location}rank-1/`, { key: '2/i-1', atMs: t5 + 5 });
      await s.noteRead('nlp.b', `${loc}nothing-here/`, { key: '2/i-1', atMs: t5 });
      await s.noteRead('nlp.none', `${loc}s3/`, { key: '2/i-1', atMs: t5 });
      expect((await s.byteLogs(T0))[0]!.saves[1]!.reads).toEqual([
        { key: '2/i-1', atMs: t5, bytes: size.bytes, readRequests: size.readRequests },
      ]);
      // The sweep deleting saves closes their records then, from a read that may have gone stale: a save completed
      // after the read stays billed.
      const stale = await s.retained('nlp.b');
      clock.ms += 1000;
      const c = saveAt(5);
      await s.markComplete(c, 0, meter);
      const t6 = (clock.ms += 1000);
      await s.forgetSuperseded('nlp.b', [a.location, b.location], stale);
      const deletedAt = async () => Object.fromEntries((await s.byteLogs(T0))[0]!.saves.map((r) => [r.location, r.deletedAtMs]));
      expect(await deletedAt()).toEqual({ [a.location]: t6, [b.location]: t6, [c.location]: undefined });
      // A log whose saves were all deleted before `since` is not listed.
      const t7 = (clock.ms += 1000);
      await s.forgetSuperseded('nlp.b', [c.location]);
      expect((await deletedAt())[c.location]).toBe(t7);
      expect(await s.byteLogs(t7 - 1)).toHaveLength(1);
      expect(await s.byteLogs(t7)).toEqual([]);
    });

    it('puts each change to a byte log as an event beside it, again on a repeat, until accrual forgets it', async () => {
      const clock = new ContractClock(T0 + 10);
      const s = await make(clock);
      const loc = s.locationFor('nlp.e', 1);
      const meter: SaveMeter = {
        owner: { jobId: 'nlp.e', team: 'nlp', project: 'p1' },
        machine: { cloud: 'aws', region: 'us-east-1', zone: 'us-east-1b' },
      };
      const size = saveSizeOf([2 * 2 ** 30]);
      const save = (n: number) => ({
        jobId: 'nlp.e',
        attempt: 1,
        location: `${loc}s${n}/`,
        completedAtMs: clock.ms,
        progressSec: n * 600,
        size,
      });
      expect(await s.byteEvents()).toEqual([]);
      expect(await s.byteTeams()).toEqual([]);
      const a = save(1);
      await s.markComplete(a, 0, meter);
      const kinds = async () => (await s.byteEvents()).map((e) => `${e.kind} ${e.location.slice(loc.length)} ${e.bytes}`).sort();
      expect(await kinds()).toEqual([`save s1/ ${size.bytes}`]);
      const [saved] = await s.byteEvents();
      expect(saved).toMatchObject({ owner: meter.owner, atMs: clock.ms, requests: size.writeRequests, machine: meter.machine });
      expect(await s.byteTeams()).toEqual(['nlp']);
      // Counted and forgotten; a repeat of the call soon after puts the same event again (same id), one later does not.
      await s.forgetByteEvents([saved!.id, 'no-such-event']);
      expect(await s.byteEvents()).toEqual([]);
      clock.ms += 30_000;
      await s.markComplete(a, 0, meter);
      expect((await s.byteEvents()).map((e) => e.id)).toEqual([saved!.id]);
      await s.forgetByteEvents([saved!.id]);
      clock.ms += 120_000;
      await s.markComplete(a, 0, meter);
      expect(await s.byteEvents()).toEqual([]);
      // A read and the sweep's deletions are events too.
      const b = save(2);
      await s.markComplete(b, 0, meter);
      clock.ms += 1000;
      await s.noteRead('nlp.e', b.location, { key: '2/i-9', atMs: clock.ms });
      const c = save(3);
      await s.markComplete(c, 0, meter);
      clock.ms += 1000;
      await s.forgetSuperseded('nlp.e', [a.location]);
      expect(await kinds()).toEqual([
        `delete s1/ ${size.bytes}`,
        `read s2/ ${size.bytes}`,
        `save s2/ ${size.bytes}`,
        `save s3/ ${size.bytes}`,
      ]);
      await s.forgetByteEvents((await s.byteEvents()).map((e) => e.id));
      expect(await s.byteEvents()).toEqual([]);
      expect(await s.byteTeams()).toEqual(['nlp']);
    });

    it('gives each attempt its own location and keeps only the newest complete checkpoint', async () => {
      const clock = new ContractClock(T0 + 10);
      const s = await make(clock);
      expect(s.locationFor('nlp.a', 1)).not.toBe(s.locationFor('nlp.a', 2));
      expect(s.locationFor('nlp.a', 1)).toBe(s.locationFor('nlp.a', 1));
      expect(await s.latest('nlp.a')).toBeUndefined();
      const loc = s.locationFor('nlp.a', 1);
      const first = { jobId: 'nlp.a', attempt: 1, location: `${loc}s2/`, completedAtMs: T0 + 10, progressSec: 600 };
      const older = { ...first, location: `${loc}s1/`, completedAtMs: T0 + 5, progressSec: 300 };
      expect(await s.markComplete(first)).toBe(true);
      expect(await s.markComplete(first)).toBe(true); // a retried call
      // Progress going backwards is refused, and the store keeps what it had.
      await expect(s.markComplete(older)).rejects.toThrow(/holds 300 s of progress, behind the newest complete one .* 600 s/);
      expect(await s.latest('nlp.a')).toEqual(first);
    });

    it("orders checkpoints by the store's clock, not the machines' dates", async () => {
      const clock = new ContractClock(T0 + 100_000);
      const s = await make(clock);
      const loc = s.locationFor('nlp.c', 2);
      // The second machine's clock runs 60 s behind: its later checkpoint is dated before the first one.
      const a = { jobId: 'nlp.c', attempt: 2, location: `${loc}a/`, completedAtMs: T0 + 100_000, progressSec: 100 };
      const b = { jobId: 'nlp.c', attempt: 2, location: `${loc}b/`, completedAtMs: T0 + 50_000, progressSec: 150 };
      await s.markComplete(a);
      clock.ms += 10_000;
      await s.markComplete(b);
      expect(await s.latest('nlp.c')).toEqual(b);
      // The same progress recorded later wins too: the store's clock decides between equals.
      const c = { ...b, location: `${loc}c/`, completedAtMs: T0 + 40_000 };
      clock.ms += 10_000;
      await s.markComplete(c);
      expect(await s.latest('nlp.c')).toEqual(c);
    });

    it('refuses a completion dated in the future, and takes the honest ones after it', async () => {
      const clock = new ContractClock(T0 + 1_000_000);
      const s = await make(clock);
      const loc = s.locationFor('nlp.f', 1);
      const ahead = { jobId: 'nlp.f', attempt: 1, location: `${loc}ahead/`, completedAtMs: T0 + 1_000_000 + 3_600_000, progressSec: 50 };
      await expect(s.markComplete(ahead)).rejects.toThrow(/dated .*, more than 300 s after the store's clock/);
      expect(await s.latest('nlp.f')).toBeUndefined();
      // Within the allowed skew is taken; then an honest later one, dated earlier than that, still wins.
      const slightlyAhead = { ...ahead, location: `${loc}near/`, completedAtMs: T0 + 1_000_000 + 120_000 };
      await s.markComplete(slightlyAhead);
      clock.ms += 30_000;
      const honest = { ...ahead, location: `${loc}honest/`, completedAtMs: T0 + 1_030_000, progressSec: 80 };
      await s.markComplete(honest);
      expect(await s.latest('nlp.f')).toEqual(honest);
      // Progress that is not a whole number of seconds is refused.
      await expect(s.markComplete({ ...honest, location: `${loc}odd/`, progressSec: 90.5 })).rejects.toThrow(/whole number of seconds/);
    });

    it("completes a gang's save once every rank's part is in; a location saved again by one rank alone is not complete", async () => {
      const clock = new ContractClock(T0 + 100);
      const s = await make(clock);
      const loc = `${s.locationFor('nlp.g', 1)}latest/`;
      const part = (rank: number, at: number) =>
        [{ jobId: 'nlp.g', attempt: 1, location: loc, completedAtMs: at, progressSec: at - T0, ranks: 2 }, rank] as const;
      expect(await s.markComplete(...part(0, T0 + 100))).toBe(false);
      expect(await s.markComplete(...part(0, T0 + 100))).toBe(false); // the same part again
      expect(await s.latest('nlp.g')).toBeUndefined();
      clock.ms = T0 + 120;
      expect(await s.markComplete(...part(1, T0 + 120))).toBe(true);
      expect((await s.latest('nlp.g'))?.completedAtMs).toBe(T0 + 120);
      // A part of the complete save, sent again (a retried call): still complete, and the index unchanged.
      expect(await s.markComplete(...part(0, T0 + 100))).toBe(true);
      expect((await s.latest('nlp.g'))?.completedAtMs).toBe(T0 + 120);
      // The next save of the same folder: rank 0 alone is not a complete checkpoint.
      clock.ms = T0 + 210;
      expect(await s.markComplete(...part(0, T0 + 200))).toBe(false);
      expect((await s.latest('nlp.g'))?.completedAtMs).toBe(T0 + 120);
      expect(await s.markComplete(...part(1, T0 + 210))).toBe(true);
      expect((await s.latest('nlp.g'))?.completedAtMs).toBe(T0 + 210);
    });

    it("refuses a gang's save behind the newest, and refuses a part of it sent again too (never 'complete')", async () => {
      const clock = new ContractClock(T0 + 1000);
      const s = await make(clock);
      const base = s.locationFor('nlp.r', 1);
      await s.markComplete({ jobId: 'nlp.r', attempt: 1, location: `${base}new/`, completedAtMs: T0 + 1000, progressSec: 900 });
      const behind = { jobId: 'nlp.r', attempt: 1, location: `${base}old/`, completedAtMs: T0 + 1000, progressSec: 300, ranks: 2 };
      expect(await s.markComplete(behind, 0)).toBe(false);
      await expect(s.markComplete(behind, 1)).rejects.toThrow(/behind the newest complete one/);
      await expect(s.markComplete(behind, 0)).rejects.toThrow(/behind the newest complete one/);
      expect((await s.latest('nlp.r'))?.location).toBe(`${base}new/`);
    });

    it('keeps a location under the job, whatever its id holds', async () => {
      const s = await make(new ContractClock());
      const loc = s.locationFor('nlp.../../etc', 1);
      expect(loc).not.toContain('/../');
    });
  });
}

export function poolHistoryContract(name: string, make: () => Promise<PoolHistory>): void {
  describe(`PoolHistory contract: ${name}`, () => {
    it('measures exposure as the span each instance was seen alive, in any order, idempotently', async () => {
      const h = await make();
      const o = 'aws/us-west-2a/p3.2xlarge/spot';
      await h.noteAlive([{ instanceId: 'i-1', offeringId: o, atMs: T0 + 3_600_000 }]);
      await h.noteAlive([
        { instanceId: 'i-1', offeringId: o, atMs: T0 },
        { instanceId: 'i-2', offeringId: o, atMs: T0 },
      ]);
      await h.noteAlive([
        { instanceId: 'i-1', offeringId: o, atMs: T0 + 1_800_000 },
        { instanceId: 'i-2', offeringId: o, atMs: T0 + 1_800_000 },
      ]);
      await h.noteAlive([{ instanceId: 'i-2', offeringId: o, atMs: T0 + 1_800_000 }]);
      const stats = await h.stats(T0 - 1);
      expect(stats.get(o)!.exposureHours).toBeCloseTo(1.5, 9);
      expect(stats.get(o)!.interruptions).toBe(0);
    });

    it('counts each interrupted instance once', async () => {
      const h = await make();
      const o = 'aws/us-west-2b/p3.2xlarge/spot';
      await h.noteInterrupted('i-9', o, T0);
      await h.noteInterrupted('i-9', o, T0 + 5);
      await h.noteInterrupted('i-8', o, T0 + 10);
      expect((await h.stats(T0 - 1)).get(o)!.interruptions).toBe(2);
      expect((await h.stats(T0 + 6)).get(o)?.interruptions ?? 0).toBe(1);
    });

    it("runs an interrupted instance's span to its interruption when that came after its last note", async () => {
      const h = await make();
      const o = 'aws/us-west-2c/p3.2xlarge/spot';
      await h.noteAlive([{ instanceId: 'i-7', offeringId: o, atMs: T0 }]);
      await h.noteAlive([{ instanceId: 'i-7', offeringId: o, atMs: T0 + 600_000 }]);
      await h.noteInterrupted('i-7', o, T0 + 900_000);
      expect((await h.stats(T0 - 1)).get(o)!.exposureHours).toBeCloseTo(0.25, 9);
    });

    it('gives each machine seen since a time: its pool, first and last note, and when it was taken back', async () => {
      const h = await make();
      const o = 'aws/us-west-2d/p3.2xlarge/spot';
      await h.noteAlive([{ instanceId: 'i-5', offeringId: o, atMs: T0 }]);
      await h.noteAlive([{ instanceId: 'i-5', offeringId: o, atMs: T0 + 600_000 }]);
      await h.noteInterrupted('i-5', o, T0 + 900_000);
      await h.noteAlive([{ instanceId: 'i-6', offeringId: o, atMs: T0 - 7_200_000 }]);
      const mine = (await h.machines(T0 - 1)).filter((m) => m.offeringId === o);
      expect(mine).toEqual([{ offeringId: o, firstMs: T0, lastMs: T0 + 600_000, interruptedAtMs: T0 + 900_000 }]);
      expect((await h.machines(T0 - 7_200_000)).filter((m) => m.offeringId === o)).toHaveLength(2);
    });
  });
}

export function planJournalContract(name: string, make: () => Promise<PlanJournal>): void {
  const action = (i: number): PlanAction => ({ kind: 'hold', jobId: `nlp.j${i}`, reason: { code: 'budget-hold', message: `hold ${i}` } });
  describe(`PlanJournal contract: ${name}`, () => {
    it('returns the newest unfinished plan with the actions already applied', async () => {
      const j = await make();
      expect(await j.unfinished()).toBeUndefined();
      await j.start('decision-000000000000001', T0, [action(0), action(1), action(2)]);
      await j.start('decision-000000000000001', T0, [action(9)]); // a second start changes nothing
      await j.done('decision-000000000000001', 0);
      await j.done('decision-000000000000001', 2);
      await j.done('decision-000000000000001', 2);
      const left = await j.unfinished();
      expect(left).toMatchObject({ planId: 'decision-000000000000001', atMs: T0, finished: false });
      expect(left!.actions).toEqual([action(0), action(1), action(2)]);
      expect([...left!.done].sort()).toEqual([0, 2]);
      await j.finish('decision-000000000000001');
      await j.finish('decision-000000000000001');
      expect(await j.unfinished()).toBeUndefined();
    });

    it('keeps large plans whole', async () => {
      const j = await make();
      const many = Array.from({ length: 12_000 }, (_, i) => action(i));
      await j.start('decision-000000000000002', T0, many);
      expect((await j.unfinished())!.actions).toHaveLength(12_000);
    });
  });
}

const familyRun = (jobId: string, endedAtMs: number) => aRightsizeRun(jobId, endedAtMs);

export function familyRunStoreContract(name: string, make: () => Promise<FamilyRunStore>): void {
  describe(`FamilyRunStore contract: ${name}`, () => {
    it("keeps each family's runs once per job, oldest first, the newest 20, whatever order and however often they are noted", async () => {
      const s = await make();
      const f = 'nlp/ranker/ghcr.io/acme/ranker:3';
      expect(await s.runs(f)).toEqual([]);
      const runs = Array.from({ length: 24 }, (_, i) => familyRun(`nlp.r${i}`, T0 + i * 60_000));
      await s.note(runs.slice(12).map((run) => ({ family: f, run })));
      await s.note([...runs.slice(0, 14).reverse(), runs[3]!].map((run) => ({ family: f, run })));
      await s.note([{ family: 'cv/(no project)/x', run: familyRun('cv.a', T0) }]);
      expect((await s.runs(f)).map((r) => r.jobId)).toEqual(runs.slice(4).map((r) => r.jobId));
      expect(await s.runs('cv/(no project)/x')).toEqual([familyRun('cv.a', T0)]);
    });
  });
}
