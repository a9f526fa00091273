import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { defaultNetworkLayout, saveSizeOf, type NetworkLayout, type Site } from '../../core/bytes.ts';
import { MIN_SAVE_EVERY_SEC, saveCadence, saveKeptSec, savePrice, type SavePriceInput } from '../../core/save-price.ts';
import { shippedByteRates } from '../../cloud/prices.ts';

const GIB = 2 ** 30;
const machine: Site = { cloud: 'aws', region: 'us-east-1', zone: 'us-east-1a' };
const s3: Site = { cloud: 'aws', region: 'us-east-1' };
const gcs: Site = { cloud: 'gcp', region: 'us-central1' };
const gateway = defaultNetworkLayout(['us-east-1a', 'us-east-1b']);
const nat: NetworkLayout = { s3Path: 'nat', natZones: ['us-east-1a', 'us-east-1b'] };
const rates = shippedByteRates();
/** 8 GPUs' memory of 80 GiB, one file per GPU: a p4de's checkpoint. */
const size = saveSizeOf(Array.from({ length: 8 }, () => 80 * GIB));
const base: Omit<SavePriceInput, 'everySec'> = {
  size,
  stallSec: (640 * 1024) / 500,
  gpuMicroUsdPerHour: 27_447_000,
  machine,
  store: s3,
  layout: gateway,
  rates,
};

/** Price of saves plus expected lost work, per second of work, at cadence τ: what the cadence minimises. */
function costRate(i: Omit<SavePriceInput, 'everySec'>, hazardPerHour: number, tau: number): number {
  return savePrice({ ...i, everySec: tau }).totalMicroUsd / tau + ((hazardPerHour / 3600) * (i.gpuMicroUsdPerHour / 3600) * tau) / 2;
}

describe('a save’s price (savePrice)', () => {
  it('is its stall’s GPU-time plus its bytes: storage while kept, a PUT per part, the path’s transfer', () => {
    const p = savePrice({ ...base, everySec: 600 });
    expect(p.keptSec).toBe(1200);
    // 1,310.72 s of a $27.447/h share.
    expect(p.stallMicroUsd).toBe(Math.round((1310.72 * 27_447_000) / 3600));
    // 640 GiB held 1,200 s at $0.023 per GB-month (730 h): 687.19 GB × 0.3333 h ÷ 730 × 23,000 µUSD.
    expect(p.bytes.storageMicroUsd).toBe(Math.round(((640 * GIB) / 1e9) * (1200 / 3600) * (23_000 / 730)));
    // 8 files of 80 GiB: 500 parts each plus initiate and complete, at $0.005 per 1,000 PUTs.
    expect(size.writeRequests).toBe(8 * 502);
    expect(p.bytes.requestsMicroUsd).toBe(Math.round((8 * 502 * 5000) / 1000));
    // Through the gateway endpoint the transfer is free; through NAT it pays $0.045 per GB processed.
    expect(p.bytes.networkMicroUsd).toBe(0);
    const viaNat = savePrice({ ...base, layout: nat, everySec: 600 });
    expect(viaNat.bytes.networkMicroUsd).toBe(Math.round(((640 * GIB) / 1e9) * 45_000));
    expect(viaNat.totalMicroUsd).toBe(viaNat.stallMicroUsd + viaNat.bytes.totalMicroUsd);
  });

  it('pays egress when the machine writes to a store in another cloud', () => {
    const cross = savePrice({ ...base, store: gcs, everySec: 600 });
    expect(cross.bytes.networkMicroUsd).toBeGreaterThan(savePrice({ ...base, layout: nat, everySec: 600 }).bytes.networkMicroUsd);
    expect(cross.bytes.unpriced).toEqual([]);
  });

  it('keeps a save while it is newest, then as the previous for at most an hour', () => {
    expect(saveKeptSec(600)).toBe(1200);
    expect(saveKeptSec(3600)).toBe(7200);
    expect(saveKeptSec(7200)).toBe(10_800);
  });
});

describe('how often a job is asked to save (saveCadence)', () => {
  it('saves at the job’s own interval where nothing takes machines back', () => {
    const c = saveCadence({ ...base, hazardPerHour: 0, longestSec: 1800 });
    expect(c).toMatchObject({ everySec: 1800, by: 'longest', hazardPerHour: 0 });
    expect(c.savePriceMicroUsd).toBe(savePrice({ ...base, everySec: 1800 }).totalMicroUsd);
  });

  it('saves more often where take-backs are frequent, and less often when a save costs more (NAT against the gateway)', () => {
    const risky = saveCadence({ ...base, hazardPerHour: 2, longestSec: 3600 });
    expect(risky.by).toBe('price');
    expect(risky.everySec).toBeLessThan(3600);
    const viaNat = saveCadence({ ...base, layout: nat, hazardPerHour: 2, longestSec: 3600 });
    expect(viaNat.everySec).toBeGreaterThan(risky.everySec);
    // Young's τ = √(2C/(λg)) with C the save's price less storage (its storage per second does not depend on τ below an hour).
    const p = savePrice({ ...base, everySec: 3600 });
    const c0 = p.totalMicroUsd - p.bytes.storageMicroUsd;
    expect(risky.everySec).toBe(Math.round(Math.sqrt((2 * c0) / ((2 / 3600) * (base.gpuMicroUsdPerHour / 3600)))));
  });

  it('never asks for a save more than once a minute', () => {
    const c = saveCadence({ ...base, size: saveSizeOf([GIB]), stallSec: 1, hazardPerHour: 500, longestSec: 600 });
    expect(c).toMatchObject({ everySec: MIN_SAVE_EVERY_SEC, by: 'shortest' });
  });

  it('property: stays within a minute and the job’s own interval, and no cadence in that range costs less (within rounding)', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 200 }),
        fc.integer({ min: 1, max: 4 }),
        fc.double({ min: 0, max: 20, noNaN: true }),
        fc.integer({ min: 1_000_000, max: 100_000_000 }),
        fc.integer({ min: 60, max: 86_400 }),
        fc.constantFrom(gateway, nat),
        (gib, files, hazardPerHour, gpuMicroUsdPerHour, longestSec, layout) => {
          const input = {
            ...base,
            size: saveSizeOf(Array.from({ length: files }, () => gib * GIB)),
            stallSec: (gib * files * 1024) / 500,
            gpuMicroUsdPerHour,
            layout,
          };
          const c = saveCadence({ ...input, hazardPerHour, longestSec });
          expect(c.everySec).toBeGreaterThanOrEqual(MIN_SAVE_EVERY_SEC);
          expect(c.everySec).toBeLessThanOrEqual(Math.max(MIN_SAVE_EVERY_SEC, longestSec));
          if (hazardPerHour === 0) return;
          const chosen = costRate(input, hazardPerHour, c.everySec);
          for (const tau of [MIN_SAVE_EVERY_SEC, 300, 900, 1800, 3600, 7200, 14_400, 86_400])
            if (tau <= Math.max(MIN_SAVE_EVERY_SEC, longestSec))
              expect(chosen).toBeLessThanOrEqual(costRate(input, hazardPerHour, tau) * 1.001 + 1e-6);
        },
      ),
      { numRuns: 300 },
    );
  });

  it('property: a higher take-back rate never lengthens the cadence', () => {
    fc.assert(
      fc.property(
        fc.double({ min: 0, max: 10, noNaN: true }),
        fc.double({ min: 0, max: 10, noNaN: true }),
        fc.integer({ min: 60, max: 86_400 }),
        (a, b, longestSec) => {
          const [lo, hi] = a <= b ? [a, b] : [b, a];
          expect(saveCadence({ ...base, hazardPerHour: hi, longestSec }).everySec).toBeLessThanOrEqual(
            saveCadence({ ...base, hazardPerHour: lo, longestSec }).everySec,
          );
        },
      ),
    );
  });
});
