import { tickWork, type JobSetup, type RunResult } from './sim.ts';

/**
 * A reference line, not a policy one could deploy: the expected-cost-optimal policy for a
 * semi-Markov model of availability whose hazards (the chance that a spell of availability, or
 * an outage, ends after it has lasted a ticks, a = 1…A) are fitted on the whole trace window,
 * future included. It shows how far a model-based policy can go when its model is as good as it
 * gets; gpu-fleet's online policy has no such knowledge.
 *
 * Work is counted in units of gcd(tick, d); the state is (work left, what runs with the changeover
 * it owes, whether spot can be had and for how long it has been so).
 */

export const SEMI_MARKOV_AGES = 6;

export interface Hazards {
  readonly up: readonly number[];
  readonly down: readonly number[];
}

export function fitHazards(avail: ArrayLike<boolean>, ages = SEMI_MARKOV_AGES): Hazards {
  const endUp = new Array<number>(ages).fill(1);
  const atUp = new Array<number>(ages).fill(2);
  const endDown = new Array<number>(ages).fill(1);
  const atDown = new Array<number>(ages).fill(2);
  let age = 1;
  for (let i = 1; i < avail.length; i++) {
    const a = Math.min(age, ages) - 1;
    if (avail[i - 1]) {
      atUp[a]!++;
      if (!avail[i]) endUp[a]!++;
    } else {
      atDown[a]!++;
      if (avail[i]) endDown[a]!++;
    }
    age = avail[i] === avail[i - 1] ? age + 1 : 1;
  }
  return { up: endUp.map((e, i) => e / atUp[i]!), down: endDown.map((e, i) => e / atDown[i]!) };
}

function gcd(a: number, b: number): number {
  while (b) [a, b] = [b, a % b];
  return a;
}

interface Solved {
  readonly actions: Uint8Array;
  readonly unit: number;
  readonly W: number;
  readonly T: number;
  readonly L: number;
  readonly owedLevels: readonly number[];
}

export function solveSemiMarkov(job: JobSetup, gap: number, hz: Hazards): Solved {
  const A = hz.up.length;
  const d = job.changeoverSec;
  const unit = gcd(gap, d > 0 ? d : gap);
  const W = Math.ceil(job.workSec / unit);
  const gapU = gap / unit;
  const dU = d / unit;
  const T = Math.floor(job.deadlineSec / gap);
  const owedLevels: number[] = [0];
  for (let o = dU - gapU; o > 0; o -= gapU) owedLevels.push(o);
  const L = owedLevels.length;
  const S = 1 + 2 * L;
  const AS = 2 * A;
  const stateOf = (m: number, owed: number) => (m === 0 ? 0 : (m === 1 ? 1 : 1 + L) + owedLevels.indexOf(owed));
  const size = (W + 1) * S * AS;
  let next = new Float64Array(size);
  let cur = new Float64Array(size);
  const actions = new Uint8Array(T * size);
  for (let w = 0; w <= W; w++) for (let s = 0; s < S; s++) for (let a = 0; a < AS; a++) next[(w * S + s) * AS + a] = w === 0 ? 0 : 1e15;
  for (let t = T - 1; t >= 0; t--) {
    for (let w = 0; w <= W; w++) {
      for (let s = 0; s < S; s++) {
        const mode = s === 0 ? 0 : s <= L ? 1 : 2;
        const owedNow = s === 0 ? 0 : owedLevels[(s - 1) % L]!;
        for (let av = 0; av < AS; av++) {
          const idx = (w * S + s) * AS + av;
          if (w === 0) {
            cur[idx] = 0;
            continue;
          }
          const spot = av >= A;
          const age = (av % A) + 1;
          const pEnd = spot ? hz.up[age - 1]! : hz.down[age - 1]!;
          const same = (spot ? A : 0) + Math.min(age, A - 1);
          const flip = spot ? 0 : A;
          let best = Infinity;
          let bestA = 2;
          for (let a = 0; a < 3; a++) {
            if (a === 1 && !spot) continue;
            let nw = w;
            let ns = 0;
            let cost = 0;
            if (a !== 0) {
              const owed = a === mode ? owedNow : dU;
              const ov = Math.min(owed, gapU);
              const gain = Math.min(gapU - ov, w);
              cost = (ov + gain) * unit * (a === 1 ? 1 : job.priceRatio);
              nw = w - gain;
              ns = nw === 0 ? 0 : stateOf(a, owed - ov);
            }
            const base = (nw * S + ns) * AS;
            const v = cost + (1 - pEnd) * next[base + same]! + pEnd * next[base + flip]!;
            if (v < best - 1e-9) {
              best = v;
              bestA = a;
            }
          }
          cur[idx] = Math.min(best, 1e15);
          actions[t * size + idx] = bestA;
        }
      }
    }
    [cur, next] = [next, cur];
  }
  return { actions, unit, W, T, L, owedLevels };
}

/** Runs the solved policy on the trace from `start`, with the simulator's exact accounting. */
export function runSemiMarkov(
  solved: Solved,
  hzAges: number,
  avail: ArrayLike<boolean>,
  start: number,
  gap: number,
  job: JobSetup,
): RunResult {
  const { actions, unit, W, T, L, owedLevels } = solved;
  const S = 1 + 2 * L;
  const AS = 2 * hzAges;
  const size = (W + 1) * S * AS;
  let mode = 0;
  let owed = 0;
  let done = 0;
  let age = 1;
  let spotW = 0;
  let odW = 0;
  let billedS = 0;
  let billedO = 0;
  for (let i = 0; ; i++) {
    const spot = start + i < avail.length ? avail[start + i]! : false;
    if (i > 0) age = spot === (start + i - 1 < avail.length ? avail[start + i - 1]! : false) ? age + 1 : 1;
    const w = Math.max(0, Math.ceil((job.workSec - done) / unit - 1e-9));
    const owedU = Math.round(owed / unit);
    const s = mode === 0 ? 0 : (mode === 1 ? 1 : 1 + L) + Math.max(0, owedLevels.indexOf(owedU));
    const av = (spot ? hzAges : 0) + Math.min(age, hzAges) - 1;
    let a = i < T ? actions[i * size + (w * S + s) * AS + av]! : 2;
    if (a === 1 && !spot) a = 0;
    if (a !== mode && a !== 0) owed = job.changeoverSec;
    if (a === 0) owed = 0;
    mode = a;
    if (mode !== 0) {
      const t = tickWork(gap, owed, job.workSec - done);
      owed = t.owedAfter;
      done += t.work;
      if (mode === 1) {
        spotW += t.work;
        billedS += t.used;
      } else {
        odW += t.work;
        billedO += t.used;
      }
      if (done >= job.workSec - 1e-9) {
        const finish = i * gap + t.used;
        return {
          spotWorkSec: spotW,
          onDemandWorkSec: odW,
          billedSpotSec: billedS,
          billedOnDemandSec: billedO,
          finishSec: finish,
          met: finish <= job.deadlineSec + 1e-9,
          cost: billedS + job.priceRatio * billedO,
        };
      }
    }
    if (i > T * 4 + 10_000)
      return {
        spotWorkSec: spotW,
        onDemandWorkSec: odW,
        billedSpotSec: billedS,
        billedOnDemandSec: billedO,
        finishSec: Infinity,
        met: false,
        cost: billedS + job.priceRatio * billedO,
      };
  }
}
