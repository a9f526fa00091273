import type { InstanceType } from '../../core/catalog.ts';
import { normalizeGpuModel } from '../../core/gpu.ts';
import { microUsdFromUsd } from '../../core/money.ts';
import gcpCatalogJson from '../../data/catalog/gcp-gpu-machines.json' with { type: 'json' };
import type { ShippedCatalog } from './shipped.ts';

/** The GCP part of the shipped catalogue (data/catalog/gcp-gpu-machines.json): machine types and prices per zone. */

interface GcpZonePrice {
  region: string;
  total_ondemand_usd_per_hour?: number | null;
  total_spot_usd_per_hour?: number | null;
}

interface GcpCatalogFile {
  machines: {
    machine_type: string;
    gpu_model: string;
    gpu_count: number;
    gpu_memory_mib_per_gpu: number;
    vcpus: number;
    memory_gib: number;
    zones: Record<string, GcpZonePrice>;
  }[];
}

const gcpCatalog = gcpCatalogJson as unknown as GcpCatalogFile;
let cached: ShippedCatalog | undefined;

export function gcpShippedCatalog(): ShippedCatalog {
  cached ??= build();
  return cached;
}

function build(): ShippedCatalog {
  const instanceTypes = new Map<string, InstanceType>();
  const onDemand = new Map<string, number>();
  const spot = new Map<string, number>();
  const gcpZones = new Map<string, string[]>();
  for (const m of gcpCatalog.machines) {
    const model = normalizeGpuModel(m.gpu_model === 'H100-MEGA' ? 'H100' : m.gpu_model, m.gpu_memory_mib_per_gpu / 1024);
    if (!model) continue;
    instanceTypes.set(m.machine_type, {
      name: m.machine_type,
      cloud: 'gcp',
      gpuModel: model,
      gpuCount: m.gpu_count,
      gpuMemoryMiB: m.gpu_memory_mib_per_gpu,
      vcpus: m.vcpus,
      memoryMiB: Math.round(m.memory_gib * 1024),
    });
    const zones: string[] = [];
    for (const [zone, raw] of Object.entries(m.zones)) {
      const od = raw.total_ondemand_usd_per_hour;
      const sp = raw.total_spot_usd_per_hour;
      if (od === undefined || od === null) continue;
      zones.push(zone);
      onDemand.set(`gcp/${zone}/${m.machine_type}`, microUsdFromUsd(od));
      if (!onDemand.has(`gcp/${raw.region}/${m.machine_type}`)) onDemand.set(`gcp/${raw.region}/${m.machine_type}`, microUsdFromUsd(od));
      if (sp !== undefined && sp !== null) spot.set(`gcp/${zone}/${m.machine_type}`, microUsdFromUsd(sp));
    }
    gcpZones.set(m.machine_type, zones.sort());
  }
  return { instanceTypes, onDemand, spot, advisorBand: new Map(), gcpZones };
}
