/**
 * The demand still waiting for new capacity, for judging offerings: an offering's efficiency is
 * its expected hourly cost divided by the GPU-thousandths that waiting jobs would fill on one
 * machine of it. Jobs are grouped by how they fill (unit size × allowed pools); each pool keeps
 * its groups sorted by size once. Results are cached per (group, pool) and recomputed only when
 * the demand has shrunk enough to change a fill (a quarter less, or the tail of the queue).
 * It measures; it must not choose an offering or take room.
 */
import { perMilli, unitOf, type Entry, type JobClass, type OfferingInfo } from './state.ts';

/** Jobs that fill a machine the same way: one unit size and one set of pools they may use. */
export interface FillGroup {
  readonly id: number;
  /** Thousandths of a GPU one job takes (a whole GPU request counts its GPUs). */
  readonly unit: number;
  readonly eligible: ReadonlyMap<string, number>;
  count: number;
  /** The lowest expected price per GPU-thousandth among its pools: it only helps fill pools that good. */
  bestPerMilli: number;
}

export class Demand {
  private readonly groups: FillGroup[] = [];
  private readonly groupOf = new Map<JobClass, FillGroup>();
  private readonly byPool = new Map<string, FillGroup[]>();
  private total = 0;
  private readonly cache = new Map<number, { totalAt: number; results: Map<string, { eff: number; fill: number }> }>();
  /** Changes whenever cached fills may have gone stale: a quarter of the demand is gone, or in the tail. */
  epoch = 0;
  private epochTotal = 0;

  constructor(
    entries: readonly Entry[],
    private readonly offerings: ReadonlyMap<string, OfferingInfo>,
  ) {
    const bySignature = new Map<string, FillGroup>();
    for (const e of entries) {
      this.total += e.cls.milli * e.cls.nodes;
      this.epochTotal = this.total;
      if (e.cls.nodes !== 1 || e.cls.eligible.size === 0) continue; // gangs take machines of their own
      let g = this.groupOf.get(e.cls);
      if (!g) {
        const unit = unitOf(e.cls);
        const signature = `${unit}|${[...e.cls.eligible.keys()].join(',')}`;
        g = bySignature.get(signature);
        if (!g) {
          g = { id: this.groups.length, unit, eligible: e.cls.eligible, count: 0, bestPerMilli: this.bestPerMilli(e.cls.eligible) };
          this.groups.push(g);
          bySignature.set(signature, g);
        }
        this.groupOf.set(e.cls, g);
      }
      g.count++;
    }
  }

  /** The kinds of work a machine of this pool, bought for `e`, is expected to be filled with. */
  private readonly fillerSets = new Map<string, Set<FillGroup | undefined>>();
  fillers(key: string, e: Entry): ReadonlySet<FillGroup | undefined> {
    const own = this.groupOf.get(e.cls);
    const k = `${key}|${own?.id ?? -1}`;
    let set = this.fillerSets.get(k);
    if (!set) {
      set = new Set<FillGroup | undefined>([...this.poolGroups(key), own]);
      this.fillerSets.set(k, set);
    }
    return set;
  }

  groupFor(e: Entry): FillGroup | undefined {
    return this.groupOf.get(e.cls);
  }

  take(e: Entry): void {
    this.total -= e.cls.milli * e.cls.nodes;
    const g = this.groupOf.get(e.cls);
    if (g) g.count--;
    if (this.total < 64_000 || this.total < this.epochTotal * 0.75) {
      this.epoch++;
      this.epochTotal = this.total;
    }
  }

  efficiency(info: OfferingInfo, e: Entry, factor: number): { eff: number; fill: number } {
    const own = this.groupOf.get(e.cls);
    const cacheKey = own?.id ?? -1;
    let cached = this.cache.get(cacheKey);
    // While plenty of demand waits, fills are full and choices do not change; recompute in the tail or after a large drop.
    if (!cached || cached.totalAt !== this.epoch) {
      cached = { totalAt: this.epoch, results: new Map() };
      this.cache.set(cacheKey, cached);
    }
    if (own) {
      const hit = cached.results.get(info.key);
      if (hit) return hit;
    }
    const result = this.compute(info, e, own, factor);
    if (own) cached.results.set(info.key, result);
    return result;
  }

  private bestPerMilli(eligible: ReadonlyMap<string, number>): number {
    let best = Infinity;
    for (const [key, factor] of eligible) {
      const info = this.offerings.get(key);
      if (info && info.groups.length > 0) best = Math.min(best, perMilli(info, factor));
    }
    return best;
  }

  /**
   * The waiting work that would help fill a machine of this pool: groups that may use it and
   * have nothing cheaper per GPU elsewhere (work with a cheaper home would go there instead).
   */
  private poolGroups(key: string): FillGroup[] {
    let list = this.byPool.get(key);
    if (!list) {
      const info = this.offerings.get(key);
      list = this.groups
        .filter((g) => g.eligible.has(key) && info !== undefined && perMilli(info, g.eligible.get(key)!) <= g.bestPerMilli * 1.0001)
        .sort((a, b) => b.unit - a.unit || a.id - b.id);
      this.byPool.set(key, list);
    }
    return list;
  }

  private compute(info: OfferingInfo, e: Entry, own: FillGroup | undefined, factor: number): { eff: number; fill: number } {
    const capacity = info.type.gpuCount * 1000;
    // The job itself (each gang member takes one node of its own), then waiting work, biggest first.
    const first = unitOf(e.cls);
    let room = capacity - first;
    let fill = first;
    let penalty = first * (factor - 1);
    const groups = this.poolGroups(info.key);
    // The job's own kind always counts, even where this pool is not its cheapest home.
    const withOwn = own && !groups.includes(own) ? [...groups, own].sort((a, b) => b.unit - a.unit || a.id - b.id) : groups;
    for (const g of withOwn) {
      if (room <= 0) break;
      const available = g === own ? g.count - 1 : g.count;
      if (available <= 0 || g.unit > room) continue;
      const take = Math.min(available, Math.floor(room / g.unit));
      room -= take * g.unit;
      fill += take * g.unit;
      penalty += take * g.unit * ((g.eligible.get(info.key) ?? 1) - 1);
    }
    const hourly = info.price * (1 + penalty / capacity);
    return { eff: hourly / fill, fill };
  }
}
