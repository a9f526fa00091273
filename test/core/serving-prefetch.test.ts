import { describe, expect, it } from 'vitest';
import { MemoryJobStore, MemoryNodeStore, MemoryServiceStore } from '../../cloud/sim/memory-stores.ts';
import type { Instance } from '../../core/fleet.ts';
import { imagesToPrefetch, MAX_PREFETCH_IMAGES, prefetchChanged } from '../../core/serving/prefetch.ts';
import { newServiceRecord, type ServiceRecord } from '../../core/serving/service.ts';
import { reconcileServices } from '../../core/services/serving.ts';
import type { WorldView } from '../../core/services/snapshot-reader.ts';
import { aGroup, aSpec, INSTANCE_TYPES, T0 } from '../builders.ts';

const types = new Map(Object.entries(INSTANCE_TYPES));
const service = (name: string, image: string, over: Parameters<typeof aSpec>[0] = {}): ServiceRecord =>
  newServiceRecord(
    'nlp',
    aSpec({
      name,
      image,
      service: { port: 8000, replicas: { min: 1, max: 4 }, targets: [{ metric: 'requests-per-second', perReplica: 2 }] },
      ...over,
    }),
    T0,
  );
const machine = (over: Partial<Instance> = {}): Instance => ({
  id: 'i-1',
  groupId: 'g',
  cloud: 'aws',
  region: 'us-west-2',
  zone: 'us-west-2a',
  instanceType: 'g5.xlarge',
  capacityType: 'spot',
  state: 'running',
  launchedAtMs: T0,
  ...over,
});

describe('images pulled ahead (core/serving/prefetch.ts)', () => {
  it("lists the images of the active services that could place a replica on the machine: its GPUs, its capacity type, the spec's placement", () => {
    const chat = service('chat', 'vllm/vllm-openai:v0.6.3', { gpu: { kind: 'whole', count: 1, models: ['A10G'] } });
    const big = service('big', 'acme/big:1', { gpu: { kind: 'whole', count: 4 } });
    const firm = service('firm', 'acme/firm:1', { interruptible: false });
    const pinned = service('pinned', 'acme/pinned:1', { placement: { zones: ['us-west-2b'] } });
    const v100 = service('v100', 'acme/v100:1', { gpu: { kind: 'whole', count: 1, models: ['V100'] } });
    const gone: ServiceRecord = { ...service('gone', 'acme/gone:1'), state: 'cancelled' };
    const all = [chat, big, firm, pinned, v100, gone];
    // A 1-GPU A10G spot machine in 2a: chat only (big wants 4 GPUs, firm on-demand, pinned 2b, v100 a V100; gone is cancelled).
    expect(imagesToPrefetch(machine(), false, all, types)).toEqual(['vllm/vllm-openai:v0.6.3']);
    // On-demand in 2b: firm and pinned too, sorted.
    expect(imagesToPrefetch(machine({ capacityType: 'on-demand', zone: 'us-west-2b' }), false, all, types)).toEqual([
      'acme/firm:1',
      'acme/pinned:1',
      'vllm/vllm-openai:v0.6.3',
    ]);
    // A 4-GPU machine takes big as well; an unknown type, nothing.
    expect(imagesToPrefetch(machine({ instanceType: 'g5.12xlarge' }), false, all, types)).toEqual([
      'acme/big:1',
      'vllm/vllm-openai:v0.6.3',
    ]);
    expect(imagesToPrefetch(machine({ instanceType: 'x9.huge' }), false, all, types)).toEqual([]);
    // In MIG mode a whole-GPU replica cannot go there.
    expect(imagesToPrefetch(machine({ instanceType: 'p4d.24xlarge' }), true, all, types)).toEqual([]);
    // Two services of one image: listed once.
    expect(imagesToPrefetch(machine(), false, [chat, service('chat2', 'vllm/vllm-openai:v0.6.3')], types)).toEqual([
      'vllm/vllm-openai:v0.6.3',
    ]);
  });

  it('keeps at most MAX_PREFETCH_IMAGES, the first services by id, and says when a list changed', () => {
    const many = Array.from({ length: MAX_PREFETCH_IMAGES + 3 }, (_, i) =>
      service(`s${String(i).padStart(2, '0')}`, `acme/s${String(i).padStart(2, '0')}:1`),
    );
    const listed = imagesToPrefetch(machine(), false, [...many].reverse(), types);
    expect(listed).toEqual(many.slice(0, MAX_PREFETCH_IMAGES).map((s) => s.spec.image));
    expect(prefetchChanged(undefined, [])).toBe(false);
    expect(prefetchChanged(['a'], ['a'])).toBe(false);
    expect(prefetchChanged(['a'], ['a', 'b'])).toBe(true);
    expect(prefetchChanged(['a', 'b'], ['a', 'c'])).toBe(true);
  });

  it('reconcile writes each live machine its list only when it changed, and clears it once no service wants it', async () => {
    const nodes = new MemoryNodeStore();
    const services = new MemoryServiceStore();
    const jobs = new MemoryJobStore();
    const chat = service('chat', 'vllm/vllm-openai:v0.6.3');
    await services.create(chat);
    const g = aGroup({ instanceType: 'g5.xlarge', capacityType: 'spot' });
    const live = machine({ groupId: g.id });
    const ended = machine({ id: 'i-2', groupId: g.id, state: 'terminated' });
    for (const id of ['i-1', 'i-2'])
      await nodes.register({ instanceId: id, groupId: g.id, registeredAtMs: T0, lastHeartbeatAtMs: T0, healthy: true, gpus: [] });
    const world = async (): Promise<WorldView> => ({
      groups: [g],
      instances: [live, ended],
      records: await nodes.list(),
      pendingJobs: [],
      activeJobs: [],
      degraded: [],
    });
    const step = async () =>
      reconcileServices({ services, jobs, nodes, catalog: { instanceTypes: async () => types } }, await world(), T0, {
        intervalSec: 60,
        bootSec: 0,
      });
    expect((await step()).prefetchWritten).toBe(1);
    expect((await nodes.get('i-1'))!.prefetchImages).toEqual(['vllm/vllm-openai:v0.6.3']);
    expect((await nodes.get('i-2'))!.prefetchImages).toBeUndefined();
    // Unchanged: nothing written.
    expect((await step()).prefetchWritten).toBeUndefined();
    // The service goes: the list is cleared.
    const current = (await services.get(chat.id))!;
    await services.update({ ...current, state: 'cancelled', version: current.version + 1 }, current.version);
    expect((await step()).prefetchWritten).toBe(1);
    expect((await nodes.get('i-1'))!.prefetchImages).toBeUndefined();
  });
});
