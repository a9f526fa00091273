import { describe, expect, it } from 'vitest';
import { HPA_BEHAVIOUR, scale, SKYSERVE_BEHAVIOUR, type Recommendation } from '../../core/serving/autoscale.ts';

const T = 1_800_000_000_000;
const hpa = { ...HPA_BEHAVIOUR, minReplicas: 1, maxReplicas: 10 };
const waiting = [{ metric: 'waiting-requests', perReplica: 6 }] as const;

describe('service autoscaling (HPA semantics)', () => {
  it('wants ceil(current × observed ÷ target) replicas, and says why', () => {
    const d = scale(waiting, hpa, { nowMs: T, current: 4, observed: { 'waiting-requests': 9 }, history: [] });
    expect(d.replicas).toBe(6);
    expect(d.reason).toBe('4 → 6: 9 waiting requests per replica against a target of 6');
  });

  it('changes nothing while the metric is within the tolerance of its target', () => {
    const d = scale(waiting, hpa, { nowMs: T, current: 4, observed: { 'waiting-requests': 6.5 }, history: [] });
    expect(d.replicas).toBe(4);
    expect(d.reason).toBe('4 → 4: 6.5 waiting requests per replica against a target of 6 (within 10%)');
  });

  it('takes the largest count over several metrics', () => {
    const targets = [...waiting, { metric: 'requests-per-second', perReplica: 10 }] as const;
    const d = scale(targets, hpa, { nowMs: T, current: 2, observed: { 'waiting-requests': 3, 'requests-per-second': 25 }, history: [] });
    expect(d.replicas).toBe(5);
    expect(d.reason).toMatch(/^2 → 5: 25 requests per second per replica against a target of 10$/);
  });

  it('scales down only to the highest recommendation of the stabilisation window', () => {
    const history: Recommendation[] = [
      { atMs: T - 400_000, replicas: 9 }, // older than the 300 s window: forgotten
      { atMs: T - 200_000, replicas: 5 },
    ];
    const d = scale(waiting, hpa, { nowMs: T, current: 6, observed: { 'waiting-requests': 3 }, history });
    expect(d.recommendation).toBe(3);
    expect(d.replicas).toBe(5);
    expect(d.reason).toMatch(/; down to 3 once it holds for 300 s$/);
    expect(d.history.map((h) => h.replicas)).toEqual([5, 3]);
  });

  it("with SkyServe's delays, scales up only once the rise has held for the delay", () => {
    const sky = { ...SKYSERVE_BEHAVIOUR, minReplicas: 1, maxReplicas: 10 };
    let history: readonly Recommendation[] = [{ atMs: T - 60_000, replicas: 4 }];
    let d = scale(waiting, sky, { nowMs: T, current: 4, observed: { 'waiting-requests': 12 }, history });
    expect(d.replicas).toBe(4);
    expect(d.reason).toMatch(/up to 8 once it holds for 300 s/);
    history = d.history;
    for (let s = 60; s <= 300; s += 60) {
      d = scale(waiting, sky, { nowMs: T + s * 1000, current: 4, observed: { 'waiting-requests': 12 }, history });
      history = d.history;
    }
    expect(d.replicas).toBe(8);
  });

  it('stays within min and max, grows from zero on any load, and a team limit holds growth with its reason', () => {
    const bounded = { ...hpa, minReplicas: 2, maxReplicas: 5 };
    expect(scale(waiting, bounded, { nowMs: T, current: 4, observed: { 'waiting-requests': 30 }, history: [] }).replicas).toBe(5);
    expect(scale(waiting, bounded, { nowMs: T, current: 2, observed: { 'waiting-requests': 0 }, history: [] }).replicas).toBe(2);
    const fromZero = { ...hpa, minReplicas: 0 };
    expect(scale(waiting, fromZero, { nowMs: T, current: 0, observed: { 'waiting-requests': 1 }, history: [] }).replicas).toBe(1);
    expect(scale(waiting, fromZero, { nowMs: T, current: 0, observed: { 'waiting-requests': 0 }, history: [] }).replicas).toBe(0);
    const held = scale(waiting, hpa, {
      nowMs: T,
      current: 3,
      observed: { 'waiting-requests': 18 },
      history: [],
      limit: { replicas: 4, why: 'team nlp is at its GPU cap (8 GPUs)' },
    });
    expect(held.replicas).toBe(4);
    expect(held.reason).toBe(
      '3 → 4: 18 waiting requests per replica against a target of 6 (held at 4: team nlp is at its GPU cap (8 GPUs))',
    );
  });

  it('without a reported metric it stays where it is', () => {
    expect(scale(waiting, hpa, { nowMs: T, current: 3, observed: {}, history: [] })).toMatchObject({
      replicas: 3,
      reason: '3 → 3: no metric reported: stays',
    });
  });

  it('ahead of load: a rising total is extrapolated a cold start ahead and its replicas asked for now; a falling one removes none; the reason names the trend', () => {
    const rps = [{ metric: 'requests-per-second', perReplica: 2 }] as const;
    const ahead = { ...hpa, aheadSec: 300 };
    // The service's total rose from 3 to 5 requests per second over the last 4 minutes (at 2 replicas): 0.5 a minute.
    const history: Recommendation[] = [3, 3.5, 4, 4.5].map((total, k) => ({
      atMs: T - (4 - k) * 60_000,
      replicas: 2,
      totals: { 'requests-per-second': total },
    }));
    const now = { nowMs: T, current: 3, observed: { 'requests-per-second': 5 / 3 }, history };
    // Reactive alone: 1.7 per replica against 2 is within the target's reach (3 replicas hold 5); it keeps no totals.
    expect(scale(rps, hpa, now).replicas).toBe(3);
    expect(scale(rps, hpa, now).history.at(-1)!.totals).toBeUndefined();
    const d = scale(rps, ahead, now);
    // 5 now + 0.5 a minute × 5 minutes = 7.5: 4 replicas.
    expect(d.replicas).toBe(4);
    expect(d.reason).toBe('3 → 4: trend of 0.5 requests per second per minute: 7.5 in 300 s, 1.9 per replica against a target of 2');
    expect(d.history.at(-1)).toMatchObject({ atMs: T, replicas: 4, totals: { 'requests-per-second': 5 } });
    // Falling: the trend never takes a replica away, and scale-down keeps its window.
    const falling = history.map((h, k) => ({ ...h, replicas: 3, totals: { 'requests-per-second': 8 - k } }));
    const down = scale(rps, ahead, { ...now, observed: { 'requests-per-second': 1 }, history: falling });
    expect(down.recommendation).toBe(2);
    expect(down.replicas).toBe(3);
    expect(down.reason).not.toMatch(/trend/);
    // Two points are no trend.
    expect(scale(rps, ahead, { ...now, history: history.slice(-1) }).replicas).toBe(3);
  });
});
