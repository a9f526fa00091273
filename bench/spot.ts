// bench:spot — spot or on-demand for a job with a deadline, replayed on real spot availability
// traces under the protocol of "Can't Be Late" (Wu et al., NSDI'24), against Greedy, Uniform
// Progress and the omniscient optimum, all on the same random start times.
//
//   npm run bench:spot -- [--traces DIR] [--trace-hours H] [--k RATIO] [--runs N] [--seed S] [--json]
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { basename, join, relative, resolve } from 'node:path';
import { Command } from 'commander';
import { decimalNumber, wholeNumber } from '../cloud/flags.ts';
import type { SpotPolicyName } from '../core/spot-policy.ts';
import { SeededRandom } from '../cloud/sim/clock.ts';
import { omniscient } from './spot/omniscient.ts';
import { fitHazards, runSemiMarkov, SEMI_MARKOV_AGES, solveSemiMarkov } from './spot/semi-markov.ts';
import { runPolicy, type JobSetup, type RunResult } from './spot/sim.ts';
import { inWorkers } from '../cloud/sim/parallel.ts';
import { availableParallelism } from 'node:os';
import { isMainThread } from 'node:worker_threads';

const PAPER_TRACES = resolve(import.meta.dirname, '../../shared/data/spot/skypilot-spot-traces/availability/1-node/aws-10-26-2022');
const SHIPPED_TRACES = resolve(import.meta.dirname, '../data/spot/availability');
type PolicyName = SpotPolicyName | 'omniscient' | 'oracle-semi-markov';
const POLICIES: readonly PolicyName[] = ['greedy', 'uniform-progress', 'gpu-fleet', 'omniscient'];
/** Reference lines that know the future in some way, run only when asked for by name. */
const EXTRA_POLICIES: readonly PolicyName[] = ['oracle-semi-markov'];

interface Trace {
  readonly name: string;
  readonly gapSec: number;
  readonly values: readonly number[];
}

export interface Row {
  readonly trace: string;
  readonly policy: PolicyName;
  readonly runs: number;
  readonly onDemandHours: number;
  readonly spotHours: number;
  readonly costRatio: number;
  readonly deadlineMetPct: number;
}

function findTraces(dir: string): Trace[] {
  if (!existsSync(dir)) throw new Error(`no trace folder at ${dir}`);
  const out: Trace[] = [];
  const walk = (d: string) => {
    for (const f of readdirSync(d).sort()) {
      const p = join(d, f);
      if (statSync(p).isDirectory()) walk(p);
      else if (f.endsWith('.json')) {
        const j = JSON.parse(readFileSync(p, 'utf8')) as { metadata?: { gap_seconds?: number }; data?: unknown[] };
        if (typeof j.metadata?.gap_seconds !== 'number' || !Array.isArray(j.data))
          throw new Error(`${p}: not an availability trace ({"metadata": {"gap_seconds"}, "data": [...]})`);
        out.push({
          name: relative(dir, p).replace(/\.json$/, '') || basename(p, '.json'),
          gapSec: j.metadata.gap_seconds,
          values: j.data.map(Number),
        });
      }
    }
  };
  walk(dir);
  if (out.length === 0) throw new Error(`no *.json traces under ${dir}`);
  return out;
}

/** Coarsens a trace to ticks of `sec`: a coarse tick has spot only if all its fine ticks had. */
export function resample(trace: Trace, sec: number): Trace {
  if (sec <= trace.gapSec) return trace;
  const per = Math.round(sec / trace.gapSec);
  const values: number[] = [];
  for (let i = 0; i + per <= trace.values.length; i += per) values.push(Math.min(...trace.values.slice(i, i + per)));
  return { name: trace.name, gapSec: trace.gapSec * per, values };
}

export interface BenchSpotOptions {
  traces: Trace[];
  traceHours?: number;
  k: number;
  runs: number;
  seed: number;
  nodes: number;
  job: Omit<JobSetup, 'priceRatio'>;
  policies?: readonly PolicyName[];
}

/** One trace's rows, a row per policy: every policy on the same seeded start times. */
export function traceRows(trace: Trace, options: Omit<BenchSpotOptions, 'traces'>): Row[] {
  const job: JobSetup = { ...options.job, priceRatio: options.k };
  const policies = options.policies ?? POLICIES;
  const rows: Row[] = [];
  const ticks = options.traceHours
    ? Math.min(trace.values.length, Math.floor((options.traceHours * 3600) / trace.gapSec))
    : trace.values.length;
  const avail = trace.values.slice(0, ticks).map((v) => v >= options.nodes);
  const deadlineTicks = Math.ceil(job.deadlineSec / trace.gapSec);
  const span = ticks - deadlineTicks;
  if (span <= 0) throw new Error(`${trace.name}: ${((ticks * trace.gapSec) / 3600).toFixed(1)} h of trace is shorter than the deadline`);
  // The same seeded start times for every policy.
  const random = new SeededRandom(options.seed);
  const starts = Array.from({ length: options.runs }, () => Math.floor(random.next() * (span + 1)));
  let oracle: ReturnType<typeof solveSemiMarkov> | undefined;
  for (const policy of policies) {
    let od = 0;
    let spot = 0;
    let cost = 0;
    let met = 0;
    for (const start of starts) {
      let r: RunResult;
      if (policy === 'omniscient') r = omniscient(avail, start, trace.gapSec, job);
      else if (policy === 'oracle-semi-markov')
        r = runSemiMarkov(
          (oracle ??= solveSemiMarkov(job, trace.gapSec, fitHazards(avail))),
          SEMI_MARKOV_AGES,
          avail,
          start,
          trace.gapSec,
          job,
        );
      else r = runPolicy(policy, avail, start, trace.gapSec, job);
      od += r.onDemandWorkSec;
      spot += r.spotWorkSec;
      cost += r.cost;
      if (r.met) met++;
    }
    const n = starts.length;
    rows.push({
      trace: trace.name,
      policy,
      runs: n,
      onDemandHours: od / n / 3600,
      spotHours: spot / n / 3600,
      costRatio: cost / n / (job.workSec * job.priceRatio),
      deadlineMetPct: (100 * met) / n,
    });
  }
  return rows;
}

/** The ALL rows: each policy over every trace's runs. */
export function totalRows(rows: readonly Row[], policies: readonly PolicyName[] = POLICIES): Row[] {
  return policies.map((policy) => {
    const mine = rows.filter((r) => r.policy === policy && r.trace !== 'ALL');
    const runs = mine.reduce((n, r) => n + r.runs, 0);
    const mean = (f: (r: Row) => number) => mine.reduce((n, r) => n + f(r) * r.runs, 0) / runs;
    return {
      trace: 'ALL',
      policy,
      runs,
      onDemandHours: mean((r) => r.onDemandHours),
      spotHours: mean((r) => r.spotHours),
      costRatio: mean((r) => r.costRatio),
      deadlineMetPct: mean((r) => r.deadlineMetPct),
    };
  });
}

/** Every trace's rows, then the totals; with `threads` above 1, the traces run on worker threads. */
export async function benchSpot(options: BenchSpotOptions, threads = 1): Promise<Row[]> {
  const { traces, ...rest } = options;
  const perTrace =
    threads > 1
      ? await inWorkers<{ trace: Trace; options: typeof rest }, Row[]>(
          new URL('./spot/worker.ts', import.meta.url),
          traces.map((trace) => ({ trace, options: rest })),
          threads,
        )
      : traces.map((trace) => traceRows(trace, rest));
  const rows = perTrace.flat();
  return [...rows, ...totalRows(rows, options.policies ?? POLICIES)];
}

/** Table 3 of the paper: the eight two-week traces, mean on-demand / spot hours per 48 h job. */
const PAPER_TABLE3: Partial<Record<PolicyName, { od: number; spot: number }>> = {
  greedy: { od: 30.8, spot: 17.2 },
  'uniform-progress': { od: 25.1, spot: 22.9 },
  omniscient: { od: 20.7, spot: 27.4 },
};

function print(rows: Row[], compareToPaper: boolean): void {
  const out: string[] = [];
  out.push(
    `${'trace'.padEnd(28)} ${'policy'.padEnd(17)} ${'runs'.padStart(5)} ${'on-demand h'.padStart(12)} ${'spot h'.padStart(8)} ${'cost ratio'.padStart(11)} ${'deadlines met'.padStart(14)}`,
  );
  let last = '';
  for (const r of rows) {
    if (r.trace !== last && last !== '') out.push('');
    last = r.trace;
    out.push(
      `${r.trace.padEnd(28)} ${r.policy.padEnd(17)} ${String(r.runs).padStart(5)} ${r.onDemandHours.toFixed(1).padStart(12)} ${r.spotHours.toFixed(1).padStart(8)} ${r.costRatio.toFixed(4).padStart(11)} ${`${r.deadlineMetPct.toFixed(1)}%`.padStart(14)}`,
    );
  }
  const all = (p: PolicyName) => rows.find((r) => r.trace === 'ALL' && r.policy === p);
  const up = all('uniform-progress');
  const ours = all('gpu-fleet');
  const best = all('omniscient');
  if (up && ours && best) {
    const closed = (up.costRatio - ours.costRatio) / (up.costRatio - best.costRatio);
    out.push(
      '',
      `gpu-fleet closes ${(100 * closed).toFixed(0)}% of Uniform Progress's cost gap to the omniscient optimum overall (target ≥ 50%).`,
    );
    const traces = [...new Set(rows.map((r) => r.trace))].filter((t) => t !== 'ALL');
    const perTrace = traces.map((t) => {
      const g = (p: PolicyName) => rows.find((r) => r.trace === t && r.policy === p)!;
      const gap = g('uniform-progress').costRatio - g('omniscient').costRatio;
      return gap <= 1e-9 ? 1 : (g('uniform-progress').costRatio - g('gpu-fleet').costRatio) / gap;
    });
    out.push(
      `Per trace: ${perTrace.filter((c) => c >= 0.5).length} of ${traces.length} traces at or above half (${perTrace.map((c) => `${(100 * c).toFixed(0)}%`).join(', ')}).`,
    );
  }
  if (compareToPaper) {
    out.push('', 'Against the paper (Table 3, mean on-demand / spot hours per 48 h job):');
    for (const [p, ref] of Object.entries(PAPER_TABLE3) as [PolicyName, { od: number; spot: number }][]) {
      const r = all(p);
      if (!r) continue;
      out.push(
        `  ${p.padEnd(17)} paper ${ref.od.toFixed(1)} / ${ref.spot.toFixed(1)}   here ${r.onDemandHours.toFixed(1)} / ${r.spotHours.toFixed(1)}   differences ${(r.onDemandHours - ref.od).toFixed(1)} / ${(r.spotHours - ref.spot).toFixed(1)} h`,
      );
    }
  }
  process.stdout.write(`${out.join('\n')}\n`);
}

const invokedDirectly = isMainThread && process.argv[1] !== undefined && resolve(process.argv[1]) === import.meta.filename;
if (invokedDirectly) {
  const program = new Command('bench:spot')
    .option(
      '--traces <dir>',
      'folder of availability traces (searched recursively)',
      existsSync(PAPER_TRACES) ? PAPER_TRACES : SHIPPED_TRACES,
    )
    .option('--trace-hours <h>', 'use only the first H hours of each trace', decimalNumber('--trace-hours', 1, 1e6))
    .option('--k <ratio>', 'on-demand / spot price ratio', decimalNumber('--k', 1, 100), 3)
    .option('--runs <n>', 'random start times per trace', wholeNumber('--runs', 1, 100_000), 300)
    .option('--seed <s>', 'seed of the start times', wholeNumber('--seed', 0, 2 ** 31), 1)
    .option('--nodes <n>', 'nodes the job needs at once (a gang: all or none)', wholeNumber('--nodes', 1, 64), 1)
    .option('--work-hours <h>', 'job compute C0', decimalNumber('--work-hours', 0.1, 10_000), 48)
    .option('--deadline-hours <h>', 'deadline D', decimalNumber('--deadline-hours', 0.1, 10_000), 60)
    .option('--changeover-hours <h>', 'changeover delay d', decimalNumber('--changeover-hours', 0, 100), 0.2)
    .option(
      '--policies <list>',
      'comma-separated subset of greedy,uniform-progress,gpu-fleet,omniscient; also oracle-semi-markov (a reference that fits its model on the future)',
    )
    .option(
      '--resample-sec <s>',
      'coarsen traces to ticks of this many seconds (spot in a coarse tick only if in all of its fine ticks)',
      wholeNumber('--resample-sec', 1, 86_400),
    )
    .option(
      '--threads <n>',
      'worker threads, one trace each at a time (default: every core)',
      wholeNumber('--threads', 1, 256),
      availableParallelism(),
    )
    .option('--json', 'print the rows as JSON')
    .parse();
  const o = program.opts<{
    traces: string;
    traceHours?: number;
    k: number;
    runs: number;
    seed: number;
    nodes: number;
    workHours: number;
    deadlineHours: number;
    changeoverHours: number;
    policies?: string;
    resampleSec?: number;
    threads: number;
    json?: boolean;
  }>();
  const policies = o.policies ? (o.policies.split(',').map((p) => p.trim()) as PolicyName[]) : POLICIES;
  for (const p of policies)
    if (!POLICIES.includes(p) && !EXTRA_POLICIES.includes(p))
      program.error(`--policies: unknown policy "${p}"; allowed: ${[...POLICIES, ...EXTRA_POLICIES].join(', ')}`);
  if (o.deadlineHours < o.workHours) program.error('--deadline-hours must be at least --work-hours');
  const started = performance.now();
  const rows = await benchSpot(
    {
      traces: findTraces(resolve(o.traces)).map((t) => (o.resampleSec ? resample(t, o.resampleSec) : t)),
      ...(o.traceHours ? { traceHours: o.traceHours } : {}),
      k: o.k,
      runs: o.runs,
      seed: o.seed,
      nodes: o.nodes,
      job: { workSec: o.workHours * 3600, deadlineSec: o.deadlineHours * 3600, changeoverSec: Math.round(o.changeoverHours * 3600) },
      policies,
    },
    o.threads,
  );
  if (o.json) process.stdout.write(`${JSON.stringify(rows, null, 2)}\n`);
  else {
    print(rows, resolve(o.traces) === PAPER_TRACES && o.traceHours === 312 && o.workHours === 48 && o.deadlineHours === 60);
    process.stdout.write(
      `\n(${((performance.now() - started) / 1000).toFixed(1)} s on ${Math.min(o.threads, 99)} thread${o.threads === 1 ? '' : 's'})\n`,
    );
  }
}
