import type { MachineTypesClient, protos } from '@google-cloud/compute';
import type { InstanceType } from '../../core/catalog.ts';
import type { GpuModel } from '../../core/gpu.ts';
import type { CatalogSource } from '../../core/ports.ts';
import { translateGcpError } from './errors.ts';
import type { GcpScope } from './mig-node-groups.ts';

type MachineType = protos.google.cloud.compute.v1.IMachineType;

/** Compute's accelerator type names, by the GPU model gpu-fleet schedules, with memory per GPU. */
export const GCP_ACCELERATORS: Readonly<Record<string, { model: GpuModel; memoryMiB: number }>> = {
  'nvidia-tesla-k80': { model: 'K80', memoryMiB: 12_288 },
  'nvidia-tesla-t4': { model: 'T4', memoryMiB: 16_384 },
  'nvidia-tesla-v100': { model: 'V100', memoryMiB: 16_384 },
  'nvidia-l4': { model: 'L4', memoryMiB: 24_576 },
  'nvidia-tesla-a100': { model: 'A100-40GB', memoryMiB: 40_960 },
  'nvidia-a100-80gb': { model: 'A100-80GB', memoryMiB: 81_920 },
  'nvidia-h100-80gb': { model: 'H100', memoryMiB: 81_920 },
  'nvidia-h100-mega-80gb': { model: 'H100', memoryMiB: 81_920 },
  'nvidia-h200-141gb': { model: 'H200', memoryMiB: 144_384 },
  'nvidia-b200': { model: 'B200', memoryMiB: 184_320 },
};

/**
 * GPU facts of GCP machine types: the shipped catalogue first (it has prices too), and for a type
 * it does not know, the Compute API's machine type (`accelerators[]`, `guestCpus`, `memoryMb`),
 * read once per type from the first configured zone that has it. A type whose accelerators
 * gpu-fleet does not know is left out (the planner then never buys it) and reported.
 */
export class GcpMachineTypeCatalog implements CatalogSource {
  private readonly fetched = new Map<string, InstanceType | undefined>();
  readonly problems: string[] = [];

  constructor(
    private readonly client: MachineTypesClient,
    private readonly projects: readonly GcpScope[],
    private readonly shipped: CatalogSource,
  ) {}

  async instanceTypes(names: readonly string[]): Promise<Map<string, InstanceType>> {
    const out = await this.shipped.instanceTypes(names);
    for (const name of names) {
      if (out.has(name) || !/^[a-z][a-z0-9-]*$/.test(name)) continue;
      if (!this.fetched.has(name)) this.fetched.set(name, await this.fetch(name));
      const t = this.fetched.get(name);
      if (t) out.set(name, t);
    }
    return out;
  }

  private async fetch(name: string): Promise<InstanceType | undefined> {
    for (const scope of this.projects) {
      for (const zone of scope.zones) {
        let mt: MachineType;
        try {
          [mt] = await this.client.get({ project: scope.projectId, zone, machineType: name });
        } catch (error) {
          const e = translateGcpError(error, { operation: 'read machine type', resource: `${scope.projectId}/${zone}/${name}` });
          if (e.code === 'not-found') continue; // not offered in this zone: try the next
          throw e;
        }
        return this.toInstanceType(name, mt);
      }
    }
    return undefined;
  }

  private toInstanceType(name: string, mt: MachineType): InstanceType | undefined {
    const acc = mt.accelerators?.[0];
    if (!acc?.guestAcceleratorType || !acc.guestAcceleratorCount) return undefined; // no GPUs: not a GPU machine type
    const known = GCP_ACCELERATORS[acc.guestAcceleratorType];
    if (!known) {
      this.problems.push(
        `machine type ${name}: accelerator ${acc.guestAcceleratorType} is not one gpu-fleet schedules (known: ${Object.keys(GCP_ACCELERATORS).join(', ')})`,
      );
      return undefined;
    }
    return {
      name,
      cloud: 'gcp',
      gpuModel: known.model,
      gpuCount: acc.guestAcceleratorCount,
      gpuMemoryMiB: known.memoryMiB,
      vcpus: mt.guestCpus ?? 0,
      memoryMiB: mt.memoryMb ?? 0,
    };
  }
}
