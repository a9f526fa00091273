import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  decideSpot,
  greedyDecision,
  gpuFleetDecision,
  mustCommitNow,
  SPOT_POLICIES,
  uniformProgressDecision,
  type SpotDecisionInput,
} from '../../core/spot-policy.ts';

const H = 3600;
/** The paper's job: 48 h of work, a 60 h deadline, d = 0.2 h, decisions every 10 min. */
const input = (over: Partial<SpotDecisionInput> = {}): SpotDecisionInput => ({
  elapsedSec: 0,
  deadlineSec: 60 * H,
  totalWorkSec: 48 * H,
  doneWorkSec: 0,
  mode: 'none',
  pendingChangeoverSec: 0,
  spotAvailable: true,
  changeoverSec: 0.2 * H,
  intervalSec: 600,
  priceRatio: 3,
  committedOnDemand: false,
  observed: { availableSec: 0, unavailableSec: 0, outages: 0, currentRunSec: 600 },
  ...over,
});

describe('mustCommitNow: the last moment on-demand can still finish', () => {
  it('fires when one more idle interval would leave less than the work plus a changeover', () => {
    // 10 h of work left: 10 h + 0.2 h changeover + one 600 s interval is the limit.
    const at = (timeLeft: number) => mustCommitNow(input({ spotAvailable: false, elapsedSec: 60 * H - timeLeft, doneWorkSec: 38 * H }));
    expect(at(10 * H + 0.2 * H + 600)).toBe(false);
    expect(at(10 * H + 0.2 * H + 599)).toBe(true);
  });

  it('counts the work a running spot machine will do in the coming interval', () => {
    const base = { elapsedSec: 60 * H - (10 * H + 0.2 * H + 300), doneWorkSec: 38 * H };
    expect(mustCommitNow(input({ ...base, mode: 'spot', spotAvailable: true }))).toBe(false);
    expect(mustCommitNow(input({ ...base, mode: 'spot', spotAvailable: false }))).toBe(true);
  });
});

describe('greedy', () => {
  it('takes spot when it can, waits otherwise, and commits to on-demand at the last moment', () => {
    expect(greedyDecision(input()).kind).toBe('spot');
    expect(greedyDecision(input({ spotAvailable: false })).kind).toBe('wait');
    const late = greedyDecision(input({ spotAvailable: true, elapsedSec: 50 * H, doneWorkSec: 38 * H }));
    expect(late).toMatchObject({ kind: 'on-demand', commit: true, reason: { code: 'deadline-on-demand' } });
    expect(greedyDecision(input({ committedOnDemand: true })).kind).toBe('on-demand');
  });
});

describe('uniform progress (the paper’s rules)', () => {
  it('with no spot, catches up on on-demand when behind the line C0·t/D and waits when ahead', () => {
    // At t = 10 h the line is 8 h of work.
    expect(uniformProgressDecision(input({ spotAvailable: false, elapsedSec: 10 * H, doneWorkSec: 7 * H })).kind).toBe('on-demand');
    expect(uniformProgressDecision(input({ spotAvailable: false, elapsedSec: 10 * H, doneWorkSec: 9 * H })).kind).toBe('wait');
  });

  it('takes spot whenever it comes, except from on-demand until ahead of the line at t + 2d', () => {
    expect(uniformProgressDecision(input({ elapsedSec: 10 * H, doneWorkSec: 2 * H })).kind).toBe('spot');
    // On on-demand at 10 h: the line at 10.4 h is 8.32 h.
    expect(uniformProgressDecision(input({ mode: 'on-demand', elapsedSec: 10 * H, doneWorkSec: 8.2 * H })).kind).toBe('on-demand');
    expect(uniformProgressDecision(input({ mode: 'on-demand', elapsedSec: 10 * H, doneWorkSec: 8.4 * H })).kind).toBe('spot');
    // It never drops on-demand just to wait.
    expect(uniformProgressDecision(input({ mode: 'on-demand', spotAvailable: false, elapsedSec: 10 * H, doneWorkSec: 9 * H })).kind).toBe(
      'on-demand',
    );
  });

  it('has a safety net of 2d: idle with less slack than that, on-demand to the end', () => {
    const d = uniformProgressDecision(input({ spotAvailable: false, elapsedSec: 60 * H - (10 * H + 0.35 * H), doneWorkSec: 38 * H }));
    expect(d).toMatchObject({ kind: 'on-demand', commit: true });
  });
});

describe('gpu-fleet', () => {
  const outage = (over: Partial<SpotDecisionInput>) =>
    input({ spotAvailable: false, observed: { availableSec: 0, unavailableSec: 0, outages: 0, currentRunSec: 3 * H }, ...over });

  it('waits out an outage while the spot it expects before the deadline covers the work', () => {
    // 40 h left for 20 h of work: the prior (80% available, 6 h spells) expects about 38 h of spot.
    const d = gpuFleetDecision(outage({ elapsedSec: 20 * H, doneWorkSec: 28 * H }));
    expect(d).toMatchObject({ kind: 'wait', reason: { code: 'deadline-spot-safe' } });
    expect(d.reason.message).toMatch(/of spot expected before the deadline at 80% availability/);
  });

  it('fills an outage with on-demand once the expected spot no longer covers the work', () => {
    // 30 h left for 29 h of work: the prior expects about 28.5 h of spot. On-demand fills the
    // outage, but the job is not committed: it goes back to spot when spot returns.
    expect(gpuFleetDecision(outage({ elapsedSec: 30 * H, doneWorkSec: 19 * H }))).toMatchObject({ kind: 'on-demand', commit: false });
    expect(gpuFleetDecision(outage({ elapsedSec: 30 * H, doneWorkSec: 21 * H })).kind).toBe('wait');
  });

  it('lowers its estimate when the pool has been seen unavailable', () => {
    const seen = (availableH: number, unavailableH: number) => ({
      availableSec: availableH * H,
      unavailableSec: unavailableH * H,
      outages: 3,
      currentRunSec: 3 * H,
    });
    const at = { elapsedSec: 20 * H, doneWorkSec: 18 * H };
    // 40 h left for 30 h of work: enough at 80% availability, not at 30%.
    expect(gpuFleetDecision(outage({ ...at, observed: seen(16, 4) })).kind).toBe('wait');
    expect(gpuFleetDecision(outage({ ...at, observed: seen(6, 14) })).kind).toBe('on-demand');
  });

  it('does not leave on-demand for spot that has only just come back while it is short of supply', () => {
    const at = { mode: 'on-demand' as const, elapsedSec: 30 * H, doneWorkSec: 20 * H };
    expect(gpuFleetDecision(input({ ...at, observed: { availableSec: 0, unavailableSec: 0, outages: 0, currentRunSec: 600 } })).kind).toBe(
      'on-demand',
    );
    expect(
      gpuFleetDecision(input({ ...at, observed: { availableSec: 0, unavailableSec: 0, outages: 0, currentRunSec: 2 * H } })).kind,
    ).toBe('spot');
  });

  it('never leaves on-demand to wait', () => {
    expect(gpuFleetDecision(outage({ mode: 'on-demand', elapsedSec: 1 * H, doneWorkSec: 1 * H })).kind).toBe('on-demand');
  });
});

describe('every policy', () => {
  it('commits to on-demand whenever waiting one more interval would make the deadline unreachable', () => {
    fc.assert(
      fc.property(
        fc.constantFrom(...SPOT_POLICIES),
        fc.integer({ min: 0, max: 60 * H }),
        fc.integer({ min: 0, max: 48 * H }),
        fc.constantFrom('none', 'spot', 'on-demand'),
        fc.boolean(),
        (policy, elapsed, done, mode, spot) => {
          const i = input({ elapsedSec: elapsed, doneWorkSec: done, mode, spotAvailable: spot });
          const d = decideSpot(policy, i);
          if (mustCommitNow(i)) expect(d).toMatchObject({ kind: 'on-demand', commit: true });
          // A decision for spot is only ever made when spot can be had.
          if (d.kind === 'spot') expect(spot).toBe(true);
          expect(d.reason.message.length).toBeGreaterThan(0);
        },
      ),
    );
  });
});
