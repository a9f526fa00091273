import { describe, expect, it } from 'vitest';
import {
  decideSpot,
  gpuFleetDecision,
  greedyDecision,
  mustCommitNow,
  uniformProgressDecision,
  type SpotDecisionInput,
} from '../../core/spot-policy.ts';

/** Each rule of the three deadline policies on its own, at its boundaries (spot-policy.test.ts runs them over traces). */

const H = 3600;
const D = 0.2 * H; // changeover d = 720 s
const input = (over: Partial<SpotDecisionInput> = {}): SpotDecisionInput => ({
  elapsedSec: 0,
  deadlineSec: 60 * H,
  totalWorkSec: 48 * H,
  doneWorkSec: 0,
  mode: 'none',
  pendingChangeoverSec: 0,
  spotAvailable: true,
  changeoverSec: D,
  intervalSec: 600,
  priceRatio: 3,
  committedOnDemand: false,
  observed: { availableSec: 0, unavailableSec: 0, outages: 0, currentRunSec: 600 },
  ...over,
});
/** A job with `workSec` of work left and `timeSec` to its deadline. */
const left = (workSec: number, timeSec: number, over: Partial<SpotDecisionInput> = {}) =>
  input({ doneWorkSec: 48 * H - workSec, elapsedSec: 60 * H - timeSec, ...over });

describe('decideSpot runs the policy it is named for', () => {
  it('dispatches by name', () => {
    const behind = input({ spotAvailable: false, elapsedSec: 10 * H, doneWorkSec: 0 }); // far behind the line
    const slightly = input({ spotAvailable: false, elapsedSec: 10 * H, doneWorkSec: 7 * H }); // a little behind it
    for (const i of [behind, slightly]) {
      expect(decideSpot('greedy', i)).toEqual(greedyDecision(i));
      expect(decideSpot('uniform-progress', i)).toEqual(uniformProgressDecision(i));
      expect(decideSpot('gpu-fleet', i)).toEqual(gpuFleetDecision(i));
    }
    expect([behind, slightly].map((i) => decideSpot('greedy', i).kind)).toEqual(['wait', 'wait']);
    expect([behind, slightly].map((i) => decideSpot('uniform-progress', i).kind)).toEqual(['on-demand', 'on-demand']);
    expect([behind, slightly].map((i) => decideSpot('gpu-fleet', i).kind)).toEqual(['on-demand', 'wait']);
  });
});

describe('the last-moment rule', () => {
  it('credits a spot machine only with the part of the interval its changeover leaves', () => {
    // On spot with 300 s of changeover still owed: the coming interval does 300 s of work.
    const at = (slack: number) => mustCommitNow(left(10 * H, 10 * H + slack, { mode: 'spot', pendingChangeoverSec: 300 }));
    expect(at(1000)).toBe(true); // 1000 − 600 < −300 + 720
    expect(at(1020)).toBe(false);
  });
});

describe('greedy', () => {
  it('says why, and commits only at the last moment', () => {
    expect(greedyDecision(input())).toEqual({
      kind: 'spot',
      commit: false,
      reason: { code: 'deadline-spot-safe', message: 'spot can be had and the deadline allows waiting for it' },
    });
    expect(greedyDecision(input({ spotAvailable: false }))).toEqual({
      kind: 'wait',
      commit: false,
      reason: { code: 'deadline-spot-safe', message: 'no spot now; the deadline still allows waiting for it' },
    });
    expect(greedyDecision(left(10 * H, 10 * H + 1000, { spotAvailable: false }))).toEqual({
      kind: 'on-demand',
      commit: true,
      reason: {
        code: 'deadline-on-demand',
        message: 'waiting longer would miss the deadline: 10.0 h of work left and 10.3 h to the deadline; on-demand to the end',
      },
    });
    expect(greedyDecision(input({ committedOnDemand: true })).commit).toBe(true);
  });
});

describe('uniform progress, rule by rule', () => {
  it('stays committed once committed', () => {
    expect(uniformProgressDecision(input({ committedOnDemand: true }))).toMatchObject({
      kind: 'on-demand',
      commit: true,
      reason: { message: 'committed: 48.0 h of work left and 60.0 h to the deadline; on-demand to the end' },
    });
  });

  it('the safety net: idle with less than 2d of slack commits, before the last-moment rule would', () => {
    // 2d = 1440 s of slack; the last-moment rule fires only under d + interval = 1320 s.
    const idle = (slack: number, over: Partial<SpotDecisionInput> = {}) => left(10 * H, 10 * H + slack, { spotAvailable: false, ...over });
    expect(uniformProgressDecision(idle(1400))).toMatchObject({
      kind: 'on-demand',
      commit: true,
      reason: { message: expect.stringMatching(/^safety net: /) },
    });
    expect(greedyDecision(idle(1400)).kind).toBe('wait');
    // Exactly 2d is not under it: behind the line it catches up on on-demand, without committing.
    expect(uniformProgressDecision(idle(1440))).toMatchObject({
      kind: 'on-demand',
      commit: false,
      reason: { message: 'behind uniform progress and no spot: on-demand catches up' },
    });
    expect(uniformProgressDecision(idle(1440, { doneWorkSec: 0, elapsedSec: 0 })).commit).toBe(false);
    // Idle is any job not on spot now, even with spot to be had.
    expect(uniformProgressDecision(idle(1400, { spotAvailable: true }))).toMatchObject({
      commit: true,
      reason: { message: expect.stringMatching(/^safety net: /) },
    });
    // A spot machine that has spot is not idle; an on-demand one catches up instead.
    expect(uniformProgressDecision(idle(1400, { mode: 'spot', spotAvailable: true })).kind).toBe('spot');
    expect(uniformProgressDecision(idle(1400, { mode: 'spot', spotAvailable: false })).commit).toBe(true);
    expect(uniformProgressDecision(idle(1400, { mode: 'on-demand' }))).toMatchObject({ kind: 'on-demand', commit: false });
    // With a long interval the net is d + interval, and it still speaks first.
    expect(uniformProgressDecision(idle(1700, { intervalSec: 1200 }))).toMatchObject({
      reason: { message: expect.stringMatching(/^safety net: /) },
    });
  });

  it('past the safety net, the last-moment rule commits with its own reason', () => {
    // On spot with spot: not idle, so no safety net; 700 s of slack with 1200 s intervals is under the last moment.
    expect(uniformProgressDecision(left(10 * H, 10 * H + 700, { mode: 'spot', intervalSec: 1200 }))).toEqual({
      kind: 'on-demand',
      commit: true,
      reason: {
        code: 'deadline-on-demand',
        message: 'waiting longer would miss the deadline: 10.0 h of work left and 10.2 h to the deadline; on-demand to the end',
      },
    });
  });

  it('hysteresis: on on-demand, stays until ahead of the line at t + 2d', () => {
    // The line at t + 2d: 48/60 × (34,560 + 1,440) s = 28,800 s done.
    const onDemand = (done: number, spotAvailable = true) =>
      uniformProgressDecision(input({ mode: 'on-demand', elapsedSec: 36_000 - 2 * D, doneWorkSec: done, spotAvailable }));
    expect(onDemand(28_799)).toEqual({
      kind: 'on-demand',
      commit: false,
      reason: { code: 'deadline-on-demand', message: 'catching up with uniform progress on on-demand' },
    });
    expect(onDemand(28_800)).toEqual({ kind: 'spot', commit: false, reason: { code: 'deadline-spot-safe', message: 'spot can be had' } });
    expect(onDemand(40_000, false).kind).toBe('on-demand'); // never dropped to wait
  });

  it('behind the line with no spot, catches up on on-demand; on or ahead of it, waits', () => {
    const idle = (done: number) => uniformProgressDecision(input({ spotAvailable: false, elapsedSec: 36_000, doneWorkSec: done }));
    expect(idle(28_799)).toEqual({
      kind: 'on-demand',
      commit: false,
      reason: { code: 'deadline-on-demand', message: 'behind uniform progress and no spot: on-demand catches up' },
    });
    expect(idle(28_800)).toEqual({
      kind: 'wait',
      commit: false,
      reason: { code: 'deadline-spot-safe', message: 'ahead of uniform progress: waiting for spot' },
    });
  });
});

describe("gpu-fleet's policy, rule by rule", () => {
  const seen = (availableH: number, unavailableH: number, outages: number, currentRunSec = 600) => ({
    availableSec: availableH * H,
    unavailableSec: unavailableH * H,
    outages,
    currentRunSec,
  });

  it('commits at the last moment, and stays committed', () => {
    expect(gpuFleetDecision(left(10 * H, 10 * H + 1000, { spotAvailable: false }))).toMatchObject({
      kind: 'on-demand',
      commit: true,
      reason: { message: expect.stringMatching(/^waiting longer would miss the deadline: /) },
    });
    expect(gpuFleetDecision(input({ committedOnDemand: true })).commit).toBe(true);
  });

  it('takes spot that can be had, and says how much slack there is', () => {
    expect(gpuFleetDecision(left(40 * H, 50 * H))).toEqual({
      kind: 'spot',
      commit: false,
      reason: { code: 'deadline-spot-safe', message: 'spot can be had; 10.0 h of slack before the deadline' },
    });
  });

  it('on on-demand, waits for spot to settle before leaving, when spot alone falls short', () => {
    // 49 h of work in 50 h: more than the spot expected (≈ 46 h at the prior's 80%).
    const back = (over: Partial<SpotDecisionInput>) => gpuFleetDecision(left(49 * H, 50 * H, over));
    expect(back({ mode: 'on-demand', observed: seen(0, 0, 0, 600) })).toMatchObject({
      kind: 'on-demand',
      commit: false,
      reason: {
        code: 'deadline-on-demand',
        message: expect.stringMatching(/^spot is back but has not settled, and 49\.0 h of work exceeds the .* h of spot expected/),
      },
    });
    expect(back({ mode: 'on-demand', observed: seen(0, 0, 0, 1800) }).kind).toBe('spot'); // settled
    expect(back({ mode: 'none', observed: seen(0, 0, 0, 600) }).kind).toBe('spot'); // not on on-demand: nothing to leave
    // With work the spot will cover, on-demand is left at once.
    expect(gpuFleetDecision(left(20 * H, 50 * H, { mode: 'on-demand' })).kind).toBe('spot');
  });

  it('with no spot: waits while the spot expected covers the work; fills a long outage or a large deficit on on-demand', () => {
    const idle = (workH: number, currentRunSec: number) =>
      gpuFleetDecision(left(workH * H, 50 * H, { spotAvailable: false, observed: seen(0, 0, 0, currentRunSec) }));
    expect(idle(40, 600)).toMatchObject({
      kind: 'wait',
      commit: false,
      reason: {
        code: 'deadline-spot-safe',
        message: expect.stringMatching(
          /^no spot now; the .* h of spot expected before the deadline at 80% availability covers the 40\.0 h left: waiting for it$/,
        ),
      },
    });
    // A small deficit (under 2d) waits for the outage to settle (1200 s)...
    expect(idle(46.5, 600).kind).toBe('wait');
    expect(idle(46.5, 1200)).toMatchObject({
      kind: 'on-demand',
      commit: false,
      reason: {
        code: 'deadline-on-demand',
        message: expect.stringMatching(/^no spot, and 46\.5 h of work exceeds the .*: on-demand fills the outage$/),
      },
    });
    // ...a large one does not.
    expect(idle(48, 600).kind).toBe('on-demand');
    // On on-demand already, it stays through the outage.
    expect(gpuFleetDecision(left(10 * H, 50 * H, { spotAvailable: false, mode: 'on-demand' })).kind).toBe('on-demand');
  });

  it('expects less spot from a pool whose spells are short (each spell costs a changeover)', () => {
    // The same 83% availability, in 9 long spells or in 99 short ones.
    const long = gpuFleetDecision(left(48 * H, 50 * H, { spotAvailable: false, observed: seen(100, 20, 9) }));
    const short = gpuFleetDecision(left(48 * H, 50 * H, { spotAvailable: false, observed: seen(100, 20, 99) }));
    expect(long.kind).toBe('wait');
    expect(short.kind).toBe('on-demand');
    expect(long.reason.message).toMatch(/at 83% availability/);
  });
});
