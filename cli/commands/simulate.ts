import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { join, resolve } from 'node:path';
import cliProgress from 'cli-progress';
import type { Cloud } from '../../core/catalog.ts';
import { defaultNetworkLayout, type NetworkLayout, type S3Path } from '../../core/bytes.ts';
import type { RightsizeMode } from '../../core/gpu.ts';
import {
  acrossClouds,
  BUILT_IN_SPOT,
  BUILT_IN_TRACE,
  defaultSimServices,
  defaultTeamTags,
  onModels,
  reservationScenario,
  rightsizingScenario,
  SHIPPED_TRACES,
  simGroupsFor,
} from '../../cloud/sim/defaults.ts';
import { faultProfile } from '../../cloud/sim/faults.ts';
import {
  awsZonesOf,
  DEFAULT_SIM_START_MS,
  RESERVATION_POLICIES,
  runSimulation,
  SIM_POLICIES,
  type SimPolicyName,
  type SimulationOptions,
  type SimulationResult,
  type SimulationSummary,
  type SpotSetup,
} from '../../cloud/sim/simulation.ts';
import { inWorkers } from '../../cloud/sim/parallel.ts';
import { saveSimState } from '../../cloud/sim/state.ts';
import { loadWorkload, type Workload } from '../../cloud/sim/workload.ts';
import { withSlowdowns, type Spread } from '../../cloud/sim/job-times.ts';
import { UsageError } from '../../core/errors.ts';
import { count, duration, formatNumber, gpuHours, keyValues, money, paragraph, pct, table } from '../format.ts';
import {
  batchCostMicroUsd,
  billParts,
  bytesShareOfGpuPct,
  onDemandWholeBill,
  onDemandYardstick,
  ratio,
  replicasLost,
  REPLICAS_LOST_LABEL,
  REQUEUES_LABEL,
  requeuesText,
  REWORK_LABEL,
  OVERHEAD_LABEL,
  DEADLINES_LABEL,
  SERVICE_COLUMNS,
  serviceCells,
  servicesByPolicy,
  USED_LABEL,
  serviceCostMicroUsd,
} from '../figures.ts';
import { renderHtmlReport, type PolicyRun, type SimulateRun } from '../report-html.ts';

export type { SimulateRun };

/** The flags as commander parsed them (cli/main.ts checks each value). */
export interface SimulateFlags {
  readonly trace?: string;
  readonly hours?: number;
  readonly policy?: SimPolicyName;
  readonly seed?: number;
  readonly maxJobs?: number;
  readonly out?: string;
  readonly spot?: string;
  readonly json?: boolean;
  readonly progress?: boolean;
  readonly baselines?: boolean;
  readonly faults?: string;
  readonly uploadMibps?: number;
  /** The network path to the checkpoint bucket and the NAT gateways of the AWS fleet's VPC (default: the stack's own VPC). */
  readonly s3Path?: S3Path;
  readonly natGateways?: number;
  /** Where GCP machines save: a bucket in their region (default), or the S3 bucket across clouds. */
  readonly gcpCheckpoints?: 'regional' | 's3';
  readonly clouds?: readonly Cloud[];
  /** false: leave out the built-in services (`--no-services`). */
  readonly services?: boolean;
  /** Add the reservation scenario (an ODCR and a Capacity Block) to the AWS fleet; the baselines are then the reservation ones. */
  readonly reservations?: boolean;
  /** The right-sizing scenario (A100 machines, recurring job families, half of them oversized), the specs saying this. */
  readonly rightsizing?: RightsizeMode;
}

/** The summary printed by `--json` and written to summary.json: the main policy, with the all-on-demand baseline's cost. */
export function jsonSummary(run: SimulateRun): SimulationSummary & {
  onDemandWholeBillMicroUsd: number;
  checkpointBytesUploaded: number;
  checkpointBytesDownloaded: number;
  checkpointStorageGiBHours: number;
  baselines: Record<string, SimulationSummary>;
} {
  const b = run.main.summary.checkpointBytes;
  return {
    ...run.main.summary,
    checkpointBytesUploaded: b.bytesUploaded,
    checkpointBytesDownloaded: b.bytesDownloaded,
    checkpointStorageGiBHours: b.storageGiBHours,
    onDemandCostMicroUsd: onDemandYardstick(run),
    onDemandWholeBillMicroUsd: onDemandWholeBill(run),
    baselines: Object.fromEntries(run.baselines.map((b) => [b.summary.policy, b.summary])),
  };
}

/** Everything a policy's replay is run with but the policy: built from the flags, the same in the main thread and in a worker. */
export interface SimulateSetup {
  readonly options: Omit<SimulationOptions, 'policy' | 'onProgress'>;
  readonly policies: readonly SimPolicyName[];
  readonly hours: number;
}

/**
 * Reads the flags into the replay's options (the trace loaded, the fleet, the faults, the network)
 * and the policies to replay. A worker thread calls it again with the same flags (plain values), so
 * each replay runs with the same options wherever it runs; `warn` says what was changed on the way.
 */
export function simulateSetup(flags: SimulateFlags, warn: (line: string) => void = () => {}): SimulateSetup {
  const seed = flags.seed ?? 1;
  const hours = flags.hours ?? 72;
  const maxJobs = flags.maxJobs;
  const policy = flags.policy ?? 'gpu-fleet';
  const spot = spotFlag(flags.spot ?? 'traces');
  const faults = flags.faults === undefined ? undefined : faultProfile(flags.faults);
  const file = traceFile(flags.trace);
  const clouds: Cloud[] = [...new Set<Cloud>(flags.clouds ?? ['aws'])];
  const loaded = loadWorkload(file, { hours, ...(maxJobs !== undefined ? { maxJobs } : {}) });
  if (flags.rightsizing && (flags.reservations || clouds.length > 1 || clouds[0] !== 'aws'))
    throw new UsageError('--rightsizing runs its own AWS fleet of A100 machines: use it without --reservations and with --clouds aws');
  // With --rightsizing: the trace's jobs in recurring families on A100 machines, half the families oversized (their use is scripted).
  const sizing = flags.rightsizing ? rightsizingScenario(loaded, { oversizedShare: 0.5, mode: flags.rightsizing }) : undefined;
  // Across two clouds the trace's V100 jobs are split into AWS-only, GCP-only and either (see acrossClouds); on GCP alone they take A100s.
  const workload = sizing
    ? sizing.workload
    : clouds.length > 1
      ? acrossClouds(loaded)
      : clouds[0] === 'gcp'
        ? onModels(loaded, ['A100-40GB'])
        : loaded;
  if (workload.jobs.length === 0)
    throw new UsageError(`--trace: ${String(file)} has no usable jobs (${workload.skipped.length} rows skipped)`);

  // The built-in services, on the GPU the fleet has (the A100s of a GCP-only fleet, else V100).
  // (None in the right-sizing scenario: its fleet is A100 machines for the jobs only.)
  // A trace of other teams: each service goes to one of the trace's teams (a service needs its team's queue), said in one line.
  const builtIn =
    flags.services === false || sizing ? [] : defaultSimServices(clouds.length === 1 && clouds[0] === 'gcp' ? 'A100-40GB' : 'V100');
  const moved: string[] = [];
  const services = builtIn.map((svc, i) => {
    if (workload.teams.includes(svc.team)) return svc;
    const team = workload.teams[i % workload.teams.length]!;
    moved.push(`${svc.team}.${svc.spec.name ?? ''} → ${team}.${svc.spec.name ?? ''}`);
    return { ...svc, team };
  });
  if (moved.length > 0)
    warn(
      `gpu-fleet: the trace lacks the teams of some built-in services; they run in its teams: ${moved.join(', ')} (--no-services leaves them out)\n`,
    );
  // With --reservations: an ODCR and a Capacity Block beside the AWS groups, compared with the reservation baselines.
  if (flags.reservations && !clouds.includes('aws'))
    throw new UsageError('--reservations adds an ODCR and a Capacity Block to the AWS groups: use it with --clouds aws or aws,gcp');
  const scenario = flags.reservations ? reservationScenario(DEFAULT_SIM_START_MS) : undefined;
  const groups = sizing
    ? sizing.groups
    : scenario
      ? [...scenario.groups, ...simGroupsFor(clouds.filter((c) => c !== 'aws'))]
      : simGroupsFor(clouds);
  const baselineNames: readonly SimPolicyName[] = scenario ? RESERVATION_POLICIES : SIM_POLICIES;
  const policies: SimPolicyName[] = [policy, ...(flags.baselines === false ? [] : baselineNames.filter((p) => p !== policy))];
  const network = networkFlags(flags, groups);
  return {
    hours,
    policies,
    options: {
      workload,
      groups,
      teamTags: defaultTeamTags(workload.teams),
      ...(scenario ? { reservations: scenario.reservations } : {}),
      seed,
      hours,
      spot,
      services,
      ...(faults ? { faults } : {}),
      ...(flags.uploadMibps !== undefined ? { uploadMiBPerSec: flags.uploadMibps } : {}),
      ...(network ? { network } : {}),
      ...(flags.gcpCheckpoints ? { gcpCheckpoints: flags.gcpCheckpoints } : {}),
    },
  };
}

/** The flags as plain values, for a worker thread (commander's flags are; this keeps only what `simulateSetup` reads). */
export function plainFlags(flags: SimulateFlags): SimulateFlags {
  return JSON.parse(JSON.stringify(flags)) as SimulateFlags;
}

/**
 * Worker threads for the baselines: one each where the machine has two cores or more (on two
 * cores, every policy at once finished `npm start` in 167 s against 230 s with one lane for the
 * baselines and 269 s one after another), none on one core. GPU_FLEET_SIM_THREADS=N gives N
 * threads in all, the main one included (1: one after another).
 */
function baselineThreads(baselines: number): number {
  const asked = Number(process.env.GPU_FLEET_SIM_THREADS ?? '');
  if (Number.isInteger(asked) && asked >= 1) return asked - 1;
  return availableParallelism() > 1 ? baselines : 0;
}

export async function simulateCommand(
  flags: SimulateFlags,
  io: { stdout: NodeJS.WritableStream; stderr: NodeJS.WritableStream & { isTTY?: boolean } },
): Promise<SimulateRun> {
  const wallStart = performance.now();
  const setup = simulateSetup(flags, (line) => io.stderr.write(line));
  const { hours, policies } = setup;
  const [policy, ...others] = policies as [SimPolicyName, ...SimPolicyName[]];
  const showBar = flags.progress !== false && !flags.json && io.stderr.isTTY === true;
  const bar = showBar
    ? new cliProgress.SingleBar(
        { format: 'simulating {policy} {bar} {percentage}% | {value}/{total} virtual h', stream: io.stderr, hideCursor: true },
        cliProgress.Presets.shades_classic,
      )
    : undefined;
  const totalHours = Math.ceil(hours) * policies.length;
  bar?.start(totalHours, 0, { policy });
  let done = 0;
  const run1 = async (p: SimPolicyName): Promise<SimulationResult> => {
    let shown = -1;
    const base = done;
    const r = await runSimulation({
      ...setup.options,
      policy: p,
      onProgress: (sec) => {
        const h = Math.floor(sec / 3600);
        if (h !== shown) {
          shown = h;
          bar?.update(base * Math.ceil(hours) + h, { policy: p });
        }
      },
    });
    done++;
    bar?.update(done * Math.ceil(hours), { policy: p });
    return r;
  };
  // The baselines are independent replays: on worker threads beside the main one where the machine has the cores (each the
  // same options, rebuilt from the same flags; the figures are the same as one after another).
  const threads = baselineThreads(others.length);
  let baselines: PolicyRun[];
  let main: SimulationResult;
  if (others.length > 0 && threads > 0) {
    const away = inWorkers<{ flags: SimulateFlags; policy: SimPolicyName }, PolicyRun>(
      new URL('./simulate-worker.ts', import.meta.url),
      others.map((p) => ({ flags: plainFlags(flags), policy: p })),
      threads,
    ).then((runs) => {
      done += runs.length;
      bar?.update(done * Math.ceil(hours), { policy });
      return runs;
    });
    main = await run1(policy);
    baselines = await away;
  } else {
    main = await run1(policy);
    baselines = [];
    for (const p of others) baselines.push(await run1(p));
  }
  bar?.stop();
  const compared = withSlowdowns<PolicyRun>([main, ...baselines]);
  const run: SimulateRun = {
    main: compared[0] as SimulationResult,
    baselines: compared.slice(1),
    wallMs: Math.round(performance.now() - wallStart),
  };
  const summary = jsonSummary(run);
  if (flags.out) {
    const dir = resolve(flags.out);
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, 'summary.json'), `${JSON.stringify(summary, null, 2)}\n`);
    writeFileSync(join(dir, 'report.html'), renderHtmlReport(run));
    writeFileSync(join(dir, 'jobs.json'), `${JSON.stringify(run.main.jobs)}\n`);
    writeFileSync(join(dir, 'decisions.json'), `${JSON.stringify(await run.main.env.decisions.recent(500))}\n`);
    saveSimState(run.main.env, dir);
  }
  if (flags.json) {
    io.stdout.write(`${JSON.stringify(summary, null, 2)}\n`);
  } else {
    io.stdout.write(`${renderReport(run)}\n`);
    if (flags.out) io.stdout.write(`\nreport: ${join(resolve(flags.out), 'report.html')}\n`);
  }
  return run;
}

function traceFile(trace: string | undefined): string | URL {
  if (trace === undefined) return BUILT_IN_TRACE;
  const shipped = SHIPPED_TRACES[trace];
  if (shipped) return shipped;
  const file = resolve(trace);
  if (!existsSync(file))
    throw new UsageError(
      `--trace: no such file ${file} and no shipped trace named "${trace}" (shipped: ${Object.keys(SHIPPED_TRACES).join(', ')}); give a CSV with columns job_id, submit_s, duration_s, gpus (gpu_type, team, status optional)`,
    );
  return file;
}

function spotFlag(value: string): SpotSetup {
  if (value === 'traces') return BUILT_IN_SPOT;
  if (value === 'none') return { kind: 'none' };
  const m = /^rate:(\d+(?:\.\d+)?)$/.exec(value);
  if (m) {
    const rate = Number(m[1]);
    return { kind: 'rates', ratePerHour: () => rate };
  }
  throw new UsageError(
    `--spot must be "traces" (the shipped availability traces), "none" (no interruptions) or "rate:R" (R interruptions per machine-hour), got "${value}"`,
  );
}

export function renderReport(run: SimulateRun): string {
  const s = run.main.summary;
  const od = jsonSummary(run).onDemandCostMicroUsd;
  const odWhole = onDemandWholeBill(run);
  const head = keyValues([
    ['trace', `${s.trace} (${s.jobs.toLocaleString('en-US')} jobs)`],
    ['policy', s.policy],
    ['seed', String(s.seed)],
    [
      'simulated time',
      `${s.virtualHours} h, jobs arriving over the first ${s.arrivalHours >= 1 ? `${s.arrivalHours.toFixed(1)} h` : duration(s.arrivalHours * 3600)}; wall ${(s.wallMs / 1000).toFixed(1)} s${
        run.wallMs !== undefined && run.baselines.length > 0
          ? ` (${(run.wallMs / 1000).toFixed(1)} s for all ${count(run.baselines.length + 1, 'policy', 'policies')})`
          : ''
      }`,
    ],
    ...(s.faults.profile !== 'none'
      ? [
          [
            'faults',
            `${s.faults.profile}: ${s.faults.apiErrors} API errors, ${s.faults.storeConflicts} store conflicts, ${s.faults.crashes} crashed reconciles, ${s.faults.duplicateEvents} duplicate events, ${s.faults.stormInterruptions} storm interruptions, ${s.faults.deadAgents} dead agents, ${s.faults.checkpointFailures} failed checkpoints, ${s.faults.uploadFailures} failed uploads, ${s.faults.rankStartFailures} ranks that could not start, ${s.faults.replicasHung} replicas hung (${s.faults.reconcileFailures} reconciles failed)`,
          ] as [string, string],
        ]
      : []),
  ]);
  const jobs = table(
    ['jobs', 'count'],
    [
      ['accepted', s.accepted],
      ['completed', s.completed],
      ['failed (own exit code)', s.failed],
      ['still running at end', s.runningAtEnd],
      ['still pending at end', s.pendingAtEnd],
      ['rejected', s.rejected],
      ['lost', s.lost],
      ['run twice at once', s.duplicated],
      ['invariant violations', s.violations],
      [DEADLINES_LABEL, s.deadlineJobs],
      ['deadlines missed', s.deadlineMisses],
    ],
  );
  const capacity = table(
    ['capacity', 'value'],
    [
      [USED_LABEL, gpuHours(s.gpuHoursUsed)],
      [REWORK_LABEL, gpuHours(s.reworkGpuHours)],
      [OVERHEAD_LABEL, gpuHours(s.overheadGpuHours)],
      ['GPU-hours paid', gpuHours(s.gpuHoursPaid)],
      ['utilisation', pct(s.utilizationPct)],
      ['peak fleet', `${s.peakGpus} GPUs`],
      ['machines launched', formatNumber(s.machinesLaunched)],
      ['first wait (submit to first start) p50 / p95', `${duration(s.p50WaitSec)} / ${duration(s.p95WaitSec)}`],
      ['total wait (all attempts) p50 / p95 / p99 / max', spreadOf(s.jobTimes.totalWaitSec, duration)],
      ['attempts per job p50 / p99 / max', `${s.jobTimes.attempts.p50} / ${s.jobTimes.attempts.p99} / ${s.jobTimes.attempts.max}`],
      [
        'completion ÷ all on-demand (mean / p95 / p99)',
        s.slowdownVsOnDemand
          ? `${s.slowdownVsOnDemand.mean.toFixed(2)}× / ${s.slowdownVsOnDemand.p95.toFixed(2)}× / ${s.slowdownVsOnDemand.p99.toFixed(2)}× over ${s.slowdownVsOnDemand.jobs} jobs done under both`
          : '-',
      ],
      ['spot machines taken back', formatNumber(s.interruptions)],
      [REQUEUES_LABEL, requeuesText(s)],
      ...(s.services ? [[REPLICAS_LOST_LABEL, formatNumber(replicasLost(s))] as [string, string]] : []),
      ['checkpoints', formatNumber(s.checkpoints)],
      ['budget events', formatNumber(s.budgetEvents)],
    ],
  );
  const cost = table(
    ['cost', 'USD'],
    [
      ['total', money(s.wholeBillMicroUsd)],
      ...billParts(s).map((p) => [`  ${p.label}`, money(p.microUsd)] as [string, string]),
      ['  checkpoint bytes ÷ GPU machines', `${bytesShareOfGpuPct(s).toFixed(2)}%`],
      ...(s.checkpointBytes.bill.unpriced.length > 0
        ? [['  counted, not priced (no list price)', s.checkpointBytes.bill.unpriced.join(', ')] as [string, string]]
        : []),
      ['all on-demand (baseline run, whole bill)', money(odWhole)],
      ['lower bound (useful work, spot only while it could be had)', money(s.lowerBoundCostMicroUsd)],
      ['spot floor (useful work, all at spot)', money(s.spotFloorCostMicroUsd)],
      ['whole bill ÷ all on-demand', ratio(s.wholeBillMicroUsd, odWhole)],
      ['GPU machines ÷ all on-demand machines', ratio(s.costMicroUsd, od)],
      ...(s.reservations
        ? [
            ['with every reservation paid in full', money(s.costWithReservationsMicroUsd ?? s.costMicroUsd)] as [string, string],
            ...s.reservations.map(
              (r) =>
                [
                  `reservation ${r.id} (${r.kind}, ${r.count} machines)`,
                  `paid ${money(r.paidMicroUsd)}, unused ${money(r.idleMicroUsd)}; ${pct(r.utilizationPct)} used${r.utilizationWhileQueuedPct !== undefined ? `, ${pct(r.utilizationWhileQueuedPct)} while work waited` : ''}; ${r.killedAtEnd} killed at its end`,
                ] as [string, string],
            ),
          ]
        : []),
      ...(s.services
        ? [
            ['of it, the services’ replicas', money(serviceCostMicroUsd(s))] as [string, string],
            ...(s.warmPoolMicroUsd !== undefined
              ? [['of it, warm pools (machines prepared ahead)', money(s.warmPoolMicroUsd)] as [string, string]]
              : []),
            ['batch work (GPU machines less the services)', money(batchCostMicroUsd(s))] as [string, string],
          ]
        : []),
      [`${s.services ? 'batch ' : ''}cost ÷ lower bound`, ratio(batchCostMicroUsd(s), s.lowerBoundCostMicroUsd)],
      [`${s.services ? 'batch ' : ''}cost ÷ spot floor`, ratio(batchCostMicroUsd(s), s.spotFloorCostMicroUsd)],
      ...Object.entries(s.costByTeamMicroUsd)
        .sort(([a], [b]) => a.localeCompare(b))
        .map(([team, amount]) => [`team ${team}`, money(amount)] as [string, string]),
      // Of each team's charge (the ledger budgets read), its checkpoint bytes, as a deployment counts them: from the agents' reports.
      ...Object.entries(s.checkpointBytes.chargedByTeam)
        .sort(([a], [b]) => a.localeCompare(b))
        .map(([team, c]) => [`team ${team}, of it checkpoint bytes`, money(c)] as [string, string]),
      [
        "checkpoint bytes charged to teams (agents' reports) ÷ the bucket's bill",
        s.checkpointBytes.bill.totalMicroUsd > 0
          ? `${money(s.checkpointBytes.chargedMicroUsd)} ÷ ${money(s.checkpointBytes.bill.totalMicroUsd)} = ${pct((100 * s.checkpointBytes.chargedMicroUsd) / s.checkpointBytes.bill.totalMicroUsd)}`
          : '-',
      ],
    ],
  );
  const all = [run.main, ...run.baselines];
  // Two tables, each within 120 columns: what each policy paid and lost, then how long its jobs waited and ran.
  const compare =
    run.baselines.length > 0
      ? [
          table(
            ['policy', 'whole bill', 'of it bytes', '÷ on-demand', '÷ lower bound', '÷ spot floor', 'lost', 'rework GPU-h', 'taken back'],
            all.map((r) => [
              r.summary.policy,
              money(r.summary.wholeBillMicroUsd),
              money(r.summary.checkpointBytes.bill.totalMicroUsd),
              ratio(r.summary.wholeBillMicroUsd, odWhole),
              ratio(batchCostMicroUsd(r.summary), r.summary.lowerBoundCostMicroUsd),
              ratio(batchCostMicroUsd(r.summary), r.summary.spotFloorCostMicroUsd),
              r.summary.lost,
              r.summary.reworkGpuHours,
              r.summary.interruptions,
            ]),
          ),
          '',
          table(
            [
              'policy',
              'first wait p95',
              'total wait p99',
              'attempts p99/max',
              'slowdown mean',
              'deadline misses',
              ...(s.services ? ['worst service available'] : []),
            ],
            all.map((r) => [
              r.summary.policy,
              duration(r.summary.p95WaitSec),
              duration(r.summary.jobTimes.totalWaitSec.p99),
              `${r.summary.jobTimes.attempts.p99} / ${r.summary.jobTimes.attempts.max}`,
              r.summary.slowdownVsOnDemand ? `${r.summary.slowdownVsOnDemand.mean.toFixed(3)}×` : '-',
              r.summary.deadlineMisses,
              ...(s.services ? [pct(Math.min(...(r.summary.services ?? []).map((x) => x.availabilityPct)))] : []),
            ]),
          ),
          // Each service under each policy: the share of ticks it had the replicas its load needed, and of requests within its objective.
          ...(s.services ? ['', ((t) => table(t.columns, t.rows))(servicesByPolicy(all.map((r) => r.summary)))] : []),
        ].join('\n')
      : '';
  // The services' figures in a table; what load each replays, one wrapped line each below it.
  const services = s.services
    ? [
        table(
          [...SERVICE_COLUMNS],
          s.services.map((x) => serviceCells(x, money)),
        ),
        ...s.services.map((x) => paragraph(`load of ${x.id}: ${x.demand}${x.objective ? `; objective: ${x.objective}` : ''}`)),
      ].join('\n')
    : '';
  const events = run.main.budgetEvents
    .slice(0, 12)
    .map((e) => `  ${duration(e.tSec).padStart(8)}  ${e.team.padEnd(8)} ${e.state.padEnd(9)} ${e.message}`);
  return [
    head,
    '',
    jobs,
    '',
    capacity,
    '',
    cost,
    ...(services ? ['', services] : []),
    ...(compare ? ['', compare] : []),
    ...(events.length > 0 ? ['', 'budget events (time into the replay):', ...events] : []),
  ].join('\n');
}

export type { Workload };

function spreadOf(x: Spread, f: (v: number) => string): string {
  return `${f(x.p50)} / ${f(x.p95)} / ${f(x.p99)} / ${f(x.max)}`;
}

/** The deployment's network from `--s3-path` and `--nat-gateways`, over the AWS groups' zones; undefined: the stack's own VPC. */
function networkFlags(flags: SimulateFlags, groups: Parameters<typeof awsZonesOf>[0]): NetworkLayout | undefined {
  if (flags.s3Path === undefined && flags.natGateways === undefined) return undefined;
  const zones = awsZonesOf(groups);
  const base = defaultNetworkLayout(zones);
  return {
    s3Path: flags.s3Path ?? base.s3Path,
    natZones: flags.natGateways === undefined ? base.natZones : zones.slice(0, flags.natGateways),
  };
}
