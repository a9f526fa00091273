import { GetSecretValueCommand, type SecretsManagerClient } from '@aws-sdk/client-secrets-manager';
import { z } from 'zod';
import type { Clock } from '../../core/ports.ts';
import { shippedCatalog, ShippedCatalogSource, ShippedPriceSource } from '../catalog/shipped.ts';
import { gcpClients, type GcpClientOptions } from './clients.ts';
import { GcpMachineTypeCatalog } from './machine-types.ts';
import { MigNodeGroups, type GcpClients, type GcpScope } from './mig-node-groups.ts';
import { GcpPreemptions } from './preemptions.ts';
import { GpuFleetError } from '../../core/errors.ts';

export interface GcpConfig {
  readonly projects: readonly GcpScope[];
  /** The Secrets Manager secret holding the service account's JSON key. */
  readonly credentialsSecret?: string;
}

const Projects = z
  .array(
    z.strictObject({
      projectId: z.string().min(1),
      zones: z.array(z.string().regex(/^[a-z]+-[a-z]+\d-[a-z]$/, { error: 'GCP zones look like "us-central1-a"' })).min(1),
    }),
  )
  .min(1);

/** GCP settings from the environment the stack sets (`GPU_FLEET_GCP_PROJECTS` as JSON), or undefined when GCP is not configured. */
export function gcpConfigFromEnv(env: Readonly<Record<string, string | undefined>> = process.env): GcpConfig | undefined {
  const raw = env.GPU_FLEET_GCP_PROJECTS;
  if (!raw) return undefined;
  let json: unknown;
  try {
    json = JSON.parse(raw);
  } catch {
    throw new GpuFleetError(
      `GPU_FLEET_GCP_PROJECTS must be JSON like [{"projectId":"my-project","zones":["us-central1-a"]}], got "${raw.slice(0, 80)}"`,
    );
  }
  const parsed = Projects.safeParse(json);
  if (!parsed.success)
    throw new GpuFleetError(
      `GPU_FLEET_GCP_PROJECTS: ${parsed.error.issues.map((i) => `${i.path.join('.') || '(top)'}: ${i.message}`).join('; ')}; expected [{"projectId":"my-project","zones":["us-central1-a"]}]`,
    );
  return {
    projects: parsed.data,
    ...(env.GPU_FLEET_GCP_CREDENTIALS_SECRET ? { credentialsSecret: env.GPU_FLEET_GCP_CREDENTIALS_SECRET } : {}),
  };
}

const ServiceAccountKey = z.looseObject({
  type: z.literal('service_account').optional(),
  client_email: z.string().email(),
  private_key: z.string().min(1),
  project_id: z.string().optional(),
});

/** The service account key stored in Secrets Manager (the JSON file GCP gives for a key). */
export async function gcpCredentialsFromSecret(sm: SecretsManagerClient, secretId: string): Promise<GcpClientOptions['credentials']> {
  const out = await sm.send(new GetSecretValueCommand({ SecretId: secretId }));
  let json: unknown;
  try {
    json = JSON.parse(out.SecretString ?? '');
  } catch {
    throw new GpuFleetError(
      `secret ${secretId} is not JSON: store the service account's key file (with client_email and private_key) as the secret string`,
    );
  }
  const key = ServiceAccountKey.safeParse(json);
  if (!key.success)
    throw new GpuFleetError(
      `secret ${secretId} is not a service account key: ${key.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}`,
    );
  return { client_email: key.data.client_email, private_key: key.data.private_key };
}

/** gpu-fleet's GCP ports: node groups, preemption notices, and catalogue and prices from the shipped GCP data. */
export function gcpPorts(config: GcpConfig, clients: GcpClients, clock: Clock) {
  const groups = new MigNodeGroups(clients, { projects: config.projects, clock });
  const catalog = shippedCatalog();
  return {
    groups,
    preemptions: new GcpPreemptions(clients.zoneOperations, groups, { projects: config.projects, clock }),
    catalog: new GcpMachineTypeCatalog(clients.machineTypes, config.projects, new ShippedCatalogSource(catalog)),
    prices: new ShippedPriceSource(catalog),
  };
}

export { gcpClients };
