import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { priorRatePerHour } from '../../core/risk.ts';
import {
  AGE_BUCKETS_SEC,
  emptySpotModel,
  hazardPerHour,
  observe,
  priorRate,
  setPoolPrior,
  survival,
  unseen,
  upProbability,
  type SpotModelState,
} from '../../core/spot-model.ts';

const MIN = 60_000;

/** Replays up/down per 10-minute tick for each pool ("1" up, "0" down). */
function replay(ticks: Record<string, string>, state: SpotModelState = emptySpotModel()): SpotModelState {
  const n = Math.max(...Object.values(ticks).map((t) => t.length));
  for (let t = 0; t < n; t++)
    for (const [pool, s] of Object.entries(ticks)) if (t < s.length) observe(state, pool, s[t] === '1', t * 10 * MIN);
  return state;
}

describe('the spot pool model', () => {
  it('with nothing seen, answers the prior: the Advisor band, moved by a placement score', () => {
    const m = emptySpotModel();
    setPoolPrior(m, 'a', { band: '5-10%' });
    const s = survival(m, 'a', 0, 3600);
    expect(s.survival).toBeCloseTo(Math.exp(-priorRatePerHour('5-10%')), 6);
    expect(s.why).toMatch(/^P\(survives 60 min\) 1\.000: not seen up: read as just recovered$/);
    expect(priorRate({ band: '5-10%', placementScore: 10 })).toBeCloseTo(priorRatePerHour('5-10%') / 2, 9);
    expect(priorRate({ band: '5-10%', placementScore: 1 })).toBeCloseTo(priorRatePerHour('5-10%') * 2, 9);
  });

  it('learns that a pool just back is likelier to drop than one up for hours', () => {
    // Short up-runs after each recovery, and one long run: young ages see the drops.
    const flappy = '1110' + '110' + '10' + '1110' + '1'.repeat(60) + '0' + '110' + '10';
    const m = replay({ a: flappy, b: flappy });
    const h = hazardPerHour(m, 'a');
    expect(h[0]!).toBeGreaterThan(h[AGE_BUCKETS_SEC.length]! * 5);
    // The same pool, asked at a young age and at an old one.
    const young = replay({ a: '1'.repeat(30) + '0' + '1', b: flappy });
    const old = replay({ a: '0' + '1'.repeat(31), b: flappy });
    const t = 31 * 10 * MIN;
    expect(survival(young, 'a', t, 3600).survival).toBeLessThan(survival(old, 'a', t, 3600).survival);
    expect(survival(young, 'a', t, 3600).why).toMatch(/up 0 min since its last recovery/);
  });

  it('learns which pools fall together, and raises a pool’s risk while its partner has just dropped', () => {
    // a always drops one tick after b; c drops on its own schedule.
    const b = ('1'.repeat(20) + '0' + '1').repeat(8);
    const a = ('1'.repeat(21) + '0').repeat(8);
    const c = ('1'.repeat(10) + '0' + '1'.repeat(11)).repeat(8);
    const m = replay({ a, b, c });
    const key = (x: string, y: string) => m.peers[`${x}|${y}`]!;
    expect(key('a', 'b').together / key('a', 'b').peerDrops).toBeGreaterThan(0.8);
    // Now b drops again while a stands: a's risk over the next 15 minutes goes up, and the reason names b.
    const at = 8 * 22 * 10 * MIN;
    const before = survival(m, 'a', at, 900).survival;
    observe(m, 'c', true, at);
    observe(m, 'a', true, at);
    observe(m, 'b', false, at);
    const after = survival(m, 'a', at + MIN, 900);
    expect(after.survival).toBeLessThan(before);
    expect(after.peer?.pool).toBe('b');
    expect(after.why).toMatch(/b dropped 1 min ago and this pool followed it \d+% of the time/);
  });

  it('takes sightings at least once and in order: a repeat or a late one changes nothing', () => {
    const once = replay({ a: '1110110', b: '1101111' });
    const twice = replay({ a: '1110110', b: '1101111' });
    observe(twice, 'a', false, 5 * 10 * MIN); // late: the pool was last seen at tick 6
    observe(twice, 'a', false, 6 * 10 * MIN); // a repeat of tick 6
    expect(twice).toEqual(once);
  });

  it('learns how soon a pool that went down gives machines again, and answers whether it is likely back', () => {
    // Pools that, once down, come back after 20 minutes.
    const m = replay({ a: '1111001111001111001111001111', b: '1111110011111100111111001111' });
    observe(m, 'c', true, 0);
    observe(m, 'c', false, 10 * MIN);
    // Seen down just now: unlikely back yet; an hour later, likely back (the learned rate, far above the prior's).
    expect(upProbability(m, 'c', 10 * MIN)).toBe(0);
    expect(upProbability(m, 'c', 12 * MIN)).toBeLessThan(0.3);
    expect(upProbability(m, 'c', 70 * MIN)).toBeGreaterThan(0.8);
    const prior = replay({ c: '10' });
    expect(upProbability(prior, 'c', 70 * MIN)).toBeLessThan(upProbability(m, 'c', 70 * MIN));
    // Up, or never seen: a launch there is expected to be given.
    expect(upProbability(m, 'a', 300 * MIN)).toBe(1);
    expect(upProbability(m, 'never', 0)).toBe(1);
  });

  it('a pool seen down and then left unwatched stays last seen down: the time since counts towards its coming back', () => {
    const m = emptySpotModel();
    observe(m, 'a', true, 0);
    observe(m, 'a', false, 10 * MIN);
    unseen(m, 'a', 11 * MIN);
    expect(m.pools['a']).toMatchObject({ up: false, lastSeenMs: 10 * MIN, downSinceMs: 10 * MIN, watching: false });
    expect(upProbability(m, 'a', 40 * MIN)).toBeGreaterThan(upProbability(m, 'a', 11 * MIN));
    // Seen down again after the unwatched time: it was down throughout, and that time is counted as down.
    observe(m, 'a', false, 40 * MIN);
    expect(m.pools['a']!.downHours!.reduce((x, y) => x + y, 0)).toBeCloseTo(0.5, 6);
    // Back: one recovery, after about half an hour down.
    observe(m, 'a', true, 50 * MIN);
    expect(m.pools['a']!.recoveries!.reduce((x, y) => x + y, 0)).toBe(1);
  });

  it('always answers a probability, for any sightings', () => {
    fc.assert(
      fc.property(
        fc.array(fc.tuple(fc.constantFrom('a', 'b', 'c'), fc.boolean(), fc.integer({ min: 1, max: 200 })), { maxLength: 80 }),
        (events) => {
          const m = emptySpotModel();
          let t = 0;
          for (const [pool, up, gap] of events) {
            t += gap * 1000;
            observe(m, pool, up, t);
          }
          for (const pool of ['a', 'b', 'c', 'never']) {
            const s = survival(m, pool, t, 3600);
            expect(s.survival).toBeGreaterThanOrEqual(0);
            expect(s.survival).toBeLessThanOrEqual(1);
            expect(s.survival).toBeLessThanOrEqual(s.ownSurvival + 1e-12);
            const up = upProbability(m, pool, t + 600_000);
            expect(up).toBeGreaterThanOrEqual(0);
            expect(up).toBeLessThanOrEqual(1);
          }
        },
      ),
    );
  });
});

describe('bench:spot-model on the shipped V100 availability traces', () => {
  it('walks forward without looking ahead, and the online model predicts better than the posterior and the prior', async () => {
    const { loadSet, walk, score } = await import('../../bench/spot-model.ts');
    const set = loadSet(new URL('../../data/spot/availability', import.meta.url).pathname);
    const predictions = walk(set, 3600);
    const [online, posterior, advisor] = (['online', 'posterior', 'advisor'] as const).map((m) => score(set.name, m, predictions));
    expect(online!.predictions).toBe(posterior!.predictions);
    expect(online!.brier).toBeLessThan(posterior!.brier);
    expect(posterior!.brier).toBeLessThan(advisor!.brier);
    // A pool's prediction at a tick does not change when the future after it is cut away.
    const cut = { ...set, pools: set.pools.map((p) => ({ ...p, up: p.up.slice(0, 2000) })) };
    const early = walk(cut, 3600).filter((x) => x.model === 'online');
    expect(early.map((x) => x.p)).toEqual(
      predictions
        .filter((x) => x.model === 'online')
        .slice(0, early.length)
        .map((x) => x.p),
    );
  });
});

describe('the spot model from the fleet’s own history', () => {
  const H = 3_600_000;
  it('reads machines as sightings: a take-back is a drop, the next machine the recovery, a gap with no machine not counted', async () => {
    const { spotModelFromHistory } = await import('../../core/spot-model.ts');
    const pool = 'aws/us-west-2a/p3.2xlarge/spot';
    const machines = [
      { offeringId: pool, firstMs: 0, lastMs: 2 * H }, // went without being taken back
      { offeringId: pool, firstMs: 10 * H, lastMs: 10 * H + 5 * MIN, interruptedAtMs: 10 * H + 6 * MIN },
      { offeringId: pool, firstMs: 11 * H, lastMs: 12 * H },
    ];
    const m = spotModelFromHistory(machines, [], new Map([[pool, { band: '>20%' }]]), 12 * H + MIN, 3 * MIN);
    const p = m.pools[pool]!;
    // Up 2 h, unwatched 8 h, up 6 min then taken back, back at 11 h: 3.1 h of exposure in all, one drop.
    expect(p.exposureHours.reduce((a, b) => a + b, 0)).toBeCloseTo(2 + 0.1 + 1, 6);
    expect(p.drops.reduce((a, b) => a + b, 0)).toBe(1);
    expect(p.up).toBe(true);
    expect(p.upSinceMs).toBe(11 * H);
    // A refused launch is a drop too: the pool is down, and a launch now would be a recovery.
    const refused = spotModelFromHistory(machines, [{ offeringId: pool, atMs: 12 * H + 30_000 }], new Map(), 12 * H + MIN, 3 * MIN);
    expect(refused.pools[pool]!.up).toBe(false);
    expect(survival(refused, pool, 12 * H + MIN, 3600).survival).toBeLessThan(survival(m, pool, 12 * H + MIN, 3600).survival);
    // A refusal after a time no machine watched the pool says it is down now, not when it dropped: no drop is counted.
    const gap = spotModelFromHistory([machines[0]!], [{ offeringId: pool, atMs: 5 * H }], new Map(), 6 * H, 3 * MIN);
    expect(gap.pools[pool]!).toMatchObject({ up: false });
    expect(gap.pools[pool]!.drops.reduce((a, b) => a + b, 0)).toBe(0);
    expect(gap.pools[pool]!.exposureHours.reduce((a, b) => a + b, 0)).toBeCloseTo(2, 6);
  });
});

describe('the spot model’s prior in the snapshot', () => {
  it('takes each spot pool’s Advisor band and, where the prices carry one, its zone’s placement score', async () => {
    const { nlpWorld } = await import('../builders.ts');
    const { DEFAULT_POLICY } = await import('../../core/snapshot.ts');
    const { buildSnapshot, readWorld } = await import('../../core/services/snapshot-reader.ts');
    const e = nlpWorld({
      groups: [
        {
          id: 'v100-spot',
          instanceTypes: ['p3.2xlarge'],
          zones: ['us-west-2a', 'us-west-2b'],
          capacityType: 'spot',
          minSize: 0,
          maxSize: 4,
        },
      ],
    });
    const scored = 'aws/us-west-2a/p3.2xlarge/spot';
    const unscored = 'aws/us-west-2b/p3.2xlarge/spot';
    const list = e.ports.prices;
    const ports = {
      ...e.ports,
      prices: {
        prices: async (offerings: Parameters<typeof list.prices>[0]) => {
          const out = await list.prices(offerings);
          const q = out.get(scored);
          if (q) out.set(scored, { ...q, placementScore: 9 });
          return out;
        },
      },
    };
    const snap = await buildSnapshot(ports, await readWorld(ports), { nowMs: e.clock.nowMs(), policy: DEFAULT_POLICY });
    const a = snap.spotModel!.pools[scored]!;
    const b = snap.spotModel!.pools[unscored]!;
    expect(a.placementScore).toBe(9);
    expect(b.placementScore).toBeUndefined();
    expect(a.band).toBe(b.band);
    // A high score lowers the pool's prior rate below its band's.
    expect(priorRate(a)).toBeLessThan(priorRate(b));
  });
});
