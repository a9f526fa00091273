import type { Job } from '../../core/job.ts';
import type { DecisionRecord } from '../../core/ports.ts';
import { describeShape } from '../../core/rightsizing.ts';
import { usdString } from '../../core/money.ts';
import { UsageError } from '../../core/errors.ts';
import { describeAction, describeFailure, type PlanAction } from '../../core/plan.ts';
import type { FleetFlags } from '../fleet.ts';
import { count, duration, formatNumber, money, table } from '../format.ts';
import { onMachines, serviceView } from '../service-view.ts';
import { print, withFleet, type Io } from './shared.ts';

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
