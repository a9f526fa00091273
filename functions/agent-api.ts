import { injectLambdaContext } from '@aws-lambda-powertools/logger/middleware';
import { logMetrics } from '@aws-lambda-powertools/metrics/middleware';
import middy from '@middy/core';
import type { Context, LambdaFunctionURLEventWithIAMAuthorizer, LambdaFunctionURLResult } from 'aws-lambda';
import type { z } from 'zod';
import { AGENT_API, callerMachine, type AgentApiOp, type AgentApiResponses } from '../cloud/aws/agent-api-protocol.ts';
import type { CheckpointUrls } from '../cloud/aws/checkpoint-urls.ts';
import { GpuFleetError, isCloudError, messageOf } from '../core/errors.ts';
import type { CheckpointRef, Job } from '../core/job.ts';
import type { CheckpointStore, Clock, JobStore, NodeStore } from '../core/ports.ts';
import {
  agentCheckpointReadProblem,
  agentCheckpointWriteProblem,
  agentJobWriteProblem,
  attemptOfLocation,
  mayReadJob,
} from '../core/services/agent-access.ts';
import { MetricUnit, type Observability } from './observability.ts';

export interface AgentApiDeps {
  readonly jobs: JobStore;
  readonly nodes: NodeStore;
  readonly checkpoints: CheckpointStore;
  readonly urls: CheckpointUrls;
  readonly clock: Clock;
  /** The node agent's instance role: only its sessions (one per machine, named by the instance id) may call. */
  readonly agentRoleName: string;
  readonly obs: Observability;
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
 * Every call is as idempotent as the store call under it; a write that lost a race is answered as
 * the store answers it (the current job), so the agent re-decides as it does with a direct store.
 */
export function createAgentApiHandler(deps: AgentApiDeps) {
  const { logger, metrics } = deps.obs;
  const { jobs, nodes, checkpoints, urls } = deps;
  const folder = (jobId: string, attempt: number) => checkpoints.locationFor(jobId, attempt);

  const jobFor = async (jobId: string): Promise<Job> => {
    const job = await jobs.get(jobId);
    if (!job) throw new Refused(403, `job ${jobId} does not exist`);
    return job;
  };
  const readable = async (caller: string, jobId: string): Promise<Job> => {
    const [job, record] = await Promise.all([jobFor(jobId), nodes.get(caller)]);
    if (!mayReadJob(job, caller, record)) throw new Refused(403, `machine ${caller} has no part in job ${jobId}`);
    return job;
  };
  const check = (problem: string | undefined): void => {
    if (problem !== undefined) throw new Refused(403, problem);
  };

  const ops: { [Op in AgentApiOp]: (caller: string, body: z.infer<(typeof AGENT_API)[Op]>) => Promise<AgentApiResponses[Op]> } = {
    'node/register': async (caller, { record }) => {
      const now = deps.clock.nowMs();
      await nodes.register({
        instanceId: caller,
        groupId: record.groupId,
        // The API's clock, not the machine's: a heartbeat dated ahead would keep a dead node alive.
        registeredAtMs: now,
        lastHeartbeatAtMs: now,
        gpus: record.gpus as unknown as Parameters<NodeStore['register']>[0]['gpus'],
        ...(record.address !== undefined ? { address: record.address } : {}),
        healthy: record.healthy,
        ...(record.healthProblem !== undefined ? { healthProblem: record.healthProblem } : {}),
      });
      return {};
    },
    'node/heartbeat': async (caller, { health }) => ({
      known: await nodes.heartbeat(
        caller,
        deps.clock.nowMs(),
        health && { healthy: health.healthy, ...(health.problem ? { problem: health.problem } : {}) },
      ),
    }),
    'node/get': async (caller, { instanceId }) => {
      if (instanceId !== caller) {
        // Another machine's record only when it shares a job on the caller's work list (a gang's leader, for its address).
        const own = await nodes.get(caller);
        const shared = await Promise.all(Object.keys(own?.assigned ?? {}).map((id) => jobs.get(id)));
        if (
          !shared.some(
            (j) => j?.placement?.nodes.some((n) => n.nodeId === caller) && j.placement.nodes.some((n) => n.nodeId === instanceId),
          )
        )
          throw new Refused(403, `machine ${caller} shares no job with machine ${instanceId}`);
      }
      const record = await nodes.get(instanceId);
      return record ? { record } : {};
    },
    'node/unassign': async (caller, { jobId, attempt }) => {
      await nodes.unassign(caller, jobId, attempt);
      return {};
    },
    'node/drain': async (caller, { drain }) => ({
      record: await nodes.markDraining(caller, {
        sinceMs: drain.sinceMs,
        reason: drain.reason,
        deadlineMs: drain.deadlineMs,
        ...(drain.groupId !== undefined ? { groupId: drain.groupId } : {}),
      }),
    }),
    'job/get': async (caller, { jobId }) => {
      const [job, record] = await Promise.all([jobs.get(jobId), nodes.get(caller)]);
      // A job the machine has no part in is answered as absent: to the agent it is not its work.
      return job && mayReadJob(job, caller, record) ? { job } : {};
    },
    'job/update': async (caller, { next, expectedVersion }) => {
      const proposed = next as unknown as Job;
      if (typeof proposed.id !== 'string') throw new Refused(400, 'next.id: the job id is missing');
      const stored = await readable(caller, proposed.id);
      if (stored.version !== expectedVersion) return { ok: false, current: stored };
      const latest = proposed.checkpoint ? await checkpoints.latest(stored.id) : undefined;
      check(agentJobWriteProblem(stored, proposed, caller, deps.clock.nowMs(), latest));
      return jobs.update(proposed, expectedVersion);
    },
    'checkpoint/latest': async (caller, { jobId }) => {
      await readable(caller, jobId);
      const ref = await checkpoints.latest(jobId);
      return ref ? { ref } : {};
    },
    'checkpoint/complete': async (caller, { ref, rank }) => {
      const cp = ref as unknown as CheckpointRef;
      if (typeof cp.jobId !== 'string' || typeof cp.location !== 'string')
        throw new Refused(400, 'ref: a checkpoint names its jobId and location');
      const job = await jobFor(cp.jobId);
      check(agentCheckpointWriteProblem(job, caller, cp.location, folder));
      const attempt = attemptOfLocation(job.id, cp.location, folder)!;
      if (cp.attempt !== attempt) throw new Refused(403, `the checkpoint at ${cp.location} is of attempt ${attempt}, not ${cp.attempt}`);
      // The attempt's machines in rank order: its placement now, or its holding once it ended.
      const held =
        job.attempt === attempt && job.placement
          ? job.placement.nodes.map((n) => n.nodeId)
          : (job.heldAttempts ?? []).find((h) => h.attempt === attempt)!.nodes.map((n) => n.nodeId);
      if (held[rank] !== caller) throw new Refused(403, `machine ${caller} is not rank ${rank} of attempt ${attempt} of job ${job.id}`);
      if ((cp.ranks ?? 1) !== held.length)
        throw new Refused(
          403,
          `attempt ${attempt} of job ${job.id} ran on ${held.length} machines; its checkpoints have that many parts, not ${cp.ranks ?? 1}`,
        );
      return { complete: await checkpoints.markComplete(cp, rank) };
    },
    'checkpoint/upload': async (caller, { jobId, location, files }) => {
      check(agentCheckpointWriteProblem(await jobFor(jobId), caller, location, folder));
      return { files: await urls.uploadTargets(location, files) };
    },
    'checkpoint/finish-upload': async (caller, { jobId, location, path, uploadId, parts }) => {
      check(agentCheckpointWriteProblem(await jobFor(jobId), caller, location, folder));
      await urls.finishUpload(location, path, uploadId, parts);
      return {};
    },
    'checkpoint/download': async (caller, { jobId, location }) => {
      const [job, record] = await Promise.all([jobFor(jobId), nodes.get(caller)]);
      check(agentCheckpointReadProblem(job, caller, record, location, folder));
      return { files: await urls.downloadUrls(location) };
    },
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
      const who = callerMachine(event.requestContext.authorizer?.iam?.userArn, deps.agentRoleName);
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
      const out = await (ops[op] as (caller: string, body: unknown) => Promise<unknown>)(caller, parsed.data);
      metrics.addMetric('AgentCalls', MetricUnit.Count, 1);
      return reply(200, out);
    } catch (error) {
      if (error instanceof Refused) {
        logger.warn('agent call refused', { op, caller, status: error.status, reason: error.message });
        metrics.addMetric('AgentCallsRefused', MetricUnit.Count, 1);
        return reply(error.status, { error: error.message, code: error.status === 403 ? 'access-denied' : 'invalid-request' });
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

function reply(statusCode: number, body: unknown): LambdaFunctionURLResult {
  return { statusCode, headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) };
}
