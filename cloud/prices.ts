import * as z from 'zod/mini';
import { siteKey, type ByteCharge, type ByteRates, type DataRate, type SiteRates } from '../core/bytes.ts';
import { GpuFleetError } from '../core/errors.ts';
import { microUsdFromUsd } from '../core/money.ts';
import pricesJson from '../data/prices/cloud-services.json' with { type: 'json' };

/**
 * The list prices of the services around the GPUs, shipped in data/prices/cloud-services.json
 * (see data/PROVENANCE.md), read into core/bytes.ts's rates: one set per cloud and region the
 * table covers (AWS us-east-1 and us-west-2, GCP us-central1). A region it does not cover gets no
 * rates, and its bytes are shown unpriced: never another region's price.
 *
 * Tiered items take the first band that is paid (S3's first 50 TB, AWS's internet egress up to
 * 10 TB, GCP's first TiB of egress past the free GiB, PrivateLink's first PB): the highest rate,
 * since the bands aggregate over an account's month and a fleet rarely knows what else it shares
 * them with. So the bill shown is at most what the table says, never less.
 */

// zod/mini, as everywhere the functions bundle: the full zod adds 448 KiB to each Lambda bundle.
/** One record of the table, as the code reads it (its provenance is for people, checked by the data's own test). */
export const PriceRecordSchema = z.object({
  cloud: z.enum(['aws', 'gcp']),
  service: z.string(),
  item: z.string(),
  region: z.string(),
  usd: z.number().check(z.nonnegative()),
  per: z.string(),
  tier: z.optional(z.string()),
});
const table = z.object({ currency: z.literal('USD'), asOf: z.string(), prices: z.array(PriceRecordSchema) });
type PriceRecord = z.infer<typeof PriceRecordSchema>;

/**
 * The fields of data/prices/cloud-services.json this module reads (its provenance is for people,
 * checked by test/infra/bundling.test.ts): what a deployed bundle keeps of the file (infra/bundling.ts `shippedDataAsRead`).
 */
export const PRICE_FIELDS_READ = {
  currency: true,
  asOf: true,
  prices: [
    {
      cloud: true,
      service: true,
      item: true,
      region: true,
      usd: true,
      per: true,
      tier: true,
    } as const satisfies Record<keyof PriceRecord, true>,
  ],
} as const;

/** The price table as shipped: its month, and every record. */
export const CLOUD_SERVICE_PRICES = table.parse(pricesJson);

/** One line the byte rates are read from: which record (by service and item, and the tier when it has several), in which unit. */
interface Wanted {
  readonly service: string;
  readonly item: string;
  readonly tier?: string;
  readonly per: string;
}

const AWS: {
  storage: Wanted;
  write: Wanted;
  read: Wanted;
  transfer: Partial<Record<ByteCharge, Wanted>>;
} = {
  storage: { service: 'S3', item: 'S3 Standard storage', tier: 'first 50 TB / month', per: 'GB-month' },
  write: { service: 'S3', item: 'S3 Standard PUT, COPY, POST, LIST requests', per: '1,000 requests' },
  read: { service: 'S3', item: 'S3 Standard GET, SELECT and all other requests', per: '1,000 requests' },
  transfer: {
    nat: { service: 'VPC', item: 'NAT gateway data processing', per: 'GB' },
    'cross-zone': { service: 'Data transfer', item: 'Data transfer between Availability Zones (same region)', per: 'GB' },
    'interface-endpoint': {
      service: 'VPC',
      item: 'Interface VPC endpoint (PrivateLink) data processing',
      tier: 'first 1 PB / month (all interface endpoints in the region)',
      per: 'GB',
    },
    'internet-egress': { service: 'Data transfer', item: 'Data transfer out to the internet', tier: 'up to 10 TB / month', per: 'GB' },
  },
};

const GCP: typeof AWS = {
  storage: { service: 'Cloud Storage', item: 'Standard storage, regional bucket', per: 'GB-month' },
  write: { service: 'Cloud Storage', item: 'Class A operations (Standard storage, region)', per: '1,000 operations' },
  read: { service: 'Cloud Storage', item: 'Class B operations (Standard storage, region)', per: '1,000 operations' },
  transfer: {
    nat: { service: 'Cloud NAT', item: 'NAT data processing', per: 'GiB' },
    'cross-zone': { service: 'Network', item: 'Inter-zone data transfer, same region (VM to VM)', per: 'GiB' },
    'internet-egress': {
      service: 'Network',
      item: 'Internet data transfer out, Premium Tier (to North America)',
      tier: '1 GiB to 1,024 GiB / month',
      per: 'GiB',
    },
  },
};

export class PriceTableError extends GpuFleetError {
  override name = 'PriceTableError';
}

function find(records: readonly PriceRecord[], cloud: 'aws' | 'gcp', region: string, w: Wanted): PriceRecord | undefined {
  const hits = records.filter(
    (r) =>
      r.cloud === cloud &&
      r.region === region &&
      r.service === w.service &&
      r.item === w.item &&
      (w.tier === undefined || r.tier === w.tier),
  );
  if (hits.length > 1)
    throw new PriceTableError(
      `${hits.length} price records match ${cloud} ${region} "${w.item}"${w.tier ? ` (${w.tier})` : ''}; expected one`,
    );
  const hit = hits[0];
  if (hit && hit.per !== w.per) throw new PriceTableError(`${cloud} ${region} "${w.item}" is priced per ${hit.per}; expected per ${w.per}`);
  return hit;
}

function dataRate(r: PriceRecord | undefined): DataRate | undefined {
  if (!r) return undefined;
  return { microUsd: microUsdFromUsd(r.usd), per: r.per.startsWith('GiB') ? 'GiB' : 'GB' };
}

/** The byte rates of one cloud and region, or undefined when the table does not cover it. */
export function siteRates(
  cloud: 'aws' | 'gcp',
  region: string,
  records: readonly PriceRecord[] = CLOUD_SERVICE_PRICES.prices,
): SiteRates | undefined {
  const w = cloud === 'aws' ? AWS : GCP;
  const storage = find(records, cloud, region, w.storage);
  const write = find(records, cloud, region, w.write);
  const read = find(records, cloud, region, w.read);
  if (!storage || !write || !read) return undefined;
  const transfer: Partial<Record<ByteCharge, DataRate>> = {};
  for (const [charge, wanted] of Object.entries(w.transfer) as [ByteCharge, Wanted][]) {
    const rate = dataRate(find(records, cloud, region, wanted));
    if (rate) transfer[charge] = rate;
  }
  return {
    storagePerMonth: dataRate(storage)!,
    writeRequestsPer1000MicroUsd: microUsdFromUsd(write.usd),
    readRequestsPer1000MicroUsd: microUsdFromUsd(read.usd),
    transfer,
  };
}

/** Rates for every cloud and region the shipped table covers. */
export function shippedByteRates(): ByteRates {
  const out = new Map<string, SiteRates>();
  const sites = new Set(CLOUD_SERVICE_PRICES.prices.map((r) => `${r.cloud}\u0000${r.region}`));
  for (const s of [...sites].sort()) {
    const [cloud, region] = s.split('\u0000') as ['aws' | 'gcp', string];
    const rates = siteRates(cloud, region);
    if (rates) out.set(siteKey({ cloud, region }), rates);
  }
  return out;
}
