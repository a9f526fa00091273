import { describe, expect, it } from 'vitest';
import type { Plan, PlanAction } from '../../core/plan.ts';
import { plan } from '../../core/planner/planner.ts';
import { aGroup, aJob, aNode, aSnapshot, T0 } from '../builders.ts';

/**
 * The spot policy of core/spot-policy.ts as the live system uses it: through the planner, for
 * jobs with a deadline. Changeover here is a 180 s boot plus a 60 s restore; decisions hold for a
 * 60 s reconcile plus the 20 s notice margin; the policy aims 30 min before the deadline.
 */

const scaleUps = (p: Plan) => p.actions.filter((a): a is Extract<PlanAction, { kind: 'scale-up' }> => a.kind === 'scale-up');
const preempts = (p: Plan) => p.actions.filter((a): a is Extract<PlanAction, { kind: 'preempt' }> => a.kind === 'preempt');
const H = 3600_000;
const iso = (ms: number) => new Date(ms).toISOString();

const spot = aGroup({ instanceType: 'g5.xlarge', capacityType: 'spot' });
const od = aGroup({ instanceType: 'g5.xlarge' });
const spotGone = new Map([[spot.offerings[0]!.id, T0 + 3 * H]]);

const deadlineJob = (workH: number, deadlineInH: number, extra: Parameters<typeof aJob>[0] = {}) =>
  aJob({
    id: 'team-a.paper',
    spec: { checkpoint: { intervalSec: 600 }, expectedRuntimeSec: workH * 3600, deadline: iso(T0 + deadlineInH * H) },
    ...extra,
  });

describe('planner: deadline jobs follow the spot policy', () => {
  it('runs a deadline job with slack on spot when spot can be had', () => {
    const p = plan(aSnapshot({ groups: [spot, od], pendingJobs: [deadlineJob(10, 40)] }));
    expect(scaleUps(p).map((a) => a.groupId)).toEqual([spot.id]);
  });

  it('waits for spot rather than paying on-demand while the deadline leaves room for the spot it expects', () => {
    const p = plan(aSnapshot({ groups: [spot, od], unavailableUntilMs: spotGone, pendingJobs: [deadlineJob(10, 40)] }));
    expect(scaleUps(p)).toEqual([]);
    expect(p.waiting.find((w) => w.jobId === 'team-a.paper')).toBeDefined();
    // The same job without a deadline falls back to on-demand after the usual spot patience: the
    // deadline is what lets it wait longer.
    const later = aSnapshot({
      nowMs: T0 + 2 * H,
      groups: [spot, od],
      unavailableUntilMs: spotGone,
      pendingJobs: [deadlineJob(10, 40, { queuedAtMs: T0 })],
    });
    expect(scaleUps(plan(later))).toEqual([]);
    const noDeadline = aJob({
      id: 'team-a.free',
      queuedAtMs: T0,
      spec: { checkpoint: { intervalSec: 600 }, expectedRuntimeSec: 10 * 3600 },
    });
    expect(scaleUps(plan({ ...later, pendingJobs: [noDeadline] })).map((a) => a.groupId)).toEqual([od.id]);
  });

  it('goes on-demand when no spot can be had and the deadline cannot wait for it', () => {
    const p = plan(aSnapshot({ groups: [spot, od], unavailableUntilMs: spotGone, pendingJobs: [deadlineJob(10, 11)] }));
    expect(scaleUps(p).map((a) => a.groupId)).toEqual([od.id]);
  });

  describe('a running deadline job on spot', () => {
    // 10 h of work, running for 1 h since its start: 9 h left.
    const onSpot = (deadlineMs: number, spec: Record<string, unknown> = {}) =>
      aJob({
        id: 'team-a.paper',
        state: 'running',
        startedAtMs: T0 - H,
        placement: { nodes: [{ nodeId: 'i-spot', gpuIndices: [0] }], capacityType: 'spot' },
        spec: { checkpoint: { intervalSec: 600 }, expectedRuntimeSec: 10 * 3600, deadline: iso(deadlineMs), ...spec },
      });
    const nodes = [aNode('i-spot', { group: spot })];

    it('is checkpointed and moved to on-demand once its slack runs out, and the reason says so', () => {
      // 9 h of work, 9 h + 35 min to the deadline: the policy's 30 min margin leaves 5 min, less
      // than one more interval plus a changeover.
      const p = plan(aSnapshot({ groups: [spot, od], nodes, activeJobs: [onSpot(T0 + 9 * H + 35 * 60_000)] }));
      expect(preempts(p)).toEqual([
        expect.objectContaining({ jobId: 'team-a.paper', reason: expect.objectContaining({ code: 'deadline-on-demand' }) }),
      ]);
      expect(preempts(p)[0]!.reason.message).toMatch(/slack on spot has run out \(35 min for 540 min of work/);
    });

    it('stays on spot while its slack lasts', () => {
      expect(preempts(plan(aSnapshot({ groups: [spot, od], nodes, activeJobs: [onSpot(T0 + 30 * H)] })))).toEqual([]);
    });

    it('stays where it is when moving cannot help: no checkpoint, or too late for on-demand to finish', () => {
      const tight = T0 + 9 * H + 35 * 60_000;
      expect(preempts(plan(aSnapshot({ groups: [spot, od], nodes, activeJobs: [onSpot(tight, { checkpoint: undefined })] })))).toEqual([]);
      // Deadline in 9 h + 2 min: on-demand needs 9 h plus a 4 min changeover, so moving would only make it later.
      expect(preempts(plan(aSnapshot({ groups: [spot, od], nodes, activeJobs: [onSpot(T0 + 9 * H + 2 * 60_000)] })))).toEqual([]);
    });

    it('once requeued with no slack, it is placed on on-demand even when spot can be had', () => {
      const requeued = deadlineJob(9, 9 + 35 / 60, { queuedAtMs: T0, attempt: 2 });
      expect(scaleUps(plan(aSnapshot({ groups: [spot, od], pendingJobs: [requeued] }))).map((a) => a.groupId)).toEqual([od.id]);
    });
  });

  describe('a running deadline job on on-demand', () => {
    const odGroup = aGroup({ instanceType: 'g5.xlarge', desiredCapacity: 1 });
    const onOd = (deadlineMs: number) =>
      aJob({
        id: 'team-a.paper',
        state: 'running',
        startedAtMs: T0 - H,
        placement: { nodes: [{ nodeId: 'i-od', gpuIndices: [0] }], capacityType: 'on-demand' },
        spec: { checkpoint: { intervalSec: 600 }, expectedRuntimeSec: 48 * 3600, deadline: iso(deadlineMs) },
      });
    const nodes = [aNode('i-od', { group: odGroup })];

    it('moves back to spot when the deadline is far enough to ride out the spot it expects', () => {
      const spotUp = { ...spot, desiredCapacity: 1 };
      const p = plan(
        aSnapshot({ groups: [spotUp, odGroup], nodes: [...nodes, aNode('i-spot', { group: spotUp })], activeJobs: [onOd(T0 + 120 * H)] }),
      );
      expect(preempts(p)).toEqual([
        expect.objectContaining({ jobId: 'team-a.paper', reason: expect.objectContaining({ code: 'rebalance-to-spot' }) }),
      ]);
    });

    it('stays on on-demand when the deadline is too close to risk spot', () => {
      expect(preempts(plan(aSnapshot({ groups: [spot, odGroup], nodes, activeJobs: [onOd(T0 + 50 * H)] })))).toEqual([]);
    });
  });
});
