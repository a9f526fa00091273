import { existsSync } from 'node:fs';
import { resolve } from 'node:path';
import cliProgress from 'cli-progress';
import { plan } from '../core/planner/planner.ts';
import { BUILT_IN_TRACE, DEFAULT_SIM_GROUPS, defaultTeamTags } from '../cloud/sim/defaults.ts';
import { runSimulation, type SimulationSummary } from '../cloud/sim/simulation.ts';
import { loadWorkload } from '../cloud/sim/workload.ts';
import { duration, keyValues, money, pct, table } from './format.ts';
import { UsageError } from './errors.ts';

export interface SimulateFlags {
  readonly trace?: string;
  readonly hours?: string;
  readonly seed?: string;
  readonly maxJobs?: string;
  readonly json?: boolean;
  readonly progress?: boolean;
}

export async function simulateCommand(flags: SimulateFlags, io: { stdout: NodeJS.WriteStream; stderr: NodeJS.WriteStream }): Promise<SimulationSummary> {
  const seed = intFlag('--seed', flags.seed ?? '1', 0, 2 ** 31 - 1);
  const hours = numberFlag('--hours', flags.hours ?? '72', 0.1, 24 * 30);
  const maxJobs = flags.maxJobs === undefined ? undefined : intFlag('--max-jobs', flags.maxJobs, 1, 1_000_000);
  const file = flags.trace ? resolve(flags.trace) : BUILT_IN_TRACE;
  if (typeof file === 'string' && !existsSync(file)) throw new UsageError(`--trace: no such file ${file}; give a CSV with columns job_id, submit_s, duration_s, gpus (gpu_type, team, status optional)`);
  const workload = loadWorkload(file, { hours, ...(maxJobs !== undefined ? { maxJobs } : {}) });
  if (workload.jobs.length === 0) throw new UsageError(`--trace: ${String(file)} has no usable jobs (${workload.skipped.length} rows skipped)`);

  const showBar = flags.progress !== false && !flags.json && io.stderr.isTTY === true;
  const bar = showBar ? new cliProgress.SingleBar({ format: 'simulating {bar} {percentage}% | {value}/{total} virtual h', stream: io.stderr, hideCursor: true }, cliProgress.Presets.shades_classic) : undefined;
  bar?.start(Math.ceil(hours), 0);
  let shownHour = -1;
  const { summary } = await runSimulation({
    workload,
    groups: DEFAULT_SIM_GROUPS,
    teamTags: defaultTeamTags(workload.teams),
    planner: plan,
    policyName: 'gpu-fleet',
    seed,
    hours,
    onProgress: (sec) => {
      const h = Math.floor(sec / 3600);
      if (h !== shownHour) {
        shownHour = h;
        bar?.update(h);
      }
    },
  });
  bar?.update(Math.ceil(hours));
  bar?.stop();
  io.stdout.write(flags.json ? `${JSON.stringify(summary, null, 2)}\n` : `${renderSummary(summary)}\n`);
  return summary;
}

export function renderSummary(s: SimulationSummary): string {
  const saved = s.onDemandCostMicroUsd > 0 ? 100 * (1 - s.costMicroUsd / s.onDemandCostMicroUsd) : 0;
  const head = keyValues([
    ['trace', `${s.trace} (${s.jobs.toLocaleString('en-US')} jobs)`],
    ['policy', s.policy],
    ['seed', String(s.seed)],
    ['virtual time', `${s.virtualHours} h (wall ${(s.wallMs / 1000).toFixed(1)} s)`],
  ]);
  const jobs = table(
    ['jobs', 'count'],
    [
      ['accepted', s.accepted],
      ['completed', s.completed],
      ['failed', s.failed],
      ['still running at end', s.runningAtEnd],
      ['still pending at end', s.pendingAtEnd],
      ['rejected', s.rejected],
      ['lost', s.lost],
    ],
  );
  const resources = table(
    ['capacity', 'value'],
    [
      ['GPU-hours used', `${s.gpuHoursUsed.toFixed(1)} GPU-h`],
      ['GPU-hours paid', `${s.gpuHoursPaid.toFixed(1)} GPU-h`],
      ['utilisation', pct(s.utilizationPct)],
      ['peak fleet', `${s.peakGpus} GPUs`],
      ['machines launched', String(s.machinesLaunched)],
      ['queue wait p50', duration(s.p50WaitSec)],
      ['queue wait p95', duration(s.p95WaitSec)],
      ['interruptions', String(s.interruptions)],
      ['checkpoints', String(s.checkpoints)],
    ],
  );
  const cost = table(
    ['cost', 'USD'],
    [
      ['total', money(s.costMicroUsd)],
      ['had everything run on-demand', money(s.onDemandCostMicroUsd)],
      ['saved against on-demand', pct(saved)],
      ...Object.entries(s.costByTeamMicroUsd)
        .sort(([a], [b]) => a.localeCompare(b))
        .map(([team, amount]) => [`team ${team}`, money(amount)] as [string, string]),
    ],
  );
  return [head, '', jobs, '', resources, '', cost].join('\n');
}

function intFlag(name: string, value: string, min: number, max: number): number {
  const n = Number(value);
  if (!/^-?\d+$/.test(value.trim()) || n < min || n > max) throw new UsageError(`${name} must be a whole number from ${min} to ${max}, got "${value}"`);
  return n;
}

function numberFlag(name: string, value: string, min: number, max: number): number {
  const n = Number(value);
  if (!Number.isFinite(n) || n < min || n > max) throw new UsageError(`${name} must be a number from ${min} to ${max}, got "${value}"`);
  return n;
}
