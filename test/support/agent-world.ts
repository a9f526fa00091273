import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { NodeAgent, type AgentConfig, type AgentLog, type AttemptPorts, type JobDisks } from '../../agent/agent.ts';
import { AgentApiBlobs, DirectoryBlobs, type CheckpointBlobs } from '../../agent/checkpoint-files.ts';
import type { Identity, MetadataClient } from '../../agent/metadata.ts';
import { readGpuInventory } from '../../agent/nvidia-smi.ts';
import { ProcessRunner, safeJobName, type JobRunner } from '../../agent/runner.ts';
import { checkJobSpec, type JobSpecInput } from '../../core/job-spec.ts';
import type { GpuMetricSample, GpuMetricSink, JobLogSink, ServiceMetricSample, ServiceMetricSink } from '../../core/ports.ts';
import { newPendingJob, type Job, type Placement } from '../../core/job.ts';
import { applyJobEvent } from '../../core/services/job-updates.ts';
import { MemoryCheckpointStore, MemoryJobStore, MemoryNodeStore } from '../../cloud/sim/memory-stores.ts';
import {
  AgentApiCheckpointStore,
  AgentApiClient,
  AgentApiSecrets,
  AgentApiJobLogs,
  AgentApiJobStore,
  AgentApiNodeStore,
} from '../../cloud/aws/agent-api-client.ts';
import { credentialsFor, startAgentApi } from './agent-api-server.ts';
import { fakeNvidiaSmiEnv, type GpuFixture } from './gpu-fixtures.ts';

export const COUNTER_JOB = resolve(import.meta.dirname, 'jobs/counter-job.mjs');
export const REPLICA_JOB = resolve(import.meta.dirname, 'jobs/replica.mjs');
export const CHATTY_JOB = resolve(import.meta.dirname, 'jobs/chatty.mjs');

export type AgentApi = Awaited<ReturnType<typeof startAgentApi>>;

/**
 * A state store, a checkpoint store on disk, and node agents running real child processes.
 * `checkpointRoot` puts the checkpoints elsewhere (an `s3://` root, with agents given S3 blobs).
 */
export function agentWorld(options: { checkpointRoot?: string } = {}) {
  const clock = { nowMs: () => Date.now() };
  const jobs = new MemoryJobStore();
  const nodes = new MemoryNodeStore();
  const storeRoot = mkdtempSync(join(tmpdir(), 'ckpt-store-'));
  const checkpoints = new MemoryCheckpointStore(clock, options.checkpointRoot ?? pathToFileURL(storeRoot).href);
  const blobs = new DirectoryBlobs(storeRoot);
  const logs: { level: string; message: string; extra?: Record<string, unknown> }[] = [];
  const log: AgentLog = {
    info: (message, extra) => logs.push({ level: 'info', message, ...(extra ? { extra } : {}) }),
    warn: (message, extra) => logs.push({ level: 'warn', message, ...(extra ? { extra } : {}) }),
    error: (message, extra) => logs.push({ level: 'error', message, ...(extra ? { extra } : {}) }),
  };
  const agents: NodeAgent[] = [];

  function agent(
    instanceId: string,
    options: {
      fixture?: GpuFixture;
      metadata?: MetadataClient;
      runner?: JobRunner;
      nvidiaSmiMode?: string;
      identity?: Partial<Identity>;
      workDir?: string;
      metrics?: GpuMetricSink;
      serviceMetrics?: ServiceMetricSink;
      jobLogs?: JobLogSink;
      /** With `api`: send the attempts' output through the agent API (as a fleet machine does). */
      logsViaApi?: boolean;
      blobs?: CheckpointBlobs;
      config?: Partial<AgentConfig>;
      /** Reach the state and the checkpoints through this agent API (as a fleet machine does), not directly. */
      api?: AgentApi;
      /** With `api`: a GCP machine, which calls the API's unsigned URL with the identity tokens this gives (no signature). */
      gceToken?: () => Promise<string>;
      removeFolder?: (dir: string) => Promise<void>;
      /** The node's dcgm-exporter scrape. */
      dcgm?: () => Promise<string>;
      /** While this says false, every call to the state and the checkpoints fails as an agent API that answers 503 would. */
      reachable?: () => boolean;
      /** Where a warned machine's replicas leave their target groups (the agent API's `service/leave`). */
      frontDoor?: { leave(jobId: string, attempt: number): Promise<void> };
      /** The machine's port wall, attempt by attempt. */
      peers?: AttemptPorts;
      /** Job folders' own disks. */
      jobDisks?: JobDisks;
    } = {},
  ): NodeAgent {
    const env = fakeNvidiaSmiEnv(
      options.fixture ?? { xml: 'telegraf__tesla-t4.xml' },
      options.nvidiaSmiMode ? { FAKE_NVIDIA_SMI_MODE: options.nvidiaSmiMode } : {},
    );
    const client = options.api
      ? options.gceToken
        ? new AgentApiClient({ url: options.api.gceUrl, region: options.api.region, bearer: options.gceToken })
        : new AgentApiClient({ url: options.api.url, region: options.api.region, credentials: credentialsFor(instanceId) })
      : undefined;
    const state = client
      ? {
          jobs: new AgentApiJobStore(client),
          nodes: new AgentApiNodeStore(client, instanceId),
          checkpoints: new AgentApiCheckpointStore(client, checkpoints.root),
          blobs: options.blobs ?? new AgentApiBlobs(client, checkpoints.root),
        }
      : { jobs, nodes, checkpoints, blobs: options.blobs ?? blobs };
    if (options.reachable) {
      const up = options.reachable;
      state.jobs = unreachableUnless(up, state.jobs);
      state.nodes = unreachableUnless(up, state.nodes);
      state.checkpoints = unreachableUnless(up, state.checkpoints);
      state.blobs = unreachableUnless(up, state.blobs);
    }
    const a = new NodeAgent(
      {
        clock,
        ...state,
        runner: options.runner ?? new ProcessRunner(),
        gpus: () => readGpuInventory({ env, timeoutMs: 5000 }),
        ...(options.metadata ? { metadata: options.metadata } : {}),
        ...(options.metrics ? { metrics: options.metrics } : {}),
        ...(options.serviceMetrics ? { serviceMetrics: options.serviceMetrics } : {}),
        ...(options.jobLogs ? { jobLogs: options.jobLogs } : client && options.logsViaApi ? { jobLogs: new AgentApiJobLogs(client) } : {}),
        ...(options.removeFolder ? { removeFolder: options.removeFolder } : {}),
        ...(options.dcgm ? { dcgm: options.dcgm } : {}),
        ...(options.frontDoor ? { frontDoor: options.frontDoor } : {}),
        // The secrets a job names by reference, through the agent API (as a fleet machine resolves them).
        ...(client ? { secrets: new AgentApiSecrets(client) } : {}),
        ...(options.peers ? { peers: options.peers } : {}),
        ...(options.jobDisks ? { jobDisks: options.jobDisks } : {}),
        log,
      },
      {
        identity: { cloud: 'aws', instanceId, region: 'us-west-2', zone: 'us-west-2a', instanceType: 'g4dn.xlarge', ...options.identity },
        groupId: 'g4dn-spot',
        workDir: options.workDir ?? mkdtempSync(join(tmpdir(), `agent-${instanceId}-`)),
        checkpointPollMs: 50,
        stopGraceSec: 2,
        heartbeatSec: 3600,
        noticeSec: 3600,
        ...options.config,
      },
    );
    agents.push(a);
    return a;
  }

  async function submit(id: string, spec: Partial<JobSpecInput> = {}): Promise<Job> {
    const checked = checkJobSpec({
      image: 'local/counter:1',
      command: ['node', COUNTER_JOB, '100', '20', '20'],
      gpu: { kind: 'whole', count: 1 },
      checkpoint: { intervalSec: 60, gracePeriodSec: 10 },
      ...spec,
    });
    if (!checked.ok) throw new Error(checked.errors.join('; '));
    const job = newPendingJob({ id, team: 'nlp', spec: checked.spec, submittedAtMs: clock.nowMs() });
    await jobs.create(job);
    return job;
  }

  /** What reconcile's place action does: the work list first, then the job. */
  /** `ports`: the machine ports each node's part holds (a service's port, a gang leader's rendezvous port), as the planner gives them. */
  async function place(
    jobId: string,
    nodeIds: readonly string[],
    gpuIndices: readonly number[] = [0],
    ports: readonly (readonly number[] | undefined)[] = [],
    extra: Pick<Placement, 'saves'> = {},
  ): Promise<Job> {
    const job = (await jobs.get(jobId))!;
    for (const n of nodeIds) if (!(await nodes.assign(n, jobId, job.attempt))) throw new Error(`node ${n} has no record`);
    const out = await applyJobEvent(
      jobs,
      jobId,
      {
        type: 'place',
        attempt: job.attempt,
        placement: {
          capacityType: 'spot',
          nodes: nodeIds.map((nodeId, i) => ({ nodeId, gpuIndices, ...(ports[i] ? { ports: ports[i] } : {}) })),
          ...extra,
        },
      },
      clock.nowMs(),
    );
    if (out.status !== 'changed') throw new Error(`could not place ${jobId}: ${out.status}`);
    return out.job;
  }

  /** The JSON lines a job printed on a node. */
  function output(agentWorkDir: string, jobId: string, attempt: number): Record<string, unknown>[] {
    const text = readFileSync(join(agentWorkDir, 'jobs', safeJobName(jobId), `attempt-${attempt}`, 'output.log'), 'utf8');
    return text
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l) as Record<string, unknown>);
  }

  const servers: AgentApi[] = [];
  /** The agent API over this world's stores, on a local port (checked signatures, real handler). */
  async function startApi(
    options: Pick<Parameters<typeof startAgentApi>[0], 'partBytes' | 'jobLogs' | 'serviceMetrics' | 'gceAgents' | 'secrets'> = {},
  ): Promise<AgentApi> {
    const api = await startAgentApi({ jobs, nodes, checkpoints, history: checkpoints, clock, storeRoot, ...options });
    servers.push(api);
    return api;
  }

  async function shutdown(): Promise<void> {
    await Promise.all(agents.map((a) => a.stop()));
    await Promise.all(servers.map((s) => s.close()));
  }

  return { clock, jobs, nodes, checkpoints, blobs, storeRoot, logs, agent, submit, place, output, shutdown, startApi };
}

/** `target` with every call (every method but `locationFor`) failing (as the agent API does during an outage: 503) while `up()` is false. */
export function unreachableUnless<T extends object>(up: () => boolean, target: T): T {
  return new Proxy(target, {
    get(t, key, receiver) {
      const value = Reflect.get(t, key, receiver) as unknown;
      // Naming a folder is local (no call): it works cut off too.
      if (typeof value !== 'function' || key === 'locationFor') return value;
      return async (...args: unknown[]) => {
        if (!up()) throw new Error('503 Service Unavailable: the agent API is down');
        return (value as (...a: unknown[]) => unknown).apply(t, args);
      };
    },
  });
}

/** Polls until `check` returns a value (not undefined/false), or fails after `timeoutMs`. */
export async function waitFor<T>(
  what: string,
  check: () => Promise<T | undefined | false> | T | undefined | false,
  timeoutMs = 10_000,
): Promise<T> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const v = await check();
    if (v !== undefined && v !== false) return v;
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

/** A metric sink that keeps what it is given. */
export class RecordingSink implements GpuMetricSink {
  readonly samples: GpuMetricSample[] = [];
  async put(samples: readonly GpuMetricSample[]): Promise<void> {
    this.samples.push(...samples);
  }
}

export class RecordingServiceSink implements ServiceMetricSink {
  readonly samples: ServiceMetricSample[] = [];
  put(samples: readonly ServiceMetricSample[]): Promise<void> {
    this.samples.push(...samples);
    return Promise.resolve();
  }
}
