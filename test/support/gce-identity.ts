import { generateKeyPairSync, sign } from 'node:crypto';

/**
 * A stand-in for Google's signer of instance identity tokens: an RSA key of its own, its public
 * half as Google publishes its certificates (by key id), and tokens shaped as a GCE metadata
 * server issues them with `format=full` (https://cloud.google.com/compute/docs/instances/verifying-instance-identity).
 */
export function gceTokenSigner(kid = 'test-key-1') {
  const { privateKey, publicKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  const certs = { [kid]: publicKey.export({ type: 'spki', format: 'pem' }).toString() };
  const b64 = (v: unknown) => Buffer.from(JSON.stringify(v)).toString('base64url');
  return {
    certs: async () => certs,
    /** A token for `instance` in `project`, for `audience`, issued `ageSec` ago (an hour's lifetime, as Google's). */
    token(o: {
      audience: string;
      instance: string;
      project?: string;
      email?: string;
      ageSec?: number;
      full?: boolean;
      nowSec?: number;
      key?: typeof privateKey;
    }): string {
      const iat = (o.nowSec ?? Math.floor(Date.now() / 1000)) - (o.ageSec ?? 0);
      const payload = {
        iss: 'https://accounts.google.com',
        aud: o.audience,
        azp: '112233445566778899000',
        sub: '112233445566778899000',
        email: o.email ?? 'gpu-fleet-node@ml-prod.iam.gserviceaccount.com',
        email_verified: true,
        iat,
        exp: iat + 3600,
        ...(o.full === false
          ? {}
          : {
              google: {
                compute_engine: {
                  project_id: o.project ?? 'ml-prod',
                  project_number: 123456789012,
                  zone: 'us-central1-a',
                  instance_id: '4417370290000001234',
                  instance_name: o.instance,
                  instance_creation_timestamp: iat - 600,
                },
              },
            }),
      };
      const signed = `${b64({ alg: 'RS256', kid, typ: 'JWT' })}.${b64(payload)}`;
      return `${signed}.${sign('sha256', Buffer.from(signed), o.key ?? privateKey).toString('base64url')}`;
    },
    otherKey: () => generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey,
  };
}
