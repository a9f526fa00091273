/**
 * Billing discounts on on-demand usage: Savings Plans and Reserved Instances, as the operator
 * declares them per instance family (gpu-fleet reads neither from the account: the Savings Plans
 * and Cost Explorer APIs answer in the payer account, which the stack's account often is not). A
 * plan commits to an hourly amount at the discounted rate; on-demand usage of the family inside
 * that commitment costs the discounted rate, usage beyond it the list price.
 *
 * - The planner weighs the marginal price at the fleet's current usage: a new machine of the
 *   family costs the discounted rate while the commitment still covers it, else the list price.
 * - The accounts bill every on-demand machine of the family at the effective price: what the
 *   family's usage costs under the plan, spread over its machines.
 */
import { offeringId, type PriceQuote } from './catalog.ts';
import { inService, type Instance } from './fleet.ts';
import type { MicroUsd } from './money.ts';

export interface DiscountPlan {
  /** The instance family it covers (`p4d`, `g5`): the part of the instance type before the dot. */
  readonly family: string;
  /** The discount on the list price, in hundredths of a percent (4000 = 40%). */
  readonly discountBps: number;
  /** What the plan commits to per hour, at the discounted rate (µUSD). */
  readonly commitmentMicroUsdPerHour: MicroUsd;
  /** Where it comes from, for the quote's source ("Savings Plan sp-…", "RI"). */
  readonly name?: string;
}

export function familyOf(instanceType: string): string {
  const dot = instanceType.indexOf('.');
  return dot < 0 ? instanceType : instanceType.slice(0, dot);
}

const discounted = (listMicroUsd: number, bps: number) => Math.round((listMicroUsd * (10_000 - bps)) / 10_000);

/**
 * The on-demand quotes of every family with a plan, re-priced for the usage now: `instances` are
 * the machines the clouds list (the on-demand ones in service count toward the commitment).
 * Quotes of other offerings are returned as they were.
 */
export function applyDiscounts(
  prices: ReadonlyMap<string, PriceQuote>,
  instances: readonly Instance[],
  plans: readonly DiscountPlan[],
): Map<string, PriceQuote> {
  const out = new Map(prices);
  if (plans.length === 0) return out;
  const byFamily = new Map(plans.map((p) => [p.family, p]));
  // The list price of the family's on-demand machines in service now.
  const listInUse = new Map<string, number>();
  const counted = new Map<string, number>();
  for (const i of instances) {
    if (i.capacityType !== 'on-demand' || !inService(i.state)) continue;
    const family = familyOf(i.instanceType);
    if (!byFamily.has(family)) continue;
    const q = prices.get(offeringId(i));
    if (!q) continue;
    listInUse.set(family, (listInUse.get(family) ?? 0) + q.onDemandMicroUsdPerHour);
    counted.set(family, (counted.get(family) ?? 0) + 1);
  }
  for (const [id, q] of prices) {
    if (!id.endsWith('/on-demand')) continue;
    const type = id.split('/')[2] ?? '';
    const plan = byFamily.get(familyOf(type));
    if (!plan) continue;
    const list = q.onDemandMicroUsdPerHour;
    const usedAtDiscount = discounted(listInUse.get(plan.family) ?? 0, plan.discountBps);
    const rate = discounted(list, plan.discountBps);
    // Marginal: one more machine inside the commitment costs the discounted rate; beyond it, the list price.
    const marginal = usedAtDiscount + rate <= plan.commitmentMicroUsdPerHour ? rate : list;
    out.set(id, {
      ...q,
      priceMicroUsdPerHour: marginal,
      billedMicroUsdPerHour: Math.round(list * effectiveShare(listInUse.get(plan.family) ?? 0, plan)),
      source: `${q.source}; ${plan.name ?? `${plan.family} discount`} ${plan.discountBps / 100}% within ${(plan.commitmentMicroUsdPerHour / 1e6).toFixed(2)} $/h`,
    });
  }
  return out;
}

/**
 * What the family's on-demand usage costs under the plan as a share of its list price: the
 * discounted rate while the usage fits the commitment; beyond, the commitment plus the list price
 * of the usage it does not cover.
 */
export function effectiveShare(listMicroUsdPerHour: number, plan: DiscountPlan): number {
  const keep = (10_000 - plan.discountBps) / 10_000;
  if (listMicroUsdPerHour <= 0) return keep;
  const atDiscount = listMicroUsdPerHour * keep;
  if (atDiscount <= plan.commitmentMicroUsdPerHour) return keep;
  const coveredList = plan.commitmentMicroUsdPerHour / keep;
  return (plan.commitmentMicroUsdPerHour + (listMicroUsdPerHour - coveredList)) / listMicroUsdPerHour;
}
