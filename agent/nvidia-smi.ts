import type { DeviceReading } from '../core/gpu-use.ts';
import { dcgmKey, type DcgmReading } from './dcgm-readings.ts';
import { GpuFleetError, messageOf } from '../core/errors.ts';
import { execFile } from 'node:child_process';
import { XMLParser } from 'fast-xml-parser';
import { normalizeGpuModel, type GpuDevice, type GpuModel } from '../core/gpu.ts';
import { identifyMigProfile } from './mig-profiles.ts';

/**
 * What the node's GPUs are and how they are, from `nvidia-smi`.
 *
 * The agent asks for the XML report (`nvidia-smi -q -x`) and, when that fails or cannot be
 * read, the text report (`nvidia-smi -q`); `nvidia-smi -L` adds MIG device names and UUIDs.
 * Field names moved between report versions (power_readings → gpu_power_readings, retired pages,
 * remapped rows): each value is looked up under every name it has had. "N/A" is absent, never 0.
 */

export interface MigDeviceReport {
  /** nvidia-smi's MIG device index on its GPU. */
  readonly index: number;
  readonly gpuInstanceId: number;
  readonly computeInstanceId: number;
  /** GPU-instance profile ("3g.40gb"): from `nvidia-smi -L`, else identified from memory and SMs. */
  readonly profile?: string;
  /** The compute-instance profile when the GPU instance is split ("1c.3g.71gb"), from `-L`. */
  readonly computeProfile?: string;
  readonly uuid?: string;
  readonly smCount?: number;
  readonly memoryTotalMiB: number;
  readonly memoryUsedMiB?: number;
  /** Where its GPU instance sits, in memory slices (`nvidia-smi mig -lgi`, Start:Size). */
  readonly placement?: { readonly start: number; readonly size: number };
}

export interface GpuReport {
  /** nvidia-smi's index: the order of the report (PCI bus order). */
  readonly index: number;
  readonly name: string;
  /** gpu-fleet's model name, or undefined for a GPU gpu-fleet does not schedule. */
  readonly model?: GpuModel;
  readonly uuid?: string;
  readonly busId?: string;
  readonly memoryTotalMiB: number;
  readonly memoryUsedMiB?: number;
  readonly utilizationPct?: number;
  readonly memoryUtilizationPct?: number;
  readonly powerDrawW?: number;
  readonly powerLimitW?: number;
  readonly temperatureC?: number;
  /** The SM and memory clocks now, MHz (XML only). */
  readonly smClockMHz?: number;
  readonly memClockMHz?: number;
  readonly ecc: {
    /** Uncorrectable errors since the driver loaded (DRAM + SRAM, or the older double-bit count). */
    readonly volatileUncorrectable?: number;
    readonly aggregateUncorrectable?: number;
  };
  /** A page retirement or row remap waits for a GPU reset (the memory is suspect until then). */
  readonly memoryRepairPending?: boolean;
  /** A row remap failed: the GPU should be replaced. */
  readonly remapFailure?: boolean;
  readonly mig: { readonly enabled: boolean; readonly pendingEnabled?: boolean; readonly devices: readonly MigDeviceReport[] };
}

export interface NvidiaSmiReport {
  readonly source: 'xml' | 'text';
  readonly driverVersion?: string;
  readonly cudaVersion?: string;
  readonly gpus: readonly GpuReport[];
}

/** nvidia-smi missing, failing, or saying something the agent cannot read. */
export class GpuInventoryError extends GpuFleetError {
  override name = 'GpuInventoryError';
  constructor(
    message: string,
    readonly kind: 'missing' | 'failed' | 'unreadable' | 'timeout',
    options: { cause?: unknown } = {},
  ) {
    super(message, { context: { kind }, ...options });
  }
}

// ---- values -----------------------------------------------------------------------------

/** "81559 MiB", "67.03 W", "27 C", "12 %", "0" → number; "N/A", "[N/A]", "", missing → undefined. */
export function num(value: unknown): number | undefined {
  if (typeof value === 'number') return Number.isFinite(value) ? value : undefined;
  if (typeof value !== 'string') return undefined;
  const m = /^\s*(-?\d+(?:\.\d+)?)\s*(?:MiB|W|C|%|MHz|KB\/s)?\s*$/.exec(value);
  return m ? Number(m[1]) : undefined;
}

function text(value: unknown): string | undefined {
  if (typeof value === 'number') return String(value);
  if (typeof value !== 'string') return undefined;
  const t = value.trim();
  return t === '' || /^\[?N\/A\]?$/.test(t) ? undefined : t;
}

function yes(value: unknown): boolean | undefined {
  const t = text(value)?.toLowerCase();
  return t === undefined ? undefined : t === 'yes' || t === 'enabled';
}

function sum(...values: (number | undefined)[]): number | undefined {
  const known = values.filter((v): v is number => v !== undefined);
  return known.length === 0 ? undefined : known.reduce((a, b) => a + b, 0);
}

function first<T>(...values: (T | undefined)[]): T | undefined {
  return values.find((v) => v !== undefined);
}

// ---- the XML report (-q -x) -------------------------------------------------------------

type X = Record<string, unknown>;
const obj = (v: unknown): X => (v !== null && typeof v === 'object' && !Array.isArray(v) ? (v as X) : {});
const list = (v: unknown): unknown[] => (v === undefined || v === null || v === '' ? [] : Array.isArray(v) ? v : [v]);

export function parseNvidiaSmiXml(xml: string): NvidiaSmiReport {
  if (!/<nvidia_smi_log[\s>]/.test(xml)) {
    throw new GpuInventoryError(
      `nvidia-smi -q -x did not print an nvidia_smi_log report; it began with: ${JSON.stringify(xml.slice(0, 80))}`,
      'unreadable',
    );
  }
  let doc: X;
  try {
    doc = new XMLParser({
      ignoreAttributes: false,
      attributeNamePrefix: '@',
      parseTagValue: false,
      trimValues: true,
      processEntities: false,
    }).parse(xml) as X;
  } catch (error) {
    throw new GpuInventoryError(`nvidia-smi -q -x printed XML that does not parse: ${messageOf(error)}`, 'unreadable');
  }
  const log = obj(doc.nvidia_smi_log);
  const gpus = list(log.gpu).map((g, index) => xmlGpu(obj(g), index));
  const driverVersion = text(log.driver_version);
  const cudaVersion = text(log.cuda_version);
  return { source: 'xml', ...(driverVersion ? { driverVersion } : {}), ...(cudaVersion ? { cudaVersion } : {}), gpus };
}

function xmlGpu(g: X, index: number): GpuReport {
  const name = text(g.product_name) ?? 'unknown GPU';
  const fb = obj(g.fb_memory_usage);
  const memoryTotalMiB = num(fb.total) ?? 0;
  const model = normalizeGpuModel(name, memoryTotalMiB / 1024);
  const util = obj(g.utilization);
  const power = { ...obj(g.power_readings), ...obj(g.gpu_power_readings) };
  const ecc = obj(g.ecc_errors);
  const vol = obj(ecc.volatile);
  const agg = obj(ecc.aggregate);
  const retired = obj(g.retired_pages);
  const remap = obj(g.remapped_rows);
  const migMode = obj(g.mig_mode);
  const migEnabled = yes(migMode.current_mig) ?? false;
  const devices = list(obj(g.mig_devices).mig_device).map((d) => xmlMigDevice(obj(d)));
  const uuid = text(g.uuid);
  const busId = text(g['@id']);
  return withoutUndefined({
    index,
    name,
    model,
    uuid,
    busId,
    memoryTotalMiB,
    memoryUsedMiB: num(fb.used),
    utilizationPct: num(util.gpu_util),
    memoryUtilizationPct: num(util.memory_util),
    powerDrawW: first(num(power.power_draw), num(power.average_power_draw), num(power.instant_power_draw)),
    powerLimitW: first(num(power.current_power_limit), num(power.power_limit), num(power.enforced_power_limit)),
    temperatureC: num(obj(g.temperature).gpu_temp),
    smClockMHz: num(obj(g.clocks).sm_clock),
    memClockMHz: num(obj(g.clocks).mem_clock),
    ecc: withoutUndefined({
      volatileUncorrectable: first(sum(num(vol.dram_uncorrectable), num(vol.sram_uncorrectable)), num(obj(vol.double_bit).total)),
      aggregateUncorrectable: first(sum(num(agg.dram_uncorrectable), num(agg.sram_uncorrectable)), num(obj(agg.double_bit).total)),
    }),
    memoryRepairPending: yes(retired.pending_retirement) || yes(retired.pending_blacklist) || yes(remap.remapped_row_pending) || undefined,
    remapFailure: yes(remap.remapped_row_failure) || undefined,
    mig: withoutUndefined({
      enabled: migEnabled,
      pendingEnabled: yes(migMode.pending_mig),
      devices: migEnabled ? withProfiles(model, memoryTotalMiB, devices) : [],
    }),
  }) as GpuReport;
}

function xmlMigDevice(d: X): MigDeviceReport & { ofas?: number; decoders?: number } {
  const shared = obj(obj(d.device_attributes).shared);
  const fb = obj(d.fb_memory_usage);
  return withoutUndefined({
    index: num(d.index) ?? 0,
    gpuInstanceId: num(d.gpu_instance_id) ?? 0,
    computeInstanceId: num(d.compute_instance_id) ?? 0,
    smCount: num(shared.multiprocessor_count),
    memoryTotalMiB: num(fb.total) ?? 0,
    memoryUsedMiB: num(fb.used),
    ofas: num(shared.ofa_count),
    decoders: num(shared.decoder_count),
  }) as MigDeviceReport & { ofas?: number };
}

// ---- the text report (-q) ---------------------------------------------------------------

interface TextNode {
  readonly key: string;
  readonly value?: string;
  readonly children: TextNode[];
}

/** Reads the indented "Key : value" outline of `nvidia-smi -q` into a tree, keeping order and repeats. */
function outline(report: string): TextNode {
  const root: TextNode = { key: '', children: [] };
  const stack: { indent: number; node: TextNode }[] = [{ indent: -1, node: root }];
  for (const raw of report.split(/\r?\n/)) {
    if (raw.trim() === '' || /^=+NVSMI LOG=+$/.test(raw.trim())) continue;
    const indent = raw.length - raw.trimStart().length;
    const kv = /^\s*(.+?)\s+:\s?(.*)$/.exec(raw);
    const node: TextNode = kv ? { key: kv[1]!.trim(), value: kv[2]!.trim(), children: [] } : { key: raw.trim(), children: [] };
    while (stack.length > 1 && stack[stack.length - 1]!.indent >= indent) stack.pop();
    stack[stack.length - 1]!.node.children.push(node);
    stack.push({ indent, node });
  }
  return root;
}

const at = (n: TextNode | undefined, ...path: string[]): TextNode | undefined =>
  path.reduce<TextNode | undefined>((cur, k) => cur?.children.find((c) => c.key === k), n);
const val = (n: TextNode | undefined, ...path: string[]): string | undefined => at(n, ...path)?.value;

export function parseNvidiaSmiText(report: string): NvidiaSmiReport {
  if (!/NVSMI LOG|Attached GPUs/.test(report)) {
    throw new GpuInventoryError(
      `nvidia-smi -q did not print its report; it began with: ${JSON.stringify(report.slice(0, 80))}`,
      'unreadable',
    );
  }
  const root = outline(report);
  const gpuNodes = root.children.filter((c) => /^GPU [0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]$/.test(c.key));
  const gpus = gpuNodes.map((g, index) => textGpu(g, index));
  // Newer drivers append a note: "610.57.04 [Deprecated; …]".
  const driverVersion = text(val(root, 'Driver Version'))?.replace(/\s*\[.*\]$/, '');
  const cudaVersion = text(val(root, 'CUDA Version'));
  return { source: 'text', ...(driverVersion ? { driverVersion } : {}), ...(cudaVersion ? { cudaVersion } : {}), gpus };
}

function textGpu(g: TextNode, index: number): GpuReport {
  const name = text(val(g, 'Product Name')) ?? 'unknown GPU';
  const memoryTotalMiB = num(val(g, 'FB Memory Usage', 'Total')) ?? 0;
  const model = normalizeGpuModel(name, memoryTotalMiB / 1024);
  const power = at(g, 'GPU Power Readings') ?? at(g, 'Power Readings');
  const ecc = at(g, 'ECC Errors');
  const eccSum = (scope: string) => {
    const s = at(ecc, scope);
    if (!s) return undefined;
    return first(
      sum(...s.children.filter((c) => /Uncorrectable/.test(c.key) && !/Threshold/.test(c.key)).map((c) => num(c.value))),
      num(val(s, 'Double Bit', 'Total')),
    );
  };
  const migEnabled = yes(val(g, 'MIG Mode', 'Current')) ?? false;
  const devices = g.children
    .filter((c) => c.key === 'MIG Device')
    .map((d) => {
      const shared = at(d, 'Device Attributes', 'Shared');
      return withoutUndefined({
        index: num(val(d, 'Index')) ?? 0,
        gpuInstanceId: num(val(d, 'GPU Instance ID')) ?? 0,
        computeInstanceId: num(val(d, 'Compute Instance ID')) ?? 0,
        smCount: num(val(shared, 'Multiprocessor count')),
        memoryTotalMiB: num(val(d, 'Shared FB Memory Usage', 'Total')) ?? num(val(d, 'FB Memory Usage', 'Total')) ?? 0,
        memoryUsedMiB: num(val(d, 'Shared FB Memory Usage', 'Used')) ?? num(val(d, 'FB Memory Usage', 'Used')),
        ofas: num(val(shared, 'OFA count')),
        decoders: num(val(shared, 'Decoder count')),
      }) as MigDeviceReport & { ofas?: number };
    });
  const busIdMatch = /^GPU (.+)$/.exec(g.key);
  return withoutUndefined({
    index,
    name,
    model,
    uuid: text(val(g, 'GPU UUID')),
    busId: busIdMatch?.[1],
    memoryTotalMiB,
    memoryUsedMiB: num(val(g, 'FB Memory Usage', 'Used')),
    utilizationPct: num(val(g, 'Utilization', 'GPU')),
    memoryUtilizationPct: num(val(g, 'Utilization', 'Memory')),
    powerDrawW: first(num(val(power, 'Power Draw')), num(val(power, 'Average Power Draw')), num(val(power, 'Instantaneous Power Draw'))),
    powerLimitW: first(num(val(power, 'Current Power Limit')), num(val(power, 'Power Limit')), num(val(power, 'Enforced Power Limit'))),
    temperatureC: num(val(g, 'Temperature', 'GPU Current Temp')),
    ecc: withoutUndefined({ volatileUncorrectable: eccSum('Volatile'), aggregateUncorrectable: eccSum('Aggregate') }),
    memoryRepairPending:
      yes(val(g, 'Retired Pages', 'Pending Page Blacklist')) ||
      yes(val(g, 'Retired Pages', 'Pending')) ||
      yes(val(g, 'Remapped Rows', 'Pending')) ||
      undefined,
    remapFailure: yes(val(g, 'Remapped Rows', 'Remapping Failure Occurred')) || undefined,
    mig: withoutUndefined({
      enabled: migEnabled,
      pendingEnabled: yes(val(g, 'MIG Mode', 'Pending')),
      devices: migEnabled ? withProfiles(model, memoryTotalMiB, devices) : [],
    }),
  }) as GpuReport;
}

// ---- nvidia-smi -L ------------------------------------------------------------------------

export interface ListedGpu {
  readonly index: number;
  readonly name: string;
  readonly uuid: string;
  readonly mig: readonly { readonly index: number; readonly name: string; readonly uuid: string }[];
}

/** `GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-…)` and its `  MIG 3g.40gb Device 0: (UUID: MIG-…)` lines. */
export function parseNvidiaSmiList(output: string): ListedGpu[] {
  const gpus: { index: number; name: string; uuid: string; mig: { index: number; name: string; uuid: string }[] }[] = [];
  for (const line of output.split(/\r?\n/)) {
    const g = /^GPU (\d+): (.+?) \(UUID: ([^)]+)\)\s*$/.exec(line);
    if (g) {
      gpus.push({ index: Number(g[1]), name: g[2]!, uuid: g[3]!, mig: [] });
      continue;
    }
    const m = /^\s+MIG (\S+)\s+Device\s+(\d+): \(UUID: ([^)]+)\)\s*$/.exec(line);
    if (m && gpus.length > 0) gpus[gpus.length - 1]!.mig.push({ name: m[1]!, index: Number(m[2]), uuid: m[3]! });
  }
  return gpus;
}

/** Adds the names and UUIDs of `-L` to a report (matching GPUs by index, MIG devices by index). */
export function mergeList(report: NvidiaSmiReport, listed: readonly ListedGpu[]): NvidiaSmiReport {
  return {
    ...report,
    gpus: report.gpus.map((gpu) => {
      const l = listed.find((x) => x.index === gpu.index);
      if (!l) return gpu;
      const devices = gpu.mig.devices.map((d) => {
        const named = l.mig.find((m) => m.index === d.index);
        if (!named) return d;
        // "1c.3g.71gb" is compute instance 1c of GPU instance 3g.71gb.
        const ci = /^(\d+c)\.(.+)$/.exec(named.name);
        return { ...d, uuid: named.uuid, profile: ci ? ci[2]! : named.name, ...(ci ? { computeProfile: named.name } : {}) };
      });
      return { ...gpu, uuid: gpu.uuid ?? l.uuid, mig: { ...gpu.mig, devices } };
    }),
  };
}

/**
 * Names each MIG device's GPU-instance profile. Compute instances of one GPU instance share its
 * memory; its SM count is the sum over them.
 */
function withProfiles(
  model: GpuModel | undefined,
  gpuMemoryMiB: number,
  devices: (MigDeviceReport & { ofas?: number; decoders?: number })[],
): MigDeviceReport[] {
  const smByGi = new Map<number, number>();
  for (const d of devices) if (d.smCount !== undefined) smByGi.set(d.gpuInstanceId, (smByGi.get(d.gpuInstanceId) ?? 0) + d.smCount);
  return devices.map(({ ofas, decoders: _d, ...d }) => {
    const profile = model
      ? identifyMigProfile(model, gpuMemoryMiB, {
          memoryMiB: d.memoryTotalMiB,
          ...(smByGi.has(d.gpuInstanceId) ? { smCount: smByGi.get(d.gpuInstanceId)! } : {}),
          ...(ofas !== undefined ? { ofas } : {}),
        })
      : undefined;
    return profile ? { ...d, profile } : d;
  });
}

// ---- health -----------------------------------------------------------------------------

/** Why a GPU should not take work, or [] when it is fine. */
export function gpuProblems(gpu: GpuReport): string[] {
  const problems: string[] = [];
  const where = `GPU ${gpu.index} (${gpu.name}${gpu.uuid ? `, ${gpu.uuid}` : ''})`;
  if ((gpu.ecc.volatileUncorrectable ?? 0) > 0)
    problems.push(`${where}: ${gpu.ecc.volatileUncorrectable} uncorrectable ECC error(s) since the driver loaded`);
  if (gpu.memoryRepairPending) problems.push(`${where}: a memory page retirement or row remap is waiting for a GPU reset`);
  if (gpu.remapFailure) problems.push(`${where}: a memory row remap failed; the GPU needs service`);
  if (gpu.mig.pendingEnabled !== undefined && gpu.mig.pendingEnabled !== gpu.mig.enabled)
    problems.push(`${where}: a MIG mode change is waiting for a GPU reset`);
  return problems;
}

/** The GPUs as the node record carries them; GPUs of models gpu-fleet does not schedule are left out. */
export function toGpuDevices(report: NvidiaSmiReport): GpuDevice[] {
  return report.gpus
    .filter((g): g is GpuReport & { model: GpuModel } => g.model !== undefined)
    .map((g) => ({
      index: g.index,
      model: g.model,
      memoryMiB: g.memoryTotalMiB,
      ...(g.uuid ? { uuid: g.uuid } : {}),
      ...(g.mig.enabled ? { migEnabled: true } : {}),
      ...(g.mig.enabled
        ? {
            migDevices: g.mig.devices.map((d) => ({
              index: d.index,
              gpuInstanceId: d.gpuInstanceId,
              computeInstanceId: d.computeInstanceId,
              memoryMiB: d.memoryTotalMiB,
              ...(d.profile ? { profile: d.profile } : {}),
              ...(d.uuid ? { uuid: d.uuid } : {}),
              ...(d.placement ? { startSlice: d.placement.start, slices: d.placement.size } : {}),
            })),
          }
        : {}),
    }));
}

/**
 * What nvidia-smi shows of the devices an attempt holds (as the device allocator names them: a GPU's
 * UUID or index, a MIG device's UUID or `gpu:index`), for its GPU-use tally. A MIG device has its
 * own memory figures and no utilisation (nvidia-smi reports none per MIG device) unless a
 * dcgm-exporter scrape gives one; a device the report does not list is left out.
 */
export function deviceReadings(
  report: NvidiaSmiReport,
  devices: readonly string[],
  /** A dcgm-exporter scrape's readings (agent/dcgm-readings.ts), when the node runs one: a MIG instance's utilisation comes from there. */
  dcgm?: ReadonlyMap<string, DcgmReading>,
): DeviceReading[] {
  const out: DeviceReading[] = [];
  for (const id of devices) {
    const gpu = report.gpus.find((g) => (g.uuid !== undefined && g.uuid === id) || String(g.index) === id);
    if (gpu) {
      const d = gpu.uuid ? dcgm?.get(dcgmKey(gpu.uuid)) : undefined;
      const used = gpu.memoryUsedMiB ?? d?.memoryUsedMiB;
      const sm = gpu.utilizationPct ?? d?.smPct;
      out.push({
        ...(gpu.model ? { model: gpu.model } : {}),
        memoryTotalMiB: gpu.memoryTotalMiB,
        ...(used !== undefined ? { memoryUsedMiB: used } : {}),
        ...(sm !== undefined ? { smPct: sm } : {}),
      });
      continue;
    }
    for (const g of report.gpus) {
      const d = g.mig.devices.find((m) => (m.uuid !== undefined && m.uuid === id) || `${g.index}:${m.index}` === id);
      if (!d) continue;
      const fromDcgm = g.uuid ? dcgm?.get(dcgmKey(g.uuid, d.gpuInstanceId)) : undefined;
      const used = d.memoryUsedMiB ?? fromDcgm?.memoryUsedMiB;
      out.push({
        ...(g.model ? { model: g.model } : {}),
        memoryTotalMiB: d.memoryTotalMiB,
        ...(used !== undefined ? { memoryUsedMiB: used } : {}),
        ...(fromDcgm?.smPct !== undefined ? { smPct: fromDcgm.smPct } : {}),
      });
      break;
    }
  }
  return out;
}

// ---- running it -------------------------------------------------------------------------

export interface NvidiaSmiOptions {
  /** The program; default `nvidia-smi` on PATH. */
  readonly command?: string;
  readonly timeoutMs?: number;
  readonly env?: NodeJS.ProcessEnv;
}

function run(command: string, args: readonly string[], options: NvidiaSmiOptions): Promise<string> {
  const timeoutMs = options.timeoutMs ?? 20_000;
  return new Promise((resolve, reject) => {
    execFile(
      command,
      args,
      { timeout: timeoutMs, maxBuffer: 32 * 1024 * 1024, env: options.env ?? process.env, windowsHide: true },
      (error, stdout, stderr) => {
        if (!error) return resolve(stdout);
        const e = error as NodeJS.ErrnoException & { killed?: boolean; code?: string | number };
        if (e.code === 'ENOENT')
          return reject(new GpuInventoryError(`${command} was not found on PATH: is the NVIDIA driver installed?`, 'missing'));
        if (e.killed)
          return reject(
            new GpuInventoryError(`${command} ${args.join(' ')} did not answer within ${timeoutMs} ms (a hung GPU or driver?)`, 'timeout'),
          );
        const said = (stderr || stdout).trim().split('\n').slice(0, 3).join(' / ');
        reject(
          new GpuInventoryError(`${command} ${args.join(' ')} failed with exit code ${String(e.code)}${said ? `: ${said}` : ''}`, 'failed'),
        );
      },
    );
  });
}

/**
 * Reads the GPU inventory: the XML report, or the text report when the XML one fails or cannot
 * be read, plus `-L` for MIG names (best effort). Throws GpuInventoryError naming the problem.
 */
export async function readGpuInventory(options: NvidiaSmiOptions = {}): Promise<NvidiaSmiReport & { warnings: string[] }> {
  const command = options.command ?? 'nvidia-smi';
  const warnings: string[] = [];
  let report: NvidiaSmiReport;
  try {
    report = parseNvidiaSmiXml(await run(command, ['-q', '-x'], options));
  } catch (error) {
    if (error instanceof GpuInventoryError && (error.kind === 'missing' || error.kind === 'timeout')) throw error;
    warnings.push(`XML report unusable (${messageOf(error)}); read the text report instead`);
    report = parseNvidiaSmiText(await run(command, ['-q'], options));
  }
  if (report.gpus.some((g) => g.mig.enabled)) {
    try {
      report = mergeList(report, parseNvidiaSmiList(await run(command, ['-L'], options)));
    } catch (error) {
      warnings.push(`could not list MIG devices with -L (${messageOf(error)}); profiles identified from memory and SMs`);
    }
    try {
      report = mergeGpuInstances(report, parseGpuInstances(await run(command, ['mig', '-lgi'], options)));
    } catch (error) {
      warnings.push(
        `could not list GPU-instance placements with mig -lgi (${messageOf(error)}); the planner counts only its own placements`,
      );
    }
  }
  return { ...report, warnings };
}

/** One row of `nvidia-smi mig -lgi`: a GPU instance and its placement. */
export interface GpuInstanceRow {
  readonly gpuIndex: number;
  readonly profile: string;
  readonly profileId: number;
  readonly gpuInstanceId: number;
  readonly start: number;
  readonly size: number;
}

/**
 * Parses `nvidia-smi mig -lgi` (the GPU instances table: GPU, Name, Profile ID, Instance ID,
 * Placement Start:Size). "No GPU instances found" gives an empty list.
 */
export function parseGpuInstances(text: string): GpuInstanceRow[] {
  const out: GpuInstanceRow[] = [];
  for (const line of text.split('\n')) {
    const m = /^\|\s*(\d+)\s+MIG\s+(\S+)\s+(\d+)\s+(\d+)\s+(\d+):(\d+)\s*\|/.exec(line);
    if (!m) continue;
    out.push({
      gpuIndex: Number(m[1]),
      profile: m[2]!,
      profileId: Number(m[3]),
      gpuInstanceId: Number(m[4]),
      start: Number(m[5]),
      size: Number(m[6]),
    });
  }
  return out;
}

/** Adds each MIG device's placement from `-lgi` rows (matched by GPU and GPU-instance id). */
export function mergeGpuInstances(report: NvidiaSmiReport, rows: readonly GpuInstanceRow[]): NvidiaSmiReport {
  return {
    ...report,
    gpus: report.gpus.map((g) => ({
      ...g,
      mig: {
        ...g.mig,
        devices: g.mig.devices.map((d) => {
          const row = rows.find((r) => r.gpuIndex === g.index && r.gpuInstanceId === d.gpuInstanceId);
          return row ? { ...d, placement: { start: row.start, size: row.size }, profile: d.profile ?? row.profile } : d;
        }),
      },
    })),
  };
}

function withoutUndefined<T extends object>(o: T): T {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as T;
}
