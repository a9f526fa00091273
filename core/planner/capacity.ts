import type { InstanceType, InstanceTypeCatalog, Offering } from '../catalog.ts';
import type { Instance, NodeGroup } from '../fleet.ts';
import type { JobSpec } from '../job-spec.ts';
import { gpuModelMatches, type GpuModel, type GpuRequest } from '../gpu.ts';
import type { NodeAssignment } from '../job.ts';
import { portsFree, wallAllows, type HostNetWall } from './host-net.ts';
import { bestStart, MIG_GPUS, migProfile, placementMask, type MigState } from '../mig.ts';

/**
 * Free capacity of one GPU. A GPU is in one of three modes: whole (free, or held by one job),
 * time-sliced (shares of its time and memory given to several jobs), or MIG (GPU instances at
 * fixed placements). A GPU in MIG mode takes only MIG requests; a GPU with shares takes only shares.
 */
export interface GpuSlot {
  readonly index: number;
  readonly model: GpuModel;
  readonly memoryMiB: number;
  /** Thousandths of the GPU's time not given out (1000 = untouched). */
  freeMilli: number;
  freeMemoryMiB: number;
  /** Held whole by one job. */
  whole: boolean;
  /** Present when the GPU is in MIG mode. */
  readonly mig?: MigState;
}

export type NodeKind = 'ready' | 'booting' | 'planned';

/** A node as the planner packs it: ready (schedulable now), booting (or launching), or planned (to be bought). */
export interface NodeCapacity extends Pick<Instance, 'id' | 'groupId' | 'cloud' | 'region' | 'zone' | 'instanceType' | 'capacityType'> {
  readonly offeringId: string;
  /** The offering plus its GPU mode: a MIG-mode pool and a plain pool of one offering are different pools. */
  readonly poolKey: string;
  readonly kind: NodeKind;
  readonly priceMicroUsdPerHour: number;
  readonly gpus: GpuSlot[];
  /** GPUs with nothing at all on them (and not in MIG mode). Kept in step by {@link commitFit}. */
  freeWhole: number;
  /**
   * Ports of the machine its jobs' containers listen on with the host's network (services' ports,
   * gang leaders' rendezvous ports): a job that needs one of them does not fit here. Kept by {@link commitFit}.
   */
  readonly ports: number[];
  /** Teams whose work runs here on the machine's own network (a service replica, a gang rank). Kept by {@link commitFit}. */
  readonly hostNetTeams: string[];
  /** Container images its agent says it holds (a live machine's, as reported); a replica of one starts here without its pull. */
  readonly images?: readonly string[];
}

export function poolKeyOf(offeringId: string, migMode: boolean): string {
  return migMode ? `${offeringId}#mig` : offeringId;
}

/** A machine's GPU mode: what its agent reports (any GPU in MIG mode), else its group's. */
export function machineInMigMode(reported: readonly { readonly migEnabled?: boolean }[], groupMigEnabled: boolean): boolean {
  return reported.length > 0 ? reported.some((g) => g.migEnabled === true) : groupMigEnabled;
}

export function isMigModel(model: GpuModel): boolean {
  return MIG_GPUS[model] !== undefined;
}

export function makeGpus(type: InstanceType, migMode: boolean): GpuSlot[] {
  const mig = migMode && isMigModel(type.gpuModel);
  const gpus: GpuSlot[] = [];
  // One literal with every field (mig undefined when not in MIG mode): one object shape for every slot.
  for (let index = 0; index < type.gpuCount; index++)
    gpus.push({
      index,
      model: type.gpuModel,
      memoryMiB: type.gpuMemoryMiB,
      freeMilli: 1000,
      freeMemoryMiB: type.gpuMemoryMiB,
      whole: false,
      mig: mig ? { mask: 0, counts: new Map<string, number>() } : undefined,
    });
  return gpus;
}

export function countFreeWhole(gpus: readonly GpuSlot[]): number {
  let n = 0;
  for (const g of gpus) if (!g.mig && !g.whole && g.freeMilli === 1000) n++;
  return n;
}

function modelOk(models: readonly string[] | undefined, model: GpuModel): boolean {
  return models === undefined || models.some((m) => gpuModelMatches(m, model));
}

/** True when a machine type (in MIG mode or not) could ever hold the request, ignoring what is on it. */
export function typeCanHold(type: InstanceType, request: GpuRequest, migMode: boolean): boolean {
  if (!modelOk(request.models, type.gpuModel)) return false;
  const mig = migMode && isMigModel(type.gpuModel);
  switch (request.kind) {
    case 'whole':
      return !mig && type.gpuCount >= request.count && (request.minMemoryMiB === undefined || type.gpuMemoryMiB >= request.minMemoryMiB);
    case 'fraction':
      return !mig && type.gpuCount >= 1 && type.gpuMemoryMiB >= request.memoryMiB;
    case 'mig':
      return mig && migProfile(type.gpuModel, request.profile) !== undefined;
  }
}

/** Whether an offering is within a spec's placement limits (clouds, regions, zones). */
export function placementAllowed(limits: JobSpec['placement'], o: Pick<Offering, 'cloud' | 'region' | 'zone'>): boolean {
  if (!limits) return true;
  if (limits.clouds && !limits.clouds.includes(o.cloud as 'aws' | 'gcp')) return false;
  if (limits.regions && !limits.regions.includes(o.region)) return false;
  if (limits.zones && !limits.zones.includes(o.zone)) return false;
  return true;
}

/**
 * Why no node group could ever hold the spec (undefined when one could): no offering of any group
 * has a machine type, in the group's GPU mode, that can hold the request on each of its nodes,
 * within its placement limits and capacity type (on-demand only for work that may not be
 * interrupted), and enough machines for a gang. The message says what the groups offer. A group
 * with a machine type the catalogue does not know could hold anything: then nothing is said.
 */
export function whyNoGroupHolds(
  spec: Pick<JobSpec, 'gpu' | 'nodes' | 'interruptible' | 'placement'>,
  groups: readonly NodeGroup[],
  types: InstanceTypeCatalog,
): string | undefined {
  const offered = new Map<string, string>();
  for (const g of groups) {
    for (const o of g.offerings) {
      const type = types.get(o.instanceType);
      if (!type) return undefined;
      const mig = g.migEnabled === true && isMigModel(type.gpuModel);
      offered.set(
        `${o.instanceType}${mig ? ' MIG' : ''}`,
        `${o.instanceType} (${type.gpuCount} ${type.gpuModel}${mig ? ', MIG mode' : ''})`,
      );
      if (!typeCanHold(type, spec.gpu, g.migEnabled === true)) continue;
      if (!spec.interruptible && o.capacityType === 'spot') continue;
      if (!placementAllowed(spec.placement, o)) continue;
      if (g.maxSize >= spec.nodes) return undefined;
    }
  }
  const list = [...offered.values()].sort();
  const unmet = list.length > 0 ? unmetRequirements(spec, groups, types) : [];
  return `no node group can hold it: ${unmet.length > 0 ? `${unmet.join('; ')}; ` : ''}${list.length > 0 ? `the groups offer ${list.join(', ')}` : 'there are no node groups'}${spec.interruptible ? '' : ' (it may not be interrupted, so on-demand only)'}${spec.placement ? ', within its placement limits' : ''}`;
}

/**
 * Which of the spec's requirements no group meets, each on its own (GPU model, memory, count, MIG
 * profile, capacity type, placement, gang size), said with what the groups have at most; or that
 * each is met somewhere but never all together.
 */
function unmetRequirements(
  spec: Pick<JobSpec, 'gpu' | 'nodes' | 'interruptible' | 'placement'>,
  groups: readonly NodeGroup[],
  types: InstanceTypeCatalog,
): string[] {
  const all = groups.flatMap((g) =>
    g.offerings.flatMap((o) => {
      const type = types.get(o.instanceType);
      return type ? [{ g, o, type, mig: g.migEnabled === true && isMigModel(type.gpuModel) }] : [];
    }),
  );
  const r = spec.gpu;
  const out: string[] = [];
  const withModel = all.filter((x) => modelOk(r.models, x.type.gpuModel));
  if (r.models && withModel.length === 0) out.push(`no group has a GPU it names (${r.models.join(', ')})`);
  const pool = r.models ? withModel : all;
  const most = (xs: typeof pool, f: (x: (typeof pool)[number]) => number) =>
    xs.reduce<(typeof pool)[number] | undefined>((best, x) => (best === undefined || f(x) > f(best) ? x : best), undefined);
  if (pool.length > 0 && r.kind !== 'mig') {
    const plain = pool.filter((x) => !x.mig);
    const needMiB = r.kind === 'whole' ? r.minMemoryMiB : r.memoryMiB;
    const big = most(plain, (x) => x.type.gpuMemoryMiB);
    if (needMiB !== undefined && big && big.type.gpuMemoryMiB < needMiB)
      out.push(
        `it asks for ${needMiB.toLocaleString('en-US')} MiB of memory per GPU; the most a group's GPU has is ${big.type.gpuMemoryMiB.toLocaleString('en-US')} MiB (${big.type.name}, ${big.type.gpuModel})`,
      );
    const wide = most(plain, (x) => x.type.gpuCount);
    if (r.kind === 'whole' && wide && wide.type.gpuCount < r.count)
      out.push(`it asks for ${r.count} GPUs on one machine; the most a group's machine has is ${wide.type.gpuCount} (${wide.type.name})`);
    if (plain.length === 0) out.push('every group that has its GPU runs it in MIG mode (a MIG profile is asked for with gpu.kind "mig")');
  }
  if (pool.length > 0 && r.kind === 'mig' && !pool.some((x) => x.mig && migProfile(x.type.gpuModel, r.profile) !== undefined)) {
    const migTypes = [...new Set(pool.filter((x) => x.mig).map((x) => `${x.type.name} (${x.type.gpuModel})`))];
    out.push(
      migTypes.length > 0
        ? `no group in MIG mode has the profile ${r.profile}: the MIG groups run ${migTypes.join(', ')}`
        : `it asks for the MIG profile ${r.profile}, and no group runs in MIG mode`,
    );
  }
  const holders = all.filter((x) => typeCanHold(x.type, r, x.g.migEnabled === true));
  if (holders.length > 0) {
    if (!spec.interruptible && holders.every((x) => x.o.capacityType === 'spot'))
      out.push('it may not be interrupted, and only spot groups have machines that can hold it');
    if (spec.placement && !holders.some((x) => placementAllowed(spec.placement, x.o)))
      out.push('no group that can hold it is within its placement limits');
    if (spec.nodes > 1) {
      const largest = Math.max(...holders.map((x) => x.g.maxSize));
      if (largest < spec.nodes) out.push(`it is a gang of ${spec.nodes} machines; a group that can hold one has at most ${largest}`);
    }
  }
  if (out.length === 0) out.push('each of its requirements is met by some group, but no group meets them all together');
  return out;
}

/**
 * Would the request fit on this node now? Returns the assignment it would get without changing
 * the node (the "can this fit?" check); {@link commitFit} applies it. Whole GPUs take the lowest
 * free indices; a share takes the GPU it fills best; a MIG slice takes the GPU already most used,
 * at the placement that keeps the most room for later slices.
 */
export function tryFit(
  node: NodeCapacity,
  request: GpuRequest,
  ports: readonly number[] = NO_PORTS,
  wall?: HostNetWall,
): NodeAssignment | undefined {
  if (!wallAllows(node, wall)) return undefined;
  if (ports.length === 0) return fitGpus(node, request);
  if (!portsFree(node, ports)) return undefined;
  const a = fitGpus(node, request);
  return a ? { ...a, ports } : undefined;
}

const NO_PORTS: readonly number[] = [];

function fitGpus(node: NodeCapacity, request: GpuRequest): NodeAssignment | undefined {
  switch (request.kind) {
    case 'whole': {
      if (node.freeWhole < request.count) return undefined;
      const picked: number[] = [];
      for (const g of node.gpus) {
        if (g.mig || g.whole || g.freeMilli !== 1000) continue;
        if (!modelOk(request.models, g.model) || (request.minMemoryMiB !== undefined && g.memoryMiB < request.minMemoryMiB))
          return undefined;
        picked.push(g.index);
        if (picked.length === request.count) return { nodeId: node.id, gpuIndices: picked };
      }
      return undefined;
    }
    case 'fraction': {
      let best: GpuSlot | undefined;
      for (const g of node.gpus) {
        if (g.mig || g.whole || g.freeMilli < request.milliGpu || g.freeMemoryMiB < request.memoryMiB || !modelOk(request.models, g.model))
          continue;
        if (!best || g.freeMilli < best.freeMilli || (g.freeMilli === best.freeMilli && g.freeMemoryMiB < best.freeMemoryMiB)) best = g;
      }
      if (!best) return undefined;
      return { nodeId: node.id, gpuIndices: [best.index], share: { milliGpu: request.milliGpu, memoryMiB: request.memoryMiB } };
    }
    case 'mig': {
      let best: { gpu: GpuSlot; start: number; used: number } | undefined;
      for (const g of node.gpus) {
        if (!g.mig || !modelOk(request.models, g.model)) continue;
        const profile = migProfile(g.model, request.profile);
        if (!profile) continue;
        const start = bestStart(g.model, g.mig, profile);
        if (start === undefined) continue;
        const used = popcount(g.mig.mask);
        if (!best || used > best.used) best = { gpu: g, start, used };
      }
      if (!best) return undefined;
      return { nodeId: node.id, gpuIndices: [best.gpu.index], mig: { profile: request.profile, startSlice: best.start } };
    }
  }
}

/**
 * Takes the capacity an assignment from {@link tryFit} (or an existing placement) uses: its GPUs,
 * its ports, and, for work on the host's network, its team's side of the wall.
 */
export function commitFit(node: NodeCapacity, assignment: NodeAssignment, hostNetTeam?: string): void {
  if (assignment.ports) node.ports.push(...assignment.ports);
  if (hostNetTeam !== undefined && !node.hostNetTeams.includes(hostNetTeam)) node.hostNetTeams.push(hostNetTeam);
  for (const index of assignment.gpuIndices) {
    const g = node.gpus[index]?.index === index ? node.gpus[index] : node.gpus.find((s) => s.index === index);
    if (!g) continue;
    if (assignment.mig) {
      if (!g.mig) continue;
      const profile = migProfile(g.model, assignment.mig.profile);
      if (!profile) continue;
      g.mig.mask |= placementMask(assignment.mig.startSlice, profile.memorySlices);
      g.mig.counts.set(profile.name, (g.mig.counts.get(profile.name) ?? 0) + 1);
    } else if (assignment.share) {
      g.freeMilli -= assignment.share.milliGpu;
      g.freeMemoryMiB -= assignment.share.memoryMiB;
    } else {
      g.whole = true;
      g.freeMilli = 0;
      g.freeMemoryMiB = 0;
    }
  }
  node.freeWhole = countFreeWhole(node.gpus);
}

/** No GPU of the node is in use. */
export function isEmpty(node: NodeCapacity): boolean {
  return node.gpus.every((g) => (g.mig ? g.mig.mask === 0 : !g.whole && g.freeMilli === 1000));
}

/**
 * Room taken on a node, in thousandths of its GPUs, for packing: a MIG GPU by the memory slices its
 * instances block (÷ 8), since placement is by memory slice. This is room, not the share a job is
 * charged or capped by (milliGpusUsed, compute slices ÷ 7).
 */
export function usedMilli(node: NodeCapacity): number {
  let used = 0;
  for (const g of node.gpus) {
    if (g.mig) used += Math.round((popcount(g.mig.mask) * 1000) / 8);
    else used += g.whole ? 1000 : 1000 - g.freeMilli;
  }
  return used;
}

export function popcount(x: number): number {
  let n = 0;
  for (let v = x; v !== 0; v &= v - 1) n++;
  return n;
}
