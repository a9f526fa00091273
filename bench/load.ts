// bench:load — one reconcile at scale: 100,000 pending jobs, 2,000 nodes, 50 teams, through the
// real reconcile service and planner on the simulated cloud's in-memory stores. Prints the
// duration and the peak memory, against the reconcile function's Lambda limits (1,769 MB, 60 s).
//
//   npm run bench:load -- [--jobs N] [--nodes N] [--teams N] [--json]
import { Command } from 'commander';
import { wholeNumber } from '../cloud/flags.ts';
import { newPendingJob } from '../core/job.ts';
import { JobSpecSchema } from '../core/job-spec.ts';
import { plan } from '../core/planner/planner.ts';
import { reconcile } from '../core/services/reconcile.ts';
import { DEFAULT_POLICY } from '../core/snapshot.ts';
import { SimAgents } from '../cloud/sim/sim-agent.ts';
import { defaultTeamTags } from '../cloud/sim/defaults.ts';
import { createSimEnvironment } from '../cloud/sim/environment.ts';
import type { SimGroupConfig } from '../cloud/sim/sim-cloud.ts';

const LAMBDA_MB = 1769;
const LAMBDA_TIMEOUT_SEC = 60;

export async function benchLoad(o: { jobs: number; nodes: number; teams: number }) {
  const startMs = Date.UTC(2026, 10, 2);
  const teams = Array.from({ length: o.teams }, (_, i) => `team-${String(i).padStart(2, '0')}`);
  const perGroup = Math.ceil(o.nodes / 4);
  const groups: SimGroupConfig[] = [
    {
      id: 'p3-8xl-spot',
      instanceTypes: ['p3.8xlarge'],
      zones: ['us-west-2a', 'us-west-2b'],
      capacityType: 'spot',
      minSize: 0,
      maxSize: perGroup * 4,
    },
    {
      id: 'p3-8xl-od',
      instanceTypes: ['p3.8xlarge'],
      zones: ['us-west-2a', 'us-west-2b'],
      capacityType: 'on-demand',
      minSize: 0,
      maxSize: perGroup * 4,
    },
    {
      id: 'p3-16xl-spot',
      instanceTypes: ['p3.16xlarge'],
      zones: ['us-west-2a', 'us-west-2b'],
      capacityType: 'spot',
      minSize: 0,
      maxSize: perGroup * 4,
    },
    {
      id: 'p3-16xl-od',
      instanceTypes: ['p3.16xlarge'],
      zones: ['us-west-2a', 'us-west-2b'],
      capacityType: 'on-demand',
      minSize: 0,
      maxSize: perGroup * 4,
    },
  ];
  const env = createSimEnvironment({ startMs, seed: 1, groups, teams, teamTags: defaultTeamTags(teams), bootSec: 60 });
  for (const g of groups) await env.cloud.setDesiredCapacity(g.id, perGroup);
  env.clock.advanceBy(120_000);
  env.cloud.tick();
  const agents = new SimAgents({
    clock: env.clock,
    jobs: env.jobs,
    nodes: env.nodes,
    checkpoints: env.checkpoints,
    instanceTypes: env.catalog.instanceTypes,
    workSecOf: () => 3600,
  });
  await agents.tick(await env.cloud.listInstances());
  // A mixed queue: whole GPUs (1, 2, 4, 8), gangs, MIG-less fractions, checkpointing, priorities, deadlines.
  const shapes = [
    { kind: 'whole', count: 1 },
    { kind: 'whole', count: 2 },
    { kind: 'whole', count: 4 },
    { kind: 'whole', count: 8 },
    { kind: 'fraction', milliGpu: 250, memoryMiB: 4000 },
  ] as const;
  for (let i = 0; i < o.jobs; i++) {
    const team = teams[i % teams.length]!;
    const spec = JobSpecSchema.parse({
      image: 'pytorch/pytorch:2.3.0',
      command: ['python', 'train.py'],
      gpu: shapes[i % shapes.length],
      priority: 50 + (i % 7) * 10,
      ...(i % 3 === 0 ? { checkpoint: { intervalSec: 600 } } : {}),
      ...(i % 11 === 0 ? { nodes: 2, gpu: { kind: 'whole', count: 8 } } : {}),
      expectedRuntimeSec: 600 + (i % 24) * 900,
      labels: { project: `p${i % 40}` },
    });
    await env.jobs.create(newPendingJob({ id: `${team}.j${i}`, team, spec, submittedAtMs: startMs + (i % 3600) * 1000 }));
  }
  const nodes = (await env.nodes.list()).length;
  global.gc?.();
  const heapBefore = process.memoryUsage().heapUsed;
  const t0 = performance.now();
  const out = await reconcile(env.ports, { planner: plan, policy: DEFAULT_POLICY, holder: 'load', stopwatch: () => performance.now() });
  const sec = (performance.now() - t0) / 1000;
  if (out.status !== 'done') throw new Error(`reconcile skipped: ${out.reason}`);
  const heapAfter = process.memoryUsage().heapUsed;
  const peakRssMb = process.resourceUsage().maxRSS / 1024;
  return {
    jobs: o.jobs,
    nodes,
    teams: o.teams,
    durationSec: Math.round(sec * 100) / 100,
    planSec: Math.round(out.decision.planMs / 10) / 100,
    actions: out.decision.plan.actions.length,
    placed: out.decision.plan.actions.filter((a) => a.kind === 'place').length,
    waiting: out.decision.plan.waiting.length,
    heapBeforeMb: Math.round(heapBefore / 1048576),
    heapAfterMb: Math.round(heapAfter / 1048576),
    peakRssMb: Math.round(peakRssMb),
    lambdaMemoryMb: LAMBDA_MB,
    lambdaTimeoutSec: LAMBDA_TIMEOUT_SEC,
  };
}

const invokedDirectly = process.argv[1] !== undefined && import.meta.url === new URL(`file://${process.argv[1]}`).href;
if (invokedDirectly) {
  const program = new Command('bench:load')
    .option('--jobs <n>', 'pending jobs', wholeNumber('--jobs', 1, 10_000_000), 100_000)
    .option('--nodes <n>', 'nodes', wholeNumber('--nodes', 0, 1_000_000), 2000)
    .option('--teams <n>', 'teams', wholeNumber('--teams', 1, 10_000), 50)
    .option('--json', 'print JSON')
    .parse();
  const f = program.opts<{ jobs: number; nodes: number; teams: number; json?: boolean }>();
  const r = await benchLoad({ jobs: f.jobs, nodes: f.nodes, teams: f.teams });
  if (f.json) process.stdout.write(`${JSON.stringify(r, null, 2)}\n`);
  else {
    process.stdout.write(
      `one reconcile: ${r.jobs.toLocaleString('en-US')} pending jobs, ${r.nodes.toLocaleString('en-US')} nodes, ${r.teams} teams\n` +
        `  duration ${r.durationSec} s (plan ${r.planSec} s), ${r.actions.toLocaleString('en-US')} actions (${r.placed.toLocaleString('en-US')} placements), ${r.waiting.toLocaleString('en-US')} left waiting\n` +
        `  heap ${r.heapBeforeMb} MB before, ${r.heapAfterMb} MB after; peak RSS of the whole process (setup included) ${r.peakRssMb} MB\n` +
        `  Lambda limits of the reconcile function: ${r.lambdaMemoryMb} MB, ${r.lambdaTimeoutSec} s → ${r.peakRssMb < r.lambdaMemoryMb && r.durationSec < r.lambdaTimeoutSec ? 'fits' : 'DOES NOT FIT'}\n`,
    );
  }
}
