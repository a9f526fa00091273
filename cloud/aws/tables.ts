/**
 * The DynamoDB tables of the state store, described once for the CDK stack and for the tests
 * (which create the same tables in dynalite).
 *
 * Design, and why:
 * - `jobs`: one item per job, keyed by job id. Reconcile asks "all pending jobs" and "all active
 *   jobs" every minute, and the CLI "jobs of team T in state S": two global secondary indexes,
 *   by state and by team+state, both sorted by submission time. Spend accrual asks "finished jobs
 *   that held machines and ended since T": a sparse index by UTC day of end, sorted by end time. Every change is a conditional
 *   put on the job's version, so two writers can never both win. Finished jobs expire after 90
 *   days (TTL).
 * - `nodes`: one item per machine, keyed by instance id: agents write heartbeats there at their
 *   own pace without touching job items. The draining mark is set once with a condition.
 * - `control`: small records that are read and written by key and sorted key, in one table so
 *   that one query answers each question (pk = kind, sk = name or time): the reconcile lease,
 *   the plan journal, decision records, spend cursors per team and period, the newest checkpoint
 *   of each job, and what was seen of each spot pool. Expiring kinds carry `expiresAt`.
 * - `idempotency`: Powertools for AWS Lambda's own table (key `id`, TTL `expiration`), which
 *   makes each event and message handled once.
 */
export interface TableNames {
  readonly jobs: string;
  readonly nodes: string;
  readonly control: string;
  readonly idempotency: string;
}

export interface TableDefinition {
  readonly partitionKey: string;
  readonly sortKey?: string;
  readonly indexes: readonly {
    readonly name: string;
    readonly partitionKey: string;
    readonly sortKey: string;
    /** The sort key's type (string unless said). */
    readonly sortKeyType?: 'string' | 'number';
  }[];
  readonly ttlAttribute?: string;
}

export const TABLES: Readonly<Record<keyof TableNames, TableDefinition>> = {
  jobs: {
    partitionKey: 'id',
    indexes: [
      { name: 'byState', partitionKey: 'state', sortKey: 'order' },
      { name: 'byTeamState', partitionKey: 'teamState', sortKey: 'order' },
      { name: 'byEndedDay', partitionKey: 'endedDay', sortKey: 'endedAtMs', sortKeyType: 'number' },
    ],
    ttlAttribute: 'expiresAt',
  },
  nodes: { partitionKey: 'instanceId', indexes: [] },
  control: { partitionKey: 'pk', sortKey: 'sk', indexes: [], ttlAttribute: 'expiresAt' },
  idempotency: { partitionKey: 'id', indexes: [], ttlAttribute: 'expiration' },
};
