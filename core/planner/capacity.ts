import type { CapacityType, Cloud, InstanceType } from '../catalog.ts';
import { gpuModelMatches, type GpuModel, type GpuRequest } from '../gpu.ts';
import type { NodeAssignment } from '../job.ts';

/** Free capacity of one GPU. A whole GPU is free when nothing at all is on it. */
export interface GpuSlot {
  readonly index: number;
  readonly model: GpuModel;
  readonly memoryMiB: number;
  /** Thousandths of the GPU's time not yet given out (1000 = untouched). */
  freeMilli: number;
  freeMemoryMiB: number;
  /** Held whole by one job. */
  whole: boolean;
}

export type NodeKind = 'ready' | 'booting' | 'planned';

/** A node as the planner packs it: ready (schedulable now), booting, or planned (to be bought). */
export interface NodeCapacity {
  readonly id: string;
  readonly groupId: string;
  readonly cloud: Cloud;
  readonly region: string;
  readonly zone: string;
  readonly instanceType: string;
  readonly capacityType: CapacityType;
  readonly offeringId: string;
  readonly kind: NodeKind;
  readonly priceMicroUsdPerHour: number;
  readonly gpus: GpuSlot[];
}

export function emptyGpus(type: InstanceType): GpuSlot[] {
  return Array.from({ length: type.gpuCount }, (_, index) => ({
    index,
    model: type.gpuModel,
    memoryMiB: type.gpuMemoryMiB,
    freeMilli: 1000,
    freeMemoryMiB: type.gpuMemoryMiB,
    whole: false,
  }));
}

function modelOk(models: readonly string[] | undefined, model: GpuModel): boolean {
  return models === undefined || models.some((m) => gpuModelMatches(m, model));
}

/** True when the machine type could ever hold the request (ignoring what is already on it). */
export function typeCanHold(type: InstanceType, request: GpuRequest): boolean {
  if (!modelOk(request.models, type.gpuModel)) return false;
  switch (request.kind) {
    case 'whole':
      return type.gpuCount >= request.count && (request.minMemoryMiB === undefined || type.gpuMemoryMiB >= request.minMemoryMiB);
    case 'fraction':
      return type.gpuCount >= 1 && type.gpuMemoryMiB >= request.memoryMiB;
    case 'mig':
      return false; // MIG placement arrives with the full planner.
  }
}

/**
 * Would the request fit on this node now? Returns the assignment it would get, without
 * changing the node (the "can this fit?" check); {@link commitFit} applies it.
 * Whole GPUs take the lowest free indices; a share takes the GPU it fills best.
 */
export function tryFit(node: NodeCapacity, request: GpuRequest): NodeAssignment | undefined {
  switch (request.kind) {
    case 'whole': {
      const free = node.gpus.filter(
        (g) => g.freeMilli === 1000 && !g.whole && modelOk(request.models, g.model) && (request.minMemoryMiB === undefined || g.memoryMiB >= request.minMemoryMiB),
      );
      if (free.length < request.count) return undefined;
      return { nodeId: node.id, gpuIndices: free.slice(0, request.count).map((g) => g.index) };
    }
    case 'fraction': {
      let best: GpuSlot | undefined;
      for (const g of node.gpus) {
        if (g.whole || g.freeMilli < request.milliGpu || g.freeMemoryMiB < request.memoryMiB || !modelOk(request.models, g.model)) continue;
        if (!best || g.freeMilli < best.freeMilli) best = g;
      }
      if (!best) return undefined;
      return { nodeId: node.id, gpuIndices: [best.index], share: { milliGpu: request.milliGpu, memoryMiB: request.memoryMiB } };
    }
    case 'mig':
      return undefined;
  }
}

/** Takes the capacity an assignment from {@link tryFit} (or an existing placement) uses. */
export function commitFit(node: NodeCapacity, assignment: NodeAssignment): void {
  for (const index of assignment.gpuIndices) {
    const g = node.gpus.find((s) => s.index === index);
    if (!g) continue;
    if (assignment.share) {
      g.freeMilli -= assignment.share.milliGpu;
      g.freeMemoryMiB -= assignment.share.memoryMiB;
    } else {
      g.whole = true;
      g.freeMilli = 0;
      g.freeMemoryMiB = 0;
    }
  }
}

/** No GPU of the node is in use. */
export function isEmpty(node: NodeCapacity): boolean {
  return node.gpus.every((g) => g.freeMilli === 1000 && !g.whole);
}
