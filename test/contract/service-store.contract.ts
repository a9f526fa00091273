import { describe, expect, it } from 'vitest';
import { checkJobSpec } from '../../core/job-spec.ts';
import type { ServiceStore } from '../../core/ports.ts';
import { newServiceRecord, type ServiceRecord } from '../../core/serving/service.ts';

const T0 = Date.UTC(2026, 11, 1);

function record(name: string): ServiceRecord {
  const check = checkJobSpec({
    name,
    image: 'vllm/vllm-openai:v0.6.3',
    command: ['--port', '8000'],
    gpu: { kind: 'whole', count: 1 },
    service: { port: 8000, replicas: { min: 0, max: 4 }, targets: [{ metric: 'waiting-requests', perReplica: 6 }] },
  });
  if (!check.ok) throw new Error(check.errors.join('; '));
  return newServiceRecord('nlp', check.spec, T0);
}

/** What every ServiceStore must do: create once by id, conditional updates on the version, list every record. */
export function serviceStoreContract(name: string, make: () => Promise<ServiceStore>): void {
  describe(`ServiceStore contract: ${name}`, () => {
    it('creates a record once by id; the second create returns the stored one unchanged', async () => {
      const store = await make();
      const r = record('chat');
      expect(await store.create(r)).toEqual({ created: true, record: r });
      const again = await store.create({ ...r, target: 3 });
      expect(again.created).toBe(false);
      expect(again.record.target).toBe(0);
      expect(await store.get('nlp.chat')).toEqual(r);
      expect(await store.get('nlp.none')).toBeUndefined();
    });

    it('updates only from the version read, one step at a time; a lost race returns the current record', async () => {
      const store = await make();
      const r = record('embed');
      await store.create(r);
      // The memory round-trips as stored, including what a policy keeps between decisions.
      const next: ServiceRecord = {
        ...r,
        version: 2,
        target: 2,
        history: [{ atMs: T0 + 60_000, replicas: 2 }],
        memory: { ...r.memory, tick: 1, losses: [0, 1], exposure: [10, 4], asked: [1, 1] },
        reason: '0 → 2: 11 waiting requests per replica against a target of 6',
      };
      expect(await store.update(next, 1)).toEqual({ ok: true, record: next });
      const lost = await store.update({ ...r, version: 2, target: 4 }, 1);
      expect(lost).toEqual({ ok: false, current: next });
      expect((await store.update({ ...next, version: 4 }, 2)).ok).toBe(false);
      expect(await store.get('nlp.embed')).toEqual(next);
    });

    it('lists every record', async () => {
      const store = await make();
      await store.create(record('a1'));
      await store.create(record('b2'));
      const ids = (await store.list()).map((x) => x.id);
      expect(ids).toEqual(expect.arrayContaining(['nlp.a1', 'nlp.b2']));
    });
  });
}
