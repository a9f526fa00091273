/**
 * The figures a simulation's summary is read by, defined once: the terminal summary (simulate.ts)
 * and the HTML report (report-html.ts) both print these, so they cannot disagree.
 */
import type { SimulationSummary } from '../cloud/sim/simulation.ts';
import { formatNumber } from './format.ts';

/** What the services' replicas cost (their share of the machines they ran on). */
export function serviceCostMicroUsd(s: SimulationSummary): number {
  return (s.services ?? []).reduce((sum, x) => sum + x.costMicroUsd, 0);
}

/**
 * The cost of the batch work: the GPU machines less the services' replicas and the warm pools kept for their
 * fallback (the lower bound and the spot floor price batch work only).
 */
export function batchCostMicroUsd(s: SimulationSummary): number {
  return s.costMicroUsd - serviceCostMicroUsd(s) - (s.warmPoolMicroUsd ?? 0);
}

/** All on-demand, the yardstick of every run's `÷ on-demand` on machines alone: the on-demand baseline's machines, else the same machines at on-demand prices. */
export function onDemandYardstick(run: {
  readonly main: { readonly summary: SimulationSummary };
  readonly baselines: readonly { readonly summary: SimulationSummary }[];
}): number {
  const od = onDemandRun(run);
  return od ? od.summary.costMicroUsd : run.main.summary.sameMachinesOnDemandMicroUsd;
}

/**
 * All on-demand's whole bill (machines and checkpoint bytes): the yardstick of the headline ratio.
 * Without an on-demand baseline run, the same machines at on-demand prices plus this run's own bytes.
 */
export function onDemandWholeBill(run: {
  readonly main: { readonly summary: SimulationSummary };
  readonly baselines: readonly { readonly summary: SimulationSummary }[];
}): number {
  const od = onDemandRun(run);
  const s = run.main.summary;
  return od ? od.summary.wholeBillMicroUsd : s.sameMachinesOnDemandMicroUsd + s.checkpointBytes.bill.totalMicroUsd;
}

function onDemandRun(run: {
  readonly main: { readonly summary: SimulationSummary };
  readonly baselines: readonly { readonly summary: SimulationSummary }[];
}): { readonly summary: SimulationSummary } | undefined {
  return run.baselines.find((b) => b.summary.policy === 'on-demand') ?? (run.main.summary.policy === 'on-demand' ? run.main : undefined);
}

/** The parts of the whole bill, in the order the terminal and the HTML report show them. */
export function billParts(s: SimulationSummary): readonly { readonly label: string; readonly microUsd: number }[] {
  const b = s.checkpointBytes;
  const gib = (bytes: number) => `${formatNumber(Math.round(bytes / 2 ** 30))} GiB`;
  return [
    { label: 'GPU machines', microUsd: s.costMicroUsd },
    { label: `checkpoint storage (${formatNumber(Math.round(b.storageGiBHours))} GiB-hours)`, microUsd: b.bill.storageMicroUsd },
    {
      label: `checkpoint network (${gib(b.bytesUploaded)} up, ${gib(b.bytesDownloaded)} down; S3 by ${b.network.s3Path})`,
      microUsd: b.bill.networkMicroUsd,
    },
    {
      label: `checkpoint requests (${formatNumber(b.uploads)} uploads, ${formatNumber(b.downloads)} downloads)`,
      microUsd: b.bill.requestsMicroUsd,
    },
  ];
}

/** The checkpoint bytes' share of the machines' bill, percent. */
export function bytesShareOfGpuPct(s: SimulationSummary): number {
  return s.costMicroUsd > 0 ? (100 * s.checkpointBytes.bill.totalMicroUsd) / s.costMicroUsd : 0;
}

/** `cost ÷ against`, to three decimals, "-" without a yardstick. */
export function ratio(cost: number, against: number): string {
  return against > 0 ? `${(cost / against).toFixed(3)}×` : '-';
}

/** The cost ratios of one run: the whole bill against all on-demand's whole bill; the batch machines against the lower bound and the spot floor. */
export function costRatios(s: SimulationSummary, onDemandWholeBillMicroUsd: number) {
  return {
    onDemand: ratio(s.wholeBillMicroUsd, onDemandWholeBillMicroUsd),
    lowerBound: ratio(batchCostMicroUsd(s), s.lowerBoundCostMicroUsd),
    spotFloor: ratio(batchCostMicroUsd(s), s.spotFloorCostMicroUsd),
  };
}

/** Batch jobs' requeues, "N (interruptions / moves)"; service replicas lost are counted apart (replicasLost). */
export const REQUEUES_LABEL = 'requeues of jobs (interruptions / moves)';
export function requeuesText(s: SimulationSummary): string {
  return `${formatNumber(s.requeues)} (${formatNumber(s.requeues - s.moves)} / ${formatNumber(s.moves)})`;
}

export const USED_LABEL = 'GPU-hours used (jobs and replicas running, all in)';
export const REWORK_LABEL = '  of it, rework of jobs (lost since the last checkpoint)';
export const OVERHEAD_LABEL = '  of it, restoring and writing checkpoints';
export const DEADLINES_LABEL = 'with a deadline (given in the trace)';
export const REPLICAS_LOST_LABEL = 'service replicas lost (started again elsewhere)';

/** Service replicas whose machine was lost under them, over every service. */
export function replicasLost(s: SimulationSummary): number {
  return (s.services ?? []).reduce((sum, x) => sum + x.replicasLost, 0);
}

/** The services table, the same columns in the terminal and the HTML report. */
export const SERVICE_COLUMNS = [
  'service',
  'available',
  'in objective',
  'replica-h need/held (spot)',
  'cost',
  'at on-demand',
  'replicas started/lost',
] as const;

/** One service's cells under {@link SERVICE_COLUMNS} (replica-hours to one decimal; money as the caller writes it). */
export function serviceCells(x: NonNullable<SimulationSummary['services']>[number], money: (microUsd: number) => string): string[] {
  const h = (v: number) => v.toFixed(1);
  return [
    x.id,
    `${x.availabilityPct.toFixed(1)}%`,
    inObjective(x),
    `${h(x.neededReplicaHours)} / ${h(x.replicaHours)} (${h(x.spotReplicaHours)})`,
    money(x.costMicroUsd),
    money(x.onDemandMicroUsd),
    `${formatNumber(x.replicasStarted)} / ${formatNumber(x.replicasLost)}`,
  ];
}

/** A share of requests within the objective, to 0.01% ("-" for a service with no objective). */
function inObjective(x: NonNullable<SimulationSummary['services']>[number] | undefined): string {
  return x?.requestsWithinObjectivePct !== undefined ? `${x.requestsWithinObjectivePct.toFixed(2)}%` : '-';
}

/**
 * Each service of the main run under each policy: the share of ticks it had the replicas its load
 * needed and the share of requests within its objective ("available / in objective").
 */
export function servicesByPolicy(all: readonly SimulationSummary[]): { columns: string[]; rows: string[][] } {
  const ids = (all[0]?.services ?? []).map((x) => x.id);
  return {
    columns: ['policy', ...ids.map((id) => `${id} ticks / requests`)],
    rows: all.map((s) => [
      s.policy,
      ...ids.map((id) => {
        const x = s.services?.find((v) => v.id === id);
        return x ? `${x.availabilityPct.toFixed(1)}% / ${inObjective(x)}` : '-';
      }),
    ]),
  };
}
