/**
 * Which container images a machine pulls ahead: those of the services whose replicas may be
 * placed on it. A replica placed where its image already is starts without the pull (minutes for
 * an inference image of several GiB), so a machine that may serve holds the images before it is
 * asked to. Decided here once, written to the machine's record by reconcile, pulled by its agent
 * (the real one through the container engine, the simulated one by the simulated clock).
 */
import type { InstanceTypeCatalog } from '../catalog.ts';
import type { Instance } from '../fleet.ts';
import { placementAllowed, typeCanHold } from '../planner/capacity.ts';
import type { ServiceRecord } from './service.ts';

/** At most this many images per machine: its disk holds them all, each with its layers unpacked. */
export const MAX_PREFETCH_IMAGES = 8;

/**
 * The images, sorted, of the active services that could place a replica on the machine: its type
 * (in its GPU mode) can hold a replica, it is within the spec's placement limits, and it is not
 * spot for a service whose replicas may not be interrupted. Of more than
 * {@link MAX_PREFETCH_IMAGES}, the first by service id. Empty for a type the catalogue does not know.
 */
export function imagesToPrefetch(
  machine: Pick<Instance, 'cloud' | 'region' | 'zone' | 'instanceType' | 'capacityType'>,
  migMode: boolean,
  services: readonly Pick<ServiceRecord, 'id' | 'spec' | 'state'>[],
  types: InstanceTypeCatalog,
): string[] {
  const type = types.get(machine.instanceType);
  if (!type) return [];
  const images = new Set<string>();
  for (const s of [...services].sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0))) {
    if (s.state !== 'active' || images.size >= MAX_PREFETCH_IMAGES) continue;
    if (!s.spec.interruptible && machine.capacityType === 'spot') continue;
    if (!typeCanHold(type, s.spec.gpu, migMode)) continue;
    if (!placementAllowed(s.spec.placement, machine)) continue;
    images.add(s.spec.image);
  }
  return [...images].sort();
}

/** Whether two image lists (as written) differ: a record is written only when its list changes. */
export function prefetchChanged(written: readonly string[] | undefined, wanted: readonly string[]): boolean {
  const w = written ?? [];
  return w.length !== wanted.length || w.some((x, i) => x !== wanted[i]);
}
