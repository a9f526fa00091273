/** The policies a simulation can replay a trace under: gpu-fleet itself and three baselines. */
export const SIM_POLICIES = ['gpu-fleet', 'on-demand', 'spot-greedy', 'cheapest-fit'] as const;
/**
 * The policies of the reservation scenario (bench:replay --reservations), beside gpu-fleet: gpu-fleet
 * as it was before it knew reservations (a group launching into one is an on-demand group at list
 * price to it), and a Karpenter-like "reserved first, then the cheapest that fits" (it prefers
 * reserved offerings and counts what each still holds, and drains a block's machines ahead of its
 * end, but does not weigh how long work runs against when a block ends).
 */
export const RESERVATION_POLICIES = ['gpu-fleet', 'reservation-unaware', 'reserved-first'] as const;
export type SimPolicyName = (typeof SIM_POLICIES)[number] | (typeof RESERVATION_POLICIES)[number];
