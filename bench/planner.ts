/**
 * npm run bench:planner [-- --json] [--scenario NAME] [--runs N] [--quick] [--help]
 *
 * For each scenario (1k/10k/50k pending jobs × 50/200/500 offerings × 0/1,000 live nodes, built
 * from the real traces and catalogues), in a fresh child process so its heap is its own:
 *   - gpu-fleet's planner: median plan time over N runs, jobs per second, peak heap;
 *   - the baseline (Karpenter-like: largest first, first fit, cheapest type that fits), same snapshot;
 *   - a lower bound on cost from the LP relaxation of the new-capacity problem (HiGHS), and the
 *     MIP with integer machines on the 1k-job scenarios.
 * Costs are one measure: the expected hourly cost of the capacity each plan adds.
 */
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { Command, Option } from 'commander';
import { wholeNumber } from '../cloud/flags.ts';
import { plan } from '../core/planner/planner.ts';
import { capacityProblem } from './planner/capacity-problem.ts';
import { planBaseline } from '../core/planner/baseline.ts';
import { lowerBound } from './planner/lower-bound.ts';
import { buildScenario, SCENARIOS, type ScenarioSpec } from './planner/scenarios.ts';

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
  lowerBoundKind: 'lp' | 'mip';
  baselineMs: number;
}

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
  const bound = await lowerBound(problem, { integerMachines: spec.jobs <= 1000, timeLimitSec: 60 });
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
}

function options(): PlannerBenchOptions {
  return new Command('bench:planner')
    .description(
      "Planner speed and cost on scenarios from the real traces and catalogues, against a Karpenter-like baseline and HiGHS's lower bound",
    )
    .option('--scenario <name>', 'only scenarios whose name contains this')
    .option('--runs <n>', 'plans per scenario (the median is reported)', wholeNumber('--runs', 1, 1000), 5)
    .option('--quick', 'only the 1k and 10k job scenarios with up to 200 offerings')
    .option('--json', 'print the rows as JSON')
    .addOption(new Option('--child <name>', 'run one scenario in this process (used by the bench itself)').hideHelp())
    .parse()
    .opts<PlannerBenchOptions>();
}

async function main(): Promise<void> {
  const args = options();
  if (args.child) {
    const spec = SCENARIOS.find((s) => s.name === args.child)!;
    const row = await runOne(spec, args.runs);
    process.stdout.write(`RESULT ${JSON.stringify(row)}\n`);
    return;
  }
  let scenarios = SCENARIOS;
  if (args.scenario) scenarios = SCENARIOS.filter((s) => s.name.includes(args.scenario!));
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
  printSummary(rows);
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
      `${usd(r.lowerBoundMicroUsd)}${r.lowerBoundKind === 'mip' ? '*' : ''}`.padStart(10),
      ratio(r.costMicroUsd, r.lowerBoundMicroUsd).padStart(11),
      ratio(r.baselineCostMicroUsd, r.lowerBoundMicroUsd).padStart(11),
      r.baselineMs.toFixed(0).padStart(9),
    ].join(' '),
  );
}

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
  console.log('* bound is the MIP optimum with whole machines; otherwise the LP relaxation.');
  console.log(`median cost / lower bound: ${median.toFixed(4)} (target ≤ 1.03)`);
  console.log(`scenarios costlier than the baseline: ${aboveBaseline.length === 0 ? 'none' : aboveBaseline.join(', ')} (target: none)`);
  if (target)
    console.log(
      `10k jobs × 200 offerings: median ${target.medianMs.toFixed(1)} ms, ${target.jobsPerSec} jobs/s (target < 500 ms, > 20,000 jobs/s; Karpenter publishes ~481 pods/s)`,
    );
  if (heap50k > 0) console.log(`peak heap at 50k jobs: ${heap50k.toFixed(1)} MiB (target < 512 MiB)`);
}

await main();
