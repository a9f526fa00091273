import { describe, expect, it } from 'vitest';
import { MAX_STORED_JOB_BYTES, newPendingJob, storedBytes, transition, type Job } from '../../core/job.ts';
import type { JobStore } from '../../core/ports.ts';
import { aSpec, T0 } from '../builders.ts';

/** The JobStore contract. Every implementation (memory, DynamoDB) runs this suite. */
export function jobStoreContract(name: string, make: () => Promise<JobStore>): void {
  const job = (id: string, team = 'nlp', at = T0): Job => newPendingJob({ id, team, spec: aSpec(), submittedAtMs: at });

  describe(`JobStore contract: ${name}`, () => {
    it('creates a job once; a second create returns the stored job unchanged', async () => {
      const store = await make();
      expect(await store.create(job('nlp.a'))).toEqual({ created: true, job: job('nlp.a') });
      const again = await store.create({ ...job('nlp.a'), spec: aSpec({ priority: 999 }) });
      expect(again.created).toBe(false);
      expect(again.job.spec.priority).toBe(100);
    });

    it('refuses an item over DynamoDB’s 400 KB, as DynamoDB does, and keeps nothing of it', async () => {
      const store = await make();
      const big = {
        ...job('nlp.big'),
        spec: aSpec({ env: Object.fromEntries(Array.from({ length: 20 }, (_, i) => [`V${i}`, 'x'.repeat(30_000)])) }),
      };
      await expect(store.create(big)).rejects.toMatchObject({ code: 'invalid-request' });
      expect(await store.get('nlp.big')).toBeUndefined();
      // A job at the bound intake keeps (350,000 bytes of JSON) fits.
      const near = {
        ...job('nlp.near'),
        spec: aSpec({ env: Object.fromEntries(Array.from({ length: 11 }, (_, i) => [`V${i}`, 'x'.repeat(30_000)])) }),
      };
      expect(storedBytes(near)).toBeLessThan(MAX_STORED_JOB_BYTES);
      expect((await store.create(near)).created).toBe(true);
    });

    it('returns undefined for a job that does not exist', async () => {
      expect(await (await make()).get('nlp.nope')).toBeUndefined();
    });

    it('updates only when the expected version matches (conditional write)', async () => {
      const store = await make();
      await store.create(job('nlp.a'));
      const placed = transition(
        job('nlp.a'),
        { type: 'place', attempt: 1, placement: { nodes: [{ nodeId: 'i-1', gpuIndices: [0] }], capacityType: 'spot' } },
        T0 + 1,
      );
      if (!placed.ok) throw new Error(placed.error);
      expect(await store.update(placed.job, 1)).toEqual({ ok: true, job: placed.job });
      const stale = await store.update({ ...placed.job, version: 2 }, 1);
      expect(stale).toEqual({ ok: false, current: placed.job });
      expect(await store.update({ ...job('nlp.zzz'), version: 2 }, 1)).toEqual({ ok: false, current: undefined });
    });

    it('lets exactly one of two racing writers win', async () => {
      const store = await make();
      await store.create(job('nlp.a'));
      const a = { ...job('nlp.a'), version: 2, hold: { code: 'budget-hold' as const, message: 'a' } };
      const b = { ...job('nlp.a'), version: 2, hold: { code: 'budget-hold' as const, message: 'b' } };
      const results = await Promise.all([store.update(a, 1), store.update(b, 1)]);
      expect(results.filter((r) => r.ok)).toHaveLength(1);
    });

    it('lists by state and team in submission order', async () => {
      const store = await make();
      await store.create(job('nlp.b', 'nlp', T0 + 2));
      await store.create(job('vision.a', 'vision', T0 + 1));
      await store.create(job('nlp.a', 'nlp', T0 + 3));
      expect((await store.listByState(['pending'])).map((j) => j.id)).toEqual(['vision.a', 'nlp.b', 'nlp.a']);
      expect((await store.listByState(['pending'], 'nlp')).map((j) => j.id)).toEqual(['nlp.b', 'nlp.a']);
      expect(await store.listByState(['running'])).toEqual([]);
    });

    it('lists the finished jobs that held machines by when they ended, across days, and none that never ran', async () => {
      const store = await make();
      const H = 3_600_000;
      const ran = async (id: string, endAt: number, end: 'succeed' | 'fail') => {
        const j = job(id);
        await store.create(j);
        const steps = [
          transition(
            j,
            { type: 'place', attempt: 1, placement: { nodes: [{ nodeId: 'i-1', gpuIndices: [0] }], capacityType: 'spot' } },
            endAt - H,
          ),
        ];
        steps.push(
          transition(
            (steps[0] as { job: Job }).job,
            end === 'succeed' ? { type: 'succeed', attempt: 1 } : { type: 'fail', attempt: 1, exitCode: 2 },
            endAt,
          ),
        );
        for (const [k, st] of steps.entries()) {
          if (!st.ok) throw new Error(st.error);
          await store.update(st.job, k + 1);
        }
      };
      await ran('nlp.early', T0 + 2 * H, 'succeed');
      await ran('nlp.late', T0 + 30 * H, 'fail'); // the next UTC day
      await ran('nlp.old', T0 - H, 'succeed');
      const cancelledPending = transition(job('nlp.never'), { type: 'cancel' }, T0 + 3 * H);
      await store.create(job('nlp.never'));
      if (cancelledPending.ok) await store.update(cancelledPending.job, 1);
      const ended = await store.listEndedSince(T0, T0 + 31 * H);
      expect(ended.map((j) => [j.id, j.state, j.heldAttempts?.map((h) => [h.fromMs - T0, h.toMs - T0])])).toEqual([
        ['nlp.early', 'succeeded', [[H, 2 * H]]],
        ['nlp.late', 'failed', [[29 * H, 30 * H]]],
      ]);
      expect((await store.listEndedSince(T0 + 3 * H, T0 + 31 * H)).map((j) => j.id)).toEqual(['nlp.late']);
      expect(await store.listEndedSince(T0 + 31 * H, T0 + 40 * H)).toEqual([]);
    });
  });
}
