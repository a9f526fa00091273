import { type DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import type { Clock } from '../../core/ports.ts';
import type { TableNames } from './tables.ts';
import { wallClock } from './dynamo/common.ts';
import { DynamoJobStore } from './dynamo/jobs.ts';
import { DynamoNodeStore } from './dynamo/nodes.ts';
import { DynamoLeaseStore } from './dynamo/lease.ts';
import { DynamoPlanJournal } from './dynamo/plan-journal.ts';
import { DynamoDecisionLog } from './dynamo/decisions.ts';
import { DynamoSpendLedger } from './dynamo/spend.ts';
import { DynamoPoolHistory } from './dynamo/pools.ts';
import { DynamoCheckpointIndex } from './dynamo/checkpoints.ts';
import { DynamoBudgetMemory } from './dynamo/budget-memory.ts';
import { DynamoFamilyRuns } from './dynamo/family-runs.ts';

/**
 * The state store on DynamoDB: every state-store port, on the tables described in tables.ts, one
 * module per store under ./dynamo/. Every write that can race is a conditional write; "not found"
 * is a value; other failures are CloudErrors in the port vocabulary.
 */
export { documentClient, documentClientFor } from './dynamo/common.ts';
export * from './dynamo/jobs.ts';
export * from './dynamo/nodes.ts';
export * from './dynamo/lease.ts';
export * from './dynamo/plan-journal.ts';
export * from './dynamo/decisions.ts';
export * from './dynamo/spend.ts';
export * from './dynamo/pools.ts';
export * from './dynamo/checkpoints.ts';
export * from './dynamo/budget-memory.ts';
export * from './dynamo/family-runs.ts';
export * from './dynamo/services.ts';

/** The checkpoint root a bucket name or root URI stands for: a bare bucket keeps its checkpoints under `checkpoints/`. */
export function checkpointRoot(checkpoints: string): string {
  return /^[a-z0-9]+:\/\//.test(checkpoints) ? checkpoints : `s3://${checkpoints}/checkpoints/`;
}

/** Every state-store port on one document client. `checkpoints` is a bucket name or a root URI (s3://…/, file:///…/). */
export function dynamoStores(doc: DynamoDBDocumentClient, tables: TableNames, checkpoints: string, clock: Clock = wallClock) {
  return {
    jobs: new DynamoJobStore(doc, tables.jobs),
    nodes: new DynamoNodeStore(doc, tables.nodes),
    lease: new DynamoLeaseStore(doc, tables.control),
    journal: new DynamoPlanJournal(doc, tables.control),
    decisions: new DynamoDecisionLog(doc, tables.control),
    ledger: new DynamoSpendLedger(doc, tables.control),
    pools: new DynamoPoolHistory(doc, tables.control),
    checkpoints: new DynamoCheckpointIndex(doc, tables.control, checkpointRoot(checkpoints), clock),
    budgetMemory: new DynamoBudgetMemory(doc, tables.control),
    families: new DynamoFamilyRuns(doc, tables.control),
  };
}
