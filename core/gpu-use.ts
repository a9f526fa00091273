import { GPU_MODELS, type GpuModel } from './gpu.ts';

/**
 * What an attempt's GPUs were measured using: the node agent reads its GPUs at every heartbeat and
 * adds each reading of the devices an attempt holds to that attempt's tally; when the attempt ends
 * the tally's summary goes with the event that ends it, into the job's `usage`. The same
 * functions tally the real agent's nvidia-smi readings and the simulated processes' scripted use.
 */

/** One device an attempt holds, as read once: its model, its memory (a MIG slice's own), what is used, and its utilisation. */
export interface DeviceReading {
  readonly model?: GpuModel;
  readonly memoryTotalMiB: number;
  readonly memoryUsedMiB?: number;
  /**
   * Utilisation, % (nvidia-smi's `utilization.gpu`: the share of the last sample period a kernel ran
   * on the device). Absent where the device does not report it: nvidia-smi reports none for a MIG slice.
   */
  readonly smPct?: number;
}

/** The running tally of one attempt's readings. Immutable: each look gives a new tally. */
export interface GpuUseTally {
  readonly looks: number;
  readonly devices: number;
  readonly model?: GpuModel;
  readonly deviceMemoryMiB: number;
  readonly peakMemoryMiB: number;
  /** Readings with a utilisation, their sum, and how many fell on each whole percent 0–100 (for the 95th percentile). */
  readonly smReadings: number;
  readonly smSum: number;
  readonly smHistogram: readonly number[];
  /** Per device position, whether it was ever busy (memory used beyond the driver's own, or any utilisation). */
  readonly busy: readonly boolean[];
}

/** Memory a device shows used with nothing of the job's on it (the driver's context), below which it counts as idle. */
export const IDLE_DEVICE_MEMORY_MIB = 512;

export function newGpuUseTally(): GpuUseTally {
  return {
    looks: 0,
    devices: 0,
    deviceMemoryMiB: 0,
    peakMemoryMiB: 0,
    smReadings: 0,
    smSum: 0,
    smHistogram: new Array<number>(101).fill(0),
    busy: [],
  };
}

/** The tally with one look at the attempt's devices added (a look that read none of them changes nothing). */
export function addGpuLook(tally: GpuUseTally, readings: readonly DeviceReading[]): GpuUseTally {
  if (readings.length === 0) return tally;
  const histogram = [...tally.smHistogram];
  let smReadings = tally.smReadings;
  let smSum = tally.smSum;
  let peak = tally.peakMemoryMiB;
  const busy = [...tally.busy];
  readings.forEach((r, i) => {
    const used = finite(r.memoryUsedMiB);
    const sm = finite(r.smPct);
    if (used !== undefined) peak = Math.max(peak, used);
    // Utilisation counts on the devices the job uses at this look: a GPU it holds and never touches (8 held, 2 used)
    // says nothing of how busy the others are.
    const inUse = (used ?? 0) > IDLE_DEVICE_MEMORY_MIB || (sm ?? 0) > 0;
    if (sm !== undefined && inUse) {
      const pct = Math.min(100, Math.max(0, sm));
      histogram[Math.round(pct)]! += 1;
      smReadings += 1;
      smSum += pct;
    }
    busy[i] = (busy[i] ?? false) || inUse;
  });
  const model = readings.find((r) => r.model !== undefined)?.model ?? tally.model;
  return {
    looks: tally.looks + 1,
    devices: Math.max(tally.devices, readings.length),
    ...(model ? { model } : {}),
    deviceMemoryMiB: Math.max(tally.deviceMemoryMiB, ...readings.map((r) => finite(r.memoryTotalMiB) ?? 0)),
    peakMemoryMiB: peak,
    smReadings,
    smSum,
    smHistogram: histogram,
    busy,
  };
}

/**
 * One attempt's measured GPU use, as the rank that ended it measured it on its machine: kept in the
 * job's usage (the newest {@link GPU_USE_KEPT}) and read by right-sizing (core/rightsizing.ts).
 */
export interface AttemptGpuUse {
  readonly attempt: number;
  readonly rank: number;
  /** Looks taken (each read every device the attempt holds), one per heartbeat. */
  readonly looks: number;
  /** Devices it held on the machine, and how many of them it ever used. */
  readonly devices: number;
  readonly busyDevices: number;
  readonly model?: GpuModel;
  /** Memory of one device it held (a MIG slice's own), MiB. */
  readonly deviceMemoryMiB: number;
  /** The most memory used on any one of its devices at any look, MiB. */
  readonly peakMemoryMiB: number;
  /** Utilisation over every device and look, %: the mean and the 95th percentile. Absent when no device reported one. */
  readonly meanSmPct?: number;
  readonly p95SmPct?: number;
}

/** Attempts' GPU use kept on a job: the newest ones (a job requeued a hundred times keeps its last few). */
export const GPU_USE_KEPT = 8;

/** The summary of an attempt's tally, or undefined when it was never read (it ended before the first look). */
export function summarizeGpuUse(tally: GpuUseTally, attempt: number, rank: number): AttemptGpuUse | undefined {
  if (tally.looks === 0) return undefined;
  const p95 = percentile(tally.smHistogram, tally.smReadings, 0.95);
  return {
    attempt,
    rank,
    looks: tally.looks,
    devices: tally.devices,
    busyDevices: tally.busy.filter(Boolean).length,
    ...(tally.model ? { model: tally.model } : {}),
    deviceMemoryMiB: tally.deviceMemoryMiB,
    peakMemoryMiB: tally.peakMemoryMiB,
    ...(tally.smReadings > 0 ? { meanSmPct: round1(tally.smSum / tally.smReadings), p95SmPct: p95! } : {}),
  };
}

/** The nearest-rank percentile of readings counted by whole percent. */
function percentile(histogram: readonly number[], count: number, q: number): number | undefined {
  if (count === 0) return undefined;
  const rank = Math.ceil(q * count);
  let seen = 0;
  for (let pct = 0; pct < histogram.length; pct++) {
    seen += histogram[pct]!;
    if (seen >= rank) return pct;
  }
  return 100;
}

/** Why a reported attempt's use is not one an agent could have measured, or undefined (the agent API checks what it is sent). */
export function gpuUseProblem(u: AttemptGpuUse): string | undefined {
  const wholes: [string, number][] = [
    ['attempt', u.attempt],
    ['rank', u.rank],
    ['looks', u.looks],
    ['devices', u.devices],
    ['busyDevices', u.busyDevices],
  ];
  for (const [k, v] of wholes) if (!Number.isSafeInteger(v) || v < 0) return `gpu use: ${k} must be a whole number ≥ 0, got ${v}`;
  if (u.looks < 1) return 'gpu use: looks must be at least 1';
  if (u.busyDevices > u.devices) return `gpu use: busyDevices (${u.busyDevices}) exceeds devices (${u.devices})`;
  for (const [k, v] of [
    ['deviceMemoryMiB', u.deviceMemoryMiB],
    ['peakMemoryMiB', u.peakMemoryMiB],
  ] as const)
    if (!Number.isFinite(v) || v < 0 || v > 16_777_216) return `gpu use: ${k} must be MiB from 0 to 16777216, got ${v}`;
  for (const [k, v] of [
    ['meanSmPct', u.meanSmPct],
    ['p95SmPct', u.p95SmPct],
  ] as const)
    if (v !== undefined && !(Number.isFinite(v) && v >= 0 && v <= 100)) return `gpu use: ${k} must be a percentage from 0 to 100, got ${v}`;
  if (u.model !== undefined && !(GPU_MODELS as readonly string[]).includes(u.model))
    return `gpu use: model "${String(u.model)}" is not a GPU model (${GPU_MODELS.join(', ')})`;
  return undefined;
}

/** Measured use without the attempt it came from: a job's over its attempts, or a family's over its runs. */
export type MeasuredGpuUse = Omit<AttemptGpuUse, 'attempt' | 'rank'>;

/**
 * Several measurements as one (a job's attempts, a family's runs), for right-sizing: the highest
 * peak memory and busy devices, the mean weighted by looks, and the highest 95th percentile (percentiles
 * do not add up; the highest one is the safe side); devices, model and device memory are the newest's.
 * Undefined for none.
 */
export function jobGpuUse(uses: readonly MeasuredGpuUse[] | undefined): MeasuredGpuUse | undefined {
  const all = uses ?? [];
  if (all.length === 0) return undefined;
  const newest = all[all.length - 1]!;
  const withSm = all.filter((u) => u.meanSmPct !== undefined);
  const smLooks = withSm.reduce((a, u) => a + u.looks, 0);
  return {
    looks: all.reduce((a, u) => a + u.looks, 0),
    devices: newest.devices,
    busyDevices: Math.max(...all.map((u) => u.busyDevices)),
    ...(newest.model ? { model: newest.model } : {}),
    deviceMemoryMiB: newest.deviceMemoryMiB,
    peakMemoryMiB: Math.max(...all.map((u) => u.peakMemoryMiB)),
    ...(withSm.length > 0
      ? {
          meanSmPct: round1(withSm.reduce((a, u) => a + u.meanSmPct! * u.looks, 0) / smLooks),
          p95SmPct: Math.max(...withSm.map((u) => u.p95SmPct!)),
        }
      : {}),
  };
}

function finite(x: number | undefined): number | undefined {
  return x !== undefined && Number.isFinite(x) ? x : undefined;
}

function round1(x: number): number {
  return Math.round(x * 10) / 10;
}
