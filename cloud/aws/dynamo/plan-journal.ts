import { type DynamoDBDocumentClient, GetCommand, PutCommand, QueryCommand, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import type { PlanAction } from '../../../core/plan.ts';
import type { JournaledPlan, PlanJournal } from '../../../core/ports.ts';
import { isConditionFailure, translateAwsError } from '../errors.ts';
import { DAY_S, call, Blobs } from './common.ts';

export class DynamoPlanJournal implements PlanJournal {
  private readonly blobs: Blobs;
  constructor(
    private readonly doc: DynamoDBDocumentClient,
    private readonly table: string,
  ) {
    this.blobs = new Blobs(doc, table);
  }

  async start(planId: string, atMs: number, actions: readonly PlanAction[]): Promise<void> {
    const existing = await call('read plan', planId, () =>
      this.doc.send(new GetCommand({ TableName: this.table, Key: { pk: 'plan', sk: planId }, ConsistentRead: true })),
    );
    if (existing.Item) return; // started already: a second start changes nothing
    const expiresAt = Math.floor(atMs / 1000) + 7 * DAY_S;
    const parts = await this.blobs.write(`plan#${planId}`, actions, expiresAt);
    try {
      await this.doc.send(
        new PutCommand({
          TableName: this.table,
          Item: { pk: 'plan', sk: planId, atMs, parts, count: actions.length, finished: false, expiresAt },
          ConditionExpression: 'attribute_not_exists(pk)',
        }),
      );
    } catch (error) {
      if (!isConditionFailure(error)) throw translateAwsError(error, { operation: 'start plan', resource: planId });
    }
  }

  async done(planId: string, index: number): Promise<void> {
    await call('record action done', planId, () =>
      this.doc.send(
        new UpdateCommand({
          TableName: this.table,
          Key: { pk: 'plan', sk: planId },
          UpdateExpression: 'ADD done :i',
          ExpressionAttributeValues: { ':i': new Set([index]) },
        }),
      ),
    );
  }

  async finish(planId: string): Promise<void> {
    await call('finish plan', planId, () =>
      this.doc.send(
        new UpdateCommand({
          TableName: this.table,
          Key: { pk: 'plan', sk: planId },
          UpdateExpression: 'SET finished = :t',
          ExpressionAttributeValues: { ':t': true },
        }),
      ),
    );
  }

  async unfinished(): Promise<JournaledPlan | undefined> {
    const page = await call('find unfinished plan', this.table, () =>
      this.doc.send(
        new QueryCommand({
          TableName: this.table,
          KeyConditionExpression: 'pk = :p',
          ExpressionAttributeValues: { ':p': 'plan' },
          ScanIndexForward: false,
          Limit: 20,
          ConsistentRead: true,
        }),
      ),
    );
    const head = (page.Items ?? []).find((i) => i.finished === false);
    if (!head) return undefined;
    const actions = (await this.blobs.read<PlanAction[]>(`plan#${head.sk as string}`)) ?? [];
    return {
      planId: head.sk as string,
      atMs: head.atMs as number,
      actions,
      done: new Set((head.done as Set<number> | undefined) ?? []),
      finished: false,
    };
  }
}
