import { COMPUTE_CAPABILITY, GPU_SPEED, gpuModelMatches, migComputeSlices, milliGpusUsed, type GpuModel, type GpuRequest } from './gpu.ts';
import { jobGpuUse, type MeasuredGpuUse } from './gpu-use.ts';
import type { Job, RightsizeDecision } from './job.ts';
import type { JobSpec } from './job-spec.ts';
import { MIG_GPUS } from './mig.ts';

/**
 * Right-sizing: from what a job's attempts were measured using (core/gpu-use.ts), the cheapest
 * shape that would have held it: a MIG slice of the GPU it ran on, a time-sliced share of it, a
 * cheaper GPU model, or fewer whole GPUs. Used by `gpu-fleet report` (its right-sizing rows) and
 * by intake for a spec with `gpu.rightsize: "auto"` (its family's next submission takes the shape).
 *
 * The rules of a shape that holds the job:
 * - Memory: at least the measured peak plus {@link MEMORY_MARGIN_PCT}% of it, and never less than
 *   the peak plus {@link MEMORY_MARGIN_MIN_MIB}. A job is never given less than it was seen using.
 * - Compute: the 95th percentile of its utilisation on the device it ran on, as a share of that
 *   device (a MIG slice is its compute slices ÷ 7 of the GPU), plus {@link COMPUTE_MARGIN_PCT}%,
 *   must fit in the new device's share. On another model, both its tensor throughput and its
 *   memory bandwidth must cover that need (GPU_SPEED), the slower of the two deciding. Where the
 *   utilisation was not measured (nvidia-smi reports none for a MIG slice), the job keeps all the
 *   compute it had.
 * - Only single-node jobs on whole GPUs or MIG slices: a gang's figures are its reporting rank's
 *   only, and a time-sliced share reads the whole GPU it shares (every sharer's use), so neither
 *   is measured well enough to shrink.
 * - Of the shapes that hold it, the same GPU comes first (a MIG slice, fewer GPUs), then another
 *   model (never one of a lower compute capability), then a time-sliced share; the cheapest of the
 *   first kind that has one wins (see PREFERENCE).
 */

/** Memory above the measured peak a right-sized shape keeps: 20% of it, and at least 1 GiB. */
export const MEMORY_MARGIN_PCT = 20;
export const MEMORY_MARGIN_MIN_MIB = 1024;
/** Compute above the measured 95th percentile a right-sized shape keeps. */
export const COMPUTE_MARGIN_PCT = 20;
/** A shape is recommended only when it saves at least this share of what the runs cost. */
export const MIN_SAVING_PCT = 10;
/** Runs a family needs before `auto` changes its shape, and the runs kept per family. */
export const AUTO_MIN_RUNS = 2;
export const FAMILY_RUNS_KEPT = 20;

/** A family of recurring jobs: one team's jobs with the same `project` label and the same image. */
export function rightsizeFamily(team: string, spec: Pick<JobSpec, 'image' | 'labels'>): string {
  return `${team}/${spec.labels?.project ?? '(no project)'}/${spec.image}`;
}

/** One finished run of a job as right-sizing reads it. */
export interface RightsizeRun {
  readonly jobId: string;
  readonly endedAtMs: number;
  readonly state: 'succeeded' | 'failed';
  /** The shape it ran with. */
  readonly gpu: GpuRequest;
  readonly nodes: number;
  /** Its measured use over its attempts (jobGpuUse). */
  readonly use: MeasuredGpuUse;
  /** What its attempts cost, at the prices they ran at. */
  readonly costMicroUsd: number;
  /** The shape auto chose for it, when it did (a failed right-sized run stops auto for its family). */
  readonly rightsizedFrom?: GpuRequest;
}

/** A finished job as a run, or undefined when it was not measured or did not finish (cancelled, rejected, still running). */
export function runOf(job: Job): RightsizeRun | undefined {
  if (job.state !== 'succeeded' && job.state !== 'failed') return undefined;
  const use = jobGpuUse(job.usage?.gpuUse);
  if (!use) return undefined;
  return {
    jobId: job.id,
    endedAtMs: job.endedAtMs ?? job.updatedAtMs,
    state: job.state,
    gpu: job.spec.gpu,
    nodes: job.spec.nodes,
    use,
    costMicroUsd: job.usage?.costMicroUsd ?? 0,
    ...(job.rightsize?.applied ? { rightsizedFrom: job.rightsize.from } : {}),
  };
}

/** What a GPU model offers: its memory per GPU and its cheapest on-demand price per GPU-hour in the catalogue. */
export interface GpuOffer {
  readonly memoryMiB: number;
  readonly microUsdPerGpuHour: number;
}
export type GpuOffers = ReadonlyMap<GpuModel, GpuOffer>;

export type ShapeKind = 'mig' | 'fraction' | 'model' | 'fewer-gpus';

/** A shape that holds the measured need, and what it costs against what the runs ran with. */
export interface ShapeCandidate {
  readonly kind: ShapeKind;
  readonly gpu: GpuRequest;
  /** Memory the shape gives one device, MiB. */
  readonly memoryMiB: number;
  /** Its cost per hour ÷ the newest run's (0–1). */
  readonly costRatio: number;
}

export interface Recommendation {
  readonly family: string;
  readonly from: GpuRequest;
  readonly to: ShapeCandidate;
  /** Every shape that holds the need, cheapest first (intake takes the first the fleet can run). */
  readonly candidates: readonly ShapeCandidate[];
  readonly runs: number;
  readonly jobIds: readonly string[];
  readonly model: GpuModel;
  readonly peakMemoryMiB: number;
  readonly needMemoryMiB: number;
  readonly p95SmPct?: number;
  readonly meanSmPct?: number;
  /** What the runs cost, and what they would have cost in the recommended shape (each at the prices it ran at). */
  readonly costMicroUsd: number;
  readonly savingMicroUsd: number;
  /** How far the peak is below the recommended shape's memory, % of it. */
  readonly memoryHeadroomPct: number;
  readonly confidence: 'high' | 'medium' | 'low';
  readonly why: string;
}

export type RightsizeResult =
  { readonly ok: true; readonly recommendation: Recommendation } | { readonly ok: false; readonly family: string; readonly why: string };

/**
 * Which kind of shape comes first when several hold the job, before their cost: the same GPU
 * (a MIG slice, fewer GPUs) keeps the job's hardware and its machine (the CPUs and memory a spec
 * does not declare); another model changes both; a time-sliced share has no memory or fault
 * isolation and loses time to switching. A cheaper shape of a later kind is listed among the
 * candidates (`report` shows it) but is recommended only where no earlier kind holds the job.
 */
const PREFERENCE: Record<ShapeKind, number> = { mig: 0, 'fewer-gpus': 0, model: 1, fraction: 2 };

/** Fraction shares are given in steps of this many thousandths of a GPU, and their memory in steps of this many MiB. */
const FRACTION_STEP_MILLI = 50;
const FRACTION_MEMORY_STEP_MIB = 256;

/**
 * The cheapest shape that holds every run of a family (or one job), or why there is none. `runs`
 * are the family's finished, measured runs; the newest run's shape is the one compared against.
 */
export function recommendShape(
  family: string,
  runs: readonly RightsizeRun[],
  offers: GpuOffers,
  /** The shape to compare against (a new submission's); default: the newest run's. */
  base?: GpuRequest,
): RightsizeResult {
  const measured = runs.filter((r) => r.state === 'succeeded').sort((a, b) => a.endedAtMs - b.endedAtMs);
  const no = (why: string): RightsizeResult => ({ ok: false, family, why });
  if (measured.length === 0) return no('no finished run was measured');
  const newest = measured[measured.length - 1]!;
  if (measured.some((r) => r.nodes > 1)) return no("a gang's use is measured on one rank only");
  if (measured.some((r) => r.gpu.kind === 'fraction'))
    return no('a time-sliced share reads the whole GPU it shares, so its own use is not known');
  const model = newest.use.model;
  if (!model) return no('the GPU model it ran on was not reported');

  // Every run's measurement as one: the highest peak, busy devices and p95, the mean weighted by looks.
  const all = jobGpuUse(measured.map((r) => r.use))!;
  const peak = all.peakMemoryMiB;
  const needMemory = Math.ceil(Math.max(peak * (1 + MEMORY_MARGIN_PCT / 100), peak + MEMORY_MARGIN_MIN_MIB));
  const busy = Math.max(1, all.busyDevices);
  // The need per device, in each measure of speed (throughput, bandwidth), the margin included: each run on its own device.
  const need = { tflops: 0, bandwidthGBs: 0 };
  let computeKnown = true;
  for (const r of measured) {
    const m = r.use.model ?? model;
    const share = deviceShare(r.gpu);
    const used = r.use.p95SmPct !== undefined ? (r.use.p95SmPct / 100) * (1 + COMPUTE_MARGIN_PCT / 100) : 1;
    if (r.use.p95SmPct === undefined) computeKnown = false;
    const f = Math.min(1, used) * share;
    need.tflops = Math.max(need.tflops, f * GPU_SPEED[m].tflops);
    need.bandwidthGBs = Math.max(need.bandwidthGBs, f * GPU_SPEED[m].bandwidthGBs);
  }
  const from = base ?? newest.gpu;
  const held = from.kind === 'whole' ? from.count : 1;
  const ranMilli = milliGpusUsed(from);
  const ranOffer = offers.get(model);
  const candidates: ShapeCandidate[] = [];
  const sameModel = (gpu: GpuRequest, memoryMiB: number, kind: ShapeKind, milli: number) =>
    candidates.push({ kind, gpu, memoryMiB, costRatio: milli / ranMilli });

  if (held > 1 && busy < held)
    sameModel({ kind: 'whole', count: busy, models: [model] }, newest.use.deviceMemoryMiB, 'fewer-gpus', busy * 1000);
  if (busy === 1) {
    const holds = (m: GpuModel, share: number) =>
      share * GPU_SPEED[m].tflops >= need.tflops && share * GPU_SPEED[m].bandwidthGBs >= need.bandwidthGBs;
    // A MIG slice of the model it ran on (the "+me" profiles add media engines, not room).
    for (const p of MIG_GPUS[model]?.profiles ?? []) {
      if (p.name.includes('+') || p.memoryMiB < needMemory || !holds(model, p.computeSlices / 7)) continue;
      sameModel({ kind: 'mig', profile: p.name, models: [model] }, p.memoryMiB, 'mig', milliGpusUsed({ kind: 'mig', profile: p.name }));
    }
    // A time-sliced share of it (measured utilisation only: a share's time is all it gets).
    const deviceMemory = offers.get(model)?.memoryMiB ?? newest.use.deviceMemoryMiB;
    if (computeKnown) {
      const milli =
        Math.ceil(
          (1000 * Math.max(need.tflops / GPU_SPEED[model].tflops, need.bandwidthGBs / GPU_SPEED[model].bandwidthGBs)) / FRACTION_STEP_MILLI,
        ) * FRACTION_STEP_MILLI;
      const memoryMiB = Math.ceil(needMemory / FRACTION_MEMORY_STEP_MIB) * FRACTION_MEMORY_STEP_MIB;
      if (milli < 1000 && memoryMiB <= deviceMemory)
        sameModel(
          { kind: 'fraction', milliGpu: Math.max(FRACTION_STEP_MILLI, milli), memoryMiB, models: [model] },
          memoryMiB,
          'fraction',
          milli,
        );
    }
    // A whole GPU of a cheaper model that is at least as fast as the need on both measures.
    if (ranOffer)
      for (const [m, offer] of offers) {
        if (m === model || offer.memoryMiB < needMemory || !holds(m, 1) || COMPUTE_CAPABILITY[m] < COMPUTE_CAPABILITY[model]) continue;
        const ratio = offer.microUsdPerGpuHour / ((ranOffer.microUsdPerGpuHour * ranMilli) / 1000);
        candidates.push({ kind: 'model', gpu: { kind: 'whole', count: 1, models: [m] }, memoryMiB: offer.memoryMiB, costRatio: ratio });
      }
  }
  const cheaper = candidates
    .filter((c) => c.costRatio <= 1 - MIN_SAVING_PCT / 100 && !sameShape(c.gpu, from))
    .sort((a, b) => PREFERENCE[a.kind] - PREFERENCE[b.kind] || a.costRatio - b.costRatio);
  const to = cheaper[0];
  if (!to)
    return no(
      `no smaller shape holds it: peak ${gib(peak)} GiB of ${gib(newest.use.deviceMemoryMiB)} GiB` +
        (newest.use.p95SmPct !== undefined ? `, ${newest.use.p95SmPct}% utilisation (p95)` : ''),
    );
  // Each run's saving at the price it ran at: the shape's cost against the run's own shape.
  const cost = measured.reduce((a, r) => a + r.costMicroUsd, 0);
  const saving = measured.reduce((a, r) => a + Math.round(r.costMicroUsd * Math.max(0, 1 - ratioFor(to, r, offers, model))), 0);
  const headroom = Math.round((1000 * (to.memoryMiB - peak)) / to.memoryMiB) / 10;
  const { p95SmPct: p95, meanSmPct: mean } = all;
  const n = measured.length;
  const confidence: Recommendation['confidence'] =
    n >= 5 && headroom >= 15 && computeKnown && to.kind !== 'model' ? 'high' : n >= 2 && headroom >= 10 ? 'medium' : 'low';
  const why =
    `${n} run${n === 1 ? '' : 's'}: peak ${gib(peak)} GiB of ${gib(newest.use.deviceMemoryMiB)} GiB` +
    (p95 !== undefined ? `, ${p95}% utilisation at p95` : ', utilisation not reported') +
    (busy < held ? `, ${busy} of ${held} GPUs used` : '') +
    `; ${describeShape(to.gpu)} keeps ${gib(to.memoryMiB)} GiB (needs ${gib(needMemory)}) and costs ${Math.round(to.costRatio * 100)}% as much`;
  return {
    ok: true,
    recommendation: {
      family,
      from,
      to,
      candidates: cheaper,
      runs: n,
      jobIds: measured.map((r) => r.jobId),
      model,
      peakMemoryMiB: peak,
      needMemoryMiB: needMemory,
      ...(p95 !== undefined ? { p95SmPct: p95 } : {}),
      ...(mean !== undefined ? { meanSmPct: mean } : {}),
      costMicroUsd: cost,
      savingMicroUsd: saving,
      memoryHeadroomPct: headroom,
      confidence,
      why,
    },
  };
}

/** The candidate's cost ÷ what the run's own shape cost (same model: shares; another model: list prices per GPU). */
function ratioFor(c: ShapeCandidate, r: RightsizeRun, offers: GpuOffers, model: GpuModel): number {
  const runModel = r.use.model ?? model;
  const runMilli = milliGpusUsed(r.gpu);
  const newModel = c.kind === 'model' ? (c.gpu.models?.[0] as GpuModel) : model;
  const newMilli = milliGpusUsed(c.gpu);
  if (newModel === runModel) return newMilli / runMilli;
  const a = offers.get(newModel);
  const b = offers.get(runModel);
  if (!a || !b) return 1;
  return (a.microUsdPerGpuHour * newMilli) / (b.microUsdPerGpuHour * runMilli);
}

/** The share of its device a shape holds: a MIG slice its compute slices ÷ 7, a share its thousandths, a whole GPU all of it. */
function deviceShare(gpu: GpuRequest): number {
  if (gpu.kind === 'mig') return migComputeSlices(gpu.profile) / 7;
  return gpu.kind === 'whole' ? 1 : gpu.milliGpu / 1000;
}

function sameShape(a: GpuRequest, b: GpuRequest): boolean {
  if (a.kind !== b.kind) return false;
  if (a.kind === 'mig' && b.kind === 'mig') return a.profile === b.profile;
  if (a.kind === 'whole' && b.kind === 'whole')
    return a.count === b.count && (b.models ?? []).every((m) => (a.models ?? []).some((x) => gpuModelMatches(m, x as GpuModel)));
  return false;
}

/** "MIG 2g.20gb", "0.15 GPU with 11 GiB", "1 × L4", "2 × A100-80GB". */
export function describeShape(gpu: GpuRequest): string {
  switch (gpu.kind) {
    case 'mig':
      return `MIG ${gpu.profile}${gpu.models ? ` (${gpu.models.join('/')})` : ''}`;
    case 'fraction':
      return `${(gpu.milliGpu / 1000).toFixed(2)} GPU with ${gib(gpu.memoryMiB)} GiB${gpu.models ? ` (${gpu.models.join('/')})` : ''}`;
    case 'whole':
      return `${gpu.count} × ${gpu.models?.join('/') ?? 'any GPU'}`;
  }
}

function gib(mib: number): string {
  const g = mib / 1024;
  return g >= 10 ? g.toFixed(0) : g.toFixed(1);
}

/** A family's kept runs with `added` merged in: one per job id (the newer end wins), the newest FAMILY_RUNS_KEPT, oldest first. */
export function mergeFamilyRuns(kept: readonly RightsizeRun[], added: readonly RightsizeRun[]): RightsizeRun[] {
  const byJob = new Map<string, RightsizeRun>();
  for (const r of [...kept, ...added]) {
    const had = byJob.get(r.jobId);
    if (!had || r.endedAtMs > had.endedAtMs) byJob.set(r.jobId, r);
  }
  return [...byJob.values()].sort((a, b) => a.endedAtMs - b.endedAtMs || (a.jobId < b.jobId ? -1 : 1)).slice(-FAMILY_RUNS_KEPT);
}

// ---- auto -----------------------------------------------------------------------------------

/**
 * What a submission with `gpu.rightsize` gets: with `auto`, the family's recommended shape when the
 * family has run at least {@link AUTO_MIN_RUNS} times, its newest right-sized run did not fail, and
 * the fleet can run the shape (`runnable`); otherwise, or with `suggest`, its own shape, with the
 * recommendation noted. Undefined when the spec asks for neither.
 */
export function rightsizeAtIntake(
  team: string,
  spec: JobSpec,
  runs: readonly RightsizeRun[],
  offers: GpuOffers,
  nowMs: number,
  /** Whether some node group can run a shape; undefined when the groups are not known (then nothing changes). */
  runnable: ((gpu: GpuRequest) => boolean) | undefined,
): { spec: JobSpec; decision: RightsizeDecision } | undefined {
  const mode = spec.gpu.rightsize;
  if (!mode) return undefined;
  const family = rightsizeFamily(team, spec);
  const from = spec.gpu;
  const keep = (why: string, to?: GpuRequest) => ({
    spec,
    decision: { mode, applied: false, family, from, ...(to ? { to } : {}), atMs: nowMs, why },
  });
  const result = recommendShape(family, runs, offers, from);
  if (!result.ok) return keep(`kept ${describeShape(from)}: ${result.why}`);
  const rec = result.recommendation;
  if (mode === 'suggest') return keep(`suggested ${describeShape(rec.to.gpu)}: ${rec.why}`, rec.to.gpu);
  // A right-sized run that failed (out of memory, most likely) turns auto off until a run in the asked shape succeeds after it.
  const failed = runs.filter((r) => r.rightsizedFrom && r.state === 'failed').sort((a, b) => b.endedAtMs - a.endedAtMs)[0];
  if (failed && !runs.some((r) => !r.rightsizedFrom && r.state === 'succeeded' && r.endedAtMs > failed.endedAtMs))
    return keep(
      `kept ${describeShape(from)}: the family's right-sized run ${failed.jobId} failed in ${describeShape(failed.gpu)}, so auto is off for it until a run in its own shape succeeds`,
    );
  if (rec.runs < AUTO_MIN_RUNS)
    return keep(
      `kept ${describeShape(from)}: ${rec.runs} measured run of ${AUTO_MIN_RUNS} needed before auto changes it (${describeShape(rec.to.gpu)} would cost ${Math.round(rec.to.costRatio * 100)}%)`,
      rec.to.gpu,
    );
  if (from.kind === 'whole' && from.count > 1)
    return keep(`kept ${describeShape(from)}: the number of GPUs is the job's parallelism; ${rec.why}`, rec.to.gpu);
  if (!runnable)
    return keep(`kept ${describeShape(from)}: the node groups are not known here to check a new shape against; ${rec.why}`, rec.to.gpu);
  const chosen = rec.candidates.find((c) => c.kind !== 'fewer-gpus' && runnable(c.gpu));
  if (!chosen) return keep(`kept ${describeShape(from)}: no node group can run ${describeShape(rec.to.gpu)}; ${rec.why}`, rec.to.gpu);
  const gpu: GpuRequest = { ...chosen.gpu, rightsize: mode };
  return {
    spec: { ...spec, gpu: gpu as JobSpec['gpu'] },
    decision: {
      mode,
      applied: true,
      family,
      from,
      to: gpu,
      atMs: nowMs,
      why:
        `ran in ${describeShape(gpu)} instead of ${describeShape(from)} (${Math.round(chosen.costRatio * 100)}% of its cost)` +
        (chosen === rec.to ? `: ${rec.why}` : `; ${describeShape(rec.to.gpu)} comes first but no node group can run it; ${rec.why}`),
    },
  };
}
