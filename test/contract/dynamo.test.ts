import { afterAll, beforeAll } from 'vitest';
import { DynamoServiceStore, dynamoStores } from '../../cloud/aws/dynamo-store.ts';
import { startDynalite, type LocalDynamo } from '../support/dynalite.ts';
import { jobStoreContract } from './job-store.contract.ts';
import { serviceStoreContract } from './service-store.contract.ts';
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

/** The state-store contracts, run against the DynamoDB adapters on a real DynamoDB-compatible server (dynalite). */
let db: LocalDynamo;
beforeAll(async () => {
  db = await startDynalite();
});
afterAll(async () => {
  await db?.close();
});

const stores = async () => dynamoStores(db.doc, await db.createTables(), 'gpu-fleet-checkpoints-test');

jobStoreContract('DynamoDB', async () => (await stores()).jobs);
nodeStoreContract('DynamoDB', async () => (await stores()).nodes);
spendLedgerContract('DynamoDB', async () => (await stores()).ledger);
leaseStoreContract('DynamoDB', async () => (await stores()).lease);
decisionLogContract('DynamoDB', async () => (await stores()).decisions);
checkpointStoreContract(
  'DynamoDB',
  async (clock) => dynamoStores(db.doc, await db.createTables(), 'gpu-fleet-checkpoints-test', clock).checkpoints,
);
poolHistoryContract('DynamoDB', async () => (await stores()).pools);
planJournalContract('DynamoDB', async () => (await stores()).journal);
serviceStoreContract('DynamoDB (control table)', async () => new DynamoServiceStore(db.doc, (await db.createTables()).control));
familyRunStoreContract('DynamoDB (control table)', async () => (await stores()).families);
