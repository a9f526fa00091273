import { readFileSync } from 'node:fs';
import type { JobSpecInput } from '../../core/job-spec.ts';
import { parseCsvTable } from '../csv.ts';
import { GpuFleetError } from '../../core/errors.ts';
import type { ScriptedGpuUse } from './sim-agent.ts';

/** One job of a replayed trace: when it arrives, how long it really runs, and the spec submitted for it. */
export interface WorkloadJob {
  readonly id: string;
  /** Seconds after the start of the replay. */
  readonly submitSec: number;
  /** Seconds of work the job needs on its GPUs. */
  readonly workSec: number;
  readonly team: string;
  /** Exit code the job ends with (0 unless the trace says it failed). */
  readonly exitCode: number;
  /** Deadline, seconds after the start of the replay (from a `deadline_s` column in trace time). */
  readonly deadlineSec?: number;
  readonly spec: JobSpecInput;
  /** What its process really uses of each GPU device (scripted; without it, it reports none). */
  readonly gpuUse?: ScriptedGpuUse;
}

export interface Workload {
  readonly name: string;
  readonly jobs: readonly WorkloadJob[];
  /** Rows left out, with why (no duration, no GPU, unreadable). */
  readonly skipped: readonly { readonly row: number; readonly why: string }[];
  readonly teams: readonly string[];
}

export interface WorkloadOptions {
  /** GPU model for rows without one (default "V100"). */
  readonly defaultGpuModel?: string;
  /** Teams for rows without one, chosen by a hash of the job id (default nlp, vision, speech, recsys). */
  readonly defaultTeams?: readonly string[];
  /** Use only jobs submitted within N hours (after rebasing): the first N hours, or the busiest N with `busiest`. */
  readonly hours?: number;
  /** Take the N-hour window with the most submissions instead of the first one. */
  readonly busiest?: boolean;
  /** Use at most N jobs (the earliest). */
  readonly maxJobs?: number;
  /** GPU memory assumed for a whole GPU when a trace gives fractions without memory (default 16384 MiB). */
  readonly fractionMemoryBaseMiB?: number;
  /** Checkpoint interval for jobs of at least twice its length when the trace does not say (default 600 s; 0 for none). */
  readonly defaultCheckpointSec?: number;
  /**
   * Replay fractional-GPU rows as MIG requests on an A100 40GB: the smallest GPU-instance profile
   * with at least the row's share of the GPU's seven compute slices (1g.5gb, 2g.10gb, 3g.20gb, 4g.20gb, 7g.40gb).
   */
  readonly fractionsAsMig?: boolean;
}

/** The A100 40GB MIG profile a share of a GPU (0–1] needs: the smallest with at least that many of its 7 compute slices. */
export function migProfileForShare(share: number): string {
  const slices = Math.ceil(Math.min(1, Math.max(0, share)) * 7 - 1e-9);
  if (slices <= 1) return '1g.5gb';
  if (slices === 2) return '2g.10gb';
  if (slices === 3) return '3g.20gb';
  if (slices === 4) return '4g.20gb';
  return '7g.40gb';
}

const DEFAULT_TEAMS = ['nlp', 'vision', 'speech', 'recsys'];
/** A trace's GPU type as the models a spec names ("a100", which a trace does not say 40 or 80 GB of, accepts both). */
const GPU_TYPE_NAMES: Record<string, string | readonly string[]> = {
  v100: 'V100',
  'v100-32gb': 'V100-32GB',
  t4: 'T4',
  a10: 'A10G',
  a10g: 'A10G',
  l4: 'L4',
  l40s: 'L40S',
  a100: ['A100-40GB', 'A100-80GB'],
  'a100-40gb': 'A100-40GB',
  'a100-80gb': 'A100-80GB',
  'a100-sxm4-80gb': 'A100-80GB',
  h100: 'H100',
  h200: 'H200',
  b200: 'B200',
  k80: 'K80',
};

/**
 * Reads a GPU job trace in the shared cleaned format (columns job_id, submit_s, duration_s, gpus,
 * gpu_type, team, status; extra columns ignored except interruptible, checkpoint_interval_s,
 * priority and deadline_s, a deadline in the trace's own time). Submit times are rebased so the first job arrives at 0. Empty team or GPU type are
 * filled deterministically. Multi-node jobs (more than 8 GPUs) become gangs of 8-GPU nodes.
 */
export function loadWorkload(file: string | URL, options: WorkloadOptions = {}): Workload {
  const text = readFileSync(file, 'utf8');
  const name = String(file)
    .split('/')
    .pop()!
    .replace(/\.csv$/, '');
  return parseWorkload(name, text, options);
}

export function parseWorkload(name: string, csvText: string, options: WorkloadOptions = {}): Workload {
  const { columns, rows } = parseCsvTable(csvText);
  for (const col of ['job_id', 'submit_s', 'duration_s', 'gpus']) {
    if (!columns.includes(col))
      throw new GpuFleetError(
        `trace ${name}: missing column "${col}"; a trace needs job_id, submit_s, duration_s, gpus (gpu_type, team, status optional)`,
      );
  }
  const teamsPool = options.defaultTeams ?? DEFAULT_TEAMS;
  const skipped: { row: number; why: string }[] = [];
  const raw: { job: Omit<WorkloadJob, 'submitSec'>; submitAbs: number; deadlineAbs?: number }[] = [];
  rows.forEach((r, i) => {
    const row = i + 2;
    const id = (r.job_id ?? '').trim();
    const submit = Number(r.submit_s);
    const duration = Number(r.duration_s);
    const gpus = Number(r.gpus);
    if (!id) return skipped.push({ row, why: 'no job_id' });
    if (r.duration_s === '' || !Number.isFinite(duration) || duration <= 0) return skipped.push({ row, why: 'no duration (never ran)' });
    if (!Number.isFinite(submit)) return skipped.push({ row, why: 'submit_s is not a number' });
    if (!Number.isFinite(gpus) || gpus <= 0) return skipped.push({ row, why: 'no GPUs' });
    const team = sanitizeTeam(r.team) ?? teamsPool[fnv1a(id) % teamsPool.length]!;
    const model = r.gpu_type ? GPU_TYPE_NAMES[r.gpu_type.toLowerCase()] : (options.defaultGpuModel ?? 'V100');
    const models = model === undefined ? undefined : typeof model === 'string' ? [model] : [...model];
    const workSec = Math.max(1, Math.round(duration));
    let gpu: JobSpecInput['gpu'];
    let nodes = 1;
    if (gpus < 1 && options.fractionsAsMig) {
      gpu = { kind: 'mig', profile: migProfileForShare(gpus) };
    } else if (gpus < 1) {
      const milli = Math.max(1, Math.min(999, Math.round(gpus * 1000)));
      gpu = {
        kind: 'fraction',
        milliGpu: milli,
        memoryMiB: Math.max(256, Math.round((milli / 1000) * (options.fractionMemoryBaseMiB ?? 16_384))),
        ...(models ? { models } : {}),
      };
    } else if (gpus > 8) {
      nodes = Math.ceil(gpus / 8);
      gpu = { kind: 'whole', count: 8, ...(models ? { models } : {}) };
    } else {
      gpu = { kind: 'whole', count: Math.round(gpus), ...(models ? { models } : {}) };
    }
    const interruptible =
      r.interruptible === undefined || r.interruptible === '' ? true : r.interruptible === '1' || r.interruptible.toLowerCase() === 'true';
    const defaultCp = options.defaultCheckpointSec ?? 600;
    const cpCol = r.checkpoint_interval_s;
    const cpSec =
      cpCol !== undefined && cpCol !== '' ? Number(cpCol) : cpCol === '' ? 0 : defaultCp > 0 && workSec >= 2 * defaultCp ? defaultCp : 0;
    const priority = r.priority !== undefined && r.priority !== '' ? Number(r.priority) : 100;
    const spec: JobSpecInput = {
      name: id
        .replace(/[^A-Za-z0-9._-]/g, '-')
        .slice(0, 128)
        .replace(/^[^A-Za-z0-9]/, 'j'),
      image: 'gpu-fleet/trace-replay:1',
      command: ['replay', '--seconds', String(workSec)],
      gpu,
      nodes,
      priority,
      interruptible,
      expectedRuntimeSec: Math.min(workSec, 90 * 86_400),
      labels: {
        project: `${team}-${['a', 'b', 'c'][fnv1a(`${id}/p`) % 3]}`,
        trace: name
          .toLowerCase()
          .replace(/[^a-z0-9._-]/g, '-')
          .slice(0, 60),
      },
      ...(cpSec >= 60 ? { checkpoint: { intervalSec: Math.min(86_400, Math.round(cpSec)) } } : {}),
    };
    const failed = /^failed$/i.test(r.status ?? '');
    const deadline = r.deadline_s !== undefined && r.deadline_s !== '' ? Number(r.deadline_s) : undefined;
    raw.push({
      job: { id, workSec, team, exitCode: failed ? 1 : 0, spec },
      submitAbs: submit,
      ...(deadline !== undefined && Number.isFinite(deadline) ? { deadlineAbs: deadline } : {}),
    });
  });
  raw.sort((a, b) => a.submitAbs - b.submitAbs || (a.job.id < b.job.id ? -1 : 1));
  let t0 = raw[0]?.submitAbs ?? 0;
  if (options.busiest && options.hours !== undefined && raw.length > 0) {
    // Two pointers over submit times: the window [t, t + hours) holding the most jobs.
    const span = options.hours * 3600;
    let best = 0;
    for (let i = 0, j = 0; i < raw.length; i++) {
      while (raw[i]!.submitAbs - raw[j]!.submitAbs >= span) j++;
      if (i - j + 1 > best) {
        best = i - j + 1;
        t0 = raw[j]!.submitAbs;
      }
    }
  }
  let jobs: WorkloadJob[] = raw.map(({ job, submitAbs, deadlineAbs }) => ({
    ...job,
    submitSec: Math.round(submitAbs - t0),
    ...(deadlineAbs !== undefined ? { deadlineSec: Math.round(deadlineAbs - t0) } : {}),
  }));
  if (options.hours !== undefined) jobs = jobs.filter((j) => j.submitSec >= 0 && j.submitSec < options.hours! * 3600);
  if (options.maxJobs !== undefined) jobs = jobs.slice(0, options.maxJobs);
  const teams = [...new Set(jobs.map((j) => j.team))].sort();
  return { name, jobs, skipped, teams };
}

function sanitizeTeam(team: string | undefined): string | undefined {
  if (!team) return undefined;
  const t = team
    .toLowerCase()
    .replace(/[^a-z0-9-]/g, '-')
    .replace(/^-+/, '')
    .slice(0, 32);
  return t.length > 0 ? t : undefined;
}

/** FNV-1a (32-bit) of a string: the deterministic fill for missing columns. */
export function fnv1a(text: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h >>> 0;
}
