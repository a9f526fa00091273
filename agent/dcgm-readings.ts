/**
 * GPU use as a node-local dcgm-exporter reports it (NVIDIA's DCGM exporter, common on GPU nodes,
 * default port 9400), read by the agent at each heartbeat beside nvidia-smi when it is told where
 * (`agent run --dcgm-exporter-url`). What it adds is utilisation per MIG instance: nvidia-smi has
 * none, while DCGM's profiling field `DCGM_FI_PROF_GR_ENGINE_ACTIVE` (the share of time the
 * instance's graphics/compute engine was active) is reported per GPU instance. dcgm-exporter labels
 * a MIG instance's series with its parent GPU's `UUID` and the instance's `GPU_I_ID` and
 * `GPU_I_PROFILE`; a whole GPU's with its own `UUID` only.
 */
import parsePrometheusTextFormat from 'parse-prometheus-text-format';

/** One device's figures from DCGM: utilisation, % (engine-active share, else DCGM_FI_DEV_GPU_UTIL), and framebuffer used, MiB. */
export interface DcgmReading {
  readonly smPct?: number;
  readonly memoryUsedMiB?: number;
}

/** The key of a device's readings: the GPU's UUID, and for a MIG instance its parent's UUID and GPU-instance id. */
export function dcgmKey(uuid: string, gpuInstanceId?: number): string {
  return gpuInstanceId === undefined ? uuid : `${uuid}#${gpuInstanceId}`;
}

const FIELDS = ['DCGM_FI_PROF_GR_ENGINE_ACTIVE', 'DCGM_FI_DEV_GPU_UTIL', 'DCGM_FI_DEV_FB_USED'] as const;

/** Every device's readings in one dcgm-exporter scrape, by dcgmKey. Series without a UUID, or with values that are not numbers, are left out. */
export function parseDcgmReadings(text: string): Map<string, DcgmReading> {
  const seen = new Map<string, Partial<Record<(typeof FIELDS)[number], number>>>();
  for (const family of parsePrometheusTextFormat(text)) {
    if (!(FIELDS as readonly string[]).includes(family.name)) continue;
    for (const m of family.metrics) {
      const uuid = m.labels?.UUID;
      const value = Number(m.value);
      if (!uuid || !Number.isFinite(value)) continue;
      const gi = m.labels?.GPU_I_ID !== undefined && m.labels.GPU_I_ID !== '' ? Number(m.labels.GPU_I_ID) : undefined;
      const key = dcgmKey(uuid, gi !== undefined && Number.isInteger(gi) ? gi : undefined);
      seen.set(key, { ...seen.get(key), [family.name]: value });
    }
  }
  const out = new Map<string, DcgmReading>();
  for (const [key, f] of seen) {
    const engine = f.DCGM_FI_PROF_GR_ENGINE_ACTIVE;
    const smPct = engine !== undefined ? Math.min(100, Math.max(0, engine * 100)) : f.DCGM_FI_DEV_GPU_UTIL;
    out.set(key, {
      ...(smPct !== undefined ? { smPct } : {}),
      ...(f.DCGM_FI_DEV_FB_USED !== undefined ? { memoryUsedMiB: f.DCGM_FI_DEV_FB_USED } : {}),
    });
  }
  return out;
}
