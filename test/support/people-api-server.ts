import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Sha256 } from '@smithy/core/checksum';
import { SignatureV4 } from '@smithy/signature-v4';
import type { AwsCredentialIdentity } from '@smithy/types';
import type { LambdaFunctionURLEventWithIAMAuthorizer } from 'aws-lambda';
import { lambdaContext } from '../../functions/context.ts';
import { observability } from '../../functions/observability.ts';
import { createPeopleApiHandler, type PeopleApiDeps } from '../../functions/people-api.ts';

const ACCOUNT = '123456789012';

/** A person's credentials under one role: the access key names the session, for the local IAM in front of the URL. */
export interface LocalPrincipal {
  readonly credentials: AwsCredentialIdentity;
  /** The role the session is of (what the function URL passes on as the caller). */
  readonly role: string;
  /** Whether IAM lets this principal call the URL (lambda:InvokeFunctionUrl); one without is refused before the function runs. */
  readonly mayInvoke: boolean;
}

export function principal(role: string, mayInvoke = true): LocalPrincipal {
  return {
    credentials: { accessKeyId: `AKIDPEOPLE${role.replace(/[^A-Za-z0-9]/g, '')}`, secretAccessKey: `secret-of-${role}` },
    role,
    mayInvoke,
  };
}

/**
 * The people API as a function URL with IAM auth would run it, on a local port: the SigV4 signature
 * is checked (recomputed with the caller's secret, as IAM does), a principal IAM would not let call
 * the URL gets the URL's own 403, and the caller becomes its role session in the event the real
 * handler reads.
 */
export async function startPeopleApi(deps: Omit<PeopleApiDeps, 'obs'>, principals: readonly LocalPrincipal[]) {
  const handler = createPeopleApiHandler({ ...deps, obs: observability('people-api-test') });
  const byKey = new Map(principals.map((p) => [p.credentials.accessKeyId, p]));
  const calls: { call?: string; role?: string; status: number }[] = [];
  const server: Server = createServer((req, res) => {
    void (async () => {
      const url = new URL(req.url ?? '/', 'http://localhost');
      const body = await readBody(req);
      const who = await verify(req, url, body);
      if (typeof who === 'string') {
        calls.push({ status: 403 });
        res.writeHead(403, { 'content-type': 'application/json' }).end(JSON.stringify({ Message: who }));
        return;
      }
      if (!who.mayInvoke) {
        calls.push({ role: who.role, status: 403 });
        // What a function URL answers a signed caller IAM does not allow (no lambda:InvokeFunctionUrl).
        res.writeHead(403, { 'content-type': 'application/json' }).end(
          JSON.stringify({
            Message:
              'Forbidden. For troubleshooting Function URL authorization issues, see: https://docs.aws.amazon.com/lambda/latest/dg/urls-auth.html',
          }),
        );
        return;
      }
      const event = {
        rawPath: url.pathname,
        body,
        isBase64Encoded: false,
        headers: req.headers,
        requestContext: {
          http: { method: req.method ?? 'GET', path: url.pathname },
          authorizer: { iam: { userArn: `arn:aws:sts::${ACCOUNT}:assumed-role/${who.role}/person` } },
        },
      } as unknown as LambdaFunctionURLEventWithIAMAuthorizer;
      const out = (await handler(event, lambdaContext('people-api'))) as { statusCode: number; body: string };
      calls.push({ role: who.role, status: out.statusCode, call: (JSON.parse(body || '{}') as { call?: string }).call });
      res.writeHead(out.statusCode, { 'content-type': 'application/json' }).end(out.body);
    })().catch((error: unknown) => res.writeHead(500).end(String(error)));
  });

  async function verify(req: IncomingMessage, url: URL, body: string): Promise<LocalPrincipal | string> {
    const m =
      /^AWS4-HMAC-SHA256 Credential=([^/]+)\/(\d{8})\/([^/]+)\/lambda\/aws4_request, SignedHeaders=([^,]+), Signature=([0-9a-f]{64})$/.exec(
        req.headers.authorization ?? '',
      );
    if (!m) return 'Forbidden: missing or malformed SigV4 authorization';
    const [, accessKeyId, , region, signedHeaders, signature] = m;
    const p = byKey.get(accessKeyId!);
    if (!p) return `The security token included in the request is invalid (${accessKeyId})`;
    const headers: Record<string, string> = {};
    for (const h of signedHeaders!.split(';')) headers[h] = String(req.headers[h] ?? '');
    const date = String(req.headers['x-amz-date'] ?? '');
    const signingDate = new Date(
      `${date.slice(0, 4)}-${date.slice(4, 6)}-${date.slice(6, 8)}T${date.slice(9, 11)}:${date.slice(11, 13)}:${date.slice(13, 15)}Z`,
    );
    const signer = new SignatureV4({ service: 'lambda', region: region!, credentials: p.credentials, sha256: Sha256 });
    const again = await signer.sign(
      {
        method: req.method ?? 'POST',
        protocol: 'http:',
        hostname: url.hostname,
        port: Number(url.port) || undefined,
        path: url.pathname,
        query: {},
        headers,
        body,
      },
      { signingDate },
    );
    const got = /Signature=([0-9a-f]{64})/.exec(String(again.headers.authorization))?.[1];
    return got === signature ? p : 'The request signature we calculated does not match the signature you provided';
  }

  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/`,
    calls,
    close: () => new Promise<void>((r) => server.close(() => r())),
  };
}

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((done, reject) => {
    let text = '';
    req.setEncoding('utf8');
    req.on('data', (c: string) => (text += c));
    req.on('end', () => done(text));
    req.on('error', reject);
  });
}
