import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createRequire } from 'node:module';
import { CreateTableCommand, DynamoDBClient, type AttributeDefinition, type CreateTableCommandInput } from '@aws-sdk/client-dynamodb';
import { documentClient } from '../../cloud/aws/dynamo-store.ts';
import { TABLES, type TableNames } from '../../cloud/aws/tables.ts';
import { listenInChild } from './child-server.ts';

const require = createRequire(import.meta.url);
const dynalite = require('dynalite') as (options: { createTableMs?: number; deleteTableMs?: number; updateTableMs?: number }) => Server;

/** A real DynamoDB-compatible server (dynalite, in memory) on a free local port, for the tests and benches. */
export interface LocalDynamo {
  readonly endpoint: string;
  readonly client: DynamoDBClient;
  readonly doc: ReturnType<typeof documentClient>;
  /** Creates gpu-fleet's tables (as tables.ts describes them) under a fresh prefix and returns their names. */
  createTables(prefix?: string): Promise<TableNames>;
  close(): Promise<void>;
}

const CREDENTIALS = { accessKeyId: 'test', secretAccessKey: 'test' };
let counter = 0;

/** Creates gpu-fleet's tables (as tables.ts describes them, on-demand) under `prefix` and returns their names. */
export async function createTables(client: DynamoDBClient, prefix: string): Promise<TableNames> {
  const names: TableNames = {
    jobs: `${prefix}-jobs`,
    nodes: `${prefix}-nodes`,
    control: `${prefix}-control`,
    idempotency: `${prefix}-idempotency`,
  };
  for (const [kind, def] of Object.entries(TABLES) as [keyof TableNames, (typeof TABLES)[keyof TableNames]][]) {
    const attrs = new Map<string, AttributeDefinition>([[def.partitionKey, { AttributeName: def.partitionKey, AttributeType: 'S' }]]);
    if (def.sortKey) attrs.set(def.sortKey, { AttributeName: def.sortKey, AttributeType: 'S' });
    for (const ix of def.indexes) {
      attrs.set(ix.partitionKey, { AttributeName: ix.partitionKey, AttributeType: 'S' });
      attrs.set(ix.sortKey, { AttributeName: ix.sortKey, AttributeType: ix.sortKeyType === 'number' ? 'N' : 'S' });
    }
    const input: CreateTableCommandInput = {
      TableName: names[kind],
      BillingMode: 'PAY_PER_REQUEST',
      AttributeDefinitions: [...attrs.values()],
      KeySchema: [
        { AttributeName: def.partitionKey, KeyType: 'HASH' },
        ...(def.sortKey ? [{ AttributeName: def.sortKey, KeyType: 'RANGE' as const }] : []),
      ],
      ...(def.indexes.length > 0
        ? {
            GlobalSecondaryIndexes: def.indexes.map((ix) => ({
              IndexName: ix.name,
              KeySchema: [
                { AttributeName: ix.partitionKey, KeyType: 'HASH' as const },
                { AttributeName: ix.sortKey, KeyType: 'RANGE' as const },
              ],
              Projection: { ProjectionType: 'ALL' as const },
            })),
          }
        : {}),
    };
    await client.send(new CreateTableCommand(input));
  }
  return names;
}

/** Clients for the server listening on `port`, closed with it by `stop`. */
function localDynamo(port: number, stop: () => Promise<void>): LocalDynamo {
  const endpoint = `http://127.0.0.1:${port}`;
  const config = { endpoint, region: 'us-east-1', credentials: CREDENTIALS, maxAttempts: 3 };
  const client = new DynamoDBClient(config);
  const doc = documentClient(config);
  return {
    endpoint,
    client,
    doc,
    createTables: (prefix = `t${++counter}`) => createTables(client, prefix),
    async close() {
      client.destroy();
      doc.destroy();
      await stop();
    },
  };
}

/** dynalite in this process (the tests: quick to start, shares the process's memory). */
export async function startDynalite(): Promise<LocalDynamo> {
  const server = dynalite({ createTableMs: 0, deleteTableMs: 0, updateTableMs: 0 });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return localDynamo(port, () => new Promise<void>((resolve) => server.close(() => resolve())));
}

/** dynalite in a child process (the benches: its memory and CPU are not the measured process's). */
export async function startDynaliteProcess(): Promise<LocalDynamo> {
  const { port, stop } = await listenInChild(
    `const s = require('dynalite')({ createTableMs: 0, deleteTableMs: 0, updateTableMs: 0 }); s.listen(0, '127.0.0.1', () => process.stdout.write(String(s.address().port) + '\\n'));`,
  );
  return localDynamo(port, stop);
}
