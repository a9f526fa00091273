/**
 * Preemption: a job that cannot run because every group that could hold it is at its maximum
 * (or its offerings are avoided) may take the place of strictly lower-priority, interruptible,
 * running work: on one ready machine (or one zone for a gang), the fewest victims, then the least
 * work lost. Room already being freed by checkpointing jobs counts first. The victims are asked
 * to checkpoint and requeue, and the room is reserved so no later job takes it. Decides only
 * victims; it must not buy, and never touches work of equal or higher priority.
 */
import type { GpuRequest } from '../gpu.ts';
import type { Job, NodeAssignment } from '../job.ts';
import type { PlanAction } from '../plan.ts';
import { commitFit, countFreeWhole, makeGpus, tryFit, type NodeCapacity } from './capacity.ts';
import { hostNetTeamOf, type HostNetWall } from './host-net.ts';
import { commitPlacement } from './indexing.ts';
import type { Stuck } from './new-capacity.ts';
import { preemptedFor, roomBeingFreed } from './reasons.ts';
import { emit, lostWorkSec, type PlanningState } from './state.ts';

/** Makes room for each stuck job in turn where lower-priority work can give it. */
export function preemptForStuck(st: PlanningState, stuck: readonly Stuck[]): void {
  for (const s of stuck) preemptFor(st, s);
}

function preemptFor(st: PlanningState, { entry: e, why }: Stuck): void {
  if (why.code !== 'group-at-max' && why.code !== 'offering-unavailable') return;
  const priority = e.job.spec.priority;
  // Room only shrinks as this plan goes on: a class that found none at a priority finds none below it.
  if ((st.noPreemptRoom.get(e.cls) ?? -1) >= priority) return;
  type Choice = { node: NodeCapacity; victims: Job[]; lost: number; assignment: NodeAssignment };
  const choices: Choice[] = [];
  for (const poolId of st.ready.poolIds()) {
    if (!e.cls.eligible.has(poolId)) continue;
    for (const node of st.ready.pool(poolId)!.nodes()) {
      const holders = (st.holders.get(node.id) ?? []).filter((h) => !st.preempted.has(h.job.id));
      // Capacity already being freed (checkpointing jobs) counts first: no new victims needed for it.
      const leaving = holders.filter((h) => h.job.state === 'checkpointing');
      const candidates = holders
        // A service replica is never a victim: its service keeps its ready replicas at target and decides where they go.
        .filter(
          (h) =>
            h.job.state === 'running' &&
            h.job.spec.interruptible &&
            !h.job.spec.service &&
            h.job.spec.priority < priority &&
            h.job.spec.nodes === 1,
        )
        .map((h) => ({ h, lost: lostWorkSec(st.s, h.job) }))
        .sort((a, b) => a.lost - b.lost || (a.h.job.id < b.h.job.id ? -1 : 1));
      const chosen: typeof candidates = [];
      let fit = fitWithout(st, node, holders, [...leaving.map((h) => h.job.id)], e.cls.request, e.cls.ports, e.cls.wall);
      for (const c of candidates) {
        if (fit) break;
        chosen.push(c);
        fit = fitWithout(
          st,
          node,
          holders,
          [...leaving.map((h) => h.job.id), ...chosen.map((x) => x.h.job.id)],
          e.cls.request,
          e.cls.ports,
          e.cls.wall,
        );
      }
      if (!fit) continue;
      choices.push({ node, victims: chosen.map((c) => c.h.job), lost: chosen.reduce((s, c) => s + c.lost, 0), assignment: fit });
    }
  }
  choices.sort((a, b) => a.victims.length - b.victims.length || a.lost - b.lost || (a.node.id < b.node.id ? -1 : 1));
  let picked: Choice[] = [];
  if (e.cls.nodes === 1) picked = choices.slice(0, 1);
  else {
    const byZone = new Map<string, Choice[]>();
    for (const c of choices) byZone.set(c.node.zone, [...(byZone.get(c.node.zone) ?? []), c]);
    let bestScore = Infinity;
    for (const zone of [...byZone.keys()].sort()) {
      const list = byZone.get(zone)!;
      if (list.length < e.cls.nodes) continue;
      const set = list.slice(0, e.cls.nodes);
      const score = set.reduce((s, c) => s + c.victims.length * 1e9 + c.lost, 0);
      if (score < bestScore) {
        bestScore = score;
        picked = set;
      }
    }
  }
  if (picked.length < e.cls.nodes || picked.length === 0) {
    st.noPreemptRoom.set(e.cls, Math.max(priority, st.noPreemptRoom.get(e.cls) ?? -1));
    return;
  }
  const victims = picked.flatMap((c) => c.victims);
  emit(
    st,
    victims.map((v): PlanAction => ({
      kind: 'preempt',
      jobId: v.id,
      attempt: v.attempt,
      reason: preemptedFor(e.job.id, priority, v.spec.priority),
    })),
  );
  // Reserve the room so no later job in this plan takes it (the job is not placed yet: it holds nothing).
  commitPlacement(
    st,
    picked.map((c) => ({ node: c.node, assignment: c.assignment })),
    undefined,
    e.cls.wall?.team,
  );
  const last = st.waitingAt.get(e.job.id) ?? -1;
  if (last >= 0) st.waiting[last] = { jobId: e.job.id, reason: roomBeingFreed(victims.length) };
}

/** Where the request would fit on the node if the jobs `without` left it (undefined when none leave). */
function fitWithout(
  st: PlanningState,
  node: NodeCapacity,
  holders: readonly { job: Job; assignment: NodeAssignment }[],
  without: readonly string[],
  request: GpuRequest,
  ports: readonly number[],
  wall: HostNetWall | undefined,
): NodeAssignment | undefined {
  if (without.length === 0) return undefined;
  const type = st.s.instanceTypes.get(node.instanceType);
  if (!type) return undefined;
  const gpus = makeGpus(
    type,
    node.gpus.some((g) => g.mig !== undefined),
  );
  const clone: NodeCapacity = { ...node, gpus, freeWhole: countFreeWhole(gpus), ports: [], hostNetTeams: [] };
  for (const h of holders) if (!without.includes(h.job.id)) commitFit(clone, h.assignment, hostNetTeamOf(h.job));
  return tryFit(clone, request, ports, wall);
}
