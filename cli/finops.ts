import { committedCostMicroUsd } from '../core/cost-model.ts';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { JOB_STATES, ACTIVE_STATES, requeueCounts, reworkGpuHours, usageSoFar, type Job } from '../core/job.ts';
import { SERVICE_LABEL } from '../core/serving/service.ts';
import { formatUsd } from '../core/money.ts';
import { dayStartMs, reportPeriod, type ReportPeriod } from '../core/period.ts';
import { BYTES_DAY_PERIOD_PREFIX, DAY_PERIOD_PREFIX, IDLE_TEAM, RESERVED_UNUSED_PREFIX } from '../core/services/accrual.ts';
import { byteBillsByJob, heldBytesAt, storeSiteOf, type ByteBill, type ByteLog } from '../core/bytes.ts';
import { stringify } from 'csv-stringify/sync';
import { messageOf, UsageError } from '../core/errors.ts';
import { openFleet, type BucketBytes, type Fleet, type FleetFlags } from './fleet.ts';
import { formatNumber, gpuHours, money, pct, table } from './format.ts';
import type { Io } from './people.ts';
import { colorsByName, esc, palette, stackedChart } from './charts.ts';
import type { GpuRequest } from '../core/gpu.ts';
import {
  describeShape,
  recommendShape,
  rightsizeFamily,
  runOf,
  type GpuOffers,
  type RightsizeRun,
  type ShapeKind,
} from '../core/rightsizing.ts';
import { shippedCatalog } from '../cloud/catalog/all-shipped.ts';
import { gpuOffers } from '../cloud/catalog/shipped.ts';

export interface ReportFlags extends FleetFlags {
  readonly team?: string;
  readonly period?: string;
  readonly out?: string;
  readonly csv?: boolean;
  readonly json?: boolean;
  /** Utilisation under this percentage marks a job as wasteful (default 30). */
  readonly lowUtil?: number;
}

/** `2026-11` (a month), `2026-11-30` (a day), `last-7d` (the last N days up to now), or the current month. */
export function parsePeriod(period: string | undefined, nowMs: number): ReportPeriod {
  const found = reportPeriod(period, nowMs);
  if (!found)
    throw new UsageError(`--period "${period}" is not a period: give a month (2026-11), a day (2026-11-30) or the last N days (last-7d)`);
  return found;
}

export interface JobCostRow {
  readonly job: string;
  readonly team: string;
  readonly project: string;
  readonly state: string;
  readonly costMicroUsd: number;
  readonly onDemandMicroUsd: number;
  readonly gpuHours: number;
  readonly spotShare: number;
  /**
   * A batch job's times back in the queue: interruptions (machine taken back, lost or failed) plus
   * moves gpu-fleet decided; and the work it lost since its last checkpoint. 0 for a service
   * replica, whose losses are counted apart (`replicaLosses`): a replica keeps no progress, and its
   * run time is never rework (as npm start counts them).
   */
  readonly requeues: number;
  readonly interruptions: number;
  readonly moves: number;
  readonly reworkGpuHours: number;
  readonly reworkMicroUsd: number;
  /** A service replica: times its machine was lost under it and it was started again elsewhere. */
  readonly replicaLosses: number;
  /** Of the cost, what it ran on reserved capacity (billed at the reservations' rates). */
  readonly reservedMicroUsd: number;
  readonly utilizationPct?: number;
}

export interface FinOpsReport {
  readonly source: string;
  readonly period: { readonly label: string; readonly startMs: number; readonly endMs: number };
  readonly team?: string;
  readonly totals: {
    readonly paidMicroUsd: number;
    /** Machines' GPUs the jobs held (paid less idle capacity, unused reservations and checkpoint bytes). */
    readonly heldByJobsMicroUsd: number;
    readonly idleMicroUsd: number;
    /** Checkpoint storage, requests and transfer, charged to the teams whose jobs saved and read them. */
    readonly checkpointBytesMicroUsd: number;
    readonly gpuHoursUsed: number;
    readonly spotSavingsMicroUsd: number;
    readonly onDemandEquivalentMicroUsd: number;
    readonly requeues: number;
    readonly interruptions: number;
    readonly moves: number;
    readonly reworkGpuHours: number;
    readonly reworkMicroUsd: number;
    readonly replicaLosses: number;
  };
  /**
   * Paid per team (machines and checkpoint bytes), of it its checkpoint bytes, and what its running
   * work will still cost (as reconcile counts it against hold, spot-only and stop).
   */
  readonly byTeam: readonly {
    readonly team: string;
    readonly costMicroUsd: number;
    readonly bytesMicroUsd: number;
    readonly committedMicroUsd: number;
  }[];
  /**
   * Checkpoint bytes charged to the jobs and projects that caused them (from each save's size as its
   * agent reported it), and how close the index's count of what is held is to the bucket's own.
   */
  readonly checkpointBytes?: CheckpointBytesReport;
  readonly byProject: readonly {
    readonly project: string;
    readonly costMicroUsd: number;
    readonly gpuHours: number;
    readonly jobs: number;
  }[];
  readonly byDay: readonly { readonly day: string; readonly byTeam: Readonly<Record<string, number>>; readonly totalMicroUsd: number }[];
  readonly jobs: readonly JobCostRow[];
  readonly lowUtilization: readonly JobCostRow[];
  /**
   * Capacity reservations over the period (absent when none was used or paid): what they cost in
   * full, the part the teams' work ran in (by team), and the part no machine ran in (by reservation).
   */
  readonly reserved?: {
    readonly paidMicroUsd: number;
    readonly usedMicroUsd: number;
    readonly unusedMicroUsd: number;
    readonly utilizationPct: number;
    readonly usedByTeam: readonly { readonly team: string; readonly costMicroUsd: number }[];
    readonly unusedByReservation: readonly { readonly reservation: string; readonly costMicroUsd: number }[];
  };
  /**
   * Right-sizing: job families (a team's jobs with one `project` label and one image) and single
   * jobs whose measured GPU use fits a smaller shape, with the saving at the prices they ran at.
   */
  readonly rightsizing: readonly RightsizingRow[];
  readonly notes: readonly string[];
}

export interface ByteBillRow {
  readonly storageMicroUsd: number;
  readonly requestsMicroUsd: number;
  readonly networkMicroUsd: number;
  readonly totalMicroUsd: number;
}

export interface CheckpointBytesReport {
  /** Charged in the period by the ledger (its `bytes:day:` rows): what the teams' spend and budgets hold. */
  readonly chargedMicroUsd: number;
  /** Of that, what the index's byte logs still attribute to jobs (a deleted save stays in them 48 hours). */
  readonly attributedMicroUsd: number;
  readonly byProject: readonly ({ readonly project: string; readonly jobs: number } & ByteBillRow)[];
  readonly byJob: readonly ({
    readonly job: string;
    readonly team: string;
    readonly project: string;
    readonly heldGiB: number;
  } & ByteBillRow)[];
  /** What the index counts held now, and what the bucket says it holds (its daily metric), where it says. */
  readonly heldGiBByIndex: number;
  readonly bucket?: { readonly heldGiB: number; readonly atMs: number; readonly source: string; readonly indexLessBucketPct: number };
}

/** One right-sizing finding: a family of recurring jobs (2 runs or more) or one job. */
export interface RightsizingRow {
  readonly scope: 'family' | 'job';
  readonly family: string;
  readonly team: string;
  readonly project: string;
  readonly image: string;
  readonly jobs: readonly string[];
  readonly runs: number;
  readonly from: string;
  readonly to: string;
  readonly kind: ShapeKind;
  /** The shape as a spec's `gpu` would give it. */
  readonly toGpu: GpuRequest;
  readonly model: string;
  readonly peakMemoryMiB: number;
  readonly needMemoryMiB: number;
  readonly meanSmPct?: number;
  readonly p95SmPct?: number;
  readonly costMicroUsd: number;
  readonly savingMicroUsd: number;
  readonly savingPct: number;
  readonly memoryHeadroomPct: number;
  readonly confidence: 'high' | 'medium' | 'low';
  readonly why: string;
  /** Other shapes that hold it, in order, with their cost as a share of the current one. */
  readonly alternatives: readonly string[];
}

/**
 * The FinOps view of a period: what was paid (the spend ledger, counted per team and day by
 * reconcile, idle capacity included), what jobs held and used (each job's finished attempts plus
 * its running one, at the price it was placed at), what spot saved against on-demand, what
 * interruptions cost in rework, and which running jobs hold GPUs they barely use (GPU metrics).
 */
export async function buildReport(fleet: Fleet, flags: ReportFlags): Promise<FinOpsReport> {
  const now = fleet.clock.nowMs();
  const period = parsePeriod(flags.period, now);
  const team = flags.team;
  const notes: string[] = [];
  const lowUtil = flags.lowUtil ?? 30;
  if (fleet.viewer.kind === 'team')
    notes.push(
      `team ${fleet.viewer.team}'s view: its own jobs, spend and checkpoint bytes; other teams' rows, the idle machines' cost and the fleet's totals are out of view (the platform's admin role sees them)`,
    );

  // Paid: the per-day spend ledger; of it, checkpoint bytes (counted apart per day as well).
  const days = new Map<string, Record<string, number>>();
  const bytesByTeam = new Map<string, number>();
  const ledgerRows = await fleet.ledger.list();
  for (const row of ledgerRows) {
    if (!row.period.startsWith(BYTES_DAY_PERIOD_PREFIX) || (team && row.team !== team)) continue;
    const at = dayStartMs(row.period.slice(BYTES_DAY_PERIOD_PREFIX.length));
    if (at !== undefined && at >= period.startMs && at < period.endMs)
      bytesByTeam.set(row.team, (bytesByTeam.get(row.team) ?? 0) + row.spentMicroUsd);
  }
  const bytesCharged = [...bytesByTeam.values()].reduce((a, b) => a + b, 0);
  for (const row of ledgerRows) {
    if (!row.period.startsWith(DAY_PERIOD_PREFIX)) continue;
    const day = row.period.slice(DAY_PERIOD_PREFIX.length);
    const at = dayStartMs(day);
    if (at === undefined) continue;
    if (!(at >= period.startMs && at < period.endMs)) continue;
    if (team && row.team !== team) continue;
    const d = days.get(day) ?? {};
    d[row.team] = (d[row.team] ?? 0) + row.spentMicroUsd;
    days.set(day, d);
  }
  const byDay = [...days.entries()]
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([day, by]) => ({ day, byTeam: by, totalMicroUsd: Object.values(by).reduce((a, b) => a + b, 0) }));
  const teamTotals = new Map<string, number>();
  for (const d of byDay) for (const [t, v] of Object.entries(d.byTeam)) teamTotals.set(t, (teamTotals.get(t) ?? 0) + v);
  if (byDay.length === 0) notes.push('no spend counted in this period (reconcile counts spend per team and day while machines run)');

  // Held and used: the jobs.
  const jobs = (await fleet.jobs.listByState(JOB_STATES, team)).filter(
    (j) => j.state !== 'rejected' && touches(j, period.startMs, period.endMs, now),
  );
  const rows: JobCostRow[] = jobs.map((j) => jobRow(j, Math.min(now, period.endMs)));

  // Waste: running jobs whose GPUs are barely used, from the GPU metrics.
  const running = jobs.filter((j) => ACTIVE_STATES.includes(j.state) && j.placement);
  const lowUtilization: JobCostRow[] = [];
  if (running.length > 0 && fleet.gpuMetrics) {
    const nodeIds = [...new Set(running.flatMap((j) => j.placement!.nodes.map((n) => n.nodeId)))];
    try {
      const samples = await fleet.gpuMetrics.gpuSamples(nodeIds, 3600);
      const byGpu = new Map(samples.map((s) => [`${s.instanceId}/${s.gpuIndex}`, s.utilizationPct]));
      for (const [i, j] of jobs.entries()) {
        if (!ACTIVE_STATES.includes(j.state) || !j.placement) continue;
        const u = j.placement.nodes
          .flatMap((n) => n.gpuIndices.map((g) => byGpu.get(`${n.nodeId}/${g}`)))
          .filter((x): x is number => x !== undefined);
        if (u.length === 0) continue;
        const mean = u.reduce((a, b) => a + b, 0) / u.length;
        rows[i] = { ...rows[i]!, utilizationPct: mean };
        if (mean < lowUtil) lowUtilization.push(rows[i]!);
      }
    } catch (error) {
      notes.push(`GPU metrics unavailable: ${messageOf(error)}`);
    }
  } else if (running.length > 0) notes.push(`no GPU metrics in ${fleet.source}: utilisation of running jobs is not known`);

  const byProjectMap = new Map<string, { costMicroUsd: number; gpuHours: number; jobs: number }>();
  for (const r of rows) {
    const p = byProjectMap.get(r.project) ?? { costMicroUsd: 0, gpuHours: 0, jobs: 0 };
    byProjectMap.set(r.project, { costMicroUsd: p.costMicroUsd + r.costMicroUsd, gpuHours: p.gpuHours + r.gpuHours, jobs: p.jobs + 1 });
  }
  const committed = committedCostMicroUsd(running, now, fleet.policy, fleet.policy.reconcileIntervalSec);
  const sum = (f: (r: JobCostRow) => number) => rows.reduce((a, r) => a + f(r), 0);
  const paid = [...teamTotals.values()].reduce((a, b) => a + b, 0);
  // Reserved capacity: the teams' work on it (their jobs' reserved cost), and the unused part the ledger counts per reservation.
  const unusedByReservation = [...teamTotals.entries()]
    .filter(([t]) => t.startsWith(RESERVED_UNUSED_PREFIX))
    .map(([t, c]) => ({ reservation: t.slice(RESERVED_UNUSED_PREFIX.length), costMicroUsd: c }))
    .sort((a, b) => b.costMicroUsd - a.costMicroUsd);
  const usedByTeamMap = new Map<string, number>();
  for (const r of rows) if (r.reservedMicroUsd > 0) usedByTeamMap.set(r.team, (usedByTeamMap.get(r.team) ?? 0) + r.reservedMicroUsd);
  const usedReserved = [...usedByTeamMap.values()].reduce((a, b) => a + b, 0);
  const unusedReserved = unusedByReservation.reduce((a, b) => a + b.costMicroUsd, 0);
  const reserved =
    usedReserved + unusedReserved > 0
      ? {
          paidMicroUsd: usedReserved + unusedReserved,
          usedMicroUsd: usedReserved,
          unusedMicroUsd: unusedReserved,
          utilizationPct: Math.round((10_000 * usedReserved) / (usedReserved + unusedReserved)) / 100,
          usedByTeam: [...usedByTeamMap.entries()].sort((a, b) => b[1] - a[1]).map(([t, c]) => ({ team: t, costMicroUsd: c })),
          unusedByReservation,
        }
      : undefined;
  const checkpointBytes = fleet.checkpointBytes
    ? await checkpointBytesReport(fleet.checkpointBytes, { ...period, endMs: Math.min(period.endMs, now) }, team, bytesCharged, notes)
    : undefined;
  const rightsizing = rightsizingRows(jobs, gpuOffers(shippedCatalog()));
  if (rightsizing.length === 0 && jobs.some((j) => j.usage?.gpuUse === undefined && j.state === 'succeeded'))
    notes.push('no right-sizing: finished jobs here carry no measured GPU use (their agents report it at each attempt end)');
  return {
    source: fleet.source,
    period,
    ...(team ? { team } : {}),
    totals: {
      paidMicroUsd: paid,
      heldByJobsMicroUsd: paid - (teamTotals.get(IDLE_TEAM) ?? 0) - unusedReserved - bytesCharged,
      checkpointBytesMicroUsd: bytesCharged,
      // Idle: machines' GPUs no job held, and reservations no machine ran in (paid all the same).
      idleMicroUsd: (teamTotals.get(IDLE_TEAM) ?? 0) + unusedReserved,
      gpuHoursUsed: sum((r) => r.gpuHours),
      spotSavingsMicroUsd: sum((r) => r.onDemandMicroUsd - r.costMicroUsd),
      onDemandEquivalentMicroUsd: sum((r) => r.onDemandMicroUsd),
      requeues: sum((r) => r.requeues),
      interruptions: sum((r) => r.interruptions),
      moves: sum((r) => r.moves),
      reworkGpuHours: sum((r) => r.reworkGpuHours),
      reworkMicroUsd: sum((r) => r.reworkMicroUsd),
      replicaLosses: sum((r) => r.replicaLosses),
    },
    byTeam: [...teamTotals.entries()]
      .sort((a, b) => b[1] - a[1])
      .map(([t, c]) => ({ team: t, costMicroUsd: c, bytesMicroUsd: bytesByTeam.get(t) ?? 0, committedMicroUsd: committed.get(t) ?? 0 })),
    byProject: [...byProjectMap.entries()].sort((a, b) => b[1].costMicroUsd - a[1].costMicroUsd).map(([project, v]) => ({ project, ...v })),
    byDay,
    jobs: rows.sort((a, b) => b.costMicroUsd - a.costMicroUsd),
    lowUtilization: lowUtilization.sort((a, b) => (a.utilizationPct ?? 0) - (b.utilizationPct ?? 0)),
    ...(reserved ? { reserved } : {}),
    ...(checkpointBytes ? { checkpointBytes } : {}),
    rightsizing,
    notes,
  };
}

const GIB = 2 ** 30;
const billRow = (b: ByteBill): ByteBillRow => ({
  storageMicroUsd: b.storageMicroUsd,
  requestsMicroUsd: b.requestsMicroUsd,
  networkMicroUsd: b.networkMicroUsd,
  totalMicroUsd: b.totalMicroUsd,
});

/**
 * The bucket's own count of what it holds beside the index's count at the same moment (the
 * metric's): how far the agents' reported sizes, kept in the byte logs, are from the bucket.
 * `logs` must hold every save held at or after `bucket.atMs`.
 */
export function againstBucket(logs: readonly ByteLog[], bucket: BucketBytes): NonNullable<CheckpointBytesReport['bucket']> {
  const index = heldBytesAt(logs, bucket.atMs);
  return {
    heldGiB: bucket.bytes / GIB,
    atMs: bucket.atMs,
    source: bucket.source,
    indexLessBucketPct: bucket.bytes > 0 ? (100 * (index - bucket.bytes)) / bucket.bytes : 0,
  };
}

/** The period's checkpoint bytes per job and project (the index's byte logs), and the index's count of what is held beside the bucket's. */
async function checkpointBytesReport(
  source: NonNullable<Fleet['checkpointBytes']>,
  period: { readonly startMs: number; readonly endMs: number },
  team: string | undefined,
  chargedMicroUsd: number,
  notes: string[],
): Promise<CheckpointBytesReport> {
  const logs = (await source.logs(period.startMs)).filter((l) => !team || l.owner.team === team);
  const jobs = byteBillsByJob(logs, source, period.startMs, period.endMs);
  const projects = new Map<string, { jobs: number; bills: ByteBill[] }>();
  for (const j of jobs) {
    const p = projects.get(j.owner.project ?? '(none)') ?? { jobs: 0, bills: [] };
    projects.set(j.owner.project ?? '(none)', { jobs: p.jobs + 1, bills: [...p.bills, j.bill] });
  }
  const sumBills = (bills: readonly ByteBill[]): ByteBillRow => ({
    storageMicroUsd: bills.reduce((n, b) => n + b.storageMicroUsd, 0),
    requestsMicroUsd: bills.reduce((n, b) => n + b.requestsMicroUsd, 0),
    networkMicroUsd: bills.reduce((n, b) => n + b.networkMicroUsd, 0),
    totalMicroUsd: bills.reduce((n, b) => n + b.totalMicroUsd, 0),
  });
  const attributed = sumBills(jobs.map((j) => j.bill)).totalMicroUsd;
  if (attributed < chargedMicroUsd)
    notes.push(
      `checkpoint bytes: ${money(attributed)} of the ${money(chargedMicroUsd)} charged is attributed to jobs (the index keeps a deleted save's record 48 hours; the teams' totals hold all of it)`,
    );
  // What is held now by the index's count (every team's: the bucket's metric is the whole bucket's), and what it counted
  // held when the bucket last measured itself: the two compared at the same moment.
  const heldBytes = heldBytesAt(team ? await source.logs(period.endMs) : logs, period.endMs);
  let bucket: CheckpointBytesReport['bucket'];
  try {
    const b = await source.bucketBytes?.();
    if (b) {
      // The S3 bucket's metric counts its own objects: saves kept in a GCP region's bucket are left out of the index's side.
      const inS3 = (await source.logs(b.atMs)).map((l) => ({
        ...l,
        saves: l.saves.filter((s) => storeSiteOf(source, s.location) === source.store),
      }));
      bucket = againstBucket(inS3, b);
    }
  } catch (error) {
    notes.push(`the checkpoint bucket's own size is not known: ${messageOf(error)}`);
  }
  return {
    chargedMicroUsd,
    attributedMicroUsd: attributed,
    byProject: [...projects.entries()]
      .map(([project, p]) => ({ project, jobs: p.jobs, ...sumBills(p.bills) }))
      .sort((a, b) => b.totalMicroUsd - a.totalMicroUsd),
    byJob: jobs.map((j) => ({
      job: j.owner.jobId,
      team: j.owner.team,
      project: j.owner.project ?? '(none)',
      heldGiB: j.heldBytes / GIB,
      ...billRow(j.bill),
    })),
    heldGiBByIndex: heldBytes / GIB,
    ...(bucket ? { bucket } : {}),
  };
}

/**
 * Right-sizing rows from the period's finished jobs: each family's measured runs together (a family
 * of one is a job row), through the same recommendation intake uses for `gpu.rightsize: "auto"`.
 */
export function rightsizingRows(jobs: readonly Job[], offers: GpuOffers): RightsizingRow[] {
  const families = new Map<string, { team: string; spec: Job['spec']; runs: RightsizeRun[] }>();
  for (const j of jobs) {
    const run = runOf(j);
    if (!run) continue;
    const key = rightsizeFamily(j.team, j.spec);
    const f = families.get(key) ?? { team: j.team, spec: j.spec, runs: [] };
    f.runs.push(run);
    families.set(key, f);
  }
  const rows: RightsizingRow[] = [];
  for (const [family, f] of families) {
    const r = recommendShape(family, f.runs, offers);
    if (!r.ok) continue;
    const x = r.recommendation;
    rows.push({
      scope: x.runs > 1 ? 'family' : 'job',
      family,
      team: f.team,
      project: f.spec.labels?.project ?? '(no project)',
      image: f.spec.image,
      jobs: x.jobIds,
      runs: x.runs,
      from: describeShape(x.from),
      to: describeShape(x.to.gpu),
      kind: x.to.kind,
      toGpu: x.to.gpu,
      model: x.model,
      peakMemoryMiB: x.peakMemoryMiB,
      needMemoryMiB: x.needMemoryMiB,
      ...(x.meanSmPct !== undefined ? { meanSmPct: x.meanSmPct } : {}),
      ...(x.p95SmPct !== undefined ? { p95SmPct: x.p95SmPct } : {}),
      costMicroUsd: x.costMicroUsd,
      savingMicroUsd: x.savingMicroUsd,
      savingPct: x.costMicroUsd > 0 ? Math.round((1000 * x.savingMicroUsd) / x.costMicroUsd) / 10 : 0,
      memoryHeadroomPct: x.memoryHeadroomPct,
      confidence: x.confidence,
      why: x.why,
      alternatives: x.candidates.slice(1, 4).map((c) => `${describeShape(c.gpu)} (${Math.round(c.costRatio * 100)}%)`),
    });
  }
  return rows.sort((a, b) => b.savingMicroUsd - a.savingMicroUsd || (a.family < b.family ? -1 : 1));
}

/** The job held capacity within the period: from its first start (or placement) to its end, or to now while it runs (not past now). */
function touches(j: Job, startMs: number, endMs: number, nowMs: number): boolean {
  const from = j.firstStartedAtMs ?? j.placedAtMs ?? j.submittedAtMs;
  const to = j.endedAtMs ?? nowMs;
  return from < Math.min(endMs, nowMs + 1) && to >= startMs && (j.usage !== undefined || j.placement !== undefined);
}

function jobRow(j: Job, atMs: number): JobCostRow {
  // A running attempt counts up to now, as if it ended here.
  const u = usageSoFar(j, atMs);
  const gpuHours = (u?.gpuSec ?? 0) / 3600;
  const heldSec = u?.heldSec ?? 0;
  const cost = u?.costMicroUsd ?? 0;
  const replica = j.spec?.labels?.[SERVICE_LABEL] !== undefined;
  return {
    job: j.id,
    team: j.team,
    project: j.spec?.labels?.project ?? '(no project)',
    state: j.state,
    costMicroUsd: cost,
    onDemandMicroUsd: u?.onDemandMicroUsd ?? cost,
    gpuHours,
    spotShare: heldSec > 0 ? u!.spotSec / heldSec : 0,
    ...(replica
      ? { requeues: 0, interruptions: 0, moves: 0, reworkGpuHours: 0, reworkMicroUsd: 0, replicaLosses: requeueCounts(j).requeues }
      : {
          ...requeueCounts(j),
          reworkGpuHours: reworkGpuHours(j),
          reworkMicroUsd: heldSec > 0 ? Math.round((cost * (u!.reworkSec ?? 0)) / heldSec) : 0,
          replicaLosses: 0,
        }),
    reservedMicroUsd: u?.reservedMicroUsd ?? 0,
  };
}

// ---- output ---------------------------------------------------------------------------------

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

export async function reportCommand(flags: ReportFlags, io: Io): Promise<FinOpsReport> {
  if (flags.team !== undefined && !/^[a-z0-9-]{1,32}$/.test(flags.team))
    throw new UsageError(`--team "${flags.team}" is not a team id: lower-case letters, digits and "-", at most 32 characters`);
  const fleet = await openFleet(flags);
  let report: FinOpsReport;
  try {
    report = await buildReport(fleet, flags);
  } finally {
    await fleet.close();
  }
  if (flags.out) {
    const dir = resolve(flags.out);
    mkdirSync(dir, { recursive: true });
    // Its own names: a simulation's folder already holds the simulation's report.html.
    writeFileSync(join(dir, 'finops.html'), reportHtml(report));
    writeFileSync(join(dir, 'finops.csv'), reportCsv(report));
    writeFileSync(join(dir, 'finops.json'), `${JSON.stringify(report, null, 2)}\n`);
  }
  if (flags.json) io.stdout.write(`${JSON.stringify(report, null, 2)}\n`);
  else if (flags.csv) io.stdout.write(reportCsv(report));
  else
    io.stdout.write(
      `${reportText(report)}\n${flags.out ? `\nwritten: ${join(resolve(flags.out), 'finops.html')}, finops.csv, finops.json\n` : ''}`,
    );
  return report;
}
