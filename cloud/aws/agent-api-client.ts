import { type SignatureV4 } from '@smithy/signature-v4';
import type { AwsCredentialIdentity, AwsCredentialIdentityProvider } from '@smithy/types';
import { functionUrlSigner, postToFunctionUrl } from './function-url.ts';
import { CloudError, GpuFleetError, type CloudErrorCode } from '../../core/errors.ts';
import type { Draining, MachineMeterFacts, NodeRecord } from '../../core/fleet.ts';
import { checkpointFolder, type CheckpointRef, type Job, type JobState } from '../../core/job.ts';
import type {
  CheckpointStore,
  JobLogBatch,
  JobLogSink,
  JobStore,
  NodeStore,
  ServiceMetricSample,
  ServiceMetricSink,
  WriteResult,
} from '../../core/ports.ts';
import {
  ATTEMPT_HEADER,
  claimOf,
  type AgentApiOp,
  type AgentApiRequest,
  type AgentApiResponses,
  type AttemptCredential,
} from './agent-api-protocol.ts';

/**
 * The node agent's side of the agent API: each call a signed POST to the API's function URL (SigV4
 * with the machine's instance role, service `lambda`). The stores below are what the agent is
 * given in place of the tables: the same ports, carried out by the API after its checks, so the
 * agent's code and the node-side rules in core are the same whichever way it is wired.
 */
export interface AgentApiClientOptions {
  /** The function URL (https://<id>.lambda-url.<region>.on.aws/). */
  readonly url: string;
  readonly region: string;
  /** The machine's credentials (default: the AWS SDK's chain, which finds the instance role). */
  readonly credentials?: AwsCredentialIdentity | AwsCredentialIdentityProvider;
  /**
   * A GCP machine's instance identity token, for the API's unsigned URL (agent/metadata.ts
   * `GcpMetadata.identityToken`): sent as `Authorization: Bearer` in place of a signature.
   */
  readonly bearer?: () => Promise<string>;
  readonly timeoutMs?: number;
}

/** Jobs whose attempt credentials an agent keeps (the oldest given go first): far more than a machine runs at once. */
const CREDENTIAL_JOBS_KEPT = 1000;

export class AgentApiClient {
  private readonly signer: SignatureV4;
  private readonly base: URL;
  /**
   * The attempt credentials the API handed this machine with its work list, by job and attempt.
   * Kept in this process only: never written to a file, never put in a container's environment.
   */
  private readonly credentials = new Map<string, Map<number, string>>();
  /** The attempt each job was at when this agent last read it: a job write acts for that attempt. */
  private readonly seenAttempt = new Map<string, number>();

  constructor(private readonly options: AgentApiClientOptions) {
    this.base = new URL(options.url);
    this.signer = functionUrlSigner(options.region, options.credentials);
  }

  /** The credential a call for `claim` carries: of its attempt, or (a read, a job write) of the attempt last seen, else the newest. */
  private credentialFor(op: AgentApiOp, claim: { jobId: string; attempt?: number }): string | undefined {
    const held = this.credentials.get(claim.jobId);
    if (!held) return undefined;
    const attempt = claim.attempt ?? (op === 'job/update' ? this.seenAttempt.get(claim.jobId) : undefined) ?? Math.max(...held.keys());
    return held.get(attempt);
  }

  private keep(given: readonly AttemptCredential[]): void {
    for (const c of given) {
      const held = this.credentials.get(c.jobId) ?? new Map<number, string>();
      held.set(c.attempt, c.credential);
      // Most recently given last, so the oldest go first.
      this.credentials.delete(c.jobId);
      this.credentials.set(c.jobId, held);
    }
    for (const jobId of this.credentials.keys()) {
      if (this.credentials.size <= CREDENTIAL_JOBS_KEPT) break;
      this.credentials.delete(jobId);
      this.seenAttempt.delete(jobId);
    }
  }

  async call<Op extends AgentApiOp>(op: Op, body: AgentApiRequest<Op>): Promise<AgentApiResponses[Op]> {
    const url = new URL(`v1/${op}`, this.base.href.endsWith('/') ? this.base : new URL(`${this.base.href}/`));
    const payload = JSON.stringify(body);
    const claim = claimOf(op, body);
    const credential = claim ? this.credentialFor(op, claim) : undefined;
    const bearer = this.options.bearer;
    const response = await postToFunctionUrl(url, payload, {
      signer: this.signer,
      ...(bearer ? { authorization: async () => `Bearer ${await bearer()}` } : {}),
      headers: credential ? { [ATTEMPT_HEADER]: credential } : {},
      timeoutMs: this.options.timeoutMs ?? 15_000,
      api: 'agent API',
      op,
    });
    const parsed = response.body;
    if (response.ok) {
      const answer = parsed as AgentApiResponses[Op];
      if (op === 'node/get') this.keep((answer as AgentApiResponses['node/get']).credentials ?? []);
      const job =
        op === 'job/get'
          ? (answer as AgentApiResponses['job/get']).job
          : op === 'job/update'
            ? jobOfWrite(answer as WriteResult)
            : undefined;
      if (job && this.credentials.has(job.id)) this.seenAttempt.set(job.id, job.attempt);
      return answer;
    }
    const said = parsed as { error?: string; code?: string };
    const code: CloudErrorCode =
      response.status === 403
        ? 'access-denied'
        : // 409: a checkpoint completion the index refused; final, so not a retryable conflict.
          response.status === 400 || response.status === 404 || response.status === 409
          ? 'invalid-request'
          : response.status === 429
            ? 'throttled'
            : 'unavailable';
    throw new CloudError(code, `the agent API refused ${op} (${response.status}): ${said.error ?? JSON.stringify(parsed).slice(0, 500)}`, {
      operation: op,
    });
  }
}

function jobOfWrite(w: WriteResult): Job | undefined {
  return w.ok ? w.job : w.current;
}

function notForAgents(what: string): never {
  throw new GpuFleetError(`${what} is not available to a node agent: the agent API carries out only what an agent does`);
}

/** The agent's job store: reads of the jobs it has a part in, and the writes an agent makes to them. */
export class AgentApiJobStore implements JobStore {
  constructor(private readonly api: AgentApiClient) {}
  async get(id: string): Promise<Job | undefined> {
    return (await this.api.call('job/get', { jobId: id })).job;
  }
  async update(next: Job, expectedVersion: number): Promise<WriteResult> {
    return this.api.call('job/update', { next: next as unknown as Record<string, unknown>, expectedVersion });
  }
  async create(): Promise<{ created: boolean; job: Job }> {
    notForAgents('creating a job');
  }
  async listByState(_states: readonly JobState[]): Promise<Job[]> {
    notForAgents('listing jobs');
  }
  async listEndedSince(): Promise<Job[]> {
    notForAgents('listing jobs');
  }
}

/** The agent's node store: its own record (the API names the machine from the request's signature). */
export class AgentApiNodeStore implements NodeStore {
  constructor(
    private readonly api: AgentApiClient,
    private readonly self: string,
  ) {}
  private own(instanceId: string, what: string): void {
    if (instanceId !== this.self)
      throw new GpuFleetError(`${what} of machine ${instanceId}: this agent writes only its own record (${this.self})`);
  }
  async register(record: NodeRecord): Promise<void> {
    this.own(record.instanceId, 'registering');
    await this.api.call('node/register', {
      record: {
        groupId: record.groupId,
        gpus: record.gpus.map(({ migDevices, ...g }) => ({ ...g, ...(migDevices ? { migDevices: [...migDevices] } : {}) })),
        ...(record.address !== undefined ? { address: record.address } : {}),
        healthy: record.healthy,
        ...(record.healthProblem !== undefined ? { healthProblem: record.healthProblem } : {}),
      },
    });
  }
  async heartbeat(instanceId: string, _atMs: number, health?: { healthy: boolean; problem?: string }): Promise<boolean> {
    this.own(instanceId, 'a heartbeat');
    return (await this.api.call('node/heartbeat', health ? { health } : {})).known;
  }
  async get(instanceId: string): Promise<NodeRecord | undefined> {
    return (await this.api.call('node/get', { instanceId })).record;
  }
  async markDraining(instanceId: string, drain: Draining & { groupId?: string }): Promise<NodeRecord> {
    this.own(instanceId, 'draining');
    const { sinceMs, reason, deadlineMs, groupId } = drain;
    return (await this.api.call('node/drain', { drain: { sinceMs, reason, deadlineMs, ...(groupId !== undefined ? { groupId } : {}) } }))
      .record;
  }
  async unassign(instanceId: string, jobId: string, attempt: number): Promise<void> {
    this.own(instanceId, 'the work list');
    await this.api.call('node/unassign', { jobId, attempt });
  }
  async list(): Promise<NodeRecord[]> {
    notForAgents('listing nodes');
  }
  async setIdleSince(): Promise<void> {
    notForAgents('marking a node idle');
  }
  async noteImages(instanceId: string, images: readonly string[]): Promise<boolean> {
    this.own(instanceId, 'its images');
    return (await this.api.call('node/images', { images: [...images] })).known;
  }
  async setPrefetch(): Promise<boolean> {
    notForAgents("setting a node's images to pull ahead");
  }
  async remove(): Promise<void> {
    notForAgents('removing a node');
  }
  async noteMeter(_id: string, _meter: MachineMeterFacts): Promise<boolean> {
    notForAgents("stamping a machine's billing facts");
  }
  async noteEnded(): Promise<void> {
    notForAgents("recording a machine's end");
  }
  async assign(): Promise<boolean> {
    notForAgents('placing work on a node');
  }
}

/** The agent's checkpoint index: the folders are laid out as the control plane's (same root, same names). */
export class AgentApiCheckpointStore implements CheckpointStore {
  constructor(
    private readonly api: AgentApiClient,
    private readonly root: string,
  ) {}
  locationFor(jobId: string, attempt: number): string {
    return checkpointFolder(this.root, jobId, attempt);
  }
  async markComplete(ref: CheckpointRef, rank = 0): Promise<boolean> {
    return (await this.api.call('checkpoint/complete', { ref: ref as unknown as Record<string, unknown>, rank })).complete;
  }
  async latest(jobId: string): Promise<CheckpointRef | undefined> {
    return (await this.api.call('checkpoint/latest', { jobId })).ref;
  }
}

/**
 * The job id a checkpoint folder belongs to, or undefined: under `root`, its first segment; in
 * another site's store (a `gs://` save of a job moved from GCP), the segment before its
 * `attempt-N/` folder (the API checks the location is that job's, under a root it knows).
 */
export function jobOfLocation(root: string, location: string): string | undefined {
  const base = root.endsWith('/') ? root : `${root}/`;
  const first = location.startsWith(base)
    ? location.slice(base.length).split('/')[0]
    : location.startsWith('gs://')
      ? /^gs:\/\/[^/]+\/(?:.*?\/)?([^/]+)\/attempt-[1-9]\d*\//.exec(location)?.[1]
      : undefined;
  if (!first) return undefined;
  try {
    return decodeURIComponent(first);
  } catch {
    return undefined;
  }
}

/**
 * Replicas' load figures through the agent API, a call per replica: the API publishes them under
 * the service the replica's job names, for the machine that serves it (the machine's role may not
 * put metrics in the services' namespace).
 */
export class AgentApiServiceMetrics implements ServiceMetricSink {
  constructor(private readonly client: AgentApiClient) {}

  async put(samples: readonly ServiceMetricSample[]): Promise<void> {
    const byReplica = new Map<string, ServiceMetricSample[]>();
    for (const s of samples) {
      if (s.attempt === undefined || (s.metric !== 'waiting-requests' && s.metric !== 'running-requests')) continue;
      const key = `${s.jobId}\n${s.attempt}`;
      const group = byReplica.get(key);
      if (group) group.push(s);
      else byReplica.set(key, [s]);
    }
    for (const group of byReplica.values())
      for (let i = 0; i < group.length; i += 20)
        await this.client.call('service/metrics', {
          jobId: group[0]!.jobId,
          attempt: group[0]!.attempt!,
          samples: group
            .slice(i, i + 20)
            .map((s) => ({ metric: s.metric as 'waiting-requests' | 'running-requests', value: s.value, atMs: s.atMs })),
        });
  }
}

/**
 * Job output through the agent API: the API checks the machine runs (or ran) that rank of the
 * attempt and adds the job's team and labels from the job itself, not from what the machine says.
 */
export class AgentApiJobLogs implements JobLogSink {
  constructor(private readonly client: AgentApiClient) {}

  async append(batch: JobLogBatch): Promise<void> {
    if (batch.lines.length === 0) return;
    await this.client.call('logs/put', { jobId: batch.jobId, attempt: batch.attempt, rank: batch.rank, lines: [...batch.lines] });
  }
}

/** The values of the secrets an attempt's job names by reference, through the API under the attempt's credential. */
export class AgentApiSecrets {
  constructor(private readonly client: AgentApiClient) {}

  async resolve(jobId: string, attempt: number): Promise<Readonly<Record<string, string>>> {
    return (await this.client.call('attempt/secrets', { jobId, attempt })).values;
  }
}
