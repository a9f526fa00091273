import { stringify } from 'csv-stringify/sync';
import type { ByteBillRow, FinOpsReport } from './report.ts';

const usd = (micro: number) => (micro / 1e6).toFixed(2);

export function reportCsv(r: FinOpsReport): string {
  const rows: (string | number)[][] = [];
  const row = (kind: string, fields: Partial<Record<(typeof CSV_COLUMNS)[number], string | number>>) =>
    rows.push([kind, ...CSV_COLUMNS.slice(1).map((c) => fields[c] ?? '')]);
  for (const t of r.byTeam)
    row('team', {
      name: t.team,
      team: t.team,
      cost_usd: usd(t.costMicroUsd),
      committed_usd: usd(t.committedMicroUsd),
      bytes_usd: usd(t.bytesMicroUsd),
    });
  for (const d of r.byDay) for (const [t, v] of Object.entries(d.byTeam)) row('day', { name: d.day, team: t, cost_usd: usd(v) });
  for (const p of r.byProject)
    row('project', { name: p.project, project: p.project, cost_usd: usd(p.costMicroUsd), gpu_hours: p.gpuHours.toFixed(3) });
  for (const j of r.jobs)
    row('job', {
      name: j.job,
      team: j.team,
      project: j.project,
      state: j.state,
      cost_usd: usd(j.costMicroUsd),
      on_demand_usd: usd(j.onDemandMicroUsd),
      gpu_hours: j.gpuHours.toFixed(3),
      spot_share: j.spotShare.toFixed(3),
      requeues: j.requeues,
      interruptions: j.interruptions,
      moves: j.moves,
      rework_gpu_hours: j.reworkGpuHours.toFixed(3),
      rework_usd: usd(j.reworkMicroUsd),
      replica_losses: j.replicaLosses,
      utilization_pct: j.utilizationPct?.toFixed(1) ?? '',
      reserved_usd: j.reservedMicroUsd > 0 ? usd(j.reservedMicroUsd) : '',
    });
  for (const x of r.rightsizing)
    row('rightsizing', {
      name: x.family,
      team: x.team,
      project: x.project,
      cost_usd: usd(x.costMicroUsd),
      runs: x.runs,
      rightsize_from: x.from,
      rightsize_to: x.to,
      saving_usd: usd(x.savingMicroUsd),
      peak_memory_mib: x.peakMemoryMiB,
      utilization_pct: x.meanSmPct?.toFixed(1) ?? '',
      p95_utilization_pct: x.p95SmPct ?? '',
      confidence: x.confidence,
    });
  if (r.reserved) {
    for (const x of r.reserved.usedByTeam) row('reserved-used', { name: x.team, team: x.team, cost_usd: usd(x.costMicroUsd) });
    for (const x of r.reserved.unusedByReservation) row('reserved-unused', { name: x.reservation, cost_usd: usd(x.costMicroUsd) });
  }
  const parts = (b: ByteBillRow) => ({
    cost_usd: usd(b.totalMicroUsd),
    storage_usd: usd(b.storageMicroUsd),
    requests_usd: usd(b.requestsMicroUsd),
    network_usd: usd(b.networkMicroUsd),
  });
  for (const p of r.checkpointBytes?.byProject ?? []) row('bytes-project', { name: p.project, project: p.project, ...parts(p) });
  for (const j of r.checkpointBytes?.byJob ?? [])
    row('bytes-job', { name: j.job, team: j.team, project: j.project, ...parts(j), held_gib: j.heldGiB.toFixed(3) });
  return stringify(rows, { header: true, columns: [...CSV_COLUMNS], record_delimiter: 'unix' });
}

const CSV_COLUMNS = [
  'kind',
  'name',
  'team',
  'project',
  'state',
  'cost_usd',
  /** Team rows: what the team's running work will still cost (as budgets count it). */
  'committed_usd',
  'on_demand_usd',
  'gpu_hours',
  'spot_share',
  'requeues',
  'interruptions',
  'moves',
  'rework_gpu_hours',
  'rework_usd',
  'replica_losses',
  'utilization_pct',
  /** Job rows: what it ran on reserved capacity; `reserved-used` rows (by team) and `reserved-unused` rows (by reservation) follow. */
  'reserved_usd',
  /** `rightsizing` rows (a family or a job): its measured runs, the shape it ran with and the one that holds its use, the saving at the prices they ran at. */
  'runs',
  'rightsize_from',
  'rightsize_to',
  'saving_usd',
  'peak_memory_mib',
  'p95_utilization_pct',
  'confidence',
  /** Team rows: of cost_usd, checkpoint bytes; `bytes-project` and `bytes-job` rows: checkpoint bytes by part (cost_usd is their sum). */
  'bytes_usd',
  'storage_usd',
  'requests_usd',
  'network_usd',
  'held_gib',
] as const;
