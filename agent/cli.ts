import { createServer, type Server } from 'node:http';
import os, { hostname as osHostname, tmpdir } from 'node:os';
import { dcgmExposition } from './dcgm-exporter.ts';
import { execFile } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { watchdogLook, type WatchdogLook } from './watchdog.ts';
import { fileURLToPath } from 'node:url';
import { S3Client } from '@aws-sdk/client-s3';
import { Logger } from '@aws-lambda-powertools/logger';
import { NodeAgent, type AgentLog, type AttemptPorts, type JobDisks } from './agent.ts';
import { AgentApiBlobs, DirectoryBlobs, S3Blobs, type CheckpointBlobs } from './checkpoint-files.ts';
import { nvidiaSmiMig } from './devices.ts';
import {
  AWS_IMDS_URL,
  detectMetadata,
  GCE_METADATA_URL,
  GceMetadata,
  waitOutWarmPool,
  type Identity,
  type MetadataClient,
} from './metadata.ts';
import { GpuInventoryError, gpuProblems, readGpuInventory, toGpuDevices } from './nvidia-smi.ts';
import { prepareForWarmPool } from './prefetch.ts';
import { DockerRunner, ProcessRunner } from './runner.ts';
import {
  AgentApiCheckpointStore,
  AgentApiClient,
  AgentApiJobLogs,
  AgentApiSecrets,
  AgentApiServiceMetrics,
  AgentApiJobStore,
  AgentApiNodeStore,
} from '../cloud/aws/agent-api-client.ts';
import { fleetConfigFromEnv } from '../cloud/env.ts';
import { fleetPorts } from '../cloud/wiring.ts';
import { GpuFleetError, messageOf, UsageError } from '../core/errors.ts';
import { jobsRoom, type JobsRoom } from '../core/container-limits.ts';
import type { CheckpointStore, JobLogSink, JobStore, NodeStore } from '../core/ports.ts';

/** `gpu-fleet agent inspect` and `gpu-fleet agent run`: the node agent from the command line. */

export interface AgentCommonFlags {
  readonly nvidiaSmi?: string;
  readonly imdsUrl?: string;
  readonly gceMetadataUrl?: string;
  readonly metadataTimeoutMs?: number;
}

export interface InspectFlags extends AgentCommonFlags {
  readonly json?: boolean;
}

export interface RunFlags extends AgentCommonFlags {
  readonly group?: string;
  readonly workDir?: string;
  readonly runner?: 'docker' | 'process';
  readonly checkpointStore?: string;
  /** The agent API's URL (default $GPU_FLEET_AGENT_API_URL); without one the agent uses the tables directly (off-cloud, tests). */
  readonly apiUrl?: string;
  /** Not root: MIG changes go through sudo, and job folders are removed by this root-owned helper, through sudo. */
  readonly sudoHelper?: string;
  /** The root-owned helper (through sudo) that opens this machine's ports to each attempt's peers (infra/node-setup.ts). */
  readonly peersHelper?: string;
  /** The root-owned helper (through sudo) that gives each job folder a disk of its own (infra/node-setup.ts). */
  readonly diskHelper?: string;
  readonly instanceId?: string;
  readonly metrics?: boolean;
  readonly migCreate?: boolean;
  readonly heartbeatSec?: number;
  readonly noticeSec?: number;
  /** Serve /metrics (DCGM exporter names) on this port (or $GPU_FLEET_PROMETHEUS_PORT); off by default. */
  readonly prometheusPort?: number;
  /** The node's dcgm-exporter (or $GPU_FLEET_DCGM_EXPORTER_URL), read for MIG slices' utilisation; none by default. */
  readonly dcgmExporterUrl?: string;
}

function timeoutOf(flags: AgentCommonFlags): number {
  return flags.metadataTimeoutMs ?? 2000;
}

function metadataUrls(flags: AgentCommonFlags, env: NodeJS.ProcessEnv) {
  return {
    awsBaseUrl: flags.imdsUrl ?? env.GPU_FLEET_AWS_IMDS_URL ?? AWS_IMDS_URL,
    gceBaseUrl: flags.gceMetadataUrl ?? env.GPU_FLEET_GCE_METADATA_URL ?? GCE_METADATA_URL,
  };
}

/** What the agent sees of this machine: identity, GPUs, MIG devices, health. Works off-cloud: what it cannot find is reported, not fatal. */
export async function agentInspectCommand(
  flags: InspectFlags,
  io: { stdout: NodeJS.WritableStream },
  env: NodeJS.ProcessEnv = process.env,
): Promise<Record<string, unknown>> {
  const timeoutMs = timeoutOf(flags);
  const [identity, gpus] = await Promise.allSettled([
    detectMetadata({ ...metadataUrls(flags, env), timeoutMs }),
    readGpuInventory({ ...(flags.nvidiaSmi ? { command: flags.nvidiaSmi } : {}), env }),
  ]);
  const problems: string[] = [];
  if (gpus.status === 'rejected') problems.push(messageOf(gpus.reason));
  else problems.push(...gpus.value.gpus.flatMap(gpuProblems));
  if (gpus.status === 'fulfilled' && gpus.value.gpus.length > 0 && toGpuDevices(gpus.value).length === 0)
    problems.push(`no GPU here is a model gpu-fleet schedules (${gpus.value.gpus.map((g) => g.name).join(', ')})`);
  const result = {
    identity: identity.status === 'fulfilled' ? identity.value.identity : { error: messageOf(identity.reason) },
    gpus:
      gpus.status === 'fulfilled'
        ? {
            source: gpus.value.source,
            driverVersion: gpus.value.driverVersion,
            cudaVersion: gpus.value.cudaVersion,
            devices: gpus.value.gpus,
            warnings: gpus.value.warnings,
          }
        : { error: messageOf(gpus.reason) },
    schedulable: gpus.status === 'fulfilled' ? toGpuDevices(gpus.value) : [],
    healthy: problems.length === 0,
    problems,
  };
  if (flags.json) {
    io.stdout.write(`${JSON.stringify(result, null, 2)}\n`);
    return result;
  }
  const lines: string[] = [];
  if (identity.status === 'fulfilled') {
    const id = identity.value.identity;
    lines.push(
      `machine   ${id.instanceId} (${id.cloud} ${id.zone}, ${id.instanceType}${id.capacityType ? `, ${id.capacityType}` : ''}${id.groupId ? `, group ${id.groupId}` : ''})`,
    );
  } else lines.push(`machine   unknown: ${messageOf(identity.reason)}`);
  if (gpus.status === 'fulfilled') {
    lines.push(
      `driver    ${gpus.value.driverVersion ?? '?'} (CUDA ${gpus.value.cudaVersion ?? '?'}), read from the ${gpus.value.source} report`,
    );
    for (const g of gpus.value.gpus) {
      lines.push(
        `GPU ${g.index}     ${g.name}${g.model ? ` [${g.model}]` : ' [not scheduled by gpu-fleet]'} ${g.memoryUsedMiB ?? '?'}/${g.memoryTotalMiB} MiB, util ${g.utilizationPct === undefined ? 'n/a' : `${g.utilizationPct}%`}, ${g.powerDrawW ?? '?'} W, ${g.temperatureC ?? '?'} C${g.mig.enabled ? ', MIG on' : ''}`,
      );
      for (const d of g.mig.devices)
        lines.push(
          `  MIG ${d.index}   ${d.profile ?? '?'}${d.computeProfile ? ` (${d.computeProfile})` : ''} GPU instance ${d.gpuInstanceId}, ${d.memoryTotalMiB} MiB${d.uuid ? `, ${d.uuid}` : ''}`,
        );
    }
    for (const w of gpus.value.warnings) lines.push(`note      ${w}`);
  } else lines.push(`GPUs      none found: ${messageOf(gpus.reason)}`);
  lines.push(problems.length === 0 ? 'health    healthy' : `health    UNHEALTHY: ${problems.join('; ')}`);
  io.stdout.write(`${lines.join('\n')}\n`);
  return result;
}

/** Runs the agent until SIGTERM or SIGINT, against the state store in the AWS account of the environment. */
export async function agentRunCommand(flags: RunFlags, env: NodeJS.ProcessEnv = process.env): Promise<void> {
  const timeoutMs = timeoutOf(flags);
  const base = fleetConfigFromEnv(env);
  const logger = new Logger({ serviceName: 'gpu-fleet-agent' });
  const log: AgentLog = {
    info: (m, extra) => (extra ? logger.info(m, extra) : logger.info(m)),
    warn: (m, extra) => (extra ? logger.warn(m, extra) : logger.warn(m)),
    error: (m, extra) => (extra ? logger.error(m, extra) : logger.error(m)),
  };
  let metadata: MetadataClient | undefined;
  let identity: Identity;
  try {
    const found = await detectMetadata({ ...metadataUrls(flags, env), timeoutMs });
    metadata = found.client;
    identity = found.identity;
  } catch (error) {
    if (!flags.instanceId) throw new UsageError(`${messageOf(error)}. Off-cloud, name the machine with --instance-id (and --group).`);
    log.warn('no instance metadata: running with the given identity and without local interruption notices', {
      error: messageOf(error),
    });
    identity = { cloud: 'aws', instanceId: flags.instanceId, region: base.region, zone: 'unknown', instanceType: 'unknown' };
  }
  if (flags.instanceId) identity = { ...identity, instanceId: flags.instanceId };
  const workDir = flags.workDir ?? env.GPU_FLEET_AGENT_DIR ?? '/var/lib/gpu-fleet';
  mkdirSync(workDir, { recursive: true });
  const runnerKind = flags.runner ?? 'docker';
  const runner =
    runnerKind === 'docker'
      ? // The node's data volume script says whether the engine can hold each container's own files to a size.
        new DockerRunner('docker', env, [], join(workDir, 'env'), 'always', env.GPU_FLEET_LAYER_QUOTA === '1')
      : new ProcessRunner({ baseEnv: env, stateFile: join(workDir, 'processes.json') });
  // The fleet's own checkpoint root (the bucket's, or a local folder off-cloud); a GCP machine saves in its region's instead.
  const fleetRoot = /^(s3|file):\/\//.test(base.checkpointBucket) ? base.checkpointBucket : `s3://${base.checkpointBucket}/checkpoints/`;
  const storeUri = flags.checkpointStore ?? fleetRoot;
  if (!/^(s3|gs|file):\/\//.test(storeUri))
    throw new UsageError(
      `--checkpoint-store must be s3://bucket/prefix/, gs://bucket/prefix/ (a GCP machine) or file:///path/; got "${storeUri}"`,
    );
  // The same wiring as every other entry point, with the checkpoint root this agent was given.
  const ports = await fleetPorts({ ...base, checkpointBucket: storeUri });
  const { config } = ports;
  const apiUrl = flags.apiUrl ?? env.GPU_FLEET_AGENT_API_URL;
  const nvidiaSmi = flags.nvidiaSmi ?? 'nvidia-smi';
  let stores: { jobs: JobStore; nodes: NodeStore; checkpoints: CheckpointStore };
  let blobs: CheckpointBlobs;
  let jobLogs: JobLogSink | undefined = ports.jobLogs;
  // A GCP machine has no instance role: it calls the API's unsigned URL with its instance identity token.
  const gce = identity.cloud === 'gcp' && metadata instanceof GceMetadata ? metadata : undefined;
  const audience = env.GPU_FLEET_AGENT_API_AUDIENCE;
  if (apiUrl && gce && !audience)
    throw new UsageError(
      "on a GCP machine the agent API needs GPU_FLEET_AGENT_API_AUDIENCE (the stack's GceAgentApiAudience output), the audience its identity token is asked for",
    );
  const api = apiUrl
    ? new AgentApiClient({ url: apiUrl, region: base.region, ...(gce && audience ? { bearer: () => gce.identityToken(audience) } : {}) })
    : undefined;
  if (api) {
    // On a fleet machine: every write goes through the agent API, which checks it against this machine's records.
    stores = {
      jobs: new AgentApiJobStore(api),
      nodes: new AgentApiNodeStore(api, identity.instanceId),
      checkpoints: new AgentApiCheckpointStore(api, storeUri),
    };
    if (storeUri.startsWith('gs://') && gce) {
      // A GCP machine saves into its region's bucket with its service account, records each save through the API, and
      // reads a save kept in S3 (a job moved from AWS) through the URLs the API signs.
      const { GcsBlobs, BlobsByScheme } = await import('./gcs-blobs.ts');
      const { gcsStorage } = await import('../cloud/gcp/storage.ts');
      blobs = new BlobsByScheme({ gs: new GcsBlobs(gcsStorage()), s3: new AgentApiBlobs(api, fleetRoot) });
    } else if (!storeUri.startsWith('s3://'))
      throw new UsageError(
        `with the agent API, checkpoints are kept in S3 (s3://bucket/prefix/), or on a GCP machine in its region's bucket (gs://bucket/prefix/); got "${storeUri}"`,
      );
    else blobs = new AgentApiBlobs(api, storeUri);
    // The attempts' output goes through the API too, which checks this machine ran them (no CloudWatch Logs rights on the machine).
    jobLogs = new AgentApiJobLogs(api);
  } else {
    stores = ports.stores;
    if (storeUri.startsWith('gs://')) {
      // A GCP machine: it saves into its region's bucket with its own service account, and reads a save from S3 (a job
      // moved from AWS) with the AWS credentials it reaches the tables with.
      const { GcsBlobs, BlobsByScheme } = await import('./gcs-blobs.ts');
      const { gcsStorage } = await import('../cloud/gcp/storage.ts');
      blobs = new BlobsByScheme({ gs: new GcsBlobs(gcsStorage()), s3: new S3Blobs(new S3Client({ region: base.region })) });
    } else
      blobs = storeUri.startsWith('s3://')
        ? new S3Blobs(new S3Client({ region: base.region }))
        : new DirectoryBlobs(fileURLToPath(storeUri));
  }
  // The launch hook of a group with a warm pool (infra/stack.ts): each launch waits in it until this agent lets it go.
  const launchHook = env.GPU_FLEET_LAUNCH_HOOK ? identity.groupId : undefined;
  const letLaunchGo = api && launchHook ? () => api.call('node/launch-ready', { groupName: launchHook }).then(() => undefined) : undefined;
  // A machine being prepared in a warm pool is not the fleet's yet: it pulls the images a replica placed on it would need,
  // lets its launch hook go (the group then stops it), and registers nothing until it is started into service.
  if (metadata) {
    const target = await metadata.targetLifecycleState?.();
    if (target?.startsWith('Warmed:') && api && letLaunchGo) {
      // Only a container engine pulls images; with plain processes the machine is prepared as it is.
      const docker = runner instanceof DockerRunner ? runner : undefined;
      await prepareForWarmPool({
        images: async () => {
          if (!docker) return [];
          const gpus = await readGpuInventory({ command: nvidiaSmi, env }).catch(() => undefined);
          const machine = {
            cloud: identity.cloud === 'gcp' ? ('gcp' as const) : ('aws' as const),
            region: identity.region,
            zone: identity.zone,
            instanceType: identity.instanceType,
            capacityType: identity.capacityType ?? 'on-demand',
            migMode: gpus?.gpus.some((g) => g.mig.enabled) ?? false,
          };
          return (await api.call('node/warm-images', { machine })).images;
        },
        pull: (image) => docker!.prefetch(image),
        ready: letLaunchGo,
        log,
      });
    }
    await waitOutWarmPool(metadata, log);
  }
  const dcgmUrl = flags.dcgmExporterUrl ?? env.GPU_FLEET_DCGM_EXPORTER_URL;
  if (dcgmUrl !== undefined && !/^https?:\/\/[^\s]+$/.test(dcgmUrl))
    throw new UsageError(`--dcgm-exporter-url must be an http(s) URL such as http://localhost:9400/metrics; got "${dcgmUrl}"`);
  const agent = new NodeAgent(
    {
      clock: ports.clock,
      jobs: stores.jobs,
      nodes: stores.nodes,
      checkpoints: stores.checkpoints,
      blobs,
      runner,
      gpus: () => readGpuInventory({ command: nvidiaSmi, env }),
      ...(flags.migCreate !== false
        ? {
            migControl: nvidiaSmiMig((args) =>
              flags.sudoHelper ? runCli('sudo', ['-n', nvidiaSmi, ...args], env) : runCli(nvidiaSmi, args, env),
            ),
          }
        : {}),
      ...(flags.sudoHelper ? { removeFolder: sudoRemover(flags.sudoHelper, env) } : {}),
      ...(flags.peersHelper ? { peers: sudoPeers(flags.peersHelper, env) } : {}),
      ...(flags.diskHelper ? { jobDisks: sudoJobDisks(flags.diskHelper, env) } : {}),
      ...(metadata ? { metadata } : {}),
      // A replica's load figures go through the agent API on a fleet machine (its role may not publish them itself).
      ...(flags.metrics !== false
        ? { metrics: ports.metricSink, serviceMetrics: api ? new AgentApiServiceMetrics(api) : ports.serviceMetricSink }
        : {}),
      ...(jobLogs ? { jobLogs } : {}),
      // A warned machine's replicas leave their target groups through the agent API, as late as lets them drain.
      ...(api
        ? { frontDoor: { leave: (jobId: string, attempt: number) => api.call('service/leave', { jobId, attempt }).then(() => undefined) } }
        : {}),
      // The secrets a job names by reference: resolved for each attempt through the agent API, under its credential.
      ...(api ? { secrets: new AgentApiSecrets(api) } : {}),
      ...(dcgmUrl ? { dcgm: () => fetchText(dcgmUrl, 2000) } : {}),
      log,
    },
    {
      identity,
      ...(flags.group ? { groupId: flags.group } : {}),
      workDir,
      // Read by the machine's watchdog (gpu-fleet-watchdog.timer), which stops the job containers if the lease runs out.
      leaseFile: join(workDir, 'lease.json'),
      noticeMarginSec: config.policy.noticeMarginSec,
      checkpointTiming: { uploadMiBPerSec: config.policy.uploadMiBPerSec, uploadMarginSec: config.policy.uploadMarginSec },
      heartbeatSec: flags.heartbeatSec ?? 15,
      noticeSec: flags.noticeSec ?? 5,
    },
  );
  await agent.start();
  // Started into service (from the warm pool or launched anew): the launch waits in its hook until the agent runs.
  if (letLaunchGo)
    await letLaunchGo().catch((error: unknown) =>
      log.warn('the launch hook could not be let go; the group lets the machine in at the hook’s timeout', { error: messageOf(error) }),
    );
  // Prometheus: one scrape of this machine's GPUs and the agent, in the DCGM exporter's names, when a port is given.
  const promPort = flags.prometheusPort ?? (env.GPU_FLEET_PROMETHEUS_PORT ? Number(env.GPU_FLEET_PROMETHEUS_PORT) : undefined);
  const metricsServer = promPort !== undefined ? serveMetrics(promPort, () => agent.prometheusScrape(identity.instanceId), log) : undefined;
  log.info('agent running', {
    instanceId: agent.instanceId,
    group: agent.groupId,
    runner: runnerKind,
    checkpointStore: storeUri,
    state: apiUrl ? `agent API ${apiUrl}` : 'the tables, directly',
  });
  await new Promise<void>((resolve) => {
    const stop = (signal: string) => {
      log.info('stopping: job processes stop; their jobs restart from their newest checkpoint when the agent is back', { signal });
      metricsServer?.close();
      void agent.stop().then(resolve);
    };
    process.once('SIGTERM', () => stop('SIGTERM'));
    process.once('SIGINT', () => stop('SIGINT'));
  });
}

/** One GET of a local endpoint's text, failing after `timeoutMs` (a heartbeat never waits on it longer). */
async function fetchText(url: string, timeoutMs: number): Promise<string> {
  const response = await fetch(url, { signal: AbortSignal.timeout(timeoutMs) });
  if (!response.ok) throw new Error(`${url} answered ${response.status}`);
  return response.text();
}

/** A tiny /metrics endpoint (Prometheus text format 0.0.4): each GET is one scrape. */
export function serveMetrics(port: number, scrape: () => Promise<string>, log: Pick<AgentLog, 'warn'>): Server {
  const server = createServer((req, res) => {
    if (req.method !== 'GET' || (req.url ?? '').split('?')[0] !== '/metrics') {
      res.writeHead(404).end('gpu-fleet agent: GET /metrics\n');
      return;
    }
    scrape().then(
      (text) => res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4; charset=utf-8' }).end(text),
      (error: unknown) => {
        log.warn('a metrics scrape failed', { error: messageOf(error) });
        res.writeHead(503).end(`scrape failed: ${messageOf(error)}\n`);
      },
    );
  });
  server.listen(port, '0.0.0.0');
  return server;
}

/**
 * `gpu-fleet agent metrics`: one scrape of this machine in the DCGM exporter's names, printed and
 * done (off-cloud too, like `agent inspect`: the machine's name is its hostname then). No job
 * labels: the jobs are the running agent's.
 */
export async function agentMetricsCommand(
  flags: AgentCommonFlags & { nvidiaSmi?: string },
  io: { stdout: NodeJS.WritableStream },
  env: NodeJS.ProcessEnv = process.env,
): Promise<string> {
  const [identity, gpus] = await Promise.allSettled([
    detectMetadata({ ...metadataUrls(flags, env), timeoutMs: timeoutOf(flags) }),
    readGpuInventory({ ...(flags.nvidiaSmi ? { command: flags.nvidiaSmi } : {}), env }),
  ]);
  // No driver (or nvidia-smi failing) is the machine's state, not a mistake in the command: exit 1, one line.
  if (gpus.status === 'rejected')
    throw gpus.reason instanceof GpuFleetError
      ? gpus.reason
      : new GpuInventoryError(`nvidia-smi: ${messageOf(gpus.reason)}`, 'failed', { cause: gpus.reason });
  const hostname = identity.status === 'fulfilled' ? identity.value.identity.instanceId : osHostname();
  const text = await dcgmExposition(gpus.value, { hostname, holders: new Map() });
  io.stdout.write(text);
  return text;
}

/**
 * The systemd slice every job's container runs under, for this machine: what its jobs may use
 * together (its memory and CPUs less the reserve the agent, dockerd and the system keep;
 * processes by its GPUs: core/container-limits.ts `jobsRoom`). The node's setup writes it to
 * /etc/systemd/system/gpu-fleet-jobs.slice before the agent starts.
 */
export async function agentJobsSliceCommand(
  flags: { nvidiaSmi?: string; memoryMib?: number; cpus?: number },
  io: { stdout: NodeJS.WritableStream },
  env: NodeJS.ProcessEnv = process.env,
): Promise<string> {
  const gpus = await readGpuInventory({ ...(flags.nvidiaSmi ? { command: flags.nvidiaSmi } : {}), env })
    .then((r) => r.gpus.length)
    .catch(() => 0);
  const text = jobsSliceUnit(
    jobsRoom({ memoryMiB: flags.memoryMib ?? Math.floor(os.totalmem() / 2 ** 20), cpus: flags.cpus ?? os.availableParallelism(), gpus }),
  );
  io.stdout.write(text);
  return text;
}

/** One look of the machine's watchdog (agent/watchdog.ts), printed as one JSON line for the journal. */
export async function agentWatchdogCommand(
  flags: { leaseFile: string; stopGraceSec?: number; docker?: string },
  io: { stdout: NodeJS.WritableStream },
  env: NodeJS.ProcessEnv = process.env,
): Promise<WatchdogLook> {
  const docker = new DockerRunner(flags.docker ?? 'docker', env, [], join(tmpdir(), 'gpu-fleet-watchdog-env'));
  const look = await watchdogLook({
    leaseFile: flags.leaseFile,
    nowMs: Date.now(),
    ...(flags.stopGraceSec !== undefined ? { stopGraceSec: flags.stopGraceSec } : {}),
    stopJobContainers: (graceSec) => docker.stopJobContainers(graceSec),
  });
  io.stdout.write(`${JSON.stringify(look)}\n`);
  return look;
}

/** The slice unit's text for a room. */
export function jobsSliceUnit(room: JobsRoom): string {
  return `[Unit]
Description=gpu-fleet: every job's container, capped together below the machine
Before=slices.target

[Slice]
MemoryAccounting=yes
MemoryMax=${room.memoryMiB}M
MemorySwapMax=0
CPUAccounting=yes
CPUQuota=${Math.floor(room.milliCpus / 10)}%
TasksAccounting=yes
TasksMax=${room.pids}
`;
}

/** Job folders removed by the root-owned helper (infra/node-setup.ts), through sudo: the agent is not root, the containers' files are. */
export function sudoRemover(helper: string, env: NodeJS.ProcessEnv, sudo = 'sudo'): (dir: string) => Promise<void> {
  return async (dir) => {
    await runCli(sudo, ['-n', helper, dir], env);
  };
}

/** Job folders' own disks, through the root-owned job-disk helper (infra/node-setup.ts), through sudo. */
export function sudoJobDisks(helper: string, env: NodeJS.ProcessEnv, sudo = 'sudo'): JobDisks {
  return {
    make: async (dir, mib) => void (await runCli(sudo, ['-n', helper, 'make', dir, String(mib)], env)),
    drop: async (dir) => void (await runCli(sudo, ['-n', helper, 'drop', dir], env)),
  };
}

/** The machine's port wall, attempt by attempt, through the root-owned peers helper (infra/node-setup.ts), through sudo. */
export function sudoPeers(helper: string, env: NodeJS.ProcessEnv, sudo = 'sudo'): AttemptPorts {
  const run = async (...args: string[]) => {
    await runCli(sudo, ['-n', helper, ...args], env);
  };
  return {
    open: (key, addresses) => run('open', key, ...addresses),
    openPort: (key, port) => run('open-port', key, String(port)),
    close: (key) => run('close', key),
    reset: () => run('reset'),
  };
}

function runCli(command: string, args: readonly string[], env: NodeJS.ProcessEnv): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(command, args, { env, timeout: 60_000 }, (error, stdout, stderr) => {
      if (error) reject(new Error(`${command} ${args.join(' ')} failed: ${(stderr || stdout || error.message).trim()}`));
      else resolve(stdout);
    });
  });
}
