import { describe, expect, it } from 'vitest';
import { SeededRandom, VirtualClock } from '../../cloud/sim/clock.ts';
import { SimCloud, WARM_START_SEC, WARM_VOLUME_MICRO_USD_PER_HOUR } from '../../cloud/sim/sim-cloud.ts';
import { T0 } from '../builders.ts';

const PRICE = 3_060_000; // p3.2xlarge on-demand, µUSD per hour

function world(warmPool?: { size: number; state: 'Stopped' | 'Hibernated' }) {
  const clock = new VirtualClock(T0);
  const cloud = new SimCloud({
    clock,
    random: new SeededRandom(1),
    bootSec: 180,
    bootJitter: 0,
    priceOf: () => PRICE,
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
