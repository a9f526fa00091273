import { makeOffering } from '../../core/catalog.ts';
import { ShippedCatalogSource, ShippedPriceSource } from '../../cloud/catalog/shipped.ts';
import { SeededRandom, VirtualClock } from '../../cloud/sim/clock.ts';
import { defaultTeamTags } from '../../cloud/sim/defaults.ts';
import {
  MemoryCheckpointStore,
  MemoryDecisionLog,
  MemoryFamilyRuns,
  MemoryJobQueue,
  MemoryJobStore,
  MemoryLeaseStore,
  MemoryNodeStore,
  MemoryPlanJournal,
  MemoryPoolHistory,
  MemoryServiceStore,
  MemorySpendLedger,
  StaticBudgetTags,
} from '../../cloud/sim/memory-stores.ts';
import { SimCloud } from '../../cloud/sim/sim-cloud.ts';
import { T0 } from '../builders.ts';
import { SimFrontDoor } from '../../cloud/sim/front-door.ts';
import { frontDoorContract } from './front-door.contract.ts';
import { serviceStoreContract } from './service-store.contract.ts';
import { jobStoreContract } from './job-store.contract.ts';
import { nodeGroupProviderContract } from './node-group-provider.contract.ts';
import { budgetTagSourceContract, catalogAndPricesContract, clockContract, jobQueueContract } from './sources.contract.ts';
import {
  checkpointStoreContract,
  decisionLogContract,
  familyRunStoreContract,
  leaseStoreContract,
  nodeStoreContract,
  planJournalContract,
  poolHistoryContract,
  spendLedgerContract,
} from './state-store.contract.ts';
import { shippedCatalog } from '../../cloud/catalog/all-shipped.ts';

/** Every port contract, run against the simulated cloud. The AWS and GCP adapters run the same suites. */
jobStoreContract('sim (memory)', async () => new MemoryJobStore());
nodeStoreContract('sim (memory)', async () => new MemoryNodeStore());
spendLedgerContract('sim (memory)', async () => new MemorySpendLedger());
leaseStoreContract('sim (memory)', async () => new MemoryLeaseStore());
decisionLogContract('sim (memory)', async () => new MemoryDecisionLog());
poolHistoryContract('sim (memory)', async () => new MemoryPoolHistory());
planJournalContract('sim (memory)', async () => new MemoryPlanJournal());
checkpointStoreContract('sim (memory)', async (clock) => new MemoryCheckpointStore(clock));
jobQueueContract('sim (memory)', async () => ({ queue: new MemoryJobQueue(['nlp']), team: 'nlp' }));
budgetTagSourceContract('sim (static tags)', async () => ({ source: new StaticBudgetTags(defaultTeamTags(['nlp'])), team: 'nlp' }));
catalogAndPricesContract('shipped catalogue', async () => ({
  catalog: new ShippedCatalogSource(shippedCatalog()),
  prices: new ShippedPriceSource(shippedCatalog()),
  known: makeOffering({ cloud: 'aws', region: 'us-west-2', zone: 'us-west-2a', instanceType: 'p3.2xlarge', capacityType: 'spot' }),
  unknown: makeOffering({ cloud: 'aws', region: 'us-west-2', zone: 'us-west-2a', instanceType: 'x9.huge', capacityType: 'spot' }),
}));
clockContract('virtual clock', async () => new VirtualClock(T0));
nodeGroupProviderContract(
  'sim cloud',
  async () => {
    const clock = new VirtualClock(T0);
    const provider = new SimCloud({
      clock,
      random: new SeededRandom(1),
      bootSec: 60,
      groups: [
        {
          id: 'g5-od',
          instanceTypes: ['g5.xlarge'],
          zones: ['us-east-1a', 'us-east-1b'],
          capacityType: 'on-demand',
          minSize: 0,
          maxSize: 4,
          terminateHook: { name: 'gpu-fleet-drain', timeoutSec: 300 },
        },
      ],
    });
    return {
      provider,
      groupId: 'g5-od',
      settle: async () => {
        clock.advanceBy(120_000);
        provider.tick();
      },
      holdForTermination: async (id) => provider.replace(id, 'failed its EC2 health check'),
    };
  },
  { lifecycleHooks: true },
);

frontDoorContract('sim (a target group on the virtual clock)', async () => {
  const clock = new VirtualClock(T0);
  const answering = new Set<string>();
  const door = new SimFrontDoor(clock, {
    healthyAfterSec: 10,
    deregistrationDelaySec: 30,
    probe: (_service, t) => answering.has(`${t.ip}:${t.port}`),
  });
  return {
    door,
    service: 'nlp.chat',
    settle: () => clock.advanceTo(clock.nowMs() + 60_000),
    answers: (t, ok) => void (ok ? answering.add(`${t.ip}:${t.port}`) : answering.delete(`${t.ip}:${t.port}`)),
  };
});

serviceStoreContract('sim (memory)', async () => new MemoryServiceStore());
familyRunStoreContract('sim (memory)', async () => new MemoryFamilyRuns());
