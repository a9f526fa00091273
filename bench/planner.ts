/**
 * npm run bench:planner [-- --json] [--scenario NAME] [--runs N] [--quick | --sweep] [--help]
 *
 * For each scenario (1k/10k/50k pending jobs × 50/200/500 offerings × 0/1,000 live nodes, built
 * from the real traces and catalogues), in a fresh child process so its heap is its own:
 *   - gpu-fleet's planner: median plan time over N runs, jobs per second, peak heap;
 *   - the baseline (Karpenter-like: largest first, first fit, cheapest type that fits), same snapshot;
 *   - a lower bound on cost from the LP relaxation of the new-capacity problem (HiGHS), and on
 *     the 1k-job scenarios the exact bound: integer jobs and machines, live room machine by machine.
 * Costs are one measure: the expected hourly cost of the capacity each plan adds.
 *
 * --sweep: the scale sweep instead (scenarios.ts, SWEEP): one axis at a time around 10k jobs ×
 * 200 offerings × 1,000 live nodes, and the corner 100k × 500 × 10,000; with the growth exponent
 * of plan time along each axis (the least-squares slope of log time against log size).
 */
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { Command, Option } from 'commander';
import { wholeNumber } from '../cloud/flags.ts';
import { messageOf } from '../core/errors.ts';
import { plan } from '../core/planner/planner.ts';
import { capacityProblem } from './planner/capacity-problem.ts';
import { planBaseline } from '../core/planner/baseline.ts';
import { growthExponent } from './planner/growth.ts';
import { lowerBound } from './planner/lower-bound.ts';
import { buildScenario, scenarioNamed, SCENARIOS, SWEEP, type ScenarioSpec, type SweepAxis } from './planner/scenarios.ts';

export interface PlannerBenchRow {
  scenario: string;
  jobs: number;
  offerings: number;
  liveNodes: number;
  medianMs: number;
  jobsPerSec: number;
  peakHeapMiB: number;
  costMicroUsd: number;
  baselineCostMicroUsd: number;
  lowerBoundMicroUsd: number;
  lowerBoundKind: 'lp' | 'mip' | 'exact' | 'none';
  baselineMs: number;
  /** Why there is no bound (lowerBoundMicroUsd 0), when there is none. */
  boundNote?: string;
  /** Sweep rows: the axes the scenario lies on. */
  axes?: readonly SweepAxis[];
}

/** How long HiGHS may take on one scenario's bound before the row is reported without one. */
const BOUND_SECONDS = 180;

async function runOne(spec: ScenarioSpec, runs: number): Promise<PlannerBenchRow> {
  const snapshot = buildScenario(spec);
  globalThis.gc?.();
  const heapBefore = process.memoryUsage().heapUsed;
  let peak = heapBefore;
  const times: number[] = [];
  let result = plan(snapshot);
  for (let i = 0; i < runs; i++) {
    globalThis.gc?.();
    const t0 = performance.now();
    result = plan(snapshot);
    times.push(performance.now() - t0);
    peak = Math.max(peak, process.memoryUsage().heapUsed);
  }
  times.sort((a, b) => a - b);
  const medianMs = times[Math.floor(times.length / 2)]!;
  const tb = performance.now();
  const baseline = planBaseline(snapshot);
  const baselineMs = performance.now() - tb;
  const problem = capacityProblem(snapshot);
  const tBound = performance.now();
  const small = spec.jobs <= 1000;
  // Small scenarios get the exact bound (integer jobs and machines, live room machine by machine),
  // or the MIP with pooled live room where HiGHS does not prove it in time.
  const exact = small
    ? await lowerBound(problem, { integerMachines: true, exactLive: true, timeLimitSec: BOUND_SECONDS }).catch((error: unknown) =>
        messageOf(error),
      )
    : undefined;
  const bound = await (
    exact && typeof exact !== 'string'
      ? Promise.resolve(exact)
      : lowerBound(problem, { integerMachines: small, timeLimitSec: small ? 60 : BOUND_SECONDS }).then((b) =>
          exact ? { ...b, note: `the exact bound failed (${exact}): MIP with pooled live room` } : b,
        )
  ).catch((error: unknown) => ({
    microUsdPerHour: 0,
    kind: 'none' as const,
    note: `HiGHS gave no bound in ${Math.round((performance.now() - tBound) / 1000)} s (${messageOf(error)})`,
  }));
  return {
    scenario: spec.name,
    jobs: spec.jobs,
    offerings: spec.offerings,
    liveNodes: spec.liveNodes,
    medianMs: round1(medianMs),
    jobsPerSec: Math.round((spec.jobs / medianMs) * 1000),
    peakHeapMiB: round1(peak / 1_048_576),
    costMicroUsd: result.addedExpectedCostMicroUsdPerHour,
    baselineCostMicroUsd: baseline.addedExpectedCostMicroUsdPerHour,
    lowerBoundMicroUsd: Math.round(bound.microUsdPerHour),
    lowerBoundKind: bound.kind,
    baselineMs: round1(baselineMs),
    ...('note' in bound ? { boundNote: bound.note } : {}),
  };
}

function round1(x: number): number {
  return Math.round(x * 10) / 10;
}

interface PlannerBenchOptions {
  readonly json?: boolean;
  readonly child?: string;
  readonly scenario?: string;
  readonly runs: number;
  readonly quick?: boolean;
  readonly sweep?: boolean;
}

function options(): PlannerBenchOptions {
  return new Command('bench:planner')
    .description(
      "Planner speed and cost on scenarios from the real traces and catalogues, against a Karpenter-like baseline and HiGHS's lower bound",
    )
    .option('--scenario <name>', 'only scenarios whose name contains this')
    .option('--runs <n>', 'plans per scenario (the median is reported)', wholeNumber('--runs', 1, 1000), 5)
    .option('--quick', 'only the 1k and 10k job scenarios with up to 200 offerings')
    .option('--sweep', 'the scale sweep: jobs 1k-100k, live nodes 100-10,000, offerings 50-500 around 10k × 200 × 1,000, and the corner')
    .option('--json', 'print the rows as JSON')
    .addOption(new Option('--child <name>', 'run one scenario in this process (used by the bench itself)').hideHelp())
    .parse()
    .opts<PlannerBenchOptions>();
}

async function main(): Promise<void> {
  const args = options();
  if (args.child) {
    const spec = scenarioNamed(args.child);
    if (!spec) throw new Error(`no scenario is named ${args.child}`);
    const row = await runOne(spec, args.runs);
    process.stdout.write(`RESULT ${JSON.stringify(row)}\n`);
    return;
  }
  let scenarios: readonly (ScenarioSpec & { axes?: readonly SweepAxis[] })[] = args.sweep ? SWEEP : SCENARIOS;
  if (args.scenario) scenarios = scenarios.filter((s) => s.name.includes(args.scenario!));
  if (args.quick) scenarios = scenarios.filter((s) => s.jobs <= 10_000 && s.offerings <= 200);
  const rows: PlannerBenchRow[] = [];
  const self = fileURLToPath(import.meta.url);
  for (const spec of scenarios) {
    // A fresh process per scenario: --trace-gc prints the heap size before each collection.
    const out = execFileSync(
      process.execPath,
      [
        '--import',
        'tsx',
        '--expose-gc',
        '--trace-gc',
        '--max-old-space-size=4096',
        self,
        '--child',
        spec.name,
        '--runs',
        String(args.runs),
      ],
      {
        encoding: 'utf8',
        maxBuffer: 256 * 1024 * 1024,
        stdio: ['ignore', 'pipe', 'inherit'],
      },
    );
    const line = out.split('\n').find((l) => l.startsWith('RESULT '));
    if (!line) throw new Error(`scenario ${spec.name} printed no result`);
    const row = JSON.parse(line.slice(7)) as PlannerBenchRow;
    // Peak heap: the most V8 held before any collection while planning (the trace covers the
    // whole child; scenario building happens before planning and is smaller than it).
    let peak = 0;
    for (const l of out.split('\n')) {
      const m = /: (?:Scavenge|Mark-Compact|Mark-sweep|Minor Mark-Sweep)[^\d]*([\d.]+) \(([\d.]+)\) ->/.exec(l);
      if (m) peak = Math.max(peak, Number(m[1]));
    }
    if (peak > 0) row.peakHeapMiB = Math.max(row.peakHeapMiB, round1(peak));
    if (spec.axes) row.axes = spec.axes;
    rows.push(row);
    if (!args.json) printRow(row, rows.length === 1);
  }
  if (args.json) {
    process.stdout.write(
      `${JSON.stringify(
        rows.map(({ lowerBoundKind: _k, baselineMs: _b, ...r }) => r),
        null,
        2,
      )}\n`,
    );
    return;
  }
  if (args.sweep) printGrowth(rows);
  else printSummary(rows);
}

function printGrowth(rows: PlannerBenchRow[]): void {
  console.log('');
  const size = {
    jobs: (r: PlannerBenchRow) => r.jobs,
    nodes: (r: PlannerBenchRow) => r.liveNodes,
    offerings: (r: PlannerBenchRow) => r.offerings,
  };
  for (const axis of ['jobs', 'nodes', 'offerings'] as const) {
    const on = rows.filter((r) => r.axes?.includes(axis)).sort((a, b) => size[axis](a) - size[axis](b));
    if (on.length < 2) continue;
    const time = growthExponent(on.map((r) => [size[axis](r), r.medianMs] as const));
    const heap = growthExponent(on.map((r) => [size[axis](r), r.peakHeapMiB] as const));
    const target = axis === 'offerings' ? '' : ' (target ≤ 1.15)';
    console.log(
      `growth in ${axis} (${on.map((r) => size[axis](r).toLocaleString('en-US')).join(' → ')}): time ∝ n^${time.toFixed(2)}${target}, heap ∝ n^${heap.toFixed(2)}`,
    );
  }
  const corner = rows.find((r) => r.axes?.includes('corner'));
  if (corner)
    console.log(
      `corner ${corner.scenario}: median ${corner.medianMs.toFixed(0)} ms (target < 5,000), peak heap ${corner.peakHeapMiB.toFixed(0)} MiB (target < 1,024)`,
    );
  const center = rows.find((r) => r.jobs === 10_000 && r.offerings === 200 && r.liveNodes === 1_000);
  if (center) console.log(`10k × 200 with 1,000 live nodes: median ${center.medianMs.toFixed(1)} ms (target < 500)`);
  for (const r of rows) if (r.boundNote) console.log(`${r.scenario}: ${r.boundNote}`);
}

function printRow(r: PlannerBenchRow, header: boolean): void {
  if (header) {
    console.log(
      [
        'scenario'.padEnd(32),
        'median ms'.padStart(10),
        'jobs/s'.padStart(9),
        'heap MiB'.padStart(9),
        'cost $/h'.padStart(10),
        'baseline'.padStart(10),
        'bound'.padStart(10),
        'cost/bound'.padStart(11),
        'base/bound'.padStart(11),
        'base ms'.padStart(9),
      ].join(' '),
    );
  }
  const usd = (m: number) => (m / 1e6).toFixed(1);
  console.log(
    [
      r.scenario.padEnd(32),
      r.medianMs.toFixed(1).padStart(10),
      String(r.jobsPerSec).padStart(9),
      r.peakHeapMiB.toFixed(1).padStart(9),
      usd(r.costMicroUsd).padStart(10),
      usd(r.baselineCostMicroUsd).padStart(10),
      (r.lowerBoundKind === 'none' ? 'none' : `${usd(r.lowerBoundMicroUsd)}${BOUND_MARK[r.lowerBoundKind]}`).padStart(10),
      (r.lowerBoundKind === 'none' ? '—' : ratio(r.costMicroUsd, r.lowerBoundMicroUsd)).padStart(11),
      (r.lowerBoundKind === 'none' ? '—' : ratio(r.baselineCostMicroUsd, r.lowerBoundMicroUsd)).padStart(11),
      r.baselineMs.toFixed(0).padStart(9),
    ].join(' '),
  );
}

const BOUND_MARK = { lp: '', mip: '*', exact: '**' } as const;

function ratio(a: number, b: number): string {
  return b > 0 ? (a / b).toFixed(4) : a === 0 ? '1.0000' : 'inf';
}

function printSummary(rows: PlannerBenchRow[]): void {
  const ratios = rows
    .filter((r) => r.lowerBoundMicroUsd > 0)
    .map((r) => r.costMicroUsd / r.lowerBoundMicroUsd)
    .sort((a, b) => a - b);
  const median = ratios.length % 2 ? ratios[(ratios.length - 1) / 2]! : (ratios[ratios.length / 2 - 1]! + ratios[ratios.length / 2]!) / 2;
  const aboveBaseline = rows.filter((r) => r.costMicroUsd > r.baselineCostMicroUsd).map((r) => r.scenario);
  const target = rows.find((r) => r.jobs === 10_000 && r.offerings === 200 && r.liveNodes === 0);
  const heap50k = Math.max(0, ...rows.filter((r) => r.jobs === 50_000).map((r) => r.peakHeapMiB));
  console.log('');
  console.log(
    '** bound is the MIP with integer jobs and machines and live room machine by machine; * the MIP with whole machines and pooled live room; otherwise the LP relaxation (each less the solver gap).',
  );
  for (const r of rows) if (r.boundNote) console.log(`${r.scenario}: ${r.boundNote}`);
  console.log(`median cost / lower bound: ${median.toFixed(4)} (target ≤ 1.03)`);
  console.log(`scenarios costlier than the baseline: ${aboveBaseline.length === 0 ? 'none' : aboveBaseline.join(', ')} (target: none)`);
  if (target)
    console.log(
      `10k jobs × 200 offerings: median ${target.medianMs.toFixed(1)} ms, ${target.jobsPerSec} jobs/s (target < 500 ms, > 20,000 jobs/s; Karpenter publishes ~481 pods/s)`,
    );
  if (heap50k > 0) console.log(`peak heap at 50k jobs: ${heap50k.toFixed(1)} MiB (target < 512 MiB)`);
}

await main();
