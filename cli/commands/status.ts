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
} from '../../core/job.ts';
import { milliGpusUsed } from '../../core/gpu.ts';
import { degradedName, type QueueDepth } from '../../core/ports.ts';
import { SERVICE_LABEL } from '../../core/serving/service.ts';
import { messageOf, UsageError } from '../../core/errors.ts';
import type { Fleet, FleetFlags } from '../fleet.ts';
import { count, duration, gpuHours, keyValues, money, pct, table } from '../format.ts';
import { onMachines, summarizeService } from '../service-view.ts';
import { print, teamFlag, withFleet, type Io } from './shared.ts';

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
