import { type DynamoDBDocumentClient, GetCommand, PutCommand, QueryCommand } from '@aws-sdk/lib-dynamodb';
import type { ActionFailure } from '../../../core/plan.ts';
import type { DecisionLog, DecisionRecord } from '../../../core/ports.ts';
import { DAY_S, call, Blobs } from './common.ts';

export class DynamoDecisionLog implements DecisionLog {
  private readonly blobs: Blobs;
  constructor(
    private readonly doc: DynamoDBDocumentClient,
    private readonly table: string,
    private readonly keepDays = 30,
  ) {
    this.blobs = new Blobs(doc, table);
  }

  async record(decision: DecisionRecord): Promise<void> {
    const expiresAt = Math.floor(decision.atMs / 1000) + this.keepDays * DAY_S;
    const { plan, ...header } = decision;
    const parts = await this.blobs.write(`decision#${decision.id}`, plan, expiresAt);
    await call('record decision', decision.id, () =>
      this.doc.send(new PutCommand({ TableName: this.table, Item: { pk: 'decision', sk: decision.id, header, parts, expiresAt } })),
    );
  }

  async get(id: string): Promise<DecisionRecord | undefined> {
    const out = await call('get decision', id, () =>
      this.doc.send(new GetCommand({ TableName: this.table, Key: { pk: 'decision', sk: id }, ConsistentRead: true })),
    );
    if (!out.Item) return undefined;
    return this.assemble(out.Item);
  }

  async recent(limit: number): Promise<DecisionRecord[]> {
    const page = await call('list decisions', this.table, () =>
      this.doc.send(
        new QueryCommand({
          TableName: this.table,
          KeyConditionExpression: 'pk = :p',
          ExpressionAttributeValues: { ':p': 'decision' },
          ScanIndexForward: false,
          Limit: limit,
        }),
      ),
    );
    return Promise.all((page.Items ?? []).map((i) => this.assemble(i)));
  }

  private async assemble(item: Record<string, unknown>): Promise<DecisionRecord> {
    const plan = (await this.blobs.read<DecisionRecord['plan']>(`decision#${item.sk as string}`)) ?? {
      actions: [],
      waiting: [],
      addedCostMicroUsdPerHour: 0,
      addedExpectedCostMicroUsdPerHour: 0,
    };
    const header = item.header as Omit<DecisionRecord, 'plan'>;
    // Records written before action failures were data carry them as sentences.
    const errors = (header.errors as readonly (ActionFailure | string)[]).map((e, index) =>
      typeof e === 'string' ? { index, kind: 'place' as const, resource: '', code: 'failed', message: e } : e,
    );
    return { ...header, errors, plan };
  }
}
