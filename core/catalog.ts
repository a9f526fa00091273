import type { GpuModel } from './gpu.ts';
import type { MicroUsd } from './money.ts';

export type Cloud = 'aws' | 'gcp' | 'sim';
/**
 * How a machine is bought: spot, on-demand at list price, or inside a capacity reservation the
 * customer already pays for (an On-Demand Capacity Reservation, a Capacity Block for ML, a GCP
 * reservation; see core/reservation.ts).
 */
export type CapacityType = 'spot' | 'on-demand' | 'reserved';

/** The facts about a machine type that matter to placement. */
export interface InstanceType {
  readonly name: string;
  readonly cloud: Cloud;
  readonly gpuModel: GpuModel;
  readonly gpuCount: number;
  readonly gpuMemoryMiB: number;
  readonly vcpus: number;
  readonly memoryMiB: number;
}

/** One way to buy a machine: instance type × zone × capacity type × cloud (× reservation, for reserved capacity). */
export interface Offering {
  /** Stable id: `${cloud}/${zone}/${instanceType}/${capacityType}`, and `/${reservationId}` for reserved capacity. */
  readonly id: string;
  readonly cloud: Cloud;
  readonly region: string;
  readonly zone: string;
  readonly instanceType: string;
  readonly capacityType: CapacityType;
  /** The reservation a reserved offering launches into: two reservations of one type and zone are two offerings. */
  readonly reservationId?: string;
}

/** The region of a zone: "us-west-2a" → "us-west-2", "europe-west4-a" → "europe-west4". */
export function regionOfZone(cloud: Cloud, zone: string): string {
  if (cloud === 'gcp') return zone.replace(/-[a-z]$/, '');
  return zone.replace(/[a-z]$/, '');
}

export function offeringId(o: Omit<Offering, 'id' | 'region'>): string {
  const base = `${o.cloud}/${o.zone}/${o.instanceType}/${o.capacityType}`;
  return o.capacityType === 'reserved' ? `${base}/${o.reservationId ?? '?'}` : base;
}

export function makeOffering(o: Omit<Offering, 'id'>): Offering {
  return { ...o, id: offeringId(o) };
}

/** The price of an offering per hour, with where it came from. */
export interface PriceQuote {
  readonly offeringId: string;
  readonly priceMicroUsdPerHour: MicroUsd;
  /** The on-demand price of the same instance type in the same region, for savings figures. */
  readonly onDemandMicroUsdPerHour: MicroUsd;
  /**
   * What a machine of it is billed per hour when that differs from the price the planner weighs: a
   * reserved offering costs nothing at the margin but bills its reservation's rate to whoever uses it.
   */
  readonly billedMicroUsdPerHour?: MicroUsd;
  readonly source: string;
  readonly asOfMs?: number;
  /** For spot: the Spot Advisor interruption-frequency band ("<5%" … ">20%"), the prior of the pool's risk. */
  readonly interruptionBand?: string;
  /**
   * For spot, where the cloud gives one: EC2's Spot Placement Score of the pool's zone (1 to 10), how
   * likely a spot request there is to be filled now; it moves the pool's prior (core/spot-model.ts).
   */
  readonly placementScore?: number;
}

/** What a machine of the quote's offering is billed per hour (its reservation's rate for reserved capacity, else its price). */
export function billedPrice(q: PriceQuote): MicroUsd {
  return q.billedMicroUsdPerHour ?? q.priceMicroUsdPerHour;
}

/** The catalogue the planner sees: instance types by name. */
export type InstanceTypeCatalog = ReadonlyMap<string, InstanceType>;
