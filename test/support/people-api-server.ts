import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { AwsCredentialIdentity } from '@smithy/types';
import type { LambdaFunctionURLEventWithIAMAuthorizer } from 'aws-lambda';
import { StaticBudgetTags } from '../../cloud/sim/memory-stores.ts';
import { lambdaContext } from '../../functions/context.ts';
import { observability } from '../../functions/observability.ts';
import { createPeopleApiHandler, type PeopleApiDeps } from '../../functions/people-api.ts';
import { checkSigV4, readBody } from './sigv4.ts';

const ACCOUNT = '123456789012';

/**
 * A fleet of two teams as the people API is told it: nlp (whose budget the platform keeps) and
 * vision (which sets its own), their roles and the admin role, as infra/stack.ts names them.
 */
export const TWO_TEAMS = {
  providers: [],
  roles: { 'GpuFleet-team-nlp': 'nlp', 'GpuFleet-team-vision': 'vision', 'GpuFleet-admin': '*' },
  teams: { nlp: { setsOwnBudget: false }, vision: { setsOwnBudget: true } },
  policy: { reconcileIntervalSec: 60, defaultRuntimeSec: 3600 },
} as const satisfies Pick<PeopleApiDeps, 'providers' | 'roles' | 'teams' | 'policy'>;

/** The two teams' budget tags on their queues (nlp $2,500, vision $900). */
export function twoTeamBudgets(): StaticBudgetTags {
  return new StaticBudgetTags(
    (['nlp', 'vision'] as const).map((team) => ({
      team,
      resource: `arn:aws:sqs:us-east-1:123456789012:gpu-fleet-team-${team}`,
      tags: { 'gpu-fleet:budget-usd': team === 'nlp' ? '2500' : '900' },
    })),
  );
}

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
    const out = await checkSigV4(req, url, body, (key) => byKey.get(key)?.credentials);
    return 'error' in out ? `Forbidden: ${out.error}` : byKey.get(out.accessKeyId)!;
  }

  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/`,
    calls,
    close: () => new Promise<void>((r) => server.close(() => r())),
  };
}
