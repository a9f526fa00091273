import { milliGpusUsed } from '../../core/gpu.ts';
import { TERMINAL_STATES, type Job } from '../../core/job.ts';
import { costForDuration, type MicroUsd } from '../../core/money.ts';
import type { TeamTagSet } from '../../core/ports.ts';
import { intake } from '../../core/services/intake.ts';
import { reconcile, type Planner } from '../../core/services/reconcile.ts';
import { DEFAULT_POLICY, type Policy } from '../../core/snapshot.ts';
import { createSimEnvironment, type SimEnvironment } from './environment.ts';
import { SimAgents } from './sim-agent.ts';
import type { CapacityModel, SimGroupConfig, SimInstance } from './sim-cloud.ts';
import type { Workload, WorkloadJob } from './workload.ts';

export interface SimulationOptions {
  readonly workload: Workload;
  readonly groups: readonly SimGroupConfig[];
  readonly teamTags: readonly TeamTagSet[];
  readonly planner: Planner;
  readonly policyName?: string;
  readonly seed: number;
  /** Virtual hours to simulate at most; the run ends sooner once every job has ended and the fleet is empty. */
  readonly hours: number;
  readonly policy?: Partial<Policy>;
  readonly bootSec?: number;
  readonly capacity?: CapacityModel;
  /** Epoch of virtual time 0 (default 2026-11-02T00:00:00Z, a Monday). */
  readonly startMs?: number;
  /** Agent step (default 15 s, the agent's heartbeat period). */
  readonly tickSec?: number;
  readonly onProgress?: (virtualSec: number, totalSec: number) => void;
}

export interface SimulationSummary {
  readonly policy: string;
  readonly trace: string;
  readonly seed: number;
  readonly virtualHours: number;
  readonly jobs: number;
  readonly accepted: number;
  readonly rejected: number;
  readonly completed: number;
  readonly failed: number;
  readonly cancelled: number;
  /** Accepted jobs that are in no state at all: must be 0. */
  readonly lost: number;
  readonly runningAtEnd: number;
  readonly pendingAtEnd: number;
  readonly gpuHoursUsed: number;
  readonly gpuHoursPaid: number;
  readonly utilizationPct: number;
  readonly costMicroUsd: MicroUsd;
  /** What the same machines would have cost at on-demand prices. */
  readonly onDemandCostMicroUsd: MicroUsd;
  readonly costByTeamMicroUsd: Readonly<Record<string, MicroUsd>>;
  readonly p50WaitSec: number;
  readonly p95WaitSec: number;
  readonly interruptions: number;
  readonly checkpoints: number;
  readonly machinesLaunched: number;
  readonly peakGpus: number;
  readonly wallMs: number;
}

export interface SimulationResult {
  readonly summary: SimulationSummary;
  readonly env: SimEnvironment;
  readonly jobs: readonly Job[];
}

export const DEFAULT_SIM_START_MS = Date.UTC(2026, 10, 2, 0, 0, 0);

/**
 * Replays a workload through the real control loop on the simulated cloud: each job is sent to
 * its team's queue and taken in by the intake service; node agents run what is placed; the
 * reconcile service runs every reconcile interval of virtual time, as in production.
 */
export async function runSimulation(options: SimulationOptions): Promise<SimulationResult> {
  const wallStart = performance.now();
  const policy: Policy = { ...DEFAULT_POLICY, ...options.policy };
  const startMs = options.startMs ?? DEFAULT_SIM_START_MS;
  const tickMs = (options.tickSec ?? 15) * 1000;
  const horizonMs = Math.round(options.hours * 3_600_000);
  const env = createSimEnvironment({
    startMs,
    seed: options.seed,
    groups: options.groups,
    teams: [...new Set([...options.workload.teams, ...options.teamTags.map((t) => t.team)])],
    teamTags: options.teamTags,
    ...(options.bootSec !== undefined ? { bootSec: options.bootSec } : {}),
    ...(options.capacity ? { capacity: options.capacity } : {}),
  });
  const byId = new Map<string, WorkloadJob>(options.workload.jobs.map((j) => [j.id, j]));
  const workSecOf = (job: Job) => byId.get(job.spec.name ?? '')?.workSec ?? byId.get(job.id.slice(job.team.length + 1))?.workSec ?? job.spec.expectedRuntimeSec ?? 3600;
  const agents = new SimAgents({ clock: env.clock, jobs: env.jobs, nodes: env.nodes, checkpoints: env.checkpoints, instanceTypes: env.catalog.instanceTypes, workSecOf });

  const cost = { actual: 0, onDemand: 0, gpuMsPaid: 0 };
  const account = (inst: SimInstance, endMs: number) => {
    const p = env.priceOf(inst.offering);
    const aliveMs = Math.max(0, endMs - inst.launchedAtMs);
    if (p) {
      cost.actual += costForDuration(p.price, aliveMs);
      cost.onDemand += costForDuration(p.onDemand, aliveMs);
    }
    cost.gpuMsPaid += aliveMs * (env.catalog.instanceTypes.get(inst.offering.instanceType)?.gpuCount ?? 0);
  };
  const accounted = new Set<string>();
  env.cloud.onEnded = (inst) => {
    if (accounted.has(inst.id)) return;
    accounted.add(inst.id);
    account(inst, inst.endedAtMs ?? env.clock.nowMs());
  };

  const arrivals = [...options.workload.jobs].sort((a, b) => a.submitSec - b.submitSec);
  let next = 0;
  let gpuMsUsed = 0;
  let peakGpus = 0;
  const reconcileEvery = Math.max(1, Math.round((policy.reconcileIntervalSec * 1000) / tickMs));
  let tick = 0;
  const teams = await env.queue.teams();
  let t = 0;
  for (; t <= horizonMs; t += tickMs, tick++) {
    env.clock.advanceTo(startMs + t);
    while (next < arrivals.length && arrivals[next]!.submitSec * 1000 <= t) {
      const job = arrivals[next++]!;
      await env.queue.send(job.team, JSON.stringify(job.spec), job.id);
    }
    for (const team of teams) {
      for (const message of env.queue.receive(team, Number.MAX_SAFE_INTEGER)) {
        await intake({ jobs: env.jobs, clock: env.clock }, { team, body: message.body, token: message.token });
      }
    }
    env.cloud.tick();
    const instances = await env.cloud.listInstances();
    await agents.tick(instances);
    if (tick % reconcileEvery === 0) {
      await reconcile(env.ports, { planner: options.planner, policy, holder: 'sim' });
    }
    const running = await env.jobs.listByState(['running', 'checkpointing']);
    for (const job of running) gpuMsUsed += (tickMs * milliGpusUsed(job.spec.gpu) * job.spec.nodes) / 1000;
    const liveGpus = instances.filter((i) => i.state !== 'terminated').reduce((s, i) => s + (env.catalog.instanceTypes.get(i.instanceType)?.gpuCount ?? 0), 0);
    peakGpus = Math.max(peakGpus, liveGpus);
    options.onProgress?.(t / 1000, horizonMs / 1000);
    if (next >= arrivals.length && running.length === 0 && tick % reconcileEvery === 0) {
      const open = await env.jobs.listByState(['pending', 'placed']);
      if (open.length === 0 && instances.every((i) => i.state === 'terminated')) break;
    }
  }
  const endMs = env.clock.nowMs();
  for (const inst of env.cloud.allInstances()) {
    if (!accounted.has(inst.id)) {
      accounted.add(inst.id);
      account(inst, inst.endedAtMs ?? endMs);
    }
  }

  const jobs = env.jobs.all();
  const costByTeam: Record<string, MicroUsd> = {};
  for (const row of await env.ledger.list()) costByTeam[row.team] = (costByTeam[row.team] ?? 0) + row.spentMicroUsd;
  const summary = summarize({
    costByTeam,
    options,
    env,
    jobs,
    endMs,
    startMs,
    gpuMsUsed,
    cost,
    peakGpus,
    checkpoints: agents.stats.checkpoints,
    launched: accounted.size,
    wallMs: performance.now() - wallStart,
  });
  return { summary, env, jobs };
}

function summarize(input: {
  costByTeam: Record<string, MicroUsd>;
  options: SimulationOptions;
  env: SimEnvironment;
  jobs: readonly Job[];
  endMs: number;
  startMs: number;
  gpuMsUsed: number;
  cost: { actual: number; onDemand: number; gpuMsPaid: number };
  peakGpus: number;
  checkpoints: number;
  launched: number;
  wallMs: number;
}): SimulationSummary {
  const { jobs, endMs } = input;
  const count = (pred: (j: Job) => boolean) => jobs.filter(pred).length;
  const accepted = count((j) => j.state !== 'rejected');
  const known = new Set<string>([...TERMINAL_STATES, 'pending', 'placed', 'running', 'checkpointing']);
  const lost = input.options.workload.jobs.length - jobs.length + count((j) => !known.has(j.state));
  const waits = jobs
    .filter((j) => j.state !== 'rejected')
    .map((j) => ((j.firstStartedAtMs ?? (j.state === 'pending' || j.state === 'placed' ? endMs : undefined)) ?? endMs) - j.submittedAtMs)
    .sort((a, b) => a - b);
  return {
    policy: input.options.policyName ?? 'gpu-fleet',
    trace: input.options.workload.name,
    seed: input.options.seed,
    virtualHours: round2((endMs - input.startMs) / 3_600_000),
    jobs: input.options.workload.jobs.length,
    accepted,
    rejected: count((j) => j.state === 'rejected'),
    completed: count((j) => j.state === 'succeeded'),
    failed: count((j) => j.state === 'failed'),
    cancelled: count((j) => j.state === 'cancelled'),
    lost,
    runningAtEnd: count((j) => j.state === 'running' || j.state === 'checkpointing' || j.state === 'placed'),
    pendingAtEnd: count((j) => j.state === 'pending'),
    gpuHoursUsed: round2(input.gpuMsUsed / 3_600_000),
    gpuHoursPaid: round2(input.cost.gpuMsPaid / 3_600_000),
    utilizationPct: input.cost.gpuMsPaid > 0 ? round2((100 * input.gpuMsUsed) / input.cost.gpuMsPaid) : 0,
    costMicroUsd: input.cost.actual,
    onDemandCostMicroUsd: input.cost.onDemand,
    costByTeamMicroUsd: input.costByTeam,
    p50WaitSec: percentile(waits, 0.5) / 1000,
    p95WaitSec: percentile(waits, 0.95) / 1000,
    interruptions: jobs.reduce((s, j) => s + j.interruptions, 0),
    checkpoints: input.checkpoints,
    machinesLaunched: input.launched,
    peakGpus: input.peakGpus,
    wallMs: Math.round(input.wallMs),
  };
}

/** Nearest-rank percentile of sorted values (0 for none). */
export function percentile(sorted: readonly number[], q: number): number {
  if (sorted.length === 0) return 0;
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1));
  return sorted[rank]!;
}

function round2(x: number): number {
  return Math.round(x * 100) / 100;
}

