import { Counter, Gauge, Registry } from 'prom-client';
import type { GpuReport, NvidiaSmiReport } from './nvidia-smi.ts';

/** Who holds a GPU now (or one of its MIG instances): gpu-fleet's labels on its series. */
export interface GpuHolder {
  readonly job: string;
  readonly team: string;
  readonly attempt: number;
}

/** The agent's own figures, beside the GPUs'. */
export interface AgentFigures {
  /** Seconds since the agent's last heartbeat reached the control plane (undefined before the first). */
  readonly heartbeatAgeSec?: number;
  /** How long the newest checkpoint write (signal to marker) and upload took, seconds. */
  readonly lastCheckpointWriteSec?: number;
  readonly lastCheckpointUploadSec?: number;
  readonly uploadsInFlight: number;
  readonly attemptsRunning: number;
  /** Job output lines the log shipper dropped since the agent started (the log store throttled or behind), and their bytes. */
  readonly logLinesDropped?: number;
  readonly logBytesDropped?: number;
}

/**
 * One scrape of the machine in the DCGM exporter's metric names and labels (its default counters
 * that nvidia-smi can give: utilisation, framebuffer used and free, power, temperature, SM and
 * memory clocks, memory copy utilisation, volatile double-bit ECC errors), so dashboards and alerts
 * written for dcgm-exporter work unchanged. Labels: `gpu`, `UUID`, `device` (`nvidia<i>`),
 * `modelName`, `Hostname`, `DCGM_FI_DRIVER_VERSION`; a MIG instance's series add `GPU_I_PROFILE`
 * and `GPU_I_ID`; gpu-fleet adds `job`, `team` and `attempt` while a job holds the GPU. Plus the
 * agent's own `gpu_fleet_agent_*` gauges. Built with prom-client, in its text format 0.0.4.
 */
export async function dcgmExposition(
  report: NvidiaSmiReport,
  input: {
    readonly hostname: string;
    /** Holders by device UUID (a GPU's `GPU-…`, a MIG instance's `MIG-…`): the devices the agent gave each attempt. */
    readonly holders: ReadonlyMap<string, GpuHolder>;
    readonly agent?: AgentFigures;
  },
): Promise<string> {
  const registry = new Registry();
  const labelNames = [
    'gpu',
    'UUID',
    'pci_bus_id',
    'device',
    'modelName',
    'Hostname',
    'DCGM_FI_DRIVER_VERSION',
    'GPU_I_PROFILE',
    'GPU_I_ID',
    'job',
    'team',
    'attempt',
  ] as const;
  type Labels = Partial<Record<(typeof labelNames)[number], string>>;
  const gauge = (name: string, help: string) => new Gauge({ name, help, labelNames, registers: [registry] });
  const util = gauge('DCGM_FI_DEV_GPU_UTIL', 'GPU utilization (in %).');
  const copy = gauge('DCGM_FI_DEV_MEM_COPY_UTIL', 'Memory utilization (in %).');
  const used = gauge('DCGM_FI_DEV_FB_USED', 'Framebuffer memory used (in MiB).');
  const free = gauge('DCGM_FI_DEV_FB_FREE', 'Framebuffer memory free (in MiB).');
  const power = gauge('DCGM_FI_DEV_POWER_USAGE', 'Power draw (in W).');
  const temp = gauge('DCGM_FI_DEV_GPU_TEMP', 'GPU temperature (in C).');
  const sm = gauge('DCGM_FI_DEV_SM_CLOCK', 'SM clock frequency (in MHz).');
  const mem = gauge('DCGM_FI_DEV_MEM_CLOCK', 'Memory clock frequency (in MHz).');
  // A counter, as dcgm-exporter types it: a fresh registry per scrape, so it holds the driver's count.
  const dbe = new Counter({
    name: 'DCGM_FI_DEV_ECC_DBE_VOL_TOTAL',
    help: 'Total number of double-bit volatile ECC errors.',
    labelNames,
    registers: [registry],
  });

  const base = (g: GpuReport): Labels => ({
    gpu: String(g.index),
    UUID: g.uuid ?? '',
    ...(g.busId ? { pci_bus_id: g.busId } : {}),
    device: `nvidia${g.index}`,
    modelName: g.name,
    Hostname: input.hostname,
    ...(report.driverVersion ? { DCGM_FI_DRIVER_VERSION: report.driverVersion } : {}),
  });
  const holder = (h: GpuHolder | undefined): Labels => (h ? { job: h.job, team: h.team, attempt: String(h.attempt) } : {});
  const set = (g: Gauge<(typeof labelNames)[number]>, labels: Labels, v: number | undefined) => {
    if (v !== undefined && Number.isFinite(v)) g.set(labels, v);
  };
  for (const g of report.gpus) {
    const labels = { ...base(g), ...holder(g.uuid !== undefined ? input.holders.get(g.uuid) : undefined) };
    set(util, labels, g.utilizationPct);
    set(copy, labels, g.memoryUtilizationPct);
    set(power, labels, g.powerDrawW);
    set(temp, labels, g.temperatureC);
    set(sm, labels, g.smClockMHz);
    set(mem, labels, g.memClockMHz);
    if (g.ecc.volatileUncorrectable !== undefined) dbe.inc(labels, g.ecc.volatileUncorrectable);
    if (g.mig.enabled && g.mig.devices.length > 0) {
      // Under MIG, framebuffer use is per GPU instance (as dcgm-exporter reports it).
      for (const d of g.mig.devices) {
        const l: Labels = {
          ...base(g),
          GPU_I_PROFILE: d.profile ?? '',
          GPU_I_ID: String(d.gpuInstanceId),
          ...holder(d.uuid !== undefined ? input.holders.get(d.uuid) : undefined),
        };
        set(used, l, d.memoryUsedMiB);
        set(free, l, d.memoryUsedMiB !== undefined ? d.memoryTotalMiB - d.memoryUsedMiB : undefined);
      }
    } else {
      set(used, labels, g.memoryUsedMiB);
      set(free, labels, g.memoryUsedMiB !== undefined ? g.memoryTotalMiB - g.memoryUsedMiB : undefined);
    }
  }
  const a = input.agent;
  if (a) {
    const own = (name: string, help: string, v: number | undefined) => {
      const x = new Gauge({ name, help, registers: [registry] });
      if (v !== undefined) x.set(v);
    };
    own('gpu_fleet_agent_heartbeat_age_seconds', "Seconds since the agent's last heartbeat reached the control plane.", a.heartbeatAgeSec);
    own(
      'gpu_fleet_agent_checkpoint_write_seconds',
      'How long the newest checkpoint took to write (signal to marker).',
      a.lastCheckpointWriteSec,
    );
    own('gpu_fleet_agent_checkpoint_upload_seconds', 'How long the newest checkpoint took to upload.', a.lastCheckpointUploadSec);
    own('gpu_fleet_agent_uploads_in_flight', 'Checkpoint uploads under way.', a.uploadsInFlight);
    own('gpu_fleet_agent_attempts_running', 'Job attempts running on this machine.', a.attemptsRunning);
    const counted = (name: string, help: string, v: number | undefined) => {
      if (v !== undefined) new Counter({ name, help, registers: [registry] }).inc(v);
    };
    counted(
      'gpu_fleet_agent_log_lines_dropped_total',
      'Job output lines not shipped (the log store throttled or behind); a marker line in the job’s log says where.',
      a.logLinesDropped,
    );
    counted('gpu_fleet_agent_log_bytes_dropped_total', 'Bytes of the job output lines not shipped.', a.logBytesDropped);
  }
  return registry.metrics();
}
