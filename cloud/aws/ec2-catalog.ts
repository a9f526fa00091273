import { DescribeInstanceTypesCommand, DescribeSpotPriceHistoryCommand, type EC2Client, type _InstanceType } from '@aws-sdk/client-ec2';
import type { InstanceType, Offering, PriceQuote } from '../../core/catalog.ts';
import { normalizeGpuModel } from '../../core/gpu.ts';
import { microUsdFromUsd } from '../../core/money.ts';
import type { CatalogSource, Clock, PriceSource } from '../../core/ports.ts';
import { awsShippedCatalog, onDemandPrice, spotPrice, type ShippedCatalog } from '../catalog/shipped.ts';
import { translateAwsError } from './errors.ts';

/**
 * GPU facts from EC2 DescribeInstanceTypes (count, maker, model, memory), cached for the life
 * of the process: instance types do not change. Types EC2 does not describe (or has no GPU
 * for) fall back to the shipped catalogue.
 */
export class Ec2Catalog implements CatalogSource {
  private readonly cache = new Map<string, InstanceType | null>();

  constructor(
    private readonly ec2: EC2Client,
    private readonly shipped: ShippedCatalog = awsShippedCatalog(),
  ) {}

  async instanceTypes(names: readonly string[]): Promise<Map<string, InstanceType>> {
    const missing = [...new Set(names)].filter((n) => !this.cache.has(n));
    for (let i = 0; i < missing.length; i += 100) {
      const batch = missing.slice(i, i + 100);
      let token: string | undefined;
      const seen = new Set<string>();
      try {
        do {
          const page = await this.ec2.send(
            new DescribeInstanceTypesCommand({ InstanceTypes: batch as _InstanceType[], ...(token ? { NextToken: token } : {}) }),
          );
          for (const it of page.InstanceTypes ?? []) {
            const name = it.InstanceType!;
            seen.add(name);
            const gpu = it.GpuInfo?.Gpus?.[0];
            const count = (it.GpuInfo?.Gpus ?? []).reduce((s, g) => s + (g.Count ?? 0), 0);
            const memPerGpu = gpu?.MemoryInfo?.SizeInMiB ?? 0;
            const model = gpu ? normalizeGpuModel(`${gpu.Manufacturer ?? ''} ${gpu.Name ?? ''}`, memPerGpu / 1024) : undefined;
            this.cache.set(
              name,
              model && count > 0
                ? {
                    name,
                    cloud: 'aws',
                    gpuModel: model,
                    gpuCount: count,
                    gpuMemoryMiB: memPerGpu,
                    vcpus: it.VCpuInfo?.DefaultVCpus ?? 0,
                    memoryMiB: it.MemoryInfo?.SizeInMiB ?? 0,
                  }
                : (this.shipped.instanceTypes.get(name) ?? null),
            );
          }
          token = page.NextToken;
        } while (token);
      } catch (error) {
        const e = translateAwsError(error, { operation: 'describe instance types', resource: batch.join(',') });
        // An unknown type name fails the whole call; fall back to the shipped facts for this batch.
        if (e.code !== 'invalid-request') throw e;
      }
      for (const n of batch) if (!seen.has(n) && !this.cache.has(n)) this.cache.set(n, this.shipped.instanceTypes.get(n) ?? null);
    }
    const out = new Map<string, InstanceType>();
    for (const n of names) {
      const t = this.cache.get(n);
      if (t) out.set(n, t);
    }
    return out;
  }
}

export interface AwsPriceOptions {
  readonly clock: Clock;
  /** How long spot prices are trusted, seconds (default 300). */
  readonly spotCacheSec?: number;
  /** µUSD per hour by offering id, from the config: wins over everything else. */
  readonly overrides?: ReadonlyMap<string, number>;
  /**
   * EC2 Spot Placement Scores (cloud/aws/spot-placement-scores.ts), asked for the spot instance types
   * the offerings list in each region, one machine at a time (the launch the planner weighs): each
   * spot quote carries its zone's score where there is one. Off by default.
   */
  readonly placementScores?: (region: string) => PlacementScoreSource | undefined;
}

/** What the price source asks for placement scores: zone name → 1..10, empty when none is known. */
export interface PlacementScoreSource {
  scores(request: { readonly instanceTypes: readonly string[]; readonly targetCapacity: number }): Promise<ReadonlyMap<string, number>>;
}

/**
 * Prices: on-demand from the catalogue shipped with gpu-fleet (AWS publishes those through the
 * Pricing API, which is not in every region; the shipped data says where it came from), spot
 * from EC2 DescribeSpotPriceHistory, the newest price per zone and type, cached for a while.
 * A spot offering EC2 has no price for falls back to the shipped spot price. The Spot Advisor
 * band of each pool comes along as the prior of its risk.
 */
export class AwsPriceSource implements PriceSource {
  private spot: { atMs: number; key: string; prices: Map<string, number> } | undefined;

  constructor(
    private readonly ec2: EC2Client,
    private readonly options: AwsPriceOptions,
    private readonly shipped: ShippedCatalog = awsShippedCatalog(),
  ) {}

  private async spotPrices(offerings: readonly Offering[]): Promise<Map<string, number>> {
    const spot = offerings.filter((o) => o.capacityType === 'spot' && o.cloud === 'aws');
    const types = [...new Set(spot.map((o) => o.instanceType))].sort();
    if (types.length === 0) return new Map();
    const key = types.join(',');
    const now = this.options.clock.nowMs();
    if (this.spot && this.spot.key === key && now - this.spot.atMs < (this.options.spotCacheSec ?? 300) * 1000) return this.spot.prices;
    const newest = new Map<string, { atMs: number; price: number }>();
    let token: string | undefined;
    do {
      const page = await this.call(() =>
        this.ec2.send(
          new DescribeSpotPriceHistoryCommand({
            InstanceTypes: types as _InstanceType[],
            ProductDescriptions: ['Linux/UNIX', 'Linux/UNIX (Amazon VPC)'],
            StartTime: new Date(now),
            MaxResults: 1000,
            ...(token ? { NextToken: token } : {}),
          }),
        ),
      );
      for (const p of page.SpotPriceHistory ?? []) {
        if (!p.AvailabilityZone || !p.InstanceType || !p.SpotPrice) continue;
        const k = `${p.AvailabilityZone}/${p.InstanceType}`;
        const at = p.Timestamp ? new Date(p.Timestamp).getTime() : 0;
        const prev = newest.get(k);
        if (!prev || at > prev.atMs) newest.set(k, { atMs: at, price: microUsdFromUsd(Number(p.SpotPrice)) });
      }
      token = page.NextToken || undefined;
    } while (token);
    const prices = new Map([...newest.entries()].map(([k, v]) => [k, v.price]));
    this.spot = { atMs: now, key, prices };
    return prices;
  }

  async prices(offerings: readonly Offering[]): Promise<Map<string, PriceQuote>> {
    const spot = await this.spotPrices(offerings);
    const scores = await this.placementScores(offerings);
    const out = new Map<string, PriceQuote>();
    for (const o of offerings) {
      const od = onDemandPrice(this.shipped, o);
      const override = this.options.overrides?.get(o.id);
      if (od === undefined && override === undefined) continue;
      const live = o.capacityType === 'spot' ? spot.get(`${o.zone}/${o.instanceType}`) : undefined;
      const price = override ?? (o.capacityType === 'spot' ? (live ?? spotPrice(this.shipped, o)) : od);
      if (price === undefined) continue;
      const band = o.capacityType === 'spot' ? this.shipped.advisorBand.get(`${o.region}/${o.instanceType}`) : undefined;
      const score = o.capacityType === 'spot' ? scores.get(o.zone) : undefined;
      out.set(o.id, {
        offeringId: o.id,
        priceMicroUsdPerHour: price,
        onDemandMicroUsdPerHour: od ?? price,
        source:
          override !== undefined
            ? 'config override'
            : live !== undefined
              ? 'EC2 spot price history'
              : o.capacityType === 'spot'
                ? 'shipped catalogue (spot)'
                : 'shipped catalogue (on-demand)',
        ...(band ? { interruptionBand: band } : {}),
        ...(score !== undefined ? { placementScore: score } : {}),
      });
    }
    return out;
  }

  /**
   * Zone name → placement score for the spot types of each region the offerings list. The scores are
   * a prior, not a price: a failure to read them leaves the quotes without (the source says why).
   */
  private async placementScores(offerings: readonly Offering[]): Promise<Map<string, number>> {
    const out = new Map<string, number>();
    if (!this.options.placementScores) return out;
    const typesByRegion = new Map<string, Set<string>>();
    for (const o of offerings)
      if (o.capacityType === 'spot' && o.cloud === 'aws')
        typesByRegion.set(o.region, (typesByRegion.get(o.region) ?? new Set()).add(o.instanceType));
    for (const [region, types] of typesByRegion) {
      const source = this.options.placementScores(region);
      if (!source) continue;
      const scores = await source.scores({ instanceTypes: [...types], targetCapacity: 1 }).catch(() => new Map<string, number>());
      for (const [zone, score] of scores) out.set(zone, score);
    }
    return out;
  }

  private async call<T>(f: () => Promise<T>): Promise<T> {
    try {
      return await f();
    } catch (error) {
      throw translateAwsError(error, { operation: 'describe spot price history' });
    }
  }
}
