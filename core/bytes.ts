import { cyrb53 } from './digest.ts';
import { regionOfZone } from './catalog.ts';
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

/** A Cloud Storage checkpoint root as a config names one: `gs://bucket/prefix/`, ending in "/". */
export const GCS_ROOT_RE = /^gs:\/\/[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]\/(\S*\/)?$/;

/** A checkpoint root (`s3://bucket/prefix/`, `gs://bucket/prefix/`) and the site of its bucket. */
export interface StoreRoot {
  readonly root: string;
  readonly site: Site;
}

/**
 * Where a fleet keeps checkpoints, as far as their price goes: `store`, the site of its own bucket
 * (in the control plane's region), and `roots`, the buckets kept for other sites (a GCP region's
 * machines save into a bucket in that region). Absent roots: every save is in `store`.
 */
export interface StoreSites {
  readonly store: Site;
  readonly roots?: readonly StoreRoot[];
}

/** The site of the bucket a location is in: the root it is under, else the fleet's own bucket. */
export function storeSiteOf(where: StoreSites, location: string): Site {
  return where.roots?.find((r) => location.startsWith(r.root))?.site ?? where.store;
}

/** The root kept for a machine's own site (a GCP region's bucket), when the fleet keeps one there. */
export function storeRootFor(roots: readonly StoreRoot[] | undefined, machine: Site | undefined): StoreRoot | undefined {
  return machine && roots?.find((r) => r.site.cloud === machine.cloud && r.site.region === machine.region);
}

/** The bucket a machine at `machine` saves into: its own site's root when the fleet keeps one there, else the fleet's own bucket. */
export function storeSiteFor(where: StoreSites, machine: Site | undefined): Site {
  return storeRootFor(where.roots, machine)?.site ?? where.store;
}

/** The kind of store a bucket at `store` is: Cloud Storage in GCP, S3 elsewhere. */
export function storeKindAt(store: Site): StoreKind {
  return store.cloud === 'gcp' ? 'gcs' : 's3';
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
 * The kind of object store a checkpoint location is in: `gs://` is Cloud Storage, where an upload
 * of any size is one billed operation; anything else (`s3://`, and `file://` for local use, priced
 * as S3) is S3, where each part of a multipart upload is a billed PUT.
 */
export type StoreKind = 's3' | 'gcs';
export function storeKindOf(location: string): StoreKind {
  return location.startsWith('gs://') ? 'gcs' : 's3';
}

/**
 * Write-class requests an upload of one file of `bytes` makes. S3: one PUT up to
 * {@link SINGLE_PUT_MAX_BYTES}, else a multipart upload (initiate, one per part, complete). Cloud
 * Storage: one Class A operation, whatever the size (a completed resumable upload is one operation).
 */
export function uploadRequests(bytes: number, kind: StoreKind = 's3'): number {
  if (kind === 'gcs' || bytes <= SINGLE_PUT_MAX_BYTES) return 1;
  return Math.ceil(bytes / partBytesFor(bytes)) + 2;
}

/** Read-class requests a download of one file of `bytes` makes: S3, one ranged GET per part as it was uploaded; Cloud Storage, one GET. */
export function downloadRequests(bytes: number, kind: StoreKind = 's3'): number {
  if (kind === 'gcs' || bytes <= SINGLE_PUT_MAX_BYTES) return 1;
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
  const kind = storeKindAt(t.store);
  const requests = t.fileBytes.reduce((n, b) => n + (direction === 'up' ? uploadRequests(b, kind) : downloadRequests(b, kind)), 0);
  return movedUsage({ ...t, bytes, requests, direction });
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
    const used = u.storageGiBHours !== 0 || u.writeRequests > 0 || u.readRequests > 0 || Object.values(u.transferBytes).some((n) => n > 0);
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

// ---- the deployed record: each save's bytes, from its upload to its deletion ----------------

/**
 * A save's size as the machine that wrote it measured it (one rank's part of it): its bytes, the
 * PUT-class requests its upload made and the GET-class requests a read of it back makes (by the
 * part sizes of {@link uploadRequests} and {@link downloadRequests}).
 */
export interface SaveSize {
  readonly bytes: number;
  readonly writeRequests: number;
  readonly readRequests: number;
}

/** The size of a save made of files of these sizes, in a store of this kind. */
export function saveSizeOf(fileBytes: readonly number[], kind: StoreKind = 's3'): SaveSize {
  return {
    bytes: fileBytes.reduce((a, b) => a + b, 0),
    writeRequests: fileBytes.reduce((n, b) => n + uploadRequests(b, kind), 0),
    readRequests: fileBytes.reduce((n, b) => n + downloadRequests(b, kind), 0),
  };
}

/** The most one machine's part of a save may be said to hold: 1 PiB, and ten million requests (S3: 10,000 parts of each of 1,000 files). */
export const SAVE_PART_MAX_BYTES = 2 ** 50;
export const SAVE_PART_MAX_REQUESTS = 10_000_000;

/** Why a reported size cannot be taken, or undefined: whole numbers, 0 or more, within what one save can hold. */
export function saveSizeProblem(size: SaveSize): string | undefined {
  for (const k of ['bytes', 'writeRequests', 'readRequests'] as const) {
    const v: unknown = size?.[k];
    const max = k === 'bytes' ? SAVE_PART_MAX_BYTES : SAVE_PART_MAX_REQUESTS;
    if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 0 || v > max)
      return `size.${k} is ${JSON.stringify(v)}; it must be a whole number from 0 to ${max}`;
  }
  return undefined;
}

/** Who a job's saves are charged to: stamped by the control plane from the job's record, never taken from a machine. */
export interface SaveOwner {
  readonly jobId: string;
  readonly team: string;
  readonly project?: string;
}

/** A save read back onto a machine to resume from: once per attempt and rank (`key`, `<attempt>/<rank>`). */
export interface SaveRead {
  readonly key: string;
  readonly atMs: number;
  readonly bytes: number;
  readonly readRequests: number;
  readonly machine?: Site;
}

/** One save as the index bills it: its bytes in the store from its upload until its deletion, and its reads. */
export interface SaveRecord {
  readonly location: string;
  readonly bytes: number;
  readonly writeRequests: number;
  /** GET requests one read of the whole save makes. */
  readonly readRequests: number;
  /** The parts it is made of (a gang's ranks each write and read their own); 1 when absent. */
  readonly parts?: number;
  /** When the upload was recorded complete (the store's clock): the upload is charged then, and storage from then. */
  readonly savedAtMs: number;
  /** The machine that wrote it (its transfer path); absent when its site was not known yet. */
  readonly machine?: Site;
  /** When the sweep deleted its objects, or a save of the same location overwrote them. */
  readonly deletedAtMs?: number;
  readonly reads?: readonly SaveRead[];
}

/** A job's byte log: whose it is, and its saves held now or deleted within {@link SAVE_LOG_KEPT_MS}. */
export interface ByteLog {
  readonly owner: SaveOwner;
  readonly saves: readonly SaveRecord[];
}

/**
 * How long a deleted save stays in its job's log: spend accrual charges its storage up to its
 * deletion from there, so a gap between reconciles up to this long is still charged in full (as
 * finished attempts' holdings are, core/job.ts HELD_ATTEMPTS_KEPT_MS).
 */
export const SAVE_LOG_KEPT_MS = 48 * 3_600_000;
/** At most this many saves a log keeps (the oldest deleted ones go first): it lives on one index item. */
export const SAVE_LOG_MAX = 400;

function pruned(saves: readonly SaveRecord[], nowMs: number): SaveRecord[] {
  const kept = saves.filter((s) => s.deletedAtMs === undefined || s.deletedAtMs > nowMs - SAVE_LOG_KEPT_MS);
  let over = kept.length - SAVE_LOG_MAX;
  return over <= 0 ? kept : kept.filter((s) => s.deletedAtMs === undefined || over-- <= 0);
}

/**
 * The log once a save lands at `nowMs`: a new record; a live record of the same location is closed
 * then (its objects were overwritten). Records deleted longer ago than {@link SAVE_LOG_KEPT_MS} go.
 */
export function logSave(log: ByteLog | undefined, owner: SaveOwner, save: SaveRecord, nowMs: number): ByteLog {
  const saves = (log?.saves ?? []).map((s) =>
    s.location === save.location && s.deletedAtMs === undefined ? { ...s, deletedAtMs: save.savedAtMs } : s,
  );
  return { owner, saves: pruned([...saves, save], nowMs) };
}

/** The log once the sweep deleted the objects of `locations` at `nowMs`. */
export function logDeleted(log: ByteLog, locations: readonly string[], nowMs: number): ByteLog {
  const gone = new Set(locations);
  if (!log.saves.some((s) => gone.has(s.location) && s.deletedAtMs === undefined)) return log;
  const saves = log.saves.map((s) => (gone.has(s.location) && s.deletedAtMs === undefined ? { ...s, deletedAtMs: nowMs } : s));
  return { ...log, saves: pruned(saves, nowMs) };
}

/** Whether a log has a save held at or after `sinceMs`: what spend accrual from then must read. */
export function logTouches(log: ByteLog, sinceMs: number): boolean {
  return log.saves.some((s) => s.deletedAtMs === undefined || s.deletedAtMs > sinceMs);
}

/** The live record of a location, if the log has one. */
export function liveSave(log: ByteLog | undefined, location: string): SaveRecord | undefined {
  return log?.saves.find((s) => s.location === location && s.deletedAtMs === undefined);
}

/**
 * The log once a read of the save at `location` (the save's folder, or one part of it) is noted:
 * the save's bytes and requests, or one part's share of them; undefined when it changes nothing (no
 * live save there, or this `key` read it already).
 */
export function logRead(
  log: ByteLog | undefined,
  location: string,
  read: { readonly key: string; readonly atMs: number; readonly machine?: Site },
): ByteLog | undefined {
  const save = log?.saves.find((s) => s.deletedAtMs === undefined && location.startsWith(s.location));
  if (!log || !save || save.reads?.some((r) => r.key === read.key)) return undefined;
  const share = location === save.location ? 1 : (save.parts ?? 1);
  const noted: SaveRead = {
    ...read,
    bytes: Math.round(save.bytes / share),
    readRequests: Math.ceil(save.readRequests / share),
  };
  return { ...log, saves: log.saves.map((s) => (s === save ? { ...s, reads: [...(s.reads ?? []), noted] } : s)) };
}

/** The site of a machine as reconcile stamped its billing facts (its offering, `cloud/zone/type/capacity`); undefined before that. */
export function siteOfOffering(offeringId: string | undefined): Site | undefined {
  const [cloud, zone] = offeringId?.split('/') ?? [];
  return (cloud === 'aws' || cloud === 'gcp' || cloud === 'sim') && zone ? siteOfZone(cloud, zone) : undefined;
}

/**
 * A log's usage over [fromMs, toMs): each save's storage over the part of the window it was held,
 * its upload if it landed in the window, and its reads in the window, on the deployment's path from
 * the machine to the bucket the save is in (the bucket's own region when the machine's site is not known).
 */
export function logUsage(log: ByteLog, where: StoreSites & { readonly layout: NetworkLayout }, fromMs: number, toMs: number): ByteUsage {
  let out: ByteUsage = {};
  for (const s of log.saves) {
    const store = storeSiteOf(where, s.location);
    const moved = (machine: Site | undefined, bytes: number, requests: number, direction: 'up' | 'down') =>
      movedUsage({ machine: machine ?? store, store, layout: where.layout, bytes, requests, direction });
    const start = Math.max(fromMs, s.savedAtMs);
    const end = Math.min(toMs, s.deletedAtMs ?? toMs);
    if (end > start) out = addUsage(out, storageUsage(store, s.bytes, end - start));
    if (s.savedAtMs >= fromMs && s.savedAtMs < toMs) out = addUsage(out, moved(s.machine, s.bytes, s.writeRequests, 'up'));
    for (const r of s.reads ?? [])
      if (r.atMs >= fromMs && r.atMs < toMs) out = addUsage(out, moved(r.machine, r.bytes, r.readRequests, 'down'));
  }
  return out;
}

/** Bytes and requests moved one way between a machine and a store, and the path's charges on them. */
export function movedUsage(m: {
  readonly machine: Site;
  readonly store: Site;
  readonly layout: NetworkLayout;
  readonly bytes: number;
  readonly requests: number;
  readonly direction: 'up' | 'down';
}): ByteUsage {
  const usage: Record<string, SiteUsage> = {
    [siteKey(m.store)]:
      m.direction === 'up'
        ? { ...NO_USE, bytesUploaded: m.bytes, writeRequests: m.requests }
        : { ...NO_USE, bytesDownloaded: m.bytes, readRequests: m.requests },
  };
  for (const c of transferCharges(m)) {
    const x = usage[c.billedBy] ?? NO_USE;
    usage[c.billedBy] = { ...x, transferBytes: { ...x.transferBytes, [c.charge]: (x.transferBytes[c.charge] ?? 0) + m.bytes * c.times } };
  }
  return usage;
}

/** What each team's saves cost over [fromMs, toMs): every log's usage over the window, summed per team and priced once. */
export function byteCostByTeam(
  logs: readonly ByteLog[],
  where: StoreSites & { readonly layout: NetworkLayout; readonly rates: ByteRates },
  fromMs: number,
  toMs: number,
): Map<string, MicroUsd> {
  const byTeam = new Map<string, ByteUsage>();
  for (const log of logs) byTeam.set(log.owner.team, addUsage(byTeam.get(log.owner.team) ?? {}, logUsage(log, where, fromMs, toMs)));
  const out = new Map<string, MicroUsd>();
  for (const [team, usage] of [...byTeam].sort(([a], [b]) => (a < b ? -1 : 1))) {
    const total = priceBytes(usage, where.rates).totalMicroUsd;
    if (total > 0) out.set(team, total);
  }
  return out;
}

/** The site of a machine in `zone` of `cloud`: its region is the zone less its last part (`us-east-1a`, `us-central1-a`). */
export function siteOfZone(cloud: Site['cloud'], zone: string): Site {
  return { cloud, region: regionOfZone(cloud, zone), zone };
}

/** The bytes the logs count held in the store at `atMs`: every save saved before then and not deleted by then. */
export function heldBytesAt(logs: readonly ByteLog[], atMs: number): number {
  let n = 0;
  for (const log of logs)
    for (const s of log.saves) if (s.savedAtMs < atMs && (s.deletedAtMs === undefined || s.deletedAtMs >= atMs)) n += s.bytes;
  return n;
}

/** One job's checkpoint bytes over a window, priced: its owner, its bill, and what the index counts it holding at the window's end. */
export interface JobByteBill {
  readonly owner: SaveOwner;
  readonly bill: ByteBill;
  readonly heldBytes: number;
}

/**
 * Each job's checkpoint bytes over [fromMs, toMs) from its byte log (what `gpu-fleet report`
 * charges to a team, project and job), priced apart; jobs with nothing in the window are left out.
 */
export function byteBillsByJob(
  logs: readonly ByteLog[],
  where: StoreSites & { readonly layout: NetworkLayout; readonly rates: ByteRates },
  fromMs: number,
  toMs: number,
): JobByteBill[] {
  const out: JobByteBill[] = [];
  for (const log of logs) {
    const bill = priceBytes(logUsage(log, where, fromMs, toMs), where.rates);
    const heldBytes = heldBytesAt([log], toMs);
    if (bill.totalMicroUsd > 0 || heldBytes > 0) out.push({ owner: log.owner, bill, heldBytes });
  }
  return out.sort((a, b) => b.bill.totalMicroUsd - a.bill.totalMicroUsd || (a.owner.jobId < b.owner.jobId ? -1 : 1));
}

// ---- byte events: what spend accrual charges, a minute at a time ------------------------------

/** What happened to a save's bytes: it landed (its upload; held from then), was read back onto a machine, or was deleted. */
export type ByteEventKind = 'save' | 'read' | 'delete';

/**
 * One change to a job's checkpoint bytes, as its index records it beside the byte log for spend
 * accrual: accrual charges the events it finds since it last counted (and the storage of what
 * each team holds) instead of reading every job's log each minute. The same change always has the
 * same `id`, so putting it again is harmless.
 */
export interface ByteEvent {
  readonly id: string;
  readonly kind: ByteEventKind;
  readonly atMs: number;
  readonly owner: SaveOwner;
  /** The save's location: its bucket (and so its price and path) is the root it is under. */
  readonly location: string;
  readonly bytes: number;
  /** Requests it made: a save's PUT-class, a read's GET-class; none for a deletion (DELETE is free in S3 and Cloud Storage). */
  readonly requests: number;
  /** The machine that wrote or read it (its transfer path); absent for a deletion, and when its site was not known. */
  readonly machine?: Site;
}

/**
 * A call that changes a byte log (a save completing, a read noted, the sweep's deletions) puts the
 * log's events of this long before it again, when it is a repeat: so an event survives the writer
 * dying between its index write and its event write, when the call is retried within this time.
 */
export const BYTE_EVENT_REPLAY_MS = 90_000;
/**
 * How long accrual remembers the ids of the events it charged. A repeat puts an event again within
 * {@link BYTE_EVENT_REPLAY_MS} of it, and its put lands within its function's timeout (the agent
 * API's is 30 s): this is longer than both, plus a reconcile.
 */
export const BYTE_EVENT_SEEN_MS = 4 * 60_000;

/** A short, stable id for an event: its kind's letter and a 53-bit hash of what it is (cyrb53). */
function eventId(kind: ByteEventKind, parts: readonly (string | number)[]): string {
  return `${kind[0]}${cyrb53(parts.join('\u0000'), 0).toString(36)}`;
}

/** The events of a log at or after `sinceMs`: each save that landed, each read noted and each deletion, oldest first. */
export function byteEventsSince(log: ByteLog | undefined, sinceMs: number): ByteEvent[] {
  if (!log) return [];
  const out: ByteEvent[] = [];
  const { owner } = log;
  for (const s of log.saves) {
    const of = (kind: ByteEventKind, atMs: number, extra: readonly (string | number)[] = []) =>
      eventId(kind, [owner.jobId, s.location, s.savedAtMs, ...extra]);
    if (s.savedAtMs >= sinceMs)
      out.push({
        id: of('save', s.savedAtMs),
        kind: 'save',
        atMs: s.savedAtMs,
        owner,
        location: s.location,
        bytes: s.bytes,
        requests: s.writeRequests,
        ...(s.machine ? { machine: s.machine } : {}),
      });
    for (const r of s.reads ?? [])
      if (r.atMs >= sinceMs)
        out.push({
          id: of('read', r.atMs, [r.key]),
          kind: 'read',
          atMs: r.atMs,
          owner,
          location: s.location,
          bytes: r.bytes,
          requests: r.readRequests,
          ...(r.machine ? { machine: r.machine } : {}),
        });
    if (s.deletedAtMs !== undefined && s.deletedAtMs >= sinceMs)
      out.push({
        id: of('delete', s.deletedAtMs),
        kind: 'delete',
        atMs: s.deletedAtMs,
        owner,
        location: s.location,
        bytes: s.bytes,
        requests: 0,
      });
  }
  return out.sort((a, b) => a.atMs - b.atMs || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
}

/** What a call that changed (or would have changed) a byte log at `nowMs` puts beside it: the log's events of the last {@link BYTE_EVENT_REPLAY_MS}. */
export function byteEventsToPut(log: ByteLog | undefined, nowMs: number): ByteEvent[] {
  return byteEventsSince(log, nowMs - BYTE_EVENT_REPLAY_MS);
}

/**
 * A team's checkpoint bytes as spend accrual carries them from one count to the next (in the
 * team's budget row, written with the cursor in one conditional write, so the two never part):
 * the bytes it holds in each bucket (by site key) as of `atMs`, and the events it charged lately.
 */
export interface ByteCarry {
  readonly atMs: number;
  readonly held: Readonly<Record<string, number>>;
  readonly seen: readonly { readonly atMs: number; readonly ids: readonly string[] }[];
}

/** Why a carry read back cannot be taken, or undefined. */
export function byteCarryProblem(carry: unknown): string | undefined {
  const c = carry as ByteCarry;
  if (typeof c !== 'object' || c === null || !Number.isSafeInteger(c.atMs)) return 'atMs must be a whole number of ms';
  if (typeof c.held !== 'object' || c.held === null || Object.values(c.held).some((b) => !Number.isSafeInteger(b) || b < 0))
    return 'held must map site keys to whole numbers of bytes';
  if (!Array.isArray(c.seen) || c.seen.some((s) => !Number.isSafeInteger(s?.atMs) || !Array.isArray(s?.ids)))
    return 'seen must list {atMs, ids}';
  return undefined;
}

/** One window a team's bytes are counted over: [fromMs, toMs). */
export interface ByteWindow {
  readonly fromMs: number;
  readonly toMs: number;
}

/** Storage of `bytes` over `ms` in the bucket of site key `key`. */
function storageAt(key: string, bytes: number, ms: number): ByteUsage {
  return { [key]: { ...NO_USE, storageGiBHours: (bytes / 2 ** 30) * (ms / 3_600_000) } };
}

const overlap = (a: number, b: number, w: ByteWindow) => Math.max(0, Math.min(b, w.toMs) - Math.max(a, w.fromMs));

/**
 * A team's byte usage over each of its windows up to `nowMs`, from what it held as of its carry
 * and the events since (those the carry has not seen), and the carry to keep:
 * - storage: each bucket's held bytes over the part of the window after the carry's time, plus or
 *   minus each event's bytes from the event on (a save adds, a deletion takes away);
 * - uploads and reads: in the window they happened in, on the deployment's path;
 * - an event dated before the carry (its write was slow) is charged in the window that starts the
 *   count, storage from its own time: nothing is lost, and nothing is charged twice (its id is
 *   remembered for {@link BYTE_EVENT_SEEN_MS}).
 * A window's storage may come out below zero: a deletion found late gives back what was counted
 * held after it. Held bytes never go below zero.
 */
export function teamByteUsage(input: {
  readonly carry: ByteCarry | undefined;
  readonly events: readonly ByteEvent[];
  readonly windows: readonly ByteWindow[];
  readonly nowMs: number;
  readonly where: StoreSites & { readonly layout: NetworkLayout };
}): { usage: ByteUsage[]; fresh: ByteEvent[]; repeats: string[]; next: ByteCarry } {
  const { carry, windows, nowMs, where } = input;
  const seen = new Set(carry?.seen.flatMap((s) => s.ids) ?? []);
  const fresh: ByteEvent[] = [];
  const repeats: string[] = [];
  for (const e of input.events) {
    if (seen.has(e.id)) repeats.push(e.id);
    else {
      seen.add(e.id);
      fresh.push(e);
    }
  }
  const start = carry?.atMs ?? Math.min(nowMs, ...windows.map((w) => w.fromMs));
  // The window the count starts in takes the late part of an event dated before the start.
  const first = (w: ByteWindow) => w.fromMs <= start && start < w.toMs;
  const held: Record<string, number> = { ...carry?.held };
  const usage = windows.map((w) => {
    let u: ByteUsage = {};
    for (const [key, bytes] of Object.entries(carry?.held ?? {})) u = addUsage(u, storageAt(key, bytes, overlap(start, nowMs, w)));
    for (const e of fresh) {
      const store = storeSiteOf(where, e.location);
      const key = siteKey(store);
      const sign = e.kind === 'save' ? 1 : e.kind === 'delete' ? -1 : 0;
      const from = Math.max(e.atMs, start);
      const ms = overlap(from, nowMs, w) + (first(w) ? Math.max(0, start - e.atMs) : 0);
      if (sign !== 0 && ms > 0) u = addUsage(u, storageAt(key, sign * e.bytes, ms));
      const at = Math.min(Math.max(e.atMs, start), nowMs - 1);
      if (e.kind !== 'delete' && at >= w.fromMs && at < w.toMs)
        u = addUsage(
          u,
          movedUsage({
            machine: e.machine ?? store,
            store,
            layout: where.layout,
            bytes: e.bytes,
            requests: e.requests,
            direction: e.kind === 'save' ? 'up' : 'down',
          }),
        );
    }
    return u;
  });
  for (const e of fresh) {
    const key = siteKey(storeSiteOf(where, e.location));
    if (e.kind !== 'read') held[key] = Math.max(0, (held[key] ?? 0) + (e.kind === 'save' ? e.bytes : -e.bytes));
  }
  for (const k of Object.keys(held)) if (held[k] === 0) delete held[k];
  const kept = (carry?.seen ?? []).filter((s) => s.atMs > nowMs - BYTE_EVENT_SEEN_MS);
  const ids = [...fresh.map((e) => e.id), ...repeats];
  return {
    usage,
    fresh,
    repeats,
    next: { atMs: nowMs, held, seen: ids.length > 0 ? [...kept, { atMs: nowMs, ids }] : kept },
  };
}
