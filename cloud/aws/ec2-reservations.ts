import { type CapacityReservation, DescribeCapacityReservationsCommand, type EC2Client } from '@aws-sdk/client-ec2';
import type { ReservationSource } from '../../core/ports.ts';
import type { Reservation, ReservationState } from '../../core/reservation.ts';
import { parseUsd, type MicroUsd } from '../../core/money.ts';
import { translateAwsError } from './errors.ts';

/** Tags gpu-fleet reads on capacity reservations. */
export const RESERVATION_TAGS = {
  managed: 'gpu-fleet:managed',
  /** What the operator paid for a Capacity Block up front, in dollars (EC2 does not say it on the reservation). */
  upfrontFee: 'gpu-fleet:upfront-fee-usd',
} as const;

/**
 * Which reservations gpu-fleet may use, as Karpenter's `capacityReservationSelectorTerms`: any term
 * matches (a reservation id, or every tag of a term). Default: the `gpu-fleet:managed=true` tag.
 */
export type ReservationSelectorTerm = { readonly id: string } | { readonly tags: Readonly<Record<string, string>> };

export const DEFAULT_RESERVATION_SELECTOR: readonly ReservationSelectorTerm[] = [{ tags: { [RESERVATION_TAGS.managed]: 'true' } }];

export interface Ec2ReservationsOptions {
  readonly region: string;
  readonly selector?: readonly ReservationSelectorTerm[];
  /** The on-demand price of a type in a zone (µUSD/h), from the shipped catalogue: what an ODCR bills per machine-hour. */
  readonly onDemandPrice: (instanceType: string, zone: string) => MicroUsd | undefined;
}

/**
 * Capacity reservations in one region, from EC2 DescribeCapacityReservations (paginated): those the
 * selector finds and those node groups launch into. What is read from the account: type, zone,
 * total and available count, state, start and end, `ReservationType` (default or capacity-block)
 * and `Interruptible`. What the operator declares: a Capacity Block's up-front fee (tag
 * `gpu-fleet:upfront-fee-usd`), spread over its hours and machines; without it a block is
 * priced at on-demand (what it would cost at most), and the reservation says so in `problems`.
 * An ODCR bills its type's on-demand price.
 */
export class Ec2Reservations implements ReservationSource {
  readonly cloud = 'aws' as const;
  /** What the last read found wrong (a block without its fee, a fee that is not a number). */
  readonly problems: string[] = [];

  constructor(
    private readonly ec2: EC2Client,
    private readonly options: Ec2ReservationsOptions,
  ) {}

  get scope(): string {
    return this.options.region;
  }

  async listReservations(named: readonly string[]): Promise<Reservation[]> {
    this.problems.length = 0;
    const found = new Map<string, CapacityReservation>();
    const terms = this.options.selector ?? DEFAULT_RESERVATION_SELECTOR;
    const ids = [...new Set([...named, ...terms.flatMap((t) => ('id' in t ? [t.id] : []))])].sort();
    if (ids.length > 0)
      for (const r of await this.describe({ CapacityReservationIds: ids }, ids.join(','))) found.set(r.CapacityReservationId!, r);
    for (const t of terms) {
      if (!('tags' in t)) continue;
      const filters = Object.entries(t.tags).map(([k, v]) => ({ Name: `tag:${k}`, Values: [v] }));
      for (const r of await this.describe({ Filters: filters }, filters.map((f) => `${f.Name}=${f.Values[0]}`).join(' ')))
        found.set(r.CapacityReservationId!, r);
    }
    return [...found.values()].flatMap((r) => {
      const out = this.toReservation(r);
      return out ? [out] : [];
    });
  }

  private async describe(
    input: { CapacityReservationIds?: string[]; Filters?: { Name: string; Values: string[] }[] },
    resource: string,
  ): Promise<CapacityReservation[]> {
    const out: CapacityReservation[] = [];
    let token: string | undefined;
    do {
      let page;
      try {
        page = await this.ec2.send(
          new DescribeCapacityReservationsCommand({
            ...input,
            // MaxResults may not go with explicit ids.
            ...(input.CapacityReservationIds ? {} : { MaxResults: 1000 }),
            ...(token ? { NextToken: token } : {}),
          }),
        );
      } catch (error) {
        throw translateAwsError(error, { operation: 'describe capacity reservations', resource });
      }
      out.push(...(page.CapacityReservations ?? []).filter((r) => r.CapacityReservationId));
      token = page.NextToken;
    } while (token);
    return out;
  }

  private toReservation(r: CapacityReservation): Reservation | undefined {
    const id = r.CapacityReservationId!;
    const zone = r.AvailabilityZone ?? '';
    const type = r.InstanceType ?? '';
    if (!zone || !type) {
      this.problems.push(`reservation ${id}: no instance type or zone in its description; left out`);
      return undefined;
    }
    const kind = r.ReservationType === 'capacity-block' ? 'capacity-block' : 'odcr';
    const total = r.TotalInstanceCount ?? 0;
    const startMs = r.StartDate ? new Date(r.StartDate).getTime() : undefined;
    const endMs = r.EndDate ? new Date(r.EndDate).getTime() : undefined;
    const tags = Object.fromEntries((r.Tags ?? []).filter((t) => t.Key).map((t) => [t.Key!, t.Value ?? '']));
    const od = this.options.onDemandPrice(type, zone);
    let price: MicroUsd | undefined = od;
    if (kind === 'capacity-block') {
      const fee = tags[RESERVATION_TAGS.upfrontFee];
      const termMs = startMs !== undefined && endMs !== undefined ? endMs - startMs : 0;
      const feeMicroUsd = fee === undefined ? undefined : parseUsd(fee);
      if (feeMicroUsd !== undefined && termMs > 0 && total > 0) {
        // The fee over the block's machine-hours, rounded to the micro-dollar (in BigInt: the product passes 2^53).
        const den = BigInt(termMs) * BigInt(total);
        price = Number((BigInt(feeMicroUsd) * 3_600_000n + den / 2n) / den);
      } else {
        this.problems.push(
          fee === undefined
            ? `Capacity Block ${id}: tag ${RESERVATION_TAGS.upfrontFee} (its up-front fee in dollars) is missing; priced at on-demand, which overstates it`
            : `Capacity Block ${id}: ${RESERVATION_TAGS.upfrontFee}="${fee}" is not a dollar amount; priced at on-demand`,
        );
      }
    }
    if (price === undefined) {
      this.problems.push(`reservation ${id}: no on-demand price for ${type} in ${zone} in the shipped catalogue; left out`);
      return undefined;
    }
    return {
      id,
      cloud: 'aws',
      region: this.options.region,
      zone,
      instanceType: type,
      kind,
      interruptible: r.Interruptible === true,
      totalCount: total,
      availableCount: r.AvailableInstanceCount ?? 0,
      state: stateOf(r.State),
      ...(startMs !== undefined ? { startMs } : {}),
      ...(endMs !== undefined ? { endMs } : {}),
      priceMicroUsdPerHour: price,
      tags,
    };
  }
}

/** EC2's reservation states as gpu-fleet tells them apart: only `active` takes machines. */
function stateOf(state: string | undefined): ReservationState {
  switch (state) {
    case 'active':
      return 'active';
    case 'scheduled':
      return 'scheduled';
    case 'expired':
      return 'expired';
    case 'cancelled':
      return 'cancelled';
    case 'pending':
    case 'payment-pending':
    case 'assessing':
    case 'delayed':
      return 'pending';
    default:
      // failed, payment-failed, unsupported, and states added later
      return 'unusable';
  }
}
