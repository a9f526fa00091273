import { describe, expect, it } from 'vitest';
import { SeededRandom, VirtualClock } from '../../cloud/sim/clock.ts';
import { SimCloud } from '../../cloud/sim/sim-cloud.ts';
import { T0 } from '../builders.ts';

/**
 * EC2 Auto Scaling keeps "an equal number of instances across enabled Availability Zones" and,
 * with the default balanced-best-effort distribution, launches in another zone where one fails
 * (AvailabilityZoneDistribution, API reference); the allocation strategy picks pools within a zone.
 */
describe('the simulated Auto Scaling group spreads spot machines over its zones', () => {
  function world(noCapacityIn?: string) {
    const clock = new VirtualClock(T0);
    const cloud = new SimCloud({
      clock,
      random: new SeededRandom(1),
      bootSec: 180,
      bootJitter: 0,
      // 2a is the cheaper zone.
      priceOf: (o) => (o.zone === 'us-west-2a' ? 900_000 : 1_100_000),
      ...(noCapacityIn ? { capacity: { obtainable: (o) => o.zone !== noCapacityIn } } : {}),
      groups: [
        {
          id: 'v100-spot',
          instanceTypes: ['p3.2xlarge'],
          zones: ['us-west-2a', 'us-west-2b'],
          capacityType: 'spot',
          minSize: 0,
          maxSize: 10,
        },
      ],
    });
    return { clock, cloud };
  }

  const zones = (cloud: SimCloud) => cloud.allInstances().map((i) => i.offering.zone);

  it('balances its machines across the zones, the cheaper zone first on a tie, whatever the price gap', async () => {
    const { cloud } = world();
    await cloud.setDesiredCapacity('v100-spot', 5);
    cloud.tick();
    expect(zones(cloud)).toEqual(['us-west-2a', 'us-west-2b', 'us-west-2a', 'us-west-2b', 'us-west-2a']);
  });

  it('launches in the other zone where one has no capacity (balanced best effort), and records the failure', async () => {
    const { cloud } = world('us-west-2b');
    await cloud.setDesiredCapacity('v100-spot', 3);
    cloud.tick();
    expect(zones(cloud)).toEqual(['us-west-2a', 'us-west-2a', 'us-west-2a']);
    const failures = await cloud.launchFailures(T0 - 1);
    expect(failures.map((f) => [f.offeringId?.includes('us-west-2b') ?? false, f.code])).toContainEqual([
      true,
      'InsufficientInstanceCapacity',
    ]);
  });
});
