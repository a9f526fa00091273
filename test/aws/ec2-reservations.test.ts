import { DescribeCapacityReservationsCommand, EC2Client, type CapacityReservation } from '@aws-sdk/client-ec2';
import { mockClient } from 'aws-sdk-client-mock';
import { beforeEach, describe, expect, it } from 'vitest';
import { Ec2Reservations } from '../../cloud/aws/ec2-reservations.ts';
import { isCloudError } from '../../core/errors.ts';
import { awsError } from '../support/fake-aws.ts';

// DescribeCapacityReservations responses assembled from the EC2 API reference (CapacityReservation: its fields, states and
// ReservationType values), not recorded: there is no recorded response in ../shared/data. Ids, dates and counts are made up.
const P5_OD = 98_320_000; // µUSD/h, the on-demand price the lookup below gives

const odcr: CapacityReservation = {
  CapacityReservationId: 'cr-0a1b2c3d4e5f60718',
  OwnerId: '123456789012',
  InstanceType: 'p5.48xlarge',
  InstancePlatform: 'Linux/UNIX',
  AvailabilityZone: 'us-east-1a',
  Tenancy: 'default',
  TotalInstanceCount: 4,
  AvailableInstanceCount: 1,
  State: 'active',
  StartDate: new Date('2026-11-01T00:00:00Z'),
  EndDateType: 'unlimited',
  InstanceMatchCriteria: 'targeted',
  ReservationType: 'default',
  Tags: [{ Key: 'gpu-fleet:managed', Value: 'true' }],
};
const block: CapacityReservation = {
  CapacityReservationId: 'cr-0b10c0000000000a1',
  InstanceType: 'p5.48xlarge',
  AvailabilityZone: 'us-east-1b',
  TotalInstanceCount: 2,
  AvailableInstanceCount: 2,
  State: 'scheduled',
  StartDate: new Date('2026-12-03T11:30:00Z'),
  EndDate: new Date('2026-12-04T11:30:00Z'),
  EndDateType: 'limited',
  InstanceMatchCriteria: 'targeted',
  ReservationType: 'capacity-block',
  CapacityBlockId: 'cb-0123456789abcdef0',
  // 2 machines × 24 h for $1,510.08: $31.46 per machine-hour.
  Tags: [
    { Key: 'gpu-fleet:managed', Value: 'true' },
    { Key: 'gpu-fleet:upfront-fee-usd', Value: '1510.08' },
  ],
};
const reclaimable: CapacityReservation = {
  ...odcr,
  CapacityReservationId: 'cr-0c0ffee0000000001',
  State: 'payment-pending',
  Interruptible: true,
  Tags: [{ Key: 'team', Value: 'nlp' }],
};

describe('EC2 capacity reservations', () => {
  const client = new EC2Client({ region: 'us-east-1', credentials: { accessKeyId: 'x', secretAccessKey: 'x' } });
  const ec2 = mockClient(client);
  const source = (selector?: ConstructorParameters<typeof Ec2Reservations>[1]['selector']) =>
    new Ec2Reservations(client, {
      region: 'us-east-1',
      ...(selector ? { selector } : {}),
      onDemandPrice: (type) => (type === 'p5.48xlarge' ? P5_OD : undefined),
    });
  beforeEach(() => ec2.reset());

  it('finds reservations by the managed tag, page by page, and those the groups name, each once', async () => {
    ec2
      .on(DescribeCapacityReservationsCommand, { CapacityReservationIds: ['cr-0a1b2c3d4e5f60718', 'cr-0c0ffee0000000001'] })
      .resolves({ CapacityReservations: [odcr, reclaimable] })
      .on(DescribeCapacityReservationsCommand, { Filters: [{ Name: 'tag:gpu-fleet:managed', Values: ['true'] }], NextToken: undefined })
      .resolves({ CapacityReservations: [odcr], NextToken: 'page-2' })
      .on(DescribeCapacityReservationsCommand, { NextToken: 'page-2' })
      .resolves({ CapacityReservations: [block] });
    const s = source();
    const out = await s.listReservations(['cr-0c0ffee0000000001', 'cr-0a1b2c3d4e5f60718', 'cr-0a1b2c3d4e5f60718']);
    expect(ec2.commandCalls(DescribeCapacityReservationsCommand).map((c) => c.args[0].input)).toEqual([
      { CapacityReservationIds: ['cr-0a1b2c3d4e5f60718', 'cr-0c0ffee0000000001'] },
      { Filters: [{ Name: 'tag:gpu-fleet:managed', Values: ['true'] }], MaxResults: 1000 },
      { Filters: [{ Name: 'tag:gpu-fleet:managed', Values: ['true'] }], MaxResults: 1000, NextToken: 'page-2' },
    ]);
    expect(out.map((r) => r.id).sort()).toEqual(['cr-0a1b2c3d4e5f60718', 'cr-0b10c0000000000a1', 'cr-0c0ffee0000000001']);
    const byId = new Map(out.map((r) => [r.id, r]));
    expect(byId.get('cr-0a1b2c3d4e5f60718')).toMatchObject({
      kind: 'odcr',
      interruptible: false,
      zone: 'us-east-1a',
      instanceType: 'p5.48xlarge',
      totalCount: 4,
      availableCount: 1,
      state: 'active',
      priceMicroUsdPerHour: P5_OD,
      startMs: Date.parse('2026-11-01T00:00:00Z'),
    });
    expect(byId.get('cr-0a1b2c3d4e5f60718')!.endMs).toBeUndefined();
    expect(byId.get('cr-0b10c0000000000a1')).toMatchObject({
      kind: 'capacity-block',
      state: 'scheduled',
      endMs: Date.parse('2026-12-04T11:30:00Z'),
      priceMicroUsdPerHour: 31_460_000,
    });
    // Interruptible, and not usable yet (payment pending).
    expect(byId.get('cr-0c0ffee0000000001')).toMatchObject({ interruptible: true, state: 'pending' });
    expect(s.problems).toEqual([]);
  });

  it('selects by id and by every tag of a term; a block without its fee is priced at on-demand and said so', async () => {
    const feeless = { ...block, Tags: [{ Key: 'team', Value: 'nlp' }] };
    ec2
      .on(DescribeCapacityReservationsCommand, { CapacityReservationIds: ['cr-0b10c0000000000a1'] })
      .resolves({ CapacityReservations: [feeless] })
      .on(DescribeCapacityReservationsCommand, {
        Filters: [
          { Name: 'tag:team', Values: ['nlp'] },
          { Name: 'tag:env', Values: ['prod'] },
        ],
      })
      .resolves({ CapacityReservations: [] });
    const s = source([{ id: 'cr-0b10c0000000000a1' }, { tags: { team: 'nlp', env: 'prod' } }]);
    const [r] = await s.listReservations([]);
    expect(r).toMatchObject({ id: 'cr-0b10c0000000000a1', priceMicroUsdPerHour: P5_OD });
    expect(s.problems).toEqual([
      'Capacity Block cr-0b10c0000000000a1: tag gpu-fleet:upfront-fee-usd (its up-front fee in dollars) is missing; priced at on-demand, which overstates it',
    ]);
  });

  it('says which call failed, in gpu-fleet’s error codes', async () => {
    ec2
      .on(DescribeCapacityReservationsCommand)
      .rejects(awsError('UnauthorizedOperation', 'You are not authorized to perform this operation.'));
    const error = await source()
      .listReservations([])
      .catch((e: unknown) => e);
    expect(isCloudError(error) && error.code).toBe('access-denied');
    expect((error as Error).message).toMatch(/not authorized/);
  });
});
