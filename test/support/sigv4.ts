import type { IncomingMessage } from 'node:http';
import { Sha256 } from '@smithy/core/checksum';
import { SignatureV4 } from '@smithy/signature-v4';
import type { AwsCredentialIdentity } from '@smithy/types';

/**
 * What IAM does in front of a function URL with IAM auth, for the local servers that stand in for
 * one (the agent API's and the people API's): the request's SigV4 signature (service `lambda`) is
 * recomputed with the caller's secret and must match. The caller is named by its access key.
 */
export async function checkSigV4(
  req: IncomingMessage,
  url: URL,
  body: string,
  credentialsOf: (accessKeyId: string) => AwsCredentialIdentity | undefined,
): Promise<{ accessKeyId: string } | { error: string }> {
  const m =
    /^AWS4-HMAC-SHA256 Credential=([^/]+)\/(\d{8})\/([^/]+)\/lambda\/aws4_request, SignedHeaders=([^,]+), Signature=([0-9a-f]{64})$/.exec(
      req.headers.authorization ?? '',
    );
  if (!m) return { error: 'missing or malformed SigV4 authorization' };
  const [, accessKeyId, , region, signedHeaders, signature] = m;
  const credentials = credentialsOf(accessKeyId!);
  if (!credentials) return { error: `unknown access key ${accessKeyId}` };
  const headers: Record<string, string> = {};
  for (const h of signedHeaders!.split(';')) headers[h] = String(req.headers[h] ?? '');
  const date = String(req.headers['x-amz-date'] ?? '');
  const signingDate = new Date(
    `${date.slice(0, 4)}-${date.slice(4, 6)}-${date.slice(6, 8)}T${date.slice(9, 11)}:${date.slice(11, 13)}:${date.slice(13, 15)}Z`,
  );
  const signer = new SignatureV4({ service: 'lambda', region: region!, credentials, sha256: Sha256 });
  const again = await signer.sign(
    { method: req.method ?? 'POST', protocol: 'http:', hostname: url.hostname, path: url.pathname, query: {}, headers, body },
    { signingDate },
  );
  const got = /Signature=([0-9a-f]{64})/.exec(String(again.headers.authorization))?.[1];
  return got === signature
    ? { accessKeyId: accessKeyId! }
    : { error: 'The request signature we calculated does not match the signature you provided' };
}

/** A request's body as text. */
export function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((done, reject) => {
    let text = '';
    req.setEncoding('utf8');
    req.on('data', (c: string) => (text += c));
    req.on('end', () => done(text));
    req.on('error', reject);
  });
}
