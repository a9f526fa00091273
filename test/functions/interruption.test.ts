import { readdirSync, readFileSync } from 'node:fs';
import { DynamoDBPersistenceLayer } from '@aws-lambda-powertools/idempotency/dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { applyJobEvent } from '../../core/services/job-updates.ts';
import { intake } from '../../core/services/intake.ts';
import { DEFAULT_POLICY } from '../../core/snapshot.ts';
import type { InterruptionPorts } from '../../core/services/interruption.ts';
import { createInterruptionHandler } from '../../functions/interruption.ts';
import { observability } from '../../functions/observability.ts';
import { dynamoStores } from '../../cloud/aws/dynamo-store.ts';
import { instanceStateChange, spotInterruptionWarning } from '../../cloud/aws/events.ts';
import { SeededRandom, VirtualClock } from '../../cloud/sim/clock.ts';
import { SimCloud } from '../../cloud/sim/sim-cloud.ts';
import { T0 } from '../builders.ts';
import { startDynalite, type LocalDynamo } from '../support/dynalite.ts';
import { lambdaContext } from '../../functions/context.ts';

let db: LocalDynamo;
beforeAll(async () => {
  db = await startDynalite();
});
afterAll(async () => {
  await db?.close();
});

const spec = JSON.stringify({ image: 'x/y:1', command: ['run'], gpu: { kind: 'whole', count: 1 }, checkpoint: { intervalSec: 600 } });

/** A spot machine with two jobs, its state in DynamoDB, the machines in the simulated cloud. */
async function setup(withIdempotency = true) {
  const tables = await db.createTables();
  const stores = dynamoStores(db.doc, tables, 'ckpt-bucket');
  const clock = new VirtualClock(T0);
  const cloud = new SimCloud({
    clock,
    random: new SeededRandom(1),
    bootSec: 30,
    groups: [{ id: 'v100-spot', instanceTypes: ['p3.8xlarge'], zones: ['us-west-2a'], capacityType: 'spot', minSize: 0, maxSize: 4 }],
  });
  await cloud.setDesiredCapacity('v100-spot', 1);
  clock.advanceBy(60_000);
  cloud.tick();
  const [inst] = await cloud.listInstances();
  await stores.nodes.register({
    instanceId: inst!.id,
    groupId: 'v100-spot',
    registeredAtMs: clock.nowMs(),
    lastHeartbeatAtMs: clock.nowMs(),
    healthy: true,
    gpus: [0, 1, 2, 3].map((index) => ({ index, model: 'V100' as const, memoryMiB: 16_384 })),
  });
  for (const [i, token] of ['a', 'b'].entries()) {
    await intake({ jobs: stores.jobs, clock }, { team: 'nlp', body: spec, token });
    await applyJobEvent(
      stores.jobs,
      `nlp.${token}`,
      { type: 'place', attempt: 1, placement: { nodes: [{ nodeId: inst!.id, gpuIndices: [i] }], capacityType: 'spot' } },
      clock.nowMs(),
    );
    await applyJobEvent(stores.jobs, `nlp.${token}`, { type: 'start', attempt: 1 }, clock.nowMs());
  }
  const ports: InterruptionPorts = {
    clock,
    jobs: stores.jobs,
    nodes: stores.nodes,
    checkpoints: stores.checkpoints,
    pools: stores.pools,
    providers: [cloud],
  };
  const triggered: string[] = [];
  const handler = createInterruptionHandler({
    ports,
    policy: DEFAULT_POLICY,
    trigger: { reconcileSoon: async (why) => void triggered.push(why) },
    obs: observability('interruption-test'),
    timeoutEarlyInMillis: 0,
    ...(withIdempotency ? { idempotency: new DynamoDBPersistenceLayer({ tableName: tables.idempotency, awsSdkV3Client: db.client }) } : {}),
  });
  return { handler, stores, clock, instanceId: inst!.id, triggered };
}

describe('interruption function', () => {
  it('handles every shared event sample: notices handled or ignored, the rest skipped with a reason', async () => {
    const { handler } = await setup(false);
    const dir = new URL('../fixtures/events/', import.meta.url);
    const results: Record<string, string> = {};
    for (const f of readdirSync(dir)
      .filter((x) => x.endsWith('.json'))
      .sort()) {
      const out = await handler(JSON.parse(readFileSync(new URL(f, dir), 'utf8')), lambdaContext('interruption'));
      results[f] = out.status;
      if (out.status === 'ignored') expect(out.why.length).toBeGreaterThan(10);
      if (out.status === 'invalid') expect(out.error).toContain('not an EventBridge event');
    }
    // None of the samples names a machine of this fleet: all are ignored or invalid, none crashes.
    expect(Object.values(results).filter((s) => s === 'handled')).toEqual([]);
    expect(
      Object.entries(results)
        .filter(([, s]) => s === 'invalid')
        .map(([f]) => f),
    ).toEqual(['imds-rebalance-recommendation.json', 'imds-spot-instance-action-stop.json', 'imds-spot-instance-action-terminate.json']);
  });

  it('drains a warned machine, asks for checkpoints, and triggers a reconcile at once', async () => {
    const { handler, stores, clock, instanceId, triggered } = await setup();
    const event = spotInterruptionWarning({ id: 'evt-warn-1', instanceId, zone: 'us-west-2a', region: 'us-west-2', atMs: clock.nowMs() });
    const out = await handler(event, lambdaContext('interruption'));
    expect(out).toMatchObject({ status: 'handled', checkpointsRequested: ['nlp.a', 'nlp.b'] });
    expect(triggered).toEqual(['interruption-warning evt-warn-1']);
    expect((await stores.nodes.get(instanceId))!.draining?.reason).toBe('spot interruption warning');
    expect((await stores.jobs.get('nlp.a'))!.state).toBe('checkpointing');
  });

  it('handles the same event delivered three times at once exactly once (Powertools idempotency on the event id)', async () => {
    const { handler, stores, clock, instanceId } = await setup();
    const event = instanceStateChange({ id: 'evt-term-1', instanceId, region: 'us-west-2', atMs: clock.nowMs(), state: 'terminated' });
    const outs = await Promise.allSettled([1, 2, 3].map(() => handler(event, lambdaContext('interruption'))));
    const fulfilled = outs.filter((o): o is PromiseFulfilledResult<Awaited<ReturnType<typeof handler>>> => o.status === 'fulfilled');
    expect(fulfilled.length).toBeGreaterThanOrEqual(1);
    // Concurrent duplicates are refused while the first is in progress, or get its stored result.
    for (const o of outs)
      if (o.status === 'rejected') expect(String(o.reason)).toMatch(/IdempotencyAlreadyInProgress|already in progress/i);
    for (const id of ['nlp.a', 'nlp.b'])
      expect(await stores.jobs.get(id)).toMatchObject({ state: 'pending', attempt: 2, interruptions: 1 });
    const again = await handler(event, lambdaContext('interruption'));
    expect(again).toEqual(fulfilled[0]!.value);
  });

  it('requeues each job once when the state change overtakes the warning, with distinct event ids', async () => {
    const { handler, stores, clock, instanceId } = await setup(false);
    const terminated = instanceStateChange({ id: 'evt-t', instanceId, region: 'us-west-2', atMs: clock.nowMs(), state: 'terminated' });
    const warning = spotInterruptionWarning({
      id: 'evt-w',
      instanceId,
      zone: 'us-west-2a',
      region: 'us-west-2',
      atMs: clock.nowMs() - 120_000,
    });
    await Promise.all([
      handler(terminated, lambdaContext('i')),
      handler(warning, lambdaContext('i')),
      handler(terminated, lambdaContext('i')),
    ]);
    for (const id of ['nlp.a', 'nlp.b']) {
      const job = (await stores.jobs.get(id))!;
      expect(job.attempt).toBe(2);
      expect(job.interruptions).toBe(1);
      expect(job.state).toBe('pending');
    }
  });
});
