/** The policies a simulation can replay a trace under: gpu-fleet itself and three baselines. */
export const SIM_POLICIES = ['gpu-fleet', 'on-demand', 'spot-greedy', 'cheapest-fit'] as const;
export type SimPolicyName = (typeof SIM_POLICIES)[number];
