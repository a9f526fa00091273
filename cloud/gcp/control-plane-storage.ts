import { SecretsManagerClient } from '@aws-sdk/client-secrets-manager';
import type { Storage } from '@google-cloud/storage';
import { gcpCredentialsFromSecret } from './credentials.ts';
import { gcsStorage } from './storage.ts';

/**
 * The control plane's Cloud Storage client (reconcile's sweeps, the agent API's signed reads): the
 * service account key from the secret the config names, read once per cold start; without one, the
 * environment's default credentials.
 */
export async function controlPlaneStorage(gcp: { readonly credentialsSecret?: string }, region: string): Promise<Storage> {
  const credentials = gcp.credentialsSecret
    ? await gcpCredentialsFromSecret(new SecretsManagerClient({ region }), gcp.credentialsSecret)
    : undefined;
  return gcsStorage(credentials ? { credentials } : {});
}
