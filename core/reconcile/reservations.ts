/**
 * Reservations: machines of a reservation about to end (a Capacity Block) are drained ahead of
 * its end, as on a spot warning, whether or not the cloud's warning came. It drains machines
 * (through the interruption service); it never plans or scales.
 */
import { inService } from '../fleet.ts';
import { MAX_CHECKPOINT_GRACE_SEC as MAX_GRACE_SEC } from '../job-spec.ts';
import { drainLeadMs, reservationTerminationMs } from '../reservation.ts';
import { handleNotice } from '../services/interruption.ts';
import type { Policy, Snapshot } from '../snapshot.ts';
import { readSnapshot, reread, snapshotOf, type ReconcileContext, type ReconcilePorts } from './context.ts';

/** The step: drains them, and reads the world and the snapshot again if any was. */
export async function drainReservations(ctx: ReconcileContext): Promise<void> {
  if ((await drainEndingReservations(ctx.ports, snapshotOf(ctx), ctx.policy)) > 0) {
    await reread(ctx);
    await readSnapshot(ctx);
  }
}

/**
 * Drains every machine whose reservation takes it away soon (see core/reservation.ts drainLeadMs):
 * its work is checkpointed and requeued ahead of the end, as on a spot warning. The same notice as
 * the cloud's warning (handled once per machine), so it does not matter which comes first.
 */
export async function drainEndingReservations(ports: ReconcilePorts, snapshot: Snapshot, policy: Policy): Promise<number> {
  let drained = 0;
  for (const n of snapshot.nodes) {
    const i = n.instance;
    if (i.reservationId === undefined || n.record?.draining || !inService(i.state)) continue;
    const r = snapshot.reservations?.get(i.reservationId);
    const terminationMs = r ? reservationTerminationMs(r) : undefined;
    // Far from its end (beyond the longest lead any job's grace could ask): nothing to look at on this machine yet.
    if (terminationMs === undefined || terminationMs - snapshot.nowMs > drainLeadMs(MAX_GRACE_SEC)) continue;
    const graceSec = Math.max(
      0,
      ...snapshot.activeJobs
        .filter((j) => j.placement?.nodes.some((a) => a.nodeId === i.id))
        .map((j) => j.spec.checkpoint?.gracePeriodSec ?? 0),
    );
    if (terminationMs - snapshot.nowMs > drainLeadMs(graceSec)) continue;
    drained++;
    await handleNotice(
      ports,
      {
        kind: 'interruption-warning',
        eventId: `reservation-end/${i.reservationId}/${i.id}`,
        instanceId: i.id,
        atMs: snapshot.nowMs,
        deadlineMs: terminationMs,
        cause: `reservation ${i.reservationId} ends`,
      },
      policy,
    );
  }
  return drained;
}
