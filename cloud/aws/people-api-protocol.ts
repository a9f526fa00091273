import * as z from 'zod/mini';
import { isValidTeamId } from '../../core/budget.ts';
import { JOB_STATES } from '../../core/job.ts';

/**
 * The people API: what `gpu-fleet status | explain | logs | cancel | budget | report` ask a
 * deployed fleet, through one function URL with IAM auth. A person calls it under a role: one of
 * the stack's team roles, whose calls are answered for that team only, or its admin role, which
 * sees every team (infra/stack.ts makes them; functions/people-api.ts answers). People's
 * credentials never read the tables, the logs or the metrics themselves.
 *
 * Each call is one POST of `{ call, args }` to `/v1/call`; the answer is `{ value }`, or
 * `{ error, code }` with the HTTP status that says why (403 out of view or not a people role, 400 a
 * bad call, 404 no such thing, 502 a cloud call failed behind the API).
 */

const id = z.string().check(z.minLength(1), z.maxLength(512));
const team = z.string().check(z.refine(isValidTeamId, { error: 'a team name: lowercase letters, digits and "-", at most 32' }));
const ms = z.number().check(z.int(), z.gte(0));
const none = z.tuple([]);

export const PEOPLE_CALLS = {
  whoami: none,
  'jobs.get': z.tuple([id]),
  'jobs.listByState': z.tuple([z.array(z.enum(JOB_STATES)).check(z.minLength(1), z.maxLength(JOB_STATES.length)), z.optional(team)]),
  // The ended-jobs index is by day: a window of years would be thousands of queries. A report's periods are far shorter.
  'jobs.listEndedSince': z
    .tuple([ms, ms])
    .check(z.refine(([since, until]) => until - since <= 400 * 86_400_000, { error: 'a window of at most 400 days' })),
  'nodes.list': none,
  'decisions.get': z.tuple([id]),
  'decisions.recent': z.tuple([z.number().check(z.int(), z.gte(1), z.lte(1000))]),
  'ledger.read': z.tuple([team, z.string().check(z.maxLength(64))]),
  'ledger.list': none,
  'queue.depth': z.tuple([team]),
  'queue.teams': none,
  'budgets.readTeamTags': none,
  'budgetMemory.load': none,
  'services.get': z.tuple([id]),
  'services.list': none,
  'jobLogs.read': z.tuple([
    id,
    z.optional(z.strictObject({ attempt: z.optional(z.number().check(z.int(), z.gte(1))), sinceMs: z.optional(ms) })),
  ]),
  'gpuMetrics.gpuSamples': z.tuple([z.array(id).check(z.maxLength(10_000)), z.number().check(z.int(), z.gte(1), z.lte(86_400))]),
  byteLogs: z.tuple([ms]),
  bucketBytes: none,
  'providers.listGroups': z.tuple([z.number().check(z.int(), z.gte(0), z.lte(64))]),
  'providers.listInstances': z.tuple([z.number().check(z.int(), z.gte(0), z.lte(64))]),
  cancel: z.tuple([id]),
} as const;

export type PeopleCall = keyof typeof PEOPLE_CALLS;

export const PeopleRequestSchema = z.strictObject({
  call: z.enum(Object.keys(PEOPLE_CALLS) as [PeopleCall, ...PeopleCall[]]),
  args: z._default(z.array(z.unknown()), []),
});

/** What `whoami` answers: who the caller is to the fleet, and what a client needs to open it. */
export interface PeopleWhoami {
  /** `admin`, or the one team the caller's role sees. */
  readonly view: { readonly kind: 'admin' } | { readonly kind: 'team'; readonly team: string };
  /** The caller's role, as the API saw it. */
  readonly role: string;
  /** The teams in view (every team for the admin). */
  readonly teams: readonly string[];
  /** Per team in view: whether its own role may tag its queue (set its own budget), as the fleet config says. */
  readonly setsOwnBudget: Readonly<Record<string, boolean>>;
  /** The node groups' providers, in the order `providers.*` calls index them. */
  readonly providers: readonly { readonly cloud: string; readonly scope?: string }[];
  /** What `report` and `budget` read of the fleet's policy. */
  readonly policy: { readonly reconcileIntervalSec: number; readonly defaultRuntimeSec: number };
  /** Whether the fleet keeps job output, services, and the checkpoint bytes' index. */
  readonly has: { readonly jobLogs: boolean; readonly services: boolean; readonly byteLogs: boolean };
  /** Where the checkpoint bytes are kept and their path's prices (for `report`), when the fleet has the index. */
  readonly bytes?: unknown;
}

/** Maps do not survive JSON: they travel as `{ "$map": [[k, v], ...] }`. */
export function toWire(value: unknown): unknown {
  if (value instanceof Map) return { $map: [...value].map(([k, v]) => [k, toWire(v)]) };
  if (Array.isArray(value)) return value.map(toWire);
  if (value && typeof value === 'object') return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, toWire(v)]));
  return value;
}

export function fromWire(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(fromWire);
  if (value && typeof value === 'object') {
    const m = (value as { $map?: unknown }).$map;
    if (Array.isArray(m) && Object.keys(value).length === 1) return new Map(m.map(([k, v]: [unknown, unknown]) => [k, fromWire(v)]));
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, fromWire(v)]));
  }
  return value;
}

/** The role a caller's signed ARN names (an assumed-role session, or the role itself), or undefined for any other principal. */
export function callerRole(userArn: string | undefined): string | undefined {
  return (
    /^arn:aws[a-z-]*:sts::\d{12}:assumed-role\/([\w+=,.@-]+)\/[\w+=,.@-]+$/.exec(userArn ?? '')?.[1] ??
    /^arn:aws[a-z-]*:iam::\d{12}:role\/(?:[\w+=,.@-]+\/)*([\w+=,.@-]+)$/.exec(userArn ?? '')?.[1]
  );
}

/** The people roles a deployed API honours: role name → the team it sees, or `*` for the admin role. */
export const PeopleRolesSchema = z.record(z.string().check(z.minLength(1), z.maxLength(64)), z.union([z.literal('*'), team]));

export const MAX_PEOPLE_RESPONSE_BYTES = 5_500_000;
