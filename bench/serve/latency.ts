import { erlangC } from '../../core/serving/latency.ts';

/**
 * Request latency from the ready replicas of each tick, with an M/M/c queue (Erlang C) per tick:
 * requests arrive as a Poisson process at `arrivalPerSec`; a replica serves one request at a time,
 * each taking an exponential time of mean `serviceSec` (continuous batching is left out, so this
 * is a conservative model of a replica's throughput). At a tick whose ready replicas cannot keep
 * up (c·μ ≤ λ), or that has none, every request there counts as `timeoutSec`. The latency
 * distribution is the mixture over ticks (every tick gets the same arrival rate).
 */

export interface QueueModel {
  readonly arrivalPerSec: number;
  readonly serviceSec: number;
  readonly timeoutSec: number;
}

/** P(response time ≤ t) at one tick: waiting (0 with prob 1 − C, else Exp(cμ − λ)) plus an Exp(μ) service. */
function cdfAt(t: number, c: number, m: QueueModel): number {
  const mu = 1 / m.serviceSec;
  const lambda = m.arrivalPerSec;
  if (c <= 0 || c * mu <= lambda) return t >= m.timeoutSec ? 1 : 0;
  const pWait = erlangC(c, lambda / mu);
  const theta = c * mu - lambda;
  const service = 1 - Math.exp(-mu * t);
  // Exp(θ) + Exp(μ): the hypoexponential CDF (θ ≠ μ), or Erlang-2 when they are equal.
  const waitedThenServed =
    Math.abs(theta - mu) < 1e-12
      ? 1 - Math.exp(-mu * t) * (1 + mu * t)
      : 1 - (theta * Math.exp(-mu * t) - mu * Math.exp(-theta * t)) / (theta - mu);
  return (1 - pWait) * service + pWait * waitedThenServed;
}

/** p50 and p99 of the response time over the ticks' ready replica counts, in milliseconds. */
export function latencyPercentiles(ready: readonly number[], m: QueueModel): { p50Ms: number; p99Ms: number } {
  const counts = new Map<number, number>();
  for (const c of ready) counts.set(c, (counts.get(c) ?? 0) + 1);
  const n = ready.length;
  const cdf = (t: number) => {
    let s = 0;
    for (const [c, k] of counts) s += k * cdfAt(t, c, m);
    return s / Math.max(1, n);
  };
  const quantile = (q: number) => {
    let lo = 0;
    let hi = m.timeoutSec;
    if (cdf(hi) < q) return hi;
    for (let i = 0; i < 60; i++) {
      const mid = (lo + hi) / 2;
      if (cdf(mid) >= q) hi = mid;
      else lo = mid;
    }
    return hi;
  };
  return { p50Ms: Math.round(quantile(0.5) * 1000), p99Ms: Math.round(quantile(0.99) * 1000) };
}
