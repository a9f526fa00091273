import { describe, expect, it } from 'vitest';
import { makeOffering } from '../../core/catalog.ts';
import { shippedCatalog } from '../../cloud/catalog/all-shipped.ts';
import { AvailabilityLowerBound, floorPools, spotFloorCost, type FloorPool } from '../../cloud/sim/cost-floors.ts';
import type { SimEnvironment } from '../../cloud/sim/environment.ts';
import { groupOfferings, type SimGroupConfig } from '../../cloud/sim/sim-cloud.ts';
import { aJob } from '../builders.ts';

const pool = (zone: string, capacityType: 'spot' | 'on-demand', perGpu: number): FloorPool => ({
  offering: makeOffering({ cloud: 'aws', region: 'us-east-1', zone, instanceType: 'p3.2xlarge', capacityType }),
  model: 'V100',
  spot: capacityType === 'spot',
  perGpu,
});
const POOLS = [pool('us-east-1a', 'spot', 900_000), pool('us-east-1b', 'spot', 1_200_000), pool('us-east-1a', 'on-demand', 3_060_000)];
const HOUR = 3_600_000;

describe('the yardsticks of a replay', () => {
  it('prices useful work at spot only while a spot pool the job may use could give a machine, else on-demand', () => {
    // Zone a has spot in hour 0 only, zone b in hours 0 and 1, neither in hour 2.
    const open = (o: { zone: string }, atMs: number) => (o.zone === 'us-east-1a' ? atMs < HOUR : atMs < 2 * HOUR);
    const bound = new AvailabilityLowerBound(POOLS, open);
    const batch = aJob({ id: 'nlp.batch', spec: { interruptible: true, gpu: { kind: 'whole', count: 1, models: ['V100'] } } });
    const steady = aJob({ id: 'nlp.steady', spec: { interruptible: false, gpu: { kind: 'whole', count: 1, models: ['V100'] } } });
    for (let h = 0; h < 3; h++) bound.note(h * HOUR, HOUR, [batch, steady]);
    // 3 GPU-hours of useful work each, spread over the three hours it ran.
    const useful = new Map([
      [batch.id, 3 * HOUR],
      [steady.id, 3 * HOUR],
    ]);
    expect(bound.cost([batch, steady], useful)).toBe(900_000 + 1_200_000 + 3_060_000 + 3 * 3_060_000);
    // The spot floor ignores the outages: all of the interruptible work at the cheapest spot price.
    expect(spotFloorCost(POOLS, [batch, steady], useful)).toBe(3 * 900_000 + 3 * 3_060_000);
  });

  it('counts no work for a job that did none, and never prices a pool the job may not use', () => {
    const bound = new AvailabilityLowerBound(POOLS, () => true);
    const a100 = aJob({ id: 'cv.a100', spec: { interruptible: true, gpu: { kind: 'whole', count: 1, models: ['A100-80GB'] } } });
    const idle = aJob({ id: 'cv.idle', spec: { interruptible: true } });
    bound.note(0, HOUR, [a100, idle]);
    expect(bound.cost([a100, idle], new Map([[a100.id, HOUR]]))).toBe(0);
  });
});

describe('the yardsticks’ pools', () => {
  it('are the offerings the simulated groups launch, GCP regions included (us-central1-a is in us-central1)', () => {
    const env = { catalog: shippedCatalog(), priceOf: () => ({ price: 4_000_000, onDemand: 4_000_000 }) } as unknown as SimEnvironment;
    const gcp: SimGroupConfig = {
      id: 'a100-spot',
      cloud: 'gcp',
      instanceTypes: ['a2-highgpu-1g'],
      zones: ['us-central1-a'],
      capacityType: 'spot',
      minSize: 0,
      maxSize: 4,
    };
    const pools = floorPools(env, [gcp]);
    expect(pools.map((p) => p.offering)).toEqual(groupOfferings(gcp));
    expect(pools[0]).toMatchObject({ offering: { region: 'us-central1', zone: 'us-central1-a' }, model: 'A100-40GB', spot: true });
  });
});
