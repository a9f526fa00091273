import { defaultProvider } from '@aws-sdk/credential-provider-node';
import { Sha256 } from '@smithy/core/checksum';
import { SignatureV4 } from '@smithy/signature-v4';
import type { AwsCredentialIdentity, AwsCredentialIdentityProvider } from '@smithy/types';
import { CloudError } from '../../core/errors.ts';

/**
 * One JSON call to a Lambda function URL, as the agent API's and the people API's clients make
 * them: a POST signed with SigV4 (service `lambda`) by the caller's credentials, or carrying its
 * own `Authorization` (a GCE machine's identity token) where the URL is unsigned.
 */

/** A signer for function URLs with IAM auth: the given credentials, else the AWS SDK's chain. */
export function functionUrlSigner(region: string, credentials?: AwsCredentialIdentity | AwsCredentialIdentityProvider): SignatureV4 {
  return new SignatureV4({ service: 'lambda', region, credentials: credentials ?? defaultProvider(), sha256: Sha256 });
}

export interface FunctionUrlAnswer {
  readonly ok: boolean;
  readonly status: number;
  /** The body as JSON; a body that is not JSON as `{ error: its first 500 characters }`. */
  readonly body: Record<string, unknown>;
}

/**
 * POSTs `payload` to `url` and reads the answer. A call that gets no answer (the network, the
 * timeout) is `unavailable`, naming `api` and `op`; any answer, refusals included, is returned.
 */
export async function postToFunctionUrl(
  url: URL,
  payload: string,
  o: {
    readonly signer: SignatureV4;
    /** Sent as the Authorization header in place of a signature (an unsigned URL's own scheme). */
    readonly authorization?: () => Promise<string>;
    readonly headers?: Readonly<Record<string, string>>;
    readonly timeoutMs: number;
    readonly api: string;
    readonly op: string;
  },
): Promise<FunctionUrlAnswer> {
  const headers = { host: url.host, 'content-type': 'application/json', ...o.headers };
  const sent = o.authorization
    ? { ...headers, authorization: await o.authorization() }
    : (
        await o.signer.sign({
          method: 'POST',
          protocol: url.protocol,
          hostname: url.hostname,
          ...(url.port ? { port: Number(url.port) } : {}),
          path: url.pathname,
          query: {},
          headers,
          body: payload,
        })
      ).headers;
  let response: Response;
  try {
    response = await fetch(url, { method: 'POST', headers: sent, body: payload, signal: AbortSignal.timeout(o.timeoutMs) });
  } catch (error) {
    throw new CloudError(
      'unavailable',
      `the ${o.api} (${url.host}) did not answer ${o.op}: ${(error as Error).message}`,
      { operation: o.op },
      { cause: error },
    );
  }
  const text = await response.text();
  let body: Record<string, unknown>;
  try {
    body = JSON.parse(text) as Record<string, unknown>;
  } catch {
    body = { error: text.slice(0, 500) };
  }
  return { ok: response.ok, status: response.status, body };
}
