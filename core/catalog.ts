import type { GpuModel } from './gpu.ts';
import type { MicroUsd } from './money.ts';

export type Cloud = 'aws' | 'gcp' | 'sim';
export type CapacityType = 'spot' | 'on-demand';

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

/** One way to buy a machine: instance type × zone × capacity type × cloud. */
export interface Offering {
  /** Stable id: `${cloud}/${zone}/${instanceType}/${capacityType}`. */
  readonly id: string;
  readonly cloud: Cloud;
  readonly region: string;
  readonly zone: string;
  readonly instanceType: string;
  readonly capacityType: CapacityType;
}

export function offeringId(o: Omit<Offering, 'id' | 'region'>): string {
  return `${o.cloud}/${o.zone}/${o.instanceType}/${o.capacityType}`;
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
  readonly source: string;
  readonly asOfMs?: number;
  /** For spot: the Spot Advisor interruption-frequency band ("<5%" … ">20%"), the prior of the pool's risk. */
  readonly interruptionBand?: string;
}

/** The catalogue the planner sees: instance types by name. */
export type InstanceTypeCatalog = ReadonlyMap<string, InstanceType>;
