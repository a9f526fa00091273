import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { byteCostByTeam, saveSizeOf, type ByteEvent, type NetworkLayout, type Site, type StoreSites } from '../../core/bytes.ts';
import { checkpointFolder } from '../../core/job.ts';
import { accrueSpend, isBudgetPeriod, type ByteMeter } from '../../core/services/accrual.ts';
import { shippedByteRates } from '../../cloud/prices.ts';
import { MemoryCheckpointStore, MemorySpendLedger } from '../../cloud/sim/memory-stores.ts';

/**
 * Spend accrual charges checkpoint bytes from the index's byte events and what each team's budget
 * row carries, never reading every job's log: the bill it comes to must be the one the logs give
 * (core/bytes.ts `byteCostByTeam` over the whole span), whatever the order of saves, reads,
 * deletions, repeats and late events, and whenever the counts run.
 */

const START = Date.UTC(2026, 10, 2, 21, 0, 0); // three hours before a new day: some runs cross it
const ROOT = 's3://fleet/checkpoints/';
const GCS = 'gs://fleet-us-central1/checkpoints/';
const where: StoreSites & { layout: NetworkLayout; rates: ReturnType<typeof shippedByteRates> } = {
  store: { cloud: 'aws', region: 'us-east-1' },
  roots: [{ root: GCS, site: { cloud: 'gcp', region: 'us-central1' } }],
  layout: { s3Path: 'nat', natZones: ['us-east-1a'] },
  rates: shippedByteRates(),
};
const machines: Site[] = [
  { cloud: 'aws', region: 'us-east-1', zone: 'us-east-1a' },
  { cloud: 'aws', region: 'us-east-1', zone: 'us-east-1b' },
  { cloud: 'gcp', region: 'us-central1', zone: 'us-central1-a' },
];
const JOBS = [
  { jobId: 'nlp.a', team: 'nlp', project: 'llm' },
  { jobId: 'nlp.b', team: 'nlp', project: 'llm' },
  { jobId: 'vision.c', team: 'vision', project: 'det' },
] as const;

type Step =
  | { kind: 'save'; job: number; gib: number; machine: number; after: number }
  | { kind: 'repeat'; job: number; after: number }
  | { kind: 'read'; job: number; machine: number; after: number }
  | { kind: 'sweep'; job: number; after: number }
  | { kind: 'count'; after: number; hide: number };

const step: fc.Arbitrary<Step> = fc.oneof(
  fc.record({
    kind: fc.constant('save' as const),
    job: fc.nat(2),
    gib: fc.integer({ min: 1, max: 64 }),
    machine: fc.nat(2),
    after: fc.integer({ min: 1, max: 900 }),
  }),
  fc.record({ kind: fc.constant('repeat' as const), job: fc.nat(2), after: fc.integer({ min: 1, max: 200 }) }),
  fc.record({ kind: fc.constant('read' as const), job: fc.nat(2), machine: fc.nat(2), after: fc.integer({ min: 1, max: 900 }) }),
  fc.record({ kind: fc.constant('sweep' as const), job: fc.nat(2), after: fc.integer({ min: 1, max: 900 }) }),
  // A count; the events of the last `hide` seconds are not visible to it yet (their writes are in flight): they come to the
  // next count late. A repeat's put of an older event is visible at once.
  fc.record({ kind: fc.constant('count' as const), after: fc.integer({ min: 1, max: 600 }), hide: fc.constantFrom(0, 5, 20) }),
);

async function play(steps: readonly Step[]) {
  const clock = { ms: START };
  const index = new MemoryCheckpointStore({ nowMs: () => clock.ms }, ROOT);
  const ledger = new MemorySpendLedger();
  let hidden = new Set<string>();
  const meter: ByteMeter = {
    ...where,
    events: async () => (await index.byteEvents()).filter((e) => !hidden.has(e.id)),
    forget: (ids) => index.forgetByteEvents(ids),
    teams: () => index.byteTeams(),
  };
  const saves = new Map<number, number>();
  const lastRef = new Map<number, Parameters<MemoryCheckpointStore['markComplete']>[0]>();
  let reads = 0;
  const count = async () =>
    accrueSpend(ledger, { teams: [], nowMs: clock.ms, maxWindowMs: 120_000, machines: async () => [], bytes: meter });
  for (const s of steps) {
    clock.ms += s.after * 1000;
    const job = JOBS['job' in s ? s.job : 0]!;
    if (s.kind === 'save') {
      const n = (saves.get(s.job) ?? 0) + 1;
      saves.set(s.job, n);
      const machine = machines[s.machine]!;
      const root = machine.cloud === 'gcp' ? GCS : ROOT;
      const ref = {
        jobId: job.jobId,
        attempt: 1,
        location: `${checkpointFolder(root, job.jobId, 1)}step-${n}/`,
        completedAtMs: clock.ms,
        progressSec: n * 60,
        size: saveSizeOf([s.gib * 2 ** 30], machine.cloud === 'gcp' ? 'gcs' : 's3'),
      };
      lastRef.set(s.job, ref);
      await index.markComplete(ref, 0, { owner: job, machine });
    } else if (s.kind === 'repeat') {
      const ref = lastRef.get(s.job);
      if (ref) await index.markComplete(ref, 0, { owner: job });
    } else if (s.kind === 'read') {
      const newest = await index.latest(job.jobId);
      if (newest) await index.noteRead(job.jobId, newest.location, { key: `r${reads++}`, atMs: clock.ms, machine: machines[s.machine]! });
    } else if (s.kind === 'sweep') {
      const held = await index.retained(job.jobId);
      if (held.superseded.length > 0) await index.forgetSuperseded(job.jobId, held.superseded);
    } else {
      const all = await index.byteEvents();
      hidden = new Set(all.filter((e: ByteEvent) => e.atMs > clock.ms - s.hide * 1000).map((e) => e.id));
      await count();
      hidden = new Set();
    }
  }
  clock.ms += 1000;
  await count();
  const charged = new Map<string, number>();
  for (const row of await ledger.list())
    if (isBudgetPeriod(row.period)) charged.set(row.team, (charged.get(row.team) ?? 0) + row.spentMicroUsd);
  const exact = byteCostByTeam(await index.byteLogs(START), where, START - 120_000, clock.ms);
  return { charged, exact, counts: steps.filter((s) => s.kind === 'count').length + 1, left: await index.byteEvents() };
}

describe('checkpoint bytes counted from events and carries', () => {
  it('comes to the bill the byte logs give, to rounding, and leaves no event behind', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(step, { minLength: 1, maxLength: 60, size: 'max' }), async (steps) => {
        const { charged, exact, counts, left } = await play(steps);
        for (const team of new Set([...charged.keys(), ...exact.keys()])) {
          // Each count prices each window's lines (storage, requests, each transfer charge per site) rounded once:
          // at most a micro-dollar apart per line. Three sites, a handful of lines each, and a day split in two.
          const tolerance = counts * 2 * 3 * 6;
          expect(Math.abs((charged.get(team) ?? 0) - (exact.get(team) ?? 0))).toBeLessThanOrEqual(tolerance);
        }
        expect(left).toEqual([]);
      }),
      { numRuns: 150 },
    );
  });

  it('charges a save put again after its event was counted once (a repeat of the call that recorded it)', async () => {
    const once = await play([
      { kind: 'save', job: 0, gib: 40, machine: 0, after: 1 },
      { kind: 'count', after: 30, hide: 0 },
      { kind: 'count', after: 60, hide: 0 },
    ]);
    const repeated = await play([
      { kind: 'save', job: 0, gib: 40, machine: 0, after: 1 },
      { kind: 'count', after: 30, hide: 0 },
      { kind: 'repeat', job: 0, after: 30 },
      { kind: 'count', after: 30, hide: 0 },
    ]);
    expect(repeated.charged.get('nlp')).toBe(once.charged.get('nlp'));
    // 40 GiB up through the NAT gateway is most of it; the repeat added nothing.
    expect(once.charged.get('nlp')).toBeGreaterThan(1_900_000);
  });

  it('counts a save whose event came late from its own time, and one deleted late only until its deletion', async () => {
    const { charged, exact } = await play([
      { kind: 'save', job: 2, gib: 64, machine: 0, after: 1 },
      { kind: 'save', job: 2, gib: 64, machine: 0, after: 600 },
      { kind: 'count', after: 1, hide: 5 }, // the second save's event is not seen by this count
      { kind: 'sweep', job: 2, after: 600 }, // nothing superseded yet: the first save is the previous one, kept an hour
      { kind: 'save', job: 2, gib: 64, machine: 0, after: 600 },
      { kind: 'sweep', job: 2, after: 60 },
      { kind: 'count', after: 5, hide: 20 }, // the deletion is seen only by the last count
    ]);
    expect(Math.abs(charged.get('vision')! - exact.get('vision')!)).toBeLessThanOrEqual(40);
  });
});
