/**
 * Capacity already paid for: On-Demand Capacity Reservations (ODCRs, paid whether used or not),
 * EC2 Capacity Blocks for ML (a fixed window, paid up front, machines terminated 30 minutes
 * before its end), interruptible Capacity Reservations (the owner can take the machines back with
 * two minutes' notice), and GCP reservations. A node group that launches into a reservation offers
 * one `reserved` offering per reservation (core/catalog.ts); the rules here say what it costs at
 * the margin, how many machines it still holds, and which work may go on a block.
 */
import { makeOffering, type Cloud, type Offering, type PriceQuote } from './catalog.ts';
import type { MicroUsd } from './money.ts';

export type ReservationKind = 'odcr' | 'capacity-block';

/** The states gpu-fleet tells apart; the clouds' other states (payment-pending, failed, …) mean "not usable". */
export type ReservationState = 'active' | 'scheduled' | 'expired' | 'cancelled' | 'pending' | 'unusable';

export interface Reservation {
  /** The cloud's id (`cr-…` on AWS; the reservation's name on GCP). */
  readonly id: string;
  readonly cloud: Cloud;
  readonly region: string;
  readonly zone: string;
  readonly instanceType: string;
  readonly kind: ReservationKind;
  /** Its machines can be taken back by its owner with a short notice (AWS interruptible Capacity Reservations). */
  readonly interruptible: boolean;
  readonly totalCount: number;
  /** Machines it can still take (AWS AvailableInstanceCount; GCP count − inUseCount). */
  readonly availableCount: number;
  readonly state: ReservationState;
  readonly startMs?: number;
  /** When it ends; undefined for an ODCR without an end date. */
  readonly endMs?: number;
  /**
   * What one machine-hour of it costs whether used or not (µUSD): an ODCR bills its type's on-demand
   * price; a Capacity Block its up-front fee spread over its hours and machines.
   */
  readonly priceMicroUsdPerHour: MicroUsd;
  /** The reservation's tags (gpu-fleet reads `gpu-fleet:managed` and the team tags). */
  readonly tags?: Readonly<Record<string, string>>;
}

/** AWS terminates a Capacity Block's machines this long before the block's end. */
export const BLOCK_TERMINATION_LEAD_MS = 30 * 60_000;

/** When the machines of a reservation are taken away: a block's end less 30 min; an ODCR's end; never. */
export function reservationTerminationMs(r: Pick<Reservation, 'kind' | 'endMs'>): number | undefined {
  if (r.endMs === undefined) return undefined;
  return r.kind === 'capacity-block' ? r.endMs - BLOCK_TERMINATION_LEAD_MS : r.endMs;
}

/** The reserved offering of a reservation: its id names the reservation, so two reservations of one type and zone stay apart. */
export function reservedOffering(r: Pick<Reservation, 'id' | 'cloud' | 'region' | 'zone' | 'instanceType'>): Offering {
  return makeOffering({
    cloud: r.cloud,
    region: r.region,
    zone: r.zone,
    instanceType: r.instanceType,
    capacityType: 'reserved',
    reservationId: r.id,
  });
}

/**
 * The price of a reserved offering: nothing at the margin (the reservation is paid whether used or
 * not), with what it bills per machine-hour for the accounts and the list price for comparisons.
 */
export function reservedQuote(r: Reservation, onDemandMicroUsdPerHour: MicroUsd): PriceQuote {
  return {
    offeringId: reservedOffering(r).id,
    priceMicroUsdPerHour: 0,
    onDemandMicroUsdPerHour,
    billedMicroUsdPerHour: r.priceMicroUsdPerHour,
    source: `reservation ${r.id} (prepaid)`,
  };
}

/**
 * How many more machines a group launching into the reservation may add now: what it still has
 * free, less the group's launches asked for and not yet started (they take it when they start);
 * nothing unless it is active and its machines would still have time to run.
 */
export function reservationRoom(r: Reservation, launchesInFlight: number, nowMs: number, minRunMs: number): number {
  if (r.state !== 'active') return 0;
  if (r.startMs !== undefined && r.startMs > nowMs) return 0;
  const endsMs = reservationTerminationMs(r);
  if (endsMs !== undefined && endsMs - nowMs < minRunMs) return 0;
  return Math.max(0, r.availableCount - Math.max(0, launchesInFlight));
}

/**
 * Whether work may go on a machine whose reservation takes it away at `terminationMs`: it finishes
 * before then, or (when it may be interrupted) it reaches a checkpoint before then, so its progress
 * is saved and it is checkpointed and requeued ahead of the end.
 */
export function fitsBeforeTermination(
  work: { readonly remainingSec: number; readonly checkpointIntervalSec?: number; readonly interruptible: boolean },
  startsInSec: number,
  nowMs: number,
  terminationMs: number | undefined,
): boolean {
  if (terminationMs === undefined) return true;
  const leftSec = (terminationMs - nowMs) / 1000 - startsInSec;
  if (leftSec <= 0) return false;
  if (work.remainingSec <= leftSec) return true;
  return work.interruptible && work.checkpointIntervalSec !== undefined && work.checkpointIntervalSec <= leftSec;
}

/**
 * How long before a reservation takes its machines away gpu-fleet starts checkpointing what runs
 * there: 10 minutes, when AWS's Capacity Block expiration warning comes (40 min before the block's
 * end, its machines going 30 min before it), or the longest checkpoint grace there plus two minutes
 * for the notice to reach the agents and the upload to finish, if that is longer.
 */
export function drainLeadMs(checkpointGraceSec: number): number {
  return Math.max(10 * 60_000, (checkpointGraceSec + 120) * 1000);
}
