import { describe, expect, it } from 'vitest';
import type { FleetNode, NodeGroup } from '../../core/fleet.ts';
import type { Plan, PlanAction } from '../../core/plan.ts';
import { plan } from '../../core/planner/planner.ts';
import {
  BLOCK_TERMINATION_LEAD_MS,
  fitsBeforeTermination,
  reservationRoom,
  reservedOffering,
  reservedQuote,
  type Reservation,
} from '../../core/reservation.ts';
import { aGroup, aJob, aNode, aReservation, aSnapshot, PRICES, pricesFor, T0 } from '../builders.ts';
import { running } from './planner/support.ts';

const HOUR = 3_600_000;
const placements = (p: Plan) => p.actions.filter((a): a is Extract<PlanAction, { kind: 'place' }> => a.kind === 'place');
const scaleUps = (p: Plan) => p.actions.filter((a): a is Extract<PlanAction, { kind: 'scale-up' }> => a.kind === 'scale-up');
const scaleIns = (p: Plan) => p.actions.filter((a) => a.kind === 'scale-in');

/** A group launching into the reservation only, and the prices of it beside the other groups'. */
function reservedWorld(r: Reservation, others: NodeGroup[], group: Partial<NodeGroup> = {}) {
  const g: NodeGroup = {
    id: `${r.instanceType}-${r.id}`,
    cloud: 'aws',
    region: r.region,
    offerings: [reservedOffering(r)],
    minSize: 0,
    maxSize: 10,
    desiredCapacity: 0,
    ...group,
  };
  const prices = pricesFor(others);
  prices.set(reservedOffering(r).id, reservedQuote(r, PRICES[r.instanceType]!.od));
  return { group: g, groups: [g, ...others], prices, reservations: new Map([[r.id, r]]) };
}

function reservedNode(
  id: string,
  r: Reservation,
  g: NodeGroup,
  record: NonNullable<Parameters<typeof aNode>[1]>['record'] = {},
): FleetNode {
  const n = aNode(id, { group: g, record });
  return { ...n, instance: { ...n.instance, reservationId: r.id } };
}

describe('reservations: the rules', () => {
  it('a reservation adds no more than it holds free, less launches under way, and nothing once it is not active', () => {
    const r = aReservation({ availableCount: 3 });
    expect(reservationRoom(r, 0, T0, 0)).toBe(3);
    expect(reservationRoom(r, 2, T0, 0)).toBe(1);
    expect(reservationRoom(r, 5, T0, 0)).toBe(0);
    expect(reservationRoom({ ...r, state: 'scheduled' }, 0, T0, 0)).toBe(0);
    expect(reservationRoom({ ...r, state: 'expired' }, 0, T0, 0)).toBe(0);
    // A block whose machines go within the minimum run time is not launched into.
    const block = { ...r, kind: 'capacity-block' as const, endMs: T0 + BLOCK_TERMINATION_LEAD_MS + 10 * 60_000 };
    expect(reservationRoom(block, 0, T0, 15 * 60_000)).toBe(0);
    expect(reservationRoom(block, 0, T0, 5 * 60_000)).toBe(3);
  });

  it('work goes on a block only if it finishes, or (interruptible) reaches a checkpoint, before the machines go', () => {
    const end = T0 + 2 * HOUR;
    expect(fitsBeforeTermination({ remainingSec: 3000, interruptible: false }, 180, T0, end)).toBe(true);
    expect(fitsBeforeTermination({ remainingSec: 3 * 3600, interruptible: false }, 180, T0, end)).toBe(false);
    expect(fitsBeforeTermination({ remainingSec: 3 * 3600, checkpointIntervalSec: 1800, interruptible: true }, 180, T0, end)).toBe(true);
    expect(fitsBeforeTermination({ remainingSec: 3 * 3600, checkpointIntervalSec: 1800, interruptible: false }, 180, T0, end)).toBe(false);
    expect(fitsBeforeTermination({ remainingSec: 3 * 3600, checkpointIntervalSec: 3 * 3600, interruptible: true }, 180, T0, end)).toBe(
      false,
    );
    expect(fitsBeforeTermination({ remainingSec: 10, interruptible: false }, 180, T0, undefined)).toBe(true);
  });

  it('a reserved offering costs nothing at the margin and bills its reservation’s rate; two reservations of one type and zone are two offerings', () => {
    const a = aReservation();
    const b = aReservation({ id: 'cr-0ffff0000aaaa1111' });
    expect(reservedOffering(a).id).toBe('aws/us-east-1a/g5.xlarge/reserved/cr-0a1b2c3d4e5f60718');
    expect(reservedOffering(a).id).not.toBe(reservedOffering(b).id);
    expect(reservedQuote(a, 1_006_000)).toMatchObject({
      priceMicroUsdPerHour: 0,
      billedMicroUsdPerHour: 1_006_000,
      onDemandMicroUsdPerHour: 1_006_000,
    });
  });
});

describe('reservations: the planner fills prepaid capacity first', () => {
  it('buys into a reservation with free capacity before spot or on-demand, and no more than it holds free', () => {
    const r = aReservation({ availableCount: 2 });
    const spot = aGroup({ instanceType: 'g5.xlarge', capacityType: 'spot' });
    const od = aGroup({ instanceType: 'g5.xlarge' });
    const w = reservedWorld(r, [spot, od]);
    const jobs = [0, 1, 2].map((i) => aJob({ id: `team-a.j${i}` }));
    const p = plan(aSnapshot({ groups: w.groups, prices: w.prices, reservations: w.reservations, pendingJobs: jobs }));
    const ups = scaleUps(p);
    expect(ups.find((a) => a.groupId === w.group.id)).toMatchObject({ fromDesired: 0, toDesired: 2 });
    // The third job goes to the cheapest of the rest: spot.
    expect(ups.find((a) => a.groupId === spot.id)).toMatchObject({ toDesired: 1 });
    expect(ups.find((a) => a.groupId === od.id)).toBeUndefined();
  });

  it('counts launches under way against the reservation’s free count', () => {
    const r = aReservation({ availableCount: 2 });
    const od = aGroup({ instanceType: 'g5.xlarge' });
    // The group asked for 2 machines that have not started: the reservation still says 2 free, but they are spoken for.
    const w = reservedWorld(r, [od], { desiredCapacity: 2 });
    const jobs = [0, 1, 2, 3].map((i) => aJob({ id: `team-a.j${i}` }));
    const p = plan(aSnapshot({ groups: w.groups, prices: w.prices, reservations: w.reservations, pendingJobs: jobs }));
    expect(scaleUps(p).find((a) => a.groupId === w.group.id)).toBeUndefined();
    expect(scaleUps(p).find((a) => a.groupId === od.id)).toMatchObject({ toDesired: 2 });
  });

  it('places work that may not be interrupted on an ODCR, but not on an interruptible reservation', () => {
    const od = aGroup({ instanceType: 'g5.xlarge' });
    const steady = reservedWorld(aReservation(), [od]);
    const job = aJob({ id: 'team-a.steady', spec: { interruptible: false } });
    const p1 = plan(aSnapshot({ groups: steady.groups, prices: steady.prices, reservations: steady.reservations, pendingJobs: [job] }));
    expect(scaleUps(p1).map((a) => a.groupId)).toEqual([steady.group.id]);
    const reclaimable = reservedWorld(aReservation({ interruptible: true }), [od]);
    const p2 = plan(
      aSnapshot({ groups: reclaimable.groups, prices: reclaimable.prices, reservations: reclaimable.reservations, pendingJobs: [job] }),
    );
    expect(scaleUps(p2).map((a) => a.groupId)).toEqual([od.id]);
  });

  it('places on a Capacity Block only work that finishes or reaches a checkpoint before the block’s machines go', () => {
    // The block ends in 3 h: its machines go at 2 h 30 min.
    const block = aReservation({ kind: 'capacity-block', endMs: T0 + 3 * HOUR, priceMicroUsdPerHour: 700_000 });
    const od = aGroup({ instanceType: 'g5.xlarge' });
    const w = reservedWorld(block, [od]);
    const node = reservedNode('i-block', block, w.group);
    const long = aJob({ id: 'team-a.long', spec: { expectedRuntimeSec: 10 * 3600, checkpoint: undefined }, priority: 2 } as never);
    const snap = (pending: ReturnType<typeof aJob>[]) =>
      aSnapshot({ groups: w.groups, prices: w.prices, reservations: w.reservations, nodes: [node], pendingJobs: pending });
    // 10 h without checkpoints: not on the block.
    expect(placements(plan(snap([long])))).toEqual([]);
    // 10 h with a checkpoint every 30 min: on the block (it is checkpointed and requeued ahead of the end).
    const ckpt = aJob({
      id: 'team-a.ckpt',
      spec: { expectedRuntimeSec: 10 * 3600, checkpoint: { intervalSec: 1800, gracePeriodSec: 60 } },
    });
    const p = plan(snap([ckpt]));
    expect(placements(p).map((a) => [a.jobId, a.placement.capacityType, a.placement.reservationId])).toEqual([
      ['team-a.ckpt', 'reserved', block.id],
    ]);
    // Its share is billed at the block's rate, not the nothing it costs at the margin.
    expect(placements(p)[0]!.placement.priceMicroUsdPerHour).toBe(700_000);
    // 1 h and may not be interrupted: finishes in time, on the block.
    const short = aJob({ id: 'team-a.short', spec: { expectedRuntimeSec: 1800, interruptible: false } });
    expect(placements(plan(snap([short]))).map((a) => a.jobId)).toEqual(['team-a.short']);
  });

  it('never lets an idle reserved machine go to save money; an idle on-demand one goes', () => {
    const r = aReservation();
    const od = aGroup({ instanceType: 'g5.xlarge', desiredCapacity: 1 });
    const w = reservedWorld(r, [od], { desiredCapacity: 1 });
    const idle = { idleSinceMs: T0 - HOUR };
    const p = plan(
      aSnapshot({
        groups: w.groups,
        prices: w.prices,
        reservations: w.reservations,
        nodes: [reservedNode('i-res', r, w.group, idle), aNode('i-od', { group: od, record: idle })],
      }),
    );
    expect(scaleIns(p).map((a) => (a as { instanceId: string }).instanceId)).toEqual(['i-od']);
  });

  it('fills a reserved machine already up before buying anything, for work that fits it', () => {
    const r = aReservation();
    const spot = aGroup({ instanceType: 'g5.xlarge', capacityType: 'spot' });
    const w = reservedWorld(r, [spot], { desiredCapacity: 2 });
    const p = plan(
      aSnapshot({
        groups: w.groups,
        prices: w.prices,
        reservations: w.reservations,
        nodes: [reservedNode('i-r1', r, w.group), reservedNode('i-r2', r, w.group)],
        activeJobs: [running('team-a.busy', 'i-r1', { gpuIndices: [0] })],
        pendingJobs: [aJob({ id: 'team-a.next' })],
      }),
    );
    expect(placements(p).map((a) => [a.jobId, a.placement.nodes[0]!.nodeId])).toEqual([['team-a.next', 'i-r2']]);
    expect(scaleUps(p)).toEqual([]);
  });
});
