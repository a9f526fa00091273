import { GetSecretValueCommand, type SecretsManagerClient } from '@aws-sdk/client-secrets-manager';
import { GetParameterCommand, type SSMClient } from '@aws-sdk/client-ssm';
import { CloudError } from '../../core/errors.ts';
import type { SecretReader } from '../../core/ports.ts';
import type { SecretRef } from '../../core/secrets.ts';
import { translateAwsError } from './errors.ts';

/**
 * Reads a secret a job names by reference, for the agent API to hand to the attempt's machine: an
 * SSM parameter (SecureString decrypted) or a Secrets Manager secret's string. The value is
 * returned to the caller only, never logged; an error names the reference, never the value.
 */
export class AwsSecretReader implements SecretReader {
  constructor(
    private readonly ssm: SSMClient,
    private readonly secretsManager: SecretsManagerClient,
  ) {}

  async read(ref: SecretRef): Promise<string> {
    try {
      if (ref.kind === 'ssm') {
        const out = await this.ssm.send(new GetParameterCommand({ Name: ref.id, WithDecryption: true }));
        const value = out.Parameter?.Value;
        if (value === undefined)
          throw new CloudError('not-found', `SSM parameter ${ref.id} has no value`, { operation: 'GetParameter', resource: ref.id });
        return value;
      }
      const out = await this.secretsManager.send(new GetSecretValueCommand({ SecretId: ref.id }));
      if (out.SecretString === undefined)
        throw new CloudError(
          'invalid-request',
          `Secrets Manager secret ${ref.id} holds binary data; an environment variable takes a string (store it as a SecretString)`,
          { operation: 'GetSecretValue', resource: ref.id },
        );
      return out.SecretString;
    } catch (error) {
      if (error instanceof CloudError) throw error;
      throw translateAwsError(error, { operation: ref.kind === 'ssm' ? 'GetParameter' : 'GetSecretValue', resource: ref.id });
    }
  }
}
