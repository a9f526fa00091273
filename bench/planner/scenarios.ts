import { existsSync, readFileSync } from 'node:fs';
import { makeOffering, type Offering, type PriceQuote } from '../../core/catalog.ts';
import type { FleetNode, NodeGroup } from '../../core/fleet.ts';
import { newPendingJob, transition, type Job } from '../../core/job.ts';
import { JobSpecSchema, type JobSpecInput } from '../../core/job-spec.ts';
import { priorRatePerHour } from '../../core/risk.ts';
import { DEFAULT_POLICY, type Snapshot } from '../../core/snapshot.ts';
import type { Team } from '../../core/team.ts';
import { planBaseline } from '../../core/planner/baseline.ts';
import { shippedCatalog } from '../../cloud/catalog/all-shipped.ts';
import { onDemandPrice, regionOfZone, spotPrice } from '../../cloud/catalog/shipped.ts';
import { parseCsv } from '../../cloud/csv.ts';
import { SeededRandom } from '../../cloud/sim/clock.ts';

/**
 * Planner benchmark scenarios from real data: job shapes and runtimes sampled from the GPU
 * traces (Philly: whole GPUs 1–8; Alibaba openb 2023: fractional GPUs; Alibaba DLRM 2025:
 * single-GPU inference), offerings from the shipped AWS and GCP catalogues (instance type ×
 * zone × spot/on-demand, real prices), spot risk from the Spot Advisor bands. Seeded.
 */
export interface ScenarioSpec {
  readonly name: string;
  readonly jobs: number;
  readonly offerings: number;
  readonly liveNodes: number;
  readonly seed: number;
}

export const SCENARIOS: readonly ScenarioSpec[] = [1_000, 10_000, 50_000].flatMap((jobs) =>
  [50, 200, 500].flatMap((offerings) =>
    [0, 1_000].map((liveNodes) => ({
      name: scenarioName(jobs, offerings, liveNodes),
      jobs,
      offerings,
      liveNodes,
      seed: 42,
    })),
  ),
);

/** The name a scenario goes by: `10k-jobs/200-offerings/1000-nodes`. */
export function scenarioName(jobs: number, offerings: number, liveNodes: number): string {
  return `${jobs / 1000}k-jobs/${offerings}-offerings/${liveNodes}-nodes`;
}

/** The scenario a name stands for (the same seed as the fixed set), or undefined for a name of another shape. */
export function scenarioNamed(name: string): ScenarioSpec | undefined {
  const m = /^(\d+(?:\.\d+)?)k-jobs\/(\d+)-offerings\/(\d+)-nodes$/.exec(name);
  if (!m) return undefined;
  const jobs = Math.round(Number(m[1]) * 1000);
  return { name, jobs, offerings: Number(m[2]), liveNodes: Number(m[3]), seed: 42 };
}

/** The axis a sweep scenario lies on: jobs, live nodes, offerings, or the corner of all three. */
export type SweepAxis = 'jobs' | 'nodes' | 'offerings' | 'corner';

/**
 * The scale sweep: one axis at a time around 10k jobs × 200 offerings × 1,000 live nodes
 * (jobs 1k → 100k, nodes 100 → 10,000, offerings 50 → 500), and the corner 100k × 500 × 10,000.
 */
export const SWEEP: readonly (ScenarioSpec & { readonly axes: readonly SweepAxis[] })[] = (() => {
  const points: [number, number, number, SweepAxis][] = [
    ...[1_000, 10_000, 100_000].map((j) => [j, 200, 1_000, 'jobs'] as [number, number, number, SweepAxis]),
    ...[100, 1_000, 10_000].map((n) => [10_000, 200, n, 'nodes'] as [number, number, number, SweepAxis]),
    ...[50, 200, 500].map((o) => [10_000, o, 1_000, 'offerings'] as [number, number, number, SweepAxis]),
    [100_000, 500, 10_000, 'corner'],
  ];
  const byName = new Map<string, ScenarioSpec & { axes: SweepAxis[] }>();
  for (const [jobs, offerings, liveNodes, axis] of points) {
    const name = scenarioName(jobs, offerings, liveNodes);
    const spec = byName.get(name) ?? { ...scenarioNamed(name)!, axes: [] };
    spec.axes.push(axis);
    byName.set(name, spec);
  }
  return [...byName.values()];
})();

export const T0 = Date.UTC(2026, 10, 30, 12, 0, 0);

interface TraceRow {
  gpus: number;
  durationSec: number;
}

function traceDir(): string {
  const shared = new URL('../../../shared/data/traces/', import.meta.url);
  return existsSync(shared) ? shared.pathname : new URL('../../data/traces/', import.meta.url).pathname;
}

let traceCache: TraceRow[][] | undefined;
/** Rows of each available trace with a duration and GPUs. */
function traceRows(): TraceRow[][] {
  if (traceCache) return traceCache;
  const dir = traceDir();
  const files = [
    'philly-vc6214e9-sample.csv',
    'alibaba-openb2023-sample.csv',
    'alibaba-dlrm2025-sample.csv',
    'philly-6214e9-48h.csv',
  ].filter((f) => existsSync(`${dir}${f}`));
  traceCache = files.map((f) =>
    parseCsv(readFileSync(`${dir}${f}`, 'utf8'))
      .map((r) => ({ gpus: Number(r.gpus), durationSec: Number(r.duration_s) }))
      .filter((r) => Number.isFinite(r.gpus) && r.gpus > 0 && Number.isFinite(r.durationSec) && r.durationSec > 0),
  );
  return traceCache;
}

/** Every offering of the shipped catalogues with a price: AWS types in us-east-1/us-west-2 zones, GCP machine types in their priced zones. */
export function allOfferings(): { offering: Offering; price: number; onDemand: number; band?: string }[] {
  const cat = shippedCatalog();
  const out: { offering: Offering; price: number; onDemand: number; band?: string }[] = [];
  const awsZones = ['us-east-1a', 'us-east-1b', 'us-east-1c', 'us-west-2a', 'us-west-2b', 'us-west-2c'];
  for (const type of [...cat.instanceTypes.values()].sort((a, b) => (a.name < b.name ? -1 : 1))) {
    const zones = type.cloud === 'aws' ? awsZones : (cat.gcpZones.get(type.name) ?? []);
    for (const zone of zones) {
      for (const capacityType of ['on-demand', 'spot'] as const) {
        const o = makeOffering({ cloud: type.cloud, region: regionOfZone(type.cloud, zone), zone, instanceType: type.name, capacityType });
        const od = onDemandPrice(cat, o);
        const price = capacityType === 'spot' ? spotPrice(cat, o) : od;
        if (od === undefined || price === undefined || price <= 0) continue;
        const band = cat.advisorBand.get(`${o.region}/${type.name}`);
        out.push({ offering: o, price, onDemand: od, ...(band ? { band } : {}) });
      }
    }
  }
  return out;
}

const MODEL_CHOICES: readonly (readonly string[] | undefined)[] = [
  undefined,
  undefined,
  undefined,
  ['A100-40GB', 'A100-80GB'],
  ['A100-40GB', 'A100-80GB'],
  ['H100'],
  ['A10G', 'L4'],
  ['A10G', 'L4'],
  ['V100'],
  ['T4', 'L4'],
];

export function buildScenario(spec: ScenarioSpec): Snapshot {
  const rng = new SeededRandom(spec.seed * 1_000_003 + spec.jobs + spec.offerings * 7 + spec.liveNodes * 13);
  const cat = shippedCatalog();
  // Offerings: a seeded sample of the catalogue, always including a few of each GPU family so every job class has somewhere to go.
  const pool = allOfferings();
  const shuffled = pool
    .map((x) => ({ x, k: rng.next() }))
    .sort((a, b) => a.k - b.k)
    .map((e) => e.x);
  const chosen = shuffled.slice(0, Math.min(spec.offerings, shuffled.length));
  const groups: NodeGroup[] = [];
  const prices = new Map<string, PriceQuote>();
  const risk = new Map<string, number>();
  chosen.forEach(({ offering, price, onDemand, band }, i) => {
    const type = cat.instanceTypes.get(offering.instanceType)!;
    const mig = (type.gpuModel === 'A100-80GB' || type.gpuModel === 'H100' || type.gpuModel === 'A100-40GB') && i % 3 === 0;
    groups.push({
      id: `g${String(i).padStart(3, '0')}`,
      cloud: offering.cloud,
      region: offering.region,
      offerings: [offering],
      minSize: 0,
      maxSize: 100_000,
      desiredCapacity: 0,
      ...(mig ? { migEnabled: true } : {}),
    });
    prices.set(offering.id, {
      offeringId: offering.id,
      priceMicroUsdPerHour: price,
      onDemandMicroUsdPerHour: onDemand,
      source: 'catalogue',
    });
    if (offering.capacityType === 'spot') risk.set(offering.id, priorRatePerHour(band));
  });

  // Jobs from the traces.
  const traces = traceRows();
  const teams = Array.from({ length: 8 }, (_, i) => `team-${i}`);
  const jobs: Job[] = [];
  for (let i = 0; i < spec.jobs; i++) {
    const rows = traces[i % traces.length]!;
    const row = rows[rng.int(0, rows.length - 1)]!;
    const input = jobInput(row, rng);
    const team = teams[rng.int(0, teams.length - 1)]!;
    const spec2 = JobSpecSchema.parse(input);
    jobs.push(newPendingJob({ id: `${team}.j${i}`, team, spec: spec2, submittedAtMs: T0 - rng.int(0, 3_600_000) }));
  }

  // Live nodes: a seeded share of the chosen offerings, partly used by running jobs of the same kinds.
  const nodes: FleetNode[] = [];
  const active: Job[] = [];
  const desired = new Map<string, number>();
  if (spec.liveNodes > 0) {
    for (let n = 0; n < spec.liveNodes; n++) {
      const gi = rng.int(0, groups.length - 1);
      const g = groups[gi]!;
      const o = g.offerings[0]!;
      const type = cat.instanceTypes.get(o.instanceType)!;
      const id = `i-${String(n).padStart(6, '0')}`;
      const gpus = Array.from({ length: type.gpuCount }, (_, index) => ({
        index,
        model: type.gpuModel,
        memoryMiB: type.gpuMemoryMiB,
        ...(g.migEnabled ? { migEnabled: true } : {}),
      }));
      nodes.push({
        instance: {
          id,
          groupId: g.id,
          cloud: o.cloud,
          region: o.region,
          zone: o.zone,
          instanceType: o.instanceType,
          capacityType: o.capacityType,
          state: 'running',
          launchedAtMs: T0 - 7_200_000,
        },
        record: { instanceId: id, groupId: g.id, registeredAtMs: T0 - 7_000_000, lastHeartbeatAtMs: T0, healthy: true, gpus },
        schedulable: true,
      });
      desired.set(g.id, (desired.get(g.id) ?? 0) + 1);
    }
    // Fill about 70% of the fleet with running work, placed by the planner itself on a snapshot of only those jobs.
    const filler: Job[] = [];
    const fleetGpus = nodes.reduce((s, n) => s + n.record!.gpus.length, 0);
    let filled = 0;
    for (let i = 0; filled < fleetGpus * 0.7 && i < fleetGpus * 4; i++) {
      const rows = traces[i % traces.length]!;
      const input = jobInput(rows[rng.int(0, rows.length - 1)]!, rng);
      const team = teams[rng.int(0, teams.length - 1)]!;
      const job = newPendingJob({ id: `${team}.running${i}`, team, spec: JobSpecSchema.parse(input), submittedAtMs: T0 - 7_000_000 });
      filler.push(job);
      filled += input.gpu.kind === 'whole' ? input.gpu.count * (input.nodes ?? 1) : 0.3;
    }
    const g2 = groups.map((g) => ({ ...g, desiredCapacity: desired.get(g.id) ?? 0, maxSize: desired.get(g.id) ?? 0 }));
    // Placed with the baseline planner, so the scenario does not move when the planner under test changes.
    const seeded = planBaseline({
      ...baseSnapshot(),
      groups: g2,
      nodes,
      pendingJobs: filler,
      prices,
      poolRiskPerHour: risk,
      teams: teamMap(teams),
      instanceTypes: cat.instanceTypes,
      policy: { ...DEFAULT_POLICY, consolidate: false },
    });
    const fillerById = new Map(filler.map((j) => [j.id, j]));
    for (const a of seeded.actions) {
      if (a.kind !== 'place') continue;
      const job = fillerById.get(a.jobId)!;
      const placed = transition(job, { type: 'place', attempt: 1, placement: a.placement }, T0 - 6_000_000);
      if (!placed.ok) continue;
      const started = transition(placed.job, { type: 'start', attempt: 1 }, T0 - 6_000_000);
      if (started.ok) active.push(started.job);
    }
  }
  return {
    ...baseSnapshot(),
    pendingJobs: jobs,
    activeJobs: active,
    groups: groups.map((g) => ({ ...g, desiredCapacity: desired.get(g.id) ?? 0, maxSize: Math.max(g.maxSize, desired.get(g.id) ?? 0) })),
    nodes,
    instanceTypes: cat.instanceTypes,
    prices,
    poolRiskPerHour: risk,
    teams: teamMap(teams),
  };
}

function baseSnapshot(): Snapshot {
  return {
    nowMs: T0,
    pendingJobs: [],
    activeJobs: [],
    groups: [],
    nodes: [],
    instanceTypes: new Map(),
    prices: new Map(),
    poolRiskPerHour: new Map(),
    unavailableUntilMs: new Map(),
    teams: new Map(),
    spendMicroUsd: new Map(),
    policy: DEFAULT_POLICY,
  };
}

function teamMap(teams: readonly string[]): Map<string, Team> {
  return new Map(
    teams.map((t, i) => [
      t,
      {
        id: t,
        weight: 1 + (i % 3),
        tagProblems: [],
        budget: { amountMicroUsd: 1e15, period: 'monthly', action: 'alert', alertAtPct: [100] },
      },
    ]),
  );
}

function jobInput(row: TraceRow, rng: SeededRandom): JobSpecInput & { gpu: NonNullable<JobSpecInput['gpu']> } {
  const runtime = Math.max(60, Math.min(90 * 86_400, Math.round(row.durationSec)));
  const interruptible = rng.next() < 0.75;
  const checkpoint = interruptible && rng.next() < 0.6 ? { intervalSec: 600 } : undefined;
  const priority = rng.next() < 0.7 ? 100 : rng.next() < 0.67 ? 500 : 900;
  const r = rng.next();
  let gpu: JobSpecInput['gpu'];
  let nodes = 1;
  if (r < 0.03) {
    gpu = { kind: 'mig', profile: rng.next() < 0.6 ? '1g.10gb' : '3g.40gb' };
  } else if (row.gpus < 1) {
    const milli = Math.max(50, Math.min(950, Math.round(row.gpus * 1000)));
    const models = rng.next() < 0.5 ? ['T4', 'A10G', 'L4'] : undefined;
    gpu = {
      kind: 'fraction',
      milliGpu: milli,
      memoryMiB: Math.max(1024, Math.round((milli / 1000) * 16_384)),
      ...(models ? { models } : {}),
    };
  } else {
    const count = Math.min(8, Math.round(row.gpus));
    if (row.gpus > 8) nodes = Math.ceil(row.gpus / 8);
    const models = MODEL_CHOICES[rng.int(0, MODEL_CHOICES.length - 1)];
    gpu = { kind: 'whole', count: row.gpus > 8 ? 8 : count, ...(models ? { models: [...models] } : {}) };
  }
  return {
    image: 'bench/job:1',
    command: ['run'],
    gpu,
    nodes,
    interruptible,
    priority,
    expectedRuntimeSec: runtime,
    ...(checkpoint ? { checkpoint } : {}),
  };
}
