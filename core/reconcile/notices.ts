/**
 * Notices: interruptions no cloud pushed (GCP's preemption operations), found by looking and
 * handled exactly as the interruption function handles an event, before the world is read; and
 * machines a terminate hook holds whose lifecycle event was never seen, drained as that event
 * would have. It drains machines and asks for checkpoints (through the interruption service); it
 * never plans, scales or requeues.
 */
import { handleNotice, pollNotices, type PolledNotices } from '../services/interruption.ts';
import type { WorldView } from '../services/snapshot-reader.ts';
import type { Policy } from '../snapshot.ts';
import { reread, type ReconcileContext, type ReconcilePorts } from './context.ts';

/** Polls the notice sources, if any (before the world is read). */
export async function pollCloudNotices(ports: ReconcilePorts, policy: Policy): Promise<PolledNotices | undefined> {
  return ports.notices && ports.notices.length > 0 ? pollNotices(ports, ports.notices, policy) : undefined;
}

/** The step: drains held machines, and reads the world again if any was found. */
export async function drainHeld(ctx: ReconcileContext): Promise<void> {
  if ((await drainHeldMachines(ctx.ports, ctx.world, ctx.nowMs, ctx.policy)) > 0) await reread(ctx);
}

/**
 * Machines a terminate hook holds (the group is taking them away itself: Capacity Rebalancing, a
 * health-check replacement, an instance refresh, someone else's scale-in) whose lifecycle event
 * was never seen: drained as that event would have, so their work checkpoints and moves before the
 * hook times out, and the action is completed once they are empty. Returns how many were found.
 */
export async function drainHeldMachines(ports: ReconcilePorts, world: WorldView, nowMs: number, policy: Policy): Promise<number> {
  const records = new Map(world.records.map((r) => [r.instanceId, r]));
  let found = 0;
  for (const i of world.instances) {
    if (i.state !== 'terminating-wait' || records.get(i.id)?.draining?.lifecycle) continue;
    found++;
    await handleNotice(
      ports,
      {
        kind: 'lifecycle-terminate',
        eventId: `held/${i.id}`,
        instanceId: i.id,
        atMs: nowMs,
        groupName: i.groupId,
        hookName: policy.drainHookName,
        deadlineMs: nowMs + policy.drainHookTimeoutSec * 1000,
      },
      policy,
    );
  }
  return found;
}
