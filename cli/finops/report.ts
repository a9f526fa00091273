import { committedCostMicroUsd } from '../../core/cost-model.ts';
import { JOB_STATES, ACTIVE_STATES, requeueCounts, reworkGpuHours, usageSoFar, type Job } from '../../core/job.ts';
import { SERVICE_LABEL } from '../../core/serving/service.ts';
import { dayStartMs, reportPeriod, type ReportPeriod } from '../../core/period.ts';
import { BYTES_DAY_PERIOD_PREFIX, DAY_PERIOD_PREFIX, IDLE_TEAM, RESERVED_UNUSED_PREFIX } from '../../core/services/accrual.ts';
import { byteBillsByJob, heldBytesAt, storeSiteOf, type ByteBill, type ByteLog } from '../../core/bytes.ts';
import { messageOf, UsageError } from '../../core/errors.ts';
import type { BucketBytes, Fleet, FleetFlags } from '../fleet.ts';
import { money } from '../format.ts';
import type { GpuRequest } from '../../core/gpu.ts';
import {
  describeShape,
  recommendShape,
  rightsizeFamily,
  runOf,
  type GpuOffers,
  type RightsizeRun,
  type ShapeKind,
} from '../../core/rightsizing.ts';
import { shippedCatalog } from '../../cloud/catalog/all-shipped.ts';
import { gpuOffers } from '../../cloud/catalog/shipped.ts';

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
