import { describe, expect, it } from 'vitest';
import { useExistingCapacity } from '../../../core/planner/existing-capacity.ts';
import { buyNewCapacity, scaleUps } from '../../../core/planner/new-capacity.ts';
import { emptySpotModel, observe } from '../../../core/spot-model.ts';
import { aGroup, aJob, aNode, T0 } from '../../builders.ts';
import { classified } from './support.ts';

function buyFor(over: Parameters<typeof classified>[0]) {
  const { st, entries } = classified(over);
  const stuck = buyNewCapacity(st, useExistingCapacity(st, entries));
  return { st, stuck, ups: scaleUps(st) };
}

describe('planner phase: new capacity', () => {
  const small = aGroup({ instanceType: 'g5.xlarge' });
  const big = aGroup({ instanceType: 'g5.12xlarge' });

  it('buys what is cheapest per GPU the waiting work would use: two small machines for two 1-GPU jobs', () => {
    const jobs = [aJob({ id: 'team-a.1' }), aJob({ id: 'team-a.2' })];
    const { st, stuck, ups } = buyFor({ groups: [small, big], pendingJobs: jobs });
    expect(stuck).toEqual([]);
    expect(ups).toEqual([expect.objectContaining({ kind: 'scale-up', groupId: small.id, fromDesired: 0, toDesired: 2 })]);
    expect(st.waiting[0]!.reason.message).toMatch(/lowest expected cost per GPU used \(\$1\.006\/GPU-h; 1 of its 1 GPUs/);
    // The plan's expected cost is the two machines.
    expect(Math.round(st.addedExpected)).toBe(2 * 1_006_000);
  });

  it('says, for a spot machine, the survival the spot model gave the pool and why', () => {
    const spot = aGroup({ capacityType: 'spot' });
    const model = emptySpotModel();
    observe(model, spot.offerings[0]!.id, true, T0 - 3 * 3_600_000);
    observe(model, spot.offerings[0]!.id, true, T0);
    const { st } = buyFor({ groups: [spot], pendingJobs: [aJob({ spec: { expectedRuntimeSec: 3600 } })], spotModel: model });
    expect(st.waiting[0]!.reason.message).toMatch(/spot/);
    expect(st.waiting[0]!.reason.message).toMatch(/P\(survives \d+ min\) \d\.\d{3}: up 180 min since its last recovery/);
  });

  it('counts on launches in flight first, then fills a machine bought in this plan before buying another', () => {
    const jobs = [1, 2, 3, 4].map((i) => aJob({ id: `team-a.${i}` }));
    const launching = buyFor({ groups: [{ ...big, desiredCapacity: 1 }], pendingJobs: jobs });
    expect(launching.stuck).toEqual([]);
    expect(launching.ups).toEqual([]);
    expect(launching.st.waiting.map((w) => w.reason.code)).toEqual([
      'waiting-for-boot',
      'waiting-for-boot',
      'waiting-for-boot',
      'waiting-for-boot',
    ]);
    const fresh = buyFor({ groups: [big], pendingJobs: jobs });
    expect(fresh.ups).toEqual([expect.objectContaining({ groupId: big.id, fromDesired: 0, toDesired: 1 })]);
    expect(fresh.st.waiting.map((w) => w.reason.message)).toEqual([
      expect.stringMatching(/^new g5\.12xlarge \(on-demand, us-east-1a\) ordered for it: /),
      ...[2, 3, 4].map(() => 'shares a new g5.12xlarge (on-demand, us-east-1a) ordered in this plan'),
    ]);
  });

  it('returns the jobs no group can take, with why, for preemption to look at; it never touches live machines', () => {
    const full = { ...small, maxSize: 1, desiredCapacity: 1 };
    const { st, stuck, ups } = buyFor({
      groups: [full],
      nodes: [aNode('i-1', { group: full })],
      pendingJobs: [aJob({ id: 'team-a.1' }), aJob({ id: 'team-a.2' })],
    });
    expect(ups).toEqual([]);
    expect(stuck.map((s) => [s.entry.job.id, s.why.code])).toEqual([['team-a.2', 'group-at-max']]);
    expect(st.actions.map((a) => a.kind)).toEqual(['place']); // the placement is existing capacity's
  });
});
