import { BUDGET_TAGS } from '../../core/budget.ts';
import type { TeamTagSet } from '../../core/ports.ts';
import type { SimGroupConfig } from './sim-cloud.ts';

/** The trace `npm start` replays (see data/PROVENANCE.md). */
export const BUILT_IN_TRACE = new URL('../../data/traces/philly-6214e9-48h.csv', import.meta.url);

/**
 * The simulated fleet for the built-in workload: V100 machines (p3 family) in the two us-west-2
 * zones whose spot availability traces ship with the project, one group per instance type and
 * capacity type, as a platform team would configure Auto Scaling groups.
 */
export const DEFAULT_SIM_GROUPS: readonly SimGroupConfig[] = [
  { id: 'p3-2xl-spot', instanceTypes: ['p3.2xlarge'], zones: ['us-west-2a', 'us-west-2b'], capacityType: 'spot', minSize: 0, maxSize: 400 },
  { id: 'p3-2xl-od', instanceTypes: ['p3.2xlarge'], zones: ['us-west-2a', 'us-west-2b'], capacityType: 'on-demand', minSize: 0, maxSize: 400 },
  { id: 'p3-8xl-spot', instanceTypes: ['p3.8xlarge'], zones: ['us-west-2a', 'us-west-2b'], capacityType: 'spot', minSize: 0, maxSize: 100 },
  { id: 'p3-8xl-od', instanceTypes: ['p3.8xlarge'], zones: ['us-west-2a', 'us-west-2b'], capacityType: 'on-demand', minSize: 0, maxSize: 100 },
  { id: 'p3-16xl-spot', instanceTypes: ['p3.16xlarge'], zones: ['us-west-2a', 'us-west-2b'], capacityType: 'spot', minSize: 0, maxSize: 60 },
  { id: 'p3-16xl-od', instanceTypes: ['p3.16xlarge'], zones: ['us-west-2a', 'us-west-2b'], capacityType: 'on-demand', minSize: 0, maxSize: 60 },
];

/** Budget tags for the teams of the built-in workload: monthly budgets that alert at 50/80/100%. */
export function defaultTeamTags(teams: readonly string[], budgetUsd = 250_000): TeamTagSet[] {
  return teams.map((team) => ({
    team,
    resource: `sim:queue/${team}`,
    tags: {
      [BUDGET_TAGS.team]: team,
      [BUDGET_TAGS.amount]: String(budgetUsd),
      [BUDGET_TAGS.period]: 'monthly',
      [BUDGET_TAGS.action]: 'alert',
      [BUDGET_TAGS.alertAt]: '50,80,100',
      [BUDGET_TAGS.weight]: '1',
    },
  }));
}
