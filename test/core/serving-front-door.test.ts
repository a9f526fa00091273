import { describe, expect, it } from 'vitest';
import { SimFrontDoor } from '../../cloud/sim/front-door.ts';
import { MemoryJobStore, MemoryNodeStore, MemoryServiceStore } from '../../cloud/sim/memory-stores.ts';
import type { Instance } from '../../core/fleet.ts';
import type { Job } from '../../core/job.ts';
import { newServiceRecord, SERVICE_LABEL } from '../../core/serving/service.ts';
import { reconcileServices } from '../../core/services/serving.ts';
import { aGroup, aJob, aSpec, INSTANCE_TYPES, T0 } from '../builders.ts';

/** Reconcile's side of a warned machine's replica and its target group (core/services/serving.ts reconcileFrontDoor). */
describe('reconcile and a warned machine’s replica in the load balancer', () => {
  const types = new Map(Object.entries(INSTANCE_TYPES));
  const chat = newServiceRecord(
    'nlp',
    aSpec({
      name: 'chat',
      service: { port: 8000, replicas: { min: 1, max: 4 }, targets: [{ metric: 'requests-per-second', perReplica: 2 }] },
    }),
    T0,
  );
  const group = aGroup({ instanceType: 'g5.xlarge', capacityType: 'spot' });
  const machine: Instance = {
    id: 'i-1',
    groupId: group.id,
    cloud: 'aws',
    region: 'us-west-2',
    zone: 'us-west-2a',
    instanceType: 'g5.xlarge',
    capacityType: 'spot',
    state: 'running',
    launchedAtMs: T0 - 3_600_000,
  };
  const replica: Job = {
    ...aJob({
      id: 'nlp.chat-r1',
      team: 'nlp',
      spec: { name: 'chat-r1', labels: { [SERVICE_LABEL]: 'nlp.chat' }, service: chat.spec.service },
    }),
    state: 'running',
    placement: { capacityType: 'spot', nodes: [{ nodeId: 'i-1', gpuIndices: [0] }] },
    startedAtMs: T0 - 3_000_000,
  };
  const target = { ip: '10.0.0.1', port: 8000 };

  /** The replica on i-1, its machine warned with its drain mark `markInSec` away, its agent last heard `heardAgoSec` ago. */
  async function world(o: { markInSec: number; heardAgoSec: number; agentLeft?: boolean }) {
    let now = T0 - 600_000;
    const clock = { nowMs: () => now };
    const door = new SimFrontDoor(clock, { healthyAfterSec: 10, deregistrationDelaySec: 30, probe: () => true });
    await door.register('nlp.chat', [target]);
    now = T0 - 60_000;
    if (o.agentLeft) await door.deregister('nlp.chat', [target]);
    now = T0;
    const services = new MemoryServiceStore();
    await services.create(chat);
    const nodes = new MemoryNodeStore();
    await nodes.register({
      instanceId: 'i-1',
      groupId: group.id,
      registeredAtMs: T0 - 3_600_000,
      lastHeartbeatAtMs: T0 - o.heardAgoSec * 1000,
      healthy: true,
      gpus: [],
      address: target.ip,
    });
    await nodes.markDraining('i-1', { sinceMs: T0 - 40_000, reason: 'spot interruption warning', deadlineMs: T0 + o.markInSec * 1000 });
    const logged = door.log.length;
    await reconcileServices(
      { services, jobs: new MemoryJobStore(), nodes, frontDoor: door, catalog: { instanceTypes: async () => types } },
      { groups: [group], instances: [machine], records: await nodes.list(), pendingJobs: [], activeJobs: [replica], degraded: [] },
      T0,
      { intervalSec: 60, bootSec: 0 },
    );
    return door.log
      .slice(logged)
      .filter((l) => l.target.ip === target.ip)
      .map((l) => l.action);
  }

  it('keeps it while its agent is heard and the drain mark less the delay is ahead; the agent takes it out', async () => {
    expect(await world({ markInSec: 60, heardAgoSec: 10 })).toEqual([]);
  });

  it('never registers it again once its agent has taken it out, while it drains', async () => {
    expect(await world({ markInSec: 60, heardAgoSec: 10, agentLeft: true })).toEqual([]);
  });

  it('takes it out itself past the agent’s time (the backstop), or with the agent silent, a reconcile interval ahead', async () => {
    expect(await world({ markInSec: 25, heardAgoSec: 10 })).toEqual(['deregister']);
    expect(await world({ markInSec: 60, heardAgoSec: 120 })).toEqual(['deregister']);
  });
});
