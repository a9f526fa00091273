import { gpuModelMatches, type GpuModel } from './gpu.ts';

/**
 * NVIDIA Multi-Instance GPU profiles and their placement rules, restated from
 * data/mig/mig-profiles.json (NVIDIA's MIG user guide, go-nvml, mig-parted; see
 * data/PROVENANCE.md). test/core/mig.test.ts checks this table against that file.
 *
 * The rules (NVML): a GPU instance occupies memory slices [start, start + size) at one of its
 * profile's allowed starts; instances on a GPU may not overlap; at most `maxInstances` of a
 * profile per GPU (binds only for "+me" profiles). Those two rules imply at most 7 compute slices.
 */
export interface MigProfile {
  readonly name: string;
  readonly profileId: number;
  readonly computeSlices: number;
  readonly memorySlices: number;
  /** Nominal memory from the profile name, in MiB. */
  readonly memoryMiB: number;
  readonly maxInstances: number;
  /** Allowed first memory slices; each placement spans `memorySlices` slices. */
  readonly starts: readonly number[];
}

export interface MigGpu {
  readonly memorySlices: number;
  readonly computeSlices: number;
  readonly profiles: readonly MigProfile[];
}

// name, id, compute, memory slices, max instances, allowed starts
type Row = readonly [string, number, number, number, number, readonly number[]];

function gpu(rows: readonly Row[]): MigGpu {
  return {
    memorySlices: 8,
    computeSlices: 7,
    profiles: rows.map(([name, profileId, computeSlices, memorySlices, maxInstances, starts]) => ({
      name,
      profileId,
      computeSlices,
      memorySlices,
      memoryMiB: Number(/\.(\d+)gb/.exec(name)![1]) * 1024,
      maxInstances,
      starts,
    })),
  };
}

const ONE = [0, 1, 2, 3, 4, 5, 6];
const TWO = [0, 2, 4, 6];

/** The 8-memory-slice layout shared by A100, H100, H200 and B200, with each model's profile names. */
function eightSlice(n: { one: string; oneDouble: string; two: string; three: string; four: string; seven: string }): MigGpu {
  return gpu([
    [n.one, 19, 1, 1, 7, ONE],
    [`${n.one}+me`, 20, 1, 1, 1, ONE],
    [n.oneDouble, 15, 1, 2, 4, TWO],
    [n.two, 14, 2, 2, 3, [0, 2, 4]],
    [n.three, 9, 3, 4, 2, [0, 4]],
    [n.four, 5, 4, 4, 1, [0]],
    [n.seven, 0, 7, 8, 1, [0]],
  ]);
}

export const MIG_GPUS: Readonly<Partial<Record<GpuModel, MigGpu>>> = {
  'A100-40GB': eightSlice({ one: '1g.5gb', oneDouble: '1g.10gb', two: '2g.10gb', three: '3g.20gb', four: '4g.20gb', seven: '7g.40gb' }),
  'A100-80GB': eightSlice({ one: '1g.10gb', oneDouble: '1g.20gb', two: '2g.20gb', three: '3g.40gb', four: '4g.40gb', seven: '7g.80gb' }),
  H100: eightSlice({ one: '1g.10gb', oneDouble: '1g.20gb', two: '2g.20gb', three: '3g.40gb', four: '4g.40gb', seven: '7g.80gb' }),
  H200: eightSlice({ one: '1g.18gb', oneDouble: '1g.35gb', two: '2g.35gb', three: '3g.71gb', four: '4g.71gb', seven: '7g.141gb' }),
  B200: eightSlice({ one: '1g.23gb', oneDouble: '1g.45gb', two: '2g.45gb', three: '3g.90gb', four: '4g.90gb', seven: '7g.180gb' }),
};

export function migProfile(model: GpuModel, name: string): MigProfile | undefined {
  return MIG_GPUS[model]?.profiles.find((p) => p.name === name);
}

/** Models that offer a profile of this name. */
export function modelsWithProfile(name: string): GpuModel[] {
  return (Object.keys(MIG_GPUS) as GpuModel[]).filter((m) => migProfile(m, name) !== undefined);
}

/** Bit mask of the memory slices a placement occupies. */
export function placementMask(start: number, memorySlices: number): number {
  return ((1 << memorySlices) - 1) << start;
}

/** MIG state of one GPU: occupied memory slices, and instances per profile (for max-instance limits). */
export interface MigState {
  mask: number;
  readonly counts: Map<string, number>;
}

/** The starts at which a profile could be created now on a GPU in this state (rules R1 and R2). */
export function freeStarts(state: MigState, profile: MigProfile): number[] {
  if ((state.counts.get(profile.name) ?? 0) >= profile.maxInstances) return [];
  return profile.starts.filter((s) => (state.mask & placementMask(s, profile.memorySlices)) === 0);
}

/**
 * How much room a mask leaves, as the number of profile placements still possible weighted by
 * their size. Used to pick the placement that keeps the most (and largest) options open.
 */
const roomCache = new Map<string, Int32Array>();
export function roomAfter(gpuModel: GpuModel, mask: number): number {
  let table = roomCache.get(gpuModel);
  if (!table) {
    table = new Int32Array(256);
    const profiles = MIG_GPUS[gpuModel]?.profiles ?? [];
    for (let m = 0; m < 256; m++) {
      let score = 0;
      for (const p of profiles)
        for (const s of p.starts) if ((m & placementMask(s, p.memorySlices)) === 0) score += p.memorySlices * p.memorySlices;
      table[m] = score;
    }
    roomCache.set(gpuModel, table);
  }
  return table[mask & 0xff]!;
}

/** The best start for a profile on this GPU: the one that leaves the most room; undefined when none is free. */
export function bestStart(gpuModel: GpuModel, state: MigState, profile: MigProfile): number | undefined {
  let best: number | undefined;
  let bestRoom = -1;
  for (const s of freeStarts(state, profile)) {
    const room = roomAfter(gpuModel, state.mask | placementMask(s, profile.memorySlices));
    if (room > bestRoom) {
      best = s;
      bestRoom = room;
    }
  }
  return best;
}

/** Checks a set of instances on one GPU against the rules; returns the first problem found. */
export function validateMigLayout(model: GpuModel, instances: readonly { profile: string; start: number }[]): string | undefined {
  const g = MIG_GPUS[model];
  if (!g) return `${model} does not support MIG`;
  let mask = 0;
  const counts = new Map<string, number>();
  for (const inst of instances) {
    const p = migProfile(model, inst.profile);
    if (!p) return `${model} has no MIG profile ${inst.profile}`;
    if (!p.starts.includes(inst.start))
      return `${inst.profile} cannot start at memory slice ${inst.start} (allowed: ${p.starts.join(', ')})`;
    const bits = placementMask(inst.start, p.memorySlices);
    if ((mask & bits) !== 0) return `${inst.profile}@${inst.start} overlaps memory slices already in use`;
    mask |= bits;
    const n = (counts.get(p.name) ?? 0) + 1;
    if (n > p.maxInstances) return `at most ${p.maxInstances} ${p.name} per GPU`;
    counts.set(p.name, n);
  }
  return undefined;
}

/**
 * Why a MIG request names no real profile, or undefined: the profile must be in NVIDIA's table
 * for some MIG-capable model (of `models`, when the request limits them). The message lists the
 * profiles of each model that could have been meant.
 */
export function migProfileProblem(profile: string, models?: readonly string[]): string | undefined {
  const candidates = (Object.keys(MIG_GPUS) as GpuModel[]).filter((m) => !models || models.some((w) => gpuModelMatches(w, m)));
  if (candidates.length === 0)
    return `none of the GPU models ${models!.join(', ')} supports MIG (MIG GPUs: ${Object.keys(MIG_GPUS).join(', ')})`;
  if (candidates.some((m) => migProfile(m, profile) !== undefined)) return undefined;
  const listed = candidates.map((m) => `${m}: ${MIG_GPUS[m]!.profiles.map((p) => p.name).join(', ')}`).join('; ');
  return `"${profile}" is not a MIG profile of ${models ? 'the GPU models asked for' : 'any GPU'} (${listed})`;
}
