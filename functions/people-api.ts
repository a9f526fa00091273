import { injectLambdaContext } from '@aws-lambda-powertools/logger/middleware';
import { logMetrics } from '@aws-lambda-powertools/metrics/middleware';
import middy from '@middy/core';
import type { Context, LambdaFunctionURLEventWithIAMAuthorizer, LambdaFunctionURLResult } from 'aws-lambda';
import {
  callerRole,
  MAX_PEOPLE_RESPONSE_BYTES,
  PEOPLE_CALLS,
  PeopleRequestSchema,
  toWire,
  type PeopleCall,
  type PeopleWhoami,
} from '../cloud/aws/people-api-protocol.ts';
import { GpuFleetError, isCloudError, messageOf, OutOfViewError, UsageError } from '../core/errors.ts';
import type { Clock, JobStore, NodeGroupProvider, ServiceStore } from '../core/ports.ts';
import { cancelForPerson } from '../core/services/cancel.ts';
import { viewOf, type PeoplePorts, type Viewer } from '../core/services/team-view.ts';
import { MetricUnit, type Observability } from './observability.ts';

export interface PeopleApiDeps {
  /** The fleet's read side, unscoped: each call is answered through the caller's view of it (core/services/team-view.ts). */
  readonly ports: PeoplePorts;
  /** What a cancel writes. */
  readonly stores: { readonly jobs: JobStore; readonly services?: ServiceStore };
  readonly providers: readonly Pick<NodeGroupProvider, 'cloud' | 'scope' | 'listGroups' | 'listInstances'>[];
  /** The roles whose sessions may call: role name → the team it sees, or `*` for the platform's admin role. */
  readonly roles: Readonly<Record<string, string>>;
  /** The fleet's teams, each with whether its own role may tag its queue (set its own budget). */
  readonly teams: Readonly<Record<string, { readonly setsOwnBudget: boolean }>>;
  /** What `report` and `budget` read of the policy. */
  readonly policy: { readonly reconcileIntervalSec: number; readonly defaultRuntimeSec: number };
  /** The bucket's own count of what it holds (admin only: it is the whole fleet's). */
  readonly bucketBytes?: () => Promise<unknown>;
  /** Where checkpoint bytes are kept and their path's prices, passed on to `report`. */
  readonly bytes?: unknown;
  readonly clock: Clock;
  readonly obs: Observability;
}

/** A call the API refuses, with the HTTP status and the code the client keys on. */
class Refused extends GpuFleetError {
  override name = 'Refused';

  constructor(
    readonly status: number,
    message: string,
    readonly code: string,
  ) {
    super(message, { context: { status, code } });
  }
}

/**
 * The people API (cloud/aws/people-api-protocol.ts): the caller's role decides its view, and every
 * call is answered through that view. A team role's call about another team is refused as out of
 * view (403) from the id alone; a principal that is not one of the fleet's people roles is refused
 * before anything is read.
 */
export function createPeopleApiHandler(deps: PeopleApiDeps) {
  const { logger, metrics } = deps.obs;
  const allTeams = Object.keys(deps.teams).sort();

  const viewerOf = (event: LambdaFunctionURLEventWithIAMAuthorizer): { viewer: Viewer; role: string } => {
    const arn = event.requestContext?.authorizer?.iam?.userArn;
    const role = callerRole(arn);
    const seen = role === undefined ? undefined : deps.roles[role];
    if (role === undefined || seen === undefined)
      throw new Refused(
        403,
        `${arn ?? 'an unsigned caller'} is not one of this fleet's people roles: assume the role of your team (or the platform's admin role) to use gpu-fleet; the stack's TeamRoleArns and AdminRoleArn outputs name them`,
        'access-denied',
      );
    return { viewer: seen === '*' ? { kind: 'admin' } : { kind: 'team', team: seen }, role };
  };

  const answer = async (viewer: Viewer, role: string, call: PeopleCall, args: readonly unknown[]): Promise<unknown> => {
    const view = viewOf(deps.ports, viewer, allTeams);
    const inView = viewer.kind === 'admin' ? allTeams : allTeams.filter((t) => t === viewer.team);
    const a = args as unknown as readonly [never, never];
    switch (call) {
      case 'whoami':
        return {
          view: viewer,
          role,
          teams: inView,
          setsOwnBudget: Object.fromEntries(inView.map((t) => [t, deps.teams[t]!.setsOwnBudget])),
          providers: deps.providers.map((p) => ({ cloud: p.cloud, ...(p.scope ? { scope: p.scope } : {}) })),
          policy: { reconcileIntervalSec: deps.policy.reconcileIntervalSec, defaultRuntimeSec: deps.policy.defaultRuntimeSec },
          has: { jobLogs: !!deps.ports.jobLogs, services: !!deps.ports.services, byteLogs: !!deps.ports.byteLogs },
          ...(deps.bytes !== undefined ? { bytes: deps.bytes } : {}),
        } satisfies PeopleWhoami;
      case 'jobs.get':
        return view.jobs.get(a[0]);
      case 'jobs.listByState':
        return view.jobs.listByState(a[0], a[1]);
      case 'jobs.listEndedSince':
        return view.jobs.listEndedSince(a[0], a[1]);
      case 'nodes.list':
        return view.nodes.list();
      case 'decisions.get':
        return view.decisions.get(a[0]);
      case 'decisions.recent':
        return view.decisions.recent(a[0]);
      case 'ledger.read':
        return view.ledger.read(a[0], a[1]);
      case 'ledger.list':
        return view.ledger.list();
      case 'queue.depth':
        return view.queue.depth(a[0]);
      case 'queue.teams':
        return view.queue.teams();
      case 'budgets.readTeamTags':
        return view.budgets.readTeamTags();
      case 'budgetMemory.load':
        return view.budgetMemory ? view.budgetMemory.load() : new Map();
      case 'services.get':
        if (!view.services) throw new Refused(404, 'this fleet runs no services', 'not-found');
        return view.services.get(a[0]);
      case 'services.list':
        return view.services ? view.services.list() : [];
      case 'jobLogs.read':
        if (!view.jobLogs)
          throw new Refused(404, "this fleet keeps no job output (the stack's job log group is not configured)", 'not-found');
        return view.jobLogs.read(a[0], a[1]);
      case 'gpuMetrics.gpuSamples':
        return view.gpuMetrics ? view.gpuMetrics.gpuSamples(a[0], a[1]) : [];
      case 'byteLogs':
        return view.byteLogs ? view.byteLogs(a[0]) : [];
      case 'bucketBytes':
        // The bucket's total is every team's: a team's view has its own saves' bytes (byteLogs), not the total.
        return viewer.kind === 'admin' && deps.bucketBytes ? deps.bucketBytes() : undefined;
      case 'providers.listGroups':
      case 'providers.listInstances': {
        const p = deps.providers[a[0]];
        if (!p) throw new Refused(400, `no provider ${a[0]}; this fleet has ${deps.providers.length}`, 'invalid-request');
        return call === 'providers.listGroups' ? p.listGroups() : p.listInstances();
      }
      case 'cancel':
        return cancelForPerson(deps.stores, viewer, a[0], deps.clock.nowMs());
    }
  };

  const handle = async (event: LambdaFunctionURLEventWithIAMAuthorizer): Promise<LambdaFunctionURLResult> => {
    let call: string | undefined;
    let role: string | undefined;
    try {
      if (event.requestContext?.http?.method !== 'POST')
        throw new Refused(400, 'the people API takes POST requests only', 'invalid-request');
      if (event.rawPath !== '/v1/call') throw new Refused(404, `${event.rawPath} is not a people API path; POST /v1/call`, 'not-found');
      const who = viewerOf(event);
      role = who.role;
      let raw: unknown;
      try {
        raw = JSON.parse(event.isBase64Encoded ? Buffer.from(event.body ?? '', 'base64').toString('utf8') : (event.body ?? ''));
      } catch (error) {
        throw new Refused(400, `the body is not JSON: ${messageOf(error)}`, 'invalid-request');
      }
      const req = PeopleRequestSchema.safeParse(raw);
      if (!req.success)
        throw new Refused(
          400,
          `not a people API call: ${req.error.issues.map((i) => `${i.path.join('.') || '(body)'}: ${i.message}`).join('; ')}; the calls are ${Object.keys(PEOPLE_CALLS).join(', ')}`,
          'invalid-request',
        );
      call = req.data.call;
      const args = PEOPLE_CALLS[req.data.call].safeParse(req.data.args);
      if (!args.success)
        throw new Refused(
          400,
          `the arguments of ${call} are not valid: ${args.error.issues.map((i) => `${i.path.join('.') || '(args)'}: ${i.message}`).join('; ')}`,
          'invalid-request',
        );
      const value = await answer(who.viewer, who.role, req.data.call, args.data as readonly unknown[]);
      const body = JSON.stringify({ value: toWire(value) });
      if (Buffer.byteLength(body) > MAX_PEOPLE_RESPONSE_BYTES)
        throw new Refused(
          413,
          `the answer to ${call} is ${Buffer.byteLength(body)} bytes, over the API's ${MAX_PEOPLE_RESPONSE_BYTES}; narrow it (logs: --attempt or --since)`,
          'invalid-request',
        );
      metrics.addMetric('PeopleCalls', MetricUnit.Count, 1);
      return { statusCode: 200, headers: { 'content-type': 'application/json' }, body };
    } catch (error) {
      if (error instanceof Refused || error instanceof OutOfViewError || error instanceof UsageError) {
        const status = error instanceof Refused ? error.status : error instanceof OutOfViewError ? 403 : 400;
        const code = error instanceof Refused ? error.code : error instanceof OutOfViewError ? 'out-of-view' : 'usage';
        logger.warn('people call refused', { call, role, status, reason: error.message });
        metrics.addMetric('PeopleCallsRefused', MetricUnit.Count, 1);
        return reply(status, { error: error.message, code });
      }
      if (isCloudError(error) && error.code === 'not-found') return reply(404, { error: error.message, code: error.code });
      logger.error('people call failed', { call, role, error: messageOf(error) });
      return reply(isCloudError(error) ? 502 : 500, {
        error: error instanceof GpuFleetError ? error.message : `the people API failed: ${messageOf(error)}`,
        code: isCloudError(error) ? error.code : 'unavailable',
      });
    }
  };

  return middy(async (event: LambdaFunctionURLEventWithIAMAuthorizer, _context: Context) => handle(event))
    .use(injectLambdaContext(logger, { resetKeys: true }))
    .use(logMetrics(metrics));
}

function reply(statusCode: number, body: unknown): LambdaFunctionURLResult & { body: string } {
  return { statusCode, headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) };
}
