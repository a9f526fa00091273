import { describe, expect, it } from 'vitest';
import { plan } from '../../core/planner/planner.ts';
import type { PlanJournal } from '../../core/ports.ts';
import { intake } from '../../core/services/intake.ts';
import { applyJobEvent } from '../../core/services/job-updates.ts';
import { reconcile } from '../../core/reconcile/reconcile.ts';
import { DEFAULT_POLICY } from '../../core/snapshot.ts';
import { defaultTeamTags } from '../../cloud/sim/defaults.ts';
import { createSimEnvironment, type SimEnvironment } from '../../cloud/sim/environment.ts';
import { T0 } from '../builders.ts';

/**
 * A world whose next plan has many kinds of actions: placements on ready machines, purchases in
 * two groups, a hold for a team over budget, and the removal of an idle machine.
 */
async function world(): Promise<SimEnvironment> {
  const e = createSimEnvironment({
    startMs: T0,
    seed: 5,
    teams: ['nlp', 'broke'],
    teamTags: [
      ...defaultTeamTags(['nlp']),
      { team: 'broke', resource: 'q', tags: { 'gpu-fleet:team': 'broke', 'gpu-fleet:budget-usd': '0', 'gpu-fleet:budget-action': 'hold' } },
    ],
    bootSec: 60,
    groups: [
      { id: 'v100-od', instanceTypes: ['p3.8xlarge'], zones: ['us-west-2a'], capacityType: 'on-demand', minSize: 0, maxSize: 10 },
      { id: 'v100-spot', instanceTypes: ['p3.2xlarge'], zones: ['us-west-2a'], capacityType: 'spot', minSize: 0, maxSize: 10 },
      { id: 'a10-od', instanceTypes: ['g5.xlarge'], zones: ['us-west-2a'], capacityType: 'on-demand', minSize: 0, maxSize: 10 },
    ],
  });
  await e.cloud.setDesiredCapacity('v100-od', 1);
  await e.cloud.setDesiredCapacity('a10-od', 1);
  e.clock.advanceBy(120_000);
  e.cloud.tick();
  const instances = await e.cloud.listInstances();
  const a = instances.find((i) => i.groupId === 'v100-od')!;
  const b = instances.find((i) => i.groupId === 'a10-od')!;
  await e.nodes.register({
    instanceId: a.id,
    groupId: a.groupId,
    registeredAtMs: e.clock.nowMs(),
    lastHeartbeatAtMs: e.clock.nowMs(),
    healthy: true,
    gpus: [0, 1, 2, 3].map((index) => ({ index, model: 'V100' as const, memoryMiB: 16_384 })),
  });
  await e.nodes.register({
    instanceId: b.id,
    groupId: b.groupId,
    registeredAtMs: e.clock.nowMs(),
    lastHeartbeatAtMs: e.clock.nowMs(),
    healthy: true,
    gpus: [{ index: 0, model: 'A10G', memoryMiB: 24_576 }],
  });
  await e.nodes.setIdleSince(b.id, e.clock.nowMs() - 600_000); // b (an A10G no job here wants) has been empty long enough to go
  const spec = (gpus: number, interruptible: boolean) =>
    JSON.stringify({ image: 'x/y:1', command: ['run'], gpu: { kind: 'whole', count: gpus, models: ['V100'] }, interruptible });
  for (let i = 0; i < 3; i++) await intake(e, { team: 'nlp', body: spec(1, false), token: `fit${i}` }); // fit on a
  for (let i = 0; i < 4; i++) await intake(e, { team: 'nlp', body: spec(1, true), token: `spot${i}` }); // need spot machines
  await intake(e, { team: 'nlp', body: spec(4, false), token: 'big' }); // needs a new 4-GPU machine
  await intake(e, { team: 'broke', body: spec(1, true), token: 'held' });
  // a already runs something, so it stays.
  await intake(e, { team: 'nlp', body: spec(1, false), token: 'running' });
  await applyJobEvent(
    e.jobs,
    'nlp.running',
    { type: 'place', attempt: 1, placement: { nodes: [{ nodeId: a.id, gpuIndices: [3] }], capacityType: 'on-demand' } },
    e.clock.nowMs(),
  );
  await applyJobEvent(e.jobs, 'nlp.running', { type: 'start', attempt: 1 }, e.clock.nowMs());
  return e;
}

/** What must be the same after a crash and a rerun as after an uninterrupted run. */
async function essentials(e: SimEnvironment) {
  const jobs = e.jobs.all().map((j) => ({
    id: j.id,
    state: j.state,
    attempt: j.attempt,
    nodes: j.placement?.nodes.map((n) => `${n.nodeId}[${n.gpuIndices.join(',')}]`) ?? [],
    hold: j.hold?.code ?? null,
  }));
  const groups = (await e.cloud.listGroups()).map((g) => ({ id: g.id, desired: g.desiredCapacity }));
  const instances = (await e.cloud.listInstances()).map((i) => ({ id: i.id, state: i.state }));
  return { jobs: jobs.sort((x, y) => (x.id < y.id ? -1 : 1)), groups, instances };
}

/** A journal that "crashes" the function after k actions were applied and recorded. */
function crashingAfter(k: number, inner: PlanJournal): PlanJournal {
  let recorded = 0;
  return {
    start: (id, at, actions) => inner.start(id, at, actions),
    finish: (id) => inner.finish(id),
    unfinished: () => inner.unfinished(),
    done: async (id, index) => {
      if (recorded >= k) throw new Error(`simulated crash after ${k} actions`);
      recorded++;
      await inner.done(id, index);
    },
  };
}

/**
 * A reconcile killed by its Lambda timeout after k actions: nothing after the kill runs, so its
 * lease is not released (a crash by throwing would release it in `finally`) and lives out its TTL.
 */
function timedOutAfter(k: number, e: SimEnvironment): SimEnvironment['ports'] {
  return {
    ...e.ports,
    journal: crashingAfter(k, e.journal),
    lease: { acquire: (...a) => e.ports.lease!.acquire(...a), release: async () => undefined },
  };
}

describe('apply after a crash', () => {
  it('a reconcile killed by its timeout is resumed by the next one that gets the lease, nothing applied twice', async () => {
    const reference = await world();
    const first = await reconcile(reference.ports, { planner: plan, policy: DEFAULT_POLICY, holder: 'a' });
    if (first.status !== 'done') throw new Error('reference did not run');
    const n = first.decision.plan.actions.length;
    await reconcile(reference.ports, { planner: plan, policy: DEFAULT_POLICY, holder: 'a' });
    const expected = await essentials(reference);

    for (let k = 0; k < n; k++) {
      const e = await world();
      await expect(reconcile(timedOutAfter(k, e), { planner: plan, policy: DEFAULT_POLICY, holder: 'killed' })).rejects.toThrow();
      // The schedule fires every minute, a second or two late as EventBridge's do: the first runs find the lease still held.
      let rerun: Awaited<ReturnType<typeof reconcile>> | undefined;
      for (let minute = 1; minute <= 5 && rerun?.status !== 'done'; minute++) {
        e.clock.advanceBy(61_000);
        // The machines' agents are alive and keep beating meanwhile.
        for (const r of await e.nodes.list()) await e.nodes.heartbeat(r.instanceId, e.clock.nowMs());
        rerun = await reconcile(e.ports, { planner: plan, policy: DEFAULT_POLICY, holder: `next-${minute}` });
      }
      expect(rerun?.status, `k=${k}`).toBe('done');
      if (rerun?.status === 'done')
        expect(rerun.resumed, `k=${k}: the half-applied plan is finished, not abandoned`).toBeGreaterThanOrEqual(n - k - 1);
      expect(await e.journal.unfinished()).toBeUndefined();
      const got = await essentials(e);
      expect(got.jobs, `k=${k}`).toEqual(expected.jobs);
      expect(got.groups, `k=${k}`).toEqual(expected.groups);
      expect(got.instances.length, `k=${k}`).toBe(expected.instances.length);
    }
  });

  it('converges to the same world for a crash after every k actions, repeating and losing nothing', async () => {
    const reference = await world();
    const first = await reconcile(reference.ports, { planner: plan, policy: DEFAULT_POLICY, holder: 'a' });
    if (first.status !== 'done') throw new Error('reference did not run');
    const kinds = new Set(first.decision.plan.actions.map((a) => a.kind));
    expect([...kinds].sort()).toEqual(['hold', 'place', 'scale-in', 'scale-up']);
    const n = first.decision.plan.actions.length;
    await reconcile(reference.ports, { planner: plan, policy: DEFAULT_POLICY, holder: 'a' });
    const expected = await essentials(reference);

    for (let k = 0; k < n; k++) {
      const e = await world();
      await expect(
        reconcile({ ...e.ports, journal: crashingAfter(k, e.journal) }, { planner: plan, policy: DEFAULT_POLICY, holder: 'crashing' }),
      ).rejects.toThrow(`simulated crash after ${k} actions`);
      // The next run, 30 s later, finishes the plan, then plans anew.
      e.clock.advanceBy(30_000);
      const rerun = await reconcile(e.ports, { planner: plan, policy: DEFAULT_POLICY, holder: 'next' });
      expect(rerun.status).toBe('done');
      if (rerun.status === 'done') expect(rerun.resumed, `k=${k}`).toBeGreaterThanOrEqual(n - k - 1);
      expect(await e.journal.unfinished()).toBeUndefined();
      const got = await essentials(e);
      expect(got.jobs, `k=${k}`).toEqual(expected.jobs);
      expect(got.groups, `k=${k}`).toEqual(expected.groups);
      // No machine was terminated twice, none launched twice: the same machines exist.
      expect(got.instances.length, `k=${k}`).toBe(expected.instances.length);
    }
  });

  it('abandons a plan too old to resume and plans anew', async () => {
    const e = await world();
    await expect(
      reconcile({ ...e.ports, journal: crashingAfter(1, e.journal) }, { planner: plan, policy: DEFAULT_POLICY, holder: 'crashing' }),
    ).rejects.toThrow();
    e.clock.advanceBy(10 * 60_000);
    const rerun = await reconcile(e.ports, { planner: plan, policy: DEFAULT_POLICY, holder: 'next' });
    expect(rerun.status === 'done' && rerun.resumed).toBe(0);
    expect(await e.journal.unfinished()).toBeUndefined();
  });
});
