import { describe, expect, it } from 'vitest';
import { applyDiscounts, effectiveShare, familyOf, type DiscountPlan } from '../../core/discounts.ts';
import type { Instance } from '../../core/fleet.ts';
import { plan } from '../../core/planner/planner.ts';
import type { PlanAction } from '../../core/plan.ts';
import { aGroup, aJob, aNode, aSnapshot, PRICES, pricesFor } from '../builders.ts';

const OD = PRICES['p3.2xlarge']!.od; // 3,060,000 µUSD/h
const SPOT = PRICES['p3.2xlarge']!.spot; // 900,000
// 40% off p3, committing to two machines' worth at the discounted rate.
const P3: DiscountPlan = { family: 'p3', discountBps: 4000, commitmentMicroUsdPerHour: 2 * 1_836_000, name: 'Savings Plan sp-1' };

const machine = (id: string, over: Partial<Instance> = {}) => aNode(id, { instanceType: 'p3.2xlarge', ...over }).instance;

describe('Savings Plans and RIs, as declared', () => {
  it('prices a new on-demand machine of the family at the discounted rate while the commitment covers it, else at list', () => {
    const g = aGroup({ instanceType: 'p3.2xlarge' });
    const id = g.offerings[0]!.id;
    const list = pricesFor([g]);
    expect(familyOf('p3.2xlarge')).toBe('p3');
    // Nothing running: 40% off.
    expect(applyDiscounts(list, [], [P3]).get(id)).toMatchObject({ priceMicroUsdPerHour: 1_836_000, onDemandMicroUsdPerHour: OD });
    // One running: the second still fits the commitment.
    expect(applyDiscounts(list, [machine('i-1')], [P3]).get(id)!.priceMicroUsdPerHour).toBe(1_836_000);
    // Two running: the commitment is used up, a third costs list.
    const two = applyDiscounts(list, [machine('i-1'), machine('i-2')], [P3]).get(id)!;
    expect(two.priceMicroUsdPerHour).toBe(OD);
    expect(two.billedMicroUsdPerHour).toBe(1_836_000);
    // Machines that are spot, gone, or of another family do not use the commitment; other families keep their list price.
    expect(
      applyDiscounts(list, [machine('i-1', { capacityType: 'spot' }), machine('i-2', { state: 'terminated' })], [P3]).get(id)!
        .priceMicroUsdPerHour,
    ).toBe(1_836_000);
    const g5 = aGroup({ instanceType: 'g5.xlarge' });
    expect(applyDiscounts(pricesFor([g5]), [], [P3]).get(g5.offerings[0]!.id)!.priceMicroUsdPerHour).toBe(PRICES['g5.xlarge']!.od);
  });

  it('bills the family’s machines at the effective price: the commitment plus list beyond what it covers, spread over them', () => {
    // Three machines at list 3 × 3.06 = 9.18 $/h; the commitment 3.672 $/h covers 6.12 $/h of list; 3.06 $/h runs at list.
    expect(effectiveShare(3 * OD, P3)).toBeCloseTo((3_672_000 + OD) / (3 * OD), 12);
    expect(effectiveShare(OD, P3)).toBe(0.6);
    const g = aGroup({ instanceType: 'p3.2xlarge' });
    const q = applyDiscounts(pricesFor([g]), [machine('i-1'), machine('i-2'), machine('i-3')], [P3]).get(g.offerings[0]!.id)!;
    expect(q.billedMicroUsdPerHour).toBe(Math.round((3_672_000 + OD) / 3));
    expect(q.source).toMatch(/Savings Plan sp-1 40% within 3.67 \$\/h/);
  });

  it('the planner takes discounted on-demand over spot for work that spot would cost more for, and list-price on-demand not', () => {
    const spot = aGroup({ id: 'p3-spot', instanceType: 'p3.2xlarge', capacityType: 'spot' });
    const od = aGroup({ id: 'p3-od', instanceType: 'p3.2xlarge' });
    // A long job without checkpoints on a risky pool: spot's expected cost (rework) is above the discounted rate, below list.
    const job = aJob({ id: 'team-a.long', spec: { expectedRuntimeSec: 20 * 3600, checkpoint: undefined } });
    const snapshot = (prices: ReturnType<typeof pricesFor>) =>
      aSnapshot({ groups: [spot, od], prices, pendingJobs: [job], poolRiskPerHour: new Map([[spot.offerings[0]!.id, 0.05]]) });
    const up = (a: readonly PlanAction[]) => a.filter((x) => x.kind === 'scale-up').map((x) => (x as { groupId: string }).groupId);
    const list = pricesFor([spot, od]);
    expect(up(plan(snapshot(list)).actions)).toEqual(['p3-spot']);
    const withPlan = applyDiscounts(list, [], [{ ...P3, discountBps: 7000 }]);
    expect(withPlan.get(od.offerings[0]!.id)!.priceMicroUsdPerHour).toBeLessThan(SPOT * 2);
    expect(up(plan(snapshot(withPlan)).actions)).toEqual(['p3-od']);
  });
});
