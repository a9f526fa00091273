import { type DynamoDBDocumentClient, GetCommand, PutCommand } from '@aws-sdk/lib-dynamodb';
import type { ServiceStore } from '../../../core/ports.ts';
import type { ServiceRecord } from '../../../core/serving/service.ts';
import { isConditionFailure, translateAwsError } from '../errors.ts';
import { call, queryAll } from './common.ts';

/**
 * Service records in the control table (pk `service`, sk the service id): the record as JSON in
 * `body` (its memory and history are the service's own business, read and written whole), and
 * its version beside it for the conditional writes.
 */
export class DynamoServiceStore implements ServiceStore {
  constructor(
    private readonly doc: DynamoDBDocumentClient,
    private readonly table: string,
  ) {}

  async create(record: ServiceRecord): Promise<{ created: boolean; record: ServiceRecord }> {
    try {
      await this.doc.send(
        new PutCommand({
          TableName: this.table,
          Item: { pk: 'service', sk: record.id, version: record.version, body: JSON.stringify(record) },
          ConditionExpression: 'attribute_not_exists(pk)',
        }),
      );
      return { created: true, record };
    } catch (error) {
      if (!isConditionFailure(error)) throw translateAwsError(error, { operation: 'create service', resource: record.id });
      const stored = await this.get(record.id);
      if (!stored) throw translateAwsError(error, { operation: 'create service', resource: record.id });
      return { created: false, record: stored };
    }
  }

  async get(id: string): Promise<ServiceRecord | undefined> {
    const out = await call('read service', id, () =>
      this.doc.send(new GetCommand({ TableName: this.table, Key: { pk: 'service', sk: id }, ConsistentRead: true })),
    );
    return out.Item ? (JSON.parse(out.Item.body as string) as ServiceRecord) : undefined;
  }

  async update(
    next: ServiceRecord,
    expectedVersion: number,
  ): Promise<{ ok: true; record: ServiceRecord } | { ok: false; current: ServiceRecord | undefined }> {
    if (next.version !== expectedVersion + 1) return { ok: false, current: await this.get(next.id) };
    try {
      await this.doc.send(
        new PutCommand({
          TableName: this.table,
          Item: { pk: 'service', sk: next.id, version: next.version, body: JSON.stringify(next) },
          ConditionExpression: 'version = :v',
          ExpressionAttributeValues: { ':v': expectedVersion },
        }),
      );
      return { ok: true, record: next };
    } catch (error) {
      if (!isConditionFailure(error)) throw translateAwsError(error, { operation: 'update service', resource: next.id });
      return { ok: false, current: await this.get(next.id) };
    }
  }

  async list(): Promise<ServiceRecord[]> {
    const items = await queryAll(
      this.doc,
      { TableName: this.table, KeyConditionExpression: 'pk = :p', ExpressionAttributeValues: { ':p': 'service' }, ConsistentRead: true },
      'list services',
    );
    return items.map((i) => JSON.parse(i.body as string) as ServiceRecord);
  }
}
