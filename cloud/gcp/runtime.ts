import { GetSecretValueCommand, SecretsManagerClient } from '@aws-sdk/client-secrets-manager';
import { ConfigError } from '../../core/errors.ts';
import type { Clock } from '../../core/ports.ts';
import '../../core/schema.ts';
import * as z from 'zod/mini';
import { translateAwsError } from '../aws/errors.ts';
import { gcpShippedCatalog } from '../catalog/gcp-shipped.ts';
import { onDemandPrice, ShippedCatalogSource, ShippedPriceSource } from '../catalog/shipped.ts';
import { GcpReservations } from './reservations.ts';
import type { FleetConfig } from '../env.ts';
import { gcpClients, type GcpClientOptions } from './clients.ts';
import { GcpMachineTypeCatalog } from './machine-types.ts';
import { MigNodeGroups, type GcpClients } from './mig-node-groups.ts';
import { GcpPreemptions } from './preemptions.ts';

/**
 * The GCP side of the wiring (cloud/wiring.ts loads this module only when GCP projects are
 * configured, so a fleet without GCP carries none of it): credentials from Secrets Manager, the
 * Compute clients, and the GCP ports.
 */

export type GcpConfig = NonNullable<FleetConfig['gcp']>;

const ServiceAccountKey = z.looseObject({
  type: z.optional(z.literal('service_account')),
  client_email: z.email(),
  private_key: z.string().check(z.minLength(1)),
  project_id: z.optional(z.string()),
});

/** The service account key stored in Secrets Manager (the JSON file GCP gives for a key). */
export async function gcpCredentialsFromSecret(sm: SecretsManagerClient, secretId: string): Promise<GcpClientOptions['credentials']> {
  let text: string | undefined;
  try {
    text = (await sm.send(new GetSecretValueCommand({ SecretId: secretId }))).SecretString;
  } catch (error) {
    throw translateAwsError(error, { operation: 'read the GCP credentials secret', resource: secretId });
  }
  let json: unknown;
  try {
    json = JSON.parse(text ?? '');
  } catch {
    throw new ConfigError(
      `secret ${secretId}`,
      ["is not JSON: store the service account's key file (with client_email and private_key) as the secret string"],
      {
        what: 'GCP service account key',
      },
    );
  }
  const key = ServiceAccountKey.safeParse(json);
  if (!key.success)
    throw new ConfigError(
      `secret ${secretId}`,
      key.error.issues.map((i) => `${i.path.join('.') || '(key)'}: ${i.message}`),
      { what: 'GCP service account key' },
    );
  return { client_email: key.data.client_email, private_key: key.data.private_key };
}

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
