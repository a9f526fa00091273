/**
 * Scale-in, the first disruption step: lets go of machines that cost money and will run nothing.
 * Draining machines with no work left, at once; machines whose agent went silent (or never
 * registered) and hold no work; and ready machines empty for the cool-down, oldest idle first.
 * Never below a group's minimum (counted from what a launch cancellation left it), but a silent
 * machine goes at the minimum too: the group then launches one in its place (a machine whose
 * agent is dead is no capacity, and would hold the minimum forever); never an idle
 * reserved machine (it is paid for anyway). Returns
 * scale-in actions only; it must not move work (consolidation does that, with its own rules).
 */
import { correlatedSilence, inService } from '../fleet.ts';
import type { PlanAction } from '../plan.ts';
import type { Reason } from '../reason.ts';
import { isEmpty, type NodeCapacity } from './capacity.ts';
import { drainedEmpty, idleMachine, silentMachine } from './reasons.ts';
import type { PlanningState } from './state.ts';

export function scaleIn(st: PlanningState): PlanAction[] {
  const s = st.s;
  const actions: PlanAction[] = [];
  const cooldownMs = s.policy.idleCooldownSec * 1000;
  const removable = new Map<string, number>();
  for (const g of s.groups) removable.set(g.id, (st.cancelled.get(g.id) ?? g.desiredCapacity) - g.minSize);
  const removed = new Set<string>();
  const letGo = (groupId: string, instanceId: string, why: Reason | ((atMinimum: boolean) => Reason), evenAtMinimum = false) => {
    const left = removable.get(groupId) ?? 0;
    if (left <= 0 && !evenAtMinimum) return;
    removable.set(groupId, Math.max(0, left - 1));
    if (typeof why === 'function') why = why(left <= 0);
    removed.add(instanceId);
    actions.push({ kind: 'scale-in', groupId, instanceId, reason: why });
  };
  const records = new Map(s.nodes.map((n) => [n.instance.id, n]));
  const idle = st.ready
    .allNodes()
    .filter((n) => isEmpty(n))
    .map((n) => ({ node: n, since: records.get(n.id)?.record?.idleSinceMs }))
    .filter((c): c is { node: NodeCapacity; since: number } => c.since !== undefined && s.nowMs - c.since >= cooldownMs)
    .sort((a, b) => a.since - b.since || (a.node.id < b.node.id ? -1 : 1));
  const byId = [...s.nodes].sort((a, b) => (a.instance.id < b.instance.id ? -1 : 1));
  // Draining machines that have no work left go at once: they take no new work and may be taken anyway.
  const busy = new Set(s.activeJobs.flatMap((j) => j.placement?.nodes.map((a) => a.nodeId) ?? []));
  for (const f of byId) {
    const d = f.record?.draining;
    if (!d || busy.has(f.instance.id) || !inService(f.instance.state)) continue;
    letGo(f.instance.groupId, f.instance.id, drainedEmpty(f.instance.id, d.reason));
  }
  // Machines whose agent went silent (or never registered) and hold no work still cost money:
  // their work was requeued as lost, so they go (the group replaces them if capacity is needed).
  const registerLimitMs = Math.max(600_000, 3 * s.policy.expectedBootSec * 1000);
  // Not those silent together with most of their zone: the control path failed, not they (core/fleet.ts correlatedSilence).
  const silentTogether = correlatedSilence(s.nodes, s.nowMs, s.policy).machines;
  for (const f of byId) {
    if (f.instance.state !== 'running' || removed.has(f.instance.id) || busy.has(f.instance.id) || f.record?.draining) continue;
    if (silentTogether.has(f.instance.id)) continue;
    const silentMs = f.record ? s.nowMs - f.record.lastHeartbeatAtMs : s.nowMs - f.instance.launchedAtMs;
    if (silentMs <= (f.record ? s.policy.heartbeatTimeoutSec * 1000 : registerLimitMs)) continue;
    letGo(
      f.instance.groupId,
      f.instance.id,
      (atMinimum) => silentMachine(f.instance.id, f.record !== undefined, silentMs, atMinimum),
      true,
    );
  }
  for (const { node, since } of idle) {
    // A reserved machine is paid for whether it runs or not: letting it go saves nothing (its idle reservation is shown as waste).
    if (removed.has(node.id) || node.capacityType === 'reserved') continue;
    letGo(node.groupId, node.id, idleMachine(node, s.nowMs - since, s.policy.idleCooldownSec));
  }
  return actions;
}
