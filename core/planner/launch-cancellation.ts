/**
 * Launch cancellation: a group that wants more machines than it has, while every offering it
 * may launch failed to launch or was interrupted recently, will not deliver them. Its launches
 * are cancelled (desired size lowered to what it has, never below its minimum) so the work is
 * bought elsewhere, and nothing in this plan waits for them. Decides only that; it must not
 * touch capacity indexes or jobs.
 */
import type { NodeGroup } from '../fleet.ts';
import type { PlanAction } from '../plan.ts';
import { launchesCancelled } from './reasons.ts';
import { unavailable, type PlanningState } from './state.ts';

/**
 * A group that launches only into reservations none of which is active (a block not delivered yet,
 * or ended; an expired ODCR): its launches cannot start, whatever the failures say so far.
 */
function reservationsClosed(st: PlanningState, group: NodeGroup): boolean {
  if (!group.offerings.every((o) => o.capacityType === 'reserved')) return false;
  return group.offerings.every((o) => {
    const r = o.reservationId !== undefined ? st.s.reservations?.get(o.reservationId) : undefined;
    return r !== undefined && r.state !== 'active';
  });
}

/** Marks the undeliverable groups (and the size each is cancelled to) and returns the cancel actions. */
export function cancelLaunches(st: PlanningState): PlanAction[] {
  const actions: PlanAction[] = [];
  for (const gs of st.groups.values()) {
    const live = st.liveByGroup.get(gs.group.id) ?? 0;
    const inFlight = gs.group.desiredCapacity - live;
    if (inFlight <= 0 || !(gs.group.offerings.every((o) => unavailable(st.s, o.id)) || reservationsClosed(st, gs.group))) continue;
    st.undeliverable.add(gs.group.id);
    const to = Math.max(gs.group.minSize, live);
    if (to >= gs.group.desiredCapacity) continue;
    actions.push({
      kind: 'cancel-launches',
      groupId: gs.group.id,
      fromDesired: gs.group.desiredCapacity,
      toDesired: to,
      reason: launchesCancelled(gs.group.id, gs.group.desiredCapacity - to),
    });
    st.cancelled.set(gs.group.id, to);
  }
  return actions;
}
