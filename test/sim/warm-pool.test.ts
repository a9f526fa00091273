import { describe, expect, it } from 'vitest';
import { SeededRandom, VirtualClock } from '../../cloud/sim/clock.ts';
import { MemoryCheckpointStore, MemoryJobStore, MemoryNodeStore, MemoryServiceStore } from '../../cloud/sim/memory-stores.ts';
import { SimAgents } from '../../cloud/sim/sim-agent.ts';
import { SimCloud, WARM_START_SEC, WARM_VOLUME_MICRO_USD_PER_HOUR } from '../../cloud/sim/sim-cloud.ts';
import { newServiceRecord } from '../../core/serving/service.ts';
import { aSpec, INSTANCE_TYPES, T0 } from '../builders.ts';

const PRICE = 3_060_000; // p3.2xlarge on-demand, µUSD per hour

function world(warmPool?: { size: number; state: 'Stopped' | 'Hibernated' }, options: { warmPreparedByAgents?: boolean } = {}) {
  const clock = new VirtualClock(T0);
  const cloud = new SimCloud({
    clock,
    random: new SeededRandom(1),
    bootSec: 180,
    bootJitter: 0,
    priceOf: () => PRICE,
    ...options,
    groups: [
      {
        id: 'v100-od',
        instanceTypes: ['p3.2xlarge'],
        zones: ['us-west-2a'],
        capacityType: 'on-demand',
        minSize: 0,
        maxSize: 4,
        ...(warmPool ? { warmPool } : {}),
      },
    ],
  });
  const after = (sec: number) => {
    clock.advanceBy(sec * 1000);
    cloud.tick();
  };
  return { clock, cloud, after };
}

describe('the simulated Auto Scaling group with a warm pool', () => {
  it('prepares its machines ahead (booted once, then stopped), apart from the group’s capacity', async () => {
    const { cloud, after } = world({ size: 2, state: 'Stopped' });
    after(0);
    expect((await cloud.listGroups())[0]!.warm).toEqual({ state: 'Stopped', ready: 0, preparing: 2 });
    expect(await cloud.listInstances()).toEqual([]);
    after(180);
    expect((await cloud.listGroups())[0]!.warm).toEqual({ state: 'Stopped', ready: 2, preparing: 0 });
    expect(await cloud.listInstances()).toEqual([]);
  });

  it('a scale-out starts a prepared machine, in service after the warm start instead of a new boot; the pool refills', async () => {
    const { cloud, after } = world({ size: 1, state: 'Stopped' });
    after(0);
    after(180);
    await cloud.setDesiredCapacity('v100-od', 2);
    after(0);
    const [warm, cold] = cloud.allInstances();
    expect(warm!.fromWarmPool).toBe(true);
    expect(cold!.fromWarmPool).toBeUndefined();
    after(WARM_START_SEC.Stopped);
    expect(cloud.allInstances().map((i) => i.state)).toEqual(['running', 'pending']);
    after(180 - WARM_START_SEC.Stopped);
    expect(cloud.allInstances().map((i) => i.state)).toEqual(['running', 'running']);
    // One new machine went into the pool to replace the one started.
    expect((await cloud.listGroups())[0]!.warm).toEqual({ state: 'Stopped', ready: 1, preparing: 0 });
    expect(cloud.activity.get('v100-od')).toMatchObject({ launched: 2, fromWarmPool: 1 });
  });

  it('costs a running machine while a warm machine is prepared, then its volume alone while it waits', () => {
    const { cloud, after } = world({ size: 1, state: 'Hibernated' });
    after(0);
    after(180);
    after(3600);
    // 3 min at the machine's price, then an hour of its 200 GiB gp3 volume.
    expect(cloud.warmPoolMicroUsd(T0 + 3_780_000)).toBe(Math.round((PRICE * 180) / 3600 + WARM_VOLUME_MICRO_USD_PER_HOUR));
    expect(WARM_VOLUME_MICRO_USD_PER_HOUR).toBe(21_918); // $0.08 per GiB-month × 200 GiB ÷ 730 h
  });

  it('a group without a warm pool has none to list and costs none', async () => {
    const { cloud, after } = world();
    after(0);
    expect((await cloud.listGroups())[0]!.warm).toBeUndefined();
    expect(cloud.warmPoolMicroUsd(T0 + 3_600_000)).toBe(0);
  });
});

describe('warm machines prepared by their agents (images pulled onto the volume before the machine is stopped)', () => {
  const chat = newServiceRecord(
    'nlp',
    aSpec({
      name: 'chat',
      image: 'vllm/vllm-openai:v0.6.3',
      gpu: { kind: 'whole', count: 1, models: ['V100'] },
      service: { port: 8000, replicas: { min: 1, max: 4 }, targets: [{ metric: 'requests-per-second', perReplica: 2 }] },
    }),
    T0,
  );

  function prepared(o: { apiAnswers?: boolean } = {}) {
    const { clock, cloud } = world({ size: 1, state: 'Stopped' }, { warmPreparedByAgents: true });
    const services = new MemoryServiceStore();
    const agents = new SimAgents({
      clock,
      jobs: new MemoryJobStore(),
      nodes: new MemoryNodeStore(),
      checkpoints: new MemoryCheckpointStore(clock),
      instanceTypes: new Map(Object.entries(INSTANCE_TYPES)),
      workSecOf: () => Infinity,
      sources: { services, types: new Map(Object.entries(INSTANCE_TYPES)) },
      imagePullSecOf: (image) => (image === 'vllm/vllm-openai:v0.6.3' ? 51 : undefined),
      imagesOnVolume: (id) => cloud.imagesOnVolume(id),
      ...(o.apiAnswers === false ? { agentApiAnswers: () => false } : {}),
    });
    const after = async (sec: number) => {
      clock.advanceBy(sec * 1000);
      cloud.tick();
      await agents.prepareWarm(cloud);
    };
    return { cloud, services, after };
  }

  it('waits, booted, in its launch hook while its agent pulls the images of the services it may serve, then is stopped with them', async () => {
    const { cloud, services, after } = prepared();
    await services.create(chat);
    await after(0);
    await after(180);
    // Booted; its agent pulls the chat image (51 s): still being prepared, and billed as a running machine.
    expect((await cloud.listGroups())[0]!.warm).toEqual({ state: 'Stopped', ready: 0, preparing: 1 });
    await after(50);
    expect((await cloud.listGroups())[0]!.warm).toMatchObject({ ready: 0, preparing: 1 });
    await after(1);
    expect((await cloud.listGroups())[0]!.warm).toMatchObject({ ready: 1, preparing: 0 });
    expect(cloud.warmPoolMicroUsd(T0 + 231_000)).toBe(Math.round((PRICE * 231_000) / 3_600_000));
    // Started into service, it finds the image on its volume; a machine launched anew finds none.
    await cloud.setDesiredCapacity('v100-od', 2);
    await after(0);
    const [warm, cold] = cloud.allInstances();
    expect(warm!.fromWarmPool).toBe(true);
    expect(cloud.imagesOnVolume(warm!.id)).toEqual(['vllm/vllm-openai:v0.6.3']);
    expect(cloud.imagesOnVolume(cold!.id)).toEqual([]);
  });

  it('with no service to serve, or the agent API not answering, it is stopped at the end of its boot with nothing pulled', async () => {
    const idle = prepared();
    await idle.after(0);
    await idle.after(180);
    expect((await idle.cloud.listGroups())[0]!.warm).toMatchObject({ ready: 1, preparing: 0 });
    const cut = prepared({ apiAnswers: false });
    await cut.services.create(chat);
    await cut.after(0);
    await cut.after(180);
    expect((await cut.cloud.listGroups())[0]!.warm).toMatchObject({ ready: 1, preparing: 0 });
    await cut.cloud.setDesiredCapacity('v100-od', 1);
    await cut.after(0);
    expect(cut.cloud.imagesOnVolume(cut.cloud.allInstances()[0]!.id)).toEqual([]);
  });
});
