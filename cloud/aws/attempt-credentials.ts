import { createHmac, timingSafeEqual } from 'node:crypto';
import { GetSecretValueCommand, type SecretsManagerClient } from '@aws-sdk/client-secrets-manager';
import { ConfigError } from '../../core/errors.ts';

/** The least key length taken (bytes): an HMAC-SHA256 key as long as its output. */
export const ATTEMPT_KEY_MIN_BYTES = 32;

/**
 * Per-attempt credentials of the agent API. The API mints one for each attempt on a machine's work
 * list when the machine reads its own record (`node/get`): an HMAC of the machine, the job and the
 * attempt under a key only the API holds, so it is checked without a store and cannot be made by
 * anyone else, nor moved to another machine, job or attempt. The agent keeps them in its memory
 * (cloud/aws/agent-api-client.ts) and never hands them to a container; the calls that act for a
 * job (its reads, its writes, its checkpoints, its output) carry the one of that job's attempt.
 */
export class AttemptCredentials {
  private readonly key: Buffer;

  constructor(key: Uint8Array | string) {
    this.key = typeof key === 'string' ? Buffer.from(key, 'utf8') : Buffer.from(key);
    if (this.key.length < ATTEMPT_KEY_MIN_BYTES)
      throw new ConfigError(
        'the attempt credential key',
        [`it has ${this.key.length} bytes; at least ${ATTEMPT_KEY_MIN_BYTES} are needed`],
        {
          what: 'agent API key',
        },
      );
  }

  private mac(nodeId: string, jobId: string, attempt: number): string {
    return createHmac('sha256', this.key).update(`gpu-fleet-attempt/v1\n${nodeId}\n${jobId}\n${attempt}`).digest('base64url');
  }

  /** The credential of `attempt` of `jobId` on machine `nodeId`: `v1.<attempt>.<mac>`. */
  mint(nodeId: string, jobId: string, attempt: number): string {
    return `v1.${attempt}.${this.mac(nodeId, jobId, attempt)}`;
  }

  /** The attempt a credential shown by `nodeId` for `jobId` stands for, or undefined when it is not one this key minted for them. */
  verify(nodeId: string, jobId: string, credential: string): number | undefined {
    const m = /^v1\.([1-9]\d{0,15})\.([A-Za-z0-9_-]{43})$/.exec(credential);
    if (!m) return undefined;
    const attempt = Number(m[1]);
    if (!Number.isSafeInteger(attempt)) return undefined;
    const expected = Buffer.from(this.mac(nodeId, jobId, attempt));
    const given = Buffer.from(m[2]!);
    return given.length === expected.length && timingSafeEqual(given, expected) ? attempt : undefined;
  }
}

/** The key from the secret the stack made for it (a random string of 64 characters), read once at a cold start. */
export async function attemptKeyFromSecret(sm: SecretsManagerClient, secretId: string): Promise<string> {
  const out = await sm.send(new GetSecretValueCommand({ SecretId: secretId }));
  const key = out.SecretString;
  if (!key || Buffer.byteLength(key, 'utf8') < ATTEMPT_KEY_MIN_BYTES)
    throw new ConfigError(
      `secret ${secretId}`,
      [`it must hold a string of at least ${ATTEMPT_KEY_MIN_BYTES} bytes (the agent API's key)`],
      {
        what: 'agent API key',
      },
    );
  return key;
}
