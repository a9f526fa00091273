import {
  addUsage,
  movedUsage,
  priceBytes,
  storageUsage,
  type ByteBill,
  type ByteRates,
  type NetworkLayout,
  type SaveSize,
  type Site,
} from './bytes.ts';
import { PREVIOUS_SAVE_KEPT_MS, type SaveCadence } from './job.ts';

export type { SaveCadence };
import type { MicroUsd } from './money.ts';

/**
 * What one checkpoint save costs, and how often a save is worth its price.
 *
 * A save's price is the GPU-time its attempt stalls while the save is written, plus its bytes:
 * storage for as long as the retention keeps the save, the store's PUT-class requests (one per
 * part of a multipart upload), and the transfer on the deployment's network path from the machine
 * to the store (NAT processing, a zone crossed, egress between clouds; nothing through an S3
 * gateway endpoint). Reading a save back to resume from is paid on a take-back, not per save,
 * and is left out.
 *
 * The cadence weighs that price against the work a take-back throws away. With take-backs at rate
 * λ (per second) on the attempt's capacity and its GPUs costing g per second, saving every τ
 * seconds costs, per second of work, P(τ)/τ for the saves and λ·g·τ/2 for the work lost since the
 * last save (first order, Young 1974; Daly 2006). The retention keeps a save while it is the newest
 * (τ) and, once replaced, for min(τ, 1 hour) more ({@link PREVIOUS_SAVE_KEPT_MS}), so its storage
 * is s·(τ + min(τ, 1 h)) for a storage price s per second of the save held: per second of work that
 * is 2s at any τ up to an hour, and s + s·(1 h)/τ beyond. The storage therefore moves the best τ
 * only past an hour, and the minimum of P(τ)/τ + λgτ/2 is exactly
 *   τ* = √(2·C₀ / (λ·g))            when that is at most an hour,
 *   τ* = √(2·(C₀ + s·1 h) / (λ·g))  otherwise,
 * where C₀ is the save's price less its storage (stall, requests, transfer). On capacity nothing
 * takes back (λ = 0: on-demand, reserved), τ* is unbounded. The cadence is τ* held between
 * {@link MIN_SAVE_EVERY_SEC} and the job's own `checkpoint.intervalSec`: never less often than
 * the user asked.
 */

/** Speed assumed for writing and uploading a save, MiB/s per machine, when nothing better is known (the agent's upload allowance uses it too). */
export const SAVE_MIB_PER_SEC = 500;
/** The shortest cadence asked of a job: a save a minute. */
export const MIN_SAVE_EVERY_SEC = 60;

export interface SavePriceInput {
  /** The save, all of its ranks' parts together. */
  readonly size: SaveSize;
  /** Seconds the attempt's GPUs wait while the save is written. */
  readonly stallSec: number;
  /** The attempt's share of its machines, µUSD per hour. */
  readonly gpuMicroUsdPerHour: number;
  /** Seconds until the next save replaces it. */
  readonly everySec: number;
  /** Where the machine and the store are, the deployment's path between them, and the price table. */
  readonly machine: Site;
  readonly store: Site;
  readonly layout: NetworkLayout;
  readonly rates: ByteRates;
}

export interface SavePrice {
  /** The stalled GPU-time's price. */
  readonly stallMicroUsd: MicroUsd;
  /** The bytes' bill: storage for `keptSec`, the upload's requests, its transfer. */
  readonly bytes: ByteBill;
  /** Seconds the retention keeps the save: newest for `everySec`, then the previous for up to an hour. */
  readonly keptSec: number;
  readonly totalMicroUsd: MicroUsd;
}

/** Seconds a save made every `everySec` is kept: as the newest until the next, then as the previous for min(everySec, 1 hour). */
export function saveKeptSec(everySec: number): number {
  return everySec + Math.min(everySec, PREVIOUS_SAVE_KEPT_MS / 1000);
}

/** One save's price: its stall's GPU-time, and its bytes' storage, requests and transfer on the deployment's path. */
export function savePrice(i: SavePriceInput): SavePrice {
  const keptSec = saveKeptSec(i.everySec);
  const usage = addUsage(
    storageUsage(i.store, i.size.bytes, keptSec * 1000),
    movedUsage({
      machine: i.machine,
      store: i.store,
      layout: i.layout,
      bytes: i.size.bytes,
      requests: i.size.writeRequests,
      direction: 'up',
    }),
  );
  const bytes = priceBytes(usage, i.rates);
  const stallMicroUsd = Math.round((Math.max(0, i.stallSec) * Math.max(0, i.gpuMicroUsdPerHour)) / 3600);
  return { stallMicroUsd, bytes, keptSec, totalMicroUsd: stallMicroUsd + bytes.totalMicroUsd };
}

/**
 * How often the job should save: the τ that minimises its saves' price plus the work a take-back
 * loses (see the module's note), held between {@link MIN_SAVE_EVERY_SEC} and `longestSec` (the
 * spec's `checkpoint.intervalSec`).
 */
export function saveCadence(
  input: Omit<SavePriceInput, 'everySec'> & { readonly hazardPerHour: number; readonly longestSec: number },
): SaveCadence {
  const longest = Math.max(MIN_SAVE_EVERY_SEC, input.longestSec);
  const lambdaG = (Math.max(0, input.hazardPerHour) / 3600) * (Math.max(0, input.gpuMicroUsdPerHour) / 3600);
  const at = (everySec: number, by: SaveCadence['by']): SaveCadence => ({
    everySec,
    hazardPerHour: input.hazardPerHour,
    savePriceMicroUsd: savePrice({ ...input, everySec }).totalMicroUsd,
    by,
  });
  if (!(lambdaG > 0)) return at(longest, 'longest');
  const hourSec = PREVIOUS_SAVE_KEPT_MS / 1000;
  // C₀: the price less storage; the storage of a save held one hour (s · 1 h), priced apart.
  const oneHour = savePrice({ ...input, everySec: hourSec });
  const c0 = oneHour.totalMicroUsd - oneHour.bytes.storageMicroUsd;
  const storageHour = oneHour.bytes.storageMicroUsd / 2;
  let best = Math.sqrt((2 * c0) / lambdaG);
  if (best > hourSec) best = Math.sqrt((2 * (c0 + storageHour)) / lambdaG);
  if (best >= longest) return at(longest, 'longest');
  if (best <= MIN_SAVE_EVERY_SEC) return at(MIN_SAVE_EVERY_SEC, 'shortest');
  return at(Math.round(best), 'price');
}
