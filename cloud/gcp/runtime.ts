import { SecretsManagerClient } from '@aws-sdk/client-secrets-manager';
import type { Clock } from '../../core/ports.ts';
import { gcpShippedCatalog } from '../catalog/gcp-shipped.ts';
import { onDemandPrice, ShippedCatalogSource, ShippedPriceSource } from '../catalog/shipped.ts';
import { GcpReservations } from './reservations.ts';
import type { FleetConfig } from '../env.ts';
import { gcpClients } from './clients.ts';
import { gcpCredentialsFromSecret } from './credentials.ts';
import { GcpMachineTypeCatalog } from './machine-types.ts';
import { MigNodeGroups, type GcpClients } from './mig-node-groups.ts';
import { GcpPreemptions } from './preemptions.ts';

/**
 * The GCP side of the wiring (cloud/wiring.ts loads this module only when GCP projects are
 * configured, so a fleet without GCP carries none of it): credentials from Secrets Manager, the
 * Compute clients, and the GCP ports.
 */

export type GcpConfig = NonNullable<FleetConfig['gcp']>;

/** gpu-fleet's GCP ports: node groups, preemption notices, and catalogue and prices from the shipped GCP data. */
export function gcpPorts(config: GcpConfig, clients: GcpClients, clock: Clock) {
  const groups = new MigNodeGroups(clients, { projects: config.projects, clock });
  const catalog = gcpShippedCatalog();
  return {
    groups,
    ...(clients.reservations
      ? {
          reservations: new GcpReservations(clients.reservations, {
            projects: config.projects,
            onDemandPrice: (machineType, zone) =>
              onDemandPrice(catalog, { cloud: 'gcp', region: zone.replace(/-[a-z]$/, ''), zone, instanceType: machineType }),
          }),
        }
      : {}),
    preemptions: new GcpPreemptions(clients.zoneOperations, groups, { projects: config.projects, clock }),
    catalog: new GcpMachineTypeCatalog(clients.machineTypes, config.projects, new ShippedCatalogSource(catalog)),
    prices: new ShippedPriceSource(catalog),
  };
}

/** The GCP ports for a fleet config: credentials from the configured secret (or given clients, in tests). */
export async function loadGcpPorts(
  config: GcpConfig,
  input: { region: string; clock: Clock; clients?: GcpClients; secrets?: SecretsManagerClient },
) {
  let clients = input.clients;
  if (!clients) {
    const credentials = config.credentialsSecret
      ? await gcpCredentialsFromSecret(input.secrets ?? new SecretsManagerClient({ region: input.region }), config.credentialsSecret)
      : undefined;
    clients = gcpClients(credentials ? { credentials } : {});
  }
  return gcpPorts(config, clients, input.clock);
}

export { gcpClients };
