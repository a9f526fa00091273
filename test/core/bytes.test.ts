import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  addUsage,
  defaultNetworkLayout,
  MAX_PARTS,
  MIN_PART_BYTES,
  partBytesFor,
  logUsage,
  priceBytes,
  saveSizeOf,
  storageUsage,
  storeSiteFor,
  storeSiteOf,
  transferCharges,
  uploadRequests,
  transferUsage,
  type ByteUsage,
  type NetworkLayout,
  type Site,
} from '../../core/bytes.ts';
import { shippedByteRates, siteRates } from '../../cloud/prices.ts';

const GIB = 2 ** 30;
const inA: Site = { cloud: 'aws', region: 'us-east-1', zone: 'us-east-1a' };
const inB: Site = { cloud: 'aws', region: 'us-east-1', zone: 'us-east-1b' };
const s3: Site = { cloud: 'aws', region: 'us-east-1' };
const gce: Site = { cloud: 'gcp', region: 'us-central1', zone: 'us-central1-a' };
const gcs: Site = { cloud: 'gcp', region: 'us-central1' };
const gateway = defaultNetworkLayout(['us-east-1a', 'us-east-1b']);
const oneNat: NetworkLayout = { s3Path: 'nat', natZones: ['us-east-1a'] };
const rates = shippedByteRates();

describe('the path a checkpoint byte takes (transferCharges)', () => {
  it('is free through the S3 gateway endpoint, and to a bucket in the GCP machine’s own region', () => {
    expect(transferCharges({ machine: inB, store: s3, direction: 'up', layout: gateway })).toEqual([]);
    expect(transferCharges({ machine: gce, store: gcs, direction: 'down', layout: gateway })).toEqual([]);
  });

  it('pays NAT processing through a NAT gateway, and a zone crossing each way from a zone without one', () => {
    expect(transferCharges({ machine: inA, store: s3, direction: 'up', layout: oneNat })).toEqual([
      { charge: 'nat', billedBy: 'aws:us-east-1', times: 1 },
    ]);
    expect(transferCharges({ machine: inB, store: s3, direction: 'down', layout: oneNat })).toEqual([
      { charge: 'nat', billedBy: 'aws:us-east-1', times: 1 },
      { charge: 'cross-zone', billedBy: 'aws:us-east-1', times: 2 },
    ]);
    expect(transferCharges({ machine: inB, store: s3, direction: 'up', layout: { s3Path: 'interface-endpoint', natZones: [] } })).toEqual([
      { charge: 'interface-endpoint', billedBy: 'aws:us-east-1', times: 1 },
    ]);
  });

  it('between clouds, the sender’s egress and the machine’s own NAT, whatever the S3 path', () => {
    expect(transferCharges({ machine: gce, store: s3, direction: 'up', layout: gateway })).toEqual([
      { charge: 'internet-egress', billedBy: 'gcp:us-central1', times: 1 },
      { charge: 'nat', billedBy: 'gcp:us-central1', times: 1 },
    ]);
    expect(transferCharges({ machine: gce, store: s3, direction: 'down', layout: gateway })[0]).toEqual({
      charge: 'internet-egress',
      billedBy: 'aws:us-east-1',
      times: 1,
    });
    expect(
      transferCharges({ machine: { ...inA, region: 'us-west-2', zone: 'us-west-2a' }, store: s3, direction: 'up', layout: gateway })[0]!
        .charge,
    ).toBe('inter-region');
  });
});

describe('requests an upload makes', () => {
  it('is one PUT up to 64 MiB, else initiate, a PUT per part of at least 64 MiB, complete', () => {
    expect(uploadRequests(10 * 1024 * 1024)).toBe(1);
    expect(uploadRequests(64 * 1024 * 1024)).toBe(1);
    expect(uploadRequests(24 * GIB)).toBe(384 + 2);
    expect(uploadRequests(640 * GIB)).toBe(500 + 2);
  });

  it('never needs more than 500 parts, each at least 64 MiB and in whole MiB (property)', () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 5 * 1024 * GIB }), (bytes) => {
        const part = partBytesFor(bytes);
        expect(part).toBeGreaterThanOrEqual(MIN_PART_BYTES);
        expect(part % (1024 * 1024)).toBe(0);
        expect(Math.ceil(bytes / part)).toBeLessThanOrEqual(MAX_PARTS);
      }),
    );
  });
});

describe('the bill of a usage, at the shipped list prices', () => {
  it('prices a GB through NAT at $0.045, a thousand PUTs at $0.005 and a GB-month of S3 at $0.023 (us-east-1)', () => {
    const natGb: ByteUsage = {
      'aws:us-east-1': { ...transferUsage({ machine: inA, store: s3, layout: oneNat, fileBytes: [1e9] }, 'up')['aws:us-east-1']! },
    };
    const bill = priceBytes(natGb, rates);
    expect(bill.networkMicroUsd).toBe(45_000);
    // Initiate, 15 parts of 64 MiB, complete: 17 PUTs at $0.005 a thousand.
    expect(bill.requestsMicroUsd).toBe(85);
    expect(priceBytes({ 'aws:us-east-1': { ...natGb['aws:us-east-1']!, writeRequests: 1000, transferBytes: {} } }, rates)).toMatchObject({
      requestsMicroUsd: 5000,
      networkMicroUsd: 0,
    });
    // A GB kept a month (730 hours), in GiB-hours.
    expect(priceBytes(storageUsage(s3, 1e9, 730 * 3_600_000), rates).storageMicroUsd).toBe(23_000);
  });

  it('counts, but never prices, usage on a site the table does not cover', () => {
    const elsewhere: Site = { cloud: 'gcp', region: 'us-west1', zone: 'us-west1-b' };
    const bill = priceBytes(
      transferUsage({ machine: elsewhere, store: { cloud: 'gcp', region: 'us-west1' }, layout: gateway, fileBytes: [GIB] }, 'up'),
      rates,
    );
    expect(bill).toEqual({
      storageMicroUsd: 0,
      requestsMicroUsd: 0,
      networkMicroUsd: 0,
      totalMicroUsd: 0,
      unpriced: ['gcp:us-west1 (no prices for this site)'],
    });
    expect(siteRates('gcp', 'us-west1')).toBeUndefined();
    expect([...rates.keys()].sort()).toEqual(['aws:us-east-1', 'aws:us-west-2', 'gcp:us-central1']);
  });

  it('adds up: a usage priced whole is within a micro-dollar a line of its parts priced apart (property)', () => {
    const use = fc.record({
      bytes: fc.integer({ min: 0, max: 200 * GIB }),
      hours: fc.integer({ min: 0, max: 200 }),
      nat: fc.boolean(),
      down: fc.boolean(),
    });
    fc.assert(
      fc.property(fc.array(use, { minLength: 1, maxLength: 20 }), (uses) => {
        const parts = uses.map((u) =>
          addUsage(
            transferUsage({ machine: inB, store: s3, layout: u.nat ? oneNat : gateway, fileBytes: [u.bytes] }, u.down ? 'down' : 'up'),
            storageUsage(s3, u.bytes, u.hours * 3_600_000),
          ),
        );
        const whole = priceBytes(
          parts.reduce((a, b) => addUsage(a, b), {}),
          rates,
        ).totalMicroUsd;
        const apart = parts.reduce((n, p) => n + priceBytes(p, rates).totalMicroUsd, 0);
        expect(Number.isSafeInteger(whole)).toBe(true);
        // Each part rounds each of its lines (storage, requests, nat, cross-zone) once.
        expect(Math.abs(whole - apart)).toBeLessThanOrEqual(4 * parts.length);
      }),
    );
  });
});

describe('saves kept in each site’s own bucket (StoreSites)', () => {
  const where = { store: s3, roots: [{ root: 'gs://fleet-us-central1/checkpoints/', site: gcs }], layout: gateway };
  it('prices a save at the bucket it is in: one in the GCP region’s bucket stays in the region, one in S3 crosses clouds', () => {
    expect(storeSiteOf(where, 'gs://fleet-us-central1/checkpoints/j/attempt-1/s/')).toEqual(gcs);
    expect(storeSiteOf(where, 's3://fleet/checkpoints/j/attempt-1/s/')).toEqual(s3);
    expect(storeSiteOf({ store: s3 }, 'gs://fleet-us-central1/checkpoints/j/attempt-1/s/')).toEqual(s3);
    expect(storeSiteFor(where, gce)).toEqual(gcs);
    expect(storeSiteFor(where, inA)).toEqual(s3);
    expect(storeSiteFor(where, { cloud: 'gcp', region: 'us-west1', zone: 'us-west1-b' })).toEqual(s3);
    const hour = 3_600_000;
    const save = (location: string) => ({
      owner: { jobId: 'j', team: 'nlp' },
      saves: [{ location, ...saveSizeOf([100 * GIB], location.startsWith('gs://') ? 'gcs' : 's3'), savedAtMs: 0, machine: gce }],
    });
    const regional = logUsage(save('gs://fleet-us-central1/checkpoints/j/attempt-1/s/'), where, 0, hour);
    const across = logUsage(save('s3://fleet/checkpoints/j/attempt-1/s/'), where, 0, hour);
    // In the region: stored and written in GCS (one operation for the file), no transfer charge anywhere.
    expect(regional['gcp:us-central1']).toMatchObject({ bytesUploaded: 100 * GIB, writeRequests: 1, transferBytes: {} });
    expect(regional['aws:us-east-1']).toBeUndefined();
    // Across clouds: S3 holds it (a PUT per part), and GCP bills the machine's egress and its Cloud NAT.
    expect(across['aws:us-east-1']).toMatchObject({ bytesUploaded: 100 * GIB, writeRequests: saveSizeOf([100 * GIB]).writeRequests });
    expect(across['gcp:us-central1']!.transferBytes).toEqual({ 'internet-egress': 100 * GIB, nat: 100 * GIB });
    const bill = (u: ByteUsage) => priceBytes(u, rates).totalMicroUsd;
    expect(bill(regional)).toBeLessThan(bill(across) / 10);
  });
});
