/**
 * The new-capacity problem of a snapshot as the planner sees it, for the lower bound: the same
 * indexing and classification phases the planner runs, then the waiting work aggregated into
 * classes, the pools that may be bought from, and the free room on ready machines in bins.
 */
import type { GpuRequest } from '../../core/gpu.ts';
import { popcount } from '../../core/planner/capacity.ts';
import { classify } from '../../core/planner/classification.ts';
import { indexSnapshot } from '../../core/planner/planner.ts';
import { unavailable, unitOf, type Entry, type PlanningState } from '../../core/planner/state.ts';
import type { Snapshot } from '../../core/snapshot.ts';

export interface CapacityProblem {
  /** Waiting work that some pool could hold, aggregated: each unit is one job (a gang counts each member). */
  readonly classes: readonly {
    readonly kind: GpuRequest['kind'];
    /** Whole GPUs per job for whole requests; 0 otherwise. */
    readonly wholeGpus: number;
    readonly unitMilli: number;
    readonly memoryMiB: number;
    readonly count: number;
    readonly eligible: ReadonlyMap<string, number>;
  }[];
  /** Pools that may be bought from. */
  readonly pools: readonly {
    readonly key: string;
    readonly priceMicroUsdPerHour: number;
    readonly gpuCount: number;
    readonly gpuMemoryMiB: number;
    readonly room: number;
  }[];
  /**
   * Free room on ready live machines, in bins: `whole` bins are machines of a pool with exactly
   * `freeWhole` untouched GPUs (`machines` of them); `shared` bins hold the free time and memory
   * of partly used GPUs (shares only); `mig` bins the free memory slices of MIG GPUs (MIG only).
   */
  readonly live: readonly Bin[];
  /**
   * The same free room machine by machine, for the exact bound on live capacity: each ready
   * machine's untouched GPUs and each of its partly shared GPUs on their own (MIG room stays in
   * the `mig` bins of `live`).
   */
  readonly machines: readonly LiveMachine[];
}

export interface LiveMachine {
  readonly pool: string;
  /** GPUs with nothing on them, and the memory of each. */
  readonly freeWhole: number;
  readonly gpuMemoryMiB: number;
  /** Partly shared GPUs: the time and memory each has left. */
  readonly shared: readonly { readonly freeMilli: number; readonly freeMemoryMiB: number }[];
}

interface Bin {
  readonly pool: string;
  readonly kind: 'whole' | 'shared' | 'mig';
  readonly freeWhole: number;
  machines: number;
  freeMilli: number;
  freeMemoryMiB: number;
}

type ProblemClass = CapacityProblem['classes'][number] & { count: number };

export function capacityProblem(snapshot: Snapshot): CapacityProblem {
  const st = indexSnapshot(snapshot);
  return problemOf(st, classify(st));
}

/** The problem of the given waiting work on a planning state's ready room and pools as they stand. */
export function problemOf(st: PlanningState, entries: readonly Entry[]): CapacityProblem {
  const snapshot = st.s;
  const classes = new Map<string, ProblemClass>();
  for (const e of entries) {
    if (e.cls.eligible.size === 0) continue;
    const memoryMiB = e.cls.request.kind === 'fraction' ? e.cls.request.memoryMiB : 0;
    const unitMilli = unitOf(e.cls);
    const wholeGpus = e.cls.request.kind === 'whole' ? e.cls.request.count : 0;
    const key = `${e.cls.request.kind}|${unitMilli}|${memoryMiB}|${[...e.cls.eligible].map(([k, f]) => `${k}=${f.toFixed(6)}`).join(',')}`;
    const c = classes.get(key) ?? { kind: e.cls.request.kind, wholeGpus, unitMilli, memoryMiB, count: 0, eligible: e.cls.eligible };
    c.count += e.cls.nodes;
    classes.set(key, c);
  }
  const bins = new Map<string, Bin>();
  const bin = (pool: string, kind: Bin['kind'], freeWhole: number) => {
    const k = `${pool}|${kind}|${freeWhole}`;
    let b = bins.get(k);
    if (!b) {
      b = { pool, kind, freeWhole, machines: 0, freeMilli: 0, freeMemoryMiB: 0 };
      bins.set(k, b);
    }
    return b;
  };
  const machines: LiveMachine[] = [];
  for (const n of st.ready.allNodes()) {
    const shared = n.gpus.filter((g) => !g.mig && !g.whole && g.freeMilli > 0 && g.freeMilli < 1000);
    if (n.freeWhole > 0 || shared.length > 0)
      machines.push({
        pool: n.poolKey,
        freeWhole: n.freeWhole,
        gpuMemoryMiB: n.gpus[0]?.memoryMiB ?? 0,
        shared: shared.map((g) => ({ freeMilli: g.freeMilli, freeMemoryMiB: g.freeMemoryMiB })),
      });
    if (n.freeWhole > 0) {
      const b = bin(n.poolKey, 'whole', n.freeWhole);
      b.machines++;
      b.freeMilli += n.freeWhole * 1000;
      for (const g of n.gpus) if (!g.mig && !g.whole && g.freeMilli === 1000) b.freeMemoryMiB += g.memoryMiB;
    }
    for (const g of n.gpus) {
      if (g.mig) {
        if (g.mig.mask !== 0xff) bin(n.poolKey, 'mig', 0).freeMilli += Math.round(((8 - popcount(g.mig.mask)) * 1000) / 8);
      } else if (!g.whole && g.freeMilli > 0 && g.freeMilli < 1000) {
        const b = bin(n.poolKey, 'shared', 0);
        b.freeMilli += g.freeMilli;
        b.freeMemoryMiB += g.freeMemoryMiB;
      }
    }
  }
  const pools = st.allOfferings.map((info) => ({
    key: info.key,
    priceMicroUsdPerHour: info.price,
    gpuCount: info.type.gpuCount,
    gpuMemoryMiB: info.type.gpuMemoryMiB,
    room: unavailable(snapshot, info.offering.id) ? 0 : info.groups.reduce((sum, g) => sum + g.room, 0),
  }));
  return { classes: [...classes.values()], pools, live: [...bins.values()], machines };
}
