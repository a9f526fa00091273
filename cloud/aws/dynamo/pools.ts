import { type DynamoDBDocumentClient, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { poolStatsOf, type MachineHistory } from '../../../core/risk.ts';
import type { PoolHistory, PoolStats } from '../../../core/ports.ts';
import { isConditionFailure, translateAwsError } from '../errors.ts';
import { DAY_S, queryAll } from './common.ts';

export class DynamoPoolHistory implements PoolHistory {
  constructor(
    private readonly doc: DynamoDBDocumentClient,
    private readonly table: string,
    private readonly keepDays = 35,
  ) {}

  async noteAlive(notes: readonly { instanceId: string; offeringId: string; atMs: number }[]): Promise<void> {
    for (const n of notes) {
      const expiresAt = Math.floor(n.atMs / 1000) + this.keepDays * DAY_S;
      try {
        await this.doc.send(
          new UpdateCommand({
            TableName: this.table,
            Key: { pk: 'poolinst', sk: n.instanceId },
            UpdateExpression: 'SET offeringId = :o, firstMs = if_not_exists(firstMs, :t), lastMs = :t, expiresAt = :e',
            ConditionExpression: 'attribute_not_exists(lastMs) OR lastMs < :t',
            ExpressionAttributeValues: { ':o': n.offeringId, ':t': n.atMs, ':e': expiresAt },
          }),
        );
      } catch (error) {
        if (!isConditionFailure(error)) throw translateAwsError(error, { operation: 'note pool exposure', resource: n.instanceId });
        // An older note: it may only move the start back.
        try {
          await this.doc.send(
            new UpdateCommand({
              TableName: this.table,
              Key: { pk: 'poolinst', sk: n.instanceId },
              UpdateExpression: 'SET firstMs = :t',
              ConditionExpression: 'firstMs > :t',
              ExpressionAttributeValues: { ':t': n.atMs },
            }),
          );
        } catch (inner) {
          if (!isConditionFailure(inner)) throw translateAwsError(inner, { operation: 'note pool exposure', resource: n.instanceId });
        }
      }
    }
  }

  async noteInterrupted(instanceId: string, offeringId: string, atMs: number): Promise<void> {
    try {
      await this.doc.send(
        new UpdateCommand({
          TableName: this.table,
          Key: { pk: 'poolinst', sk: instanceId },
          UpdateExpression:
            'SET interruptedAtMs = :t, offeringId = if_not_exists(offeringId, :o), expiresAt = if_not_exists(expiresAt, :e)',
          ConditionExpression: 'attribute_not_exists(interruptedAtMs)',
          ExpressionAttributeValues: { ':t': atMs, ':o': offeringId, ':e': Math.floor(atMs / 1000) + this.keepDays * DAY_S },
        }),
      );
    } catch (error) {
      if (!isConditionFailure(error)) throw translateAwsError(error, { operation: 'note interruption', resource: instanceId });
    }
  }

  async stats(sinceMs: number): Promise<Map<string, PoolStats>> {
    return poolStatsOf(await this.machines(sinceMs), sinceMs);
  }

  async machines(sinceMs: number): Promise<MachineHistory[]> {
    const items = await queryAll(
      this.doc,
      { TableName: this.table, KeyConditionExpression: 'pk = :p', ExpressionAttributeValues: { ':p': 'poolinst' } },
      'read pool history',
    );
    return items
      .map((i) => ({
        offeringId: i.offeringId as string,
        ...(typeof i.firstMs === 'number' ? { firstMs: i.firstMs } : {}),
        ...(typeof i.lastMs === 'number' ? { lastMs: i.lastMs } : {}),
        ...(typeof i.interruptedAtMs === 'number' ? { interruptedAtMs: i.interruptedAtMs } : {}),
      }))
      .filter((m) => Math.max(m.lastMs ?? 0, m.interruptedAtMs ?? 0) >= sinceMs);
  }
}
