import { EC2Client } from '@aws-sdk/client-ec2';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SpotPlacementScores } from '../../cloud/aws/spot-placement-scores.ts';
import { VirtualClock } from '../../cloud/sim/clock.ts';
import { startFakeEc2Scores, type FakeEc2Scores } from '../support/fake-ec2-scores.ts';

const REGION = 'us-west-2';
// Zone ids map to different names in each account: this account's usw2-az2 is us-west-2a.
const ZONES = { 'usw2-az2': 'us-west-2a', 'usw2-az1': 'us-west-2b', 'usw2-az3': 'us-west-2c', 'usw2-az4': 'us-west-2d' };
const TYPES = ['p3.2xlarge', 'p3.8xlarge', 'p3.16xlarge'];

describe('Spot Placement Scores (EC2 over HTTP, a local endpoint built from the API reference)', () => {
  let fake: FakeEc2Scores;
  let ec2: EC2Client;
  beforeAll(async () => {
    fake = await startFakeEc2Scores(REGION, ZONES);
    ec2 = new EC2Client({
      region: REGION,
      endpoint: fake.endpoint,
      credentials: { accessKeyId: 'x', secretAccessKey: 'x' },
      maxAttempts: 1,
    });
  });
  afterAll(async () => fake.close());

  it('scores each zone of the region by its name in this account, asking with the group’s types', async () => {
    fake.scores = new Map([
      ['usw2-az2', 9],
      ['usw2-az1', 3],
    ]);
    const clock = new VirtualClock(Date.UTC(2026, 11, 3));
    const sps = new SpotPlacementScores(ec2, { region: REGION, clock });
    const scores = await sps.scores({ instanceTypes: TYPES, targetCapacity: 4 });
    expect(Object.fromEntries(scores)).toEqual({ 'us-west-2a': 9, 'us-west-2b': 3, 'us-west-2c': 5, 'us-west-2d': 5 });
    const call = fake.calls.find((c) => c.action === 'GetSpotPlacementScores')!.params;
    expect(call).toMatchObject({
      TargetCapacity: '4',
      SingleAvailabilityZone: 'true',
      'RegionName.1': REGION,
      TargetCapacityUnitType: 'units',
    });
    expect([call['InstanceType.1'], call['InstanceType.2'], call['InstanceType.3']]).toEqual(['p3.16xlarge', 'p3.2xlarge', 'p3.8xlarge']);
  });

  it('asks one configuration at most once an hour, and never for fewer than three types (their score is always low)', async () => {
    const clock = new VirtualClock(Date.UTC(2026, 11, 3));
    const sps = new SpotPlacementScores(ec2, { region: REGION, clock });
    const asked = () => fake.calls.filter((c) => c.action === 'GetSpotPlacementScores').length;
    const before = asked();
    await sps.scores({ instanceTypes: TYPES, targetCapacity: 2 });
    clock.advanceBy(59 * 60_000);
    fake.scores = new Map([['usw2-az2', 1]]);
    expect((await sps.scores({ instanceTypes: TYPES, targetCapacity: 2 })).get('us-west-2a')).not.toBe(1);
    expect(asked()).toBe(before + 1);
    clock.advanceBy(2 * 60_000);
    expect((await sps.scores({ instanceTypes: TYPES, targetCapacity: 2 })).get('us-west-2a')).toBe(1);
    expect(asked()).toBe(before + 2);
    expect((await sps.scores({ instanceTypes: ['p3.2xlarge', 'p3.16xlarge'], targetCapacity: 2 })).size).toBe(0);
    expect(asked()).toBe(before + 2);
  });

  it('turns itself off for a day when the account refuses, keeping the last answer, and says why', async () => {
    const clock = new VirtualClock(Date.UTC(2026, 11, 3));
    const sps = new SpotPlacementScores(ec2, { region: REGION, clock });
    fake.scores = new Map([['usw2-az2', 8]]);
    await sps.scores({ instanceTypes: TYPES, targetCapacity: 1 });
    fake.refuse = 'UnauthorizedOperation';
    clock.advanceBy(2 * 3_600_000);
    expect((await sps.scores({ instanceTypes: TYPES, targetCapacity: 1 })).get('us-west-2a')).toBe(8);
    expect(sps.problem).toMatch(/^Spot Placement Scores are off until 2026-12-04T02:00:00\.000Z: the account refused them/);
    const calls = fake.calls.length;
    clock.advanceBy(12 * 3_600_000);
    await sps.scores({ instanceTypes: TYPES, targetCapacity: 1 });
    expect(fake.calls.length).toBe(calls);
    fake.refuse = undefined;
    clock.advanceBy(13 * 3_600_000);
    await sps.scores({ instanceTypes: TYPES, targetCapacity: 1 });
    expect(fake.calls.length).toBe(calls + 1);
    expect(sps.problem).toBeUndefined();
  });

  it('the local endpoint is as strict as the reference: capacity required and positive, MaxResults 10 to 1000', async () => {
    const { GetSpotPlacementScoresCommand } = await import('@aws-sdk/client-ec2');
    await expect(ec2.send(new GetSpotPlacementScoresCommand({ InstanceTypes: TYPES, TargetCapacity: 0 }))).rejects.toMatchObject({
      name: 'InvalidParameterValue',
    });
    await expect(
      ec2.send(new GetSpotPlacementScoresCommand({ InstanceTypes: TYPES, TargetCapacity: 1, MaxResults: 5 })),
    ).rejects.toMatchObject({
      name: 'InvalidParameterValue',
    });
  });
});

describe('the price source with placement scores', () => {
  it('puts its zone’s score on each spot quote (one machine, the region’s spot types), none on on-demand, and prices without scores when they fail', async () => {
    const { mockClient } = await import('aws-sdk-client-mock');
    const { DescribeSpotPriceHistoryCommand } = await import('@aws-sdk/client-ec2');
    const { AwsPriceSource } = await import('../../cloud/aws/ec2-catalog.ts');
    const { makeOffering } = await import('../../core/catalog.ts');
    const fake = await startFakeEc2Scores(REGION, ZONES);
    try {
      const scoresClient = new EC2Client({
        region: REGION,
        endpoint: fake.endpoint,
        credentials: { accessKeyId: 'x', secretAccessKey: 'x' },
        maxAttempts: 1,
      });
      const priceClient = new EC2Client({ region: REGION, credentials: { accessKeyId: 'x', secretAccessKey: 'x' } });
      mockClient(priceClient).on(DescribeSpotPriceHistoryCommand).resolves({ SpotPriceHistory: [] });
      const clock = new VirtualClock(Date.UTC(2026, 11, 3));
      const sps = new SpotPlacementScores(scoresClient, { region: REGION, clock });
      const prices = new AwsPriceSource(priceClient, { clock, placementScores: (r) => (r === REGION ? sps : undefined) });
      const offer = (zone: string, instanceType: string, capacityType: 'spot' | 'on-demand') =>
        makeOffering({ cloud: 'aws', region: REGION, zone, instanceType, capacityType });
      const offerings = [
        ...TYPES.map((t) => offer('us-west-2a', t, 'spot')),
        offer('us-west-2b', 'p3.2xlarge', 'spot'),
        offer('us-west-2a', 'p3.2xlarge', 'on-demand'),
      ];
      fake.scores = new Map([
        ['usw2-az2', 9],
        ['usw2-az1', 2],
      ]);
      const out = await prices.prices(offerings);
      expect(out.get('aws/us-west-2a/p3.8xlarge/spot')?.placementScore).toBe(9);
      expect(out.get('aws/us-west-2b/p3.2xlarge/spot')?.placementScore).toBe(2);
      expect(out.get('aws/us-west-2a/p3.2xlarge/on-demand')?.placementScore).toBeUndefined();
      const asked = fake.calls.find((c) => c.action === 'GetSpotPlacementScores')!.params;
      expect(asked.TargetCapacity).toBe('1');
      expect([asked['InstanceType.1'], asked['InstanceType.2'], asked['InstanceType.3']]).toEqual([
        'p3.16xlarge',
        'p3.2xlarge',
        'p3.8xlarge',
      ]);
      // Refused before any answer: the quotes go without scores, each keeping its Advisor band.
      fake.refuse = 'UnauthorizedOperation';
      const fresh = new AwsPriceSource(priceClient, {
        clock,
        placementScores: () => new SpotPlacementScores(scoresClient, { region: REGION, clock }),
      });
      const refused = await fresh.prices(offerings);
      expect(refused.get('aws/us-west-2a/p3.8xlarge/spot')).toMatchObject({ interruptionBand: expect.any(String) });
      expect(refused.get('aws/us-west-2a/p3.8xlarge/spot')?.placementScore).toBeUndefined();
    } finally {
      await fake.close();
    }
  });
});
