import { imageProblem, type ImagePolicy } from '../images.ts';
import { isValidTeamId } from '../budget.ts';
import {
  jobIdFor,
  MAX_IDEMPOTENCY_TOKEN_LENGTH,
  MAX_STORED_JOB_BYTES,
  newPendingJob,
  newRejectedJob,
  storedBytes,
  type Job,
} from '../job.ts';
import { checkJobSpec, rejectedBody, rejectedBodyDigest, type JobSpec } from '../job-spec.ts';
import { secretProblems } from '../secrets.ts';
import type { Clock, FleetShape, JobStore, NodeGroupProvider, ServiceStore } from '../ports.ts';
import { ConflictError, messageOf, parseJson } from '../errors.ts';
import { newServiceRecord, type ServiceRecord } from '../serving/service.ts';
import type { InstanceTypeCatalog } from '../catalog.ts';
import { whyNoGroupHolds } from '../planner/capacity.ts';
import { rightsizeSubmission, type RightsizePorts } from './rightsizing.ts';

export type { FleetShape };

export interface IntakeMessage {
  /** The team whose queue the message arrived on. Never taken from the body. */
  readonly team: string;
  readonly body: string;
  /** The submitter's idempotency token, or the queue's message id. */
  readonly token: string;
  /**
   * When the message was first sent (SQS's SentTimestamp, which a redelivery keeps): it orders the
   * updates of one service, so a late or repeated older message never reverts a newer spec.
   */
  readonly sentAtMs?: number;
}

export type IntakeOutcome =
  | { readonly outcome: 'accepted'; readonly job: Job }
  | { readonly outcome: 'duplicate'; readonly job: Job }
  /** The token was used before for a different spec: the stored job stands and this one is not taken (a retry cannot help). */
  | { readonly outcome: 'token-reused'; readonly job: Job; readonly error: string }
  | { readonly outcome: 'rejected'; readonly job: Job; readonly errors: readonly string[] }
  /**
   * A service, stored as its record (`team.name`); its replicas are started by reconcile. `created`
   * is false for a repeat or an update of a service that exists (an update takes the new spec for
   * replicas started from then on; running ones keep theirs).
   */
  | {
      readonly outcome: 'service';
      readonly service: ServiceRecord;
      readonly created: boolean;
      /** The message was sent before the record's spec (or its cancel): it changed nothing. */
      readonly stale?: true;
    }
  /** Cannot be attributed to a team or given an id: the caller sends it to the dead-letter queue. */
  | { readonly outcome: 'unattributable'; readonly error: string };

/**
 * Takes one submitted job. A valid spec becomes a pending job; a bad one a rejected job that
 * keeps the body and says what was wrong and what is allowed. Idempotent: the same token from
 * the same team makes one job, and a repeat returns `duplicate` with the stored job; the same
 * token with a different spec (compared as validated, keys in any order; a bad spec by its body)
 * returns `token-reused` and changes nothing, as Powertools' idempotency payload validation does.
 * Store failures propagate (the caller retries them); nothing else throws.
 */
export async function intake(
  ports: {
    jobs: JobStore;
    clock: Clock;
    fleetShape?: FleetShape;
    services?: ServiceStore;
    rightsizing?: RightsizePorts;
    /** The fleet's rules on images (core/images.ts); absent: the rules that always hold (no address, no loopback). */
    images?: ImagePolicy;
    /** The ports the machines let only the load balancers reach: a service on another is refused. Absent: not checked. */
    servicePorts?: readonly number[];
  },
  message: IntakeMessage,
): Promise<IntakeOutcome> {
  if (!isValidTeamId(message.team)) {
    return {
      outcome: 'unattributable',
      error: `queue team "${message.team}" is not a valid team id (lower-case letters, digits and "-", at most 32 characters)`,
    };
  }
  if (message.token.length === 0 || message.token.length > MAX_IDEMPOTENCY_TOKEN_LENGTH) {
    return {
      outcome: 'unattributable',
      error: `idempotency token must be 1 to ${MAX_IDEMPOTENCY_TOKEN_LENGTH} characters, got ${message.token.length}`,
    };
  }
  const id = jobIdFor(message.team, message.token);
  const nowMs = ports.clock.nowMs();
  let parsed: unknown;
  let errors: string[] | undefined;
  try {
    parsed = parseJson(message.body);
  } catch (error) {
    errors = [`(body): not valid JSON (${messageOf(error)}); a job spec is a JSON object`];
  }
  if (!errors) {
    const check = checkJobSpec(parsed);
    const imageWhy = check.ok
      ? imageProblem(check.spec.image, message.team, ports.images, check.spec.container?.runAsRoot === true)
      : undefined;
    const service = check.ok ? check.spec.service : undefined;
    // A job uses only its own team's secrets: a reference to another's is refused here, and again when resolved.
    const secretWhy = check.ok ? secretProblems(check.spec.secrets, message.team) : [];
    if (imageWhy) errors = [imageWhy];
    else if (secretWhy.length > 0) errors = secretWhy;
    else if (service && ports.servicePorts && !ports.servicePorts.includes(service.port))
      errors = [
        `service.port: ${service.port} is not a port this fleet's machines keep to its load balancers (${ports.servicePorts.join(', ') || 'none'}: the config's services.replicaPorts and load balancer services); any other would be open to every machine of the fleet`,
      ];
    else if (check.ok && check.spec.service) {
      // A service's record holds its spec as a job's does: the same bound.
      const bytes = storedBytes(check.spec);
      if (bytes > MAX_STORED_JOB_BYTES)
        errors = [
          `(spec): the service's spec holds ${bytes} bytes, over the ${MAX_STORED_JOB_BYTES} a record may; keep large values out of env, labels and command`,
        ];
      else if (ports.services) return takeService(ports.services, message, check.spec, nowMs);
      else
        errors = [
          'service: the service is valid, but this deployment runs no services: give the stack its services and their load balancer target groups (GPU_FLEET_SERVICE_TARGET_GROUPS); nothing was started',
        ];
    } else if (check.ok) {
      // With `gpu.rightsize`, the family's measured use may give the job a smaller shape (kept on the job with why).
      const sized =
        ports.rightsizing && check.spec.gpu.rightsize
          ? await rightsizeSubmission(
              { ...ports.rightsizing, ...(ports.fleetShape ? { fleetShape: ports.fleetShape } : {}) },
              message.team,
              check.spec,
              nowMs,
            )
          : { spec: check.spec };
      // A spec no node group can ever hold is refused now, with the requirement no group meets, rather
      // than waiting for ever; when the groups cannot all be known here, reconcile says the same.
      const why = await unschedulable(ports.fleetShape, sized.spec);
      const pending: Job = {
        ...newPendingJob({ id, team: message.team, spec: sized.spec, submittedAtMs: nowMs }),
        ...(sized.decision ? { rightsize: sized.decision } : {}),
      };
      const bytes = storedBytes(pending);
      if (why) errors = [`(spec): ${why}; change the spec, or add a node group that can hold it`];
      else if (bytes > MAX_STORED_JOB_BYTES)
        errors = [
          `(spec): its record would hold ${bytes} bytes, over the ${MAX_STORED_JOB_BYTES} a job may (the store takes 400 KB an item, and a job grows as it runs); keep large values out of env, labels and command (put them in the image or a file the job reads)`,
        ];
      else {
        const { created, job } = await ports.jobs.create(pending);
        return created ? { outcome: 'accepted', job } : repeated(job, message, check.spec);
      }
    } else errors = check.errors;
  }
  const { created, job } = await ports.jobs.create(
    newRejectedJob({ id, team: message.team, submittedAtMs: nowMs, errors, body: message.body }),
  );
  return created ? { outcome: 'rejected', job, errors } : repeated(job, message, undefined);
}

/**
 * Stores a service's record, or takes a new spec for one that exists (a repeat changes nothing).
 * Updates are ordered by when their messages were sent: one sent before the spec the record holds
 * (or before the service was cancelled) is older, and changes nothing, however late it arrives.
 */
async function takeService(services: ServiceStore, message: IntakeMessage, spec: JobSpec, nowMs: number): Promise<IntakeOutcome> {
  const sent = message.sentAtMs !== undefined ? { specSentAtMs: message.sentAtMs } : {};
  const fresh = { ...newServiceRecord(message.team, spec, nowMs), ...sent };
  for (let tries = 0; tries < 5; tries++) {
    const { created, record } = await services.create(fresh);
    if (created) return { outcome: 'service', service: record, created: true };
    const heldSinceMs = record.state === 'cancelled' ? record.updatedAtMs : record.specSentAtMs;
    if (message.sentAtMs !== undefined && heldSinceMs !== undefined && message.sentAtMs < heldSinceMs)
      return { outcome: 'service', service: record, created: false, stale: true };
    if (canonical(withDefaults(record.spec)) === canonical(withDefaults(spec)) && record.state === 'active')
      return { outcome: 'service', service: record, created: false };
    const next: ServiceRecord = { ...record, spec, ...sent, state: 'active', version: record.version + 1, updatedAtMs: nowMs };
    const out = await services.update(next, record.version);
    if (out.ok) return { outcome: 'service', service: out.record, created: false };
  }
  throw new ConflictError(`service ${fresh.id}: its record kept changing under intake; the message is retried`);
}

/** A repeat of a stored submission: `duplicate` when it is the same one, `token-reused` when its spec differs. */
export function repeated(stored: Job, message: IntakeMessage, spec: JobSpec | undefined): IntakeOutcome {
  // A job right-sizing gave another shape is compared with what was submitted.
  const submitted = stored.rightsize?.applied ? { ...stored.spec, gpu: stored.rightsize.from } : stored.spec;
  const same =
    stored.state === 'rejected'
      ? // The whole body's digest; a record made before it was kept has only the body, cut at 16 KiB.
        stored.rejection?.bodyDigest !== undefined
        ? stored.rejection.bodyDigest === rejectedBodyDigest(message.body)
        : stored.rejection?.body === rejectedBody(message.body)
      : spec !== undefined && canonical(withDefaults(submitted)) === canonical(withDefaults(spec));
  if (same) return { outcome: 'duplicate', job: stored };
  return {
    outcome: 'token-reused',
    job: stored,
    error: `token "${message.token}" was already used for ${stored.id} with a different spec; submit with a new token (or none) for a new job`,
  };
}

/**
 * A spec with the fields added since it may have been stored, at their defaults: a record written
 * before `secrets` existed is the same submission as the same body parsed now.
 */
function withDefaults<S extends Pick<JobSpec, 'secrets'>>(spec: S): S {
  return { ...spec, secrets: spec.secrets ?? [] };
}

/** JSON with every object's keys sorted, so two specs compare equal however a store ordered them. */
function canonical(value: unknown): string {
  return JSON.stringify(value, (_key, v: unknown) =>
    v && typeof v === 'object' && !Array.isArray(v)
      ? Object.fromEntries(Object.entries(v as Record<string, unknown>).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)))
      : v,
  );
}

/**
 * The fleet's shape from every provider's groups; a provider that cannot list them leaves it
 * unknown. Node groups change rarely and intake takes messages in batches: a listing is kept for
 * `ttlMs` (shared by the calls made meanwhile), so intake does not list the groups once per
 * message; a failed listing is not kept.
 */
export function fleetShapeFrom(
  providers: readonly Pick<NodeGroupProvider, 'listGroups'>[],
  types: InstanceTypeCatalog,
  clock: Clock,
  ttlMs = 60_000,
): FleetShape {
  let kept: { atMs: number; shape: ReturnType<FleetShape> } | undefined;
  return () => {
    const now = clock.nowMs();
    if (kept && now - kept.atMs < ttlMs) return kept.shape;
    const shape = Promise.all(providers.map((p) => p.listGroups())).then((lists) => ({ groups: lists.flat(), types }));
    const entry = { atMs: now, shape };
    kept = entry;
    shape.catch(() => {
      if (kept === entry) kept = undefined;
    });
    return shape;
  };
}

/** Why no node group can ever hold the spec, when the fleet's shape is known; a failed read checks nothing. */
async function unschedulable(shape: FleetShape | undefined, spec: JobSpec): Promise<string | undefined> {
  if (!shape) return undefined;
  let known: Awaited<ReturnType<FleetShape>>;
  try {
    known = await shape();
  } catch {
    return undefined;
  }
  // No group listed at all is more likely a listing that found nothing (a tag, a permission) than a
  // fleet without groups: nothing is refused on it, and the planner says why the job waits.
  return known && known.groups.length > 0 ? whyNoGroupHolds(spec, known.groups, known.types) : undefined;
}
