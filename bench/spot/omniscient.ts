import type { JobSetup, RunResult } from './sim.ts';

/**
 * The omniscient optimum: with the whole trace known in advance, the cheapest schedule that meets
 * the deadline, by dynamic programming over ticks. The state at a tick boundary is what runs
 * (nothing, spot, on-demand), the changeover it still owes, and the work done, counted in units of
 * gcd(tick, d) seconds (every reachable amount of work is a multiple of it). Each state keeps its
 * least cost, and the spot work of that cheapest path (for the spot / on-demand hours it reports).
 * It obeys the same rules as the online policies: spot only in ticks where it can be had, a
 * changeover for every new machine.
 */

function gcd(a: number, b: number): number {
  while (b) [a, b] = [b, a % b];
  return a;
}

export function omniscient(avail: ArrayLike<boolean>, start: number, gap: number, job: JobSetup): RunResult {
  const d = job.changeoverSec;
  const unit = gcd(gap, d > 0 ? d : gap);
  const W = Math.ceil(job.workSec / unit);
  const gapU = gap / unit;
  const dU = d / unit;
  const k = job.priceRatio;
  const ticks = Math.ceil(job.deadlineSec / gap);
  // Changeover still owed at a boundary: d - j·gap while positive, then 0.
  const owedLevels: number[] = [0];
  for (let o = dU - gapU; o > 0; o -= gapU) owedLevels.push(o);
  const L = owedLevels.length;
  const levelOf = new Map(owedLevels.map((o, i) => [o, i]));
  // States: 0 = nothing; 1..L = spot at owed level; L+1..2L = on-demand at owed level.
  const S = 1 + 2 * L;
  const stride = W + 1;
  let cost = new Float64Array(S * stride).fill(Infinity);
  let spotW = new Float64Array(S * stride);
  let next = new Float64Array(S * stride);
  let nextSpot = new Float64Array(S * stride);
  cost[0 * stride + 0] = 0;
  let best = Infinity;
  let bestSpotWork = 0;
  let bestFinish = Infinity;

  const stateOf = (mode: 1 | 2, owed: number) => (mode === 1 ? 1 : 1 + L) + levelOf.get(owed)!;

  for (let t = 0; t < ticks; t++) {
    next.fill(Infinity);
    const spot = start + t < avail.length ? avail[start + t]! : false;
    const timeLeftU = (job.deadlineSec - t * gap) / unit;
    for (let s = 0; s < S; s++) {
      const mode = s === 0 ? 0 : s <= L ? 1 : 2;
      const owedNow = s === 0 ? 0 : owedLevels[(s - 1) % L]!;
      const base = s * stride;
      for (let w = 0; w < W; w++) {
        const c = cost[base + w]!;
        if (c === Infinity) continue;
        // Even on-demand from now could not finish: prune.
        if (W - w + (mode === 2 ? owedNow : dU) > timeLeftU + 1e-9) continue;
        const sw = spotW[base + w]!;
        // Nothing: free, the work stays.
        if (c < next[w]!) {
          next[w] = c;
          nextSpot[w] = sw;
        }
        for (const m of [1, 2] as const) {
          if (m === 1 && !spot) continue;
          const owed = m === mode ? owedNow : dU;
          const overhead = Math.min(owed, gapU);
          const gain = Math.min(gapU - overhead, W - w);
          const used = overhead + gain;
          const nc = c + used * unit * (m === 1 ? 1 : k);
          const nsw = sw + (m === 1 ? gain : 0);
          if (w + gain >= W) {
            const finish = t * gap + used * unit;
            if (finish <= job.deadlineSec + 1e-9 && nc < best) {
              best = nc;
              bestSpotWork = nsw;
              bestFinish = finish;
            }
            continue;
          }
          const ns = stateOf(m, owed - overhead);
          const idx = ns * stride + w + gain;
          if (nc < next[idx]!) {
            next[idx] = nc;
            nextSpot[idx] = nsw;
          }
        }
      }
    }
    [cost, next] = [next, cost];
    [spotW, nextSpot] = [nextSpot, spotW];
  }
  if (best === Infinity) {
    return { spotWorkSec: 0, onDemandWorkSec: 0, billedSpotSec: 0, billedOnDemandSec: 0, finishSec: Infinity, met: false, cost: Infinity };
  }
  const spotWork = Math.min(job.workSec, bestSpotWork * unit);
  const odWork = job.workSec - spotWork;
  // Billed seconds are not tracked per path; the cost is exact. Split it by the work shares for reporting.
  return {
    spotWorkSec: spotWork,
    onDemandWorkSec: odWork,
    billedSpotSec: NaN,
    billedOnDemandSec: NaN,
    finishSec: bestFinish,
    met: true,
    cost: best,
  };
}
