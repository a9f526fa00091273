/**
 * npm run bench:replay [-- --traces DIR] [--hours H] [--seeds 1,2,3] [--json] [--help]
 * npm run bench:replay -- --reservations [--hours H] [--seeds 1,2,3] [--json]
 * npm run bench:replay -- --rightsizing [--oversized 25,50] [--hours H] [--seeds 1,2,3] [--json]
 *
 * Every trace sample (CSV in the shared cleaned format) under every policy, on the built-in
 * simulated fleet and spot market: per trace and policy, the cost against the all-on-demand
 * baseline and against the lower bound (spot only while it could be had) and the spot floor, lost jobs, GPU-hours of rework,
 * the p95 first wait, the total wait over all attempts, attempts per job and the slowdown against
 * the same job all on-demand. Each trace is
 * replayed over its busiest H hours of submissions (default 72), for H virtual hours; the same
 * seed gives every policy the same market.
 *
 * With --rightsizing [--oversized 0.25,0.5]: the right-sizing scenario (cloud/sim/defaults.ts
 * rightsizingScenario): the built-in trace on A100 machines, its one-GPU jobs in recurring families,
 * a share of the families oversized. Each share and seed runs twice, the specs saying
 * `gpu.rightsize: "suggest"` (the baseline) and `"auto"`: the fleet's cost measured in both, jobs
 * given a smaller shape, how many of those failed, and the report's estimate of the saving from
 * the baseline's finished jobs beside the saving measured.
 *
 * With --reservations: the built-in trace on the built-in fleet plus an On-Demand Capacity
 * Reservation and a Capacity Block (cloud/sim/defaults.ts reservationScenario), under gpu-fleet,
 * gpu-fleet before it knew reservations, and a Karpenter-like "reserved first, then the cheapest":
 * total cost with every reservation paid in full, each reservation's utilisation (overall, and
 * while work it could hold had waited longer than a boot), jobs killed at the block's end, lost.
 */
import { existsSync, readdirSync } from 'node:fs';
import { Command } from 'commander';
import { listOf, wholeNumber } from '../cloud/flags.ts';
import { join } from 'node:path';
import {
  BUILT_IN_SPOT,
  BUILT_IN_TRACE,
  DEFAULT_SIM_GROUPS,
  defaultTeamTags,
  reservationScenario,
  rightsizingScenario,
} from '../cloud/sim/defaults.ts';
import { shippedCatalog } from '../cloud/catalog/all-shipped.ts';
import { gpuOffers } from '../cloud/catalog/shipped.ts';
import { usageSoFar, type Job } from '../core/job.ts';
import { rightsizingRows } from '../cli/finops/report.ts';
import { withSlowdowns } from '../cloud/sim/job-times.ts';
import { DEFAULT_SIM_START_MS, RESERVATION_POLICIES, runSimulation, SIM_POLICIES } from '../cloud/sim/simulation.ts';
import { loadWorkload } from '../cloud/sim/workload.ts';

interface Row {
  trace: string;
  seed: number;
  policy: string;
  jobs: number;
  costRatioOnDemand: number;
  costRatioLowerBound: number;
  costRatioSpotFloor: number;
  lost: number;
  reworkGpuHours: number;
  p95WaitSec: number;
  p95WaitOverOnDemandSec: number;
  /** Time pending over all attempts, seconds. */
  totalWaitSec: { p50: number; p95: number; p99: number; max: number };
  attempts: { p50: number; p99: number; max: number };
  /** Completion time ÷ the same job's all on-demand (jobs done under both); absent for the on-demand run. */
  slowdown?: { mean: number; p95: number; p99: number; jobs: number };
  deadlineMisses: number;
}

interface ReplayOptions {
  readonly traces?: string;
  readonly hours: number;
  readonly seeds: number[];
  readonly json?: boolean;
  readonly reservations?: boolean;
  readonly rightsizing?: boolean;
  readonly oversized: number[];
}

function options(): ReplayOptions {
  const shared = new URL('../../shared/data/traces/', import.meta.url).pathname;
  return new Command('bench:replay')
    .description('Every trace sample under every policy on the built-in simulated fleet and spot market')
    .option(
      '--traces <dir>',
      'folder of trace CSVs (default: ../shared/data/traces when present, else the built-in trace)',
      existsSync(shared) ? shared : undefined,
    )
    .option('--hours <h>', 'busiest hours of submissions to replay, and virtual hours to run', wholeNumber('--hours', 1, 720), 72)
    .option(
      '--seeds <list>',
      'comma-separated seeds of the simulated cloud and spot market',
      listOf(wholeNumber('--seeds', 0, 2 ** 31 - 1)),
      [1],
    )
    .option('--json', 'print the rows as JSON')
    .option('--reservations', 'the reservation scenario: an ODCR and a Capacity Block beside spot and on-demand, three policies')
    .option('--rightsizing', 'the right-sizing scenario: recurring job families, a share oversized, rightsize "suggest" against "auto"')
    .option(
      '--oversized <list>',
      'with --rightsizing: comma-separated shares of the job families that are oversized, in percent',
      listOf(wholeNumber('--oversized', 0, 100)),
      [25, 50],
    )
    .parse()
    .opts<ReplayOptions>();
}

async function main(): Promise<void> {
  const a = options();
  if (a.reservations) return reservationsBench(a);
  if (a.rightsizing) return rightsizingBench(a);
  const files = a.traces
    ? readdirSync(a.traces)
        .filter((f) => f.endsWith('.csv') && !f.includes('nodes'))
        .sort()
        .map((f) => join(a.traces!, f))
    : [BUILT_IN_TRACE.pathname];
  if (!files.some((f) => f.endsWith('philly-6214e9-48h.csv'))) files.push(BUILT_IN_TRACE.pathname);
  const rows: Row[] = [];
  for (const file of files) {
    const workload = loadWorkload(file, { hours: a.hours, busiest: true });
    if (workload.jobs.length === 0) continue;
    for (const seed of a.seeds) {
      const results = [];
      for (const policy of SIM_POLICIES) {
        results.push(
          await runSimulation({
            workload,
            groups: DEFAULT_SIM_GROUPS,
            teamTags: defaultTeamTags(workload.teams, 1_000_000),
            policy,
            seed,
            hours: a.hours,
            spot: BUILT_IN_SPOT,
          }),
        );
      }
      const od = results.find((r) => r.summary.policy === 'on-demand')!.summary;
      for (const r of withSlowdowns(results)) {
        const s = r.summary;
        const row: Row = {
          trace: workload.name,
          seed,
          policy: s.policy,
          jobs: s.jobs,
          costRatioOnDemand: round(s.costMicroUsd / Math.max(1, od.costMicroUsd)),
          costRatioLowerBound: round(s.costMicroUsd / Math.max(1, s.lowerBoundCostMicroUsd)),
          costRatioSpotFloor: round(s.costMicroUsd / Math.max(1, s.spotFloorCostMicroUsd)),
          lost: s.lost,
          reworkGpuHours: s.reworkGpuHours,
          p95WaitSec: Math.round(s.p95WaitSec),
          p95WaitOverOnDemandSec: Math.round(s.p95WaitSec - od.p95WaitSec),
          totalWaitSec: {
            p50: Math.round(s.jobTimes.totalWaitSec.p50),
            p95: Math.round(s.jobTimes.totalWaitSec.p95),
            p99: Math.round(s.jobTimes.totalWaitSec.p99),
            max: Math.round(s.jobTimes.totalWaitSec.max),
          },
          attempts: { p50: s.jobTimes.attempts.p50, p99: s.jobTimes.attempts.p99, max: s.jobTimes.attempts.max },
          ...(s.slowdownVsOnDemand
            ? {
                slowdown: {
                  mean: round(s.slowdownVsOnDemand.mean),
                  p95: round(s.slowdownVsOnDemand.p95),
                  p99: round(s.slowdownVsOnDemand.p99),
                  jobs: s.slowdownVsOnDemand.jobs,
                },
              }
            : {}),
          deadlineMisses: s.deadlineMisses,
        };
        rows.push(row);
        if (!a.json) print(row, rows.length === 1);
      }
    }
  }
  if (a.json) process.stdout.write(`${JSON.stringify(rows, null, 2)}\n`);
  else {
    const lost = rows.reduce((s, r) => s + r.lost, 0);
    console.log(`\nlost jobs over every trace, seed and policy: ${lost} (target 0)`);
  }
}

function print(r: Row, header: boolean): void {
  if (header)
    console.log(
      [
        'trace'.padEnd(28),
        'seed',
        'policy'.padEnd(13),
        'jobs'.padStart(6),
        '÷ on-demand'.padStart(12),
        '÷ bound'.padStart(8),
        '÷ floor'.padStart(8),
        'lost'.padStart(5),
        'rework GPU-h'.padStart(13),
        'p95 wait'.padStart(9),
        'vs OD'.padStart(7),
        'total wait p99'.padStart(15),
        'attempts p99/max'.padStart(17),
        'slowdown mean/p99'.padStart(18),
        'dl miss'.padStart(8),
      ].join(' '),
    );
  console.log(
    [
      r.trace.padEnd(28),
      String(r.seed).padStart(4),
      r.policy.padEnd(13),
      String(r.jobs).padStart(6),
      `${r.costRatioOnDemand.toFixed(3)}×`.padStart(12),
      `${r.costRatioLowerBound.toFixed(2)}×`.padStart(8),
      `${r.costRatioSpotFloor.toFixed(2)}×`.padStart(8),
      String(r.lost).padStart(5),
      r.reworkGpuHours.toFixed(1).padStart(13),
      `${(r.p95WaitSec / 60).toFixed(1)}m`.padStart(9),
      `${r.p95WaitOverOnDemandSec >= 0 ? '+' : ''}${(r.p95WaitOverOnDemandSec / 60).toFixed(1)}m`.padStart(7),
      `${(r.totalWaitSec.p99 / 60).toFixed(1)}m`.padStart(15),
      `${r.attempts.p99} / ${r.attempts.max}`.padStart(17),
      (r.slowdown ? `${r.slowdown.mean.toFixed(3)}× / ${r.slowdown.p99.toFixed(2)}×` : '-').padStart(18),
      String(r.deadlineMisses).padStart(8),
    ].join(' '),
  );
}

/** The reservation scenario under each of its policies, on the built-in trace. */
async function reservationsBench(a: ReplayOptions): Promise<void> {
  const workload = loadWorkload(BUILT_IN_TRACE, { hours: a.hours });
  const { reservations, groups } = reservationScenario(DEFAULT_SIM_START_MS);
  const rows = [];
  for (const seed of a.seeds) {
    const bySeed = [];
    for (const policy of RESERVATION_POLICIES) {
      const { summary: s } = await runSimulation({
        workload,
        groups,
        teamTags: defaultTeamTags(workload.teams, 1_000_000),
        policy,
        seed,
        hours: a.hours,
        spot: BUILT_IN_SPOT,
        reservations,
      });
      bySeed.push({
        seed,
        policy,
        costWithReservationsUsd: round((s.costWithReservationsMicroUsd ?? s.costMicroUsd) / 1e6),
        lost: s.lost,
        completed: s.completed,
        p95WaitSec: Math.round(s.p95WaitSec),
        reworkGpuHours: s.reworkGpuHours,
        reservations: (s.reservations ?? []).map((r) => ({
          id: r.id,
          kind: r.kind,
          paidUsd: round(r.paidMicroUsd / 1e6),
          idleUsd: round(r.idleMicroUsd / 1e6),
          utilizationPct: r.utilizationPct,
          utilizationWhileQueuedPct: r.utilizationWhileQueuedPct ?? null,
          queuedMinutes: r.queuedMinutes,
          killedAtEnd: r.killedAtEnd,
        })),
      });
    }
    const baseline = bySeed.find((r) => r.policy === 'reserved-first')!.costWithReservationsUsd;
    rows.push(...bySeed.map((r) => ({ ...r, costVsReservedFirst: round(r.costWithReservationsUsd / Math.max(1e-9, baseline)) })));
  }
  if (a.json) {
    process.stdout.write(`${JSON.stringify(rows, null, 2)}\n`);
    return;
  }
  console.log(
    [
      'seed',
      'policy'.padEnd(20),
      'total $ (paid in full)'.padStart(22),
      '÷ reserved-first'.padStart(17),
      'lost'.padStart(5),
      'p95 wait'.padStart(9),
      'rework GPU-h'.padStart(13),
      '  reservations: util overall / while work waited (min waited), killed at end',
    ].join(' '),
  );
  for (const r of rows)
    console.log(
      [
        String(r.seed).padStart(4),
        r.policy.padEnd(20),
        r.costWithReservationsUsd.toFixed(0).padStart(22),
        `${r.costVsReservedFirst.toFixed(3)}×`.padStart(17),
        String(r.lost).padStart(5),
        `${(r.p95WaitSec / 60).toFixed(1)}m`.padStart(9),
        r.reworkGpuHours.toFixed(1).padStart(13),
        '  ' +
          r.reservations
            .map(
              (x) =>
                `${x.kind} ${x.utilizationPct.toFixed(1)}% / ${x.utilizationWhileQueuedPct === null ? '-' : `${x.utilizationWhileQueuedPct.toFixed(1)}%`} (${x.queuedMinutes} min), ${x.killedAtEnd} killed`,
            )
            .join('; '),
      ].join(' '),
    );
}

/** The right-sizing scenario: per share of oversized families and seed, `suggest` (the baseline) against `auto`. */
async function rightsizingBench(a: ReplayOptions): Promise<void> {
  const base = loadWorkload(BUILT_IN_TRACE, { hours: a.hours });
  const offers = gpuOffers(shippedCatalog());
  const rows = [];
  for (const pct of a.oversized)
    for (const seed of a.seeds) {
      const run = async (mode: 'suggest' | 'auto') => {
        const { workload, groups } = rightsizingScenario(base, { oversizedShare: pct / 100, mode });
        const r = await runSimulation({ workload, groups, teamTags: defaultTeamTags(workload.teams, 1_000_000), seed, hours: a.hours });
        const end = r.summary.virtualHours * 3_600_000 + DEFAULT_SIM_START_MS;
        const held = r.jobs.reduce((x, j) => x + (usageSoFar(j, end)?.costMicroUsd ?? 0), 0);
        return { r, held };
      };
      const suggest = await run('suggest');
      const auto = await run('auto');
      const sized = auto.r.jobs.filter((j) => j.rightsize?.applied);
      const found = rightsizingRows(suggest.r.jobs, offers);
      const estimate = found.reduce((x, row) => x + row.savingMicroUsd, 0);
      // The same finished jobs the estimate is made from, as they cost in each run (auto sizes a family from its third run on).
      const ids = new Set(found.flatMap((row) => row.jobs));
      const costOf = (jobs: readonly Job[]) => jobs.filter((j) => ids.has(j.id)).reduce((x, j) => x + (j.usage?.costMicroUsd ?? 0), 0);
      rows.push({
        oversizedPct: pct,
        seed,
        jobs: auto.r.summary.jobs,
        fleetCostSuggestUsd: round(suggest.r.summary.costMicroUsd / 1e6),
        fleetCostAutoUsd: round(auto.r.summary.costMicroUsd / 1e6),
        fleetCostRatio: round(auto.r.summary.costMicroUsd / Math.max(1, suggest.r.summary.costMicroUsd)),
        jobsCostSuggestUsd: round(suggest.held / 1e6),
        jobsCostAutoUsd: round(auto.held / 1e6),
        estimatedSavingUsd: round(estimate / 1e6),
        sameJobsSuggestUsd: round(costOf(suggest.r.jobs) / 1e6),
        sameJobsAutoUsd: round(costOf(auto.r.jobs) / 1e6),
        rightsized: sized.length,
        rightsizedFailed: sized.filter((j) => j.state === 'failed').length,
        completedSuggest: suggest.r.summary.completed,
        completedAuto: auto.r.summary.completed,
        failedAuto: auto.r.summary.failed,
        lost: suggest.r.summary.lost + auto.r.summary.lost,
        utilizationSuggestPct: suggest.r.summary.utilizationPct,
        utilizationAutoPct: auto.r.summary.utilizationPct,
        p95WaitMinSuggest: round(suggest.r.summary.p95WaitSec / 60),
        p95WaitMinAuto: round(auto.r.summary.p95WaitSec / 60),
      });
    }
  if (a.json) {
    process.stdout.write(`${JSON.stringify(rows, null, 2)}\n`);
    return;
  }
  console.log(
    [
      'oversized',
      'seed',
      'fleet $ suggest'.padStart(16),
      'fleet $ auto'.padStart(13),
      'auto ÷ suggest'.padStart(15),
      'jobs $ suggest → auto'.padStart(22),
      'report estimate (same jobs measured)'.padStart(37),
      'right-sized (failed)'.padStart(21),
      'done s/a'.padStart(10),
      'lost'.padStart(5),
      'util s/a'.padStart(12),
      'p95 wait s/a'.padStart(14),
    ].join(' '),
  );
  for (const r of rows)
    console.log(
      [
        `${r.oversizedPct}%`.padStart(9),
        String(r.seed).padStart(4),
        r.fleetCostSuggestUsd.toFixed(0).padStart(16),
        r.fleetCostAutoUsd.toFixed(0).padStart(13),
        `${r.fleetCostRatio.toFixed(3)}×`.padStart(15),
        `${r.jobsCostSuggestUsd.toFixed(0)} → ${r.jobsCostAutoUsd.toFixed(0)}`.padStart(22),
        `-${r.estimatedSavingUsd.toFixed(0)} (-${(r.sameJobsSuggestUsd - r.sameJobsAutoUsd).toFixed(0)} of ${r.sameJobsSuggestUsd.toFixed(0)})`.padStart(
          37,
        ),
        `${r.rightsized} (${r.rightsizedFailed})`.padStart(21),
        `${r.completedSuggest}/${r.completedAuto}`.padStart(10),
        String(r.lost).padStart(5),
        `${r.utilizationSuggestPct.toFixed(0)}%/${r.utilizationAutoPct.toFixed(0)}%`.padStart(12),
        `${r.p95WaitMinSuggest.toFixed(1)}/${r.p95WaitMinAuto.toFixed(1)}m`.padStart(14),
      ].join(' '),
    );
}

function round(x: number): number {
  return Math.round(x * 1000) / 1000;
}

await main();
