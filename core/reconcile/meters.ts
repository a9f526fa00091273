/**
 * Meters and spend: each spot machine's exposure noted in the pool history (for the interruption
 * rate), each machine's billing facts stamped on its record once, and each team's spend counted
 * into the ledger up to now (core/services/accrual.ts). It writes pool notes, node meters and the
 * ledger; it decides nothing about work or machines.
 */
import { billedPrice, offeringId, type PriceQuote } from '../catalog.ts';
import { HELD_ATTEMPTS_KEPT_MS } from '../job.ts';
import { accrueSpend, machineMeters, unusedReservationMeters } from '../services/accrual.ts';
import type { WorldView } from '../services/snapshot-reader.ts';
import { snapshotOf, type ReconcileContext, type ReconcilePorts } from './context.ts';

export async function countSpend(ctx: ReconcileContext): Promise<void> {
  const { ports, world, nowMs, policy } = ctx;
  const snapshot = snapshotOf(ctx);
  // Each spot machine's exposure is noted once per POOL_NOTE_EVERY_MS of its life, not every minute (one write per
  // machine per note: at 1,000 spot machines, every minute was 1,000 writes a minute that changed nothing of note).
  const intervalMs = policy.reconcileIntervalSec * 1000;
  const spotAlive = world.instances.filter(
    (i) => i.capacityType === 'spot' && (i.state === 'running' || i.state === 'pending') && poolNoteDue(i.launchedAtMs, nowMs, intervalMs),
  );
  if (spotAlive.length > 0)
    await ports.pools.noteAlive(spotAlive.map((i) => ({ instanceId: i.id, offeringId: offeringId(i), atMs: nowMs })));
  const gpuCountOf = (t: string) => snapshot.instanceTypes.get(t)?.gpuCount ?? 1;
  await stampMeters(ports, world, snapshot.prices, gpuCountOf);
  // With a cloud left out its machines are not in view: spend is not counted this minute (the cursor stays, and the
  // next complete view counts the whole window from it), rather than counted without them.
  // A reservation listing that failed holds spend back the same way (unused reserved capacity could not be counted).
  if ((snapshot.degraded ?? []).length > 0) return;
  await accrueSpend(ports.ledger, {
    teams: [...snapshot.teams.values()],
    nowMs,
    maxWindowMs: 2 * policy.reconcileIntervalSec * 1000,
    machines: async (sinceMs) => [
      ...machineMeters({
        instances: world.instances,
        records: world.records,
        // Finished attempts are kept on their jobs for HELD_ATTEMPTS_KEPT_MS: no older job can add a holding.
        jobs: [
          ...world.activeJobs,
          ...world.pendingJobs,
          ...(await ports.jobs.listEndedSince(Math.max(sinceMs, nowMs - HELD_ATTEMPTS_KEPT_MS), nowMs)),
        ],
        prices: snapshot.prices,
        gpuCountOf,
        nowMs,
        heartbeatTimeoutMs: policy.heartbeatTimeoutSec * 1000,
      }),
      ...unusedReservationMeters(snapshot.reservations, world.instances, sinceMs),
    ],
    ...(ports.bytes ? { bytes: ports.bytes } : {}),
  });
}

/** How often a spot machine's time alive is noted in the pool history (its exposure, for the interruption rate). */
export const POOL_NOTE_EVERY_MS = 10 * 60_000;

/**
 * Whether a machine launched at `launchedAtMs` is noted alive at `nowMs`: at its first reconcile,
 * then once in each {@link POOL_NOTE_EVERY_MS} of its life (the first reconcile past each slot
 * start). Exposure is undercounted by at most one slot per machine, which errs toward more risk.
 */
export function poolNoteDue(launchedAtMs: number, nowMs: number, intervalMs: number): boolean {
  const slot = (t: number) => Math.floor((t - launchedAtMs) / POOL_NOTE_EVERY_MS);
  return nowMs - launchedAtMs < intervalMs || slot(nowMs) !== slot(nowMs - intervalMs);
}

/**
 * Stamps each listed machine's billing facts on its record, once, so its last minutes can be
 * charged after its cloud stops listing it (one write per machine in its life).
 */
async function stampMeters(
  ports: ReconcilePorts,
  world: WorldView,
  prices: ReadonlyMap<string, PriceQuote>,
  gpuCountOf: (instanceType: string) => number,
): Promise<void> {
  const records = new Map(world.records.map((r) => [r.instanceId, r]));
  for (const i of world.instances) {
    const record = records.get(i.id);
    if (!record || record.meter || i.state === 'terminated') continue;
    const price = prices.get(offeringId(i));
    if (!price) continue;
    await ports.nodes.noteMeter(i.id, {
      offeringId: offeringId(i),
      priceMicroUsdPerHour: billedPrice(price),
      launchedAtMs: i.launchedAtMs,
      gpuCount: gpuCountOf(i.instanceType),
    });
  }
}
