/**
 * bench:serve: services replayed on real spot availability, SkyServe's protocol by default (30 s
 * ticks, 24 h windows at seeded random offsets, target 3, N_extra 1 for SpotHedge, cold start
 * 120 s, on-demand priced 3× spot). Every folder of SkyPilot-format availability traces given is
 * one trace set (each file a zone); all policies run on the same ticks and windows, beside the
 * optimum (bench/serve/optimal.ts), which knows each window's availability in advance.
 *
 *   npm run bench:serve -- [--traces DIR[,DIR]] [--target N] [--n-extra N] [--cold-start-sec S]
 *                          [--price-ratio K] [--window-hours H] [--repeats R] [--seed S]
 *                          [--objective-wait-sec S] [--json]
 */
import { readdirSync } from 'node:fs';
import { basename, join, resolve } from 'node:path';
import { isMainThread } from 'node:worker_threads';
import { availableParallelism } from 'node:os';
import { Command } from 'commander';
import { loadAvailabilityTrace } from '../cloud/sim/spot-market.ts';
import { SeededRandom } from '../cloud/sim/clock.ts';
import { latencyPercentiles, type QueueModel } from './serve/latency.ts';
import { shareWithinObjective } from '../core/serving/latency.ts';
import { type ServingRun } from './serve/world.ts';
import { replayWindows, type WindowResult } from './serve/windows.ts';
import { inWorkers } from '../cloud/sim/parallel.ts';
import { WARM_VOLUME_MICRO_USD_PER_HOUR } from '../cloud/sim/sim-cloud.ts';

const TICK_SEC = 30;
/** p3.2xlarge on-demand in us-west-2, the shipped catalogue's price ($3.06 an hour). */
const P3_2XL_ON_DEMAND_MICRO_USD_PER_HOUR = 3_060_000;
const DEFAULT_TRACES = new URL('../data/spot/spothedge-gcp1', import.meta.url).pathname;

export interface ServeOptions {
  traces: string;
  target: number;
  nExtra: number;
  coldStartSec: number;
  priceRatio: number;
  windowHours: number;
  repeats: number;
  seed: number;
  /** Mean seconds a replica takes per request (the queue model of bench/serve/latency.ts). */
  serviceSec: number;
  /** Offered load as a share of what the target's replicas can serve. */
  load: number;
  /** The objective: a request waits at most this long for a free replica (the queue model's). */
  objectiveWaitSec: number;
  /** Machines in the warm pool of gpu-fleet-warm's on-demand fallback (0: no such row). */
  warmPool: number;
  /** Seconds from a warm machine's start to a ready replica. */
  warmColdStartSec: number;
  json?: boolean;
  optimal?: boolean;
  /** Worker threads the windows are spread over (1: all in this thread). */
  threads?: number;
}

const num = (v: string) => {
  const n = Number(v);
  if (!Number.isFinite(n) || n < 0) throw new Error(`not a number ≥ 0: ${v}`);
  return n;
};

export const SERVE_DEFAULTS: ServeOptions = {
  traces: DEFAULT_TRACES,
  target: 3,
  nExtra: 1,
  coldStartSec: 120,
  priceRatio: 3,
  windowHours: 24,
  repeats: 10,
  seed: 0,
  serviceSec: 2,
  load: 0.7,
  objectiveWaitSec: 10,
  warmPool: 1,
  warmColdStartSec: 60,
};

function cli(): ServeOptions {
  return new Command()
    .option('--traces <dirs>', 'comma-separated folders of availability traces (one zone per file)', DEFAULT_TRACES)
    .option('--target <n>', 'ready replicas the service needs', num, 3)
    .option('--n-extra <n>', "SpotHedge's spot replicas beyond the target", num, 1)
    .option('--cold-start-sec <s>', 'seconds from launch to ready', num, 120)
    .option('--price-ratio <k>', 'on-demand price ÷ spot price', num, 3)
    .option('--window-hours <h>', 'hours per replayed window', num, 24)
    .option('--repeats <r>', 'windows per trace set, at seeded random offsets', num, 10)
    .option('--seed <s>', 'seed of the offsets and the random choices', num, 0)
    .option('--service-sec <s>', 'latency model: mean seconds a replica takes per request', num, 2)
    .option('--load <r>', "latency model: requests offered, as a share of the target's capacity", num, 0.7)
    .option('--objective-wait-sec <s>', 'the objective: seconds a request may wait for a free replica', num, 10)
    .option('--warm-pool <n>', "machines in the warm pool of gpu-fleet-warm's on-demand fallback (0: no such row)", num, 1)
    .option('--warm-cold-start-sec <s>', 'seconds from a warm machine started to a ready replica', num, 60)
    .option('--json', 'print the rows as JSON')
    .option('--no-optimal', 'leave out the optimum (an integer program per window, about 5 s each)')
    .option('--threads <n>', 'worker threads the windows are spread over (default: every core)', num, availableParallelism())
    .parse()
    .opts<ServeOptions>();
}

export interface ServeRow {
  trace: string;
  policy: string;
  availabilityPct: number;
  costRatio: number;
  shortReplicaMinutes: number;
  coldStarts: number;
  p50LatencyMs: number;
  p99LatencyMs: number;
  /** Requests within the objective (a wait of at most `objectiveWaitSec`), by the queue model of each tick's ready replicas. */
  requestsWithinObjectivePct: number;
}

function emptyRow(trace: string, policy: string): ServeRow {
  return {
    trace,
    policy,
    availabilityPct: 0,
    costRatio: 0,
    shortReplicaMinutes: 0,
    coldStarts: 0,
    p50LatencyMs: 0,
    p99LatencyMs: 0,
    requestsWithinObjectivePct: 0,
  };
}

/** Adds a run's (or a trace set's) figures into a row, weighted (1 ÷ the runs averaged). */
function addInto(
  row: ServeRow,
  r: Pick<ServeRow, 'availabilityPct' | 'costRatio' | 'shortReplicaMinutes' | 'coldStarts'>,
  weight: number,
): void {
  row.availabilityPct += r.availabilityPct * weight;
  row.costRatio += r.costRatio * weight;
  row.shortReplicaMinutes += r.shortReplicaMinutes * weight;
  row.coldStarts += r.coldStarts * weight;
}

function latencyOf(ready: readonly number[], queue: QueueModel): { p50LatencyMs: number; p99LatencyMs: number } {
  const l = latencyPercentiles(ready, queue);
  return { p50LatencyMs: l.p50Ms, p99LatencyMs: l.p99Ms };
}

/** One row per trace set and policy, averaged over the windows; with several sets, "ALL" rows averaging over them. */
export async function benchServe(o: ServeOptions): Promise<ServeRow[]> {
  const rows: ServeRow[] = [];
  for (const dir of o.traces.split(',')) {
    const files = readdirSync(dir)
      .filter((f) => f.endsWith('.json'))
      .sort();
    // Each trace expanded to the run's ticks (a value holds for its whole gap).
    const zones = files.map((f) => {
      const t = loadAvailabilityTrace(join(dir, f));
      const per = Math.max(1, Math.round(t.gapSec / TICK_SEC));
      return t.data.flatMap((v) => new Array<number>(per).fill(v));
    });
    const ticks = Math.round((o.windowHours * 3600) / TICK_SEC);
    const shortest = Math.min(...zones.map((z) => z.length));
    const random = new SeededRandom(o.seed);
    const sums = new Map<string, ServeRow>();
    const readyOf = new Map<string, number[]>();
    const queue: QueueModel = { arrivalPerSec: (o.load * o.target) / o.serviceSec, serviceSec: o.serviceSec, timeoutSec: 60 };
    // The windows are drawn here, in order, so the same seed gives the same windows however many threads replay them.
    const runs: ServingRun[] = [];
    for (let r = 0; r < o.repeats; r++) {
      const offset = shortest > ticks ? random.int(0, shortest - ticks - 1) : 0;
      // The zones in a new order each window, as the paper's runs shuffle them.
      const order = zones.map((z, i) => ({ z, k: random.next(), i })).sort((a, b) => a.k - b.k || a.i - b.i);
      runs.push({
        zones: order.map((x) => x.z),
        ticks,
        tickSec: TICK_SEC,
        offset,
        coldStartTicks: Math.round(o.coldStartSec / TICK_SEC),
        target: o.target,
        nExtra: o.nExtra,
        priceRatio: o.priceRatio,
        seed: o.seed * 1000 + r,
      });
    }
    const threads = Math.max(1, Math.min(o.threads ?? 1, runs.length));
    const chunks = Array.from({ length: threads }, (_, t) =>
      runs.slice(Math.floor((t * runs.length) / threads), Math.floor(((t + 1) * runs.length) / threads)),
    );
    // A waiting warm machine's volume, in spot replica-ticks: the sim's volume price against a p3.2xlarge's on-demand price.
    const volumeCost = (o.priceRatio * WARM_VOLUME_MICRO_USD_PER_HOUR) / P3_2XL_ON_DEMAND_MICRO_USD_PER_HOUR;
    const warmPool =
      o.warmPool > 0 ? { size: o.warmPool, coldStartTicks: Math.max(1, Math.round(o.warmColdStartSec / TICK_SEC)), volumeCost } : undefined;
    const input = (chunk: ServingRun[]) => ({
      runs: chunk,
      target: o.target,
      optimal: o.optimal !== false,
      ...(warmPool ? { warmPool } : {}),
    });
    const perWindow = (
      threads > 1
        ? await inWorkers<ReturnType<typeof input>, WindowResult[][]>(
            new URL('./serve/worker.ts', import.meta.url),
            chunks.map(input),
            threads,
          )
        : [await replayWindows(input(runs))]
    ).flat();
    for (const results of perWindow) {
      for (const { policy, res } of results) {
        const s = sums.get(policy) ?? emptyRow(basename(dir), policy);
        addInto(s, res, 1 / o.repeats);
        sums.set(policy, s);
        const ready = readyOf.get(policy) ?? [];
        ready.push(...res.ready);
        readyOf.set(policy, ready);
      }
    }
    // Latency over every window's ticks at once; every tick has the same load, so the share within the objective is the ticks' mean.
    const objective = { waitSec: o.objectiveWaitSec, replicaRps: 1 / o.serviceSec, concurrency: 1 };
    for (const s of sums.values()) {
      const ready = readyOf.get(s.policy) ?? [];
      Object.assign(s, latencyOf(ready, queue));
      const within = ready.reduce((sum, r) => sum + shareWithinObjective(r, queue.arrivalPerSec, objective), 0);
      s.requestsWithinObjectivePct = ready.length > 0 ? (100 * within) / ready.length : 0;
    }
    rows.push(...sums.values());
  }

  // With more than one trace set: each policy averaged over them, as trace "ALL".
  const sets = new Set(rows.map((r) => r.trace)).size;
  if (sets > 1) {
    const all = new Map<string, ServeRow>();
    for (const r of rows) {
      const a = all.get(r.policy) ?? emptyRow('ALL', r.policy);
      addInto(a, r, 1 / sets);
      a.p50LatencyMs += r.p50LatencyMs / sets;
      a.p99LatencyMs += r.p99LatencyMs / sets;
      a.requestsWithinObjectivePct += r.requestsWithinObjectivePct / sets;
      all.set(r.policy, a);
    }
    rows.push(...all.values());
  }
  return rows;
}

const invokedDirectly = isMainThread && process.argv[1] !== undefined && resolve(process.argv[1]) === import.meta.filename;
if (invokedDirectly) {
  const o = cli();
  const rows = await benchServe(o);
  if (o.json) {
    process.stdout.write(`${JSON.stringify(rows, null, 2)}\n`);
  } else {
    console.log(
      `bench:serve: latency from an M/M/c queue per tick (requests ${o.load} of the target's capacity, ${o.serviceSec} s each, 60 s when too few replicas are ready; in objective: waited ≤ ${o.objectiveWaitSec} s); target ${o.target}, N_extra ${o.nExtra} (spothedge), cold start ${o.coldStartSec} s, on-demand ${o.priceRatio}× spot, ${o.windowHours} h windows × ${o.repeats}, ${TICK_SEC} s ticks, seed ${o.seed}`,
    );
    console.log(
      [
        'trace'.padEnd(20),
        'policy'.padEnd(16),
        'availability'.padStart(12),
        'in objective'.padStart(12),
        'cost (OD=100)'.padStart(14),
        'short repl-min'.padStart(15),
        'cold starts'.padStart(12),
        'p50 / p99 latency'.padStart(18),
      ].join(' '),
    );
    for (const r of rows)
      console.log(
        [
          r.trace.padEnd(20),
          r.policy.padEnd(16),
          `${r.availabilityPct.toFixed(1)}%`.padStart(12),
          `${r.requestsWithinObjectivePct.toFixed(2)}%`.padStart(12),
          (100 * r.costRatio).toFixed(1).padStart(14),
          r.shortReplicaMinutes.toFixed(0).padStart(15),
          r.coldStarts.toFixed(1).padStart(12),
          `${(r.p50LatencyMs / 1000).toFixed(2)} / ${(r.p99LatencyMs / 1000).toFixed(1)} s`.padStart(18),
        ].join(' '),
      );
  }
}
