import type { SimGroupConfig } from '../../cloud/sim/sim-cloud.ts';
import { describe, expect, it } from 'vitest';
import { completeDrainedLifecycles, handleNotice, type NodeNotice } from '../../core/services/interruption.ts';
import { requeueAttempt } from '../../core/services/requeue.ts';
import { reason } from '../../core/reason.ts';
import { permutations, sharedEventNotices } from '../support/shared-events.ts';
import { DEFAULT_POLICY } from '../../core/snapshot.ts';
import { buildSnapshot, readWorld } from '../../core/services/snapshot-reader.ts';
import { survival } from '../../core/spot-model.ts';
import { applyJobEvent } from '../../core/services/job-updates.ts';
import { intake } from '../../core/services/intake.ts';
import { defaultTeamTags } from '../../cloud/sim/defaults.ts';
import { createSimEnvironment } from '../../cloud/sim/environment.ts';
import { nlpWorld, T0 } from '../builders.ts';

const spec = (checkpoint: boolean) =>
  JSON.stringify({
    image: 'pytorch/pytorch:2.3.0',
    command: ['python', 'train.py'],
    gpu: { kind: 'whole', count: 1, models: ['V100'] },
    ...(checkpoint ? { checkpoint: { intervalSec: 600 } } : {}),
  });

/** A spot machine, registered, with jobs running on it. */
async function world(
  jobs: { token: string; checkpoint: boolean }[] = [
    { token: 'a', checkpoint: true },
    { token: 'b', checkpoint: false },
  ],
) {
  const e = nlpWorld({
    groups: [{ id: 'v100-spot', instanceTypes: ['p3.8xlarge'], zones: ['us-west-2a'], capacityType: 'spot', minSize: 0, maxSize: 5 }],
  });
  await e.cloud.setDesiredCapacity('v100-spot', 1);
  e.clock.advanceBy(120_000);
  e.cloud.tick();
  const [inst] = await e.cloud.listInstances();
  await e.nodes.register({
    instanceId: inst!.id,
    groupId: inst!.groupId,
    registeredAtMs: e.clock.nowMs(),
    lastHeartbeatAtMs: e.clock.nowMs(),
    healthy: true,
    gpus: [0, 1, 2, 3].map((index) => ({ index, model: 'V100' as const, memoryMiB: 16_384 })),
  });
  for (const [i, j] of jobs.entries()) {
    await intake(e, { team: 'nlp', body: spec(j.checkpoint), token: j.token });
    await applyJobEvent(
      e.jobs,
      `nlp.${j.token}`,
      { type: 'place', attempt: 1, placement: { nodes: [{ nodeId: inst!.id, gpuIndices: [i] }], capacityType: 'spot' } },
      e.clock.nowMs(),
    );
    await applyJobEvent(e.jobs, `nlp.${j.token}`, { type: 'start', attempt: 1 }, e.clock.nowMs());
  }
  return { e, instanceId: inst!.id };
}

const warning = (instanceId: string, atMs: number, id = 'evt-1'): NodeNotice => ({
  kind: 'interruption-warning',
  eventId: id,
  instanceId,
  atMs,
  deadlineMs: atMs + 120_000,
});
const terminated = (instanceId: string, atMs: number, id = 'evt-2'): NodeNotice => ({
  kind: 'state-change',
  eventId: id,
  instanceId,
  atMs,
  state: 'terminated',
});

describe('interruption service', () => {
  it('drains the machine, asks checkpointable jobs to checkpoint, records the interruption and asks for a reconcile', async () => {
    const { e, instanceId } = await world();
    const out = await handleNotice(e.ports, warning(instanceId, e.clock.nowMs()), DEFAULT_POLICY);
    expect(out).toMatchObject({ status: 'handled', checkpointsRequested: ['nlp.a'], requeued: [], reconcileSoon: true });
    expect((await e.jobs.get('nlp.a'))!.state).toBe('checkpointing');
    expect((await e.jobs.get('nlp.b'))!.state).toBe('running'); // cannot checkpoint: runs until the machine goes
    expect((await e.nodes.get(instanceId))!.draining).toMatchObject({
      reason: 'spot interruption warning',
      deadlineMs: e.clock.nowMs() + 120_000 - DEFAULT_POLICY.noticeMarginSec * 1000,
    });
    const stats = await e.pools.stats(0);
    expect(stats.get('aws/us-west-2a/p3.8xlarge/spot')).toMatchObject({ interruptions: 1, lastInterruptedAtMs: e.clock.nowMs() });
    // The next reconcile's spot model has seen the pool take the machine back: a launch there now is read as one just back.
    const snap = await buildSnapshot(e.ports, await readWorld(e.ports), { nowMs: e.clock.nowMs() + 60_000, policy: DEFAULT_POLICY });
    expect(snap.spotModel?.pools['aws/us-west-2a/p3.8xlarge/spot']).toMatchObject({ up: false, downSinceMs: e.clock.nowMs() });
    expect(survival(snap.spotModel!, 'aws/us-west-2a/p3.8xlarge/spot', e.clock.nowMs() + 60_000, 3600).why).toMatch(/seen down 1 min ago/);
  });

  it('requeues every job exactly once when the machine is terminated, whether or not the warning came first', async () => {
    const { e, instanceId } = await world();
    const out = await handleNotice(e.ports, terminated(instanceId, e.clock.nowMs()), DEFAULT_POLICY);
    expect(out).toMatchObject({ status: 'handled', requeued: ['nlp.a', 'nlp.b'] });
    // The warning arrives late, and the terminated event again: nothing changes.
    await handleNotice(e.ports, warning(instanceId, e.clock.nowMs() - 120_000), DEFAULT_POLICY);
    const again = await handleNotice(e.ports, terminated(instanceId, e.clock.nowMs()), DEFAULT_POLICY);
    expect(again).toMatchObject({ requeued: [] });
    for (const id of ['nlp.a', 'nlp.b']) expect(await e.jobs.get(id)).toMatchObject({ state: 'pending', attempt: 2, interruptions: 1 });
  });

  it('handles the same warning delivered three times at once as one', async () => {
    const { e, instanceId } = await world();
    const outs = await Promise.all([1, 2, 3].map(() => handleNotice(e.ports, warning(instanceId, e.clock.nowMs()), DEFAULT_POLICY)));
    expect(outs.flatMap((o) => (o.status === 'handled' ? o.checkpointsRequested : []))).toEqual(['nlp.a']);
    expect((await e.pools.stats(0)).get('aws/us-west-2a/p3.8xlarge/spot')!.interruptions).toBe(1);
  });

  it('ignores machines gpu-fleet does not manage, and states that need nothing', async () => {
    const { e, instanceId } = await world();
    expect(await handleNotice(e.ports, warning('i-0000000000000dead', e.clock.nowMs()), DEFAULT_POLICY)).toEqual({
      status: 'ignored',
      why: 'instance i-0000000000000dead is not in a node group gpu-fleet manages',
    });
    expect(
      await handleNotice(
        e.ports,
        { kind: 'state-change', eventId: 'x', instanceId, atMs: e.clock.nowMs(), state: 'running' },
        DEFAULT_POLICY,
      ),
    ).toMatchObject({ status: 'ignored' });
  });

  it('moves checkpointable work early on a rebalance recommendation, leaving the rest to finish', async () => {
    const { e, instanceId } = await world();
    const out = await handleNotice(e.ports, { kind: 'rebalance', eventId: 'r', instanceId, atMs: e.clock.nowMs() }, DEFAULT_POLICY);
    expect(out).toMatchObject({ status: 'handled', checkpointsRequested: ['nlp.a'] });
    expect((await e.nodes.get(instanceId))!.draining!.reason).toBe('rebalance recommendation');
  });

  it('completes a terminate lifecycle action at once when no work is on the machine', async () => {
    const { e, instanceId } = await world([]);
    const out = await handleNotice(
      e.ports,
      {
        kind: 'lifecycle-terminate',
        eventId: 'l',
        instanceId,
        atMs: e.clock.nowMs(),
        groupName: 'v100-spot',
        hookName: 'gpu-fleet-drain',
        token: 'tok',
        deadlineMs: e.clock.nowMs() + 300_000,
      },
      DEFAULT_POLICY,
    );
    expect(out).toMatchObject({ status: 'handled', lifecycleCompleted: true });
    expect(e.cloud.calls.filter((c) => c.method === 'completeLifecycleAction')).toEqual([
      { method: 'completeLifecycleAction', args: [{ groupId: 'v100-spot', instanceId, hookName: 'gpu-fleet-drain', token: 'tok' }] },
    ]);
  });

  it('whatever order the shared rebalance, lifecycle and warning events come in, the hook is kept and completed once the node is empty', async () => {
    for (const order of permutations([0, 1, 2])) {
      const { e, instanceId } = await world();
      const notices = sharedEventNotices(instanceId, e.clock.nowMs());
      for (const i of order) await handleNotice(e.ports, notices[i]!, DEFAULT_POLICY);
      const mark = (await e.nodes.get(instanceId))!.draining!;
      const tag = `order ${order.join(',')}`;
      expect(mark, tag).toMatchObject({
        reason: 'spot interruption warning',
        deadlineMs: e.clock.nowMs() + 60_000 + 120_000 - DEFAULT_POLICY.noticeMarginSec * 1000,
        lifecycle: { hookName: 'cluster-termination-handler', token: '0befcbdb-6ecd-498a-9ff7-ae9b54447cd6' },
      });
      expect((await e.jobs.get('nlp.a'))!.state, tag).toBe('checkpointing');
      // The work leaves (a checkpointed, b moved from scratch): the next reconcile lets the machine go.
      for (const id of ['nlp.a', 'nlp.b'])
        await requeueAttempt(e.ports, { jobId: id, attempt: 1, reason: reason('interrupted', 'test'), nowMs: e.clock.nowMs() });
      const before = e.cloud.calls.filter((c) => c.method === 'completeLifecycleAction').length;
      expect(await completeDrainedLifecycles(e.ports, await e.nodes.list(), [], e.clock.nowMs()), tag).toBe(1);
      expect(e.cloud.calls.filter((c) => c.method === 'completeLifecycleAction').slice(before), tag).toEqual([
        {
          method: 'completeLifecycleAction',
          args: [
            { groupId: 'v100-spot', instanceId, hookName: 'cluster-termination-handler', token: '0befcbdb-6ecd-498a-9ff7-ae9b54447cd6' },
          ],
        },
      ]);
    }
  });
});

/** One machine up in a spot group whose machines leave through a terminate hook of `hookTimeoutSec`. */
async function machineInHookedGroup(id: string, instanceType: string, zone: string, hookTimeoutSec: number) {
  const e = nlpWorld({
    groups: [
      {
        id,
        instanceTypes: [instanceType],
        zones: [zone],
        capacityType: 'spot',
        minSize: 0,
        maxSize: 2,
        terminateHook: { name: 'gpu-fleet-drain', timeoutSec: hookTimeoutSec },
      },
    ],
  });
  await e.cloud.setDesiredCapacity(id, 1);
  e.clock.advanceBy(120_000);
  e.cloud.tick();
  const [inst] = await e.cloud.listInstances();
  return { e, inst };
}

describe('a terminate hook holds a machine while its checkpoints are written and uploaded', () => {
  it('heartbeats the hook past its 300 s timeout while a 640 GiB checkpoint uploads, then completes it once the machine is empty', async () => {
    const { e, inst } = await machineInHookedGroup('a100-spot', 'p4de.24xlarge', 'us-east-1a', 300);
    const gpus = [0, 1, 2, 3, 4, 5, 6, 7].map((index) => ({ index, model: 'A100-80GB' as const, memoryMiB: 81_920 }));
    await e.nodes.register({ instanceId: inst!.id, groupId: 'a100-spot', registeredAtMs: T0, lastHeartbeatAtMs: T0, healthy: true, gpus });
    const body = JSON.stringify({
      image: 'pytorch/pytorch:2.3.0',
      command: ['python', 'train.py'],
      gpu: { kind: 'whole', count: 8, models: ['A100-80GB'] },
      checkpoint: { intervalSec: 1800, gracePeriodSec: 120 },
    });
    await intake(e, { team: 'nlp', body, token: 'big' });
    await applyJobEvent(
      e.jobs,
      'nlp.big',
      {
        type: 'place',
        attempt: 1,
        placement: { nodes: [{ nodeId: inst!.id, gpuIndices: [0, 1, 2, 3, 4, 5, 6, 7] }], capacityType: 'spot' },
      },
      e.clock.nowMs(),
    );
    await applyJobEvent(e.jobs, 'nlp.big', { type: 'start', attempt: 1 }, e.clock.nowMs());
    // The group replaces the machine (a health check): it waits in the hook, 300 s unless told more.
    e.cloud.replace(inst!.id, 'health-check replacement');
    const startedMs = e.clock.nowMs();
    await handleNotice(
      e.ports,
      {
        kind: 'lifecycle-terminate',
        eventId: 'hook-1',
        instanceId: inst!.id,
        atMs: startedMs,
        groupName: 'a100-spot',
        hookName: 'gpu-fleet-drain',
        deadlineMs: startedMs + 300_000,
      },
      DEFAULT_POLICY,
    );
    // Held as long as the checkpoint may take: 120 s grace, 640 GiB at 500 MiB/s plus margins, less the notice margin.
    const mark = (await e.nodes.get(inst!.id))!.draining!;
    expect(mark.deadlineMs - startedMs).toBeGreaterThan(1_400_000);
    expect(mark.deadlineMs - startedMs).toBeLessThan(100 * 300_000);
    // Reconcile each minute while the job is still checkpointing: a heartbeat each time, and the machine stays.
    for (let minute = 1; minute <= 20; minute++) {
      e.clock.advanceBy(60_000);
      e.cloud.tick();
      const active = [(await e.jobs.get('nlp.big'))!];
      await completeDrainedLifecycles(e.ports, await e.nodes.list(), active, e.clock.nowMs());
    }
    expect(e.cloud.calls.filter((c) => c.method === 'recordLifecycleHeartbeat')).toHaveLength(20);
    expect((await e.cloud.listInstances()).find((i) => i.id === inst!.id)?.state).toBe('terminating-wait');
    // The checkpoint is saved and the job moves: the next reconcile completes the action and the machine goes.
    await requeueAttempt(e.ports, { jobId: 'nlp.big', attempt: 1, reason: reason('interrupted', 'test'), nowMs: e.clock.nowMs() });
    expect(await completeDrainedLifecycles(e.ports, await e.nodes.list(), [], e.clock.nowMs())).toBe(1);
    e.cloud.tick();
    expect((await e.cloud.listInstances()).find((i) => i.id === inst!.id)?.state ?? 'gone').not.toBe('terminating-wait');
  });

  it('the simulated group honours heartbeats as Auto Scaling does: another timeout from now, never past 100 timeouts', async () => {
    const { e, inst } = await machineInHookedGroup('v100-spot', 'p3.8xlarge', 'us-west-2a', 60);
    e.cloud.replace(inst!.id, 'instance refresh');
    const state = async () => (await e.cloud.listInstances()).find((i) => i.id === inst!.id)?.state ?? 'gone';
    const beat = { groupId: 'v100-spot', instanceId: inst!.id, hookName: 'gpu-fleet-drain' };
    // A heartbeat every 50 s keeps it for 100 × 60 s from when it entered the hook, and no longer.
    for (let t = 50; t < 6000; t += 50) {
      e.clock.advanceBy(50_000);
      e.cloud.tick();
      expect(await state(), `at ${t} s`).toBe('terminating-wait');
      await e.cloud.recordLifecycleHeartbeat(beat);
    }
    e.clock.advanceBy(50_000);
    e.cloud.tick();
    expect(await state()).not.toBe('terminating-wait');
    // For a machine no hook holds any more, a heartbeat changes nothing.
    await expect(e.cloud.recordLifecycleHeartbeat(beat)).resolves.toBeUndefined();
  });
});

/** A group of two p3.8xlarge launched into the Capacity Block cr-0b10c0000000000a1. */
const BLOCK_GROUP: SimGroupConfig = {
  id: 'v100-block',
  instanceTypes: ['p3.8xlarge'],
  zones: ['us-west-2a'],
  capacityType: 'reserved',
  reservationId: 'cr-0b10c0000000000a1',
  minSize: 0,
  maxSize: 2,
};

describe('interruption service: reservations', () => {
  it('a reservation ending drains every machine in it, checkpoints what can, and a repeat changes nothing', async () => {
    const H = 3_600_000;
    const e = nlpWorld({
      groups: [
        BLOCK_GROUP,
        { id: 'v100-spot', instanceTypes: ['p3.8xlarge'], zones: ['us-west-2a'], capacityType: 'spot', minSize: 0, maxSize: 5 },
      ],
      reservations: [
        {
          id: 'cr-0b10c0000000000a1',
          zone: 'us-west-2a',
          instanceType: 'p3.8xlarge',
          kind: 'capacity-block',
          count: 2,
          startMs: T0,
          endMs: T0 + 4 * H,
          priceMicroUsdPerHour: 6_000_000,
        },
      ],
    });
    await e.cloud.setDesiredCapacity('v100-block', 2);
    await e.cloud.setDesiredCapacity('v100-spot', 1);
    e.clock.advanceBy(120_000);
    e.cloud.tick();
    const all = await e.cloud.listInstances();
    const inBlock = all.filter((i) => i.reservationId === 'cr-0b10c0000000000a1');
    expect(inBlock.map((i) => i.capacityType)).toEqual(['reserved', 'reserved']);
    for (const i of all)
      await e.nodes.register({
        instanceId: i.id,
        groupId: i.groupId,
        registeredAtMs: e.clock.nowMs(),
        lastHeartbeatAtMs: e.clock.nowMs(),
        healthy: true,
        gpus: [0, 1, 2, 3].map((index) => ({ index, model: 'V100' as const, memoryMiB: 16_384 })),
      });
    await intake(e, { team: 'nlp', body: spec(true), token: 'on-block' });
    await applyJobEvent(
      e.jobs,
      'nlp.on-block',
      {
        type: 'place',
        attempt: 1,
        placement: {
          nodes: [{ nodeId: inBlock[0]!.id, gpuIndices: [0] }],
          capacityType: 'reserved',
          reservationId: 'cr-0b10c0000000000a1',
        },
      },
      e.clock.nowMs(),
    );
    await applyJobEvent(e.jobs, 'nlp.on-block', { type: 'start', attempt: 1 }, e.clock.nowMs());
    const notice: NodeNotice = {
      kind: 'reservation-ending',
      eventId: 'cr-0b10c0000000000a1-approaching-expiry',
      reservationId: 'cr-0b10c0000000000a1',
      atMs: e.clock.nowMs(),
      terminationMs: T0 + 4 * H - 30 * 60_000,
    };
    const out = await handleNotice(e.ports, notice, DEFAULT_POLICY);
    expect(out).toMatchObject({ status: 'handled', checkpointsRequested: ['nlp.on-block'], reconcileSoon: true });
    for (const i of inBlock) expect((await e.nodes.get(i.id))!.draining).toMatchObject({ reason: 'reservation cr-0b10c0000000000a1 ends' });
    // The spot machine is not in the reservation: untouched; and a block ending is no spot interruption.
    const spot = all.find((i) => i.capacityType === 'spot')!;
    expect((await e.nodes.get(spot.id))!.draining).toBeUndefined();
    expect([...(await e.pools.stats(0)).values()].every((p) => p.interruptions === 0)).toBe(true);
    const again = await handleNotice(e.ports, notice, DEFAULT_POLICY);
    expect(again).toMatchObject({ status: 'handled', checkpointsRequested: [] });
    expect((await e.jobs.get('nlp.on-block'))!.state).toBe('checkpointing');
  });

  it('a reservation delivered asks for a plan now, when a group launches into it', async () => {
    const e = createSimEnvironment({
      startMs: T0,
      seed: 1,
      teams: ['nlp'],
      teamTags: defaultTeamTags(['nlp']),
      groups: [BLOCK_GROUP],
    });
    const delivered = (reservationId: string) =>
      handleNotice(
        e.ports,
        { kind: 'reservation-delivered', eventId: `${reservationId}-delivered`, reservationId, atMs: T0 },
        DEFAULT_POLICY,
      );
    expect(await delivered('cr-0b10c0000000000a1')).toMatchObject({ status: 'handled', reconcileSoon: true });
    expect(await delivered('cr-0ffff000000000000')).toEqual({
      status: 'ignored',
      why: 'reservation cr-0ffff000000000000 is not one a node group of gpu-fleet launches into',
    });
  });
});
