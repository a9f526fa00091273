import { type DynamoDBDocumentClient, PutCommand } from '@aws-sdk/lib-dynamodb';
import type { Team } from '../../../core/team.ts';
import type { BudgetMemory } from '../../../core/ports.ts';
import { call, queryAll } from './common.ts';

export class DynamoBudgetMemory implements BudgetMemory {
  constructor(
    private readonly doc: DynamoDBDocumentClient,
    private readonly table: string,
  ) {}

  async load(): Promise<Map<string, Team>> {
    const items = await queryAll(
      this.doc,
      { TableName: this.table, KeyConditionExpression: 'pk = :p', ExpressionAttributeValues: { ':p': 'budget' }, ConsistentRead: true },
      'read budgets',
    );
    return new Map(items.map((i) => [i.sk as string, i.team as Team]));
  }

  async save(team: Team): Promise<void> {
    await call('save budget', team.id, () =>
      this.doc.send(new PutCommand({ TableName: this.table, Item: { pk: 'budget', sk: team.id, team } })),
    );
  }
}
