import type { MicroUsd } from './money.ts';
import { HOURS_PER_MONTH } from './period.ts';

/**
 * The bytes gpu-fleet moves and keeps for the teams (checkpoints), and what they cost: storage
 * for as long as an object is kept, the store's requests (each part of a multipart upload is a
 * PUT), and the transfer on the network path the deployment really has (NAT processing, a zone
 * crossed to reach a NAT gateway, an interface endpoint, internet egress between clouds).
 *
 * Quantities are counted as they happen ({@link ByteUsage}, per site that bills them) and priced
 * once, at the end of a window, from one price table ({@link ByteRates}; `cloud/prices.ts` reads
 * the shipped list prices into it). Money is integer micro-dollars; a quantity times a rate is
 * rounded once per line of the bill.
 */

/** Where a machine or a store is. A store is regional (no zone); a machine has its zone. */
export interface Site {
  readonly cloud: 'aws' | 'gcp' | 'sim';
  readonly region: string;
  readonly zone?: string;
}

/** The key a site's usage and rates are kept under: `aws:us-west-2`. */
export function siteKey(site: Pick<Site, 'cloud' | 'region'>): string {
  return `${site.cloud}:${site.region}`;
}

/** How machines in the stack's VPC reach S3 in their own region. */
export type S3Path = 'gateway-endpoint' | 'nat' | 'interface-endpoint';
export const S3_PATHS: readonly S3Path[] = ['gateway-endpoint', 'nat', 'interface-endpoint'];

/** The network a deployment has, as far as its bytes' price goes. */
export interface NetworkLayout {
  /** AWS: how machines reach S3 in their region (the stack's VPC: a gateway endpoint). */
  readonly s3Path: S3Path;
  /**
   * AWS: the zones that have their own NAT gateway. A machine in another zone crosses a zone to
   * reach one (empty: the VPC's NAT is not known, and no crossing is counted).
   */
  readonly natZones: readonly string[];
}

/** The network a stack-created VPC gets by default: an S3 gateway endpoint and a NAT gateway in every zone. */
export function defaultNetworkLayout(zones: readonly string[]): NetworkLayout {
  return { s3Path: 'gateway-endpoint', natZones: [...zones] };
}

/** What a transfer is charged for, besides the store's requests. */
export type ByteCharge = 'nat' | 'cross-zone' | 'interface-endpoint' | 'internet-egress' | 'inter-region';
export const BYTE_CHARGES: readonly ByteCharge[] = ['nat', 'cross-zone', 'interface-endpoint', 'internet-egress', 'inter-region'];

/** One charge on a transfer, and the site whose provider bills it. */
export interface TransferCharge {
  readonly charge: ByteCharge;
  readonly billedBy: string;
  /** How many times the bytes are billed for it (a zone crossing is billed out of one zone and into the other). */
  readonly times: number;
}

/**
 * What moving bytes between a machine and a store is charged for, either way (`up`: the machine
 * writes; `down`: it reads). In the same cloud and region: nothing through an S3 gateway endpoint
 * (AWS) or to a regional bucket (GCP, Private Google Access); NAT processing through a NAT
 * gateway, plus a zone crossed each way when the machine's zone has none; the endpoint's
 * processing through an interface endpoint. Between clouds or regions, the sender's provider
 * bills egress (internet egress between clouds, inter-region within one), and the machine's own
 * NAT (or Cloud NAT) processes the bytes on its side.
 */
export function transferCharges(input: {
  readonly machine: Site;
  readonly store: Site;
  readonly direction: 'up' | 'down';
  readonly layout: NetworkLayout;
}): TransferCharge[] {
  const { machine, store, layout } = input;
  const machineKey = siteKey(machine);
  const storeKey = siteKey(store);
  if (machine.cloud === 'sim' || store.cloud === 'sim') return [];
  const throughNat = (): TransferCharge[] => {
    const out: TransferCharge[] = [{ charge: 'nat', billedBy: machineKey, times: 1 }];
    if (machine.cloud === 'aws' && machine.zone && layout.natZones.length > 0 && !layout.natZones.includes(machine.zone))
      out.push({ charge: 'cross-zone', billedBy: machineKey, times: 2 });
    return out;
  };
  if (machine.cloud === store.cloud && machine.region === store.region) {
    if (machine.cloud === 'gcp') return [];
    if (layout.s3Path === 'gateway-endpoint') return [];
    if (layout.s3Path === 'interface-endpoint') return [{ charge: 'interface-endpoint', billedBy: machineKey, times: 1 }];
    return throughNat();
  }
  const senderKey = input.direction === 'up' ? machineKey : storeKey;
  const egress: ByteCharge = machine.cloud === store.cloud ? 'inter-region' : 'internet-egress';
  return [{ charge: egress, billedBy: senderKey, times: 1 }, ...throughNat()];
}

// ---- usage ------------------------------------------------------------------------------------

/** What one site's provider bills for, counted: bytes stored over time, requests, bytes per transfer charge. */
export interface SiteUsage {
  /** Bytes written into this site's store, and read out of it. */
  readonly bytesUploaded: number;
  readonly bytesDownloaded: number;
  /** Storage held, GiB × hours. */
  readonly storageGiBHours: number;
  /** PUT-class requests (S3 PUT, multipart initiate/part/complete; GCS class A). */
  readonly writeRequests: number;
  /** GET-class requests (S3 GET; GCS class B). */
  readonly readRequests: number;
  /** Bytes this site bills per transfer charge (a charge billed twice counts the bytes twice). */
  readonly transferBytes: Readonly<Partial<Record<ByteCharge, number>>>;
}

/** Usage per site key ({@link siteKey}). */
export type ByteUsage = Readonly<Record<string, SiteUsage>>;

const NO_USE: SiteUsage = {
  bytesUploaded: 0,
  bytesDownloaded: 0,
  storageGiBHours: 0,
  writeRequests: 0,
  readRequests: 0,
  transferBytes: {},
};

/** Two usages added together. */
export function addUsage(a: ByteUsage, b: ByteUsage): ByteUsage {
  const out: Record<string, SiteUsage> = { ...a };
  for (const [k, u] of Object.entries(b)) {
    const x = out[k] ?? NO_USE;
    const transfer: Partial<Record<ByteCharge, number>> = { ...x.transferBytes };
    for (const [c, n] of Object.entries(u.transferBytes) as [ByteCharge, number][]) transfer[c] = (transfer[c] ?? 0) + n;
    out[k] = {
      bytesUploaded: x.bytesUploaded + u.bytesUploaded,
      bytesDownloaded: x.bytesDownloaded + u.bytesDownloaded,
      storageGiBHours: x.storageGiBHours + u.storageGiBHours,
      writeRequests: x.writeRequests + u.writeRequests,
      readRequests: x.readRequests + u.readRequests,
      transferBytes: transfer,
    };
  }
  return out;
}

const MIB = 1024 * 1024;
/** A file up to this size goes up in one PUT; a larger one in a multipart upload. */
export const SINGLE_PUT_MAX_BYTES = 64 * MIB;
/** A multipart upload's parts are at least this big, and there are at most {@link MAX_PARTS} of them (S3 allows 10,000 of up to 5 GiB). */
export const MIN_PART_BYTES = 64 * MIB;
export const MAX_PARTS = 500;
export const MAX_PART_BYTES = 5 * 1024 * MIB;

/**
 * The part size for a file of `bytes`: the smallest whole MiB ≥ {@link MIN_PART_BYTES} that needs
 * no more than {@link MAX_PARTS} parts. Each part is a billed PUT, so parts are large: a 24 GiB
 * file goes up in 384 of them.
 */
export function partBytesFor(bytes: number): number {
  return Math.max(MIN_PART_BYTES, Math.ceil(bytes / MAX_PARTS / MIB) * MIB);
}

/**
 * PUT-class requests an upload of one file of `bytes` makes: one PUT up to {@link SINGLE_PUT_MAX_BYTES};
 * else a multipart upload (initiate, one per part, complete).
 */
export function uploadRequests(bytes: number): number {
  if (bytes <= SINGLE_PUT_MAX_BYTES) return 1;
  return Math.ceil(bytes / partBytesFor(bytes)) + 2;
}

/** GET requests a download of one file of `bytes` makes: one ranged GET per part as it was uploaded. */
export function downloadRequests(bytes: number): number {
  if (bytes <= SINGLE_PUT_MAX_BYTES) return 1;
  return Math.ceil(bytes / partBytesFor(bytes));
}

/** A save's files (or one rank's part of them) moved between a machine and its store. */
export interface Transfer {
  readonly machine: Site;
  readonly store: Site;
  readonly layout: NetworkLayout;
  /** Each file's size, bytes (a checkpoint folder's files). */
  readonly fileBytes: readonly number[];
}

/**
 * A transfer's usage: `up`, a save uploaded (its bytes, a PUT per file or per part), `down`, one
 * read back to resume from (a GET per part); and either way the path's charges.
 */
export function transferUsage(t: Transfer, direction: 'up' | 'down'): ByteUsage {
  const bytes = t.fileBytes.reduce((a, b) => a + b, 0);
  const requests = t.fileBytes.reduce((n, b) => n + (direction === 'up' ? uploadRequests(b) : downloadRequests(b)), 0);
  const usage: Record<string, SiteUsage> = {
    [siteKey(t.store)]:
      direction === 'up'
        ? { ...NO_USE, bytesUploaded: bytes, writeRequests: requests }
        : { ...NO_USE, bytesDownloaded: bytes, readRequests: requests },
  };
  for (const c of transferCharges({ ...t, direction })) {
    const x = usage[c.billedBy] ?? NO_USE;
    usage[c.billedBy] = { ...x, transferBytes: { ...x.transferBytes, [c.charge]: (x.transferBytes[c.charge] ?? 0) + bytes * c.times } };
  }
  return usage;
}

/** `bytes` kept in `store` for `durationMs`. */
export function storageUsage(store: Site, bytes: number, durationMs: number): ByteUsage {
  return { [siteKey(store)]: { ...NO_USE, storageGiBHours: (bytes / 2 ** 30) * (durationMs / 3_600_000) } };
}

// ---- prices ----------------------------------------------------------------------------------

/** A price per unit of data: micro-dollars per decimal gigabyte (AWS) or per gibibyte (GCP), as published. */
export interface DataRate {
  readonly microUsd: number;
  readonly per: 'GB' | 'GiB';
}

/** One site's list prices for what {@link SiteUsage} counts. A charge without a rate is unpriced. */
export interface SiteRates {
  /** Storage, micro-dollars per GB (or GiB) and month (730 hours). */
  readonly storagePerMonth: DataRate;
  /** Micro-dollars per 1,000 PUT-class and GET-class requests. */
  readonly writeRequestsPer1000MicroUsd: number;
  readonly readRequestsPer1000MicroUsd: number;
  readonly transfer: Readonly<Partial<Record<ByteCharge, DataRate>>>;
}

/** Rates per site key. */
export type ByteRates = ReadonlyMap<string, SiteRates>;

/** Part of a byte bill: what, and the usage nothing in the table prices (site and item). */
export interface ByteBill {
  readonly storageMicroUsd: MicroUsd;
  readonly requestsMicroUsd: MicroUsd;
  readonly networkMicroUsd: MicroUsd;
  readonly totalMicroUsd: MicroUsd;
  /** Usage with no price in the table (`gcp:us-west1 storage`, `aws:us-west-2 inter-region`): counted, not priced. */
  readonly unpriced: readonly string[];
}

function units(bytesOrGiB: { bytes: number } | { gib: number }, per: 'GB' | 'GiB'): number {
  const bytes = 'bytes' in bytesOrGiB ? bytesOrGiB.bytes : bytesOrGiB.gib * 2 ** 30;
  return per === 'GB' ? bytes / 1e9 : bytes / 2 ** 30;
}

/** The bill for a usage at the given rates: each line (site × item) is a quantity times its rate, rounded once to a micro-dollar. */
export function priceBytes(usage: ByteUsage, rates: ByteRates): ByteBill {
  let storage = 0;
  let requests = 0;
  let network = 0;
  const unpriced: string[] = [];
  for (const key of Object.keys(usage).sort()) {
    const u = usage[key]!;
    const r = rates.get(key);
    const used = u.storageGiBHours > 0 || u.writeRequests > 0 || u.readRequests > 0 || Object.values(u.transferBytes).some((n) => n > 0);
    if (!r) {
      if (used) unpriced.push(`${key} (no prices for this site)`);
      continue;
    }
    storage += Math.round((units({ gib: u.storageGiBHours }, r.storagePerMonth.per) * r.storagePerMonth.microUsd) / HOURS_PER_MONTH);
    requests += Math.round((u.writeRequests * r.writeRequestsPer1000MicroUsd + u.readRequests * r.readRequestsPer1000MicroUsd) / 1000);
    for (const charge of BYTE_CHARGES) {
      const bytes = u.transferBytes[charge] ?? 0;
      if (bytes <= 0) continue;
      const rate = r.transfer[charge];
      if (!rate) {
        unpriced.push(`${key} ${charge}`);
        continue;
      }
      network += Math.round(units({ bytes }, rate.per) * rate.microUsd);
    }
  }
  return {
    storageMicroUsd: storage,
    requestsMicroUsd: requests,
    networkMicroUsd: network,
    totalMicroUsd: storage + requests + network,
    unpriced,
  };
}
