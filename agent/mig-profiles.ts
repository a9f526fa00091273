import migJson from '../data/mig/mig-profiles.json' with { type: 'json' };
import type { GpuModel } from '../core/gpu.ts';

/**
 * Names the GPU-instance profile of a MIG device from what `nvidia-smi -q` shows of it (memory,
 * SM count, media engines), using NVIDIA's profile tables in data/mig/mig-profiles.json. Used
 * when `nvidia-smi -L` (which prints the name) is not available.
 *
 * Memory decides the number of memory slices (each 1/8 of the GPU); among the profiles with that
 * many slices, the SM count decides the compute slices, and the media engines tell "+me"
 * profiles apart. SM counts from the table are what NVIDIA's tools printed, so they are matched
 * exactly where known, else by the nearest fraction of the full GPU.
 */

interface RawProfile {
  readonly name: string;
  readonly compute_slices: number;
  readonly memory_slices: number;
  readonly sm_count_observed?: number | null;
  readonly media_engines: { readonly nvdec: number; readonly nvenc: number; readonly jpeg: number; readonly ofa: number };
}

interface RawGpu {
  readonly key: string;
  readonly memory_nominal_gb: number;
  readonly sm_count_7g_observed?: number | null;
  readonly profiles: readonly RawProfile[];
}

const GPUS = (migJson as unknown as { gpus: RawGpu[] }).gpus;

/** Which table of data/mig applies to a GPU: by model family and nearest nominal memory. */
export function migTableKey(model: GpuModel, memoryTotalMiB: number): string | undefined {
  const family = model === 'A100-40GB' || model === 'A100-80GB' ? 'a100' : model.toLowerCase();
  const candidates = GPUS.filter((g) => g.key.startsWith(`${family}-`));
  if (candidates.length === 0) return undefined;
  const gb = memoryTotalMiB / 1024;
  return candidates.reduce((best, g) => (Math.abs(g.memory_nominal_gb - gb) < Math.abs(best.memory_nominal_gb - gb) ? g : best)).key;
}

export interface MigDeviceFacts {
  /** Memory of the GPU instance (shared by its compute instances), MiB. */
  readonly memoryMiB: number;
  /** SMs of the whole GPU instance (the sum over its compute instances). */
  readonly smCount?: number;
  readonly decoders?: number;
  readonly jpegs?: number;
  readonly ofas?: number;
}

/** The GPU-instance profile name ("3g.40gb", "1g.10gb+me"), or undefined when nothing fits. */
export function identifyMigProfile(model: GpuModel, gpuMemoryTotalMiB: number, device: MigDeviceFacts): string | undefined {
  const key = migTableKey(model, gpuMemoryTotalMiB);
  const table = GPUS.find((g) => g.key === key);
  if (!table) return undefined;
  const sliceMiB = gpuMemoryTotalMiB / 8;
  const memorySlices = Math.max(1, Math.round(device.memoryMiB / sliceMiB));
  let candidates = table.profiles.filter((p) => p.memory_slices === memorySlices);
  if (candidates.length === 0) return undefined;
  if (device.smCount !== undefined) {
    const exact = candidates.filter((p) => p.sm_count_observed === device.smCount);
    if (exact.length > 0) candidates = exact;
    else {
      const full = table.sm_count_7g_observed ?? undefined;
      const slices = full ? (device.smCount / full) * 7 : undefined;
      if (slices !== undefined) {
        const nearest = Math.min(...candidates.map((p) => Math.abs(p.compute_slices - slices)));
        candidates = candidates.filter((p) => Math.abs(p.compute_slices - slices) === nearest);
      }
    }
  }
  if (candidates.length > 1 && device.ofas !== undefined) {
    // "+me" profiles carry the media extensions (the OFA engine among them); plain ones do not.
    const byMedia = candidates.filter((p) => p.media_engines.ofa === device.ofas);
    if (byMedia.length > 0) candidates = byMedia;
  }
  if (candidates.length > 1) {
    const plain = candidates.filter((p) => !p.name.includes('+'));
    if (plain.length > 0) candidates = plain;
  }
  return candidates[0]?.name;
}
