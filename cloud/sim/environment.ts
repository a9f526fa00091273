import type { Offering } from '../../core/catalog.ts';
import type { TeamTagSet } from '../../core/ports.ts';
import type { ReconcilePorts } from '../../core/reconcile/reconcile.ts';
import { shippedCatalog } from '../catalog/all-shipped.ts';
import { ShippedCatalogSource, ShippedPriceSource, gpuOffers, onDemandPrice, spotPrice, type ShippedCatalog } from '../catalog/shipped.ts';
import type { GpuOffers } from '../../core/rightsizing.ts';
import { SeededRandom, VirtualClock } from './clock.ts';
import {
  MemoryCheckpointStore,
  MemoryDecisionLog,
  MemoryJobQueue,
  MemoryJobStore,
  MemoryLeaseStore,
  MemoryNodeStore,
  MemoryPlanJournal,
  MemoryServiceStore,
  MemoryJobLogs,
  MemoryFamilyRuns,
  MemoryPoolHistory,
  MemorySpendLedger,
  StaticBudgetTags,
} from './memory-stores.ts';
import { GcpPreemptions } from '../gcp/preemptions.ts';
import { SIM_GCP_PROJECT, SimCloud, type CapacityModel, type SimGroupConfig, type SimReservationConfig } from './sim-cloud.ts';

export interface SimEnvironmentOptions {
  readonly startMs: number;
  readonly seed: number;
  readonly groups: readonly SimGroupConfig[];
  readonly teams: readonly string[];
  readonly teamTags: readonly TeamTagSet[];
  readonly bootSec?: number;
  readonly capacity?: CapacityModel;
  readonly catalog?: ShippedCatalog;
  /** Capacity reservations (ODCRs, Capacity Blocks) the `reserved` groups launch into. */
  readonly reservations?: readonly SimReservationConfig[];
  /** Warm machines are prepared by their agents (SimAgents.prepareWarm), as in a deployed stack. */
  readonly warmPreparedByAgents?: boolean;
}

/** Every port of gpu-fleet, simulated and wired together on one virtual clock. */
export interface SimEnvironment {
  readonly clock: VirtualClock;
  readonly random: SeededRandom;
  readonly cloud: SimCloud;
  readonly jobs: MemoryJobStore;
  readonly nodes: MemoryNodeStore;
  readonly queue: MemoryJobQueue;
  readonly ledger: MemorySpendLedger;
  readonly decisions: MemoryDecisionLog;
  readonly checkpoints: MemoryCheckpointStore;
  readonly budgets: StaticBudgetTags;
  readonly lease: MemoryLeaseStore;
  readonly pools: MemoryPoolHistory;
  readonly journal: MemoryPlanJournal;
  readonly services: MemoryServiceStore;
  /** What the simulated processes wrote (`gpu-fleet logs --sim`). */
  readonly jobLogs: MemoryJobLogs;
  /** Right-sizing's runs per job family (reconcile notes them, intake reads them). */
  readonly families: MemoryFamilyRuns;
  /** The catalogue's GPU models, as right-sizing weighs them. */
  readonly offers: GpuOffers;
  readonly catalog: ShippedCatalog;
  /** The ports as the reconcile service takes them. */
  readonly ports: ReconcilePorts;
  /** Price of an offering from the shipped catalogue (µUSD/h), and its on-demand price. */
  priceOf(
    offering: Pick<Offering, 'cloud' | 'region' | 'zone' | 'instanceType' | 'capacityType' | 'reservationId'>,
  ): { price: number; onDemand: number } | undefined;
}

export function createSimEnvironment(options: SimEnvironmentOptions): SimEnvironment {
  const clock = new VirtualClock(options.startMs);
  const random = new SeededRandom(options.seed);
  const catalog = options.catalog ?? shippedCatalog();
  const reservationRate = new Map((options.reservations ?? []).map((r) => [r.id, r.priceMicroUsdPerHour]));
  // What a machine is billed: spot or list price, or in a reservation its reservation's rate.
  const priceOf = (o: Pick<Offering, 'cloud' | 'region' | 'zone' | 'instanceType' | 'capacityType' | 'reservationId'>) => {
    const od = onDemandPrice(catalog, o);
    if (od === undefined) return undefined;
    const price =
      o.capacityType === 'spot'
        ? spotPrice(catalog, o)
        : o.capacityType === 'reserved'
          ? (reservationRate.get(o.reservationId ?? '') ?? od)
          : od;
    return price === undefined ? undefined : { price, onDemand: od };
  };
  const cloud = new SimCloud({
    clock,
    random,
    groups: options.groups,
    ...(options.bootSec !== undefined ? { bootSec: options.bootSec } : {}),
    ...(options.capacity ? { capacity: options.capacity } : {}),
    priceOf: (o) => priceOf(o)?.price,
    ...(options.reservations ? { reservations: options.reservations } : {}),
    ...(options.warmPreparedByAgents ? { warmPreparedByAgents: true } : {}),
  });
  const jobs = new MemoryJobStore();
  const nodes = new MemoryNodeStore();
  const queue = new MemoryJobQueue(options.teams, clock);
  const ledger = new MemorySpendLedger();
  const decisions = new MemoryDecisionLog();
  const checkpoints = new MemoryCheckpointStore(clock);
  const budgets = new StaticBudgetTags(options.teamTags);
  const lease = new MemoryLeaseStore();
  const pools = new MemoryPoolHistory();
  const journal = new MemoryPlanJournal();
  const services = new MemoryServiceStore();
  const jobLogs = new MemoryJobLogs();
  const families = new MemoryFamilyRuns();
  // GCP pushes no events: its preemptions are found by polling, with the same source production uses, over the simulated Compute API.
  const providers = cloud.providers();
  const gcp = providers.find((p) => p.cloud === 'gcp');
  const gcpZones = [...new Set(options.groups.filter((g) => g.cloud === 'gcp').flatMap((g) => g.zones))].sort();
  const notices = gcp
    ? [new GcpPreemptions(cloud.zoneOperations, gcp, { projects: [{ projectId: SIM_GCP_PROJECT, zones: gcpZones }], clock })]
    : [];
  const ports: ReconcilePorts = {
    ...(notices.length > 0 ? { notices } : {}),
    pools,
    journal,
    clock,
    providers,
    catalog: new ShippedCatalogSource(catalog),
    prices: new ShippedPriceSource(catalog),
    jobs,
    nodes,
    budgets,
    ledger,
    decisions,
    checkpoints,
    lease,
    services,
    families,
    ...(options.reservations && options.reservations.length > 0 ? { reservations: [cloud] } : {}),
  };
  return {
    clock,
    random,
    cloud,
    jobs,
    nodes,
    queue,
    ledger,
    decisions,
    checkpoints,
    budgets,
    lease,
    pools,
    journal,
    services,
    jobLogs,
    families,
    offers: gpuOffers(catalog),
    catalog,
    ports,
    priceOf,
  };
}
