import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { plan } from '../../core/planner/planner.ts';
import { intake } from '../../core/services/intake.ts';
import type { ReconcilePorts } from '../../core/reconcile/reconcile.ts';
import { DEFAULT_POLICY } from '../../core/snapshot.ts';
import { createReconcileHandler } from '../../functions/reconcile.ts';
import { observability } from '../../functions/observability.ts';
import { dynamoStores } from '../../cloud/aws/dynamo-store.ts';
import { ShippedCatalogSource, ShippedPriceSource } from '../../cloud/catalog/shipped.ts';
import { SeededRandom, VirtualClock } from '../../cloud/sim/clock.ts';
import { defaultTeamTags } from '../../cloud/sim/defaults.ts';
import { MemoryJobQueue, StaticBudgetTags } from '../../cloud/sim/memory-stores.ts';
import { SimCloud } from '../../cloud/sim/sim-cloud.ts';
import { T0 } from '../builders.ts';
import { startDynalite, type LocalDynamo } from '../support/dynalite.ts';
import { lambdaContext } from '../../functions/context.ts';
import { shippedCatalog } from '../../cloud/catalog/all-shipped.ts';

let db: LocalDynamo;
beforeAll(async () => {
  db = await startDynalite();
});
afterAll(async () => {
  await db?.close();
});

async function setup() {
  const stores = dynamoStores(db.doc, await db.createTables(), 'ckpt-bucket');
  const clock = new VirtualClock(T0);
  const cloud = new SimCloud({
    clock,
    random: new SeededRandom(1),
    bootSec: 60,
    groups: [{ id: 'v100-od', instanceTypes: ['p3.2xlarge'], zones: ['us-west-2a'], capacityType: 'on-demand', minSize: 0, maxSize: 8 }],
  });
  const ports: ReconcilePorts = {
    ...stores,
    clock,
    providers: [cloud],
    catalog: new ShippedCatalogSource(shippedCatalog()),
    prices: new ShippedPriceSource(shippedCatalog()),
    budgets: new StaticBudgetTags(defaultTeamTags(['nlp'])),
  };
  const queue = new MemoryJobQueue(['nlp']);
  const handler = createReconcileHandler({
    ports,
    queue,
    planner: plan,
    policy: DEFAULT_POLICY,
    obs: observability('reconcile-test'),
    timeoutEarlyInMillis: 0,
  });
  for (const token of ['a', 'b', 'c'])
    await intake(
      { jobs: stores.jobs, clock },
      {
        team: 'nlp',
        body: JSON.stringify({
          image: 'x/y:1',
          command: ['run'],
          gpu: { kind: 'whole', count: 1, models: ['V100'] },
          interruptible: false,
        }),
        token,
      },
    );
  return { handler, stores, cloud, clock };
}

describe('reconcile function', () => {
  it('plans without acting in a dry run, and records the decision for explain', async () => {
    const { handler, stores, cloud } = await setup();
    const out = await handler({ dryRun: true }, lambdaContext('reconcile'));
    expect(out).toMatchObject({ status: 'done', dryRun: true, actions: 1, applied: 0, waiting: 3 });
    expect((await cloud.listGroups())[0]!.desiredCapacity).toBe(0);
    const decision = await stores.decisions.get(out.decisionId!);
    expect(decision).toMatchObject({ dryRun: true, plan: { actions: [expect.objectContaining({ kind: 'scale-up', toDesired: 3 })] } });
  });

  it('scales up for waiting work through the plan journal, and a scheduled event works as well as a direct one', async () => {
    const { handler, stores, cloud } = await setup();
    const scheduled = {
      version: '0',
      id: 'x',
      'detail-type': 'Scheduled Event',
      source: 'aws.events',
      account: '1',
      time: '2026-11-30T12:00:00Z',
      region: 'us-east-1',
      resources: [],
      detail: {},
    };
    const out = await handler(scheduled, lambdaContext('reconcile'));
    expect(out).toMatchObject({ status: 'done', dryRun: false, applied: 1 });
    expect((await cloud.listGroups())[0]!.desiredCapacity).toBe(3);
    expect(await stores.journal.unfinished()).toBeUndefined();
  });

  it('lets one of two reconcilers started at once act, the other skips', async () => {
    const { handler, cloud } = await setup();
    const outs = await Promise.all([handler({}, lambdaContext('reconcile', 'r1')), handler({}, lambdaContext('reconcile', 'r2'))]);
    expect(outs.map((o) => o.status).sort()).toEqual(['done', 'skipped']);
    expect(outs.find((o) => o.status === 'skipped')!.why).toBe('another reconciler holds the lease');
    expect((await cloud.listGroups())[0]!.desiredCapacity).toBe(3);
    expect(cloud.calls.filter((c) => c.method === 'setDesiredCapacity')).toHaveLength(1);
  });

  it('handles the interruptions a polled cloud reports before planning, and a source that fails does not stop the run', async () => {
    const { stores, cloud, clock } = await setup();
    await cloud.setDesiredCapacity('v100-od', 1);
    clock.advanceBy(120_000);
    cloud.tick();
    const [inst] = await cloud.listInstances();
    await stores.nodes.register({
      instanceId: inst!.id,
      groupId: 'v100-od',
      registeredAtMs: clock.nowMs(),
      lastHeartbeatAtMs: clock.nowMs(),
      healthy: true,
      gpus: [{ index: 0, model: 'V100', memoryMiB: 16_384 }],
    });
    const polled = {
      cloud: 'gcp' as const,
      poll: async () => [{ kind: 'preempted' as const, eventId: 'gcp/p/z/systemevent-1', instanceId: inst!.id, atMs: clock.nowMs() }],
    };
    const broken = {
      cloud: 'gcp' as const,
      poll: async () => Promise.reject(new Error('GCP list preemption operations failed (forbidden)')),
    };
    const ports: ReconcilePorts = {
      ...stores,
      clock,
      providers: [cloud],
      catalog: new ShippedCatalogSource(shippedCatalog()),
      prices: new ShippedPriceSource(shippedCatalog()),
      budgets: new StaticBudgetTags(defaultTeamTags(['nlp'])),
      notices: [broken, polled],
    };
    const handler = createReconcileHandler({
      ports,
      queue: new MemoryJobQueue(['nlp']),
      planner: plan,
      policy: DEFAULT_POLICY,
      obs: observability('reconcile-test'),
      timeoutEarlyInMillis: 0,
    });
    const out = await handler({}, lambdaContext('reconcile'));
    expect(out).toMatchObject({ status: 'done', polledNotices: 1 });
    // The preempted machine is drained and let go in the same run, instead of receiving one of the waiting jobs.
    expect((await cloud.listInstances()).find((i) => i.id === inst!.id)!.state).toBe('terminated');
    // Its record stays, with when its bill ended, until a reconcile has seen it gone and counted its last minutes.
    expect(await stores.nodes.get(inst!.id)).toMatchObject({ endedAtMs: expect.any(Number), draining: expect.anything() });
    const placedOnIt = (await stores.jobs.listByState(['placed'])).filter((j) => j.placement?.nodes.some((n) => n.nodeId === inst!.id));
    expect(placedOnIt).toEqual([]);
  });
});
