import { formatUsd } from '../core/money.ts';
import { formatNumber, gpuHours } from './format.ts';
import {
  batchCostMicroUsd,
  costRatios,
  onDemandWholeBill,
  billParts,
  bytesShareOfGpuPct,
  replicasLost,
  REPLICAS_LOST_LABEL,
  REQUEUES_LABEL,
  requeuesText,
  REWORK_LABEL,
  OVERHEAD_LABEL,
  DEADLINES_LABEL,
  SERVICE_COLUMNS,
  serviceCells,
  servicesByPolicy,
  USED_LABEL,
} from './figures.ts';
import type { SimulationResult } from '../cloud/sim/simulation.ts';
import { CHART_WIDTH, colorFor, esc, lineChart, palette, stackedChart } from './charts.ts';

/**
 * A self-contained HTML report of a simulation: inline SVG charts and tables, no scripts, no
 * network, opens from disk. Charts: fleet size by group and capacity type over time, queue
 * depth, cumulative cost against the baselines, and spend against budget per team.
 */
/** What a policy's replay gives back without its world (a worker thread's answer). */
export type PolicyRun = Omit<SimulationResult, 'env' | 'frontDoor'>;

/** A simulation and the baselines replayed beside it, as `gpu-fleet simulate` ran them. */
export interface SimulateRun {
  readonly main: SimulationResult;
  /** The baselines' runs, without their worlds (they may come back from worker threads). */
  readonly baselines: readonly PolicyRun[];
  /** Wall time of the whole command: every policy's replay, loading and reports (absent for a run put together elsewhere). */
  readonly wallMs?: number;
}

export function renderHtmlReport(run: SimulateRun): string {
  const main = run.main;
  const s = main.summary;
  const od = onDemandWholeBill(run);
  const ratios = costRatios(s, od);
  const hours = (t: number) => t / 3600;
  const groups = [...new Set(main.timeline.flatMap((p) => Object.keys(p.machinesByGroup)))].sort();
  const fleet = stackedChart({
    id: 'fleet',
    title: 'Fleet size by node group (machines)',
    xLabel: 'hours into the replay',
    series: groups.map((g, i) => ({
      name: g,
      color: colorFor(g, i),
      points: main.timeline.map((p) => [hours(p.tSec), p.machinesByGroup[g] ?? 0] as const),
    })),
  });
  const gpus = lineChart({
    id: 'capacity-type',
    title: 'GPUs by capacity type',
    xLabel: 'hours into the replay',
    series: [
      { name: 'spot GPUs', color: '#2a9d8f', points: main.timeline.map((p) => [hours(p.tSec), p.spotGpus] as const) },
      { name: 'on-demand GPUs', color: '#e76f51', points: main.timeline.map((p) => [hours(p.tSec), p.onDemandGpus] as const) },
    ],
  });
  const queue = lineChart({
    id: 'queue',
    title: 'Queue depth',
    xLabel: 'hours into the replay',
    series: [
      { name: 'jobs waiting', color: '#264653', points: main.timeline.map((p) => [hours(p.tSec), p.pendingJobs] as const) },
      { name: 'GPUs waiting', color: '#f4a261', points: main.timeline.map((p) => [hours(p.tSec), p.pendingGpus] as const) },
      { name: 'jobs running', color: '#8ab17d', points: main.timeline.map((p) => [hours(p.tSec), p.runningJobs] as const) },
    ],
  });
  const all = [main, ...run.baselines];
  const cost = lineChart({
    id: 'cost',
    title: 'Cumulative cost (USD) against the baselines',
    xLabel: 'hours into the replay',
    series: all.map((r, i) => ({
      name: r.summary.policy,
      color: POLICY_COLORS[r.summary.policy] ?? palette(i),
      points: r.timeline.map((p) => [hours(p.tSec), p.cumulativeCostMicroUsd / 1e6] as const),
    })),
  });
  const budget = budgetChart(main);
  // Each service: replicas its load needed against ready replicas (spot and on-demand).
  const serviceIds = [...new Set(main.timeline.flatMap((p) => Object.keys(p.services ?? {})))].sort();
  const serviceCharts = serviceIds
    .map((id) =>
      lineChart({
        id: `service-${id}`,
        title: `Service ${id}: replicas needed and ready`,
        xLabel: 'hours into the replay',
        series: [
          {
            name: 'needed (load ÷ target)',
            color: '#264653',
            points: main.timeline.map((p) => [hours(p.tSec), p.services?.[id]?.needed ?? 0] as const),
          },
          { name: 'ready', color: '#8ab17d', points: main.timeline.map((p) => [hours(p.tSec), p.services?.[id]?.ready ?? 0] as const) },
          {
            name: 'ready on spot',
            color: '#2a9d8f',
            points: main.timeline.map((p) => [hours(p.tSec), p.services?.[id]?.spot ?? 0] as const),
          },
          {
            name: 'ready on on-demand',
            color: '#e76f51',
            points: main.timeline.map((p) => [hours(p.tSec), p.services?.[id]?.onDemand ?? 0] as const),
          },
        ],
      }),
    )
    .join('');
  const serviceRows = (s.services ?? [])
    .map(
      (x) =>
        `<tr>${serviceCells(x, formatUsd)
          .map((c) => `<td>${esc(c)}</td>`)
          .join('')}<td>${esc(x.demand)}</td></tr>`,
    )
    .join('');
  const byPolicy = servicesByPolicy(all.map((r) => r.summary));
  const compareRows = all
    .map((r) => {
      const x = r.summary;
      const r3 = costRatios(x, od);
      return `<tr><td>${esc(x.policy)}</td><td>${formatUsd(x.wholeBillMicroUsd)}</td><td>${formatUsd(x.checkpointBytes.bill.totalMicroUsd)}</td><td>${r3.onDemand}</td><td>${r3.lowerBound}</td><td>${r3.spotFloor}</td><td>${(x.p95WaitSec / 60).toFixed(1)} min</td><td>${(x.jobTimes.totalWaitSec.p99 / 60).toFixed(1)} min</td><td>${x.jobTimes.attempts.p99} / ${x.jobTimes.attempts.max}</td><td>${x.slowdownVsOnDemand ? `${x.slowdownVsOnDemand.mean.toFixed(3)}×` : '-'}</td><td>${x.lost}</td><td>${x.reworkGpuHours.toFixed(1)}</td><td>${x.interruptions}</td><td>${x.deadlineMisses}</td></tr>`;
    })
    .join('');
  const events = main.budgetEvents
    .map(
      (e) => `<tr><td>${(e.tSec / 3600).toFixed(1)} h</td><td>${esc(e.team)}</td><td>${esc(e.state)}</td><td>${esc(e.message)}</td></tr>`,
    )
    .join('');
  const kv = (k: string, v: string) => `<tr><th>${esc(k)}</th><td>${esc(v)}</td></tr>`;
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>gpu-fleet simulation: ${esc(s.trace)} (${esc(s.policy)})</title>
<style>
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px auto;max-width:1100px;color:#1d2327;padding:0 16px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px}
.sub{color:#5f6b73;margin:0 0 16px}
table{border-collapse:collapse;margin:6px 0 12px}td,th{padding:3px 10px;border-bottom:1px solid #e4e7ea;text-align:left;font-variant-numeric:tabular-nums}
th{font-weight:600}
.grid{display:grid;grid-template-columns:1fr 1fr;gap:18px}
figure.chart{margin:0;border:1px solid #e4e7ea;border-radius:6px;padding:10px}
figure.chart figcaption{font-weight:600;margin-bottom:6px}
.legend span{display:inline-block;margin-right:12px;font-size:12px}.legend i{display:inline-block;width:10px;height:10px;margin-right:4px;border-radius:2px}
svg text{font-size:11px;fill:#5f6b73}
</style></head><body>
<h1>gpu-fleet simulation</h1>
<p class="sub">${esc(s.trace)}: ${s.jobs.toLocaleString('en-US')} jobs, policy <b>${esc(s.policy)}</b>, seed ${s.seed}, ${s.virtualHours} h of simulated time. Every job went through the real intake, reconcile, interruption and node-lost code on the simulated cloud.</p>
<table class="summary">
${kv('jobs completed / failed / lost', `${s.completed} / ${s.failed} / ${s.lost}`)}
${kv('still running / pending at the end', `${s.runningAtEnd} / ${s.pendingAtEnd}`)}
${kv(USED_LABEL, gpuHours(s.gpuHoursUsed))}
${kv(REWORK_LABEL, gpuHours(s.reworkGpuHours))}
${kv(OVERHEAD_LABEL, gpuHours(s.overheadGpuHours))}
${kv('GPU-hours paid (utilisation: used ÷ paid)', `${gpuHours(s.gpuHoursPaid)} (${s.utilizationPct.toFixed(1)}%)`)}
${kv('whole bill', `${formatUsd(s.wholeBillMicroUsd)} — ${ratios.onDemand} all on-demand's whole bill (${formatUsd(od)})`)}
${billParts(s)
  .map((p) => kv(`  ${p.label}`, formatUsd(p.microUsd)))
  .join('\n')}
${kv('  checkpoint bytes ÷ GPU machines', `${bytesShareOfGpuPct(s).toFixed(2)}%`)}
${kv('batch machines', `${s.services ? `batch work ${formatUsd(batchCostMicroUsd(s))}: ` : ''}${ratios.lowerBound} the lower bound (${formatUsd(s.lowerBoundCostMicroUsd)}: useful work, spot only while it could be had), ${ratios.spotFloor} the spot floor (${formatUsd(s.spotFloorCostMicroUsd)}: all at spot)`)}
${kv('first wait (submit to first start) p50 / p95', `${(s.p50WaitSec / 60).toFixed(1)} / ${(s.p95WaitSec / 60).toFixed(1)} min`)}
${kv('total wait (all attempts) p50 / p95 / p99 / max', [s.jobTimes.totalWaitSec.p50, s.jobTimes.totalWaitSec.p95, s.jobTimes.totalWaitSec.p99, s.jobTimes.totalWaitSec.max].map((v) => `${(v / 60).toFixed(1)}`).join(' / ') + ' min')}
${kv('attempts per job p50 / p99 / max', `${s.jobTimes.attempts.p50} / ${s.jobTimes.attempts.p99} / ${s.jobTimes.attempts.max}`)}
${kv('completion ÷ the same job all on-demand (mean / p95 / p99)', s.slowdownVsOnDemand ? `${s.slowdownVsOnDemand.mean.toFixed(3)} / ${s.slowdownVsOnDemand.p95.toFixed(2)} / ${s.slowdownVsOnDemand.p99.toFixed(2)} over ${s.slowdownVsOnDemand.jobs} jobs` : '-')}
${kv('spot machines taken back', formatNumber(s.interruptions))}
${kv(REQUEUES_LABEL, requeuesText(s))}
${s.services ? kv(REPLICAS_LOST_LABEL, formatNumber(replicasLost(s))) : ''}
${kv('checkpoints', formatNumber(s.checkpoints))}
${kv(DEADLINES_LABEL, formatNumber(s.deadlineJobs))}
${kv('deadlines missed', formatNumber(s.deadlineMisses))}
</table>
<h2>Against the alternatives (same trace, same seed, same spot market)</h2>
<table class="compare"><tr><th>policy</th><th>whole bill</th><th>of it bytes</th><th>÷ on-demand</th><th>÷ lower bound</th><th>÷ spot floor</th><th>first wait p95</th><th>total wait p99</th><th>attempts p99 / max</th><th>slowdown (mean)</th><th>lost</th><th>rework GPU-h</th><th>spot machines taken back</th><th>deadline misses</th></tr>${compareRows}</table>
${
  serviceRows
    ? `<h2>Services</h2>
<p class="sub">Availability: the share of 15 s ticks (after the first quarter hour) with at least as many ready replicas as the load needed at the service's target per replica. In objective: the share of the requests over the same time served within the service's objective, by a queueing model (M/M/c) of each tick's ready replicas. Charts sample every 5 minutes.</p>
<table class="services"><tr>${SERVICE_COLUMNS.map((c) => `<th>${esc(c)}</th>`).join('')}<th>load</th></tr>${serviceRows}</table>
<p class="sub">Under each policy (available / in objective):</p>
<table class="services-by-policy"><tr>${byPolicy.columns.map((c) => `<th>${esc(c)}</th>`).join('')}</tr>${byPolicy.rows.map((r) => `<tr>${r.map((c) => `<td>${esc(c)}</td>`).join('')}</tr>`).join('')}</table>
<div class="grid">${serviceCharts}</div>`
    : ''
}
<h2>Charts</h2>
<div class="grid">${fleet}${gpus}${queue}${cost}</div>
<h2>Spend against budget</h2>
${budget}
<h2>Budget events</h2>
${events ? `<table class="events"><tr><th>when</th><th>team</th><th>state</th><th>what</th></tr>${events}</table>` : '<p>None.</p>'}
</body></html>
`;
}

const POLICY_COLORS: Record<string, string> = {
  'gpu-fleet': '#2a9d8f',
  'on-demand': '#e76f51',
  'spot-greedy': '#e9c46a',
  'cheapest-fit': '#6d597a',
};

function budgetChart(main: SimulationResult): string {
  const teams = Object.keys(main.budgets).sort();
  if (teams.length === 0) return '<p>No team has a budget.</p>';
  const last = main.timeline[main.timeline.length - 1];
  const rows = teams.map((t) => ({
    team: t,
    budget: main.budgets[t]!.amountMicroUsd / 1e6,
    spent: (last?.spendByTeamMicroUsd[t] ?? main.summary.costByTeamMicroUsd[t] ?? 0) / 1e6,
  }));
  const max = Math.max(...rows.map((r) => Math.max(r.budget, r.spent))) * 1.1;
  const rowH = 28;
  const h = rows.length * rowH + 30;
  const width = CHART_WIDTH * 1.8;
  const x = (v: number) => 90 + (v / max) * (width - 90 - 230);
  const bars = rows
    .map((r, i) => {
      const y = 8 + i * rowH;
      const color = r.spent >= r.budget ? '#e76f51' : r.spent >= 0.8 * r.budget ? '#f4a261' : '#2a9d8f';
      return `<g class="series" data-series="${esc(r.team)}" data-points="2"><title>${esc(r.team)}: ${formatUsd(Math.round(r.spent * 1e6))} of ${formatUsd(Math.round(r.budget * 1e6))}</title><text x="84" y="${y + 15}" text-anchor="end">${esc(r.team)}</text><rect x="90" y="${y}" width="${(x(r.spent) - 90).toFixed(1)}" height="18" fill="${color}"/><line x1="${x(r.budget).toFixed(1)}" x2="${x(r.budget).toFixed(1)}" y1="${y - 3}" y2="${y + 21}" stroke="#1d2327" stroke-width="2"/><text x="${(x(Math.max(r.spent, r.budget)) + 6).toFixed(1)}" y="${y + 14}">${formatUsd(Math.round(r.spent * 1e6))} / ${formatUsd(Math.round(r.budget * 1e6))}</text></g>`;
    })
    .join('');
  return `<figure class="chart" data-chart="budget"><figcaption>Spend this period against budget (bar: spent; line: budget)</figcaption><svg viewBox="0 0 ${width} ${h}" width="100%" role="img">${bars}</svg></figure>`;
}
