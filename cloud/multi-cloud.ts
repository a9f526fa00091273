import type { Cloud, InstanceType, Offering, PriceQuote } from '../core/catalog.ts';
import type { CatalogSource, PriceSource } from '../core/ports.ts';

/**
 * One catalogue over several clouds: each name is asked of every source, the first that knows it
 * wins (AWS and GCP machine type names do not collide: "p4d.24xlarge" against "a2-highgpu-1g").
 */
export class MultiCloudCatalog implements CatalogSource {
  constructor(private readonly sources: readonly CatalogSource[]) {}
  async instanceTypes(names: readonly string[]): Promise<Map<string, InstanceType>> {
    const out = new Map<string, InstanceType>();
    let left = [...names];
    for (const s of this.sources) {
      if (left.length === 0) break;
      for (const [k, v] of await s.instanceTypes(left)) out.set(k, v);
      left = left.filter((n) => !out.has(n));
    }
    return out;
  }
}

/** Prices of each offering from its own cloud's source; offerings of a cloud with no source get none. */
export class MultiCloudPrices implements PriceSource {
  constructor(private readonly byCloud: ReadonlyMap<Cloud, PriceSource>) {}
  async prices(offerings: readonly Offering[]): Promise<Map<string, PriceQuote>> {
    const out = new Map<string, PriceQuote>();
    for (const [cloud, source] of this.byCloud) {
      const mine = offerings.filter((o) => o.cloud === cloud);
      if (mine.length === 0) continue;
      for (const [k, v] of await source.prices(mine)) out.set(k, v);
    }
    return out;
  }
}
