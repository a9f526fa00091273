import { type DynamoDBDocumentClient, GetCommand, PutCommand } from '@aws-sdk/lib-dynamodb';
import type { FamilyRunStore } from '../../../core/ports.ts';
import { mergeFamilyRuns, type RightsizeRun } from '../../../core/rightsizing.ts';
import { isConditionFailure, translateAwsError } from '../errors.ts';
import { call } from './common.ts';

/**
 * Right-sizing's family runs in the control table (pk `family`, sk the family): the kept runs as
 * JSON in `body`, with a version for the conditional write. Reconcile is the one writer (under its
 * lease); a write that loses a race anyway is read and merged again.
 */
export class DynamoFamilyRuns implements FamilyRunStore {
  constructor(
    private readonly doc: DynamoDBDocumentClient,
    private readonly table: string,
  ) {}

  private async read(family: string): Promise<{ runs: RightsizeRun[]; version: number }> {
    const out = await call('read family runs', family, () =>
      this.doc.send(new GetCommand({ TableName: this.table, Key: { pk: 'family', sk: family }, ConsistentRead: true })),
    );
    return out.Item
      ? { runs: JSON.parse(out.Item.body as string) as RightsizeRun[], version: out.Item.version as number }
      : { runs: [], version: 0 };
  }

  async runs(family: string): Promise<RightsizeRun[]> {
    return (await this.read(family)).runs;
  }

  async note(runs: readonly { readonly family: string; readonly run: RightsizeRun }[]): Promise<void> {
    const byFamily = new Map<string, RightsizeRun[]>();
    for (const { family, run } of runs) byFamily.set(family, [...(byFamily.get(family) ?? []), run]);
    for (const [family, added] of byFamily) {
      for (let tries = 0; ; tries++) {
        const { runs: kept, version } = await this.read(family);
        const merged = mergeFamilyRuns(kept, added);
        if (JSON.stringify(merged) === JSON.stringify(kept)) break;
        try {
          await this.doc.send(
            new PutCommand({
              TableName: this.table,
              Item: { pk: 'family', sk: family, version: version + 1, body: JSON.stringify(merged) },
              ConditionExpression: 'attribute_not_exists(pk) OR version = :v',
              ExpressionAttributeValues: { ':v': version },
            }),
          );
          break;
        } catch (error) {
          if (!isConditionFailure(error) || tries >= 4)
            throw translateAwsError(error, { operation: 'write family runs', resource: family });
        }
      }
    }
  }
}

// ---- services ---------------------------------------------------------------------------
