import { type DynamoDBDocumentClient, GetCommand, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import type { SpendAccrual, SpendCursor, SpendLedger } from '../../../core/ports.ts';
import { isConditionFailure, translateAwsError } from '../errors.ts';
import { call, queryAll, carryOf } from './common.ts';

export class DynamoSpendLedger implements SpendLedger {
  constructor(
    private readonly doc: DynamoDBDocumentClient,
    private readonly table: string,
  ) {}

  async read(team: string, period: string): Promise<SpendCursor> {
    const out = await call('read spend', `${team}/${period}`, () =>
      this.doc.send(new GetCommand({ TableName: this.table, Key: { pk: 'spend', sk: `${team}#${period}` }, ConsistentRead: true })),
    );
    return {
      spentMicroUsd: (out.Item?.spentMicroUsd as number | undefined) ?? 0,
      accruedUntilMs: out.Item?.accruedUntilMs as number | undefined,
      ...carryOf(out.Item, `${team}/${period}`),
    };
  }

  async accrue(entry: SpendAccrual): Promise<boolean> {
    if (entry.toMs <= entry.fromMs) return false;
    try {
      await this.doc.send(
        new UpdateCommand({
          TableName: this.table,
          Key: { pk: 'spend', sk: `${entry.team}#${entry.period}` },
          UpdateExpression: `SET accruedUntilMs = :to, lastFromMs = :from, team = :team, #p = :period${entry.carry ? ', carry = :carry' : ''} ADD spentMicroUsd :amt`,
          ConditionExpression: 'attribute_not_exists(accruedUntilMs) OR accruedUntilMs = :from',
          ExpressionAttributeNames: { '#p': 'period' },
          ExpressionAttributeValues: {
            ':to': entry.toMs,
            ':from': entry.fromMs,
            ':amt': entry.amountMicroUsd,
            ':team': entry.team,
            ':period': entry.period,
            // As JSON: a carry's site keys and event ids are data, not attribute names.
            ...(entry.carry ? { ':carry': JSON.stringify(entry.carry) } : {}),
          },
        }),
      );
      return true;
    } catch (error) {
      if (!isConditionFailure(error))
        throw translateAwsError(error, { operation: 'accrue spend', resource: `${entry.team}/${entry.period}` });
      const out = await call('read spend', entry.team, () =>
        this.doc.send(
          new GetCommand({ TableName: this.table, Key: { pk: 'spend', sk: `${entry.team}#${entry.period}` }, ConsistentRead: true }),
        ),
      );
      return out.Item?.accruedUntilMs === entry.toMs && out.Item?.lastFromMs === entry.fromMs; // a repeat of the last window
    }
  }

  async list(): Promise<(SpendCursor & { team: string; period: string })[]> {
    const items = await queryAll(
      this.doc,
      { TableName: this.table, KeyConditionExpression: 'pk = :p', ExpressionAttributeValues: { ':p': 'spend' } },
      'list spend',
    );
    return items.map((i) => ({
      team: i.team as string,
      period: i.period as string,
      spentMicroUsd: (i.spentMicroUsd as number) ?? 0,
      accruedUntilMs: i.accruedUntilMs as number | undefined,
    }));
  }
}
