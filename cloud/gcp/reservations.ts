import type { protos } from '@google-cloud/compute';
import type { MicroUsd } from '../../core/money.ts';
import type { ReservationSource } from '../../core/ports.ts';
import type { Reservation, ReservationState } from '../../core/reservation.ts';
import { translateGcpError } from './errors.ts';

type GceReservation = protos.google.cloud.compute.v1.IReservation;

/** The part of the Compute API's ReservationsClient gpu-fleet uses (the simulated world and tests can stand in). */
export interface ReservationsApi {
  listAsync(request: { project: string; zone: string; maxResults?: number }): AsyncIterable<GceReservation>;
}

export interface GcpReservationsOptions {
  /** The configured projects and their zones (mig-node-groups.ts GcpScope). */
  readonly projects: readonly { readonly projectId: string; readonly zones: readonly string[] }[];
  /** The on-demand price of a machine type in a zone (µUSD/h), from the shipped GCP catalogue: what a reservation bills. */
  readonly onDemandPrice: (machineType: string, zone: string) => MicroUsd | undefined;
}

/**
 * GCP reservations in the configured projects and zones, from the Compute API (reservations.list
 * per zone). A reservation is known by its name, which is what an instance template's
 * `reservationAffinity` (SPECIFIC_RESERVATION, key `compute.googleapis.com/reservation-name`)
 * names. What is read: the machine type, the zone, `count` and `inUseCount` (what is free is their
 * difference), the status (only READY takes machines). A reservation bills its machine type's
 * on-demand price whether used or not (a committed-use discount on it is not read). GCP
 * reservations have no end unless deleted: they are `odcr` to gpu-fleet.
 */
export class GcpReservations implements ReservationSource {
  readonly cloud = 'gcp' as const;
  readonly problems: string[] = [];

  constructor(
    private readonly api: ReservationsApi,
    private readonly options: GcpReservationsOptions,
  ) {}

  get scope(): string {
    return this.options.projects.map((p) => p.projectId).join(',');
  }

  async listReservations(): Promise<Reservation[]> {
    this.problems.length = 0;
    const out: Reservation[] = [];
    for (const scope of this.options.projects) {
      for (const zone of scope.zones) {
        try {
          for await (const r of this.api.listAsync({ project: scope.projectId, zone, maxResults: 500 })) {
            const res = this.toReservation(r, zone);
            if (res) out.push(res);
          }
        } catch (error) {
          throw translateGcpError(error, { operation: 'list reservations', resource: `${scope.projectId}/${zone}` });
        }
      }
    }
    return out;
  }

  private toReservation(r: GceReservation, zone: string): Reservation | undefined {
    const name = r.name ?? '';
    const machineType = (r.specificReservation?.instanceProperties?.machineType ?? '').split('/').pop() ?? '';
    if (!name || !machineType) {
      this.problems.push(
        `reservation ${name || '(unnamed)'} in ${zone}: no machine type (a reservation by instance template is not read); left out`,
      );
      return undefined;
    }
    const price = this.options.onDemandPrice(machineType, zone);
    if (price === undefined) {
      this.problems.push(`reservation ${name}: no on-demand price for ${machineType} in ${zone} in the shipped catalogue; left out`);
      return undefined;
    }
    // int64 fields come as strings over REST.
    const count = Number(r.specificReservation?.count ?? 0);
    const inUse = Number(r.specificReservation?.inUseCount ?? 0);
    return {
      id: name,
      cloud: 'gcp',
      region: zone.replace(/-[a-z]$/, ''),
      zone,
      instanceType: machineType,
      kind: 'odcr',
      interruptible: false,
      totalCount: count,
      availableCount: Math.max(0, count - inUse),
      state: stateOf(r.status),
      priceMicroUsdPerHour: price,
    };
  }
}

function stateOf(status: string | null | undefined): ReservationState {
  switch (status) {
    case 'READY':
      return 'active';
    case 'CREATING':
    case 'UPDATING':
      return 'pending';
    case 'DELETING':
      return 'expired';
    default:
      return 'unusable';
  }
}
