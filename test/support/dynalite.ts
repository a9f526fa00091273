import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createRequire } from 'node:module';
import { CreateTableCommand, DynamoDBClient, type AttributeDefinition, type CreateTableCommandInput } from '@aws-sdk/client-dynamodb';
import { documentClient } from '../../cloud/aws/dynamo-store.ts';
import { TABLES, type TableNames } from '../../cloud/aws/tables.ts';

const require = createRequire(import.meta.url);
const dynalite = require('dynalite') as (options: { createTableMs?: number; deleteTableMs?: number; updateTableMs?: number }) => Server;

/** A real DynamoDB-compatible server (dynalite, in memory) on a free local port, for the tests. */
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

export async function startDynalite(): Promise<LocalDynamo> {
  const server = dynalite({ createTableMs: 0, deleteTableMs: 0, updateTableMs: 0 });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  const endpoint = `http://127.0.0.1:${port}`;
  const config = { endpoint, region: 'us-east-1', credentials: CREDENTIALS, maxAttempts: 3 };
  const client = new DynamoDBClient(config);
  const doc = documentClient(config);
  return {
    endpoint,
    client,
    doc,
    async createTables(prefix = `t${++counter}`) {
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
          attrs.set(ix.sortKey, { AttributeName: ix.sortKey, AttributeType: 'S' });
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
    },
    async close() {
      client.destroy();
      doc.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
