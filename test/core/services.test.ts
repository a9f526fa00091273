import { describe, expect, it } from 'vitest';
import { plan as planSimple } from '../../core/planner/planner.ts';
import { fleetShapeFrom, intake } from '../../core/services/intake.ts';
import { applyJobEvent } from '../../core/services/job-updates.ts';
import { reason } from '../../core/reason.ts';
import { requeueAttempt } from '../../core/services/requeue.ts';
import { applyPlan, JOB_WRITE_CONCURRENCY, poolNoteDue, POOL_NOTE_EVERY_MS, reconcile } from '../../core/reconcile/reconcile.ts';
import { IDLE_TEAM } from '../../core/services/accrual.ts';
import { handleNotice } from '../../core/services/interruption.ts';
import { costForDuration } from '../../core/money.ts';
import { CloudError } from '../../core/errors.ts';
import type { NodeGroupProvider, NodeStore } from '../../core/ports.ts';
import { DEFAULT_POLICY } from '../../core/snapshot.ts';
import { defaultTeamTags } from '../../cloud/sim/defaults.ts';
import { createSimEnvironment } from '../../cloud/sim/environment.ts';
import { T0 } from '../builders.ts';

const spec = {
  image: 'pytorch/pytorch:2.3.0',
  command: ['python', 'train.py'],
  gpu: { kind: 'whole', count: 1, models: ['V100'] },
  checkpoint: { intervalSec: 600 },
};

function env() {
  return createSimEnvironment({
    startMs: T0,
    seed: 1,
    teams: ['nlp'],
    teamTags: defaultTeamTags(['nlp']),
    bootSec: 120,
    groups: [{ id: 'v100-spot', instanceTypes: ['p3.2xlarge'], zones: ['us-west-2a'], capacityType: 'spot', minSize: 0, maxSize: 5 }],
  });
}

/** Registers one-V100 nodes of the spot group, as their agents would. */
async function registerV100(e: ReturnType<typeof env>, ids: readonly string[]): Promise<void> {
  for (const id of ids)
    await e.nodes.register({
      instanceId: id,
      groupId: 'v100-spot',
      registeredAtMs: T0,
      lastHeartbeatAtMs: T0,
      healthy: true,
      gpus: [{ index: 0, model: 'V100', memoryMiB: 16384 }],
    });
}

/** The node store with its work-list writes (`assign`) going through `wrap`, to watch or delay them. */
function onAssign(
  store: NodeStore,
  wrap: (assign: NodeStore['assign'], nodeId: string, jobId: string, attempt: number) => Promise<boolean>,
): NodeStore {
  return new Proxy(store, {
    get(target, prop, receiver) {
      const v = Reflect.get(target, prop, receiver) as unknown;
      if (typeof v !== 'function') return v;
      const bound = (v as (...a: unknown[]) => unknown).bind(target);
      return prop === 'assign'
        ? (nodeId: string, jobId: string, attempt: number) => wrap(bound as NodeStore['assign'], nodeId, jobId, attempt)
        : bound;
    },
  });
}

describe('intake', () => {
  it('stores a valid spec as pending once, however often it is delivered', async () => {
    const e = env();
    const msg = { team: 'nlp', body: JSON.stringify(spec), token: 'msg-1' };
    expect(await intake(e, msg)).toMatchObject({ outcome: 'accepted', job: { id: 'nlp.msg-1', state: 'pending', team: 'nlp' } });
    expect(await intake(e, msg)).toMatchObject({ outcome: 'duplicate' });
    expect(await e.jobs.listByState(['pending'])).toHaveLength(1);
  });

  it('refuses a token used before for a different spec, and takes the same spec with its keys in another order as a repeat', async () => {
    const e = env();
    await intake(e, { team: 'nlp', body: JSON.stringify(spec), token: 'run-7' });
    const reordered = JSON.stringify(Object.fromEntries(Object.entries(spec).reverse()));
    expect(await intake(e, { team: 'nlp', body: reordered, token: 'run-7' })).toMatchObject({ outcome: 'duplicate' });
    const other = await intake(e, { team: 'nlp', body: JSON.stringify({ ...spec, priority: 900 }), token: 'run-7' });
    expect(other).toMatchObject({ outcome: 'token-reused', job: { id: 'nlp.run-7' } });
    if (other.outcome === 'token-reused')
      expect(other.error).toContain('token "run-7" was already used for nlp.run-7 with a different spec');
    // The stored job is the first one, unchanged; a bad body under a used token is refused too.
    expect((await e.jobs.get('nlp.run-7'))?.spec.priority).toBe(100);
    expect(await intake(e, { team: 'nlp', body: '{', token: 'run-7' })).toMatchObject({ outcome: 'token-reused' });
  });

  it('rejects at intake a spec no node group can ever hold, naming the requirement no group meets', async () => {
    const e = env();
    const ports = { jobs: e.jobs, clock: e.clock, fleetShape: fleetShapeFrom(e.ports.providers, e.catalog.instanceTypes, e.clock) };
    const l4 = { ...spec, gpu: { kind: 'whole', count: 1, models: ['L4', 'A10G'] } };
    const out = await intake(ports, { team: 'nlp', body: JSON.stringify(l4), token: 'l4' });
    expect(out).toMatchObject({ outcome: 'rejected', job: { state: 'rejected' } });
    const [error] = out.outcome === 'rejected' ? out.errors : [];
    expect(error).toMatch(
      /^\(spec\): no node group can hold it: no group has a GPU it names \(L4, A10G\); the groups offer p3\.2xlarge \(1 V100\)/,
    );
    expect((await e.jobs.get('nlp.l4'))!.rejection).toMatchObject({ errors: [error], body: JSON.stringify(l4) });
    // A repeat of the same message is the same rejected job.
    expect(await intake(ports, { team: 'nlp', body: JSON.stringify(l4), token: 'l4' })).toMatchObject({ outcome: 'duplicate' });
    // Memory is named when it is what no group has.
    const big = { ...spec, gpu: { kind: 'whole', count: 1, models: ['V100'], minMemoryMiB: 600_000 } };
    expect(await intake(ports, { team: 'nlp', body: JSON.stringify(big), token: 'big' })).toMatchObject({
      outcome: 'rejected',
      errors: [expect.stringMatching(/it asks for 600,000 MiB of memory per GPU; the most a group's GPU has is 16,384 MiB/)],
    });
    // A spec a group can hold is taken as it was.
    const v100 = await intake(ports, { team: 'nlp', body: JSON.stringify(spec), token: 'v100' });
    expect(v100).toMatchObject({ outcome: 'accepted', job: { state: 'pending' } });
    // When the groups cannot be listed, or one has a machine type the catalogue does not know, it is taken (reconcile says why it waits).
    const failing = { ...ports, fleetShape: async () => Promise.reject(new Error('throttled')) };
    expect(await intake(failing, { team: 'nlp', body: JSON.stringify(l4), token: 'l4-b' })).toMatchObject({ outcome: 'accepted' });
    const unknownType = fleetShapeFrom(
      [
        {
          listGroups: async () => [
            {
              ...(await e.ports.providers[0]!.listGroups())[0]!,
              offerings: [{ ...(await e.ports.providers[0]!.listGroups())[0]!.offerings[0]!, instanceType: 'p9.huge' }],
            },
          ],
        },
      ],
      e.catalog.instanceTypes,
      e.clock,
    );
    expect(await intake({ ...ports, fleetShape: unknownType }, { team: 'nlp', body: JSON.stringify(l4), token: 'l4-c' })).toMatchObject({
      outcome: 'accepted',
    });
    // No group listed at all (a tag or a permission, more likely than a fleet without groups): nothing is refused on it.
    const none = fleetShapeFrom([{ listGroups: async () => [] }], e.catalog.instanceTypes, e.clock);
    expect(await intake({ ...ports, fleetShape: none }, { team: 'nlp', body: JSON.stringify(l4), token: 'l4-d' })).toMatchObject({
      outcome: 'accepted',
    });
  });

  it('lists the node groups once a minute for intake, not once per message, and keeps no failed listing', async () => {
    const e = env();
    let listings = 0;
    let fail = false;
    const provider = {
      listGroups: async () => {
        listings++;
        if (fail) throw new Error('throttled');
        return e.ports.providers[0]!.listGroups();
      },
    };
    const shape = fleetShapeFrom([provider], e.catalog.instanceTypes, e.clock, 60_000);
    await Promise.all([shape(), shape(), shape()]);
    e.clock.advanceTo(e.clock.nowMs() + 30_000);
    await shape();
    expect(listings).toBe(1);
    e.clock.advanceTo(e.clock.nowMs() + 31_000);
    fail = true;
    await expect(shape()).rejects.toThrow('throttled');
    fail = false;
    expect((await shape())!.groups.map((g) => g.id)).toEqual(['v100-spot']);
    expect(listings).toBe(3);
  });

  it('takes a service as one record (team.name), idempotently; a new spec updates it; without a service table it is rejected and says why', async () => {
    const e = env();
    const svc = {
      ...spec,
      name: 'chat',
      checkpoint: undefined,
      service: { port: 8000, replicas: { min: 1, max: 4 }, targets: [{ metric: 'waiting-requests', perReplica: 6 }] },
    };
    const out = await intake({ ...e, services: e.services }, { team: 'nlp', body: JSON.stringify(svc), token: 'svc' });
    expect(out).toMatchObject({ outcome: 'service', created: true, service: { id: 'nlp.chat', team: 'nlp', target: 1, version: 1 } });
    // No job is made for the submission itself: replicas are started by reconcile.
    expect(await e.jobs.listByState(['pending', 'rejected'])).toEqual([]);
    const again = await intake({ ...e, services: e.services }, { team: 'nlp', body: JSON.stringify(svc), token: 'svc-2' });
    expect(again).toMatchObject({ outcome: 'service', created: false, service: { version: 1 } });
    const bigger = { ...svc, service: { ...svc.service, replicas: { min: 2, max: 8 } } };
    const updated = await intake({ ...e, services: e.services }, { team: 'nlp', body: JSON.stringify(bigger), token: 'svc-3' });
    expect(updated).toMatchObject({
      outcome: 'service',
      created: false,
      service: { version: 2, spec: { service: { replicas: { max: 8 } } } },
    });

    const without = await intake({ jobs: e.jobs, clock: e.clock }, { team: 'nlp', body: JSON.stringify(svc), token: 'svc-4' });
    expect(without).toMatchObject({
      outcome: 'rejected',
      job: {
        state: 'rejected',
        rejection: { errors: [expect.stringMatching(/^service: the service is valid, but this deployment runs no services/)] },
      },
    });
  });

  it('orders a service’s updates by when their messages were sent: a redelivered older one changes nothing', async () => {
    const e = env();
    const svc = (image: string) =>
      JSON.stringify({
        ...spec,
        image,
        name: 'chat',
        checkpoint: undefined,
        service: { port: 8000, replicas: { min: 1, max: 4 }, targets: [{ metric: 'waiting-requests', perReplica: 6 }] },
      });
    const take = (image: string, token: string, sentAtMs: number) =>
      intake({ ...e, services: e.services }, { team: 'nlp', body: svc(image), token, sentAtMs });
    const t = e.clock.nowMs();
    await take('vllm/vllm-openai:1.0', 'm1', t - 2000);
    expect(await take('vllm/vllm-openai:2.0', 'm2', t - 1000)).toMatchObject({
      service: { version: 2, spec: { image: 'vllm/vllm-openai:2.0' } },
    });
    // SQS delivers m1 again, after m2 (at least once, in no particular order): the service stays on 2.0.
    expect(await take('vllm/vllm-openai:1.0', 'm1', t - 2000)).toMatchObject({ stale: true, service: { version: 2 } });
    expect((await e.services.get('nlp.chat'))!.spec.image).toBe('vllm/vllm-openai:2.0');
    // A newer message still updates it; one sent before the service was cancelled never brings it back.
    expect(await take('vllm/vllm-openai:3.0', 'm3', t - 500)).toMatchObject({ service: { version: 3, specSentAtMs: t - 500 } });
    const current = (await e.services.get('nlp.chat'))!;
    await e.services.update({ ...current, state: 'cancelled', version: current.version + 1, updatedAtMs: t }, current.version);
    expect(await take('vllm/vllm-openai:3.0', 'm3', t - 500)).toMatchObject({ stale: true, service: { state: 'cancelled' } });
  });

  it('records a bad spec as rejected with the reasons and the body', async () => {
    const e = env();
    const out = await intake(e, { team: 'nlp', body: JSON.stringify({ ...spec, gpu: { kind: 'whole', count: 99 } }), token: 'bad' });
    expect(out).toMatchObject({
      outcome: 'rejected',
      job: { state: 'rejected', rejection: { errors: ['gpu.count: must be at most 16; got 99'] } },
    });
    const notJson = await intake(e, { team: 'nlp', body: '{oops', token: 'bad2' });
    expect(notJson.outcome === 'rejected' && notJson.errors[0]).toContain('(body): not valid JSON');
  });

  it('takes the team from the queue, never from the body', async () => {
    const e = env();
    const out = await intake(e, { team: 'nlp', body: JSON.stringify({ ...spec, team: 'vision' }), token: 't' });
    expect(out).toMatchObject({ outcome: 'rejected', job: { team: 'nlp' } });
    expect(await intake(e, { team: 'Not A Team!', body: JSON.stringify(spec), token: 't' })).toMatchObject({ outcome: 'unattributable' });
  });
});

describe('reconcile', () => {
  it('scales up for pending work, places it once the machine has booted, and scales in when idle', async () => {
    const e = env();
    await intake(e, { team: 'nlp', body: JSON.stringify(spec), token: 'a' });
    const run = () => reconcile(e.ports, { planner: planSimple, policy: DEFAULT_POLICY });
    const first = await run();
    expect(first.status === 'done' && first.decision.plan.actions.map((a) => a.kind)).toEqual(['scale-up']);
    expect((await e.cloud.listGroups())[0]!.desiredCapacity).toBe(1);

    e.clock.advanceBy(150_000);
    e.cloud.tick();
    const [inst] = await e.cloud.listInstances();
    await e.nodes.register({
      instanceId: inst!.id,
      groupId: inst!.groupId,
      registeredAtMs: e.clock.nowMs(),
      lastHeartbeatAtMs: e.clock.nowMs(),
      healthy: true,
      gpus: [{ index: 0, model: 'V100', memoryMiB: 16384 }],
    });
    const second = await run();
    expect(second.status === 'done' && second.decision.plan.actions.map((a) => a.kind)).toEqual(['place']);
    expect((await e.jobs.get('nlp.a'))?.state).toBe('placed');
    expect((await e.nodes.get(inst!.id))?.assigned).toEqual({ 'nlp.a': 1 }); // the agent's work list

    // The job finishes; after the cool-down the node goes.
    const job = (await e.jobs.get('nlp.a'))!;
    await e.jobs.update({ ...job, state: 'succeeded', version: job.version + 1 }, job.version);
    await run(); // marks the node idle
    e.clock.advanceBy(DEFAULT_POLICY.idleCooldownSec * 1000 + 1000);
    await e.nodes.heartbeat(inst!.id, e.clock.nowMs());
    const third = await run();
    expect(third.status === 'done' && third.decision.plan.actions).toEqual([
      expect.objectContaining({ kind: 'scale-in', instanceId: inst!.id }),
    ]);
    expect((await e.cloud.listInstances())[0]!.state).toBe('terminated');
  });

  it('requeues the work of a node whose agent went silent, from its newest checkpoint', async () => {
    const e = env();
    await intake(e, { team: 'nlp', body: JSON.stringify(spec), token: 'a' });
    await e.cloud.setDesiredCapacity('v100-spot', 1);
    e.clock.advanceBy(150_000);
    e.cloud.tick();
    const [inst] = await e.cloud.listInstances();
    await e.nodes.register({
      instanceId: inst!.id,
      groupId: 'v100-spot',
      registeredAtMs: e.clock.nowMs(),
      lastHeartbeatAtMs: e.clock.nowMs(),
      healthy: true,
      gpus: [{ index: 0, model: 'V100', memoryMiB: 16384 }],
    });
    await reconcile(e.ports, { planner: planSimple, policy: DEFAULT_POLICY });
    const placed = (await e.jobs.get('nlp.a'))!;
    await e.jobs.update({ ...placed, state: 'running', version: placed.version + 1 }, placed.version);
    const cp = {
      jobId: 'nlp.a',
      attempt: 1,
      location: e.checkpoints.locationFor('nlp.a', 1),
      completedAtMs: e.clock.nowMs(),
      progressSec: 300,
    };
    await e.checkpoints.markComplete(cp);

    // Silent past reconcile's patience but within the agent's lease and fence: its agent may still run the job; nothing is requeued.
    e.clock.advanceBy((DEFAULT_POLICY.heartbeatTimeoutSec + 5) * 1000);
    const early = await reconcile(e.ports, { planner: planSimple, policy: DEFAULT_POLICY });
    expect(early.status === 'done' && early.lostJobsRequeued).toBe(0);
    expect(await e.jobs.get('nlp.a')).toMatchObject({ state: 'running', attempt: 1 });
    // Past the point where its agent, if alive, has fenced itself: requeued from its checkpoint.
    e.clock.advanceBy((DEFAULT_POLICY.silentRequeueSec - DEFAULT_POLICY.heartbeatTimeoutSec) * 1000);
    const out = await reconcile(e.ports, { planner: planSimple, policy: DEFAULT_POLICY });
    expect(out.status === 'done' && out.lostJobsRequeued).toBe(1);
    const job = (await e.jobs.get('nlp.a'))!;
    expect(job).toMatchObject({ state: 'pending', attempt: 2, checkpoint: cp, requeueReason: { code: 'node-lost' } });
    // A second look changes nothing: the attempt was already requeued.
    const again = await reconcile(e.ports, { planner: planSimple, policy: DEFAULT_POLICY });
    expect(again.status === 'done' && again.lostJobsRequeued).toBe(0);
  });

  it('gives up on a checkpoint its node never ends after grace, upload allowance and margin, and requeues from the newest saved', async () => {
    const e = env();
    await intake(e, { team: 'nlp', body: JSON.stringify(spec), token: 'a' });
    await e.cloud.setDesiredCapacity('v100-spot', 1);
    e.clock.advanceBy(150_000);
    e.cloud.tick();
    const [inst] = await e.cloud.listInstances();
    const gpus = [{ index: 0, model: 'V100' as const, memoryMiB: 16384 }];
    await e.nodes.register({
      instanceId: inst!.id,
      groupId: 'v100-spot',
      registeredAtMs: e.clock.nowMs(),
      lastHeartbeatAtMs: e.clock.nowMs(),
      healthy: true,
      gpus,
    });
    await reconcile(e.ports, { planner: planSimple, policy: DEFAULT_POLICY });
    const placed = (await e.jobs.get('nlp.a'))!;
    await e.jobs.update({ ...placed, state: 'running', version: placed.version + 1 }, placed.version);
    const cp = {
      jobId: 'nlp.a',
      attempt: 1,
      location: e.checkpoints.locationFor('nlp.a', 1),
      completedAtMs: e.clock.nowMs(),
      progressSec: 300,
    };
    await e.checkpoints.markComplete(cp);
    const asked = await applyJobEvent(
      e.jobs,
      'nlp.a',
      { type: 'checkpoint-requested', attempt: 1, reason: reason('interrupted', 'test') },
      e.clock.nowMs(),
    );
    expect(asked.status === 'changed' && asked.job.state).toBe('checkpointing');
    // 90 s grace (the default) + (16 GiB ÷ 500 MiB/s = 33 s, + 120 s) upload allowance + 60 s margin = 303 s; the node beats all along.
    const beat = async (sec: number) => {
      e.clock.advanceBy(sec * 1000);
      await e.nodes.heartbeat(inst!.id, e.clock.nowMs());
      return reconcile(e.ports, { planner: planSimple, policy: DEFAULT_POLICY });
    };
    await beat(300);
    expect((await e.jobs.get('nlp.a'))!.state).toBe('checkpointing');
    const out = await beat(5);
    expect(out.status === 'done' && out.lostJobsRequeued).toBe(1);
    const job = (await e.jobs.get('nlp.a'))!;
    // Requeued as attempt 2 from the saved checkpoint (the same reconcile may place it again at once).
    expect(job).toMatchObject({ attempt: 2, checkpoint: cp, requeueReason: { code: 'checkpoint-timed-out' } });
    expect(['pending', 'placed']).toContain(job.state);
    expect(job.requeueReason!.message).toMatch(/did not save the checkpoint asked for 305 s ago within 303 s/);
  });

  it('a machine its group takes away through the drain hook keeps its work until the checkpoint lands, then is let go', async () => {
    const e = createSimEnvironment({
      startMs: T0,
      seed: 1,
      teams: ['nlp'],
      teamTags: defaultTeamTags(['nlp']),
      bootSec: 120,
      groups: [
        {
          id: 'v100-spot',
          instanceTypes: ['p3.2xlarge'],
          zones: ['us-west-2a'],
          capacityType: 'spot',
          minSize: 0,
          maxSize: 5,
          terminateHook: { name: 'gpu-fleet-drain', timeoutSec: 300 },
        },
      ],
    });
    const events: { instanceId: string; token: string }[] = [];
    e.cloud.onHookStarted = (inst, hook) => events.push({ instanceId: inst.id, token: hook.token });
    await intake(e, { team: 'nlp', body: JSON.stringify(spec), token: 'a' });
    await e.cloud.setDesiredCapacity('v100-spot', 1);
    e.clock.advanceBy(150_000);
    e.cloud.tick();
    const [inst] = await e.cloud.listInstances();
    const gpus = [{ index: 0, model: 'V100' as const, memoryMiB: 16384 }];
    const beat = () => e.nodes.heartbeat(inst!.id, e.clock.nowMs());
    await e.nodes.register({
      instanceId: inst!.id,
      groupId: 'v100-spot',
      registeredAtMs: e.clock.nowMs(),
      lastHeartbeatAtMs: e.clock.nowMs(),
      healthy: true,
      gpus,
    });
    await reconcile(e.ports, { planner: planSimple, policy: DEFAULT_POLICY });
    await applyJobEvent(e.jobs, 'nlp.a', { type: 'start', attempt: 1 }, e.clock.nowMs());
    // A health-check replacement: the group takes the machine away itself; its hook holds it. Its lifecycle event is lost.
    e.cloud.replace(inst!.id, 'failed its EC2 health check');
    expect(events.map((x) => x.instanceId)).toEqual([inst!.id]);
    expect((await e.cloud.describeInstance(inst!.id))!.state).toBe('terminating-wait');
    e.clock.advanceBy(20_000);
    await beat();
    const first = await reconcile(e.ports, { planner: planSimple, policy: DEFAULT_POLICY });
    // Not lost: drained as the event would have (checkpoint asked for), the job is still attempt 1 on its machine.
    expect(first.status === 'done' && first.lostJobsRequeued).toBe(0);
    expect(await e.jobs.get('nlp.a')).toMatchObject({ state: 'checkpointing', attempt: 1 });
    expect((await e.nodes.get(inst!.id))!.draining).toMatchObject({ lifecycle: { hookName: 'gpu-fleet-drain' } });
    e.clock.advanceBy(40_000);
    await beat();
    await reconcile(e.ports, { planner: planSimple, policy: DEFAULT_POLICY });
    expect(await e.jobs.get('nlp.a')).toMatchObject({ state: 'checkpointing', attempt: 1 });
    // The agent saves the checkpoint and requeues: the next reconcile lets the machine go at once, long before the hook's 300 s.
    const cp = {
      jobId: 'nlp.a',
      attempt: 1,
      location: e.checkpoints.locationFor('nlp.a', 1),
      completedAtMs: e.clock.nowMs(),
      progressSec: 60,
    };
    await e.checkpoints.markComplete(cp);
    await requeueAttempt(e.ports, { jobId: 'nlp.a', attempt: 1, reason: reason('interrupted', 'checkpointed'), nowMs: e.clock.nowMs() });
    e.clock.advanceBy(15_000);
    await reconcile(e.ports, { planner: planSimple, policy: DEFAULT_POLICY });
    expect(e.cloud.calls.filter((c) => c.method === 'completeLifecycleAction')).toEqual([
      { method: 'completeLifecycleAction', args: [{ groupId: 'v100-spot', instanceId: inst!.id, hookName: 'gpu-fleet-drain' }] },
    ]);
    expect((await e.cloud.describeInstance(inst!.id))!.state).toBe('terminated');
    expect(await e.jobs.get('nlp.a')).toMatchObject({ attempt: 2, checkpoint: cp });
  });

  it('a cloud whose calls fail is left out: the rest is planned and applied, its machines and jobs kept, and the decision says since when', async () => {
    const e = env();
    let gcpDown = true;
    const gcp: NodeGroupProvider = {
      cloud: 'gcp',
      listGroups: async () => {
        if (gcpDown)
          throw new CloudError('unavailable', 'compute.googleapis.com: 503 Service Unavailable', {
            operation: 'list groups',
            cloud: 'gcp',
          });
        return [];
      },
      listInstances: async () => {
        if (gcpDown)
          throw new CloudError('unavailable', 'compute.googleapis.com: 503 Service Unavailable', {
            operation: 'list instances',
            cloud: 'gcp',
          });
        return [];
      },
      describeInstance: async () => undefined,
      setDesiredCapacity: async () => {},
      terminateInstance: async () => ({ alreadyGone: true }),
      setScaleInProtection: async () => {},
      launchFailures: async () => [],
      completeLifecycleAction: async () => {},
    };
    const ports = { ...e.ports, providers: [...e.ports.providers, gcp] };
    await intake(e, { team: 'nlp', body: JSON.stringify(spec), token: 'a' });
    await intake(e, {
      team: 'nlp',
      body: JSON.stringify({ ...spec, gpu: { kind: 'whole', count: 1, models: ['A100-80GB'] } }),
      token: 'big',
    });
    // A job running on a GCP machine the view cannot see now: its agent still beats.
    await e.nodes.register({
      instanceId: 'gce-1',
      groupId: 'gcp-a100-spot',
      registeredAtMs: T0,
      lastHeartbeatAtMs: T0,
      healthy: true,
      gpus: [],
    });
    await intake(e, { team: 'nlp', body: JSON.stringify(spec), token: 'on-gcp' });
    await applyJobEvent(
      e.jobs,
      'nlp.on-gcp',
      { type: 'place', attempt: 1, placement: { capacityType: 'spot', nodes: [{ nodeId: 'gce-1', gpuIndices: [0] }] } },
      T0,
    );
    await applyJobEvent(e.jobs, 'nlp.on-gcp', { type: 'start', attempt: 1 }, T0);

    const first = await reconcile(ports, { planner: planSimple, policy: DEFAULT_POLICY });
    if (first.status !== 'done') throw new Error('reconcile did not run');
    expect(first.decision.degraded).toEqual([
      { cloud: 'gcp', sinceMs: T0, error: 'compute.googleapis.com: 503 Service Unavailable', code: 'unavailable' },
    ]);
    expect(first.decision.plan.actions).toContainEqual(expect.objectContaining({ kind: 'scale-up', groupId: 'v100-spot' }));
    expect(first.decision.applied).toBeGreaterThan(0);
    expect(first.decision.plan.waiting.find((w) => w.jobId === 'nlp.big')?.reason).toMatchObject({
      code: 'provider-degraded',
      message: expect.stringMatching(/gcp is left out \(its calls fail: compute.googleapis.com: 503/),
    });
    expect(await e.jobs.get('nlp.on-gcp')).toMatchObject({ state: 'running', attempt: 1 });
    expect(await e.nodes.get('gce-1')).toBeDefined();

    e.clock.advanceBy(60_000);
    await e.nodes.heartbeat('gce-1', e.clock.nowMs());
    const second = await reconcile(ports, { planner: planSimple, policy: DEFAULT_POLICY });
    expect(second.status === 'done' && second.decision.degraded?.[0]?.sinceMs).toBe(T0);
    gcpDown = false;
    e.clock.advanceBy(60_000);
    const back = await reconcile(ports, { planner: planSimple, policy: DEFAULT_POLICY });
    expect(back.status === 'done' && back.decision.degraded).toBeUndefined();
  });

  it('plans without acting in a dry run, and records the decision', async () => {
    const e = env();
    await intake(e, { team: 'nlp', body: JSON.stringify(spec), token: 'a' });
    const out = await reconcile(e.ports, { planner: planSimple, policy: DEFAULT_POLICY, dryRun: true });
    expect(out.status === 'done' && out.decision).toMatchObject({
      dryRun: true,
      applied: 0,
      plan: { actions: [expect.objectContaining({ kind: 'scale-up' })] },
    });
    expect((await e.cloud.listGroups())[0]!.desiredCapacity).toBe(0);
    expect(await e.decisions.recent(1)).toHaveLength(1);
  });

  it('lets only one reconciler act at a time', async () => {
    const e = env();
    await e.lease.acquire('reconcile', 'someone-else', e.clock.nowMs(), 60_000);
    expect(await reconcile(e.ports, { planner: planSimple, policy: DEFAULT_POLICY, holder: 'me' })).toEqual({
      status: 'skipped',
      reason: 'another reconciler holds the lease',
    });
  });
});

describe('spend: every second of every machine, to the team that held it then', () => {
  /** One V100 machine booted and registered, job `nlp.a` placed on it; returns the machine and its price. */
  async function withPlacedJob() {
    const e = env();
    await intake(e, { team: 'nlp', body: JSON.stringify(spec), token: 'a' });
    const run = () => reconcile(e.ports, { planner: planSimple, policy: DEFAULT_POLICY });
    await run(); // scale-up
    e.clock.advanceBy(150_000);
    e.cloud.tick();
    const [inst] = e.cloud.allInstances();
    await e.nodes.register({
      instanceId: inst!.id,
      groupId: 'v100-spot',
      registeredAtMs: e.clock.nowMs(),
      lastHeartbeatAtMs: e.clock.nowMs(),
      healthy: true,
      gpus: [{ index: 0, model: 'V100', memoryMiB: 16384 }],
    });
    await run(); // places nlp.a
    expect((await e.jobs.get('nlp.a'))?.state).toBe('placed');
    const price = e.priceOf(inst!.offering)!.price;
    const spent = async (team: string) =>
      (await e.ledger.list()).filter((r) => r.team === team && !r.period.startsWith('day:')).reduce((a, r) => a + r.spentMicroUsd, 0);
    return { e, run, inst: inst!, price, spent };
  }

  it('charges a job that starts and ends between two reconciles to its team, from its placement to its end', async () => {
    const { e, run, inst, price, spent } = await withPlacedJob();
    const placedAtMs = (await e.jobs.get('nlp.a'))!.placedAtMs!;
    e.clock.advanceBy(10_000);
    await applyJobEvent(e.jobs, 'nlp.a', { type: 'start', attempt: 1 }, e.clock.nowMs());
    e.clock.advanceBy(30_000);
    await applyJobEvent(e.jobs, 'nlp.a', { type: 'succeed', attempt: 1 }, e.clock.nowMs());
    e.clock.advanceBy(20_000);
    await e.nodes.heartbeat(inst.id, e.clock.nowMs());
    await run(); // nothing of nlp.a is running now
    // Its one GPU of the one-GPU machine for the 40 s it held it; the rest of the machine's time is idle.
    expect(await spent('nlp')).toBe(costForDuration(price, 40_000));
    expect((await spent('nlp')) + (await spent(IDLE_TEAM))).toBe(costForDuration(price, e.clock.nowMs() - inst.launchedAtMs));
    expect(placedAtMs).toBeGreaterThan(inst.launchedAtMs);
  });

  it('charges a machine that a resumed plan scales in, up to its end, though the plan ran before the spend was counted', async () => {
    const { e, run, inst, price, spent } = await withPlacedJob();
    await applyJobEvent(e.jobs, 'nlp.a', { type: 'start', attempt: 1 }, e.clock.nowMs());
    await applyJobEvent(e.jobs, 'nlp.a', { type: 'succeed', attempt: 1 }, e.clock.nowMs());
    // A reconcile that crashed left a plan with the idle machine's scale-in; the next one resumes it first.
    e.clock.advanceBy(60_000);
    await e.nodes.heartbeat(inst.id, e.clock.nowMs());
    const action = { kind: 'scale-in' as const, groupId: 'v100-spot', instanceId: inst.id, reason: reason('scale-in-idle', 'idle') };
    await e.ports.journal.start('decision-crashed', e.clock.nowMs() - 30_000, [action]);
    await run();
    const endedAtMs = e.clock.nowMs();
    expect(e.cloud.allInstances().find((i) => i.id === inst.id)?.endedAtMs).toBe(endedAtMs);
    const machines = e.cloud.allInstances().map((i) => costForDuration(price, (i.endedAtMs ?? e.clock.nowMs()) - i.launchedAtMs));
    expect((await spent('nlp')) + (await spent(IDLE_TEAM))).toBe(machines.reduce((a, b) => a + b, 0));
  });

  it("charges a machine's minutes after the last reconcile that listed it, up to the end its cloud reported", async () => {
    const { e, run, inst, price, spent } = await withPlacedJob();
    expect((await e.nodes.get(inst.id))?.meter).toMatchObject({
      launchedAtMs: inst.launchedAtMs,
      priceMicroUsdPerHour: price,
      gpuCount: 1,
    });
    await applyJobEvent(e.jobs, 'nlp.a', { type: 'start', attempt: 1 }, e.clock.nowMs());
    e.clock.advanceBy(25_000);
    e.cloud.reclaim(inst.id, 'spot interruption');
    const endedAtMs = e.clock.nowMs();
    const notice = { kind: 'state-change', eventId: 'evt-1', instanceId: inst.id, atMs: endedAtMs, state: 'terminated' } as const;
    await handleNotice(e.ports, notice, DEFAULT_POLICY);
    e.clock.advanceBy(35_000);
    e.cloud.tick();
    await run(); // the machine is gone, its record forgotten once counted
    e.clock.advanceBy(60_000);
    await run();
    expect(await spent('nlp')).toBe(costForDuration(price, endedAtMs - (await e.jobs.get('nlp.a'))!.heldAttempts![0]!.fromMs));
    // Every machine to the second: the one that ended, and the replacement the requeued job asked for (idle so far).
    const machines = e.cloud.allInstances().map((i) => costForDuration(price, (i.endedAtMs ?? e.clock.nowMs()) - i.launchedAtMs));
    expect(machines).toHaveLength(2);
    expect((await spent('nlp')) + (await spent(IDLE_TEAM))).toBe(machines[0]! + machines[1]!);
    expect(await e.nodes.get(inst.id)).toBeUndefined();
  });
});

describe('noting spot exposure', () => {
  it('notes a machine at its first reconcile, then once per slot of its life, whatever the minute it was launched in', () => {
    const launched = T0 + 17_000;
    const due = Array.from({ length: 40 }, (_, k) => T0 + 30_000 + k * 60_000).filter((t) => poolNoteDue(launched, t, 60_000));
    expect(due.map((t) => Math.round((t - launched) / 1000))).toEqual([13, 613, 1213, 1813]);
    expect(POOL_NOTE_EVERY_MS).toBe(600_000);
  });
});

describe('applying a plan', () => {
  it('writes holds a bounded number at a time, after the capacity actions, and records each one', async () => {
    const e = env();
    for (let i = 0; i < 40; i++) await intake(e, { team: 'nlp', body: JSON.stringify(spec), token: `j${i}` });
    let inFlight = 0;
    let most = 0;
    const jobs = new Proxy(e.jobs, {
      get(target, prop, receiver) {
        const v = Reflect.get(target, prop, receiver) as unknown;
        if (prop !== 'update' || typeof v !== 'function')
          return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
        return async (...args: unknown[]) => {
          inFlight++;
          most = Math.max(most, inFlight);
          await new Promise((r) => setTimeout(r, 2));
          try {
            return await (v as (...a: unknown[]) => unknown).apply(target, args);
          } finally {
            inFlight--;
          }
        };
      },
    });
    const actions = [
      {
        kind: 'scale-up' as const,
        groupId: 'v100-spot',
        fromDesired: 0,
        toDesired: 1,
        expected: [],
        reason: reason('scale-up-for-pending', 'x'),
      },
      ...Array.from({ length: 40 }, (_, i) => ({ kind: 'hold' as const, jobId: `nlp.j${i}`, reason: reason('budget-hold', 'held') })),
    ];
    const out = await applyPlan({ ...e.ports, jobs }, actions, new Map([['v100-spot', e.ports.providers[0]!]]), e.clock.nowMs());
    expect(out).toEqual({ applied: 41, errors: [] });
    expect(most).toBeGreaterThan(1);
    expect(most).toBeLessThanOrEqual(JOB_WRITE_CONCURRENCY);
    expect((await e.jobs.listByState(['pending'])).every((j) => j.hold?.code === 'budget-hold')).toBe(true);
    expect(e.cloud.calls[0]).toEqual({ method: 'setDesiredCapacity', args: ['v100-spot', 1] });
  });
  it('applies placements concurrently, never two at once on the same node, and each lands', async () => {
    const e = env();
    await registerV100(e, ['i-a', 'i-b']);
    for (let i = 0; i < 6; i++) await intake(e, { team: 'nlp', body: JSON.stringify(spec), token: `p${i}` });
    const inFlight = new Map<string, number>();
    let mostOnOneNode = 0;
    let mostOverall = 0;
    const nodes = onAssign(e.nodes, async (assign, nodeId, jobId, attempt) => {
      inFlight.set(nodeId, (inFlight.get(nodeId) ?? 0) + 1);
      mostOnOneNode = Math.max(mostOnOneNode, inFlight.get(nodeId)!);
      mostOverall = Math.max(
        mostOverall,
        [...inFlight.values()].reduce((a, b) => a + b, 0),
      );
      await new Promise((r) => setTimeout(r, 2));
      try {
        return await assign(nodeId, jobId, attempt);
      } finally {
        inFlight.set(nodeId, inFlight.get(nodeId)! - 1);
      }
    });
    const actions = Array.from({ length: 6 }, (_, i) => ({
      kind: 'place' as const,
      jobId: `nlp.p${i}`,
      attempt: 1,
      placement: { nodes: [{ nodeId: i < 3 ? 'i-a' : 'i-b', gpuIndices: [0] }], capacityType: 'spot' as const },
      reason: reason('placed-on-free-capacity', 'x'),
    }));
    // Interleaved: a, b, a, b, ...
    const order = [0, 3, 1, 4, 2, 5].map((k) => actions[k]!);
    expect(await applyPlan({ ...e.ports, nodes }, order, new Map(), e.clock.nowMs())).toEqual({ applied: 6, errors: [] });
    expect(mostOnOneNode).toBe(1);
    expect(mostOverall).toBe(2);
    expect((await e.jobs.listByState(['placed'])).map((j) => j.id).sort()).toEqual([
      'nlp.p0',
      'nlp.p1',
      'nlp.p2',
      'nlp.p3',
      'nlp.p4',
      'nlp.p5',
    ]);
    expect(Object.keys((await e.nodes.get('i-a'))!.assigned ?? {}).sort()).toEqual(['nlp.p0', 'nlp.p1', 'nlp.p2']);
  });

  it('a failure in a wave gives up only once every write of the wave has ended: none lands after the apply stopped', async () => {
    const e = env();
    await registerV100(e, ['i-a', 'i-b', 'i-c']);
    for (let i = 0; i < 3; i++) await intake(e, { team: 'nlp', body: JSON.stringify(spec), token: `w${i}` });
    const landed: string[] = [];
    // The two other nodes' work-list writes are slow; the first placement's journal entry fails (the function is being stopped).
    const nodes = onAssign(e.nodes, async (assign, nodeId, jobId, attempt) => {
      if (nodeId !== 'i-a') await new Promise((r) => setTimeout(r, 30));
      const out = await assign(nodeId, jobId, attempt);
      landed.push(jobId);
      return out;
    });
    const actions = ['i-a', 'i-b', 'i-c'].map((nodeId, i) => ({
      kind: 'place' as const,
      jobId: `nlp.w${i}`,
      attempt: 1,
      placement: { nodes: [{ nodeId, gpuIndices: [0] }], capacityType: 'spot' as const },
      reason: reason('placed-on-free-capacity', 'x'),
    }));
    const journal = {
      ...e.ports.journal,
      done: async (_planId: string, index: number) => {
        if (index === 0) throw new Error('the store is gone');
      },
    };
    await expect(applyPlan({ ...e.ports, nodes }, actions, new Map(), e.clock.nowMs(), { journal, planId: 'p' })).rejects.toThrow(
      'the store is gone',
    );
    const atStop = [...landed];
    await new Promise((r) => setTimeout(r, 80));
    expect(atStop.sort()).toEqual(['nlp.w0', 'nlp.w1', 'nlp.w2']);
    expect(landed).toHaveLength(3);
  });
});
