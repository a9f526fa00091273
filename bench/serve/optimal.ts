/**
 * The optimum of a serving window, as SkyServe's evaluation defines it: the least-cost holdings,
 * knowing the whole window's spot availability in advance, that keep at least `target` ready
 * replicas at every scored tick (on-demand is always given, so every tick can be covered). An
 * integer program solved by HiGHS, in the world of bench/serve/world.ts:
 *
 *   s[t,z] ∈ {0..avail[z,t]} spot held, d[t] ≥ 0 on-demand held (integers)
 *   r[t,z] ≤ s[u,z], e[t] ≤ d[u] for u in t−c..t         (ready: held through the cold start)
 *   Σ_z r[t,z] + e[t] ≥ target                             for every scored tick t ≥ c
 *   minimise Σ_{t ≥ c} Σ_z s[t,z] + k·d[t]
 */
import highsModule, { type Highs } from 'highs';
import type { ServingRun } from './world.ts';

// highs is CommonJS; under NodeNext its default import is the loader function at run time.
const loadHighs = highsModule as unknown as () => Promise<Highs>;
let highs: Highs | undefined;

export interface OptimalResult {
  readonly availabilityPct: number;
  readonly costRatio: number;
  /** Replicas started over the window (a rise in what a zone, or on-demand, holds). */
  readonly coldStarts: number;
  readonly solveMs: number;
  /** HiGHS's relative gap at the end (0 when proven optimal). */
  readonly gap: number;
}

export async function optimalServing(run: ServingRun, options: { timeLimitSec?: number; mipGap?: number } = {}): Promise<OptimalResult> {
  highs ??= await loadHighs();
  const t0 = performance.now();
  const c = run.coldStartTicks;
  const avail = (z: number, t: number) => {
    const trace = run.zones[z]!;
    return trace[(t + run.offset) % trace.length]!;
  };
  const zones = run.zones.map((_, z) => z).filter((z) => Array.from({ length: run.ticks }, (_, t) => avail(z, t)).some((v) => v > 0));
  const obj: string[] = [];
  const rows: string[] = [];
  const bounds: string[] = [];
  const generals: string[] = [];
  for (let t = 0; t < run.ticks; t++) {
    for (const z of zones) {
      generals.push(`s${t}_${z}`);
      bounds.push(` 0 <= s${t}_${z} <= ${avail(z, t)}`);
      if (t >= c) obj.push(`s${t}_${z}`);
    }
    generals.push(`d${t}`);
    bounds.push(` 0 <= d${t} <= ${run.target}`);
    if (t >= c) obj.push(`${run.priceRatio} d${t}`);
  }
  for (let t = c; t < run.ticks; t++) {
    const cover = [`e${t}`];
    for (const z of zones) {
      cover.push(`r${t}_${z}`);
      for (let u = t - c; u <= t; u++) rows.push(` r${t}_${z} - s${u}_${z} <= 0`);
    }
    for (let u = t - c; u <= t; u++) rows.push(` e${t} - d${u} <= 0`);
    rows.push(` cover${t}: ${cover.join(' + ')} >= ${run.target}`);
  }
  const lp = [
    'Minimize',
    ` cost: ${obj.join(' + ')}`,
    'Subject To',
    ...rows,
    'Bounds',
    ...bounds,
    'Generals',
    ` ${generals.join(' ')}`,
    'End',
  ].join('\n');
  const gapWanted = options.mipGap ?? 1e-4;
  const result = highs.solve(lp, {
    output_flag: false,
    mip_rel_gap: gapWanted,
    ...(options.timeLimitSec ? { time_limit: options.timeLimitSec } : {}),
  });
  if (result.Status !== 'Optimal' && result.Status !== 'Time limit reached')
    throw new Error(`the serving optimum ended with status ${result.Status}`);
  const scored = run.ticks - c;
  const value = (name: string) => Math.round((result.Columns[name] as { Primal?: number } | undefined)?.Primal ?? 0);
  let coldStarts = 0;
  for (let t = 0; t < run.ticks; t++) {
    for (const z of zones) coldStarts += Math.max(0, value(`s${t}_${z}`) - (t > 0 ? value(`s${t - 1}_${z}`) : 0));
    coldStarts += Math.max(0, value(`d${t}`) - (t > 0 ? value(`d${t - 1}`) : 0));
  }
  return {
    availabilityPct: 100,
    coldStarts,
    costRatio: result.ObjectiveValue / (run.target * run.priceRatio * scored),
    solveMs: performance.now() - t0,
    gap: result.Status === 'Optimal' ? 0 : Number.NaN,
  };
}
