import { formatUsd } from '../../core/money.ts';
import { IDLE_TEAM } from '../../core/services/accrual.ts';
import { formatNumber, gpuHours } from '../format.ts';
import { colorsByName, esc, palette, stackedChart } from '../charts.ts';
import type { FinOpsReport } from './report.ts';

function bars(id: string, title: string, rows: readonly { name: string; value: number }[], colors?: ReadonlyMap<string, string>): string {
  if (rows.length === 0) return `<p>No ${esc(title.toLowerCase())}.</p>`;
  const max = Math.max(...rows.map((r) => r.value), 1);
  const rowH = 24;
  const width = 900;
  const body = rows
    .map((r, i) => {
      const y = 6 + i * rowH;
      const w = ((width - 380) * r.value) / max;
      return `<g class="series" data-series="${esc(r.name)}" data-points="1"><title>${esc(r.name)}: ${formatUsd(Math.round(r.value))}</title><text x="174" y="${y + 14}" text-anchor="end">${esc(r.name.length > 28 ? `${r.name.slice(0, 27)}…` : r.name)}</text><rect x="180" y="${y}" width="${w.toFixed(1)}" height="16" fill="${colors?.get(r.name) ?? palette(i)}"/><text x="${(186 + w).toFixed(1)}" y="${y + 13}">${formatUsd(Math.round(r.value))}</text></g>`;
    })
    .join('');
  return `<figure class="chart" data-chart="${id}"><figcaption>${esc(title)}</figcaption><svg viewBox="0 0 ${width} ${rows.length * rowH + 12}" width="100%" role="img" aria-label="${esc(title)}">${body}</svg></figure>`;
}

export function reportHtml(r: FinOpsReport): string {
  const teams = [...new Set(r.byDay.flatMap((d) => Object.keys(d.byTeam)))].sort();
  // A team has one colour in every chart (idle is grey).
  const teamColors = colorsByName([...teams, ...r.byTeam.map((x) => x.team)], new Map([[IDLE_TEAM, '#9aa4ab']]));
  const daily = stackedChart({
    id: 'daily',
    title: 'Spend by day and team (USD)',
    xLabel: `days from ${r.byDay[0]?.day ?? '-'}`,
    series: teams.map((t) => ({
      name: t,
      color: teamColors.get(t)!,
      points: r.byDay.map((d, k) => [k, (d.byTeam[t] ?? 0) / 1e6] as const),
    })),
  });
  const t = r.totals;
  const card = (k: string, v: string) => `<div class="card"><div class="k">${esc(k)}</div><div class="v">${esc(v)}</div></div>`;
  const jobRows = r.jobs
    .slice(0, 50)
    .map(
      (j) =>
        `<tr><td>${esc(j.job)}</td><td>${esc(j.team)}</td><td>${esc(j.project)}</td><td>${esc(j.state)}</td><td>${j.gpuHours.toFixed(2)}</td><td>${(100 * j.spotShare).toFixed(0)}%</td><td>${formatUsd(j.costMicroUsd)}</td><td>${formatUsd(j.onDemandMicroUsd - j.costMicroUsd)}</td><td>${j.interruptions}</td><td>${j.moves}</td><td>${j.utilizationPct === undefined ? '' : `${j.utilizationPct.toFixed(0)}%`}</td></tr>`,
    )
    .join('');
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>gpu-fleet FinOps report ${esc(r.period.label)}</title>
<style>
body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:1000px;color:#1d2327}
h1{font-size:20px}h2{font-size:16px;margin-top:28px}
.cards{display:grid;grid-template-columns:repeat(4,1fr);gap:10px}.card{border:1px solid #dde1e4;border-radius:6px;padding:10px}.k{color:#5b666d;font-size:12px}.v{font-size:18px;font-weight:600}
table{border-collapse:collapse;width:100%}td,th{border-bottom:1px solid #eef0f2;padding:4px 6px;text-align:left}td:nth-child(n+5){text-align:right}
svg text{font-size:11px;fill:#3c464d}.legend span{margin-right:12px}.legend i{display:inline-block;width:10px;height:10px;margin-right:4px}
</style></head><body>
<h1>gpu-fleet FinOps report: ${esc(r.period.label)}${r.team ? `, team ${esc(r.team)}` : ''}</h1>
<p>${esc(r.source)}; ${new Date(r.period.startMs).toISOString().slice(0, 10)} to ${new Date(r.period.endMs - 1).toISOString().slice(0, 10)}.</p>
<div class="cards">${card('paid', formatUsd(t.paidMicroUsd))}${card('idle capacity', formatUsd(t.idleMicroUsd))}${card('checkpoint bytes', formatUsd(t.checkpointBytesMicroUsd))}${card('spot savings', formatUsd(t.spotSavingsMicroUsd))}${card('GPU-hours held', gpuHours(t.gpuHoursUsed))}${card('interruptions', formatNumber(t.interruptions))}${card('moves', formatNumber(t.moves))}${card('rework', gpuHours(t.reworkGpuHours))}${card('rework cost', formatUsd(t.reworkMicroUsd))}${card('held by jobs', formatUsd(t.heldByJobsMicroUsd))}</div>
<h2>Trend</h2>${r.byDay.length ? daily : '<p>No spend counted in this period.</p>'}
<h2>Cost by team</h2>${bars(
    'teams',
    'Cost by team',
    r.byTeam.map((x) => ({ name: x.team, value: x.costMicroUsd })),
    teamColors,
  )}
${
  r.reserved
    ? `<h2>Reserved capacity</h2><p>Paid ${esc(formatUsd(r.reserved.paidMicroUsd))}, ${r.reserved.utilizationPct.toFixed(1)}% used.</p>${bars(
        'reservations',
        'Reserved capacity: used by team, unused by reservation',
        [
          ...r.reserved.usedByTeam.map((x) => ({ name: `used: ${x.team}`, value: x.costMicroUsd })),
          ...r.reserved.unusedByReservation.map((x) => ({ name: `unused: ${x.reservation}`, value: x.costMicroUsd })),
        ],
        new Map([
          ...r.reserved.usedByTeam.map((x) => [`used: ${x.team}`, teamColors.get(x.team) ?? palette(0)] as const),
          ...r.reserved.unusedByReservation.map((x) => [`unused: ${x.reservation}`, '#9aa4ab'] as const),
        ]),
      )}`
    : ''
}
<h2>Cost by project</h2>${bars(
    'projects',
    'Cost by project',
    r.byProject.slice(0, 20).map((x) => ({ name: x.project, value: x.costMicroUsd })),
  )}
<h2>Jobs by cost</h2><table><thead><tr><th>job</th><th>team</th><th>project</th><th>state</th><th>GPU-h</th><th>spot</th><th>cost</th><th>saved</th><th>interruptions</th><th>moves</th><th>GPU use</th></tr></thead><tbody>${jobRows}</tbody></table>
${
  r.rightsizing.length
    ? `<h2>Right-sizing</h2><p>What the finished jobs' measured GPU use needed, and what running in that shape would have saved at the prices they ran at.</p><table data-table="rightsizing"><thead><tr><th>family or job</th><th>runs</th><th>ran in</th><th>needs</th><th>peak memory</th><th>GPU use (mean / p95)</th><th>cost</th><th>saving</th><th>confidence</th></tr></thead><tbody>${r.rightsizing
        .slice(0, 50)
        .map(
          (x) =>
            `<tr title="${esc(x.why)}"><td>${esc(x.scope === 'job' ? x.jobs[0]! : x.family)}</td><td>${x.runs}</td><td>${esc(x.from)}</td><td>${esc(x.to)}</td><td>${(x.peakMemoryMiB / 1024).toFixed(1)} GiB</td><td>${x.meanSmPct === undefined ? 'n/a' : `${x.meanSmPct.toFixed(0)}% / ${x.p95SmPct}%`}</td><td>${formatUsd(x.costMicroUsd)}</td><td>${formatUsd(x.savingMicroUsd)} (${x.savingPct.toFixed(0)}%)</td><td>${x.confidence}</td></tr>`,
        )
        .join('')}</tbody></table>`
    : ''
}
${r.lowUtilization.length ? `<h2>Running jobs with GPUs mostly idle</h2><ul>${r.lowUtilization.map((j) => `<li>${esc(j.job)} (${esc(j.team)}): ${(j.utilizationPct ?? 0).toFixed(0)}% GPU use, ${formatUsd(j.costMicroUsd)} so far</li>`).join('')}</ul>` : ''}
${r.notes.length ? `<h2>Notes</h2><ul>${r.notes.map((n) => `<li>${esc(n)}</li>`).join('')}</ul>` : ''}
</body></html>
`;
}
