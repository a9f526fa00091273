// bench:spot-model — how well each model of the spot market predicts "a machine launched in this
// pool now is taken back within the hour", walking the shared availability traces forward: at every
// tick each pool is seen up or down (what launches and notices tell the fleet), then every model
// predicts for every pool that is up, then the next hour says what happened. No model sees the
// future: it has learned only from the ticks before.
//
//   npm run bench:spot-model -- [--traces DIR,DIR] [--horizon-min M] [--json]
//
// Models: online (core/spot-model.ts: by age since the pool's last recovery, pools that drop
// together learned), posterior (core/risk.ts, what the planner uses today: the Advisor band's rate
// updated by drops per pool-hour, one rate per pool), advisor (the band's rate alone).
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { Command } from 'commander';
import { wholeNumber } from '../cloud/flags.ts';
import { awsShippedCatalog } from '../cloud/catalog/shipped.ts';
import { poolRatePerHour, priorRatePerHour } from '../core/risk.ts';
import { DEFAULT_SPOT_MODEL_OPTIONS, emptySpotModel, observe, setPoolPrior, survival } from '../core/spot-model.ts';

const SETS = [
  resolve(import.meta.dirname, '../data/spot/availability'),
  resolve(import.meta.dirname, '../../shared/data/spot/skypilot-spot-traces/availability/1-node/aws-10-26-2022'),
  resolve(import.meta.dirname, '../data/spot/spothedge-gcp1'),
];

const MODELS = ['online', 'posterior', 'advisor'] as const;
type ModelName = (typeof MODELS)[number];

interface Pool {
  readonly name: string;
  readonly band?: string;
  readonly up: readonly boolean[];
}

interface TraceSet {
  readonly name: string;
  readonly gapSec: number;
  readonly pools: readonly Pool[];
}

/** The instance type a SkyPilot trace name stands for, by its GPU and count (us-west-2a_v100_8: p3.16xlarge). */
const AWS_TYPES: Readonly<Record<string, string>> = {
  v100_1: 'p3.2xlarge',
  v100_8: 'p3.16xlarge',
  k80_1: 'p2.xlarge',
  k80_8: 'p2.8xlarge',
};

export function loadSet(dir: string): TraceSet {
  const bands = awsShippedCatalog().advisorBand;
  const files = readdirSync(dir)
    .filter((f) => f.endsWith('.json'))
    .sort();
  let gapSec = 0;
  const pools = files.map((f) => {
    const j = JSON.parse(readFileSync(join(dir, f), 'utf8')) as { metadata: { gap_seconds: number }; data: number[] };
    if (gapSec !== 0 && j.metadata.gap_seconds !== gapSec) throw new Error(`${dir}: the traces of one set must share their tick`);
    gapSec = j.metadata.gap_seconds;
    const name = f.replace(/\.json$/, '');
    const zone = name.split('_')[0]!;
    const type = AWS_TYPES[name.slice(zone.length + 1)];
    const band = type ? bands.get(`${zone.slice(0, -1)}/${type}`) : undefined;
    return { name, ...(band ? { band } : {}), up: j.data.map((v) => v > 0) };
  });
  const parts = dir.split('/');
  return { name: parts.at(-1)!, gapSec, pools };
}

export interface Prediction {
  readonly model: ModelName;
  readonly p: number;
  readonly y: 0 | 1;
}

/** Walks one set forward, tick by tick, and returns every model's predictions with what happened. */
export function walk(set: TraceSet, horizonSec: number, options = DEFAULT_SPOT_MODEL_OPTIONS): Prediction[] {
  const ticks = Math.min(...set.pools.map((p) => p.up.length));
  const ahead = Math.max(1, Math.round(horizonSec / set.gapSec));
  const model = emptySpotModel();
  for (const p of set.pools) setPoolPrior(model, p.name, p.band !== undefined ? { band: p.band } : {});
  // The posterior's evidence: drops and up-hours per pool, as the planner's pool history counts them.
  const seen = new Map(set.pools.map((p) => [p.name, { interruptions: 0, exposureHours: 0 }]));
  const out: Prediction[] = [];
  for (let t = 0; t < ticks; t++) {
    const atMs = t * set.gapSec * 1000;
    for (const p of set.pools) {
      if (t > 0 && p.up[t - 1]) {
        const s = seen.get(p.name)!;
        s.exposureHours += set.gapSec / 3600;
        if (!p.up[t]) s.interruptions++;
      }
      observe(model, p.name, p.up[t]!, atMs, options);
    }
    if (t + ahead >= ticks) continue;
    for (const p of set.pools) {
      if (!p.up[t]) continue;
      let y: 0 | 1 = 0;
      for (let k = 1; k <= ahead; k++) if (!p.up[t + k]) y = 1;
      const online = 1 - survival(model, p.name, atMs, horizonSec, options).survival;
      const posterior = 1 - Math.exp((-poolRatePerHour(p.band, seen.get(p.name)) * horizonSec) / 3600);
      const advisor = 1 - Math.exp((-priorRatePerHour(p.band) * horizonSec) / 3600);
      out.push({ model: 'online', p: online, y }, { model: 'posterior', p: posterior, y }, { model: 'advisor', p: advisor, y });
    }
  }
  return out;
}

export interface Score {
  readonly traceSet: string;
  readonly model: ModelName;
  readonly brier: number;
  readonly logLoss: number;
  readonly predictions: number;
  readonly positives: number;
  /** Ten bins of predicted probability: how many, the mean predicted, the share that happened. */
  readonly reliability: readonly { readonly from: number; readonly n: number; readonly predicted: number; readonly observed: number }[];
}

export function score(traceSet: string, model: ModelName, predictions: readonly Prediction[]): Score {
  const mine = predictions.filter((x) => x.model === model);
  const clip = (p: number) => Math.min(1 - 1e-6, Math.max(1e-6, p));
  let brier = 0;
  let logLoss = 0;
  const bins = Array.from({ length: 10 }, (_, i) => ({ from: i / 10, n: 0, predicted: 0, observed: 0 }));
  for (const x of mine) {
    brier += (x.p - x.y) ** 2;
    logLoss -= x.y * Math.log(clip(x.p)) + (1 - x.y) * Math.log(1 - clip(x.p));
    const bin = bins[Math.min(9, Math.floor(x.p * 10))]!;
    bin.n++;
    bin.predicted += x.p;
    bin.observed += x.y;
  }
  const n = Math.max(1, mine.length);
  return {
    traceSet,
    model,
    brier: brier / n,
    logLoss: logLoss / n,
    predictions: mine.length,
    positives: mine.reduce((s, x) => s + x.y, 0),
    reliability: bins.map((b) => ({ ...b, predicted: b.n > 0 ? b.predicted / b.n : 0, observed: b.n > 0 ? b.observed / b.n : 0 })),
  };
}

async function main(): Promise<void> {
  const program = new Command('bench:spot-model')
    .description('calibration of spot-pool survival models on the shared availability traces (predict, then learn)')
    .option('--traces <dirs>', 'comma-separated folders of availability traces, one set each', SETS.join(','))
    .option('--horizon-min <m>', 'the horizon of "taken back within", minutes', wholeNumber('--horizon-min', 1, 24 * 60), 60)
    .option('--json', 'one row per trace set and model: {traceSet, model, brier, logLoss}')
    .parse();
  const o = program.opts<{ traces: string; horizonMin: number; json?: boolean }>();
  const started = performance.now();
  const scores: Score[] = [];
  for (const dir of o.traces.split(',')) {
    if (!existsSync(dir)) {
      process.stderr.write(`bench:spot-model: ${dir} is not here; that set is left out\n`);
      continue;
    }
    const set = loadSet(dir);
    const predictions = walk(set, o.horizonMin * 60);
    for (const m of MODELS) scores.push(score(set.name, m, predictions));
  }
  if (o.json) {
    for (const s of scores)
      process.stdout.write(
        `${JSON.stringify({ traceSet: s.traceSet, model: s.model, brier: round(s.brier), logLoss: round(s.logLoss) })}\n`,
      );
    return;
  }
  const lines = [
    `bench:spot-model: P(a machine launched in the pool now is taken back within ${o.horizonMin} min), walking each set forward (${((performance.now() - started) / 1000).toFixed(1)} s)`,
    '',
    `${'trace set'.padEnd(16)}${'model'.padEnd(11)}${'brier'.padStart(8)}${'log loss'.padStart(10)}${'vs posterior'.padStart(14)}${'predictions'.padStart(13)}${'taken back'.padStart(12)}`,
  ];
  for (const s of scores) {
    const posterior = scores.find((x) => x.traceSet === s.traceSet && x.model === 'posterior')!;
    lines.push(
      `${s.traceSet.padEnd(16)}${s.model.padEnd(11)}${s.brier.toFixed(4).padStart(8)}${s.logLoss.toFixed(4).padStart(10)}${`${(100 * (s.brier / posterior.brier - 1)).toFixed(1)}%`.padStart(14)}${String(s.predictions).padStart(13)}${`${((100 * s.positives) / Math.max(1, s.predictions)).toFixed(1)}%`.padStart(12)}`,
    );
  }
  lines.push('', 'reliability (predicted → observed, predictions in the bin), by set and model:');
  for (const s of scores)
    lines.push(
      `${s.traceSet.padEnd(16)}${s.model.padEnd(11)}${s.reliability
        .filter((b) => b.n > 0)
        .map((b) => `${b.predicted.toFixed(2)}→${b.observed.toFixed(2)} (${b.n})`)
        .join('  ')}`,
    );
  process.stdout.write(`${lines.join('\n')}\n`);
}

const round = (x: number) => Math.round(x * 1e5) / 1e5;

if (process.argv[1] === import.meta.filename) await main();
