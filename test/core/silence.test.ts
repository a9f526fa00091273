import { describe, expect, it } from 'vitest';
import { correlatedSilence, type Instance, type NodeRecord } from '../../core/fleet.ts';
import { plan } from '../../core/planner/planner.ts';
import { applyJobEvent } from '../../core/services/job-updates.ts';
import { intake } from '../../core/services/intake.ts';
import { reconcile } from '../../core/reconcile/reconcile.ts';
import { DEFAULT_POLICY } from '../../core/snapshot.ts';
import { nlpWorld, T0 } from '../builders.ts';

const machine = (id: string, zone: string, lastHeartbeatAtMs: number): { instance: Instance; record: NodeRecord } => ({
  instance: {
    id,
    groupId: 'g',
    cloud: 'aws',
    region: 'us-west-2',
    zone,
    instanceType: 'p3.2xlarge',
    capacityType: 'spot',
    state: 'running',
    launchedAtMs: T0 - 3_600_000,
    scaleInProtected: false,
  },
  record: { instanceId: id, groupId: 'g', registeredAtMs: T0 - 3_600_000, lastHeartbeatAtMs, gpus: [], healthy: true },
});

describe('correlated silence: machines that fall silent together are the control path’s fault', () => {
  const now = T0 + 600_000;
  it('judges a zone where most running machines fell silent within the window; not one alone, a small zone, or silences far apart', () => {
    const together = [0, 1, 2].map((i) => machine(`i-a${i}`, 'us-west-2a', now - 200_000 + i * 10_000));
    const zoneA = [...together, machine('i-a3', 'us-west-2a', now - 5_000)];
    const zoneB = [
      machine('i-b0', 'us-west-2b', now - 200_000),
      machine('i-b1', 'us-west-2b', now - 5_000),
      machine('i-b2', 'us-west-2b', now - 5_000),
    ];
    const out = correlatedSilence([...zoneA, ...zoneB], now, DEFAULT_POLICY);
    expect(out.zones).toEqual([{ cloud: 'aws', zone: 'us-west-2a', silent: 3, running: 4, sinceMs: now - 180_000 }]);
    expect([...out.machines].sort()).toEqual(['i-a0', 'i-a1', 'i-a2']);
    // Two machines are not a zone to judge; silences an hour apart are machines failing one by one.
    expect(correlatedSilence(together.slice(0, 2), now, DEFAULT_POLICY).zones).toEqual([]);
    const apart = [0, 1, 2].map((i) => machine(`i-c${i}`, 'us-west-2c', now - 200_000 - i * 1_800_000));
    expect(correlatedSilence(apart, now, DEFAULT_POLICY).zones).toEqual([]);
  });
});

describe('reconcile when the agents of most of a zone fall silent at once', () => {
  async function world(machines: number) {
    const e = nlpWorld({
      groups: [{ id: 'v100-od', instanceTypes: ['p3.2xlarge'], zones: ['us-west-2a'], capacityType: 'on-demand', minSize: 0, maxSize: 8 }],
    });
    await e.cloud.setDesiredCapacity('v100-od', machines);
    e.clock.advanceBy(120_000);
    e.cloud.tick();
    const instances = await e.cloud.listInstances();
    for (const [i, inst] of instances.entries()) {
      const gpus = [{ index: 0, model: 'V100' as const, memoryMiB: 16_384 }];
      await e.nodes.register({
        instanceId: inst.id,
        groupId: inst.groupId,
        registeredAtMs: e.clock.nowMs(),
        lastHeartbeatAtMs: e.clock.nowMs(),
        healthy: true,
        gpus,
      });
      const body = JSON.stringify({ image: 'pytorch/pytorch:2.3.0', command: ['python', 'train.py'], gpu: { kind: 'whole', count: 1 } });
      await intake(e, { team: 'nlp', body, token: `j${i}` });
      await e.nodes.assign(inst.id, `nlp.j${i}`, 1);
      const placement = { nodes: [{ nodeId: inst.id, gpuIndices: [0] }], capacityType: 'on-demand' as const };
      await applyJobEvent(e.jobs, `nlp.j${i}`, { type: 'place', attempt: 1, placement }, e.clock.nowMs());
      await applyJobEvent(e.jobs, `nlp.j${i}`, { type: 'start', attempt: 1 }, e.clock.nowMs());
    }
    return { e, instances };
  }

  it('requeues nothing and lets no machine go when every agent of the zone falls silent (the agent API is down), and says so', async () => {
    const { e, instances } = await world(4);
    // No heartbeat reaches the store for six minutes (past the point a lone machine's work is requeued); the cloud lists every machine running.
    e.clock.advanceBy((DEFAULT_POLICY.silentRequeueSec + 60) * 1000);
    e.cloud.tick();
    const out = await reconcile(e.ports, { planner: plan, policy: DEFAULT_POLICY, holder: 'a' });
    if (out.status !== 'done') throw new Error(out.status);
    expect(out.lostJobsRequeued).toBe(0);
    expect((await e.jobs.listByState(['running'])).map((j) => j.id).sort()).toEqual(['nlp.j0', 'nlp.j1', 'nlp.j2', 'nlp.j3']);
    expect(out.decision.plan.actions.filter((a) => a.kind === 'scale-in')).toEqual([]);
    expect(out.decision.controlPlaneSilence).toEqual([
      { cloud: 'aws', zone: 'us-west-2a', silent: 4, running: 4, sinceMs: expect.any(Number) },
    ]);
    expect(instances).toHaveLength(4);
  });

  it('still requeues the work of one machine gone silent on its own', async () => {
    const { e, instances } = await world(4);
    e.clock.advanceBy((DEFAULT_POLICY.silentRequeueSec + 60) * 1000);
    for (const inst of instances.slice(1)) await e.nodes.heartbeat(inst.id, e.clock.nowMs());
    const out = await reconcile(e.ports, { planner: plan, policy: DEFAULT_POLICY, holder: 'a' });
    if (out.status !== 'done') throw new Error(out.status);
    expect(out.lostJobsRequeued).toBe(1);
    expect(out.decision.controlPlaneSilence).toBeUndefined();
    expect((await e.jobs.get('nlp.j0'))!).toMatchObject({ state: 'pending', requeueReason: { code: 'node-lost' } });
  });
});
