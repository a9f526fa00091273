import { existsSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { randomUUID } from 'node:crypto';
import { jobIdFor } from '../core/job.ts';
import { defaultNetworkLayout, type ByteLog, type ByteRates, type NetworkLayout, type StoreSites } from '../core/bytes.ts';
import { regionOfZone } from '../core/catalog.ts';
import { shippedByteRates } from '../cloud/prices.ts';
import type {
  Clock,
  GpuMetricsSource,
  NodeGroupProvider,
  BudgetTagSource,
  BudgetMemory,
  JobLogSource,
  JobQueue,
  JobStore,
} from '../core/ports.ts';
import { fleetShapeFrom, intake, repeated } from '../core/services/intake.ts';
import { checkJobSpec, type JobSpec } from '../core/job-spec.ts';
import { DEFAULT_POLICY, type Policy } from '../core/snapshot.ts';
import { DEFAULT_SIM_GROUPS, defaultTeamTags } from '../cloud/sim/defaults.ts';
import { createSimEnvironment } from '../cloud/sim/environment.ts';
import { awsZonesOf, DEFAULT_SIM_START_MS, SIM_STACK_REGION } from '../cloud/sim/simulation.ts';
import { loadSimState, savedSimGroups, saveSimState, STATE_FILE } from '../cloud/sim/state.ts';
import { isCloudError, OutOfViewError, UsageError } from '../core/errors.ts';
import { cancelForPerson, type CancelOutcome } from '../core/services/cancel.ts';
import { ADMIN, viewOf, type PeoplePorts, type Viewer } from '../core/services/team-view.ts';
import type { PeopleWhoami } from '../cloud/aws/people-api-protocol.ts';
import type { SqsJobQueue } from '../cloud/aws/sqs-queue.ts';

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
  readonly policy: Pick<Policy, 'reconcileIntervalSec' | 'defaultRuntimeSec'>;
  /** Who is looking: the admin sees every team; a team's role sees its own (core/services/team-view.ts). */
  readonly viewer: Viewer;
  /** The role a deployed fleet's people API saw the caller as (absent for a simulation, or tables read directly). */
  readonly role?: string;
  readonly jobs: PeoplePorts['jobs'];
  readonly nodes: PeoplePorts['nodes'];
  readonly decisions: PeoplePorts['decisions'];
  readonly ledger: PeoplePorts['ledger'];
  readonly queue: PeoplePorts['queue'];
  readonly budgets: BudgetTagSource;
  /** The last valid budget values reconcile keeps (a deployed fleet's control table); what is in force is read with them. */
  readonly budgetMemory?: Pick<BudgetMemory, 'load'>;
  readonly providers: readonly Pick<NodeGroupProvider, 'cloud' | 'scope' | 'listGroups' | 'listInstances'>[];
  readonly gpuMetrics?: GpuMetricsSource;
  /** Service records, where the fleet has them (a simulation; a deployed fleet gets its table with the load balancer). */
  readonly services?: PeoplePorts['services'];
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
  /** Cancels a job or service (the viewer's own team's, for a team's role). */
  cancel(jobId: string): Promise<CancelOutcome>;
  /** Sets `gpu-fleet:*` budget tags on a team's queue; refused (with why) where the caller's role may not. */
  setBudgetTags(team: string, tags: Readonly<Record<string, string>>): Promise<void>;
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
  const jobs = savedOnWrite(env.jobs, ['create', 'update', 'put']);
  const services = savedOnWrite(env.services, ['create', 'update']);
  // A saved simulation is looked at as the admin sees a fleet: every team, inline environment values hidden.
  const seen = viewOf(
    {
      jobs,
      nodes: env.nodes,
      decisions: env.decisions,
      ledger: env.ledger,
      queue: env.queue,
      budgets: env.budgets,
      services,
      jobLogs: env.jobLogs,
    },
    ADMIN,
    teams,
  );
  return {
    source: `simulation in ${dir}`,
    clock: env.clock,
    policy: DEFAULT_POLICY,
    viewer: ADMIN,
    ...seen,
    providers: env.ports.providers,
    cancel: (jobId) => cancelForPerson({ jobs, services }, ADMIN, jobId, env.clock.nowMs()),
    async setBudgetTags(team, tags) {
      const set = (await env.budgets.readTeamTags()).find((t) => t.team === team);
      if (!set) throw new UsageError(`--team ${team}: the simulation has no such team; its teams are ${teams.join(', ')}`);
      env.budgets.setTags(team, { ...set.tags, ...tags });
      dirty = true;
    },
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
  const [{ openAwsPorts }, { peoplePortsOf }] = await Promise.all([import('./aws.ts'), import('../cloud/wiring.ts')]);
  const ports = await openAwsPorts(flags);
  const { config } = ports;
  const source = `AWS ${config.region}${ports.stackName ? `, stack ${ports.stackName}` : ''}`;
  const tagTeam = async (team: string, tags: Readonly<Record<string, string>>, who?: PeopleWhoami) => {
    try {
      await (ports.queue as SqsJobQueue).tagTeam(team, tags);
    } catch (error) {
      if (isCloudError(error, 'access-denied')) {
        const { budgetRefused } = await import('../cloud/aws/people-api-client.ts');
        throw budgetRefused(team, who, error);
      }
      throw error;
    }
  };
  // A deployed stack with a people API: the person's role decides what they see, and their credentials read no table.
  if (config.peopleApiUrl) {
    const { PeopleApiClient } = await import('../cloud/aws/people-api-client.ts');
    const api = new PeopleApiClient({ url: config.peopleApiUrl, region: config.region });
    const who = await api.whoami();
    const p = api.ports(who);
    const bytes = who.bytes as Omit<ByteLogSource, 'logs' | 'bucketBytes'> | undefined;
    return {
      source: `${source}, as ${who.view.kind === 'admin' ? 'the admin role' : `team ${who.view.team}'s role`} (${who.role})`,
      clock: ports.clock,
      policy: who.policy,
      viewer: who.view,
      role: who.role,
      jobs: p.jobs,
      nodes: p.nodes,
      decisions: p.decisions,
      ledger: p.ledger,
      queue: p.queue,
      budgets: p.budgets,
      ...(p.budgetMemory ? { budgetMemory: p.budgetMemory } : {}),
      providers: p.providers,
      ...(p.gpuMetrics ? { gpuMetrics: p.gpuMetrics } : {}),
      ...(p.services ? { services: p.services } : {}),
      ...(p.jobLogs ? { jobLogs: p.jobLogs } : {}),
      ...(bytes && p.byteLogs
        ? {
            checkpointBytes: {
              ...bytes,
              logs: p.byteLogs,
              bucketBytes: () => p.bucketBytes() as Promise<BucketBytes | undefined>,
            },
          }
        : {}),
      async submit(team, body, token) {
        if (who.view.kind === 'team' && who.view.team !== team)
          throw new OutOfViewError(
            who.view.team,
            `--team ${team}: this role is team ${who.view.team}'s and sends to its own queue only (the platform's admin role may send to any)`,
          );
        return sendChecked(p.jobs, ports.queue, team, body, token);
      },
      cancel: (jobId) => api.cancel(jobId),
      setBudgetTags: (team, tags) => tagTeam(team, tags, who),
      async close() {},
    };
  }
  // No people API named: the tables are read with the caller's own credentials (an operator's break-glass path; a team's role
  // has no access to them), as the admin sees the fleet (no team's ids to put out of view, so no list of teams is read).
  const { bytes, bucketBytes, ...people } = peoplePortsOf(ports);
  return {
    source,
    clock: ports.clock,
    policy: config.policy,
    viewer: ADMIN,
    ...viewOf(people, ADMIN, []),
    providers: ports.reconcile.providers,
    ...(bytes && people.byteLogs && bucketBytes ? { checkpointBytes: { ...bytes, logs: people.byteLogs, bucketBytes } } : {}),
    submit: (team, body, token) => sendChecked(ports.stores.jobs, ports.queue, team, body, token),
    cancel: (jobId) =>
      cancelForPerson(
        { jobs: ports.stores.jobs, ...(ports.services ? { services: ports.services } : {}) },
        ADMIN,
        jobId,
        ports.clock.nowMs(),
      ),
    setBudgetTags: (team, tags) => tagTeam(team, tags),
    async close() {},
  };
}

/**
 * Sends a spec to the team's queue with its token. Intake would not take a reused token with
 * another spec: said now, before the message is sent.
 */
async function sendChecked(
  jobs: Pick<JobStore, 'get'>,
  queue: Pick<JobQueue, 'send'>,
  team: string,
  body: string,
  token: string = randomUUID(),
): Promise<{ jobId: string; token: string; note: string }> {
  const jobId = jobIdFor(team, token);
  const stored = await jobs.get(jobId);
  if (stored) {
    const again = repeated(stored, { team, body, token }, checkedSpec(body));
    if (again.outcome === 'token-reused') throw new UsageError(`--token: ${again.error}`);
  }
  const { messageId } = await queue.send(team, body, token);
  return { jobId, token, note: `sent to the team's queue (message ${messageId}); intake stores it within seconds` };
}

/** The validated spec of a body the command wrote (JSON), or undefined when it is not a valid spec. */
function checkedSpec(body: string): JobSpec | undefined {
  const check = checkJobSpec(JSON.parse(body) as unknown);
  return check.ok ? check.spec : undefined;
}
