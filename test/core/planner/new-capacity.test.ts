import { describe, expect, it } from 'vitest';
import { useExistingCapacity } from '../../../core/planner/existing-capacity.ts';
import { buyNewCapacity, scaleUps } from '../../../core/planner/new-capacity.ts';
import { resumeMoveMicroUsd } from '../../../core/planner/state.ts';
import { defaultNetworkLayout, saveSizeOf } from '../../../core/bytes.ts';
import { makeOffering } from '../../../core/catalog.ts';
import { shippedByteRates } from '../../../cloud/prices.ts';
import { emptySpotModel, observe } from '../../../core/spot-model.ts';
import { aGroup, aJob, aNode, pricesFor, T0 } from '../../builders.ts';
import { classified } from './support.ts';

function buyFor(over: Parameters<typeof classified>[0]) {
  const { st, entries } = classified(over);
  const stuck = buyNewCapacity(st, useExistingCapacity(st, entries));
  return { st, stuck, ups: scaleUps(st) };
}

describe('planner phase: new capacity', () => {
  const small = aGroup({ instanceType: 'g5.xlarge' });
  const big = aGroup({ instanceType: 'g5.12xlarge' });

  it('buys what is cheapest per GPU the waiting work would use: two small machines for two 1-GPU jobs', () => {
    const jobs = [aJob({ id: 'team-a.1' }), aJob({ id: 'team-a.2' })];
    const { st, stuck, ups } = buyFor({ groups: [small, big], pendingJobs: jobs });
    expect(stuck).toEqual([]);
    expect(ups).toEqual([expect.objectContaining({ kind: 'scale-up', groupId: small.id, fromDesired: 0, toDesired: 2 })]);
    expect(st.waiting[0]!.reason.message).toMatch(/lowest expected cost per GPU used \(\$1\.006\/GPU-h; 1 of its 1 GPUs/);
    // The plan's expected cost is the two machines.
    expect(Math.round(st.addedExpected)).toBe(2 * 1_006_000);
  });

  it('says, for a spot machine, the survival the spot model gave the pool and why', () => {
    const spot = aGroup({ capacityType: 'spot' });
    const model = emptySpotModel();
    observe(model, spot.offerings[0]!.id, true, T0 - 3 * 3_600_000);
    observe(model, spot.offerings[0]!.id, true, T0);
    const { st } = buyFor({ groups: [spot], pendingJobs: [aJob({ spec: { expectedRuntimeSec: 3600 } })], spotModel: model });
    expect(st.waiting[0]!.reason.message).toMatch(/spot/);
    expect(st.waiting[0]!.reason.message).toMatch(/P\(survives \d+ min\) \d\.\d{3}: up 180 min since its last recovery/);
  });

  it('counts on launches in flight first, then fills a machine bought in this plan before buying another', () => {
    const jobs = [1, 2, 3, 4].map((i) => aJob({ id: `team-a.${i}` }));
    const launching = buyFor({ groups: [{ ...big, desiredCapacity: 1 }], pendingJobs: jobs });
    expect(launching.stuck).toEqual([]);
    expect(launching.ups).toEqual([]);
    expect(launching.st.waiting.map((w) => w.reason.code)).toEqual([
      'waiting-for-boot',
      'waiting-for-boot',
      'waiting-for-boot',
      'waiting-for-boot',
    ]);
    const fresh = buyFor({ groups: [big], pendingJobs: jobs });
    expect(fresh.ups).toEqual([expect.objectContaining({ groupId: big.id, fromDesired: 0, toDesired: 1 })]);
    expect(fresh.st.waiting.map((w) => w.reason.message)).toEqual([
      expect.stringMatching(/^new g5\.12xlarge \(on-demand, us-east-1a\) ordered for it: /),
      ...[2, 3, 4].map(() => 'shares a new g5.12xlarge (on-demand, us-east-1a) ordered in this plan'),
    ]);
  });

  it('returns the jobs no group can take, with why, for preemption to look at; it never touches live machines', () => {
    const full = { ...small, maxSize: 1, desiredCapacity: 1 };
    const { st, stuck, ups } = buyFor({
      groups: [full],
      nodes: [aNode('i-1', { group: full })],
      pendingJobs: [aJob({ id: 'team-a.1' }), aJob({ id: 'team-a.2' })],
    });
    expect(ups).toEqual([]);
    expect(stuck.map((s) => [s.entry.job.id, s.why.code])).toEqual([['team-a.2', 'group-at-max']]);
    expect(st.actions.map((a) => a.kind)).toEqual(['place']); // the placement is existing capacity's
  });
});

describe('a job moved between clouds pays to read its newest save across (resumeMoveMicroUsd)', () => {
  // The same machine offered in an AWS region and a GCP region, GCP's 5% cheaper: what decides is where the job's save is.
  const aws = aGroup({ id: 'aws-g5', instanceType: 'g5.xlarge' });
  const gcpOffering = makeOffering({
    cloud: 'gcp',
    region: 'us-central1',
    zone: 'us-central1-a',
    instanceType: 'g5.xlarge',
    capacityType: 'on-demand',
  });
  const gcp = {
    ...aGroup({ id: 'gcp-g5', instanceType: 'g5.xlarge' }),
    cloud: 'gcp' as const,
    region: 'us-central1',
    offerings: [gcpOffering],
  };
  const prices = pricesFor([aws, gcp]);
  const od = prices.get(gcpOffering.id)!;
  prices.set(gcpOffering.id, { ...od, priceMicroUsdPerHour: Math.round(od.priceMicroUsdPerHour * 0.95) });
  const saveBytes = {
    store: { cloud: 'aws' as const, region: 'us-east-1' },
    roots: [{ root: 'gs://fleet-us-central1/checkpoints/', site: { cloud: 'gcp' as const, region: 'us-central1' } }],
    layout: defaultNetworkLayout(['us-east-1a']),
    rates: shippedByteRates(),
  };
  const resuming = (location: string, bytes = 2000e9) =>
    aJob({
      id: 'team-a.moved',
      spec: { expectedRuntimeSec: 10 * 3600 },
      checkpoint: {
        jobId: 'team-a.moved',
        attempt: 1,
        location,
        completedAtMs: T0 - 60_000,
        progressSec: 3600,
        size: saveSizeOf([bytes]),
      },
    });
  const boughtIn = (job: ReturnType<typeof aJob>) => {
    const { st, ups } = buyFor({ groups: [aws, gcp], prices, pendingJobs: [job], saveBytes });
    return { group: ups[0]?.kind === 'scale-up' ? ups[0].groupId : undefined, why: st.waiting[0]!.reason.message };
  };

  it('stays in the cloud its 2 TB save is in when reading it across costs more than the cheaper machines save', () => {
    const inS3 = boughtIn(resuming('s3://fleet/checkpoints/team-a.moved/attempt-1/s/'));
    expect(inS3.group).toBe('aws-g5');
    const inGcs = boughtIn(resuming('gs://fleet-us-central1/checkpoints/team-a.moved/attempt-1/s/'));
    expect(inGcs.group).toBe('gcp-g5');
    // With nothing to read back, the cheaper machines win.
    expect(boughtIn(aJob({ id: 'team-a.fresh', spec: { expectedRuntimeSec: 10 * 3600 } })).group).toBe('gcp-g5');
  });

  it('prices the read at the sender’s egress and the machine’s NAT, and nothing within the save’s own site', () => {
    const { st } = classified({ groups: [aws, gcp], prices, saveBytes });
    const job = resuming('s3://fleet/checkpoints/team-a.moved/attempt-1/s/');
    const across = resumeMoveMicroUsd(st.s, job, gcpOffering.id);
    // 2,000 GB out of S3 to the internet ($0.09/GB) and through GCP's Cloud NAT ($0.045/GiB), and the GETs.
    expect(across.from).toBe('aws:us-east-1');
    expect(across.microUsd / 1e6).toBeGreaterThan(2000 * 0.09);
    expect(resumeMoveMicroUsd(st.s, job, aws.offerings[0]!.id)).toEqual({ microUsd: 0 });
    expect(resumeMoveMicroUsd({ ...st.s, saveBytes: undefined }, job, gcpOffering.id)).toEqual({ microUsd: 0 });
    // The decision record names the move when it weighed on the choice.
    const moved = buyFor({ groups: [gcp], prices, pendingJobs: [job], saveBytes });
    expect(moved.st.waiting[0]!.reason.message).toMatch(/counting \$\d+\.\d\d to read its newest save from aws:us-east-1 \(another site\)/);
  });

  it('places a resuming job on a machine already paid for beside its save before one elsewhere; elsewhere only when none fits, and the reason prices the read', () => {
    // One free GPU machine in each cloud; the GCP one is the cheaper kind to buy (the job's home), the AWS one is fuller-fitting.
    const awsNode = aNode('i-aws', { group: aws });
    const gcpBase = aNode('gcp-1', { group: gcp });
    const gcpNode = { ...gcpBase, instance: { ...gcpBase.instance, cloud: 'gcp' as const, region: 'us-central1', zone: 'us-central1-a' } };
    const placedOn = (job: ReturnType<typeof aJob>, nodes: ReturnType<typeof aNode>[]) => {
      const { st, entries } = classified({ groups: [aws, gcp], prices, nodes, pendingJobs: [job], saveBytes });
      useExistingCapacity(st, entries);
      const place = st.actions.find((a) => a.kind === 'place');
      return place?.kind === 'place' ? { node: place.placement.nodes[0]!.nodeId, why: place.reason.message } : undefined;
    };
    const inS3 = resuming('s3://fleet/checkpoints/team-a.moved/attempt-1/s/');
    const inGcs = resuming('gs://fleet-us-central1/checkpoints/team-a.moved/attempt-1/s/');
    expect(placedOn(inS3, [awsNode, gcpNode])).toMatchObject({ node: 'i-aws', why: expect.not.stringMatching(/another site/) });
    expect(placedOn(inGcs, [awsNode, gcpNode])).toMatchObject({ node: 'gcp-1', why: expect.not.stringMatching(/another site/) });
    // Only the other cloud has room. A 20 GB save is read across for about $2, less than 10 hours of a machine beside it:
    // the job goes there (the machine is paid for), and the decision names the read's price.
    expect(placedOn(resuming('s3://fleet/checkpoints/team-a.moved/attempt-1/s/', 20e9), [gcpNode])).toMatchObject({
      node: 'gcp-1',
      why: expect.stringMatching(/; \$\d+\.\d\d to read its newest save from aws:us-east-1 \(another site\)$/),
    });
    // Reading a 2 TB save across costs more than buying its 10 hours beside it: it is left to be bought for (in its save's cloud).
    expect(placedOn(inS3, [gcpNode])).toBeUndefined();
    const { st, entries } = classified({ groups: [aws, gcp], prices, nodes: [gcpNode], pendingJobs: [inS3], saveBytes });
    buyNewCapacity(st, useExistingCapacity(st, entries));
    expect(scaleUps(st)).toEqual([expect.objectContaining({ kind: 'scale-up', groupId: 'aws-g5' })]);
    // A job with nothing to read back takes the free machine of its cheapest kind, as before.
    expect(placedOn(aJob({ id: 'team-a.fresh', spec: { expectedRuntimeSec: 10 * 3600 } }), [awsNode, gcpNode])?.node).toBe('gcp-1');
  });
});
