/**
 * Fit search: where in an index a job of a class would fit best. Best fit is the fullest machine
 * that fits (ties: cheapest, then by id); a gang takes that many distinct machines in one zone. A
 * service replica goes where its image already is when that costs no more per hour.
 * Also a class's homes: the pools that are its cheapest per GPU. Searches only; it must not take
 * room (that is `commitPlacement`) or decide whether a job may have it (that is limits).
 */
import type { GpuRequest } from '../gpu.ts';
import type { NodeAssignment } from '../job.ts';
import { migProfile } from '../mig.ts';
import { tryFit, usedMilli, type NodeCapacity } from './capacity.ts';
import { portsFree, wallAllows } from './host-net.ts';
import type { CapacityIndex, PoolNodes } from './capacity-index.ts';
import { perMilli, type Entry, type Fit, type JobClass, type PlanningState } from './state.ts';

export function findFits(
  st: PlanningState,
  index: CapacityIndex,
  e: Entry,
  only?: ReadonlySet<string>,
  acceptNode?: (node: NodeCapacity) => boolean,
): Fit[] | undefined {
  const best = bestFits(st, index, e, only, acceptNode);
  // A service replica starts sooner where its image already is (no pull): such a machine is
  // preferred to the best fit when a GPU of it costs no more per hour (its rework factor counted).
  const image = e.job.spec.service ? e.job.spec.image : undefined;
  if (!best || best.length !== 1 || image === undefined || best[0]!.node.images?.includes(image)) return best;
  const holds = (node: NodeCapacity) => node.images?.includes(image) === true && (acceptNode === undefined || acceptNode(node));
  const warm = bestFits(st, index, e, only, holds);
  if (!warm || warm.length !== 1) return best;
  // Per GPU, so machines of different sizes compare by what the replica's share of them costs.
  const cost = (f: Fit) => (f.node.priceMicroUsdPerHour / Math.max(1, f.node.gpus.length)) * (e.cls.eligible.get(f.node.poolKey) ?? 1);
  return cost(warm[0]!) <= cost(best[0]!) ? warm : best;
}

function bestFits(
  st: PlanningState,
  index: CapacityIndex,
  e: Entry,
  only?: ReadonlySet<string>,
  acceptNode?: (node: NodeCapacity) => boolean,
): Fit[] | undefined {
  const { request, ports, wall } = e.cls;
  const need = e.cls.nodes;
  // A machine that holds one of the class's ports, or another team's host-network work, is no fit, whatever room its GPUs have.
  const accept =
    ports.length === 0 && !wall
      ? acceptNode
      : (node: NodeCapacity) => portsFree(node, ports) && wallAllows(node, wall) && (acceptNode === undefined || acceptNode(node));
  if (need === 1) {
    let best: { fit?: Fit; node: NodeCapacity; free: number; price: number } | undefined;
    for (const poolId of poolsToSearch(st, index, e.cls.eligible)) {
      if (only && !only.has(poolId)) continue;
      const pool = index.pool(poolId)!;
      const price = pool.priceHint * (e.cls.eligible.get(poolId) ?? 1);
      if (request.kind === 'whole') {
        // Fullest node with room: decided on counts; the assignment is built for the winner only.
        const node = pool.fullestWithFree(request.count, accept);
        if (!node) continue;
        const free = freeMilliOf(node) - request.count * 1000;
        if (!best || free < best.free || (free === best.free && (price < best.price || (price === best.price && node.id < best.node.id))))
          best = { node, free, price };
        continue;
      }
      const candidate = bestInPool(pool, request, ports, accept);
      if (!candidate) continue;
      const free = freeAfter(candidate.node, candidate.assignment);
      if (
        !best ||
        free < best.free ||
        (free === best.free && (price < best.price || (price === best.price && candidate.node.id < best.node.id)))
      )
        best = { fit: candidate, node: candidate.node, free, price };
    }
    if (!best) return undefined;
    if (best.fit) return [best.fit];
    const assignment = tryFit(best.node, request, ports, wall);
    return assignment ? [{ node: best.node, assignment }] : undefined;
  }
  // Gangs: per zone, collect nodes that each hold one member; take the fullest ones.
  const byZone = new Map<string, Fit[]>();
  for (const poolId of poolsToSearch(st, index, e.cls.eligible)) {
    if (only && !only.has(poolId)) continue;
    const pool = index.pool(poolId)!;
    const list = byZone.get(pool.zone) ?? [];
    for (const node of pool.withFree(request.kind === 'whole' ? request.count : 1)) {
      if (accept && !accept(node)) continue;
      const assignment = tryFit(node, request, ports, wall);
      if (assignment) list.push({ node, assignment });
    }
    byZone.set(pool.zone, list);
  }
  let best: { fits: Fit[]; score: number } | undefined;
  for (const zone of [...byZone.keys()].sort()) {
    const list = byZone.get(zone)!;
    if (list.length < need) continue;
    list.sort(
      (a, b) =>
        freeAfter(a.node, a.assignment) - freeAfter(b.node, b.assignment) ||
        a.node.priceMicroUsdPerHour - b.node.priceMicroUsdPerHour ||
        (a.node.id < b.node.id ? -1 : 1),
    );
    const fits = list.slice(0, need);
    const score = fits.reduce((s, f) => s + freeAfter(f.node, f.assignment), 0);
    if (!best || score < best.score) best = { fits, score };
  }
  return best?.fits;
}

/** The pools of an index a class may use (cached until the index gains a pool). */
function poolsToSearch(st: PlanningState, index: CapacityIndex, eligible: ReadonlyMap<string, number>): readonly string[] {
  let byClass = st.searchCache.get(index);
  if (!byClass) {
    byClass = new Map();
    st.searchCache.set(index, byClass);
  }
  const hit = byClass.get(eligible);
  if (hit && hit.version === index.version) return hit.keys;
  const keys: string[] = [];
  if (eligible.size < index.size) {
    for (const key of eligible.keys()) if (index.pool(key)) keys.push(key);
  } else {
    for (const key of index.poolIds()) if (eligible.has(key)) keys.push(key);
  }
  byClass.set(eligible, { version: index.version, keys });
  return keys;
}

function bestInPool(
  pool: PoolNodes,
  request: GpuRequest,
  ports: readonly number[],
  accept?: (node: NodeCapacity) => boolean,
): Fit | undefined {
  if (request.kind === 'whole') {
    for (const node of pool.withFree(request.count)) {
      if (accept && !accept(node)) continue;
      const assignment = tryFit(node, request, ports);
      if (assignment) return { node, assignment };
    }
    return undefined;
  }
  if (request.kind === 'fraction') {
    // Partly shared GPUs first, tightest first; then a node with an untouched GPU.
    for (const node of pool.sharedWithRoom(request.milliGpu)) {
      if (accept && !accept(node)) continue;
      const assignment = tryFit(node, request, ports);
      if (assignment) return { node, assignment };
    }
    for (const node of pool.withFree(1)) {
      if (accept && !accept(node)) continue;
      const assignment = tryFit(node, request, ports);
      if (assignment) return { node, assignment };
    }
    return undefined;
  }
  // MIG slices: the fullest node that fits (the room a slice leaves is its node's free room less
  // the slice), so nodes are looked at by free room, fewest first, and the first group
  // with a fit decides (lowest id within it); tryFit prefers the fullest GPU of a node.
  for (const group of pool.migNodesByRoom()) {
    let best: Fit | undefined;
    for (const node of group) {
      if ((best && node.id >= best.node.id) || (accept && !accept(node))) continue;
      const assignment = tryFit(node, request, ports);
      if (assignment) best = { node, assignment };
    }
    if (best) return best;
  }
  return undefined;
}

/** The pools that are a class's cheapest per GPU (within 0.01%): where it is best placed. */
export function homes(st: PlanningState, cls: JobClass): Set<string> {
  let set = st.homeCache.get(cls);
  if (!set) {
    let best = Infinity;
    for (const [key, factor] of cls.eligible) {
      const info = st.offerings.get(key);
      if (info) best = Math.min(best, perMilli(info, factor));
    }
    set = new Set(
      [...cls.eligible]
        .filter(([key, factor]) => {
          const info = st.offerings.get(key);
          return info !== undefined && perMilli(info, factor) <= best * 1.0001;
        })
        .map(([key]) => key),
    );
    st.homeCache.set(cls, set);
  }
  return set;
}

/** Thousandths of GPUs still free on a node. */
function freeMilliOf(node: NodeCapacity): number {
  return node.gpus.length * 1000 - usedMilli(node);
}

/**
 * How much room the machine would have left after the assignment, in thousandths of GPUs
 * (smaller is a better fit). Room, not share: a MIG slice takes its memory slices ÷ 8.
 */
function freeAfter(node: NodeCapacity, a: NodeAssignment): number {
  const total = node.gpus.length * 1000 - usedMilli(node);
  if (a.share) return total - a.share.milliGpu;
  if (a.mig) {
    const g = node.gpus[a.gpuIndices[0]!];
    const p = g ? migProfile(g.model, a.mig.profile) : undefined;
    return total - Math.round(((p?.memorySlices ?? 1) * 1000) / 8);
  }
  return total - a.gpuIndices.length * 1000;
}
