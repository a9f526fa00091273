import * as z from 'zod/mini';
/**
 * GPU models and the shapes of GPU a job can ask for.
 *
 * Model names are canonical short names ("A100-80GB", "L4"). A job that asks for "V100" also
 * accepts the 32 GB variant ("V100-32GB"): the request is met by every GPU whose name extends it.
 */

export const GPU_MODELS = [
  'K80',
  'T4',
  'V100',
  'V100-32GB',
  'A10G',
  'L4',
  'L40S',
  'A100-40GB',
  'A100-80GB',
  'H100',
  'H200',
  'B200',
] as const;
export type GpuModel = (typeof GPU_MODELS)[number];

/**
 * The models a name that is not a model stands for ("A100": "A100-40GB" and "A100-80GB"): a spec
 * naming one of these is ambiguous (40 or 80 GB are different machines), and is refused with the choices.
 */
export function modelsNamedBy(name: string): GpuModel[] {
  const wanted = name.toUpperCase();
  return GPU_MODELS.filter((m) => m.toUpperCase().startsWith(`${wanted}-`));
}

export function isGpuModel(name: string): name is GpuModel {
  return (GPU_MODELS as readonly string[]).includes(name);
}

/** True when a node with `actual` GPUs satisfies a request for `wanted` (exact model or family). */
export function gpuModelMatches(wanted: string, actual: GpuModel): boolean {
  return wanted === actual || actual.startsWith(`${wanted}-`);
}

/**
 * Maps a vendor's GPU description ("NVIDIA A100", 80 GiB; "NVIDIA T4 Tensor Core"; "nvidia-l4")
 * to a canonical model, or undefined when it is not one gpu-fleet knows.
 */
export function normalizeGpuModel(description: string, memoryGiBPerGpu?: number): GpuModel | undefined {
  const d = description
    .toUpperCase()
    .replace(/^NVIDIA[\s-]+/, '')
    .replace(/^TESLA[\s-]+/, '');
  if (/\bH200\b/.test(d)) return 'H200';
  if (/\bH100\b/.test(d)) return 'H100';
  if (/\bB200\b/.test(d)) return 'B200';
  if (/\bA100\b/.test(d)) {
    if (/80\s*GB/.test(d) || (memoryGiBPerGpu !== undefined && memoryGiBPerGpu >= 60)) return 'A100-80GB';
    return 'A100-40GB';
  }
  if (/\bL40S\b/.test(d)) return 'L40S';
  if (/\bL4\b/.test(d)) return 'L4';
  if (/\bA10G\b/.test(d)) return 'A10G';
  if (/\bV100\b/.test(d)) {
    if (/32\s*GB/.test(d) || (memoryGiBPerGpu !== undefined && memoryGiBPerGpu >= 30)) return 'V100-32GB';
    return 'V100';
  }
  if (/\bT4\b/.test(d)) return 'T4';
  if (/\bK80\b/.test(d)) return 'K80';
  return undefined;
}

/**
 * What the job's owner lets right-sizing do with the shape (core/rightsizing.ts): `suggest` (the
 * default) records what a smaller shape would save; `auto` gives the job the shape its family's
 * measured use calls for, when it has one.
 */
export type RightsizeMode = 'suggest' | 'auto';

/** What a job asks of each node it runs on (a gang asks this of every node). */
export type GpuRequest =
  /** N whole GPUs on one node. */
  | {
      readonly kind: 'whole';
      readonly count: number;
      readonly models?: readonly string[];
      readonly minMemoryMiB?: number;
      readonly rightsize?: RightsizeMode;
    }
  /** A time-sliced share of one GPU: a fraction of its time (in thousandths) and GPU memory. */
  | {
      readonly kind: 'fraction';
      readonly milliGpu: number;
      readonly memoryMiB: number;
      readonly models?: readonly string[];
      readonly rightsize?: RightsizeMode;
    }
  /** One MIG instance of a named profile such as "1g.10gb" or "3g.40gb". */
  | { readonly kind: 'mig'; readonly profile: string; readonly models?: readonly string[]; readonly rightsize?: RightsizeMode };

/** GPUs a request occupies on one node, counting a fraction or MIG slice as a whole GPU it touches. */
export function gpusTouched(request: GpuRequest): number {
  return request.kind === 'whole' ? request.count : 1;
}

/**
 * The compute slices of a MIG profile, from its name ("3g.40gb": 3 of the GPU's 7): the one parser
 * of profile names. 1 for a name that does not say.
 */
export function migComputeSlices(profile: string): number {
  const m = /^(\d)g\./.exec(profile);
  return m ? Number(m[1]) : 1;
}

/**
 * The GPU-equivalents a request uses, in thousandths of a GPU: for fair share, team caps,
 * accounting, status and reports alike. A MIG instance counts its compute slices ÷ 7 — the share
 * its name states, the same on every GPU model (its memory slices are not: a 1g.10gb takes one of
 * eight on an A100-80GB or H100 and two on an A100-40GB, so a memory-based share would need the
 * GPU model wherever a share is counted, and a job's holding does not carry it).
 */
export function milliGpusUsed(request: GpuRequest): number {
  switch (request.kind) {
    case 'whole':
      return request.count * 1000;
    case 'fraction':
      return request.milliGpu;
    case 'mig':
      return Math.round((migComputeSlices(request.profile) * 1000) / 7);
  }
}

/** A MIG device as the node agent found it (a GPU instance, or one compute instance of it). */
export interface MigDevice {
  readonly index: number;
  readonly gpuInstanceId: number;
  readonly computeInstanceId: number;
  /** GPU-instance profile, e.g. "3g.40gb"; absent when the agent could not tell. */
  readonly profile?: string;
  readonly uuid?: string;
  readonly memoryMiB: number;
  /** Its GPU instance's placement in memory slices, as the driver reports it (absent when unknown). */
  readonly startSlice?: number;
  readonly slices?: number;
}

/** A GPU on a node as the node agent reports it or the catalogue promises it. */
export interface GpuDevice {
  readonly index: number;
  readonly model: GpuModel;
  readonly memoryMiB: number;
  readonly uuid?: string;
  readonly migEnabled?: boolean;
  /** The MIG devices that exist on the GPU now (MIG mode on). */
  readonly migDevices?: readonly MigDevice[];
}

/**
 * The GPUs a machine reports (its node record's `gpus`: {@link GpuDevice}), every field checked.
 * The planner reads them for every machine on every plan, so the agent API refuses a malformed
 * report at the door, and the planner leaves out a machine whose stored report does not pass.
 */
const whole = (min: number, max: number) => z.number().check(z.int(), z.gte(min), z.lte(max));
const label = (max: number) => z.string().check(z.minLength(1), z.maxLength(max));
const MIG_DEVICE = z.strictObject({
  index: whole(0, 63),
  gpuInstanceId: whole(0, 63),
  computeInstanceId: whole(0, 63),
  profile: z.optional(label(32)),
  uuid: z.optional(label(128)),
  memoryMiB: whole(0, 4 * 1024 * 1024),
  startSlice: z.optional(whole(0, 7)),
  slices: z.optional(whole(1, 8)),
});
const GPU_DEVICE = z
  .strictObject({
    index: whole(0, 63),
    model: z.enum(GPU_MODELS),
    memoryMiB: whole(1, 4 * 1024 * 1024),
    uuid: z.optional(label(128)),
    migEnabled: z.optional(z.boolean()),
    migDevices: z.optional(z.array(MIG_DEVICE).check(z.maxLength(56))),
  })
  .check(
    z.refine((g) => g.migDevices === undefined || g.migEnabled === true, { error: 'migDevices are reported only with migEnabled: true' }),
  );
export const GPU_REPORT = z.array(GPU_DEVICE).check(
  z.maxLength(64),
  z.refine((gs) => new Set(gs.map((g) => g.index)).size === gs.length, { error: 'each GPU index is reported once' }),
);

/** Why a stored GPU report cannot be read (the first problems, with where), or undefined when it can. */
export function gpuReportProblem(gpus: unknown): string | undefined {
  const r = GPU_REPORT.safeParse(gpus);
  if (r.success) return undefined;
  return r.error.issues
    .slice(0, 3)
    .map((i) => `gpus${i.path.map((p) => (typeof p === 'number' ? `[${p}]` : `.${String(p)}`)).join('')}: ${i.message}`)
    .join('; ');
}

/**
 * Each model's speed on the two measures that bound most ML work, from NVIDIA's datasheets: dense
 * FP16/BF16 tensor throughput (TFLOPS, without sparsity; the A10G is AWS's variant, which NVIDIA
 * does not publish: taken as half the A10's 125) and memory bandwidth (GB/s; SXM parts where
 * there are two). Right-sizing (core/rightsizing.ts) moves a job to another model only when that
 * model is at least as fast as the job's measured need on both. K80 has no tensor cores: its FP32.
 */
export const GPU_SPEED: Readonly<Record<GpuModel, { readonly tflops: number; readonly bandwidthGBs: number }>> = {
  K80: { tflops: 4.4, bandwidthGBs: 240 },
  T4: { tflops: 65, bandwidthGBs: 320 },
  V100: { tflops: 125, bandwidthGBs: 900 },
  'V100-32GB': { tflops: 125, bandwidthGBs: 900 },
  A10G: { tflops: 62.5, bandwidthGBs: 600 },
  L4: { tflops: 121, bandwidthGBs: 300 },
  L40S: { tflops: 362, bandwidthGBs: 864 },
  'A100-40GB': { tflops: 312, bandwidthGBs: 1555 },
  'A100-80GB': { tflops: 312, bandwidthGBs: 2039 },
  H100: { tflops: 989, bandwidthGBs: 3350 },
  H200: { tflops: 989, bandwidthGBs: 4800 },
  B200: { tflops: 2250, bandwidthGBs: 8000 },
};

/**
 * Each model's CUDA compute capability (NVIDIA's table): code built for one capability and the
 * number formats it uses (BF16 and TF32 from 8.0) run on the same or a higher one, so
 * right-sizing never moves a job to a model with a lower one.
 */
export const COMPUTE_CAPABILITY: Readonly<Record<GpuModel, number>> = {
  K80: 3.7,
  T4: 7.5,
  V100: 7.0,
  'V100-32GB': 7.0,
  A10G: 8.6,
  L4: 8.9,
  L40S: 8.9,
  'A100-40GB': 8.0,
  'A100-80GB': 8.0,
  H100: 9.0,
  H200: 9.0,
  B200: 10.0,
};
