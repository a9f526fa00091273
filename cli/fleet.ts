import { existsSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { randomUUID } from 'node:crypto';
import { jobIdFor } from '../core/job.ts';
import { defaultNetworkLayout, type ByteLog, type ByteRates, type NetworkLayout, type StoreSites } from '../core/bytes.ts';
import { regionOfZone } from '../core/catalog.ts';
import { shippedByteRates } from '../cloud/prices.ts';
import type {
  Clock,
  DecisionLog,
  GpuMetricsSource,
  JobQueue,
  JobStore,
  NodeGroupProvider,
  NodeStore,
  SpendLedger,
  BudgetTagSource,
  BudgetMemory,
  JobLogSource,
  ServiceStore,
} from '../core/ports.ts';
import { fleetShapeFrom, intake, repeated } from '../core/services/intake.ts';
import { checkJobSpec, type JobSpec } from '../core/job-spec.ts';
import { applyJobEvent } from '../core/services/job-updates.ts';
import { DEFAULT_POLICY, type Policy } from '../core/snapshot.ts';
import { DEFAULT_SIM_GROUPS, defaultTeamTags } from '../cloud/sim/defaults.ts';
import { createSimEnvironment } from '../cloud/sim/environment.ts';
import { awsZonesOf, DEFAULT_SIM_START_MS, SIM_STACK_REGION } from '../cloud/sim/simulation.ts';
import { loadSimState, savedSimGroups, saveSimState, STATE_FILE } from '../cloud/sim/state.ts';
import { GpuFleetError, UsageError } from '../core/errors.ts';
import { cancelledService, type ServiceRecord } from '../core/serving/service.ts';

/**
 * What the people-facing commands read and change: a deployed fleet (the DynamoDB stores, the
 * team queues, the node groups, CloudWatch GPU metrics, through the standard AWS configuration),
 * or a simulation's saved world (`--sim DIR`, written by `gpu-fleet simulate --out DIR`).
 */
/** Every job's byte log from a time on (the checkpoint index's, read whole: for a report), where the bytes are kept, and their path's prices. */
export interface ByteLogSource extends StoreSites {
  readonly logs: (sinceMs: number) => Promise<readonly ByteLog[]>;
  readonly layout: NetworkLayout;
  readonly rates: ByteRates;
  readonly bucketBytes?: () => Promise<BucketBytes | undefined>;
}

export interface Fleet {
  readonly source: string;
  readonly clock: Clock;
  readonly policy: Policy;
  readonly jobs: JobStore;
  readonly nodes: NodeStore;
  readonly decisions: DecisionLog;
  readonly ledger: SpendLedger;
  readonly queue: JobQueue;
  readonly budgets: BudgetTagSource;
  /** The last valid budget values reconcile keeps (a deployed fleet's control table); what is in force is read with them. */
  readonly budgetMemory?: BudgetMemory;
  readonly providers: readonly NodeGroupProvider[];
  readonly gpuMetrics?: GpuMetricsSource;
  /** Service records, where the fleet has them (a simulation; a deployed fleet gets its table with the load balancer). */
  readonly services?: ServiceStore;
  /** The jobs' output (a simulation's processes; a deployed fleet's CloudWatch Logs group, when the stack keeps one). */
  readonly jobLogs?: JobLogSource;
  /**
   * The checkpoint bytes per job (the index's byte logs), where they are kept and their path's
   * prices, and the bucket's own count of what it holds where there is one: `report` charges them
   * to jobs and projects and says how close the index is to the bucket.
   */
  readonly checkpointBytes?: ByteLogSource;
  /** Sends a spec to the team's queue (a simulation takes it in at once); the job id follows from team and token. */
  submit(team: string, body: string, token?: string): Promise<{ jobId: string; token: string; note: string }>;
  /** Saves what changed (a simulation's world); a deployed fleet has nothing to save. */
  close(): Promise<void>;
}

/** What a checkpoint bucket holds by its own count (S3's daily storage metric), and when it was measured. */
export interface BucketBytes {
  readonly bytes: number;
  readonly atMs: number;
  readonly source: string;
}

export interface FleetFlags {
  readonly sim?: string;
  /** The deployed stack (AWS only; default GPU_FLEET_STACK, else GpuFleet). */
  readonly stack?: string;
}

export async function openFleet(flags: FleetFlags): Promise<Fleet> {
  return flags.sim ? openSimFleet(flags.sim) : openAwsFleet(flags);
}

function openSimFleet(dir: string): Fleet {
  const folder = resolve(dir);
  if (!existsSync(join(folder, STATE_FILE))) {
    throw new UsageError(`--sim ${dir}: no simulation there (${STATE_FILE} is missing); write one with: gpu-fleet simulate --out ${dir}`);
  }
  const teams = ['nlp', 'vision', 'speech', 'recsys'];
  const env = createSimEnvironment({
    startMs: DEFAULT_SIM_START_MS,
    seed: 1,
    groups: savedSimGroups(folder) ?? DEFAULT_SIM_GROUPS,
    teams,
    teamTags: defaultTeamTags(teams),
  });
  loadSimState(env, folder);
  let dirty = false;
  /** The store, with a write through one of `writes` marking the simulation to be saved when the command ends. */
  const savedOnWrite = <T extends object>(store: T, writes: readonly string[]): T =>
    new Proxy(store, {
      get(target, prop, receiver) {
        const v = Reflect.get(target, prop, receiver) as unknown;
        if (typeof v !== 'function') return v;
        if (writes.includes(String(prop))) dirty = true;
        return (v as (...a: unknown[]) => unknown).bind(target);
      },
    });
  return {
    source: `simulation in ${dir}`,
    clock: env.clock,
    policy: DEFAULT_POLICY,
    jobs: savedOnWrite(env.jobs, ['create', 'update', 'put']),
    nodes: env.nodes,
    decisions: env.decisions,
    ledger: env.ledger,
    queue: env.queue,
    budgets: env.budgets,
    providers: env.ports.providers,
    services: savedOnWrite(env.services, ['create', 'update']),
    jobLogs: env.jobLogs,
    // As the simulation billed them: its bucket in the region of its first AWS zone, on the stack's default network.
    checkpointBytes: (() => {
      const zones = awsZonesOf(savedSimGroups(folder) ?? DEFAULT_SIM_GROUPS);
      return {
        logs: (sinceMs: number) => env.checkpoints.byteLogs(sinceMs),
        store: { cloud: 'aws' as const, region: zones[0] ? regionOfZone('aws', zones[0]) : SIM_STACK_REGION },
        layout: defaultNetworkLayout(zones),
        rates: shippedByteRates(),
      };
    })(),
    async submit(team, body, token = randomUUID()) {
      if (!(await env.queue.teams()).includes(team))
        throw new UsageError(`--team ${team}: the simulation has no queue for it; its teams are ${(await env.queue.teams()).join(', ')}`);
      const out = await intake(
        {
          jobs: env.jobs,
          clock: env.clock,
          fleetShape: fleetShapeFrom(env.ports.providers, env.catalog.instanceTypes, env.clock),
          services: env.services,
        },
        { team, body, token },
      );
      if (out.outcome === 'token-reused') throw new UsageError(`--token: ${out.error}`);
      dirty = true;
      if (out.outcome === 'service')
        return {
          jobId: out.service.id,
          token,
          note: `service ${out.service.id} ${out.created ? 'created' : 'updated'} (version ${out.service.version}); reconcile starts its replicas`,
        };
      const jobId = jobIdFor(team, token);
      return {
        jobId,
        token,
        note:
          out.outcome === 'duplicate'
            ? `already submitted with this token: ${jobId}`
            : `taken in by the simulation (${out.outcome}); a saved simulation is a snapshot whose clock does not move, so the job waits there`,
      };
    },
    async close() {
      if (dirty) saveSimState(env, folder);
    },
  };
}

async function openAwsFleet(flags: FleetFlags): Promise<Fleet> {
  const { openAwsPorts } = await import('./aws.ts');
  const { s3BucketBytes } = await import('../cloud/aws/cloudwatch-metrics.ts');
  const ports = await openAwsPorts(flags);
  const { config } = ports;
  return {
    source: `AWS ${config.region}${ports.stackName ? `, stack ${ports.stackName}` : ''}`,
    clock: ports.clock,
    policy: config.policy,
    jobs: ports.stores.jobs,
    nodes: ports.stores.nodes,
    decisions: ports.stores.decisions,
    ledger: ports.stores.ledger,
    queue: ports.queue,
    budgets: ports.reconcile.budgets,
    ...(ports.reconcile.budgetMemory ? { budgetMemory: ports.reconcile.budgetMemory } : {}),
    providers: ports.reconcile.providers,
    gpuMetrics: ports.gpuMetrics,
    ...(ports.services ? { services: ports.services } : {}),
    ...(ports.jobLogs ? { jobLogs: ports.jobLogs } : {}),
    ...(ports.reconcile.bytes
      ? {
          checkpointBytes: {
            store: ports.reconcile.bytes.store,
            ...(ports.reconcile.bytes.roots ? { roots: ports.reconcile.bytes.roots } : {}),
            layout: ports.reconcile.bytes.layout,
            rates: ports.reconcile.bytes.rates,
            logs: (sinceMs: number) => ports.stores.checkpoints.byteLogs(sinceMs),
            bucketBytes: () => s3BucketBytes(ports.clients.cloudwatch, config.checkpointBucket, ports.clock),
          },
        }
      : {}),
    async submit(team, body, token = randomUUID()) {
      // Intake would not take a reused token with another spec: say so now, before the message is sent.
      const stored = await ports.stores.jobs.get(jobIdFor(team, token));
      if (stored) {
        const again = repeated(stored, { team, body, token }, checkedSpec(body));
        if (again.outcome === 'token-reused') throw new UsageError(`--token: ${again.error}`);
      }
      const { messageId } = await ports.queue.send(team, body, token);
      return {
        jobId: jobIdFor(team, token),
        token,
        note: `sent to the team's queue (message ${messageId}); intake stores it within seconds`,
      };
    },
    async close() {},
  };
}

/** Cancels a job: a pending one at once; a running one is checkpointed (if it can) and stopped by its node's agent. */
export async function cancelJob(fleet: Fleet, jobId: string): Promise<{ status: string; message: string }> {
  const job = await fleet.jobs.get(jobId);
  // A service is cancelled by its id too (TEAM.NAME): its replicas are drained and stopped by the next reconciles.
  if (!job && fleet.services) {
    const service = await fleet.services.get(jobId);
    if (service) return cancelService(fleet.services, service, fleet.clock.nowMs());
  }
  if (!job) throw new UsageError(`no job or service ${jobId}; see gpu-fleet status for the jobs and services there are`);
  if (job.state === 'cancelled') return { status: 'cancelled', message: `${jobId} was already cancelled` };
  if (['succeeded', 'failed', 'rejected'].includes(job.state))
    return { status: job.state, message: `${jobId} already ended (${job.state}); nothing to cancel` };
  const out = await applyJobEvent(fleet.jobs, jobId, { type: 'cancel' }, fleet.clock.nowMs());
  if (out.status === 'refused') throw new GpuFleetError(out.error);
  const now = await fleet.jobs.get(jobId);
  if (now?.state === 'cancelled') return { status: 'cancelled', message: `${jobId} cancelled (it had not started)` };
  return {
    status: 'cancel-requested',
    message: `${jobId}: ${job.spec?.checkpoint ? 'asked to checkpoint, then ' : ''}its node's agent stops it and reports it cancelled`,
  };
}

async function cancelService(services: ServiceStore, record: ServiceRecord, nowMs: number): Promise<{ status: string; message: string }> {
  for (let current: ServiceRecord | undefined = record, tries = 0; current && tries < 5; tries++) {
    const next = cancelledService(current, nowMs);
    if (!next) return { status: 'cancelled', message: `service ${record.id} was already cancelled` };
    const out = await services.update(next, current.version);
    if (out.ok)
      return {
        status: 'cancel-requested',
        message: `service ${record.id} cancelled: each replica leaves the load balancer, drains (its deregistration delay) and stops at the next reconciles`,
      };
    current = out.current;
  }
  throw new GpuFleetError(`service ${record.id}: its record kept changing; try again`);
}

/** The validated spec of a body the command wrote (JSON), or undefined when it is not a valid spec. */
function checkedSpec(body: string): JobSpec | undefined {
  const check = checkJobSpec(JSON.parse(body) as unknown);
  return check.ok ? check.spec : undefined;
}
