import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { documentClient, dynamoStores } from '../../cloud/aws/dynamo-store.ts';
import { shippedByteRates } from '../../cloud/prices.ts';
import { saveSizeOf } from '../../core/bytes.ts';
import { checkpointFolder } from '../../core/job.ts';
import { accrueSpend, byteMeterOf } from '../../core/services/accrual.ts';
import { startDynalite, type LocalDynamo } from '../support/dynalite.ts';

/**
 * What one minute's spend accrual reads from DynamoDB does not grow with the checkpoint index: it
 * reads the byte events since the last count, the teams' marks and budget rows, never every job's
 * byte log (which each reconcile once read, ended jobs' items included until their 120-day TTL).
 */
let db: LocalDynamo;
beforeAll(async () => {
  db = await startDynalite();
});
afterAll(async () => {
  await db?.close();
});

describe('spend accrual’s reads of the checkpoint index, on a DynamoDB-compatible server', () => {
  it('reads the events since the last count and the teams’ rows, not the items of the jobs that saved before', async () => {
    const tables = await db.createTables();
    const clock = { ms: Date.UTC(2026, 11, 7, 10), nowMs: () => clock.ms };
    // Every item a call reads back (Query's ScannedCount, GetItem's item), counted on a client of its own.
    let itemsRead = 0;
    const doc = documentClient({
      endpoint: db.endpoint,
      region: 'us-east-1',
      credentials: { accessKeyId: 'test', secretAccessKey: 'test' },
    });
    doc.middlewareStack.add(
      (next) => async (args) => {
        const out = await next(args);
        const o = out.output as { ScannedCount?: number; Item?: unknown };
        itemsRead += o.ScannedCount ?? (o.Item ? 1 : 0);
        return out;
      },
      { step: 'initialize', name: 'countItemsRead' },
    );
    const stores = dynamoStores(doc, tables, 's3://fleet/checkpoints/', clock);
    const meter = byteMeterOf(stores.checkpoints, {
      store: { cloud: 'aws', region: 'us-east-1' },
      layout: { s3Path: 'gateway-endpoint', natZones: ['us-east-1a'] },
      rates: shippedByteRates(),
    });
    const save = async (jobId: string, n: number) =>
      stores.checkpoints.markComplete(
        {
          jobId,
          attempt: 1,
          location: `${checkpointFolder('s3://fleet/checkpoints/', jobId, 1)}s${n}/`,
          completedAtMs: clock.ms,
          progressSec: n * 600,
          size: saveSizeOf([2 ** 30]),
        },
        0,
        { owner: { jobId, team: jobId.split('.')[0]!, project: 'p' }, machine: { cloud: 'aws', region: 'us-east-1', zone: 'us-east-1a' } },
      );
    const count = () =>
      accrueSpend(stores.ledger, { teams: [], nowMs: clock.ms, maxWindowMs: 120_000, machines: async () => [], bytes: meter });
    // 120 jobs of two teams saved, and were counted.
    for (let j = 0; j < 120; j++) await save(`${j % 2 ? 'nlp' : 'vision'}.job-${j}`, 1);
    clock.ms += 60_000;
    await count();
    // A minute on, two of them save again: the next count reads those two saves' events, not the 120 logs.
    clock.ms += 30_000;
    await save('nlp.job-1', 2);
    await save('vision.job-2', 2);
    clock.ms += 30_000;
    itemsRead = 0;
    const charged = await count();
    expect(charged.get('nlp')).toBeGreaterThan(0); // each team's held bytes and its new save are charged
    expect(charged.get('vision')).toBeGreaterThan(0);
    // 2 events, 2 team marks, and each team's budget, day and bytes-day rows (and the previous periods' when none yet).
    expect(itemsRead).toBeLessThanOrEqual(2 + 2 + 2 * 6);
    // The report's read of every log, for contrast, reads all 120 items.
    itemsRead = 0;
    expect(await stores.checkpoints.byteLogs(clock.ms - 3_600_000)).toHaveLength(120);
    expect(itemsRead).toBeGreaterThanOrEqual(120);
  });
});
