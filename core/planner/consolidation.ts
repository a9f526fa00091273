/**
 * Consolidation, a disruption step: moves checkpointable work off one underused ready machine
 * (at most half its GPUs used) when it all fits on other ready machines and the machine's price
 * over the work's remaining time beats the cost of restarting that work. One machine per plan,
 * so the fleet never churns; nothing while jobs wait for capacity (moving would only add
 * restarts), nor work that started within the cool-down. Returns preempt actions only; it must
 * not let the machine go (scale-in does, once it is empty).
 */
import { hostPortsOf } from '../job-spec.ts';
import { milliGpusUsed } from '../gpu.ts';
import type { PlanAction } from '../plan.ts';
import { commitFit, isEmpty, tryFit, usedMilli, type NodeCapacity } from './capacity.ts';
import { hostNetTeamOf, hostNetWall } from './host-net.ts';
import { consolidated } from './reasons.ts';
import { lostWorkSec, shareOf, workLeftSec, type PlanningState } from './state.ts';

/** `removed`: machines this plan already lets go. */
export function consolidate(st: PlanningState, removed: ReadonlySet<string>): PlanAction[] {
  const s = st.s;
  const pendingWaiting = st.waiting.some((w) => w.reason.code === 'waiting-for-capacity' || w.reason.code === 'waiting-for-boot');
  if (pendingWaiting) return []; // capacity is short: moving work would only add restarts
  const readyNodes = st.ready.allNodes();
  const sorted = readyNodes
    .filter((n) => !removed.has(n.id) && !isEmpty(n) && usedMilli(n) * 2 <= n.gpus.length * 1000)
    .sort((a, b) => b.priceMicroUsdPerHour - a.priceMicroUsdPerHour || usedMilli(a) - usedMilli(b) || (a.id < b.id ? -1 : 1));
  for (const node of sorted) {
    const holders = st.holders.get(node.id) ?? [];
    const movable = (h: (typeof holders)[number]) =>
      h.job.state === 'running' &&
      h.job.spec.interruptible &&
      !!h.job.spec.checkpoint &&
      h.job.spec.nodes === 1 &&
      !st.preempted.has(h.job.id);
    if (!holders.every(movable)) continue;
    if (holders.some((h) => (h.job.startedAtMs ?? s.nowMs) > s.nowMs - s.policy.idleCooldownSec * 1000)) continue; // let new work settle
    // Would each job fit elsewhere, on ready nodes other than this one?
    const trial = readyNodes.filter((n) => n.id !== node.id && n.zone !== '' && !isEmpty(n)).map(cloneNode);
    let allFit = true;
    for (const h of holders) {
      const ports = hostPortsOf(h.job.spec);
      const team = hostNetTeamOf(h.job);
      const wall = team !== undefined ? hostNetWall(team, s.policy.hostNetworkSharing) : undefined;
      const target = trial.find((t) => tryFit(t, h.job.spec.gpu, ports, wall));
      if (!target) {
        allFit = false;
        break;
      }
      commitFit(target, tryFit(target, h.job.spec.gpu, ports, wall)!, team);
    }
    if (!allFit) continue;
    // The machine is freed when its shortest job would have ended anyway.
    const remainingSec = Math.min(...holders.map((h) => workLeftSec(s, h.job)));
    const savingMicroUsd = (node.priceMicroUsdPerHour * remainingSec) / 3600;
    const restartMicroUsd = holders.reduce(
      (sum, h) => sum + ((lostWorkSec(s, h.job) + s.policy.restoreSec) * shareOf(node, milliGpusUsed(h.job.spec.gpu), 1)) / 3600,
      0,
    );
    if (savingMicroUsd <= restartMicroUsd) continue;
    const why = consolidated(node.id, usedMilli(node), node.gpus.length, savingMicroUsd, restartMicroUsd);
    return holders.map((h): PlanAction => ({ kind: 'preempt', jobId: h.job.id, attempt: h.job.attempt, reason: why }));
  }
  return [];
}

/** A copy of a machine whose GPUs can be filled in trial without touching the plan's. */
function cloneNode(node: NodeCapacity): NodeCapacity {
  return {
    ...node,
    ports: [...node.ports],
    hostNetTeams: [...node.hostNetTeams],
    gpus: node.gpus.map((g) => ({ ...g, ...(g.mig ? { mig: { mask: g.mig.mask, counts: new Map(g.mig.counts) } } : {}) })),
  };
}
