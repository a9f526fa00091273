import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { erlangC, shareWithinObjective } from '../../core/serving/latency.ts';

/** Erlang C summed term by term, as the textbook writes it (fine for small c). */
function textbookErlangC(c: number, a: number): number {
  let sum = 0;
  let term = 1;
  for (let k = 0; k < c; k++) {
    sum += term;
    term *= a / (k + 1);
  }
  const top = term * (c / (c - a));
  return top / (sum + top);
}

describe('the request-level objective model (M/M/c per tick)', () => {
  it('agrees with the textbook Erlang C, and stays finite for thousands of slots', () => {
    expect(erlangC(1, 0.5)).toBeCloseTo(0.5, 12);
    expect(erlangC(2, 1)).toBeCloseTo(1 / 3, 12);
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 60 }), fc.double({ min: 0.01, max: 0.99, noNaN: true }), (c, rho) => {
        expect(erlangC(c, c * rho)).toBeCloseTo(textbookErlangC(c, c * rho), 9);
      }),
    );
    const big = erlangC(3000, 2900);
    expect(Number.isFinite(big)).toBe(true);
    expect(big).toBeGreaterThan(0);
    expect(big).toBeLessThan(1);
  });

  it('is 1 − C·e^(−(cμ−λ)t) while the replicas keep up, 0 when they cannot, 1 with no load', () => {
    const objective = { waitSec: 2, replicaRps: 1, concurrency: 1 };
    // One replica at half load: half the requests wait, and the wait is Exp(0.5): P(wait > 2) = 0.5·e^(−1).
    expect(shareWithinObjective(1, 0.5, objective)).toBeCloseTo(1 - 0.5 * Math.exp(-1), 12);
    expect(shareWithinObjective(1, 1, objective)).toBe(0);
    expect(shareWithinObjective(0, 0.1, objective)).toBe(0);
    expect(shareWithinObjective(0, 0, objective)).toBe(1);
  });

  it('never falls with more replicas ready, a longer objective or less load', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 20 }),
        fc.double({ min: 0, max: 40, noNaN: true }),
        fc.double({ min: 0.05, max: 10, noNaN: true }),
        fc.integer({ min: 1, max: 64 }),
        (ready, load, waitSec, concurrency) => {
          const o = { waitSec, replicaRps: 2.8, concurrency };
          const here = shareWithinObjective(ready, load, o);
          expect(here).toBeGreaterThanOrEqual(0);
          expect(here).toBeLessThanOrEqual(1);
          expect(shareWithinObjective(ready + 1, load, o)).toBeGreaterThanOrEqual(here - 1e-12);
          expect(shareWithinObjective(ready, load, { ...o, waitSec: waitSec * 2 })).toBeGreaterThanOrEqual(here - 1e-12);
          expect(shareWithinObjective(ready, load / 2, o)).toBeGreaterThanOrEqual(here - 1e-12);
        },
      ),
    );
  });

  it('pools slots: one replica of 16 slots at 70% load keeps most requests from waiting at all', () => {
    const chat = { waitSec: 2, replicaRps: 2.8, concurrency: 16 };
    // 16 slots at 0.7 utilisation: most arrivals find a free slot; the rest wait Exp(0.8/s), what the slots serve beyond the load.
    const pWait = erlangC(16, 2 / (2.8 / 16));
    expect(pWait).toBeLessThan(0.35);
    expect(shareWithinObjective(1, 2, chat)).toBeCloseTo(1 - pWait * Math.exp(-0.8 * 2), 12);
  });
});
