import type { ReservationSelectorTerm } from './aws/ec2-reservations.ts';
import type { DiscountPlan } from '../core/discounts.ts';
import { parseUsd } from '../core/money.ts';
import { isValidTeamId } from '../core/budget.ts';
import { GCS_ROOT_RE, S3_PATHS, type NetworkLayout, type S3Path, type StoreRoot } from '../core/bytes.ts';
import { regionOfZone } from '../core/catalog.ts';
import { ConfigError } from '../core/errors.ts';
import { ImagePolicySchema, type ImagePolicy } from '../core/images.ts';
import '../core/schema.ts';
import * as z from 'zod/mini';
import { DEFAULT_POLICY, type Policy } from '../core/snapshot.ts';
import type { TableNames } from './aws/tables.ts';
import type { GcpScope } from './gcp/mig-node-groups.ts';

/**
 * gpu-fleet's settings from the environment: what the stack sets for each function, what the
 * node groups' user data writes for the agent, and what a person sets (or the CLI reads from the
 * deployed stack's outputs) to run a command. One schema, so every entry point reads a variable
 * the same way and a bad value is named with what is allowed. Region and credentials come from
 * the standard AWS chain; `AWS_ENDPOINT_URL` and `AWS_ENDPOINT_URL_<SERVICE>` point any client at
 * an AWS-compatible endpoint.
 */

export interface FleetConfig {
  readonly region: string;
  readonly tables: TableNames;
  readonly checkpointBucket: string;
  /**
   * Days a checkpoint no attempt will resume from is kept (the sweep's retention; the newest of a
   * live job is kept always). Undefined: no sweep, nothing is deleted (the stack always sets it).
   */
  readonly checkpointRetentionDays?: number;
  readonly teamQueuePrefix: string;
  readonly deadLetterQueueUrl?: string;
  readonly reconcileFunction?: string;
  readonly lifecycleTimeoutSec: number;
  readonly policy: Policy;
  /** GCP managed instance groups beside the Auto Scaling groups; undefined when GCP is not configured. */
  readonly gcp?: {
    readonly projects: readonly GcpScope[];
    readonly credentialsSecret?: string;
    /**
     * A Cloud Storage checkpoint root per GCP region (`us-central1` → `gs://bucket/prefix/`): that
     * region's machines save there, so their bytes stay in the region. Absent: GCP machines save
     * into the fleet's S3 bucket (internet egress both ways).
     */
    readonly checkpointRoots?: Readonly<Record<string, string>>;
  };
  /** Services and their load balancer target groups (service id → ARN); undefined: the fleet runs no services. */
  readonly services?: {
    readonly targetGroups: Readonly<Record<string, string>>;
    /** The ports the machines let only the load balancers reach; a service on another is refused at intake. Undefined: not checked. */
    readonly ports?: readonly number[];
  };
  /** Which capacity reservations gpu-fleet may use (ids or tags); undefined: those tagged gpu-fleet:managed=true. */
  readonly reservationSelector?: readonly ReservationSelectorTerm[];
  /** Savings Plans and Reserved Instances declared per instance family; undefined: none. */
  readonly discounts?: readonly DiscountPlan[];
  /** The CloudWatch Logs group of the jobs' output; undefined: output stays on the machines. */
  readonly jobLogGroup?: string;
  /** The people API's function URL (the stack's PeopleApiUrl): the CLI's people commands go through it when set. */
  readonly peopleApiUrl?: string;
  /** Which images specs may name (core/images.ts); undefined: any registry named by a DNS name, every repository to every team. */
  readonly images?: ImagePolicy;
  /**
   * How the machines reach the checkpoint bucket (its path's price: core/bytes.ts); the stack sets
   * it from its VPC. Unset: a NAT gateway the fleet does not know the zones of (the dearer path,
   * so a fleet that did not say is not billed too little).
   */
  readonly network: NetworkLayout;
}

/** The network of a fleet that does not say what it has: S3 through a NAT gateway. */
export const UNSTATED_NETWORK: NetworkLayout = { s3Path: 'nat', natZones: [] };

/** The variables, each with what is allowed, for messages and docs/operations.md. */
export const FLEET_VARIABLES = {
  GPU_FLEET_JOBS_TABLE: 'the jobs table (DynamoDB)',
  GPU_FLEET_NODES_TABLE: 'the nodes table',
  GPU_FLEET_CONTROL_TABLE: 'the control table (lease, journal, decisions, spend, checkpoints)',
  GPU_FLEET_IDEMPOTENCY_TABLE: 'the idempotency table (Powertools)',
  GPU_FLEET_CHECKPOINT_BUCKET: 'the checkpoint bucket, or a checkpoint root s3://bucket/prefix/ or file:///path/',
  GPU_FLEET_TEAM_QUEUE_PREFIX: 'the team queues are named <prefix><team>',
  GPU_FLEET_DLQ_URL: 'the dead-letter queue for messages that cannot be attributed to a team',
  GPU_FLEET_RECONCILE_FUNCTION: 'the reconcile function, invoked when capacity is lost',
  GPU_FLEET_LIFECYCLE_TIMEOUT_SEC: 'heartbeat timeout of the drain lifecycle hook',
  GPU_FLEET_RECONCILE_INTERVAL_SEC: 'seconds between reconciles',
  GPU_FLEET_IDLE_COOLDOWN_SEC: 'seconds a node stays empty before it is removed',
  GPU_FLEET_NOTICE_MARGIN_SEC: 'seconds kept back from a notice so checkpoints finish',
  GPU_FLEET_CHECKPOINT_RETENTION_DAYS: 'days a checkpoint no attempt will resume from is kept (the newest of a live job is kept always)',
  GPU_FLEET_SPOT_PATIENCE_SEC: 'how long interruptible work waits for spot',
  GPU_FLEET_GCP_PROJECTS: 'GCP projects and zones, JSON',
  GPU_FLEET_GCP_CREDENTIALS_SECRET: 'Secrets Manager secret with the GCP service account key',
  GPU_FLEET_GCP_CHECKPOINT_ROOTS: 'a Cloud Storage checkpoint root per GCP region, JSON ({"us-central1":"gs://bucket/checkpoints/"})',
  GPU_FLEET_SERVICE_TARGET_GROUPS: 'services and their target groups, JSON: {"team.name": "arn:aws:elasticloadbalancing:…:targetgroup/…"}',
  GPU_FLEET_SERVICE_PORTS:
    'the ports the machines let only the load balancers reach, JSON: [8000] (a service on another is refused; default: not checked)',
  GPU_FLEET_JOB_LOG_GROUP: "the CloudWatch Logs group of the jobs' output (a stream per attempt and rank)",
  GPU_FLEET_PEOPLE_API_URL:
    "the people API's function URL: the CLI's status, explain, logs, cancel, budget and report go through it, under the caller's team or admin role",
  GPU_FLEET_NETWORK:
    'how machines reach the checkpoint bucket, JSON: {"s3Path": "gateway-endpoint" | "nat" | "interface-endpoint", "natZones": ["us-east-1a", …]} (default: nat)',
  GPU_FLEET_DISCOUNTS:
    'Savings Plans / RIs per instance family, JSON: [{"family": "p4d", "discountPct": 40, "commitmentUsdPerHour": 30, "name": "sp-…"}]',
  GPU_FLEET_HOST_NETWORK_SHARING: 'pairs of teams whose host-network work may share a machine, JSON: [["nlp", "speech"]] (default: none)',
  GPU_FLEET_IMAGE_POLICY:
    'the registries specs may name and the repositories only some teams may run, JSON: {"registries": ["docker.io"], "teamRepositories": [{"repositories": "123456789012.dkr.ecr.us-east-1.amazonaws.com/nlp/*", "teams": ["nlp"]}]} (default: any registry named by a DNS name)',
  GPU_FLEET_RESERVATION_SELECTOR:
    'capacity reservations gpu-fleet may use, JSON: [{"id": "cr-…"}, {"tags": {"team": "nlp"}}] (default: tagged gpu-fleet:managed=true)',
} as const;

export type FleetVariable = keyof typeof FLEET_VARIABLES;
export type Environment = Readonly<Record<string, string | undefined>>;

const NAME_RE = /^[A-Za-z0-9_.-]{3,255}$/;
const GCP_ZONE_RE = /^[a-z]+-[a-z]+\d-[a-z]$/;

const name = (what: string) =>
  z.optional(z.string().check(z.regex(NAME_RE, { error: `must be ${what}: 3 to 255 letters, digits, "_", "-" or "."` })));
const seconds = (min: number, max: number) =>
  z.optional(
    z.string().check(
      z.refine((v) => /^\d+$/.test(v.trim()) && Number(v) >= min && Number(v) <= max, {
        error: `must be a whole number of seconds from ${min} to ${max}`,
      }),
    ),
  );

const GcpProjects = z
  .array(
    z.strictObject({
      projectId: z.string().check(z.minLength(1)),
      zones: z.array(z.string().check(z.regex(GCP_ZONE_RE, { error: 'GCP zones look like "us-central1-a"' }))).check(z.minLength(1)),
    }),
  )
  .check(z.minLength(1));

const EnvSchema = z.object({
  GPU_FLEET_JOBS_TABLE: name('a DynamoDB table name'),
  GPU_FLEET_NODES_TABLE: name('a DynamoDB table name'),
  GPU_FLEET_CONTROL_TABLE: name('a DynamoDB table name'),
  GPU_FLEET_IDEMPOTENCY_TABLE: name('a DynamoDB table name'),
  GPU_FLEET_CHECKPOINT_BUCKET: z.optional(
    z.string().check(
      z.refine((v) => /^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/.test(v) || /^(s3|file):\/\/./.test(v), {
        error: 'must be an S3 bucket name, or a checkpoint root s3://bucket/prefix/ or file:///path/',
      }),
    ),
  ),
  GPU_FLEET_TEAM_QUEUE_PREFIX: z.optional(
    z.string().check(z.regex(/^[A-Za-z0-9_-]{1,60}$/, { error: 'must be 1 to 60 letters, digits, "_" or "-" (an SQS queue name prefix)' })),
  ),
  GPU_FLEET_DLQ_URL: z.optional(z.string().check(z.regex(/^https?:\/\/\S+$/, { error: 'must be an SQS queue URL (https://…)' }))),
  GPU_FLEET_RECONCILE_FUNCTION: z.optional(
    z.string().check(z.regex(/^[A-Za-z0-9_:.-]{1,140}$/, { error: 'must be a Lambda function name or ARN' })),
  ),
  GPU_FLEET_LIFECYCLE_TIMEOUT_SEC: seconds(30, 7200),
  GPU_FLEET_RECONCILE_INTERVAL_SEC: seconds(10, 3600),
  GPU_FLEET_IDLE_COOLDOWN_SEC: seconds(0, 86_400),
  GPU_FLEET_NOTICE_MARGIN_SEC: seconds(0, 110),
  GPU_FLEET_CHECKPOINT_RETENTION_DAYS: z.optional(
    z.string().check(
      z.refine((v) => /^\d+$/.test(v.trim()) && Number(v) >= 1 && Number(v) <= 3650, {
        error: 'must be a whole number of days from 1 to 3650',
      }),
    ),
  ),
  GPU_FLEET_SPOT_PATIENCE_SEC: seconds(0, 86_400),
  GPU_FLEET_GCP_PROJECTS: z.optional(z.string()),
  GPU_FLEET_GCP_CHECKPOINT_ROOTS: z.optional(z.string()),
  GPU_FLEET_SERVICE_TARGET_GROUPS: z.optional(z.string()),
  GPU_FLEET_JOB_LOG_GROUP: z.optional(
    z.string().check(z.regex(/^[A-Za-z0-9_\-/.#]{1,512}$/, { error: 'must be a CloudWatch Logs group name (letters, digits, _ - / . #)' })),
  ),
  GPU_FLEET_GCP_CREDENTIALS_SECRET: z.optional(
    z.string().check(z.regex(/^[A-Za-z0-9/_+=.@-]{1,512}$/, { error: 'must be a Secrets Manager secret name or ARN' })),
  ),
  GPU_FLEET_PEOPLE_API_URL: z.optional(z.url({ protocol: /^https?$/, error: 'must be the people API function URL (https://…)' })),
});

/** Defaults for a fleet that is not the stack's (local runs against an AWS-compatible endpoint). */
export const DEFAULT_NAMES = {
  jobs: 'gpu-fleet-jobs',
  nodes: 'gpu-fleet-nodes',
  control: 'gpu-fleet-control',
  idempotency: 'gpu-fleet-idempotency',
  checkpointBucket: 'gpu-fleet-checkpoints',
  teamQueuePrefix: 'gpufleet-team-',
} as const;

/**
 * Reads and checks the environment. Throws one ConfigError naming every bad variable, the value
 * it has and what is allowed; variables left unset take their defaults. Empty values count as unset.
 */
export function fleetConfigFromEnv(env: Environment = process.env): FleetConfig {
  const present: Record<string, string> = {};
  for (const key of Object.keys(FLEET_VARIABLES)) {
    const v = env[key];
    if (v !== undefined && v.trim() !== '') present[key] = v.trim();
  }
  const problems: string[] = [];
  const parsed = EnvSchema.safeParse(present);
  if (!parsed.success) {
    for (const issue of parsed.error.issues) {
      const key = String(issue.path[0] ?? '(environment)');
      problems.push(`${key}="${present[key] ?? ''}" ${issue.message}`);
    }
  }
  const gcp = readGcp(present, problems);
  const gcpRoots = readGcpCheckpointRoots(present, gcp, problems);
  const targetGroups = readTargetGroups(present, problems);
  const servicePorts = readServicePorts(present, problems);
  const reservationSelector = readReservationSelector(present, problems);
  const discounts = readDiscounts(present, problems);
  const network = readNetwork(present, problems);
  const hostNetworkSharing = readHostNetworkSharing(present, problems);
  const images = readImagePolicy(present, problems);
  if (problems.length > 0) throw new ConfigError('the environment', problems, { what: 'gpu-fleet environment' });
  const e = parsed.data!;
  const num = (v: string | undefined, fallback: number) => (v === undefined ? fallback : Number(v));
  return {
    region: env.AWS_REGION?.trim() || env.AWS_DEFAULT_REGION?.trim() || 'us-east-1',
    tables: {
      jobs: e.GPU_FLEET_JOBS_TABLE ?? DEFAULT_NAMES.jobs,
      nodes: e.GPU_FLEET_NODES_TABLE ?? DEFAULT_NAMES.nodes,
      control: e.GPU_FLEET_CONTROL_TABLE ?? DEFAULT_NAMES.control,
      idempotency: e.GPU_FLEET_IDEMPOTENCY_TABLE ?? DEFAULT_NAMES.idempotency,
    },
    checkpointBucket: e.GPU_FLEET_CHECKPOINT_BUCKET ?? DEFAULT_NAMES.checkpointBucket,
    ...(e.GPU_FLEET_CHECKPOINT_RETENTION_DAYS ? { checkpointRetentionDays: Number(e.GPU_FLEET_CHECKPOINT_RETENTION_DAYS) } : {}),
    teamQueuePrefix: e.GPU_FLEET_TEAM_QUEUE_PREFIX ?? DEFAULT_NAMES.teamQueuePrefix,
    ...(e.GPU_FLEET_DLQ_URL ? { deadLetterQueueUrl: e.GPU_FLEET_DLQ_URL } : {}),
    ...(e.GPU_FLEET_RECONCILE_FUNCTION ? { reconcileFunction: e.GPU_FLEET_RECONCILE_FUNCTION } : {}),
    lifecycleTimeoutSec: num(e.GPU_FLEET_LIFECYCLE_TIMEOUT_SEC, DEFAULT_POLICY.drainHookTimeoutSec),
    policy: {
      ...DEFAULT_POLICY,
      drainHookTimeoutSec: num(e.GPU_FLEET_LIFECYCLE_TIMEOUT_SEC, DEFAULT_POLICY.drainHookTimeoutSec),
      reconcileIntervalSec: num(e.GPU_FLEET_RECONCILE_INTERVAL_SEC, DEFAULT_POLICY.reconcileIntervalSec),
      idleCooldownSec: num(e.GPU_FLEET_IDLE_COOLDOWN_SEC, DEFAULT_POLICY.idleCooldownSec),
      noticeMarginSec: num(e.GPU_FLEET_NOTICE_MARGIN_SEC, DEFAULT_POLICY.noticeMarginSec),
      spotPatienceSec: num(e.GPU_FLEET_SPOT_PATIENCE_SEC, DEFAULT_POLICY.spotPatienceSec),
      ...(hostNetworkSharing ? { hostNetworkSharing } : {}),
    },
    ...(images ? { images } : {}),
    ...(gcp
      ? {
          gcp: {
            projects: gcp,
            ...(e.GPU_FLEET_GCP_CREDENTIALS_SECRET ? { credentialsSecret: e.GPU_FLEET_GCP_CREDENTIALS_SECRET } : {}),
            ...(gcpRoots ? { checkpointRoots: gcpRoots } : {}),
          },
        }
      : {}),
    ...(targetGroups ? { services: { targetGroups, ...(servicePorts ? { ports: servicePorts } : {}) } } : {}),
    network,
    ...(reservationSelector ? { reservationSelector } : {}),
    ...(discounts ? { discounts } : {}),
    ...(e.GPU_FLEET_JOB_LOG_GROUP ? { jobLogGroup: e.GPU_FLEET_JOB_LOG_GROUP } : {}),
    ...(e.GPU_FLEET_PEOPLE_API_URL ? { peopleApiUrl: e.GPU_FLEET_PEOPLE_API_URL } : {}),
  };
}

/** A variable holding JSON, parsed; undefined when it is unset, or when it is not JSON (the problem noted with `hint`, what to give). */
function readJsonVar(present: Record<string, string>, name: string, hint: string, problems: string[]): { json: unknown } | undefined {
  const raw = present[name];
  if (raw === undefined) return undefined;
  try {
    return { json: JSON.parse(raw) as unknown };
  } catch {
    problems.push(`${name}="${raw.slice(0, 80)}" is not JSON; ${hint}`);
    return undefined;
  }
}

/** Discount plans, each checked: an instance family, a discount under 100%, a commitment in dollars per hour. */
function readDiscounts(present: Record<string, string>, problems: string[]): DiscountPlan[] | undefined {
  const example = 'e.g. [{"family":"p4d","discountPct":40,"commitmentUsdPerHour":30}]';
  const read = readJsonVar(present, 'GPU_FLEET_DISCOUNTS', example, problems);
  if (!read) return undefined;
  const json = read.json;
  if (!Array.isArray(json)) {
    problems.push(`GPU_FLEET_DISCOUNTS must be a JSON list of plans, ${example}`);
    return undefined;
  }
  const out: DiscountPlan[] = [];
  const seen = new Set<string>();
  for (const [i, item] of json.entries()) {
    const d = item as { family?: unknown; discountPct?: unknown; commitmentUsdPerHour?: unknown; name?: unknown };
    const commitment = typeof d.commitmentUsdPerHour === 'number' ? parseUsd(String(d.commitmentUsdPerHour)) : undefined;
    if (
      typeof d !== 'object' ||
      d === null ||
      typeof d.family !== 'string' ||
      !/^[a-z][a-z0-9-]{0,15}$/.test(d.family) ||
      typeof d.discountPct !== 'number' ||
      !(d.discountPct > 0 && d.discountPct < 100) ||
      commitment === undefined ||
      (d.name !== undefined && typeof d.name !== 'string')
    ) {
      problems.push(
        `GPU_FLEET_DISCOUNTS[${i}] must be {"family": "p4d", "discountPct": above 0 and under 100, "commitmentUsdPerHour": dollars per hour at the discounted rate}, got ${JSON.stringify(item)}`,
      );
      continue;
    }
    if (seen.has(d.family)) problems.push(`GPU_FLEET_DISCOUNTS[${i}]: family ${d.family} has a plan already; give one per family`);
    seen.add(d.family);
    out.push({
      family: d.family,
      discountBps: Math.round(d.discountPct * 100),
      commitmentMicroUsdPerHour: commitment,
      ...(typeof d.name === 'string' ? { name: d.name } : {}),
    });
  }
  return out;
}

const RESERVATION_ID_RE = /^cr-[0-9a-f]{8,17}$/;

/** The reservation selector terms, each checked: a reservation id, or tags (every one must match). */
function readReservationSelector(present: Record<string, string>, problems: string[]): ReservationSelectorTerm[] | undefined {
  const example = 'e.g. [{"id":"cr-0123456789abcdef0"},{"tags":{"gpu-fleet:managed":"true"}}]';
  const read = readJsonVar(present, 'GPU_FLEET_RESERVATION_SELECTOR', example, problems);
  if (!read) return undefined;
  const json = read.json;
  if (!Array.isArray(json) || json.length === 0) {
    problems.push(`GPU_FLEET_RESERVATION_SELECTOR must be a non-empty JSON list of terms, ${example}`);
    return undefined;
  }
  const out: ReservationSelectorTerm[] = [];
  for (const [i, term] of json.entries()) {
    const t = term as { id?: unknown; tags?: unknown };
    if (typeof t === 'object' && t !== null && typeof t.id === 'string' && RESERVATION_ID_RE.test(t.id) && t.tags === undefined)
      out.push({ id: t.id });
    else if (
      typeof t === 'object' &&
      t !== null &&
      t.id === undefined &&
      typeof t.tags === 'object' &&
      t.tags !== null &&
      Object.keys(t.tags).length > 0 &&
      Object.values(t.tags).every((v) => typeof v === 'string')
    )
      out.push({ tags: t.tags as Record<string, string> });
    else
      problems.push(
        `GPU_FLEET_RESERVATION_SELECTOR[${i}] must be {"id": "cr-…"} or {"tags": {"key": "value", …}}, got ${JSON.stringify(term)}`,
      );
  }
  return out;
}

const SERVICE_ID_RE = /^[a-z0-9][a-z0-9-]{0,31}\.[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;
const TARGET_GROUP_ARN_RE = /^arn:aws[a-z-]*:elasticloadbalancing:[a-z0-9-]+:\d{12}:targetgroup\/[A-Za-z0-9-]{1,32}\/[0-9a-f]{16}$/;

/** The deployment's network path for checkpoint bytes (written by the stack); unset → unstated, priced as NAT. */
function readNetwork(present: Record<string, string>, problems: string[]): NetworkLayout {
  const example = 'e.g. {"s3Path":"gateway-endpoint","natZones":["us-east-1a","us-east-1b"]}';
  const read = readJsonVar(present, 'GPU_FLEET_NETWORK', example, problems);
  if (!read) return UNSTATED_NETWORK;
  const json = read.json;
  const o = json && typeof json === 'object' && !Array.isArray(json) ? (json as Record<string, unknown>) : {};
  const s3Path = o.s3Path;
  const natZones = o.natZones ?? [];
  const extra = Object.keys(o).filter((k) => k !== 's3Path' && k !== 'natZones');
  if (typeof s3Path !== 'string' || !S3_PATHS.includes(s3Path as S3Path))
    problems.push(`GPU_FLEET_NETWORK: "s3Path" must be one of ${S3_PATHS.join(', ')}; got ${JSON.stringify(s3Path)} (${example})`);
  else if (!Array.isArray(natZones) || !natZones.every((z) => typeof z === 'string' && /^[a-z]{2}-[a-z]+-\d[a-z]$/.test(z)))
    problems.push(`GPU_FLEET_NETWORK: "natZones" must be a list of AWS zones like "us-east-1a"; got ${JSON.stringify(natZones)}`);
  else if (extra.length > 0) problems.push(`GPU_FLEET_NETWORK: unknown key(s) ${extra.join(', ')}; allowed: s3Path, natZones`);
  else return { s3Path: s3Path as S3Path, natZones: natZones as string[] };
  return UNSTATED_NETWORK;
}

/** Pairs of teams whose host-network work may share a machine, each a pair of two different team ids. */
function readHostNetworkSharing(present: Record<string, string>, problems: string[]): [string, string][] | undefined {
  const example = 'e.g. [["nlp","speech"]]';
  const read = readJsonVar(present, 'GPU_FLEET_HOST_NETWORK_SHARING', example, problems);
  if (!read) return undefined;
  const ok = (p: unknown): p is [string, string] =>
    Array.isArray(p) && p.length === 2 && p.every((x) => typeof x === 'string' && isValidTeamId(x)) && p[0] !== p[1];
  if (!Array.isArray(read.json) || !read.json.every(ok)) {
    problems.push(`GPU_FLEET_HOST_NETWORK_SHARING must be a JSON list of pairs of two different team ids, ${example}`);
    return undefined;
  }
  return read.json;
}

/** The image rules (core/images.ts), each part checked; a bad one is named with what is allowed. */
function readImagePolicy(present: Record<string, string>, problems: string[]): ImagePolicy | undefined {
  const example =
    'e.g. {"registries": ["docker.io", "nvcr.io"], "teamRepositories": [{"repositories": "nvcr.io/nlp/*", "teams": ["nlp"]}]}';
  const read = readJsonVar(present, 'GPU_FLEET_IMAGE_POLICY', example, problems);
  if (!read) return undefined;
  const parsed = ImagePolicySchema.safeParse(read.json);
  if (!parsed.success) {
    problems.push(
      `GPU_FLEET_IMAGE_POLICY ${parsed.error.issues.map((i) => `${i.path.join('.') || '(value)'}: ${i.message}`).join('; ')}; ${example}`,
    );
    return undefined;
  }
  return parsed.data;
}

/** The ports the machines let only the load balancers reach (a JSON list of ports). */
function readServicePorts(present: Record<string, string>, problems: string[]): number[] | undefined {
  const read = readJsonVar(present, 'GPU_FLEET_SERVICE_PORTS', 'e.g. [8000, 8080]', problems);
  if (!read) return undefined;
  if (!Array.isArray(read.json) || !read.json.every((p) => Number.isInteger(p) && (p as number) >= 1 && (p as number) <= 65535)) {
    problems.push('GPU_FLEET_SERVICE_PORTS must be a JSON list of ports from 1 to 65535, e.g. [8000, 8080]');
    return undefined;
  }
  return read.json as number[];
}

/** Service id → target group ARN, each checked; a bad entry is named with what is allowed. */
function readTargetGroups(present: Record<string, string>, problems: string[]): Record<string, string> | undefined {
  const example = 'e.g. {"nlp.chat":"arn:aws:elasticloadbalancing:us-west-2:123456789012:targetgroup/gf-nlp-chat/50dc6c495c0c9188"}';
  const read = readJsonVar(present, 'GPU_FLEET_SERVICE_TARGET_GROUPS', `give each service's target group, ${example}`, problems);
  if (!read) return undefined;
  const json = read.json;
  if (!json || typeof json !== 'object' || Array.isArray(json)) {
    problems.push(`GPU_FLEET_SERVICE_TARGET_GROUPS must be a JSON object of service id → target group ARN, ${example}`);
    return undefined;
  }
  const out: Record<string, string> = {};
  for (const [id, arn] of Object.entries(json as Record<string, unknown>)) {
    if (!SERVICE_ID_RE.test(id)) problems.push(`GPU_FLEET_SERVICE_TARGET_GROUPS: "${id}" is not a service id (team.name)`);
    else if (typeof arn !== 'string' || !TARGET_GROUP_ARN_RE.test(arn))
      problems.push(`GPU_FLEET_SERVICE_TARGET_GROUPS: the target group of ${id} must be a target group ARN, got ${JSON.stringify(arn)}`);
    else out[id] = arn;
  }
  return out;
}

/** GPU_FLEET_GCP_CHECKPOINT_ROOTS: a `gs://bucket/prefix/` root per GCP region the projects have zones in. */
function readGcpCheckpointRoots(
  present: Record<string, string>,
  projects: readonly GcpScope[] | undefined,
  problems: string[],
): Record<string, string> | undefined {
  const example = 'e.g. {"us-central1":"gs://my-fleet-checkpoints-us-central1/checkpoints/"}';
  const read = readJsonVar(present, 'GPU_FLEET_GCP_CHECKPOINT_ROOTS', `give a Cloud Storage root per GCP region, ${example}`, problems);
  if (!read) return undefined;
  const json = read.json;
  if (typeof json !== 'object' || json === null || Array.isArray(json)) {
    problems.push(`GPU_FLEET_GCP_CHECKPOINT_ROOTS must be an object of GCP region → gs:// root; ${example}`);
    return undefined;
  }
  if (!projects) {
    problems.push('GPU_FLEET_GCP_CHECKPOINT_ROOTS is set, but GPU_FLEET_GCP_PROJECTS is not: a root is for the machines of a GCP region');
    return undefined;
  }
  const regions = new Set(projects.flatMap((p) => p.zones.map((z) => regionOfZone('gcp', z))));
  const out: Record<string, string> = {};
  for (const [region, root] of Object.entries(json as Record<string, unknown>)) {
    if (!regions.has(region))
      problems.push(
        `GPU_FLEET_GCP_CHECKPOINT_ROOTS: "${region}" is no region of the zones in GPU_FLEET_GCP_PROJECTS (${[...regions].join(', ')})`,
      );
    else if (typeof root !== 'string' || !GCS_ROOT_RE.test(root))
      problems.push(
        `GPU_FLEET_GCP_CHECKPOINT_ROOTS.${region}: ${JSON.stringify(root)} is not a Cloud Storage root gs://bucket/prefix/ (ending in "/")`,
      );
    else out[region] = root;
  }
  return Object.keys(out).length > 0 ? out : undefined;
}

function readGcp(present: Record<string, string>, problems: string[]): GcpScope[] | undefined {
  const example = 'e.g. [{"projectId":"my-project","zones":["us-central1-a"]}]';
  const read = readJsonVar(present, 'GPU_FLEET_GCP_PROJECTS', `give the projects and their zones, ${example}`, problems);
  if (!read) return undefined;
  const json = read.json;
  const parsed = GcpProjects.safeParse(json);
  if (!parsed.success) {
    const why = parsed.error.issues.map((i) => `${i.path.join('.') || '(top)'}: ${i.message}`).join('; ');
    problems.push(`GPU_FLEET_GCP_PROJECTS="${present.GPU_FLEET_GCP_PROJECTS!.slice(0, 80)}" ${why}; ${example}`);
    return undefined;
  }
  return parsed.data;
}

/** The Cloud Storage roots of the fleet's GCP regions, each with its bucket's site (what a save there is priced at). */
export function gcpStoreRoots(config: Pick<FleetConfig, 'gcp'>): StoreRoot[] {
  return Object.entries(config.gcp?.checkpointRoots ?? {}).map(([region, root]) => ({ root, site: { cloud: 'gcp' as const, region } }));
}
