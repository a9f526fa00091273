import { readFileSync } from 'node:fs';
import { BUDGET_TAGS, budgetStatus, isValidTeamId, teamFromTags } from '../core/budget.ts';
import { dayStartMs, forecastSpend, periodBounds, periodKey } from '../core/period.ts';
import {
  ACTIVE_STATES,
  assignmentMilliGpu,
  firstWaitMs,
  JOB_STATES,
  requeueCounts,
  reworkGpuHours,
  usageSoFar,
  waitMsSoFar,
  type Job,
  type JobState,
} from '../core/job.ts';
import { checkJobSpec, type JobSpec, type JobSpecInput } from '../core/job-spec.ts';
import { whyNoGroupHolds } from '../core/planner/capacity.ts';
import { shippedCatalog } from '../cloud/catalog/all-shipped.ts';
import { milliGpusUsed } from '../core/gpu.ts';
import { degradedName, type DecisionRecord, type QueueDepth } from '../core/ports.ts';
import { describeShape } from '../core/rightsizing.ts';
import { teamsInForce } from '../core/services/snapshot-reader.ts';
import { agentFoundAnswering, replicaReady, SERVICE_LABEL, type ServiceRecord } from '../core/serving/service.ts';
import { committedCostMicroUsd } from '../core/cost-model.ts';
import { DAY_PERIOD_PREFIX, IDLE_TEAM, RESERVED_UNUSED_PREFIX } from '../core/services/accrual.ts';
import type { Team } from '../core/team.ts';
import { usdString } from '../core/money.ts';
import { messageOf, parseJson, UsageError } from '../core/errors.ts';
import { describeAction, describeFailure, type PlanAction } from '../core/plan.ts';
import { openFleet, type Fleet, type FleetFlags } from './fleet.ts';
import { count, duration, formatNumber, gpuHours, keyValues, money, paragraph, pct, table } from './format.ts';

export interface Io {
  readonly stdout: NodeJS.WritableStream;
  readonly stderr: NodeJS.WritableStream;
}

/** Opens the fleet, runs the command, saves what changed. */
async function withFleet<T>(flags: FleetFlags, io: Io, f: (fleet: Fleet) => Promise<T>): Promise<T> {
  const fleet = await openFleet(flags);
  // Said once, on stderr (a script's JSON on stdout stays as it is): what this role sees, and that the rest is out of view.
  if (fleet.viewer.kind === 'team')
    io.stderr.write(
      `gpu-fleet: as team ${fleet.viewer.team}'s role${fleet.role ? ` (${fleet.role})` : ''}: this shows team ${fleet.viewer.team}'s jobs, services, spend and output; other teams are out of view\n`,
    );
  try {
    return await f(fleet);
  } finally {
    await fleet.close();
  }
}

/** JSON for scripts, or the text for people with every line longer than the terminal's 120 columns wrapped. */
const print = (io: Io, json: boolean | undefined, value: unknown, human: () => string) =>
  io.stdout.write(json ? `${JSON.stringify(value, null, 2)}\n` : `${paragraph(human())}\n`);

function teamFlag(team: string | undefined, required = false): string | undefined {
  if (team === undefined) {
    if (required) throw new UsageError('--team is required: the team whose queue (and budget) the job goes to, e.g. --team nlp');
    return undefined;
  }
  if (!isValidTeamId(team))
    throw new UsageError(`--team "${team}" is not a team id: lower-case letters, digits and "-", at most 32 characters`);
  return team;
}

// ---- submit --------------------------------------------------------------------------------

export interface SubmitFlags extends FleetFlags {
  readonly team?: string;
  readonly file?: string;
  readonly image?: string;
  readonly command?: string[];
  readonly gpus?: string;
  readonly gpuModel?: string[];
  readonly mig?: string;
  readonly fraction?: string;
  readonly nodes?: string;
  readonly priority?: string;
  readonly interruptible?: boolean;
  readonly checkpointInterval?: string;
  readonly runtime?: string;
  readonly deadline?: string;
  readonly label?: string[];
  readonly env?: string[];
  /** NAME=ARN: secrets by reference. */
  readonly secret?: string[];
  readonly name?: string;
  readonly token?: string;
  readonly dryRun?: boolean;
  readonly json?: boolean;
}

/** The spec from --file, or from flags. Numbers stay as given when they are not numbers, so the schema names the problem. */
export function specFromFlags(flags: SubmitFlags): unknown {
  if (flags.file) {
    if (flags.image || flags.command || flags.gpus || flags.mig || flags.fraction)
      throw new UsageError('give the spec either with --file or with flags (--image, --gpus … -- program args), not both');
    try {
      return parseJson(readFileSync(flags.file === '-' ? 0 : flags.file, 'utf8'));
    } catch (error) {
      throw new UsageError(`--file ${flags.file}: ${messageOf(error)} (a job spec is a JSON object: docs/reference/job-spec.md)`);
    }
  }
  if (!flags.image)
    throw new UsageError(
      'give the job with --file spec.json, or with --image, --gpus (or --mig / --fraction) and the program after "--", e.g. -- python train.py',
    );
  const num = (v: string | undefined) => (v === undefined ? undefined : Number.isFinite(Number(v)) && v.trim() !== '' ? Number(v) : v);
  const models = flags.gpuModel && flags.gpuModel.length > 0 ? { models: flags.gpuModel } : {};
  let gpu: Record<string, unknown>;
  if (flags.mig) gpu = { kind: 'mig', profile: flags.mig, ...models };
  else if (flags.fraction) {
    const [milli, mem] = flags.fraction.split(':');
    gpu = { kind: 'fraction', milliGpu: num(milli), memoryMiB: num(mem), ...models };
  } else gpu = { kind: 'whole', count: num(flags.gpus ?? '1'), ...models };
  const pairs = (list: string[] | undefined, what: string) =>
    Object.fromEntries(
      (list ?? []).map((kv) => {
        const i = kv.indexOf('=');
        if (i <= 0) throw new UsageError(`${what} "${kv}" must be KEY=VALUE`);
        return [kv.slice(0, i), kv.slice(i + 1)];
      }),
    );
  const spec: Record<string, unknown> = { image: flags.image, command: flags.command ?? [], gpu };
  if (flags.name) spec.name = flags.name;
  if (flags.nodes) spec.nodes = num(flags.nodes);
  if (flags.priority) spec.priority = num(flags.priority);
  if (flags.interruptible === false) spec.interruptible = false;
  if (flags.checkpointInterval) spec.checkpoint = { intervalSec: num(flags.checkpointInterval) };
  if (flags.runtime) spec.expectedRuntimeSec = num(flags.runtime);
  if (flags.deadline) spec.deadline = flags.deadline;
  if (flags.label?.length) spec.labels = pairs(flags.label, '--label');
  if (flags.env?.length) spec.env = pairs(flags.env, '--env');
  if (flags.secret?.length)
    spec.secrets = Object.entries(pairs(flags.secret, '--secret')).map(([name, valueFrom]) => ({ name, valueFrom }));
  return spec satisfies Partial<Record<keyof JobSpecInput, unknown>>;
}

export async function submitCommand(flags: SubmitFlags, io: Io): Promise<void> {
  const team = teamFlag(flags.team, true)!;
  const spec = specFromFlags(flags);
  const check = checkJobSpec(spec);
  if (!check.ok) throw new UsageError(`the job spec is not valid:\n${check.errors.map((e) => `  - ${e}`).join('\n')}`);
  if (flags.token !== undefined && (flags.token.length === 0 || flags.token.length > 128))
    throw new UsageError('--token must be 1 to 128 characters (the same token always makes the same job)');
  // Inline values are kept in the job record (hidden from status, explain and logs, but stored): secrets go by reference.
  const inline = Object.keys(check.spec.env);
  if (inline.length > 0)
    io.stderr.write(
      `gpu-fleet: warning: ${inline.join(', ')} ${inline.length === 1 ? 'is' : 'are'} given inline (env): the job record keeps the value. If it is a secret, pass it by reference instead: --secret NAME=arn:aws:ssm:REGION:ACCOUNT:parameter/gpu-fleet/${team}/NAME (or "secrets": [{"name", "valueFrom"}] in the spec)\n`,
    );
  if (flags.dryRun) {
    // A dry run needs no fleet, but checks the spec against the node groups when it can reach them.
    const fit = await openFleet(flags)
      .then(async (fleet) => {
        try {
          return await holdable(fleet, check.spec);
        } finally {
          await fleet.close();
        }
      })
      .catch((error: unknown): GroupFit => ({ checked: false, why: `not checked against the node groups: ${messageOf(error)}` }));
    if (fit.checked && !fit.canHold) throw new UsageError(`the job cannot run on this fleet: ${fit.why}`);
    print(
      io,
      flags.json,
      { valid: true, team, spec: check.spec, nodeGroups: fit },
      () => `valid; not sent (--dry-run)${fit.checked ? '; a node group can hold it' : `\n# ${fit.why}`}`,
    );
    return;
  }
  const { out, fit } = await withFleet(flags, io, async (fleet) => {
    const fit = await holdable(fleet, check.spec);
    // Intake would reject it: said here, and nothing is sent.
    if (fit.checked && !fit.canHold) throw new UsageError(`the job cannot run on this fleet: ${fit.why}; nothing was sent`);
    return { out: await fleet.submit(team, JSON.stringify(spec), flags.token), fit };
  });
  print(
    io,
    flags.json,
    { jobId: out.jobId, team, token: out.token, note: out.note, nodeGroups: fit },
    () => `${out.jobId}\n# ${out.note}; resubmitting with --token ${out.token} makes no second job${fit.checked ? '' : `\n# ${fit.why}`}`,
  );
}

/** Whether the spec was checked against the fleet's node groups, whether one could ever hold it, and why not. */
interface GroupFit {
  readonly checked: boolean;
  readonly canHold?: boolean;
  readonly why?: string;
}

/** Whether some node group of the fleet could ever hold the spec, and what the groups offer when none can. */
async function holdable(fleet: Fleet, spec: JobSpec): Promise<GroupFit> {
  const listed = await Promise.all(
    fleet.providers.map((p) => p.listGroups().catch((error: unknown) => `${degradedName(p)}: ${messageOf(error)}`)),
  );
  const failed = listed.filter((l): l is string => typeof l === 'string');
  const groups = listed.flatMap((l) => (typeof l === 'string' ? [] : l));
  if (groups.length === 0)
    return {
      checked: false,
      why: `not checked against the node groups: none was listed${failed.length > 0 ? ` (${failed.join('; ')})` : ''}`,
    };
  const why = whyNoGroupHolds(spec, groups, shippedCatalog().instanceTypes);
  if (why && failed.length > 0) return { checked: false, why: `not checked against every node group (${failed.join('; ')})` };
  return why ? { checked: true, canHold: false, why } : { checked: true, canHold: true };
}

// ---- status ----------------------------------------------------------------------------------

export interface StatusFlags extends FleetFlags {
  readonly team?: string;
  readonly job?: string;
  readonly json?: boolean;
}

interface GroupUse {
  group: string;
  cloud: string;
  capacity: string;
  desired: number;
  running: number;
  pending: number;
  gpus: number;
  usedMilli: number;
  /** With --team: what that team's jobs hold on the group's nodes. */
  teamMilli: number;
  /** Its warm pool, where it has one: machines prepared, and being prepared. */
  warm?: { ready: number; preparing: number };
}

function heldMilli(job: Job, nodeId: string): number {
  let m = 0;
  for (const a of job.placement?.nodes ?? []) if (a.nodeId === nodeId) m += assignmentMilliGpu(a);
  return m;
}

export async function statusCommand(flags: StatusFlags, io: Io): Promise<void> {
  const team = teamFlag(flags.team);
  await withFleet(flags, io, async (fleet) => {
    const now = fleet.clock.nowMs();
    if (flags.job) {
      const job = await fleet.jobs.get(flags.job);
      if (!job) throw new UsageError(`no job ${flags.job}; gpu-fleet status lists the jobs there are`);
      print(io, flags.json, job, () => keyValues(jobLines(job, now)));
      return;
    }
    const everything = await fleet.jobs.listByState(JOB_STATES, team);
    // Service replicas are counted as services, apart from the jobs (a replica waits and runs unlike a job).
    const jobs = everything.filter((j) => j.spec?.labels?.[SERVICE_LABEL] === undefined);
    const replicaRows = JOB_STATES.map((s) => {
      const list = everything.filter((j) => j.state === s && j.spec?.labels?.[SERVICE_LABEL] !== undefined);
      return { state: s, replicas: list.length, gpus: list.reduce((a, j) => a + gpusOf(j), 0) };
    }).filter((r) => r.replicas > 0);
    const services = fleet.services
      ? (await fleet.services.list()).filter((r) => !team || r.team === team).map((r) => summarizeService(r, everything))
      : [];
    const byState = new Map<JobState, Job[]>();
    for (const j of jobs) byState.set(j.state, [...(byState.get(j.state) ?? []), j]);
    const stateRows = JOB_STATES.filter((s) => byState.has(s)).map((s) => {
      const list = byState.get(s)!;
      const first = list.map((j) => firstWaitMs(j, now) / 1000).sort((a, b) => a - b);
      const total = list.map((j) => waitMsSoFar(j, now) / 1000).sort((a, b) => a - b);
      return {
        state: s,
        jobs: list.length,
        gpus: list.reduce((a, j) => a + gpusOf(j), 0),
        /** Submission to first start (to now for a job that never started). */
        medianFirstWaitSec: first[Math.floor(first.length / 2)] ?? 0,
        /** Time pending over all attempts, the current wait included. */
        medianTotalWaitSec: total[Math.floor(total.length / 2)] ?? 0,
        longestTotalWaitSec: total[total.length - 1] ?? 0,
      };
    });
    // The node groups may be unreachable (permissions, a region without them): the rest still shows.
    const instances: Awaited<ReturnType<Fleet['providers'][number]['listInstances']>> = [];
    const groups: Awaited<ReturnType<Fleet['providers'][number]['listGroups']>> = [];
    // Each provider on its own: one cloud that does not answer leaves the others' groups shown.
    const nodesErrors: string[] = [];
    const listed = await Promise.all(
      fleet.providers.map((p) =>
        Promise.all([p.listGroups(), p.listInstances()]).catch((error: unknown) => `${degradedName(p)}: ${messageOf(error)}`),
      ),
    );
    for (const l of listed) {
      if (typeof l === 'string') nodesErrors.push(l);
      else {
        groups.push(...l[0]);
        instances.push(...l[1]);
      }
    }
    const nodesError = nodesErrors.length > 0 ? nodesErrors.join('; ') : undefined;
    const records = new Map((await fleet.nodes.list()).map((r) => [r.instanceId, r]));
    const active = everything.filter((j) => ACTIVE_STATES.includes(j.state));
    const allActive = team ? await fleet.jobs.listByState(ACTIVE_STATES) : active;
    const use = new Map<string, GroupUse>();
    for (const g of groups)
      use.set(g.id, {
        group: g.id,
        cloud: g.cloud,
        capacity: g.offerings[0]?.capacityType ?? '-',
        desired: g.desiredCapacity,
        running: 0,
        pending: 0,
        gpus: 0,
        usedMilli: 0,
        teamMilli: 0,
        ...(g.warm ? { warm: { ready: g.warm.ready, preparing: g.warm.preparing } } : {}),
      });
    for (const i of instances) {
      const u = use.get(i.groupId);
      if (!u || i.state === 'terminated') continue;
      if (i.state === 'running') u.running++;
      else if (i.state === 'pending') u.pending++;
      u.gpus += records.get(i.id)?.gpus.length ?? 0;
      for (const j of allActive) u.usedMilli += heldMilli(j, i.id);
      if (team) for (const j of active) u.teamMilli += heldMilli(j, i.id);
    }
    const depths: { team: string; depth?: QueueDepth; error?: string }[] = [];
    for (const t of team ? [team] : await fleet.queue.teams()) {
      try {
        depths.push({ team: t, depth: await fleet.queue.depth(t) });
      } catch (error) {
        depths.push({ team: t, error: messageOf(error) });
      }
    }
    const latest = (await fleet.decisions.recent(1))[0];
    const waitingWhy = new Map(latest?.plan.waiting.map((w) => [w.jobId, w.reason]) ?? []);
    const pending = (byState.get('pending') ?? []).sort((a, b) => a.queuedAtMs - b.queuedAtMs);
    const value = {
      source: fleet.source,
      atMs: now,
      jobs: stateRows,
      ...(replicaRows.length > 0 ? { serviceReplicas: replicaRows } : {}),
      ...(services.length > 0 ? { services } : {}),
      pending: pending.map((j) => ({
        id: j.id,
        team: j.team,
        gpus: gpusOf(j),
        waitingSec: (now - j.queuedAtMs) / 1000,
        reason: j.hold ?? waitingWhy.get(j.id),
      })),
      groups: [...use.values()].map(({ teamMilli, ...u }) => ({
        ...u,
        usedGpus: u.usedMilli / 1000,
        ...(team ? { teamGpus: teamMilli / 1000 } : {}),
      })),
      ...(nodesError ? { nodesError } : {}),
      /** What the newest reconcile left out because its calls failed: which, since when, the last error. */
      degraded: (latest?.degraded ?? []).map((d) => ({ ...d, forSec: Math.max(0, (now - d.sinceMs) / 1000) })),
      /** Zones whose agents fell silent together in the newest reconcile: a control-plane fault (nothing requeued for it). */
      controlPlaneSilence: latest?.controlPlaneSilence ?? [],
      queues: depths,
    };
    print(io, flags.json, value, () => {
      const out: string[] = [`${fleet.source}, ${new Date(now).toISOString()}${team ? `, team ${team}` : ''}`, '', 'Jobs'];
      out.push(
        stateRows.length
          ? table(
              ['state', 'jobs', 'GPUs', 'median first wait', 'median total wait', 'longest total wait'],
              stateRows.map((r) => [
                r.state,
                r.jobs,
                fmtGpus(r.gpus),
                duration(r.medianFirstWaitSec),
                duration(r.medianTotalWaitSec),
                duration(r.longestTotalWaitSec),
              ]),
            )
          : '  (none)',
      );
      if (services.length > 0) {
        out.push('', 'Services');
        out.push(
          table(
            ['service', 'wanted', 'ready', 'starting', 'spot / on-demand', 'in objective', 'last decision'],
            services.map((v) => [
              v.id,
              v.target,
              v.ready,
              v.starting,
              `${v.spot} / ${v.onDemand}`,
              v.objectiveNow ? `${v.objectiveNow.withinPct}%` : '-',
              v.reason ?? '-',
            ]),
          ),
        );
      } else if (replicaRows.length > 0) out.push('', `Service replicas: ${replicaRows.map((r) => `${r.replicas} ${r.state}`).join(', ')}`);
      if (pending.length > 0) {
        out.push('', `Waiting (oldest first${pending.length > 10 ? ', 10 of ' + pending.length : ''})`);
        out.push(
          table(
            ['job', 'GPUs', 'waiting', 'why'],
            value.pending
              .slice(0, 10)
              .map((p) => [
                p.id,
                fmtGpus(p.gpus),
                duration(p.waitingSec),
                p.reason ? `${p.reason.code}: ${p.reason.message}` : 'not planned yet',
              ]),
          ),
        );
      }
      if (value.controlPlaneSilence.length > 0) {
        out.push('', `Control-plane fault (newest reconcile, ${latest!.id}): agents fell silent together while their machines run`);
        for (const z of value.controlPlaneSilence)
          out.push(
            `  ${z.cloud} ${z.zone}: ${z.silent} of ${z.running} machines silent since about ${new Date(z.sinceMs).toISOString()}; their work is not requeued, nor they let go (check the agent API and its table)`,
          );
      }
      if (value.degraded.length > 0) {
        out.push('', `Degraded (left out of the newest reconcile, ${latest!.id}: not scaled, and work only it could run waits)`);
        for (const d of value.degraded)
          out.push(
            `  ${degradedName(d)}: since ${new Date(d.sinceMs).toISOString()} (${duration(d.forSec)}), last error${d.code ? ` [${d.code}]` : ''}: ${d.error}`,
          );
      }
      out.push('', team ? `Nodes by group (the whole fleet's; "${team} holds" is what the team's jobs hold)` : 'Nodes by group');
      // Warm pools, apart from the groups' capacity, only where a group has one.
      const warmShown = value.groups.some((g) => g.warm !== undefined);
      for (const e of nodesErrors) out.push(`  unavailable: ${e}`);
      if (nodesErrors.length === 0 || value.groups.length > 0)
        out.push(
          value.groups.length
            ? table(
                [
                  'group',
                  'cloud',
                  'capacity',
                  'desired',
                  'running',
                  'booting',
                  ...(warmShown ? ['warm (preparing)'] : []),
                  'GPUs in use',
                  'use',
                  ...(team ? [`${team} holds`] : []),
                ],
                value.groups.map((g) => [
                  g.group,
                  g.cloud,
                  g.capacity,
                  g.desired,
                  g.running,
                  g.pending,
                  ...(warmShown ? [g.warm ? `${g.warm.ready} (${g.warm.preparing})` : '-'] : []),
                  `${fmtGpus(g.usedGpus)} of ${g.gpus}`,
                  g.gpus > 0 ? pct((100 * g.usedGpus) / g.gpus) : '-',
                  ...(g.teamGpus !== undefined ? [`${fmtGpus(g.teamGpus)} GPUs`] : []),
                ]),
              )
            : '  (no node groups)',
        );
      out.push('', 'Queues');
      out.push(
        depths.length
          ? table(
              ['team', 'waiting messages', 'in flight'],
              depths.map((d) => [d.team, d.depth ? d.depth.visible : (d.error ?? '-'), d.depth ? d.depth.inFlight : '-']),
            )
          : '  (no team queues)',
      );
      return out.join('\n');
    });
  });
}

function gpusOf(j: Job): number {
  if (!j.spec) return 0;
  return (milliGpusUsed(j.spec.gpu) / 1000) * j.spec.nodes;
}

const fmtGpus = (n: number) => (Number.isInteger(n) ? String(n) : n.toFixed(2));

function jobLines(job: Job, now: number): [string, string][] {
  const lines: [string, string][] = [
    ['job', job.id],
    ['team', job.team],
    ['state', job.state + (job.cancelRequested ? ' (cancel requested)' : '')],
    ['attempt', String(job.attempt)],
    ['submitted', new Date(job.submittedAtMs).toISOString()],
  ];
  if (job.state === 'pending') lines.push(['waiting now', duration((now - job.queuedAtMs) / 1000)]);
  if (job.state !== 'rejected')
    lines.push(
      [
        'first wait',
        `${duration(firstWaitMs(job, now) / 1000)} (submission to ${job.firstStartedAtMs !== undefined ? 'first start' : 'now, not started yet'})`,
      ],
      ['total wait', `${duration(waitMsSoFar(job, now) / 1000)} (pending over ${count(job.attempt, 'attempt')})`],
    );
  if (job.spec)
    lines.push(
      ['GPUs', `${fmtGpus(gpusOf(job))} (${job.spec.gpu.kind}${job.spec.gpu.models ? ` ${job.spec.gpu.models.join('/')}` : ''})`],
      ['image', job.spec.image],
    );
  if (job.placement)
    lines.push([
      'placed on',
      onMachines(
        job.placement,
        job.placement.nodes.map((n) => `${n.nodeId} GPU ${n.gpuIndices.join(',')}${n.mig ? ` MIG ${n.mig.profile}` : ''}`).join('; '),
      ),
    ]);
  if (job.rightsize) lines.push([`right-sizing (${job.rightsize.mode})`, job.rightsize.why]);
  const measured = job.usage?.gpuUse?.at(-1);
  if (measured)
    lines.push([
      'GPU use measured',
      `attempt ${measured.attempt}: peak ${(measured.peakMemoryMiB / 1024).toFixed(1)} of ${(measured.deviceMemoryMiB / 1024).toFixed(1)} GiB${measured.meanSmPct !== undefined ? `, utilisation ${measured.meanSmPct}% mean, ${measured.p95SmPct}% p95` : ', utilisation not reported (MIG)'}, ${measured.busyDevices} of ${measured.devices} GPU${measured.devices === 1 ? '' : 's'} used, ${measured.looks} looks`,
    ]);
  if (job.hold) lines.push(['held', `${job.hold.code}: ${job.hold.message}`]);
  if (job.requeueReason) lines.push(['last requeue', `${job.requeueReason.code}: ${job.requeueReason.message}`]);
  if (job.checkpoint)
    lines.push([
      'checkpoint',
      `${duration(job.checkpoint.progressSec)} of work at ${new Date(job.checkpoint.completedAtMs).toISOString()}`,
    ]);
  const usage = usageSoFar(job, now);
  if (usage)
    lines.push([
      'cost so far',
      `${money(usage.costMicroUsd)} for ${gpuHours(usage.gpuSec / 3600, 2)} over ${count(usage.attempts, 'attempt')}${ACTIVE_STATES.includes(job.state) ? ' (the running one up to now)' : ''}`,
    ]);
  if (job.interruptions > 0) {
    const r = requeueCounts(job);
    lines.push([
      'requeues',
      `${count(r.requeues, 'requeue')}: ${count(r.interruptions, 'interruption')} (machine taken back, lost or failed), ${count(r.moves, 'move')} gpu-fleet decided`,
    ]);
  }
  if (reworkGpuHours(job) > 0) lines.push(['rework', `${gpuHours(reworkGpuHours(job), 2)} (work lost since the last checkpoint)`]);
  if (job.rejection) lines.push(['rejected', job.rejection.errors.join('; ')]);
  if (job.exitCode !== undefined) lines.push(['exit code', String(job.exitCode)]);
  if (job.failure) lines.push(['failed because', `${job.failure.code}: ${job.failure.message}`]);
  return lines;
}

// ---- explain ----------------------------------------------------------------------------------

export interface ExplainFlags extends FleetFlags {
  readonly job?: string;
  /** A service, TEAM.NAME. */
  readonly service?: string;
  readonly decision?: string;
  readonly json?: boolean;
}

export async function explainCommand(flags: ExplainFlags, io: Io): Promise<void> {
  if ([flags.job, flags.decision, flags.service].filter((x) => x !== undefined).length !== 1)
    throw new UsageError(
      'give one of --job ID (why a job waits, or where and why it runs), --decision latest|last-change|ID (why the fleet changed) or --service TEAM.NAME (why a service has its replicas, and where they are)',
    );
  await withFleet(flags, io, async (fleet) => {
    const now = fleet.clock.nowMs();
    if (flags.service) {
      const view = await serviceView(fleet, flags.service);
      print(io, flags.json, view, () =>
        [
          `${view.id}: ${view.target} wanted, ${view.ready} ready, ${view.starting} starting (${view.spot} spot, ${view.onDemand} on-demand)`,
          `  scales on: ${view.metric ?? '-'}`,
          ...(view.objective ? [`  objective: ${view.objective}`] : []),
          `  why: ${view.reason ?? 'no decision yet (reconcile has not run since it was submitted)'}`,
          ...view.replicas.map(
            (r) =>
              `  ${r.job}: ${r.state}${r.ready ? ' (ready)' : ''}, ${r.capacity}${r.zone ? ` in ${r.zone}` : ''}${r.node ? ` on ${r.node}` : ''}`,
          ),
        ].join('\n'),
      );
      return;
    }
    if (flags.job) {
      const job = await fleet.jobs.get(flags.job);
      if (!job) throw new UsageError(`no job ${flags.job}; gpu-fleet status lists the jobs there are`);
      const recent = await fleet.decisions.recent(200);
      const explanation = explainJob(job, recent, now);
      print(io, flags.json, explanation, () => [explanation.summary, ...explanation.details.map((d) => `  ${d}`)].join('\n'));
      return;
    }
    const fleetChange = (d: DecisionRecord) =>
      d.plan.actions.some((a) => a.kind === 'scale-up' || a.kind === 'scale-in' || a.kind === 'preempt' || a.kind === 'cancel-launches');
    const decision =
      flags.decision === 'latest'
        ? (await fleet.decisions.recent(1))[0]
        : flags.decision === 'last-change'
          ? (await fleet.decisions.recent(500)).find(fleetChange)
          : await fleet.decisions.get(flags.decision!);
    if (!decision) {
      throw new UsageError(
        flags.decision === 'latest'
          ? 'no decision recorded yet: reconcile has not run'
          : flags.decision === 'last-change'
            ? 'none of the newest 500 decisions changed the fleet'
            : `no decision ${flags.decision}; --decision latest shows the newest, last-change the newest that scaled or preempted`,
      );
    }
    print(io, flags.json, decision, () => describeDecision(decision));
  });
}

export function explainJob(
  job: Job,
  recent: readonly DecisionRecord[],
  now: number,
): { job: string; state: string; summary: string; details: readonly string[]; decisionId?: string } {
  const details: string[] = [];
  if (job.rightsize) details.push(`right-sizing (${job.rightsize.mode}) at intake: ${job.rightsize.why}`);
  if (job.state === 'rejected')
    return {
      job: job.id,
      state: job.state,
      summary: `${job.id} was rejected: its spec is not valid`,
      details: job.rejection?.errors ?? [],
    };
  if (job.state === 'pending') {
    if (job.hold) {
      // The budget in force when it was last planned, as that reconcile read it.
      const d = recent.find((r) => r.teams?.some((t) => t.id === job.team));
      const t = d?.teams?.find((x) => x.id === job.team);
      // The job record keeps the hold's reason as it began; the newest plan has today's figures.
      const fresh = recent.find((r) => r.plan.waiting.some((w) => w.jobId === job.id))?.plan.waiting.find((w) => w.jobId === job.id);
      const why = fresh && fresh.reason.code === job.hold.code ? fresh.reason : job.hold;
      return {
        job: job.id,
        state: job.state,
        summary: `${job.id} waits (${duration((now - job.queuedAtMs) / 1000)}): held — ${why.message}`,
        details: [
          `code ${job.hold.code}`,
          ...(d && t
            ? [
                `team ${t.id} in force at decision ${d.id}: ${t.budget ? `budget ${money(t.budget.amountMicroUsd)} ${t.budget.period}, action ${t.budget.action}` : 'no valid budget (held)'}; spent ${money(t.spentMicroUsd)}, running work will cost about ${money(t.committedMicroUsd)} more; ${t.maxGpus !== undefined ? `at most ${t.maxGpus} GPUs` : 'no GPU cap'}, weight ${t.weight}; state ${t.state}`,
                ...t.tagProblems.map((p) => `tag problem: ${p}`),
              ]
            : []),
          ...details,
        ],
        ...(d ? { decisionId: d.id } : {}),
      };
    }
    const d = recent.find((r) => r.plan.waiting.some((w) => w.jobId === job.id) && r.atMs >= job.queuedAtMs);
    const w = d?.plan.waiting.find((x) => x.jobId === job.id);
    if (job.requeueReason) details.push(`back in the queue since ${new Date(job.queuedAtMs).toISOString()}: ${job.requeueReason.message}`);
    if (!d || !w)
      return {
        job: job.id,
        state: job.state,
        summary: `${job.id} waits (${duration((now - job.queuedAtMs) / 1000)}); no reconcile has planned since it was queued`,
        details,
      };
    const scale = d.plan.actions.filter((a) => a.kind === 'scale-up');
    if (scale.length > 0)
      details.push(
        `that run added capacity: ${scale.map((a) => `${a.kind === 'scale-up' ? `${a.groupId} ${a.fromDesired}→${a.toDesired}` : ''}`).join(', ')}`,
      );
    return {
      job: job.id,
      state: job.state,
      summary: `${job.id} waits (${duration((now - job.queuedAtMs) / 1000)}): ${w.reason.message}`,
      details: [`code ${w.reason.code}, decision ${d.id} at ${new Date(d.atMs).toISOString()}`, ...details],
      decisionId: d.id,
    };
  }
  const placeDecision = recent.find((r) =>
    r.plan.actions.some((a) => a.kind === 'place' && a.jobId === job.id && a.attempt === job.attempt),
  );
  const place = placeDecision?.plan.actions.find(
    (a): a is Extract<PlanAction, { kind: 'place' }> => a.kind === 'place' && a.jobId === job.id && a.attempt === job.attempt,
  );
  const where = job.placement ? onMachines(job.placement, job.placement.nodes.map((n) => n.nodeId).join(', ')) : 'nowhere now';
  if (place)
    details.push(`placed by decision ${placeDecision!.id} at ${new Date(placeDecision!.atMs).toISOString()}: ${place.reason.message}`);
  if (job.placement?.priceMicroUsdPerHour !== undefined)
    details.push(
      `its share costs ${money(job.placement.priceMicroUsdPerHour)}/h (on-demand would be ${money(job.placement.onDemandMicroUsdPerHour ?? job.placement.priceMicroUsdPerHour)}/h)`,
    );
  const saves = job.placement?.saves;
  if (saves)
    details.push(
      saves.by === 'longest'
        ? `asked to save every ${duration(saves.everySec)}, the spec's interval (${saves.hazardPerHour > 0 ? `${saves.hazardPerHour.toFixed(2)} take-backs/h` : 'no take-backs expected'}; a save costs $${usdString(saves.savePriceMicroUsd)})`
        : `asked to save every ${duration(saves.everySec)}: ${saves.hazardPerHour.toFixed(2)} take-backs/h expected here, a save costs $${usdString(saves.savePriceMicroUsd)} (stall and bytes)${saves.by === 'shortest' ? ', held at the shortest allowed' : ''}`,
    );
  if (job.requeueReason) details.push(`earlier attempt ended: ${job.requeueReason.message}`);
  if (job.checkpointReason && job.state === 'checkpointing') details.push(`checkpointing: ${job.checkpointReason.message}`);
  const verb =
    job.state === 'running' || job.state === 'checkpointing'
      ? 'runs'
      : job.state === 'placed'
        ? 'is placed (starting)'
        : `ended ${job.state}`;
  return {
    job: job.id,
    state: job.state,
    summary: `${job.id} ${verb} on ${where}${job.cancelRequested ? '; a cancel is pending' : ''}`,
    details,
    ...(placeDecision ? { decisionId: placeDecision.id } : {}),
  };
}

function describeDecision(d: DecisionRecord): string {
  const out = [
    `decision ${d.id} at ${new Date(d.atMs).toISOString()}${d.dryRun ? ' (dry run)' : ''}: ${formatNumber(d.inputs.pendingJobs)} pending and ${count(d.inputs.activeJobs, 'active job')}, ${count(d.inputs.nodes, 'node')}; ${count(d.plan.actions.length, 'action')}, ${formatNumber(d.applied)} applied, planned in ${Math.round(d.planMs)} ms`,
  ];
  if (d.plan.addedCostMicroUsdPerHour > 0) out.push(`capacity added costs ${money(d.plan.addedCostMicroUsdPerHour)}/h`);
  const fleetActions = d.plan.actions.filter((a) => a.kind !== 'place' && a.kind !== 'hold' && a.kind !== 'release-hold');
  if (fleetActions.length > 0) {
    out.push('', 'Fleet changes');
    for (const a of fleetActions) out.push(`  ${describeAction(a)}`);
  }
  const places = d.plan.actions.filter((a) => a.kind === 'place');
  if (places.length > 0)
    out.push(
      '',
      `Placements: ${places.length}`,
      ...places
        .slice(0, 10)
        .map(
          (a) =>
            `  ${a.kind === 'place' ? `${a.jobId} → ${a.placement.nodes.map((n) => n.nodeId).join(', ')}` : ''}: ${a.reason?.message ?? ''}`,
        ),
    );
  if (d.rightsized && d.rightsized.length > 0)
    out.push(
      '',
      `Placed in a right-sized shape: ${d.rightsized.length}`,
      ...d.rightsized.slice(0, 10).map((r) => `  ${r.jobId}: ${describeShape(r.from)} → ${describeShape(r.to)} (${r.why})`),
    );
  if (d.plan.waiting.length > 0) {
    const byCode = new Map<string, number>();
    for (const w of d.plan.waiting) byCode.set(w.reason.code, (byCode.get(w.reason.code) ?? 0) + 1);
    out.push(
      '',
      'Waiting',
      table(
        ['reason', 'jobs'],
        [...byCode].sort((a, b) => b[1] - a[1]).map(([k, v]) => [k, v]),
      ),
    );
  }
  if (d.errors.length > 0) out.push('', 'Errors', ...d.errors.map((e) => `  ${describeFailure(e)}`));
  return out.join('\n');
}

// ---- budget -----------------------------------------------------------------------------------

export interface BudgetFlags extends FleetFlags {
  readonly team?: string;
  readonly json?: boolean;
}

interface BudgetRow {
  team: string;
  period: string;
  spentMicroUsd: number;
  committedMicroUsd: number;
  budgetMicroUsd: number | undefined;
  usedPct: number | undefined;
  forecastMicroUsd: number;
  forecastPct: number | undefined;
  action: string | undefined;
  state: string;
  message: string;
  tagProblems: readonly string[];
  /** Of the spend, what the team's work ran on reserved capacity (billed at the reservations' rates), jobs touching the period. */
  reservedMicroUsd: number;
}

export async function budgetCommand(flags: BudgetFlags, io: Io): Promise<void> {
  const only = teamFlag(flags.team);
  await withFleet(flags, io, async (fleet) => {
    const now = fleet.clock.nowMs();
    // The same reader reconcile uses, with the last valid values it keeps: what is shown is what is enforced.
    const tagSets = await fleet.budgets.readTeamTags();
    const memory = fleet.budgetMemory ? await fleet.budgetMemory.load() : new Map<string, Team>();
    const inForce = teamsInForce(tagSets, memory);
    const byTeam = new Map([...inForce].filter(([id]) => !only || id === only));
    if (only && !byTeam.has(only))
      throw new UsageError(
        `no team ${only}: no resource carries gpu-fleet:team=${only}; teams: ${[...inForce.keys()].join(', ') || '(none)'}`,
      );
    const rows: BudgetRow[] = [];
    // The days each team spent on: its forecast runs from the first one in the period.
    const spendDays = (await fleet.ledger.list()).filter((r) => r.period.startsWith(DAY_PERIOD_PREFIX) && r.spentMicroUsd > 0);
    // What running work will still cost, as reconcile counts it against hold, spot-only and stop.
    const active = await fleet.jobs.listByState(ACTIVE_STATES);
    const committed = committedCostMicroUsd(active, now, fleet.policy, fleet.policy.reconcileIntervalSec);
    // Work on reserved capacity, per team: what its running jobs and those ended in its period ran there
    // (the jobs that ended since the earliest period start shown, not every job there is).
    const earliest = Math.min(now, ...[...byTeam.values()].map((t) => periodBounds(t.budget?.period ?? 'monthly', now).startMs));
    const touching = [...active, ...(await fleet.jobs.listEndedSince(earliest, now))];
    const reservedOf = (teamId: string, startMs: number) =>
      touching
        .filter((j) => j.team === teamId && (j.endedAtMs === undefined || j.endedAtMs >= startMs))
        .reduce((sum, j) => sum + (usageSoFar(j, now)?.reservedMicroUsd ?? 0), 0);
    for (const team of [...byTeam.values()].sort((a, b) => a.id.localeCompare(b.id))) {
      const period = team.budget?.period ?? 'monthly';
      const key = periodKey(period, now);
      const { startMs, endMs } = periodBounds(period, now);
      const spent = (await fleet.ledger.read(team.id, key)).spentMicroUsd;
      const committedMicroUsd = committed.get(team.id) ?? 0;
      const status = budgetStatus(team, spent, committedMicroUsd);
      const firstDay = spendDays
        .filter((r) => r.team === team.id)
        .map((r) => dayStartMs(r.period.slice(DAY_PERIOD_PREFIX.length)))
        .filter((at): at is number => at !== undefined && at >= startMs && at < endMs && at <= now);
      const forecast = forecastSpend(spent, { startMs, endMs }, now, firstDay.length > 0 ? Math.min(...firstDay) : undefined);
      rows.push({
        team: team.id,
        period: key,
        spentMicroUsd: spent,
        committedMicroUsd,
        budgetMicroUsd: team.budget?.amountMicroUsd,
        usedPct: team.budget ? (100 * spent) / team.budget.amountMicroUsd : undefined,
        forecastMicroUsd: forecast,
        forecastPct: team.budget ? (100 * forecast) / team.budget.amountMicroUsd : undefined,
        action: team.budget?.action,
        state: status.state,
        message: status.message,
        tagProblems: team.tagProblems,
        reservedMicroUsd: reservedOf(team.id, startMs),
      });
    }
    // Reservations no machine ran in this month: paid all the same (counted by reconcile under "(reserved unused) cr-…").
    const month = periodKey('monthly', now);
    const unused = (await fleet.ledger.list()).filter(
      (r) => r.team.startsWith(RESERVED_UNUSED_PREFIX) && r.period === month && r.spentMicroUsd > 0,
    );
    print(io, flags.json, rows, () => {
      const out = [
        table(
          ['team', 'period', 'spent', 'on reserved', 'committed', 'budget', 'used', 'forecast', 'state', 'when over'],
          rows.map((r) => [
            r.team,
            r.period,
            money(r.spentMicroUsd),
            r.reservedMicroUsd > 0 ? money(r.reservedMicroUsd) : '-',
            money(r.committedMicroUsd),
            r.budgetMicroUsd !== undefined ? money(r.budgetMicroUsd) : '-',
            r.usedPct !== undefined ? pct(r.usedPct) : '-',
            `${money(r.forecastMicroUsd)}${r.forecastPct !== undefined ? ` (${pct(r.forecastPct)})` : ''}`,
            r.state,
            r.action ?? '-',
          ]),
        ),
      ];
      const problems = rows.flatMap((r) => r.tagProblems.map((p) => `  ${r.team}: ${p}`));
      if (problems.length > 0)
        out.push('', 'Tag problems (a bad tag never lifts a budget: the last valid value, or hold, applies)', ...problems);
      const notes = rows.filter((r) => r.state !== 'ok').map((r) => `  ${r.team}: ${r.message}`);
      if (notes.length > 0) out.push('', ...notes);
      if (unused.length > 0)
        out.push(
          '',
          `Reserved capacity no machine ran in, ${month} (paid all the same; no team's budget carries it)`,
          ...unused.map((u) => `  ${u.team.slice(RESERVED_UNUSED_PREFIX.length)}: ${money(u.spentMicroUsd)}`),
        );
      out.push(
        '',
        "committed: what running work will still cost (each attempt's price times its expected remaining runtime); hold, spot-only and stop count it with the spend",
        "forecast: this period's spend so far, extended to the period's end at the rate since the team's first day of spend in it",
        "budgets are read only from each team's own queue; tags on any other resource are listed as tag problems and change nothing",
      );
      return out.join('\n');
    });
  });
}

// ---- budget set -------------------------------------------------------------------------------

export interface BudgetSetFlags extends FleetFlags {
  readonly team?: string;
  readonly usd?: string;
  readonly period?: string;
  readonly action?: string;
  readonly alertAt?: string;
  readonly maxGpus?: string;
  readonly weight?: string;
  readonly json?: boolean;
}

/**
 * Sets a team's budget: `gpu-fleet:*` tags on its queue, checked first as reconcile reads them (a
 * bad value is refused here, and never written). Whether the caller may is the platform's choice:
 * the admin role may always; a team's role only on its own queue, and only where the fleet config
 * lets the team set its own budget (`teams[].setsOwnBudget`). A refusal says which it is.
 */
export async function budgetSetCommand(flags: BudgetSetFlags, io: Io): Promise<void> {
  const team = teamFlag(flags.team, true)!;
  const given: Record<string, string> = {};
  const put = (key: string, value: string | undefined) => {
    if (value !== undefined) given[key] = value.trim();
  };
  put(BUDGET_TAGS.amount, flags.usd);
  put(BUDGET_TAGS.period, flags.period);
  put(BUDGET_TAGS.action, flags.action);
  put(BUDGET_TAGS.alertAt, flags.alertAt);
  put(BUDGET_TAGS.maxGpus, flags.maxGpus);
  put(BUDGET_TAGS.weight, flags.weight);
  if (Object.keys(given).length === 0)
    throw new UsageError('budget set: give at least one of --usd, --period, --action, --alert-at, --max-gpus, --weight');
  // The same reading reconcile makes: a value it would refuse is refused now, before anything is written.
  const problems = teamFromTags(team, given).tagProblems.filter((p) => Object.keys(given).some((k) => p.startsWith(`${k}=`)));
  if (problems.length > 0) throw new UsageError(`budget set --team ${team}: ${problems.join('; ')}`);
  await withFleet(flags, io, async (fleet) => {
    if (fleet.viewer.kind === 'team' && fleet.viewer.team !== team)
      throw new UsageError(
        `budget set --team ${team}: refused: this role is team ${fleet.viewer.team}'s and may never tag another team's queue`,
      );
    await fleet.setBudgetTags(team, given);
  });
  const set = Object.entries(given).map(([k, v]) => `${k}=${v}`);
  print(io, flags.json, { team, tags: given }, () => `team ${team}'s queue tagged: ${set.join(', ')}; reconcile reads it within a minute`);
}

// ---- cancel -----------------------------------------------------------------------------------

export async function cancelCommand(jobId: string, flags: FleetFlags & { json?: boolean }, io: Io): Promise<void> {
  const out = await withFleet(flags, io, (fleet) => fleet.cancel(jobId));
  print(io, flags.json, { jobId, ...out }, () => out.message);
}

export { IDLE_TEAM };

/** A service as `explain --service` shows it: its target, its replicas and where they are, and why. */
async function serviceView(fleet: Fleet, id: string) {
  if (!fleet.services)
    throw new UsageError(
      `this fleet (${fleet.source}) keeps no services yet: they run in a simulation (--sim DIR) until the stack gets its service table`,
    );
  const record = await fleet.services.get(id);
  if (!record) {
    const known = (await fleet.services.list()).map((r) => r.id);
    throw new UsageError(`no service ${id}; the services are ${known.join(', ') || 'none'} (a service is TEAM.NAME)`);
  }
  return summarizeService(record, await fleet.jobs.listByState(JOB_STATES, record.team));
}

/** A service's target, ready and starting replicas, spot/on-demand split, scaling targets and last reason. */
function summarizeService(record: ServiceRecord, jobs: readonly Job[]) {
  const ended = ['succeeded', 'failed', 'cancelled', 'rejected'];
  const live = jobs.filter((j) => j.spec?.labels?.[SERVICE_LABEL] === record.id && !ended.includes(j.state) && !j.cancelRequested);
  // What the replicas' agents found (the load balancer's own health is in the target group; `explain` has the decision's view).
  const ready = live.filter((j) => replicaReady(j, agentFoundAnswering(j)));
  return {
    id: record.id,
    state: record.state,
    target: record.target,
    ready: ready.length,
    starting: live.length - ready.length,
    spot: live.filter((j) => j.spec.interruptible).length,
    onDemand: live.filter((j) => !j.spec.interruptible).length,
    metric: record.spec.service?.targets.map((t) => `${t.metric} ${t.perReplica} per replica`).join(', '),
    ...(record.spec.service?.objective
      ? {
          objective: `a wait of at most ${record.spec.service.objective.waitSec} s, a replica serving ${record.spec.service.objective.replicaRps} requests/s (${record.spec.service.objective.concurrency} at once)`,
        }
      : {}),
    ...(record.reason ? { reason: record.reason } : {}),
    // The share of requests within the objective at the last decision (the queueing model of its ready replicas).
    ...(record.objectiveNow ? { objectiveNow: record.objectiveNow } : {}),
    replicas: live.map((j) => ({
      job: j.id,
      state: j.state,
      ready: replicaReady(j, agentFoundAnswering(j)),
      capacity: j.spec.interruptible ? 'spot' : 'on-demand',
      ...(j.spec.placement?.zones ? { zone: j.spec.placement.zones.join('+') } : {}),
      ...(j.placement?.nodes[0] ? { node: j.placement.nodes[0].nodeId } : {}),
    })),
  };
}

/** Where a placement runs and how its machines are bought: "i-1 GPU 0 (spot)", or "reservation cr-… (prepaid): i-1 GPU 0". */
function onMachines(p: NonNullable<Job['placement']>, machines: string): string {
  return p.capacityType === 'reserved'
    ? `reservation ${p.reservationId ?? '(unknown)'} (prepaid): ${machines}`
    : `${machines} (${p.capacityType})`;
}

// ---- logs -------------------------------------------------------------------------------------

export interface LogsFlags extends FleetFlags {
  /** Checked by the command's option parser (cloud/flags.ts wholeNumber). */
  readonly attempt?: number;
  readonly follow?: boolean;
  readonly since?: string;
  readonly json?: boolean;
  /** Seconds between looks with --follow (default 2). */
  readonly pollSec?: number;
}

/** `10m`, `2h`, `30s`, `1d` ago, or a date and time (`2026-11-30T12:00:00Z`): a time in ms. */
export function parseSince(since: string, nowMs: number): number {
  const m = /^(\d+)([smhd])$/.exec(since.trim());
  if (m) return nowMs - Number(m[1]) * { s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 }[m[2] as 's' | 'm' | 'h' | 'd'];
  const at = Date.parse(since);
  if (Number.isFinite(at) && /^\d{4}-\d{2}-\d{2}/.test(since)) return at;
  throw new UsageError(`--since "${since}" is not a time: give a duration ago (30s, 10m, 2h, 1d) or a date (2026-11-30T12:00:00Z)`);
}

/**
 * What a job's attempts wrote, attempt by attempt (each rank's lines in the order written): from
 * CloudWatch Logs for a deployed fleet, from the simulated processes with `--sim`. `--follow`
 * keeps printing new lines until the job has ended.
 */
export async function logsCommand(jobId: string, flags: LogsFlags, io: Io): Promise<void> {
  const attempt = flags.attempt;
  await withFleet(flags, io, async (fleet) => {
    if (!fleet.jobLogs)
      throw new UsageError(
        `${fleet.source} keeps no job output: deploy the stack (it creates the log group and sets GPU_FLEET_JOB_LOG_GROUP), or read the output file on the machine`,
      );
    const job = await fleet.jobs.get(jobId);
    if (!job) throw new UsageError(`no job ${jobId}; see gpu-fleet status for the jobs there are`);
    const sinceMs = flags.since !== undefined ? parseSince(flags.since, fleet.clock.nowMs()) : undefined;
    const seen = new Set<string>();
    let last: string | undefined;
    const show = async (): Promise<number> => {
      const lines = await fleet.jobLogs!.read(jobId, {
        ...(attempt !== undefined ? { attempt } : {}),
        ...(sinceMs !== undefined ? { sinceMs } : {}),
      });
      let shown = 0;
      for (const l of lines) {
        const key = `${l.attempt}/${l.rank}/${l.seq}`;
        if (seen.has(key)) continue;
        seen.add(key);
        shown++;
        if (flags.json) {
          io.stdout.write(
            `${JSON.stringify({ job: jobId, attempt: l.attempt, rank: l.rank, seq: l.seq, at: new Date(l.atMs).toISOString(), line: l.line })}\n`,
          );
          continue;
        }
        const head = `attempt ${l.attempt}${l.rank > 0 || job.spec.nodes > 1 ? `, rank ${l.rank}` : ''}`;
        if (head !== last) io.stdout.write(`── ${head} ──\n`);
        last = head;
        io.stdout.write(`${new Date(l.atMs).toISOString()}  ${l.line}\n`);
      }
      return shown;
    };
    const first = await show();
    if (first === 0 && !flags.follow && !flags.json)
      io.stdout.write(
        `(no output from ${jobId}${attempt !== undefined ? ` attempt ${attempt}` : ''}${flags.since ? ` since ${flags.since}` : ''} yet; it is ${job.state})\n`,
      );
    if (!flags.follow) return;
    if (flags.sim) {
      if (!flags.json) io.stdout.write('(a saved simulation does not move: --follow has shown what is there)\n');
      return;
    }
    // Until the job has ended, and once more after (the last lines land after its end is recorded).
    for (;;) {
      const now = await fleet.jobs.get(jobId);
      const ended = !now || ['succeeded', 'failed', 'cancelled', 'rejected'].includes(now.state);
      await sleepMs((flags.pollSec ?? 2) * 1000);
      await show();
      if (ended) return;
    }
  });
}

function sleepMs(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}
