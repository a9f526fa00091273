import { injectLambdaContext } from '@aws-lambda-powertools/logger/middleware';
import { logMetrics } from '@aws-lambda-powertools/metrics/middleware';
import middy from '@middy/core';
import type { Context, LambdaFunctionURLEventWithIAMAuthorizer, LambdaFunctionURLResult } from 'aws-lambda';
import type * as z from 'zod/mini';
import type { AttemptCredentials } from '../cloud/aws/attempt-credentials.ts';
import {
  AGENT_API,
  ATTEMPT_HEADER,
  callerMachine,
  claimOf,
  DOWNLOAD_FILES_PER_CALL,
  MAX_RESPONSE_BYTES,
  type AgentApiOp,
  type AgentApiResponses,
} from '../cloud/aws/agent-api-protocol.ts';
import type { CheckpointUrls } from '../cloud/aws/checkpoint-urls.ts';
import type { GceAgents } from '../cloud/gcp/identity-token.ts';
import type { Certificates } from 'google-auth-library';
import { GpuFleetError, isCloudError, messageOf } from '../core/errors.ts';
import { CheckpointRefused, type CheckpointRef, type Job } from '../core/job.ts';
import type {
  CheckpointHistory,
  CheckpointStore,
  Clock,
  JobLogSink,
  JobStore,
  NodeGroupProvider,
  NodeStore,
  SecretReader,
  ServiceMetricSink,
} from '../core/ports.ts';
import { parseSecretRef, secretProblems } from '../core/secrets.ts';
import { AgentRefused, agentView, type AgentView, type AgentSources } from '../core/services/agent-access.ts';
import { MetricUnit, type Observability } from './observability.ts';

export interface AgentApiDeps {
  readonly jobs: JobStore;
  readonly nodes: NodeStore;
  readonly checkpoints: CheckpointStore;
  /** The checkpoint index's history: a machine's reads of saves are noted in it, for the bill (without it, reads are not billed). */
  readonly history?: Pick<CheckpointHistory, 'noteRead'>;
  readonly urls: CheckpointUrls;
  /**
   * Read URLs for saves kept in Cloud Storage (`gs://`, a GCP region's bucket: cloud/gcp/checkpoint-store.ts), for a
   * machine that resumes a job moved from GCP; without it, such a read is refused as not configured.
   */
  readonly gcsUrls?: CheckpointUrls;
  /** The other sites' checkpoint roots a machine may read from (the GCP regions' buckets). */
  readonly otherRoots?: readonly string[];
  /** Where replicas' load figures go (CloudWatch, the services' namespace); without it, `service/metrics` is refused as not configured. */
  readonly serviceMetrics?: ServiceMetricSink;
  /** Where attempts' output goes (CloudWatch Logs); without it, `logs/put` is refused as not configured. */
  readonly jobLogs?: JobLogSink;
  /** Reads the secrets jobs name by reference (SSM, Secrets Manager); without it, `attempt/secrets` is refused as not configured. */
  readonly secrets?: SecretReader;
  readonly clock: Clock;
  /**
   * The services and instance types a machine being prepared in a warm pool is answered from
   * (without them, `node/warm-images` is refused), and the services' load balancer a warned
   * machine's replicas leave (without it, `service/leave` is refused).
   */
  readonly sources?: AgentSources;
  /**
   * The launch lifecycle hook of the groups with a warm pool (infra/stack.ts), which a machine lets
   * go once it is prepared (or, started into service, once its agent runs); without it,
   * `node/launch-ready` is refused as not configured.
   */
  readonly launchHook?: { readonly hookName: string; readonly groups: Pick<NodeGroupProvider, 'completeLifecycleAction'> };
  /** The node agent's instance role: only its sessions (one per machine, named by the instance id) may call. */
  readonly agentRoleName: string;
  /**
   * The fleet's GCP machines, which call with their instance identity token (`Authorization:
   * Bearer`, through the API's second, unsigned URL): the rules the token must meet, and Google's
   * signing keys (fetched from Google by default). Without it, only instance-role sessions may call.
   */
  readonly gceAgents?: { readonly rules: GceAgents; readonly certs?: () => Promise<Certificates> };
  /** Mints and checks the attempts' credentials (the key is the stack's secret). */
  readonly attempts: AttemptCredentials;
  readonly obs: Observability;
}

/** A save through the API goes to the fleet's own bucket: a GCP machine writes its region's bucket itself, never through here. */
function awsSave(location: string): void {
  if (location.startsWith('gs://'))
    throw new Refused(400, `${location}: a machine saves through the agent API into the fleet's S3 bucket (s3://…), never another cloud's`);
}

/** A call the caller may not make (403), or that is malformed (400): said back to it, and logged. */
class Refused extends GpuFleetError {
  override name = 'Refused';
  constructor(
    readonly status: 400 | 403 | 404,
    message: string,
  ) {
    super(message, { context: { status } });
  }
}

/**
 * The agent API: the one way a node agent writes state. A Lambda function URL with IAM auth, so
 * every request is signed by a machine's instance role; the caller's machine is the session name
 * EC2 gives that role (its instance id). Each call is checked against the stored records by the
 * rules in core/services/agent-access.ts before it is carried out with the control plane's own
 * store permissions: a machine writes only its own node record, the jobs placed on it (only the
 * changes an agent makes) and those jobs' checkpoints (through presigned URLs, one object each).
 * The rules live in core (agentView), which the simulator's machines go through too.
 * Every call is as idempotent as the store call under it; a write that lost a race is answered as
 * the store answers it (the current job), so the agent re-decides as it does with a direct store.
 */
export function createAgentApiHandler(deps: AgentApiDeps) {
  const { logger, metrics } = deps.obs;

  const ops: {
    [Op in AgentApiOp]: (view: AgentView, body: z.infer<(typeof AGENT_API)[Op]>) => Promise<AgentApiResponses[Op]>;
  } = {
    // The bodies hold only what the schemas allow (zod drops the rest); the view sets the caller's id and the times.
    'node/register': async (view, { record }) => {
      await view.nodes.register({
        ...record,
        instanceId: view.nodeId,
        registeredAtMs: 0,
        lastHeartbeatAtMs: 0,
      });
      return {};
    },
    'node/heartbeat': async (view, { health }) => ({ known: await view.nodes.heartbeat(view.nodeId, 0, health) }),
    // The machine's own record comes with the credentials of the attempts on its work list (minted, not stored).
    'node/get': async (view, { instanceId }) => {
      const record = await view.nodes.get(instanceId);
      if (!record) return {};
      if (instanceId !== view.nodeId) return { record };
      const credentials = Object.entries(record.assigned ?? {}).map(([jobId, attempt]) => ({
        jobId,
        attempt,
        credential: deps.attempts.mint(view.nodeId, jobId, attempt),
      }));
      return { record, credentials };
    },
    'node/images': async (view, { images }) => ({ known: await view.nodes.noteImages(view.nodeId, images) }),
    'node/warm-images': async (view, { machine }) => ({ images: await view.imagesToPrepare(machine) }),
    // Only the caller's own launch: the instance id is the signature's, never the body's.
    'node/launch-ready': async (view, { groupName }) => {
      if (!deps.launchHook) throw new Refused(400, 'this fleet has no launch hook (no group has a warm pool)');
      await deps.launchHook.groups.completeLifecycleAction({
        groupId: groupName,
        instanceId: view.nodeId,
        hookName: deps.launchHook.hookName,
      });
      return {};
    },
    'service/leave': async (view, { jobId, attempt }) => {
      await view.leaveFrontDoor(jobId, attempt);
      return {};
    },
    'node/unassign': async (view, { jobId, attempt }) => {
      await view.nodes.unassign(view.nodeId, jobId, attempt);
      return {};
    },
    'node/drain': async (view, { drain }) => ({
      record: await view.nodes.markDraining(view.nodeId, {
        sinceMs: drain.sinceMs,
        reason: drain.reason,
        deadlineMs: drain.deadlineMs,
        ...(drain.groupId !== undefined ? { groupId: drain.groupId } : {}),
      }),
    }),
    'job/get': async (view, { jobId }) => {
      const job = await view.jobs.get(jobId);
      return job ? { job } : {};
    },
    'job/update': async (view, { next, expectedVersion }) => {
      if (typeof next.id !== 'string') throw new Refused(400, 'next.id: the job id is missing');
      return view.jobs.update(next as unknown as Job, expectedVersion);
    },
    'checkpoint/latest': async (view, { jobId }) => {
      const ref = await view.checkpoints.latest(jobId);
      return ref ? { ref } : {};
    },
    'checkpoint/complete': async (view, { ref, rank }) => {
      if (typeof ref.jobId !== 'string' || typeof ref.location !== 'string')
        throw new Refused(400, 'ref: a checkpoint names its jobId and location');
      return { complete: await view.checkpoints.markComplete(ref as unknown as CheckpointRef, rank) };
    },
    'checkpoint/upload': async (view, { jobId, location, files }) => {
      awsSave(location);
      await view.checkCheckpointWrite(jobId, location);
      return { files: await deps.urls.uploadTargets(location, files) };
    },
    'checkpoint/upload-parts': async (view, { jobId, location, path, uploadId, firstPart, count }) => {
      awsSave(location);
      await view.checkCheckpointWrite(jobId, location);
      return { urls: await deps.urls.partUrls(location, path, uploadId, firstPart, count) };
    },
    'checkpoint/finish-upload': async (view, { jobId, location, path, uploadId, parts }) => {
      awsSave(location);
      await view.checkCheckpointWrite(jobId, location);
      await deps.urls.finishUpload(location, path, uploadId, parts);
      return {};
    },
    'checkpoint/download': async (view, { jobId, location, after }) => {
      // The first page starts a read: it is noted for the bill (once per attempt and machine); later pages only go on with it.
      if (after === undefined) await view.readCheckpoint(jobId, location);
      else await view.checkCheckpointRead(jobId, location);
      if (!location.startsWith('gs://')) return deps.urls.downloadUrls(location, after, DOWNLOAD_FILES_PER_CALL);
      if (!deps.gcsUrls)
        throw new Refused(400, `${location} is in Cloud Storage, and this fleet has no GCP credentials to sign reads of it`);
      return deps.gcsUrls.downloadUrls(location, after, DOWNLOAD_FILES_PER_CALL);
    },
    // A replica's load figures, published by the API for the machine that serves it, under the service its job names.
    'service/metrics': async (view, { jobId, attempt, samples }) => {
      if (!deps.serviceMetrics) throw new Refused(400, 'this fleet publishes no service metrics (it has no services)');
      const { serviceId } = await view.checkServiceMetrics(jobId, attempt);
      await deps.serviceMetrics.put(samples.map((s) => ({ serviceId, jobId, metric: s.metric, value: s.value, atMs: s.atMs })));
      return {};
    },
    // The secrets the attempt's job names, for the machine that starts it, under the attempt's credential: each is read
    // again under the job's own team's prefix (a record that names another's is refused), and the values go back in the
    // answer only (never logged, never stored).
    'attempt/secrets': async (view, { jobId, attempt }) => {
      const { team, secrets } = await view.checkSecretsRead(jobId, attempt);
      if (secrets.length === 0) return { values: {} };
      if (!deps.secrets) throw new Refused(400, 'this fleet resolves no secrets (its agent API has no secret reader)');
      const problems = secretProblems(secrets, team);
      if (problems.length > 0) throw new Refused(403, problems.join('; '));
      const values: Record<string, string> = {};
      for (const s of secrets) values[s.name] = await deps.secrets.read(parseSecretRef(s.valueFrom)!);
      return { values };
    },
    // A machine writes only the output of the attempts and ranks it runs (or ran), with the job's team and labels.
    'logs/put': async (view, { jobId, attempt, rank, lines }) => {
      if (!deps.jobLogs) throw new Refused(400, 'this fleet keeps no job output (no GPU_FLEET_JOB_LOG_GROUP)');
      const { team, labels } = await view.checkLogWrite(jobId, attempt, rank);
      await deps.jobLogs.append({ jobId, attempt, rank, team, labels, lines });
      return {};
    },
  };

  /**
   * The calling machine: an EC2 instance's role session (the URL with IAM auth signed it), or a GCE
   * machine's identity token (the unsigned URL; the token is checked here), never both kinds at once.
   */
  const callerOf = async (event: LambdaFunctionURLEventWithIAMAuthorizer): Promise<string | { error: string }> => {
    const arn = event.requestContext.authorizer?.iam?.userArn;
    if (arn !== undefined || !deps.gceAgents) return callerMachine(arn, deps.agentRoleName);
    const bearer = /^Bearer ([A-Za-z0-9_=-]+\.[A-Za-z0-9_=-]+\.[A-Za-z0-9_=-]+)$/.exec(event.headers?.authorization ?? '')?.[1];
    if (!bearer)
      return {
        error:
          "an unsigned call must carry a GCE machine's identity token (Authorization: Bearer, audience " +
          deps.gceAgents.rules.audience +
          ')',
      };
    // Google's token library is loaded only for a GCE caller: the instance-role path stays as small as it was.
    const { verifyGceIdentityToken } = await import('../cloud/gcp/identity-token.ts');
    const machine = await verifyGceIdentityToken(bearer, deps.gceAgents.rules, deps.gceAgents.certs);
    return 'error' in machine ? machine : machine.instanceName;
  };

  const handle = async (event: LambdaFunctionURLEventWithIAMAuthorizer): Promise<LambdaFunctionURLResult> => {
    const op = /^\/v1\/([a-z]+\/[a-z-]+)$/.exec(event.rawPath ?? '')?.[1] as AgentApiOp | undefined;
    let caller: string | undefined;
    try {
      if (event.requestContext?.http?.method !== 'POST') throw new Refused(400, 'the agent API takes POST requests only');
      if (!op || !Object.hasOwn(AGENT_API, op))
        throw new Refused(
          404,
          `${event.rawPath} is not an agent API call; the calls are ${Object.keys(AGENT_API)
            .map((k) => `/v1/${k}`)
            .join(', ')}`,
        );
      const who = await callerOf(event);
      if (typeof who !== 'string') throw new Refused(403, who.error);
      caller = who;
      let raw: unknown;
      try {
        raw = JSON.parse(event.isBase64Encoded ? Buffer.from(event.body ?? '', 'base64').toString('utf8') : (event.body ?? ''));
      } catch (error) {
        throw new Refused(400, `the body is not JSON: ${messageOf(error)}`);
      }
      const parsed = AGENT_API[op].safeParse(raw);
      if (!parsed.success)
        throw new Refused(
          400,
          `the body of ${op} is not valid: ${parsed.error.issues.map((i) => `${i.path.join('.') || '(body)'}: ${i.message}`).join('; ')}`,
        );
      // A call that acts for a job carries the credential of the attempt it acts for, which only this machine was given.
      const claim = claimOf(op, parsed.data);
      let credential: { jobId: string; attempt: number } | undefined;
      if (claim) {
        const shown = event.headers?.[ATTEMPT_HEADER];
        const attempt = shown ? deps.attempts.verify(who, claim.jobId, shown) : undefined;
        if (attempt === undefined)
          throw new Refused(
            403,
            `${op} acts for job ${claim.jobId}: it needs the credential (${ATTEMPT_HEADER}) of an attempt of it on this machine, which the API hands out with the machine's work list (node/get); ${shown ? 'the one shown is not valid for this machine and job' : 'none was shown'}`,
          );
        if (claim.attempt !== undefined && claim.attempt !== attempt)
          throw new Refused(
            403,
            `${op} acts for attempt ${claim.attempt} of job ${claim.jobId}, but its credential is attempt ${attempt}'s`,
          );
        credential = { jobId: claim.jobId, attempt };
      }
      const view = agentView(deps, who, deps.clock, deps.sources, credential);
      const out = await (ops[op] as (view: AgentView, body: unknown) => Promise<unknown>)(view, parsed.data);
      metrics.addMetric('AgentCalls', MetricUnit.Count, 1);
      const answer = reply(200, out);
      // The pages keep every answer far under the function URL's limit; one over it would fail in Lambda, unexplained.
      const bytes = Buffer.byteLength(answer.body);
      if (bytes > MAX_RESPONSE_BYTES)
        throw new GpuFleetError(`the answer to ${op} is ${bytes} bytes, over the ${MAX_RESPONSE_BYTES}-byte limit`);
      return answer;
    } catch (error) {
      if (error instanceof Refused || error instanceof AgentRefused) {
        const status = error instanceof Refused ? error.status : 403;
        logger.warn('agent call refused', { op, caller, status, reason: error.message });
        metrics.addMetric('AgentCallsRefused', MetricUnit.Count, 1);
        return reply(status, { error: error.message, code: status === 403 ? 'access-denied' : 'invalid-request' });
      }
      // A checkpoint completion the index refused (dated in the future, progress going backwards): final, not retried.
      if (error instanceof CheckpointRefused) {
        logger.warn('checkpoint completion refused', { op, caller, reason: error.message });
        return reply(409, { error: error.message, code: 'conflict' });
      }
      // What the store says of the request itself (an upload it never began, a key it does not have): final, the caller's.
      if (isCloudError(error) && (error.code === 'not-found' || error.code === 'invalid-request')) {
        logger.warn('agent call answered by the store as final', { op, caller, code: error.code, reason: error.message });
        return reply(error.code === 'not-found' ? 404 : 400, { error: error.message, code: error.code });
      }
      const retryable = isCloudError(error) && error.retryable;
      logger.error('agent call failed', { op, caller, error: messageOf(error), retryable });
      return reply(retryable ? 503 : 500, { error: messageOf(error), code: isCloudError(error) ? error.code : 'unavailable' });
    }
  };

  return middy(async (event: LambdaFunctionURLEventWithIAMAuthorizer, _context: Context) => handle(event))
    .use(injectLambdaContext(logger, { resetKeys: true }))
    .use(logMetrics(metrics));
}

function reply(statusCode: number, body: unknown): LambdaFunctionURLResult & { body: string } {
  return { statusCode, headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) };
}
