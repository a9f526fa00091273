import { formatNumber, gpuHours, money, pct, table } from '../format.ts';
import type { FinOpsReport } from './report.ts';

export function reportText(r: FinOpsReport): string {
  const t = r.totals;
  const out = [
    `FinOps report, ${r.period.label} (${new Date(r.period.startMs).toISOString().slice(0, 10)} to ${new Date(r.period.endMs - 1).toISOString().slice(0, 10)}), ${r.source}${r.team ? `, team ${r.team}` : ''}`,
    '',
  ];
  out.push(
    table(
      ['measure', 'value'],
      [
        ['paid (machines and checkpoint bytes)', money(t.paidMicroUsd)],
        [
          'checkpoint bytes (storage, requests, network)',
          `${money(t.checkpointBytesMicroUsd)}${t.paidMicroUsd > 0 ? ` (${pct((100 * t.checkpointBytesMicroUsd) / t.paidMicroUsd)})` : ''}`,
        ],
        [
          'held by jobs',
          `${money(t.heldByJobsMicroUsd)}${t.paidMicroUsd > 0 ? ` (${pct((100 * t.heldByJobsMicroUsd) / t.paidMicroUsd)})` : ''}`,
        ],
        ['idle capacity', `${money(t.idleMicroUsd)}${t.paidMicroUsd > 0 ? ` (${pct((100 * t.idleMicroUsd) / t.paidMicroUsd)})` : ''}`],
        ['GPU-hours held by jobs', gpuHours(t.gpuHoursUsed)],
        ['spot savings vs on-demand', `${money(t.spotSavingsMicroUsd)} (on-demand would be ${money(t.onDemandEquivalentMicroUsd)})`],
        [
          'requeues of jobs (interruptions / moves)',
          `${formatNumber(t.requeues)} (${formatNumber(t.interruptions)} / ${formatNumber(t.moves)})`,
        ],
        ['rework of jobs (work lost since the last checkpoint)', `${gpuHours(t.reworkGpuHours)}, ${money(t.reworkMicroUsd)}`],
        ['service replicas lost (started again elsewhere)', formatNumber(t.replicaLosses)],
      ],
    ),
  );
  out.push(
    '',
    'Cost by team',
    r.byTeam.length
      ? table(
          ['team', 'cost', 'of it bytes', 'committed'],
          r.byTeam.map((x) => [x.team, money(x.costMicroUsd), money(x.bytesMicroUsd), money(x.committedMicroUsd)]),
        )
      : '  (none)',
  );
  if (r.reserved) {
    const x = r.reserved;
    out.push(
      '',
      `Reserved capacity: paid ${money(x.paidMicroUsd)}, used ${pct(x.utilizationPct)}`,
      table(
        ['part', 'cost'],
        [
          ...x.usedByTeam.map((u) => [`used by ${u.team}`, money(u.costMicroUsd)]),
          ...x.unusedByReservation.map((u) => [`unused ${u.reservation} (waste)`, money(u.costMicroUsd)]),
        ],
      ),
    );
  }
  out.push(
    '',
    'Cost by project (jobs)',
    r.byProject.length
      ? table(
          ['project', 'jobs', 'GPU-h', 'cost'],
          r.byProject.map((p) => [p.project, p.jobs, p.gpuHours.toFixed(1), money(p.costMicroUsd)]),
        )
      : '  (none)',
  );
  out.push(
    '',
    `Jobs by cost (top ${Math.min(10, r.jobs.length)} of ${r.jobs.length})`,
    r.jobs.length
      ? table(
          ['job', 'team', 'state', 'GPU-h', 'spot', 'cost', 'saved', 'interruptions', 'moves'],
          r.jobs
            .slice(0, 10)
            .map((j) => [
              j.job,
              j.team,
              j.state,
              j.gpuHours.toFixed(2),
              pct(100 * j.spotShare),
              money(j.costMicroUsd),
              money(j.onDemandMicroUsd - j.costMicroUsd),
              j.interruptions,
              j.moves,
            ]),
        )
      : '  (none)',
  );
  if (r.checkpointBytes) {
    const b = r.checkpointBytes;
    const gib = (x: number) => `${x.toFixed(1)} GiB`;
    out.push(
      '',
      `Checkpoint bytes: ${money(b.chargedMicroUsd)} charged, ${money(b.attributedMicroUsd)} of it to the jobs below`,
      b.byProject.length
        ? table(
            ['project', 'jobs', 'storage', 'requests', 'network', 'bytes'],
            b.byProject.map((p) => [
              p.project,
              p.jobs,
              money(p.storageMicroUsd),
              money(p.requestsMicroUsd),
              money(p.networkMicroUsd),
              money(p.totalMicroUsd),
            ]),
          )
        : '  (none)',
    );
    if (b.byJob.length > 0)
      out.push(
        table(
          ['job', 'team', 'held now', 'storage', 'requests', 'network', 'bytes'],
          b.byJob
            .slice(0, 10)
            .map((j) => [
              j.job,
              j.team,
              gib(j.heldGiB),
              money(j.storageMicroUsd),
              money(j.requestsMicroUsd),
              money(j.networkMicroUsd),
              money(j.totalMicroUsd),
            ]),
        ),
      );
    out.push(
      b.bucket
        ? `held: ${gib(b.heldGiBByIndex)} by the index (the agents' reports), ${gib(b.bucket.heldGiB)} by the bucket (${b.bucket.source}, ${new Date(b.bucket.atMs).toISOString().slice(0, 10)}): ${b.bucket.indexLessBucketPct >= 0 ? '+' : ''}${b.bucket.indexLessBucketPct.toFixed(1)}%`
        : `held: ${gib(b.heldGiBByIndex)} by the index (the agents' reports); no bucket metric to compare it with here`,
    );
  }
  if (r.rightsizing.length > 0) {
    const saving = r.rightsizing.reduce((a, x) => a + x.savingMicroUsd, 0);
    out.push(
      '',
      `Right-sizing: ${money(saving)} of ${money(r.rightsizing.reduce((a, x) => a + x.costMicroUsd, 0))} saved had these run in the shape their measured use needs`,
      table(
        ['family or job', 'runs', 'ran in', 'needs', 'peak mem', 'GPU use p95', 'saving', 'confidence'],
        r.rightsizing
          .slice(0, 15)
          .map((x) => [
            x.scope === 'job' ? x.jobs[0]! : x.family,
            x.runs,
            x.from,
            x.to,
            `${(x.peakMemoryMiB / 1024).toFixed(1)} GiB`,
            x.p95SmPct === undefined ? 'n/a' : pct(x.p95SmPct),
            `${money(x.savingMicroUsd)} (${pct(x.savingPct)})`,
            x.confidence,
          ]),
      ),
    );
  }
  if (r.lowUtilization.length > 0)
    out.push(
      '',
      'Running jobs with GPUs mostly idle',
      table(
        ['job', 'team', 'GPU use', 'cost so far'],
        r.lowUtilization.map((j) => [j.job, j.team, pct(j.utilizationPct ?? 0), money(j.costMicroUsd)]),
      ),
    );
  out.push(
    '',
    'Spend by day',
    r.byDay.length
      ? table(
          ['day', 'cost'],
          r.byDay.map((d) => [d.day, money(d.totalMicroUsd)]),
        )
      : '  (none)',
  );
  if (r.notes.length > 0) out.push('', ...r.notes.map((n) => `note: ${n}`));
  return out.join('\n');
}
