import { BUDGET_TAGS } from '../../core/budget.ts';
import type { TeamTagSet } from '../../core/ports.ts';
import type { SimGroupConfig } from './sim-cloud.ts';
import type { SpotSetup } from './simulation.ts';
import { loadAvailabilityTrace, type AvailabilityTrace } from './spot-market.ts';

/** The trace `npm start` replays (see data/PROVENANCE.md). */
export const BUILT_IN_TRACE = new URL('../../data/traces/philly-6214e9-48h.csv', import.meta.url);

/** Traces shipped in data/traces, by short name for `--trace NAME`. */
export const SHIPPED_TRACES: Readonly<Record<string, URL>> = {
  philly: BUILT_IN_TRACE,
  'philly-6214e9-48h': BUILT_IN_TRACE,
};

/**
 * The simulated fleet for the built-in workload: V100 machines (p3 family) in the two us-west-2
 * zones whose spot availability traces ship with the project, one group per instance type and
 * capacity type, as a platform team would configure Auto Scaling groups.
 */
export const DEFAULT_SIM_GROUPS: readonly SimGroupConfig[] = [
  { id: 'p3-2xl-spot', instanceTypes: ['p3.2xlarge'], zones: ['us-west-2a', 'us-west-2b'], capacityType: 'spot', minSize: 0, maxSize: 400 },
  {
    id: 'p3-2xl-od',
    instanceTypes: ['p3.2xlarge'],
    zones: ['us-west-2a', 'us-west-2b'],
    capacityType: 'on-demand',
    minSize: 0,
    maxSize: 400,
  },
  { id: 'p3-8xl-spot', instanceTypes: ['p3.8xlarge'], zones: ['us-west-2a', 'us-west-2b'], capacityType: 'spot', minSize: 0, maxSize: 100 },
  {
    id: 'p3-8xl-od',
    instanceTypes: ['p3.8xlarge'],
    zones: ['us-west-2a', 'us-west-2b'],
    capacityType: 'on-demand',
    minSize: 0,
    maxSize: 100,
  },
  {
    id: 'p3-16xl-spot',
    instanceTypes: ['p3.16xlarge'],
    zones: ['us-west-2a', 'us-west-2b'],
    capacityType: 'spot',
    minSize: 0,
    maxSize: 60,
  },
  {
    id: 'p3-16xl-od',
    instanceTypes: ['p3.16xlarge'],
    zones: ['us-west-2a', 'us-west-2b'],
    capacityType: 'on-demand',
    minSize: 0,
    maxSize: 60,
  },
];

const traceCache = new Map<string, AvailabilityTrace>();
function shippedAvailability(name: string): AvailabilityTrace {
  let t = traceCache.get(name);
  if (!t) {
    t = loadAvailabilityTrace(new URL(`../../data/spot/availability/${name}.json`, import.meta.url));
    traceCache.set(name, t);
  }
  return t;
}

/**
 * The spot market of the built-in fleet: SkyPilot's measured availability of one V100 spot
 * machine (p3.2xlarge, `v100_1`) and of an 8-V100 machine (p3.16xlarge, `v100_8`) in us-west-2a
 * and us-west-2b, Oct–Nov 2022. p3.8xlarge (4 V100) follows the 8-GPU trace of its zone.
 */
export const BUILT_IN_SPOT: SpotSetup = {
  kind: 'traces',
  traceOf: ({ zone, instanceType }) => {
    if (zone !== 'us-west-2a' && zone !== 'us-west-2b') return undefined;
    if (instanceType === 'p3.2xlarge') return shippedAvailability(`${zone}_v100_1`);
    if (instanceType === 'p3.8xlarge' || instanceType === 'p3.16xlarge') return shippedAvailability(`${zone}_v100_8`);
    return undefined;
  },
};

/** Budget tags for the teams of the built-in workload: monthly budgets that alert at 25/50/80/100%. */
export function defaultTeamTags(teams: readonly string[], budgetUsd: number | ((team: string) => number) = 2_500): TeamTagSet[] {
  return teams.map((team) => ({
    team,
    resource: `sim:queue/${team}`,
    tags: {
      [BUDGET_TAGS.team]: team,
      [BUDGET_TAGS.amount]: String(typeof budgetUsd === 'number' ? budgetUsd : budgetUsd(team)),
      [BUDGET_TAGS.period]: 'monthly',
      [BUDGET_TAGS.action]: 'alert',
      [BUDGET_TAGS.alertAt]: '25/50/80/100',
      [BUDGET_TAGS.weight]: '1',
    },
  }));
}
