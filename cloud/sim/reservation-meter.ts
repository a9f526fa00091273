/**
 * Measures the simulated reservations over a run: what each was paid (its whole term within the
 * run, used or not), the machine-time spent in it, its utilisation overall and while work it could
 * hold waited, and the attempts killed when it took its machines away.
 */
import type { InstanceType } from '../../core/catalog.ts';
import type { Instance } from '../../core/fleet.ts';
import { costForDuration, type MicroUsd } from '../../core/money.ts';
import { reservationTerminationMs, type ReservationKind } from '../../core/reservation.ts';
import { reservationStateAt, type SimInstance, type SimReservationConfig } from './sim-cloud.ts';

export /** One reservation over a run: what it cost, how much of it was used, and what its end did to the work on it. */
interface ReservationSummary {
  readonly id: string;
  readonly kind: ReservationKind;
  readonly count: number;
  /** Its whole price over the part of its term within the run, used or not. */
  readonly paidMicroUsd: MicroUsd;
  /** The part of it machines ran in. */
  readonly usedMicroUsd: MicroUsd;
  readonly idleMicroUsd: MicroUsd;
  /** Machine-time in it ÷ its machine-time while active. */
  readonly utilizationPct: number;
  /** The same, over the minutes in which work it could hold had waited longer than a boot (absent when there were none). */
  readonly utilizationWhileQueuedPct?: number;
  /** Minutes in which work it could hold waited. */
  readonly queuedMinutes: number;
  /** Attempts still running on its machines when it took them away (killed without a checkpoint at its end). */
  readonly killedAtEnd: number;
}

interface Tally {
  activeSlotMs: number;
  usedSlotMs: number;
  queuedSlotMs: number;
  queuedUsedSlotMs: number;
  queuedMs: number;
  killed: Set<string>;
  /** Machine-time spent in it by machines that have ended, and when each live one started. */
  endedMs: number;
}

export class ReservationMeter {
  private readonly tallies = new Map<string, Tally>();

  constructor(
    private readonly reservations: readonly SimReservationConfig[],
    private readonly startMs: number,
  ) {
    for (const r of reservations)
      this.tallies.set(r.id, {
        activeSlotMs: 0,
        usedSlotMs: 0,
        queuedSlotMs: 0,
        queuedUsedSlotMs: 0,
        queuedMs: 0,
        killed: new Set(),
        endedMs: 0,
      });
  }

  get active(): boolean {
    return this.reservations.length > 0;
  }

  /** One step of the run: each active reservation's slots, and those machines fill. */
  note(atMs: number, stepMs: number, instances: readonly Instance[]): void {
    for (const r of this.reservations) {
      if (reservationStateAt(r, atMs) !== 'active') continue;
      const t = this.tallies.get(r.id)!;
      t.activeSlotMs += r.count * stepMs;
      t.usedSlotMs += this.usedBy(r, instances) * stepMs;
    }
  }

  /**
   * Right after a plan: where work the reservation could hold still waits (the plan found it no
   * place for longer than a machine takes to boot), the reservation's slots and those machines fill
   * count toward its use while work waits.
   */
  noteAfterPlan(
    atMs: number,
    periodMs: number,
    instances: readonly Instance[],
    workWaitsFor: (r: SimReservationConfig, type: InstanceType) => boolean,
    typeOf: (name: string) => InstanceType | undefined,
  ): void {
    for (const r of this.reservations) {
      if (reservationStateAt(r, atMs) !== 'active') continue;
      const type = typeOf(r.instanceType);
      if (!type || !workWaitsFor(r, type)) continue;
      const t = this.tallies.get(r.id)!;
      t.queuedMs += periodMs;
      t.queuedSlotMs += r.count * periodMs;
      t.queuedUsedSlotMs += this.usedBy(r, instances) * periodMs;
    }
  }

  private usedBy(r: SimReservationConfig, instances: readonly Instance[]): number {
    return Math.min(r.count, instances.filter((i) => i.reservationId === r.id && i.state !== 'terminated').length);
  }

  /** A machine of a reservation ended: its time in the reservation (to when the reservation took it, at the latest) is counted. */
  ended(inst: SimInstance, endMs: number): void {
    const id = inst.offering.reservationId;
    const r = id !== undefined ? this.reservations.find((x) => x.id === id) : undefined;
    if (!r) return;
    this.tallies.get(r.id)!.endedMs += Math.max(0, Math.min(endMs, reservationTerminationMs(r) ?? Infinity) - inst.launchedAtMs);
  }

  /** Attempts running on a machine of the reservation when it took the machine away. */
  killed(reservationId: string, jobIds: readonly string[]): void {
    const t = this.tallies.get(reservationId);
    if (t) for (const id of jobIds) t.killed.add(id);
  }

  summary(endMs: number, machines: readonly SimInstance[]): ReservationSummary[] {
    return this.reservations.map((r) => {
      const t = this.tallies.get(r.id)!;
      // Paid: its whole term within the run (a block to its end, though its machines go 30 min before).
      const from = Math.max(this.startMs, r.startMs ?? this.startMs);
      const to = Math.min(endMs, r.endMs ?? endMs);
      const paid = to > from ? costForDuration(r.priceMicroUsdPerHour * r.count, to - from) : 0;
      // Machines still up at the end count to the end; ended ones were counted when they ended.
      let usedMs = t.endedMs;
      const goesAtMs = reservationTerminationMs(r) ?? Infinity;
      for (const m of machines) {
        if (m.offering.reservationId !== r.id || m.state === 'terminated') continue;
        usedMs += Math.max(0, Math.min(endMs, goesAtMs) - m.launchedAtMs);
      }
      const used = Math.min(paid, costForDuration(r.priceMicroUsdPerHour, usedMs));
      const pct = (num: number, den: number) => (den > 0 ? Math.round((10_000 * num) / den) / 100 : 0);
      return {
        id: r.id,
        kind: r.kind,
        count: r.count,
        paidMicroUsd: paid,
        usedMicroUsd: used,
        idleMicroUsd: paid - used,
        utilizationPct: pct(t.usedSlotMs, t.activeSlotMs),
        ...(t.queuedSlotMs > 0 ? { utilizationWhileQueuedPct: pct(t.queuedUsedSlotMs, t.queuedSlotMs) } : {}),
        queuedMinutes: Math.round(t.queuedMs / 60_000),
        killedAtEnd: t.killed.size,
      };
    });
  }
}
