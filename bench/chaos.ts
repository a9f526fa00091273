// bench:chaos — the whole control loop on the simulated cloud under each fault profile, with the
// invariants checked every simulated minute, against the fault-free run on the same trace and seed.
//
//   npm run bench:chaos -- [--hours H] [--seed S] [--profiles a,b] [--clouds aws,gcp] [--mig] [--services] [--rightsizing] [--json]
import { availableParallelism } from 'node:os';
import { resolve } from 'node:path';
import { isMainThread } from 'node:worker_threads';
import { Command } from 'commander';
import { inWorkers } from '../cloud/sim/parallel.ts';
import { listOf, oneOf, wholeNumber } from '../cloud/flags.ts';
import type { Cloud } from '../core/catalog.ts';
import {
  acrossClouds,
  BUILT_IN_SPOT,
  BUILT_IN_TRACE,
  defaultSimServices,
  defaultTeamTags,
  rightsizingScenario,
  simGroupsFor,
} from '../cloud/sim/defaults.ts';
import { FAULT_PROFILES, faultProfile } from '../cloud/sim/faults.ts';
import { runSimulation, type SimulationSummary } from '../cloud/sim/simulation.ts';
import { loadWorkload } from '../cloud/sim/workload.ts';

export interface ChaosRow {
  readonly profile: string;
  readonly accepted: number;
  readonly completed: number;
  readonly lost: number;
  readonly duplicated: number;
  readonly violations: number;
  /** Attempts resumed from an older checkpoint than the newest complete one (an invariant: counted in violations too). */
  readonly staleResumes: number;
  /** Checkpoints asked for whose upload was still going when the machine's terminate hook let it go. */
  readonly savesCutByHook: number;
  /** Attempts requeued as lost while their machine was running and its agent still ran them: must be 0 under `agent-api-outage`. */
  readonly wrongfulRequeues: number;
  readonly costOverheadPct: number;
  readonly p95WaitOverheadPct: number;
  /** The ledger's total against the exact integral of price × machine-time from the simulated cloud, in percent. */
  readonly spendErrorPct: number;
  /** Spend the ledger put on the wrong team (or none): Σ |ledger − exact| per team, idle included, ÷ the exact total, in percent. */
  readonly teamSpendErrorPct: number;
  /** With more than one cloud: the p95 wait overhead of the jobs each cloud could run (a job either could run counts in both). */
  readonly cloudP95WaitOverheadPct?: Readonly<Record<string, number>>;
  /** With --mig: machines of the MIG group launched and scaled in over the run, and MIG jobs completed. */
  readonly migGroup?: {
    readonly launched: number;
    readonly scaledIn: number;
    readonly rebought: number;
    readonly scaledInWithWorkWaiting: number;
  };
  /** With --rightsizing: jobs that ran in a shape right-sizing chose, and how many of them failed. */
  readonly rightsized?: { readonly jobs: number; readonly failed: number };
  /** With --services: each service's availability (ready and registered replicas ≥ needed) and replicas lost. */
  readonly services?: Readonly<
    Record<string, { readonly availabilityPct: number; readonly requestsWithinObjectivePct?: number; readonly replicasLost: number }>
  >;
}

/**
 * The MIG fleet of `--mig`: A100 40GB machines booted in MIG mode, beside the V100 groups (in
 * us-east-1: the shipped catalogue has no us-west-2 on-demand price for p4d.24xlarge).
 */
export const MIG_GROUP = {
  id: 'p4d-mig-od',
  instanceTypes: ['p4d.24xlarge'],
  zones: ['us-east-1a', 'us-east-1b'],
  capacityType: 'on-demand' as const,
  minSize: 0,
  maxSize: 20,
  migEnabled: true,
};
export const MIG_TRACE = new URL('../data/traces/alibaba-openb2023-sample.csv', import.meta.url);

export interface ChaosOptions {
  hours: number;
  seed: number;
  profiles: readonly string[];
  /** Replay the busiest window of Alibaba's openb trace with its fractional-GPU pods as MIG requests, on a MIG group too. */
  mig?: boolean;
  /** The clouds of the simulated fleet (default AWS only); with two, the trace's V100 jobs are split as `simulate --clouds` does. */
  clouds?: readonly Cloud[];
  /** Run npm start's two services (nlp.chat, recsys.recommend) beside the jobs in every profile. */
  services?: boolean;
  /**
   * The right-sizing scenario with `gpu.rightsize: "auto"` (A100 machines, half the job families
   * oversized), with spot groups beside the on-demand ones, taken back at 5% per machine-hour:
   * right-sized jobs measured, resized, interrupted and requeued under every fault.
   */
  rightsizing?: boolean;
}

/** One profile's run: its summary, and its right-sized jobs (how many, how many failed). */
export async function chaosProfile(
  options: Omit<ChaosOptions, 'profiles'>,
  profile: string,
): Promise<{ summary: SimulationSummary; rightsized: { jobs: number; failed: number } }> {
  const clouds = options.clouds ?? ['aws'];
  const loaded = options.mig
    ? loadWorkload(MIG_TRACE, { hours: options.hours, busiest: true, fractionsAsMig: true, defaultCheckpointSec: 600 })
    : loadWorkload(BUILT_IN_TRACE, { hours: options.hours });
  const sizing = options.rightsizing ? rightsizingScenario(loaded, { oversizedShare: 0.5, mode: 'auto', spot: true }) : undefined;
  const workload = sizing ? sizing.workload : clouds.length > 1 ? acrossClouds(loaded) : loaded;
  const groups = sizing ? sizing.groups : simGroupsFor(clouds);
  const result = await runSimulation({
    workload,
    groups: options.mig ? [...groups, MIG_GROUP] : groups,
    teamTags: defaultTeamTags(workload.teams),
    seed: options.seed,
    hours: options.hours,
    spot: sizing ? { kind: 'rates', ratePerHour: () => 0.05 } : BUILT_IN_SPOT,
    faults: faultProfile(profile),
    invariants: 'count',
    ...(options.services ? { services: defaultSimServices() } : {}),
  });
  const sized = result.jobs.filter((j) => j.rightsize?.applied);
  return { summary: result.summary, rightsized: { jobs: sized.length, failed: sized.filter((j) => j.state === 'failed').length } };
}

/** Every profile's row against the fault-free run; with `threads` above 1, the profiles run on worker threads. */
export async function benchChaos(
  options: ChaosOptions,
  threads = 1,
): Promise<{ rows: ChaosRow[]; summaries: Record<string, SimulationSummary> }> {
  const { profiles, ...rest } = options;
  const names = ['none', ...profiles.filter((p) => p !== 'none')];
  const results =
    threads > 1
      ? await inWorkers<{ options: typeof rest; profile: string }, Awaited<ReturnType<typeof chaosProfile>>>(
          new URL('./chaos/worker.ts', import.meta.url),
          names.map((profile) => ({ options: rest, profile })),
          threads,
        )
      : await names.reduce<Promise<Awaited<ReturnType<typeof chaosProfile>>[]>>(
          async (done, profile) => [...(await done), await chaosProfile(rest, profile)],
          Promise.resolve([]),
        );
  const byProfile = new Map(names.map((p, i) => [p, results[i]!]));
  const base = byProfile.get('none')!.summary;
  const summaries: Record<string, SimulationSummary> = { none: base };
  const rows: ChaosRow[] = [];
  for (const profile of options.profiles) {
    const result = byProfile.get(profile)!;
    const s = result.summary;
    summaries[profile] = s;
    rows.push({
      profile,
      ...(options.rightsizing ? { rightsized: result.rightsized } : {}),
      accepted: s.accepted,
      completed: s.completed,
      lost: s.lost,
      duplicated: s.duplicated,
      violations: s.violations,
      staleResumes: s.faults.staleResumes,
      savesCutByHook: s.faults.savesCutByHook,
      wrongfulRequeues: s.faults.wrongfulRequeues,
      costOverheadPct: pctOver(s.costMicroUsd, base.costMicroUsd),
      p95WaitOverheadPct: pctOver(s.p95WaitSec, base.p95WaitSec),
      spendErrorPct: s.spendErrorPct,
      teamSpendErrorPct: s.teamSpendErrorPct,
      ...(s.waitByCloud
        ? {
            cloudP95WaitOverheadPct: Object.fromEntries(
              Object.entries(s.waitByCloud).map(([c, w]) => [c, pctOver(w.p95WaitSec, base.waitByCloud?.[c]?.p95WaitSec ?? 0)]),
            ),
          }
        : {}),
      ...(options.mig
        ? { migGroup: s.groupActivity[MIG_GROUP.id] ?? { launched: 0, scaledIn: 0, rebought: 0, scaledInWithWorkWaiting: 0 } }
        : {}),
      ...(s.services
        ? {
            services: Object.fromEntries(
              s.services.map((v) => [
                v.id,
                {
                  availabilityPct: v.availabilityPct,
                  ...(v.requestsWithinObjectivePct !== undefined ? { requestsWithinObjectivePct: v.requestsWithinObjectivePct } : {}),
                  replicasLost: v.replicasLost,
                },
              ]),
            ),
          }
        : {}),
    });
  }
  return { rows, summaries };
}

function pctOver(x: number, base: number): number {
  return base > 0 ? Math.round((10_000 * (x - base)) / base) / 100 : 0;
}

const invokedDirectly = isMainThread && process.argv[1] !== undefined && resolve(process.argv[1]) === import.meta.filename;
if (invokedDirectly) {
  const program = new Command('bench:chaos')
    .option('--hours <h>', 'virtual hours of the built-in trace', wholeNumber('--hours', 1, 720), 48)
    .option('--seed <s>', 'seed of the simulated cloud, its spot market and the faults', wholeNumber('--seed', 0, 2 ** 31), 1)
    .option('--profiles <list>', `comma-separated fault profiles (default: all of ${Object.keys(FAULT_PROFILES).join(', ')})`)
    .option(
      '--mig',
      "replay the busiest window of Alibaba's openb trace, its fractional-GPU pods as MIG requests, with a MIG group in the fleet",
    )
    .option(
      '--clouds <list>',
      'clouds of the simulated fleet: aws (default), gcp, or aws,gcp',
      listOf(oneOf('--clouds', ['aws', 'gcp'] as const)),
    )
    .option('--services', "run npm start's services (nlp.chat, recsys.recommend) beside the jobs in every profile")
    .option(
      '--rightsizing',
      'the right-sizing scenario with rightsize "auto" (A100 machines, half the job families oversized), spot taken back at 5%/machine-hour',
    )
    .option(
      '--threads <n>',
      'worker threads, a profile each at a time (default: every core)',
      wholeNumber('--threads', 1, 256),
      availableParallelism(),
    )
    .option('--json', 'print the rows as JSON')
    .parse();
  const o = program.opts<{
    threads: number;
    hours: number;
    seed: number;
    profiles?: string;
    json?: boolean;
    mig?: boolean;
    clouds?: Cloud[];
    services?: boolean;
    rightsizing?: boolean;
  }>();
  const profiles = o.profiles ? o.profiles.split(',').map((p) => p.trim()) : Object.keys(FAULT_PROFILES);
  for (const p of profiles) {
    try {
      faultProfile(p);
    } catch (error) {
      program.error(`--profiles: ${(error as Error).message}`);
    }
  }
  const started = performance.now();
  const { rows, summaries } = await benchChaos(
    {
      hours: o.hours,
      seed: o.seed,
      profiles,
      ...(o.mig ? { mig: true } : {}),
      ...(o.services ? { services: true } : {}),
      ...(o.rightsizing ? { rightsizing: true } : {}),
      ...(o.clouds ? { clouds: [...new Set(o.clouds)] } : {}),
    },
    o.threads,
  );
  if (o.json) process.stdout.write(`${JSON.stringify(rows, null, 2)}\n`);
  else {
    const head = `${'profile'.padEnd(20)} ${'accepted'.padStart(8)} ${'completed'.padStart(9)} ${'lost'.padStart(5)} ${'duplicated'.padStart(10)} ${'violations'.padStart(10)} ${'stale resumes'.padStart(13)} ${'cut by hook'.padStart(11)} ${'wrongful'.padStart(8)} ${'cost overhead'.padStart(13)} ${'p95 wait overhead'.padStart(17)} ${'spendError'.padStart(10)} ${'team spendError'.padStart(15)}  injected`;
    const lines = rows.map((r) => {
      const f = summaries[r.profile]!.faults;
      const injected = [
        f.apiErrors && `${f.apiErrors} API errors`,
        f.outageErrors && `${f.outageErrors} calls failed by the outage`,
        f.storeConflicts && `${f.storeConflicts} store conflicts`,
        f.crashes && `${f.crashes} crashes`,
        f.duplicateEvents && `${f.duplicateEvents} duplicate events`,
        f.stormInterruptions && `${f.stormInterruptions} storm interruptions`,
        f.deadAgents && `${f.deadAgents} dead agents`,
        f.agentsDown &&
          `${f.agentsDown} agents died (${f.agentRestarts} started again, adopting ${f.adopted}; ${f.watchdogStopped} stopped by watchdogs)`,
        f.checkpointFailures && `${f.checkpointFailures} failed checkpoints`,
        f.uploadFailures && `${f.uploadFailures} failed uploads (${f.uploadsGivenUp} given up)`,
        f.rankStartFailures && `${f.rankStartFailures} ranks that could not start`,
        f.replicasHung && `${f.replicasHung} replicas hung`,
        f.asgTerminations && `${f.asgTerminations} machines the groups took away`,
        f.unansweredAgentCalls && `${f.unansweredAgentCalls} agent calls unanswered (${f.fencedAttempts} attempts fenced)`,
        f.redelivered && `${f.redelivered} messages redelivered (${f.servicesReverted} services reverted)`,
      ]
        .filter(Boolean)
        .join(', ');
      const mig = r.migGroup
        ? `  [MIG group: ${r.migGroup.launched} launched, ${r.migGroup.scaledIn} scaled in (${r.migGroup.scaledInWithWorkWaiting} with MIG work waiting), ${r.migGroup.rebought} bought again within 15 min of a scale-in]`
        : '';
      const byCloud = r.cloudP95WaitOverheadPct
        ? `  [p95 wait overhead of the jobs each cloud could run: ${Object.entries(r.cloudP95WaitOverheadPct)
            .map(([c, v]) => `${c} ${v.toFixed(2)}%`)
            .join(', ')}]`
        : '';
      const svc = r.services
        ? `  [services: ${Object.entries(r.services)
            .map(
              ([id, v]) =>
                `${id} ${v.availabilityPct.toFixed(1)}% available${v.requestsWithinObjectivePct !== undefined ? ` (${v.requestsWithinObjectivePct.toFixed(2)}% of requests in objective)` : ''}, ${v.replicasLost} replicas lost`,
            )
            .join('; ')}]`
        : '';
      const sized = r.rightsized ? `  [right-sized: ${r.rightsized.jobs} jobs, ${r.rightsized.failed} failed]` : '';
      return `${r.profile.padEnd(20)} ${String(r.accepted).padStart(8)} ${String(r.completed).padStart(9)} ${String(r.lost).padStart(5)} ${String(r.duplicated).padStart(10)} ${String(r.violations).padStart(10)} ${String(r.staleResumes).padStart(13)} ${String(r.savesCutByHook).padStart(11)} ${String(r.wrongfulRequeues).padStart(8)} ${`${r.costOverheadPct.toFixed(2)}%`.padStart(13)} ${`${r.p95WaitOverheadPct.toFixed(2)}%`.padStart(17)} ${`${r.spendErrorPct.toFixed(3)}%`.padStart(10)} ${`${r.teamSpendErrorPct.toFixed(3)}%`.padStart(15)}  ${injected || '-'}${mig}${byCloud}${svc}${sized}`;
    });
    const bad = rows.filter(
      (r) =>
        r.lost > 0 ||
        r.duplicated > 0 ||
        r.violations > 0 ||
        r.staleResumes > 0 ||
        (r.profile === 'agent-api-outage' && r.wrongfulRequeues > 0),
    );
    process.stdout.write(
      `${head}\n${lines.join('\n')}\n\n${bad.length === 0 ? 'no job lost, none run twice, no invariant broken under any profile' : `BROKEN under ${bad.map((r) => r.profile).join(', ')}: ${bad.flatMap((r) => [...(r.wrongfulRequeues > 0 ? [`${r.wrongfulRequeues} wrongful requeues`] : []), ...summaries[r.profile]!.violationMessages.slice(0, 3)]).join(' | ')}`}\n(${o.hours} virtual h each, seed ${o.seed})\n`,
    );
    // The wall time on stderr: the same seed prints the same table, byte for byte.
    process.stderr.write(`${((performance.now() - started) / 1000).toFixed(1)} s\n`);
  }
}
