import type { SignatureV4 } from '@smithy/signature-v4';
import type { AwsCredentialIdentity, AwsCredentialIdentityProvider } from '@smithy/types';
import { functionUrlSigner, postToFunctionUrl } from './function-url.ts';
import { CloudError, type GpuFleetError, OutOfViewError, UsageError, type CloudErrorCode } from '../../core/errors.ts';
import type { NodeGroupProvider } from '../../core/ports.ts';
import type { CancelOutcome } from '../../core/services/cancel.ts';
import type { PeoplePorts } from '../../core/services/team-view.ts';
import type { Cloud } from '../../core/catalog.ts';
import { fromWire, type PeopleCall, type PeopleWhoami } from './people-api-protocol.ts';

export interface PeopleApiClientOptions {
  /** The people API's function URL (the stack's PeopleApiUrl output). */
  readonly url: string;
  readonly region: string;
  /** The person's credentials (default: the AWS SDK's chain: their profile, SSO session or assumed role). */
  readonly credentials?: AwsCredentialIdentity | AwsCredentialIdentityProvider;
  readonly timeoutMs?: number;
}

/**
 * A person's side of the people API (cloud/aws/people-api-protocol.ts): each call a POST signed
 * with SigV4 (service `lambda`) under the person's credentials. What comes back is the caller's
 * view; a refusal comes back as the error the CLI prints in one line (out of view, not a people
 * role), never as a stack trace.
 */
export class PeopleApiClient {
  private readonly signer: SignatureV4;
  private readonly url: URL;

  constructor(private readonly options: PeopleApiClientOptions) {
    const base = options.url.endsWith('/') ? options.url : `${options.url}/`;
    this.url = new URL('v1/call', base);
    this.signer = functionUrlSigner(options.region, options.credentials);
  }

  async call<T>(call: PeopleCall, ...args: unknown[]): Promise<T> {
    const payload = JSON.stringify({ call, args });
    const response = await postToFunctionUrl(this.url, payload, {
      signer: this.signer,
      timeoutMs: this.options.timeoutMs ?? 30_000,
      api: 'people API',
      op: call,
    });
    // The handler's refusals are { error, code }; the function URL's own (IAM said no) are { Message }.
    const parsed = response.body as { value?: unknown; error?: string; code?: string; message?: string; Message?: string };
    if (response.ok) return fromWire(parsed.value) as T;
    const message = parsed.error ?? parsed.message ?? parsed.Message ?? `HTTP ${response.status}`;
    if (parsed.code === 'out-of-view') throw new OutOfViewError('', message);
    if (parsed.code === 'usage') throw new UsageError(message);
    // Function URLs answer a signature IAM refuses (no lambda:InvokeFunctionUrl) with 403 and their own message.
    if (response.status === 403)
      throw new CloudError(
        'access-denied',
        `the people API refused the call (${message}); use your team's role or the platform's admin role (the stack's TeamRoleArns and AdminRoleArn outputs)`,
        { operation: call },
      );
    const code: CloudErrorCode =
      response.status === 404 ? 'not-found' : response.status === 400 || response.status === 413 ? 'invalid-request' : 'unavailable';
    throw new CloudError(code, `the people API: ${call}: ${message}`, { operation: call });
  }

  whoami(): Promise<PeopleWhoami> {
    return this.call<PeopleWhoami>('whoami');
  }

  cancel(jobId: string): Promise<CancelOutcome> {
    return this.call<CancelOutcome>('cancel', jobId);
  }

  /** The fleet's read side, as the caller's view answers it. `who` is this client's `whoami`. */
  ports(who: PeopleWhoami): PeoplePorts & {
    readonly providers: readonly Pick<NodeGroupProvider, 'cloud' | 'scope' | 'listGroups' | 'listInstances'>[];
    readonly bucketBytes: () => Promise<unknown>;
  } {
    const c = <T>(call: PeopleCall, ...args: unknown[]) => this.call<T>(call, ...args);
    return {
      jobs: {
        get: (id) => c('jobs.get', id),
        listByState: (states, team) => c('jobs.listByState', states, ...(team === undefined ? [] : [team])),
        listEndedSince: (since, until) => c('jobs.listEndedSince', since, until),
      },
      nodes: { list: () => c('nodes.list') },
      decisions: { get: (id) => c('decisions.get', id), recent: (limit) => c('decisions.recent', Math.min(1000, Math.max(1, limit))) },
      ledger: { read: (team, period) => c('ledger.read', team, period), list: () => c('ledger.list') },
      queue: { depth: (team) => c('queue.depth', team), teams: () => c('queue.teams') },
      budgets: { readTeamTags: () => c('budgets.readTeamTags') },
      budgetMemory: { load: () => c('budgetMemory.load') },
      ...(who.has.services ? { services: { get: (id: string) => c('services.get', id), list: () => c('services.list') } } : {}),
      ...(who.has.jobLogs
        ? { jobLogs: { read: (id: string, options?: unknown) => c('jobLogs.read', id, ...(options ? [options] : [])) } }
        : {}),
      gpuMetrics: { gpuSamples: (ids, windowSec) => c('gpuMetrics.gpuSamples', ids, windowSec) },
      ...(who.has.byteLogs ? { byteLogs: (sinceMs: number) => c('byteLogs', sinceMs) } : {}),
      providers: who.providers.map((p, i) => ({
        cloud: p.cloud as Cloud,
        ...(p.scope ? { scope: p.scope } : {}),
        listGroups: () => c('providers.listGroups', i),
        listInstances: () => c('providers.listInstances', i),
      })),
      bucketBytes: () => c('bucketBytes'),
    } as ReturnType<PeopleApiClient['ports']>;
  }
}

/** An error the CLI shows when a budget tag write is refused by IAM (the team's role may not tag its own queue). */
export function budgetRefused(team: string, who: PeopleWhoami | undefined, cause: unknown): GpuFleetError {
  const own = who?.view.kind === 'team' && who.view.team === team;
  const setsOwn = who?.setsOwnBudget[team];
  const why = !who
    ? 'your credentials may not tag its queue'
    : who.view.kind === 'admin'
      ? "the admin role's tag write was refused; check that the stack's AdminRole is the one in use"
      : !own
        ? `your role (${who.role}) is team ${who.view.team}'s and may never tag another team's queue`
        : setsOwn
          ? `the fleet lets team ${team} set its own budget, but the tag write was refused all the same (is the role ${who.role} the stack's?)`
          : `the platform keeps team ${team}'s budget: the fleet config says teams[].setsOwnBudget is false for ${team}, so only the platform's admin role may tag its queue; ask the platform team, or ask them to set setsOwnBudget: true`;
  return new CloudError(
    'access-denied',
    `budget set --team ${team}: refused: ${why}`,
    { operation: 'TagQueue', resource: team },
    { cause },
  );
}
