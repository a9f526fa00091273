import { DeleteCommand, type DynamoDBDocumentClient, PutCommand } from '@aws-sdk/lib-dynamodb';
import type { LeaseStore } from '../../../core/ports.ts';
import { isConditionFailure, translateAwsError } from '../errors.ts';
import { DAY_S } from './common.ts';

export class DynamoLeaseStore implements LeaseStore {
  constructor(
    private readonly doc: DynamoDBDocumentClient,
    private readonly table: string,
  ) {}

  async acquire(name: string, holder: string, nowMs: number, ttlMs: number): Promise<boolean> {
    try {
      await this.doc.send(
        new PutCommand({
          TableName: this.table,
          Item: { pk: 'lease', sk: name, holder, untilMs: nowMs + ttlMs, expiresAt: Math.floor((nowMs + ttlMs) / 1000) + DAY_S },
          ConditionExpression: 'attribute_not_exists(pk) OR untilMs <= :now OR holder = :h',
          ExpressionAttributeValues: { ':now': nowMs, ':h': holder },
        }),
      );
      return true;
    } catch (error) {
      if (isConditionFailure(error)) return false;
      throw translateAwsError(error, { operation: 'acquire lease', resource: name });
    }
  }

  async release(name: string, holder: string): Promise<void> {
    try {
      await this.doc.send(
        new DeleteCommand({
          TableName: this.table,
          Key: { pk: 'lease', sk: name },
          ConditionExpression: 'holder = :h',
          ExpressionAttributeValues: { ':h': holder },
        }),
      );
    } catch (error) {
      if (!isConditionFailure(error)) throw translateAwsError(error, { operation: 'release lease', resource: name });
    }
  }
}
