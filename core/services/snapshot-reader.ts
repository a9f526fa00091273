import { codeOf, messageOf } from '../errors.ts';
import { teamFromTags } from '../budget.ts';
import { periodKey } from '../period.ts';
import { makeOffering, offeringId, type InstanceType, type Offering, type PriceQuote } from '../catalog.ts';
import { reservedQuote, type Reservation } from '../reservation.ts';
import { applyDiscounts, type DiscountPlan } from '../discounts.ts';
import type { FleetNode, Instance, NodeGroup, NodeRecord } from '../fleet.ts';
import { ACTIVE_STATES, type Job } from '../job.ts';
import type { MicroUsd } from '../money.ts';
import type {
  BudgetMemory,
  BudgetTagSource,
  CatalogSource,
  DegradedScope,
  JobStore,
  NodeGroupProvider,
  NodeStore,
  PoolHistory,
  PriceSource,
  ReservationSource,
  SpendLedger,
  TeamTagSet,
} from '../ports.ts';
import { committedCostMicroUsd } from '../cost-model.ts';
import { poolRatePerHour, poolStatsOf } from '../risk.ts';
import { spotModelFromHistory } from '../spot-model.ts';
import type { Policy, Snapshot } from '../snapshot.ts';
import type { Team } from '../team.ts';

export interface SnapshotPorts {
  readonly providers: readonly NodeGroupProvider[];
  readonly catalog: CatalogSource;
  readonly prices: PriceSource;
  readonly jobs: JobStore;
  readonly nodes: NodeStore;
  readonly budgets: BudgetTagSource;
  readonly ledger: SpendLedger;
  readonly pools: PoolHistory;
  /** Where last valid budgets are kept between runs; without it, only within `teamMemory`. */
  readonly budgetMemory?: BudgetMemory;
  /** The clouds' capacity reservations; without them, reserved offerings have no price and are not bought. */
  readonly reservations?: readonly ReservationSource[];
  /** Savings Plans and Reserved Instances the operator declares, per instance family (core/discounts.ts). */
  readonly discounts?: readonly DiscountPlan[];
  /** Where checkpoints are kept, the network path and the byte prices: the planner prices a save's bytes for its cadence. */
  readonly bytes?: NonNullable<Snapshot['saveBytes']>;
}

/** How far back observed interruptions count towards a pool's risk. */
export const POOL_HISTORY_WINDOW_MS = 30 * 86_400_000;

/** A launch refused because the pool had no capacity (AWS and GCP codes): the spot model reads it as the pool down. */
const CAPACITY_REFUSAL = /InsufficientInstanceCapacity|RESOURCE_POOL_EXHAUSTED|SpotMaxPriceTooLow|STOCKOUT|capacity-not-available/i;

/** A machine not noted for this many reconciles is gone, not still running: its pool is no longer watched. */
const SIGHTING_STALE_INTERVALS = 3;

/** Budget tags are read with the last valid values carried from one read to the next. */
export type TeamMemory = Map<string, Team>;

export interface WorldView {
  readonly groups: NodeGroup[];
  readonly instances: Instance[];
  readonly records: NodeRecord[];
  readonly pendingJobs: Job[];
  readonly activeJobs: Job[];
  /** Providers (or single groups) whose listing failed (after the SDK's retries): their groups and machines are not in this view. */
  readonly degraded: DegradedScope[];
}

/** Reads what the clouds and the state store say right now. */
export async function readWorld(ports: SnapshotPorts): Promise<WorldView> {
  // One provider failing does not stop the fleet: it is left out of this view, the others are read.
  const perProvider = Promise.all(ports.providers.map((p) => readProvider(p)));
  const [read, records, pendingJobs, activeJobs] = await Promise.all([
    perProvider,
    ports.nodes.list(),
    ports.jobs.listByState(['pending']),
    ports.jobs.listByState(ACTIVE_STATES),
  ]);
  return {
    groups: read.flatMap((r) => r.groups),
    instances: read.flatMap((r) => r.instances),
    records,
    pendingJobs,
    activeJobs,
    degraded: read.flatMap((r) => r.degraded),
  };
}

function degradedOf(p: NodeGroupProvider, error: unknown, scope = p.scope): DegradedScope {
  const code = codeOf(error);
  return { cloud: p.cloud, ...(scope ? { scope } : {}), error: messageOf(error), ...(code ? { code } : {}) };
}

/**
 * One provider's groups and machines. Its groups failing to list leave the whole provider out;
 * with a per-group listing, a group whose machines cannot be listed is left out alone.
 */
async function readProvider(p: NodeGroupProvider): Promise<{ groups: NodeGroup[]; instances: Instance[]; degraded: DegradedScope[] }> {
  try {
    if (!p.listInstancesByGroup) {
      const [groups, instances] = await Promise.all([p.listGroups(), p.listInstances()]);
      return { groups, instances, degraded: [] };
    }
    const groups = await p.listGroups();
    const listings = await p.listInstancesByGroup(groups);
    const failed = new Map<string, unknown>();
    for (const l of listings) if ('error' in l) failed.set(l.groupId, l.error);
    return {
      groups: groups.filter((g) => !failed.has(g.id)),
      instances: listings.flatMap((l) => ('instances' in l ? l.instances : [])),
      degraded: [...failed].map(([groupId, error]) => degradedOf(p, error, `group ${groupId}`)),
    };
  } catch (error) {
    return { groups: [], instances: [], degraded: [degradedOf(p, error)] };
  }
}

function withoutReservation(o: Offering): Omit<Offering, 'id' | 'reservationId'> {
  return { cloud: o.cloud, region: o.region, zone: o.zone, instanceType: o.instanceType, capacityType: o.capacityType };
}

/** Every source's reservations by id; a source that fails is named among the degraded (its reserved offerings go unpriced). */
async function readReservations(
  sources: readonly ReservationSource[],
  named: readonly string[],
): Promise<{ reservations: Map<string, Reservation>; degraded: DegradedScope[] }> {
  const reservations = new Map<string, Reservation>();
  const degraded: DegradedScope[] = [];
  const ids = [...new Set(named)].sort();
  await Promise.all(
    sources.map(async (src) => {
      try {
        for (const r of await src.listReservations(ids)) reservations.set(r.id, r);
      } catch (error) {
        const code = codeOf(error);
        degraded.push({
          cloud: src.cloud,
          scope: `reservations${src.scope ? ` in ${src.scope}` : ''}`,
          error: messageOf(error),
          ...(code ? { code } : {}),
        });
      }
    }),
  );
  return { reservations, degraded };
}

/** A node may take new work when its machine runs, its agent is registered, healthy, fresh and not draining. */
export function isSchedulable(instance: Instance, record: NodeRecord | undefined, nowMs: number, policy: Policy): boolean {
  return (
    instance.state === 'running' &&
    record !== undefined &&
    record.healthy &&
    record.draining === undefined &&
    nowMs - record.lastHeartbeatAtMs <= policy.heartbeatTimeoutSec * 1000
  );
}

export function joinNodes(world: Pick<WorldView, 'instances' | 'records'>, nowMs: number, policy: Policy): FleetNode[] {
  const records = new Map(world.records.map((r) => [r.instanceId, r]));
  return world.instances.map((instance) => {
    const record = records.get(instance.id);
    return { instance, ...(record ? { record } : {}), schedulable: isSchedulable(instance, record, nowMs, policy) };
  });
}

/** Builds the planner's snapshot from a world view plus catalogue, prices, budgets and spend. */
export async function buildSnapshot(
  ports: SnapshotPorts,
  world: WorldView,
  input: {
    nowMs: number;
    policy: Policy;
    teamMemory?: TeamMemory;
    /** Overrides of the learned risk per pool (tests, what-if runs). */
    poolRiskPerHour?: ReadonlyMap<string, number>;
  },
): Promise<Snapshot> {
  const { nowMs, policy } = input;
  const offerings = uniqueOfferings(world.groups);
  const typeNames = [...new Set([...offerings.map((o) => o.instanceType), ...world.instances.map((i) => i.instanceType)])].sort();
  const nodeOfferings = world.instances.map<Offering>((i) => ({
    id: offeringId(i),
    cloud: i.cloud,
    region: i.region,
    zone: i.zone,
    instanceType: i.instanceType,
    capacityType: i.capacityType,
    ...(i.reservationId !== undefined ? { reservationId: i.reservationId } : {}),
  }));
  // Reserved offerings are priced from their reservation, with the on-demand price of their type beside it.
  const allOfferings = uniqueById([...offerings, ...nodeOfferings]);
  const priced = uniqueById(
    allOfferings.map((o) => (o.capacityType === 'reserved' ? makeOffering({ ...withoutReservation(o), capacityType: 'on-demand' }) : o)),
  );
  const [instanceTypes, listPrices, tagSets, failures, machines, reserved] = await Promise.all([
    ports.catalog.instanceTypes(typeNames),
    ports.prices.prices(priced),
    ports.budgets.readTeamTags(),
    // A degraded provider's launch failures are not read (it would fail again); the others are.
    Promise.all(
      ports.providers
        .filter((p) => !world.degraded.some((d) => d.cloud === p.cloud && d.scope === p.scope))
        // A failed read of the launch failures only means none are known this minute.
        .map((p) => p.launchFailures(nowMs - policy.unavailableForSec * 1000).catch(() => [])),
    ),
    ports.pools.machines(nowMs - POOL_HISTORY_WINDOW_MS),
    readReservations(
      ports.reservations ?? [],
      allOfferings.flatMap((o) => (o.reservationId !== undefined ? [o.reservationId] : [])),
    ),
  ]);
  // On-demand usage under a Savings Plan or RI: the marginal price at the usage now, and the effective price billed.
  const prices = applyDiscounts(listPrices, world.instances, ports.discounts ?? []);
  for (const o of allOfferings) {
    if (o.capacityType !== 'reserved' || o.reservationId === undefined) continue;
    const r = reserved.reservations.get(o.reservationId);
    const od = listPrices.get(offeringId({ ...withoutReservation(o), capacityType: 'on-demand' }));
    if (r) prices.set(o.id, reservedQuote(r, od?.priceMicroUsdPerHour ?? r.priceMicroUsdPerHour));
  }
  const degraded = [...world.degraded, ...reserved.degraded];
  const observed = poolStatsOf(machines, nowMs - POOL_HISTORY_WINDOW_MS);
  // Spot risk per pool: the Spot Advisor band as prior, updated by what gpu-fleet itself observed.
  const poolRiskPerHour = new Map<string, number>(input.poolRiskPerHour ?? []);
  for (const quote of prices.values()) {
    if (!quote.offeringId.endsWith('/spot') || poolRiskPerHour.has(quote.offeringId)) continue;
    poolRiskPerHour.set(quote.offeringId, poolRatePerHour(quote.interruptionBand, observed.get(quote.offeringId)));
  }

  // The spot market model: each machine a sighting of its pool, a take-back or a launch refused for capacity a drop.
  // Each pool's prior: its Advisor band, moved by its zone's Spot Placement Score where the cloud gave one.
  const priors = new Map<string, { band?: string; placementScore?: number }>();
  for (const quote of prices.values())
    if (quote.offeringId.endsWith('/spot'))
      priors.set(quote.offeringId, {
        ...(quote.interruptionBand !== undefined ? { band: quote.interruptionBand } : {}),
        ...(quote.placementScore !== undefined ? { placementScore: quote.placementScore } : {}),
      });
  const refusals = failures
    .flat()
    .flatMap((f) => (f.offeringId !== undefined && CAPACITY_REFUSAL.test(f.code) ? [{ offeringId: f.offeringId, atMs: f.atMs }] : []));
  const spotModel = spotModelFromHistory(machines, refusals, priors, nowMs, SIGHTING_STALE_INTERVALS * policy.reconcileIntervalSec * 1000);

  // The container's memory, filled from the store on a cold start: the last valid values survive a new container.
  const memory: TeamMemory = input.teamMemory ?? new Map();
  if (memory.size === 0 && ports.budgetMemory) for (const [id, team] of await ports.budgetMemory.load()) memory.set(id, team);
  const before = new Map(memory);
  const teams = teamsInForce(
    tagSets,
    memory,
    [...world.pendingJobs, ...world.activeJobs].map((j) => j.team),
  );
  if (ports.budgetMemory) {
    for (const [id, team] of memory) if (JSON.stringify(before.get(id)) !== JSON.stringify(team)) await ports.budgetMemory.save(team);
  }
  const spend = new Map<string, MicroUsd>();
  await Promise.all(
    [...teams.values()].map(async (team) => {
      const cursor = await ports.ledger.read(team.id, periodKey(team.budget?.period ?? 'monthly', nowMs));
      spend.set(team.id, cursor.spentMicroUsd);
    }),
  );

  // An offering is avoided for a while after a failed launch or an interruption, so the planner turns to other pools.
  const unavailableUntilMs = new Map<string, number>();
  const avoid = (offeringId: string, atMs: number) => {
    const until = atMs + policy.unavailableForSec * 1000;
    if (until > nowMs && until > (unavailableUntilMs.get(offeringId) ?? 0)) unavailableUntilMs.set(offeringId, until);
  };
  for (const f of failures.flat()) if (f.offeringId) avoid(f.offeringId, f.atMs);
  for (const [offeringId, st] of observed) if (st.lastInterruptedAtMs !== undefined) avoid(offeringId, st.lastInterruptedAtMs);

  return {
    nowMs,
    pendingJobs: world.pendingJobs,
    activeJobs: world.activeJobs,
    groups: world.groups,
    nodes: joinNodes(world, nowMs, policy),
    ...(degraded.length > 0 ? { degraded } : {}),
    ...(reserved.reservations.size > 0 ? { reservations: reserved.reservations } : {}),
    instanceTypes: instanceTypes as ReadonlyMap<string, InstanceType>,
    prices: prices as ReadonlyMap<string, PriceQuote>,
    poolRiskPerHour,
    spotModel,
    unavailableUntilMs,
    teams,
    spendMicroUsd: spend,
    committedMicroUsd: committedCostMicroUsd(world.activeJobs, nowMs, policy, policy.reconcileIntervalSec),
    policy,
    ...(ports.bytes
      ? {
          saveBytes: {
            store: ports.bytes.store,
            ...(ports.bytes.roots ? { roots: ports.bytes.roots } : {}),
            layout: ports.bytes.layout,
            rates: ports.bytes.rates,
          },
        }
      : {}),
  };
}

/**
 * The teams in force, from their tags and the last valid values: the one reader of budgets, used
 * by reconcile and by the people's commands, so what they show is what is enforced. Only the
 * team's own queue counts; tags on any other resource are reported as a problem and ignored.
 * `memory` holds the last valid values of each team and is updated with this read's. Teams in
 * `alsoTeams` (teams with work) are included even without tags: their last valid values, or none
 * (held).
 */
export function teamsInForce(tagSets: readonly TeamTagSet[], memory: TeamMemory, alsoTeams: Iterable<string> = []): Map<string, Team> {
  const own = new Map<string, TeamTagSet>();
  const strays = new Map<string, string[]>();
  for (const set of [...tagSets].sort((a, b) => (a.resource < b.resource ? -1 : a.resource > b.resource ? 1 : 0))) {
    if (set.notTheTeamQueue !== undefined) {
      strays.set(set.team, [
        ...(strays.get(set.team) ?? []),
        `${set.resource} carries gpu-fleet:team=${set.team}, and its gpu-fleet tags are ignored: ${set.notTheTeamQueue}`,
      ]);
    } else if (!own.has(set.team)) own.set(set.team, set);
  }
  const teams = new Map<string, Team>();
  const ids = new Set([...own.keys(), ...strays.keys(), ...alsoTeams]);
  for (const id of [...ids].sort((a, b) => a.localeCompare(b))) {
    const set = own.get(id);
    const last = memory.get(id);
    const stray = strays.get(id) ?? [];
    if (set) {
      const team = teamFromTags(id, set.tags, last);
      teams.set(id, { ...team, tagProblems: [...team.tagProblems, ...stray] });
      // Every read's values are the last valid ones from now on (a bad value was replaced by the previous good one).
      memory.set(id, { ...team, tagProblems: [] });
    } else {
      const why = last
        ? 'no gpu-fleet budget tags found on its queue; the last valid budget stays in force'
        : 'no gpu-fleet budget tags found on its queue';
      teams.set(id, last ? { ...last, tagProblems: [why, ...stray] } : { id, weight: 1, tagProblems: [why, ...stray] });
    }
  }
  return teams;
}

function uniqueOfferings(groups: readonly NodeGroup[]): Offering[] {
  return uniqueById(groups.flatMap((g) => g.offerings));
}

function uniqueById<T extends { id: string }>(items: readonly T[]): T[] {
  const seen = new Map<string, T>();
  for (const item of items) if (!seen.has(item.id)) seen.set(item.id, item);
  return [...seen.values()];
}
