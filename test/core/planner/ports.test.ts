import { describe, expect, it } from 'vitest';
import { rendezvousPortOf, type Placement } from '../../../core/job.ts';
import type { JobSpecInput } from '../../../core/job-spec.ts';
import { planBaseline } from '../../../core/planner/baseline.ts';
import { RENDEZVOUS_PORT_BASE } from '../../../core/planner/host-net.ts';
import { plan } from '../../../core/planner/planner.ts';
import type { Plan } from '../../../core/plan.ts';
import { SERVICE_LABEL } from '../../../core/serving/service.ts';
import { aGroup, aJob, aNode, aSnapshot } from '../../builders.ts';
import { running } from './support.ts';

/**
 * A port a job's container listens on with the host's network is room of the machine: two
 * replicas of one service (one port) never share a machine, and each gang led from a machine
 * meets at a port of its own there.
 */
const service = (name: string, port: number): Partial<JobSpecInput> => ({
  name,
  interruptible: false,
  labels: { [SERVICE_LABEL]: `team-a.${name}` },
  service: { port, replicas: { min: 1, max: 4 }, targets: [{ metric: 'requests-per-second', perReplica: 2 }] },
});
const replica = (name: string, n: number, port: number) => aJob({ id: `team-a.${name}-r${n}`, queuedAtMs: n, spec: service(name, port) });

const placements = (p: Plan): Record<string, Placement> =>
  Object.fromEntries(p.actions.flatMap((a) => (a.kind === 'place' ? [[a.jobId, a.placement]] : [])));

describe("planner: a machine's ports", () => {
  const g = aGroup({ instanceType: 'g5.12xlarge' });

  it('never puts two replicas of one service on one machine; a service on another port shares it', () => {
    const p = plan(
      aSnapshot({
        groups: [g],
        nodes: [aNode('i-1', { group: g }), aNode('i-2', { group: g })],
        pendingJobs: [replica('chat', 1, 8000), replica('chat', 2, 8000), replica('chat', 3, 8000), replica('embed', 1, 9000)],
      }),
    );
    const placed = placements(p);
    const on = (id: string) => placed[id]?.nodes[0]?.nodeId;
    expect(on('team-a.chat-r1')).not.toBe(on('team-a.chat-r2'));
    expect([on('team-a.chat-r1'), on('team-a.chat-r2')].sort()).toEqual(['i-1', 'i-2']);
    // The third replica has no machine without port 8000: it waits for one bought for it, while GPUs are free on both.
    expect(on('team-a.chat-r3')).toBeUndefined();
    expect(p.actions.some((a) => a.kind === 'scale-up')).toBe(true);
    // The placement names the port its machine gives the replica.
    expect(placed['team-a.chat-r1']!.nodes[0]!.ports).toEqual([8000]);
    expect(on('team-a.embed-r1')).toMatch(/^i-[12]$/);
    expect(placed['team-a.embed-r1']!.nodes[0]!.ports).toEqual([9000]);
  });

  it("counts a running replica's port, named by its placement or (placed before placements named ports) by its spec", () => {
    for (const ports of [[8000], undefined]) {
      const held = running('team-a.chat-r1', 'i-1', { gpuIndices: [0], ...(ports ? { ports } : {}) }, { spec: service('chat', 8000) });
      const p = plan(
        aSnapshot({ groups: [g], nodes: [aNode('i-1', { group: g })], activeJobs: [held], pendingJobs: [replica('chat', 2, 8000)] }),
      );
      expect(placements(p)['team-a.chat-r2']).toBeUndefined();
    }
  });

  it('gives each gang led from one machine a rendezvous port of its own, on its first machine only', () => {
    const gang = (id: string, q: number) => aJob({ id, queuedAtMs: q, spec: { nodes: 2, gpu: { kind: 'whole', count: 1 } } });
    const p = plan(
      aSnapshot({
        groups: [g],
        nodes: [aNode('i-1', { group: g }), aNode('i-2', { group: g })],
        pendingJobs: [gang('team-a.g1', 1), gang('team-a.g2', 2)],
      }),
    );
    const placed = placements(p);
    const a = placed['team-a.g1']!;
    const b = placed['team-a.g2']!;
    expect(a.nodes).toHaveLength(2);
    expect(a.nodes[1]!.ports).toBeUndefined();
    const ports = [rendezvousPortOf(a), rendezvousPortOf(b)];
    expect(ports.every((x) => x !== undefined && x >= RENDEZVOUS_PORT_BASE)).toBe(true);
    if (a.nodes[0]!.nodeId === b.nodes[0]!.nodeId) expect(ports[0]).not.toBe(ports[1]);
    // A gang led from a machine whose running gang holds the first port gets the next.
    const held = running('team-a.old', 'i-1', { gpuIndices: [0], ports: [RENDEZVOUS_PORT_BASE] }, { spec: { nodes: 2 } });
    const heldRest = { ...held, placement: { ...held.placement!, nodes: [...held.placement!.nodes, { nodeId: 'i-2', gpuIndices: [0] }] } };
    const next = plan(
      aSnapshot({
        groups: [g],
        nodes: [aNode('i-1', { group: g }), aNode('i-2', { group: g })],
        activeJobs: [heldRest],
        pendingJobs: [gang('team-a.g3', 3)],
      }),
    );
    const g3 = placements(next)['team-a.g3']!;
    if (g3.nodes[0]!.nodeId === 'i-1') expect(rendezvousPortOf(g3)).toBe(RENDEZVOUS_PORT_BASE + 1);
    else expect(rendezvousPortOf(g3)).toBe(RENDEZVOUS_PORT_BASE);
  });

  it('the cheapest-fit baseline keeps the same rules', () => {
    const p = planBaseline(
      aSnapshot({
        groups: [g],
        nodes: [aNode('i-1', { group: g }), aNode('i-2', { group: g })],
        pendingJobs: [replica('chat', 1, 8000), replica('chat', 2, 8000)],
      }),
    );
    const placed = placements(p);
    expect(new Set(Object.values(placed).map((x) => x.nodes[0]!.nodeId)).size).toBe(2);
  });

  it('puts a replica where its image already is when that costs no more per hour, even off the best fit; never at a higher price', () => {
    const chatImage = aJob({ spec: service('chat', 8000) }).spec.image;
    const other = aGroup({ instanceType: 'p3.16xlarge', capacityType: 'on-demand' });
    // i-1 is the best fit (fuller: a running job holds two of its GPUs); i-2 holds the replica's image.
    const busy = running('team-a.batch', 'i-1', { gpuIndices: [0, 1] }, { spec: { gpu: { kind: 'whole', count: 2 } } });
    const placedOn = (holder: ReturnType<typeof aNode>) =>
      placements(
        plan(
          aSnapshot({
            groups: [g, other],
            nodes: [aNode('i-1', { group: g }), holder],
            activeJobs: [busy],
            pendingJobs: [replica('chat', 1, 8000)],
          }),
        ),
      )['team-a.chat-r1']?.nodes[0]?.nodeId;
    expect(placedOn(aNode('i-2', { group: g }))).toBe('i-1');
    expect(placedOn(aNode('i-2', { group: g, record: { images: [chatImage] } }))).toBe('i-2');
    // The same image on a machine whose GPUs cost more (a p3.16xlarge: $3.06 a GPU-hour against $1.42): the best fit keeps it.
    const dearer = aNode('i-2', { group: other, record: { images: [chatImage] } });
    expect(placedOn(dearer)).toBe('i-1');
  });
});
