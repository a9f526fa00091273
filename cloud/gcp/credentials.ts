import { GetSecretValueCommand, type SecretsManagerClient } from '@aws-sdk/client-secrets-manager';
import { ConfigError } from '../../core/errors.ts';
import '../../core/schema.ts';
import * as z from 'zod/mini';
import { translateAwsError } from '../aws/errors.ts';

/** A GCP service account's key, as the control plane holds it. */
export interface ServiceAccountCredentials {
  readonly client_email: string;
  readonly private_key: string;
}

const ServiceAccountKey = z.looseObject({
  type: z.optional(z.literal('service_account')),
  client_email: z.email(),
  private_key: z.string().check(z.minLength(1)),
  project_id: z.optional(z.string()),
});

/** The service account key stored in Secrets Manager (the JSON file GCP gives for a key). */
export async function gcpCredentialsFromSecret(sm: SecretsManagerClient, secretId: string): Promise<ServiceAccountCredentials> {
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
