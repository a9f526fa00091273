import { usedMilli, type NodeCapacity } from './capacity.ts';

/**
 * An index of nodes for best-fit search. Nodes are grouped by pool (offering); within a pool,
 * nodes with free whole GPUs sit in buckets by how many they have, so that "the fullest node
 * with at least N free GPUs" is a few bucket lookups, not a scan. Nodes with partly used GPUs
 * (shares, MIG) are listed apart for the fractional requests.
 */
export class CapacityIndex {
  private readonly pools = new Map<string, PoolNodes>();
  /** Bumped whenever a pool is added, so callers can cache per-index pool lists. */
  version = 0;

  add(node: NodeCapacity): void {
    let pool = this.pools.get(node.poolKey);
    if (!pool) {
      pool = new PoolNodes(node.poolKey, node.zone, node.gpus.length);
      this.pools.set(node.poolKey, pool);
      this.version++;
    }
    pool.add(node);
  }

  /** Re-files a node after its free capacity changed. */
  update(node: NodeCapacity): void {
    this.pools.get(node.poolKey)?.update(node);
  }

  remove(node: NodeCapacity): void {
    this.pools.get(node.poolKey)?.remove(node);
  }

  poolIds(): IterableIterator<string> {
    return this.pools.keys();
  }

  get size(): number {
    return this.pools.size;
  }

  pool(poolKey: string): PoolNodes | undefined {
    return this.pools.get(poolKey);
  }

  allNodes(): NodeCapacity[] {
    return [...this.pools.values()].flatMap((p) => p.nodes());
  }
}

/** Width of the buckets that file nodes by their largest free share of one GPU, in thousandths. */
const SHARE_BUCKET = 50;

export class PoolNodes {
  private readonly byFree: Set<NodeCapacity>[];
  /** Nodes with a partly shared GPU, by that GPU's free thousandths (the largest such GPU on the node). */
  private readonly byShare: Set<NodeCapacity>[] = Array.from({ length: Math.ceil(1000 / SHARE_BUCKET) }, () => new Set<NodeCapacity>());
  /** Nodes with MIG GPUs that have free slices, by the room the node has free in all (thousandths of GPUs, as usedMilli counts). */
  private readonly migRoom = new Map<number, Set<NodeCapacity>>();
  /** The keys of migRoom, fewest free first. */
  private migKeys: number[] = [];
  private readonly where = new Map<NodeCapacity, { free: number; share: number; mig: number }>();
  private readonly all: NodeCapacity[] = [];
  /** Price of the pool's machines, µUSD/h (for tie-breaks between pools). */
  priceHint = 0;

  constructor(
    readonly poolKey: string,
    readonly zone: string,
    readonly gpusPerNode: number,
  ) {
    this.byFree = Array.from({ length: gpusPerNode + 1 }, () => new Set<NodeCapacity>());
  }

  add(node: NodeCapacity): void {
    this.all.push(node);
    this.priceHint = node.priceMicroUsdPerHour;
    this.file(node);
  }

  /** Re-files a node of this pool; a node the pool does not hold is ignored. */
  update(node: NodeCapacity): void {
    if (!this.where.has(node)) return;
    this.unfile(node);
    this.file(node);
  }

  remove(node: NodeCapacity): void {
    if (!this.where.has(node)) return;
    this.unfile(node);
    this.where.delete(node);
    const i = this.all.indexOf(node);
    if (i >= 0) this.all.splice(i, 1);
  }

  private unfile(node: NodeCapacity): void {
    const was = this.where.get(node)!;
    this.byFree[was.free]?.delete(node);
    if (was.share >= 0) this.byShare[was.share]?.delete(node);
    if (was.mig >= 0) {
      const group = this.migRoom.get(was.mig)!;
      group.delete(node);
      if (group.size === 0) {
        this.migRoom.delete(was.mig);
        this.migKeys = this.migKeys.filter((k) => k !== was.mig);
      }
    }
  }

  private file(node: NodeCapacity): void {
    const free = Math.min(node.freeWhole, this.byFree.length - 1);
    this.byFree[free]!.add(node);
    let share = -1;
    let mig = false;
    for (const g of node.gpus) {
      if (g.mig) mig ||= g.mig.mask !== 0xff;
      else if (!g.whole && g.freeMilli > 0 && g.freeMilli < 1000)
        share = Math.max(share, Math.min(this.byShare.length - 1, Math.floor(g.freeMilli / SHARE_BUCKET)));
    }
    if (share >= 0) this.byShare[share]!.add(node);
    const migAt = mig ? node.gpus.length * 1000 - usedMilli(node) : -1;
    if (migAt >= 0) {
      let group = this.migRoom.get(migAt);
      if (!group) {
        group = new Set();
        this.migRoom.set(migAt, group);
        this.migKeys = [...this.migKeys, migAt].sort((a, b) => a - b);
      }
      group.add(node);
    }
    this.where.set(node, { free, share, mig: migAt });
  }

  /** The node with the fewest free whole GPUs that still has at least `n` (first filed wins ties). */
  fullestWithFree(n: number, accept?: (node: NodeCapacity) => boolean): NodeCapacity | undefined {
    for (let k = Math.max(n, 1); k < this.byFree.length; k++) {
      for (const node of this.byFree[k]!) if (!accept || accept(node)) return node;
    }
    return undefined;
  }

  /** Nodes with at least `n` free whole GPUs, fullest first. */
  *withFree(n: number): Generator<NodeCapacity> {
    for (let k = Math.max(n, 1); k < this.byFree.length; k++) yield* this.byFree[k]!;
  }

  /** Nodes with a partly shared GPU that may have `milli` free, tightest first (within one bucket). */
  *sharedWithRoom(milli: number): Generator<NodeCapacity> {
    for (let k = Math.floor(milli / SHARE_BUCKET); k < this.byShare.length; k++) yield* this.byShare[k]!;
  }

  /** Nodes with MIG GPUs that have free slices, in groups of equal free room, fewest first. */
  *migNodesByRoom(): Generator<ReadonlySet<NodeCapacity>> {
    for (const k of this.migKeys) yield this.migRoom.get(k)!;
  }

  nodes(): readonly NodeCapacity[] {
    return this.all;
  }

  hasFree(): boolean {
    for (let k = 1; k < this.byFree.length; k++) if (this.byFree[k]!.size > 0) return true;
    return this.migRoom.size > 0 || this.byShare.some((b) => b.size > 0);
  }
}
