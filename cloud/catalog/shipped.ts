import { readFileSync } from 'node:fs';
import { parseCsv } from '../csv.ts';
import type { InstanceType, Offering, PriceQuote } from '../../core/catalog.ts';
import { normalizeGpuModel, type GpuModel } from '../../core/gpu.ts';
import type { GpuOffer, GpuOffers } from '../../core/rightsizing.ts';
import { microUsdFromUsd } from '../../core/money.ts';
import type { CatalogSource, PriceSource } from '../../core/ports.ts';
import awsCatalogJson from '../../data/catalog/aws-gpu-instances.json' with { type: 'json' };

/**
 * The GPU catalogues shipped in data/catalog (see data/PROVENANCE.md): instance types with
 * their GPU facts, on-demand prices per region, and spot prices (per zone on GCP; the regional
 * average on AWS, or the on-demand price less the Spot Advisor's published saving where no
 * average was published). Prices are converted to integer µUSD here, once.
 */
export interface ShippedCatalog {
  readonly instanceTypes: ReadonlyMap<string, InstanceType>;
  /** `${cloud}/${region}/${type}` → µUSD per hour. */
  readonly onDemand: ReadonlyMap<string, number>;
  /** `${cloud}/${region or zone}/${type}` → µUSD per hour; zone keys win over region keys. */
  readonly spot: ReadonlyMap<string, number>;
  /** `${region}/${type}` → Spot Advisor interruption band, e.g. "10-15%". */
  readonly advisorBand: ReadonlyMap<string, string>;
  /** Zones each GCP machine type is priced in. */
  readonly gcpZones: ReadonlyMap<string, readonly string[]>;
}

interface AwsPricing {
  ondemand_usd_per_hour?: number | null;
  snapshot_2024_04?: { ondemand_usd_per_hour?: number | null; spot_avg_usd_per_hour?: number | null };
  spot_advisor_2025_06?: { savings_vs_ondemand_pct?: number | null; interruption_freq_bucket?: string | null };
}

interface AwsCatalogFile {
  instances: {
    instance_type: string;
    gpu_count: number;
    gpu_model: string;
    gpu_memory_gib_per_gpu: number;
    vcpus: number;
    memory_gib: number;
    pricing: Record<string, AwsPricing>;
  }[];
}

const awsCatalog = awsCatalogJson as unknown as AwsCatalogFile;

/**
 * The fields of data/catalog/aws-gpu-instances.json this module reads (the rest is provenance:
 * sources, Karpenter's names, EKS allocatable): what a deployed bundle keeps of the file
 * (infra/bundling.ts `shippedDataAsRead`).
 */
export const AWS_CATALOG_FIELDS_READ = {
  instances: [
    {
      instance_type: true,
      gpu_count: true,
      gpu_model: true,
      gpu_memory_gib_per_gpu: true,
      vcpus: true,
      memory_gib: true,
      pricing: {
        '*': {
          ondemand_usd_per_hour: true,
          snapshot_2024_04: { ondemand_usd_per_hour: true, spot_avg_usd_per_hour: true },
          spot_advisor_2025_06: { savings_vs_ondemand_pct: true, interruption_freq_bucket: true },
        },
      },
    } as const satisfies Record<keyof AwsCatalogFile['instances'][number], unknown>,
  ],
} as const;

let cachedAws: ShippedCatalog | undefined;

/**
 * The AWS part of the shipped catalogue. The GCP part is its own module
 * (cloud/catalog/gcp-shipped.ts), loaded only where GCP is configured: a Lambda bundle without
 * GCP does not carry its 130 KiB of machine types and zone prices.
 */
export function awsShippedCatalog(): ShippedCatalog {
  cachedAws ??= buildAws();
  return cachedAws;
}

/** Several clouds' catalogues as one (their instance type names do not collide). */
export function mergeCatalogs(...parts: readonly ShippedCatalog[]): ShippedCatalog {
  const merge = <K, V>(maps: readonly ReadonlyMap<K, V>[]) => new Map(maps.flatMap((m) => [...m]));
  return {
    instanceTypes: merge(parts.map((p) => p.instanceTypes)),
    onDemand: merge(parts.map((p) => p.onDemand)),
    spot: merge(parts.map((p) => p.spot)),
    advisorBand: merge(parts.map((p) => p.advisorBand)),
    gcpZones: merge(parts.map((p) => p.gcpZones)),
  };
}

function buildAws(): ShippedCatalog {
  const instanceTypes = new Map<string, InstanceType>();
  const onDemand = new Map<string, number>();
  const spot = new Map<string, number>();
  const advisorBand = new Map<string, string>();

  for (const it of awsCatalog.instances) {
    const model = normalizeGpuModel(it.gpu_model, it.gpu_memory_gib_per_gpu);
    if (!model) continue;
    instanceTypes.set(it.instance_type, {
      name: it.instance_type,
      cloud: 'aws',
      gpuModel: model,
      gpuCount: it.gpu_count,
      gpuMemoryMiB: Math.round(it.gpu_memory_gib_per_gpu * 1024),
      vcpus: it.vcpus,
      memoryMiB: Math.round(it.memory_gib * 1024),
    });
    for (const [region, raw] of Object.entries(it.pricing)) {
      const od = raw.ondemand_usd_per_hour ?? raw.snapshot_2024_04?.ondemand_usd_per_hour ?? undefined;
      if (od === undefined || od === null) continue;
      const odMicro = microUsdFromUsd(od);
      onDemand.set(`aws/${region}/${it.instance_type}`, odMicro);
      const avg = raw.snapshot_2024_04?.spot_avg_usd_per_hour;
      const saving = raw.spot_advisor_2025_06?.savings_vs_ondemand_pct;
      if (avg !== undefined && avg !== null) spot.set(`aws/${region}/${it.instance_type}`, microUsdFromUsd(avg));
      else if (saving !== undefined && saving !== null)
        spot.set(`aws/${region}/${it.instance_type}`, Math.round((odMicro * (100 - saving)) / 100));
      const band = raw.spot_advisor_2025_06?.interruption_freq_bucket;
      if (band) advisorBand.set(`${region}/${it.instance_type}`, band);
    }
  }

  return { instanceTypes, onDemand, spot, advisorBand, gcpZones: new Map() };
}

/**
 * Each GPU model's memory per GPU and its cheapest on-demand price per GPU-hour in the catalogue
 * (any region, any type that carries it): what right-sizing weighs another model at.
 */
export function gpuOffers(catalog: ShippedCatalog): GpuOffers {
  const out = new Map<GpuModel, GpuOffer>();
  for (const [key, price] of catalog.onDemand) {
    const type = catalog.instanceTypes.get(key.slice(key.lastIndexOf('/') + 1));
    if (!type || type.gpuCount <= 0) continue;
    const perGpu = Math.round(price / type.gpuCount);
    const had = out.get(type.gpuModel);
    if (!had || perGpu < had.microUsdPerGpuHour) out.set(type.gpuModel, { memoryMiB: type.gpuMemoryMiB, microUsdPerGpuHour: perGpu });
  }
  return out;
}

// The region of a zone is core's (siteOfZone prices a machine's bytes by it).
export { regionOfZone } from '../../core/catalog.ts';

/** On-demand price of a type in a region (or GCP zone), in µUSD per hour. */
export function onDemandPrice(
  catalog: ShippedCatalog,
  o: Pick<Offering, 'cloud' | 'region' | 'zone' | 'instanceType'>,
): number | undefined {
  return catalog.onDemand.get(`${o.cloud}/${o.zone}/${o.instanceType}`) ?? catalog.onDemand.get(`${o.cloud}/${o.region}/${o.instanceType}`);
}

/** Shipped spot price of a type (zone first, then region), in µUSD per hour. */
export function spotPrice(catalog: ShippedCatalog, o: Pick<Offering, 'cloud' | 'region' | 'zone' | 'instanceType'>): number | undefined {
  return catalog.spot.get(`${o.cloud}/${o.zone}/${o.instanceType}`) ?? catalog.spot.get(`${o.cloud}/${o.region}/${o.instanceType}`);
}

/** Catalogue facts from the shipped data (any cloud). */
export class ShippedCatalogSource implements CatalogSource {
  constructor(private readonly catalog: ShippedCatalog) {}
  async instanceTypes(names: readonly string[]): Promise<Map<string, InstanceType>> {
    const out = new Map<string, InstanceType>();
    for (const n of names) {
      const t = this.catalog.instanceTypes.get(n);
      if (t) out.set(n, t);
    }
    return out;
  }
}

/** Prices from the shipped catalogue, optionally overridden per offering id (config). */
export class ShippedPriceSource implements PriceSource {
  constructor(
    private readonly catalog: ShippedCatalog,
    private readonly overrides: ReadonlyMap<string, number> = new Map(),
  ) {}
  async prices(offerings: readonly Offering[]): Promise<Map<string, PriceQuote>> {
    const out = new Map<string, PriceQuote>();
    for (const o of offerings) {
      const od = onDemandPrice(this.catalog, o);
      if (od === undefined) continue;
      const override = this.overrides.get(o.id);
      const price = override ?? (o.capacityType === 'spot' ? spotPrice(this.catalog, o) : od);
      if (price === undefined) continue;
      const band =
        o.capacityType === 'spot' && o.cloud === 'aws' ? this.catalog.advisorBand.get(`${o.region}/${o.instanceType}`) : undefined;
      out.set(o.id, {
        offeringId: o.id,
        priceMicroUsdPerHour: price,
        onDemandMicroUsdPerHour: od,
        source:
          override !== undefined
            ? 'config override'
            : o.capacityType === 'spot'
              ? 'shipped catalogue (spot)'
              : 'shipped catalogue (on-demand)',
        ...(band ? { interruptionBand: band } : {}),
      });
    }
    return out;
  }
}

/** Reads a CSV shipped in data/. */
export function readShippedCsv(relativePath: string): Record<string, string>[] {
  const text = readFileSync(new URL(`../../data/${relativePath}`, import.meta.url), 'utf8');
  return parseCsv(text);
}
