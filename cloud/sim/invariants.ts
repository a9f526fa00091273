import { GpuFleetError } from '../../core/errors.ts';
import { budgetStatus, teamFromTags } from '../../core/budget.ts';
import { periodKey } from '../../core/period.ts';
import { inService, type Instance, type NodeGroup } from '../../core/fleet.ts';
import { ACTIVE_STATES, JOB_STATES, type Job } from '../../core/job.ts';
import { committedCostMicroUsd } from '../../core/cost-model.ts';
import { costForDuration, formatUsd } from '../../core/money.ts';
import { DEFAULT_POLICY } from '../../core/snapshot.ts';
import type { SpendLedger, TeamTagSet } from '../../core/ports.ts';
import type { LiveProcess, LostWork, StaleResume } from './sim-agent.ts';

/** A broken promise of the control loop, found by the simulation's minute-by-minute check. */
export class InvariantViolation extends GpuFleetError {
  override name = 'InvariantViolation';
  constructor(
    readonly invariant: string,
    message: string,
    readonly atMs: number,
  ) {
    super(`invariant "${invariant}" broken at ${new Date(atMs).toISOString()}: ${message}`, { context: { invariant, atMs } });
  }
}

export interface InvariantInput {
  readonly atMs: number;
  /** Every job the store holds. */
  readonly jobs: readonly Job[];
  /** Ids intake accepted (or rejected): each must still be in the store. */
  readonly submitted: ReadonlySet<string>;
  /** Every live process on every machine (draining and terminating ones included), as the machines see it. */
  readonly processes: readonly LiveProcess[];
  /** How long the control plane lets this job stay `checkpointing` (grace, upload allowance, margin), seconds. */
  readonly checkpointTimeoutSec: (job: Job) => number;
  readonly groups: readonly NodeGroup[];
  readonly instances: readonly Instance[];
  /** The exit code each job's own program ends with. */
  readonly exitCodeOf: (job: Job) => number;
  readonly lost: readonly LostWork[];
  /** Attempts that resumed from an older checkpoint than the newest complete one (each is a violation). */
  readonly staleResumes?: readonly StaleResume[];
  /** Slack on the lost-work bound: the agent's tick, the notice margin and restore time. */
  readonly lostSlackSec: number;
  readonly teamTags: readonly TeamTagSet[];
  readonly ledger: SpendLedger;
  /** When each hold (or stop) team was first seen with spend plus committed cost at its budget (kept by the caller between checks). */
  readonly overBudgetSince: Map<string, number>;
  /** When each stop team was first seen spent, with its running work's spend rate then and the longest checkpoint timeout among it (kept by the caller). */
  readonly stoppedSince?: Map<string, { readonly atMs: number; readonly rateMicroUsdPerHour: number; readonly allowanceSec: number }>;
  readonly reconcileIntervalMs: number;
}

/**
 * The promises gpu-fleet makes about people's work and money, checked after every simulated
 * minute. Returns the violations found (empty when all hold).
 * 1. every submitted job is in the store, in exactly one known state;
 * 2. no job has two live processes for one rank, or processes of two attempts, on any machine (drained or terminating
 *    ones included), and a running attempt is the job's current one;
 * 3. nothing is lost: accepted = succeeded + failed (by its own exit) + cancelled + pending + placed + running + checkpointing;
 * 4. no group has more desired or live machines than its max;
 * 5. a team whose budget says `hold` (or `stop`) gets no new placement more than one reconcile interval after its spend
 *    plus what its running work will still cost reaches the budget;
 * 5b. a team whose budget says `stop` never spends more past its budget than its running work costs over one reconcile
 *    interval and its checkpoint allowance (at the spend rate when it was found spent);
 * 6. an interrupted attempt of a job whose checkpoints work loses at most its checkpoint interval, grace period and save lag
 *    (two upload times at the machine's bandwidth plus the upload margin: one save in flight, the newest queued behind it);
 * 7. no job stays `checkpointing` longer than its checkpoint timeout plus one reconcile interval.
 */
/**
 * From the machines' side: which attempts of each job have live processes, and the jobs that run
 * twice (two attempts at once, or one rank of an attempt on two machines), with what was seen.
 */
export function fromMachines(processes: readonly LiveProcess[]): {
  running: Map<string, number[]>;
  twice: { jobId: string; rankTwice?: string }[];
} {
  const running = new Map<string, number[]>();
  const ranks = new Map<string, string>();
  const twice: { jobId: string; rankTwice?: string }[] = [];
  for (const p of processes) {
    const attempts = running.get(p.jobId) ?? [];
    if (!attempts.includes(p.attempt)) attempts.push(p.attempt);
    running.set(p.jobId, attempts);
    const key = `${p.jobId}#${p.attempt}/${p.rank}`;
    const other = ranks.get(key);
    if (other !== undefined)
      twice.push({
        jobId: p.jobId,
        rankTwice: `job ${p.jobId} attempt ${p.attempt} runs rank ${p.rank} on both ${other} and ${p.instanceId}`,
      });
    else ranks.set(key, p.instanceId);
  }
  for (const [jobId, attempts] of running) if (attempts.length > 1) twice.push({ jobId });
  return { running, twice };
}

export async function checkInvariants(
  x: InvariantInput,
  lostChecked: { upTo: number; resumesUpTo?: number },
): Promise<InvariantViolation[]> {
  const out: InvariantViolation[] = [];
  const v = (name: string, message: string) => out.push(new InvariantViolation(name, message, x.atMs));
  // One pass over the jobs (this runs every simulated minute): states, platform failures, and how many submitted ids are present.
  let present = 0;
  const current = new Map<string, Job>();
  const { running, twice } = fromMachines(x.processes);
  for (const t of twice) if (t.rankTwice) v('no two running attempts', t.rankTwice);
  for (const j of x.jobs) {
    if (x.submitted.has(j.id)) present++;
    if (!JOB_STATES.includes(j.state)) v('one state per job', `job ${j.id} is in unknown state "${j.state}"`);
    // Every accepted job is pending, placed, running, checkpointing, succeeded, cancelled, or failed by its own program's exit.
    if (j.state === 'failed' && j.exitCode !== x.exitCodeOf(j))
      v('nothing lost', `job ${j.id} failed with exit code ${j.exitCode}, not its program's ${x.exitCodeOf(j)}: the platform failed it`);
    if (running.has(j.id)) current.set(j.id, j);
    if (j.state === 'checkpointing' && j.checkpointRequestedAtMs !== undefined) {
      const limitMs = x.checkpointTimeoutSec(j) * 1000 + x.reconcileIntervalMs;
      if (x.atMs - j.checkpointRequestedAtMs > limitMs)
        v(
          'no endless checkpointing',
          `job ${j.id} has been checkpointing for ${Math.round((x.atMs - j.checkpointRequestedAtMs) / 1000)} s; its timeout and one reconcile interval allow ${limitMs / 1000} s`,
        );
    }
  }
  if (present !== x.submitted.size) {
    const ids = new Set(x.jobs.map((j) => j.id));
    for (const id of x.submitted) if (!ids.has(id)) v('one state per job', `job ${id} was submitted but is not in the store`);
  }
  for (const [jobId, attempts] of running) {
    if (attempts.length > 1) v('no two running attempts', `job ${jobId} runs attempts ${attempts.join(' and ')} at once`);
    const j = current.get(jobId);
    if (j && (j.state === 'running' || j.state === 'checkpointing') && !attempts.includes(j.attempt))
      v('no two running attempts', `job ${jobId} is at attempt ${j.attempt} but attempt ${attempts.join(',')} runs`);
  }
  const live = new Map<string, number>();
  // The group's size, as Auto Scaling counts it: booting and in-service machines (one a hook holds on its way out is not).
  for (const i of x.instances) if (inService(i.state)) live.set(i.groupId, (live.get(i.groupId) ?? 0) + 1);
  for (const g of x.groups) {
    if (g.desiredCapacity > g.maxSize)
      v('no group above its max', `group ${g.id} wants ${g.desiredCapacity} machines, its max is ${g.maxSize}`);
    if ((live.get(g.id) ?? 0) > g.maxSize)
      v('no group above its max', `group ${g.id} has ${live.get(g.id)} live machines, its max is ${g.maxSize}`);
  }
  const active = x.jobs.filter((j) => ACTIVE_STATES.includes(j.state));
  const committed = committedCostMicroUsd(active, x.atMs, DEFAULT_POLICY, x.reconcileIntervalMs / 1000);
  for (const t of x.teamTags) {
    const team = teamFromTags(t.team, t.tags);
    const action = team.budget?.action;
    if (action !== 'hold' && action !== 'stop') continue;
    const spent = (await x.ledger.read(team.id, periodKey(team.budget!.period, x.atMs))).spentMicroUsd;
    if (action === 'stop' && x.stoppedSince) {
      if (spent < team.budget!.amountMicroUsd) x.stoppedSince.delete(team.id);
      else {
        const mine = active.filter((j) => j.team === team.id);
        const stop = x.stoppedSince.get(team.id) ?? {
          atMs: x.atMs,
          rateMicroUsdPerHour: mine.reduce((a, j) => a + (j.placement?.priceMicroUsdPerHour ?? 0), 0),
          allowanceSec: Math.max(0, ...mine.map((j) => x.checkpointTimeoutSec(j))),
        };
        x.stoppedSince.set(team.id, stop);
        const allowed = costForDuration(stop.rateMicroUsdPerHour, x.reconcileIntervalMs + stop.allowanceSec * 1000);
        const over = spent - team.budget!.amountMicroUsd;
        if (over > allowed)
          v(
            'stop keeps the budget',
            `team ${team.id} (action stop) has spent ${formatUsd(over)} past its budget since ${new Date(stop.atMs).toISOString()}; its running work then (${formatUsd(stop.rateMicroUsdPerHour)}/h) allows ${formatUsd(allowed)} for one reconcile interval and ${stop.allowanceSec} s of checkpointing`,
          );
      }
    }
    const state = budgetStatus(team, spent, committed.get(team.id) ?? 0).state;
    if (state !== 'hold' && state !== 'stop') {
      x.overBudgetSince.delete(team.id);
      continue;
    }
    const since = x.overBudgetSince.get(team.id) ?? x.atMs;
    x.overBudgetSince.set(team.id, since);
    const late = x.jobs.filter((j) => j.team === team.id && (j.placedAtMs ?? 0) > since + x.reconcileIntervalMs);
    if (late.length > 0)
      v(
        'hold keeps the budget',
        `team ${team.id} has spent and committed its budget (action ${action}) since ${new Date(since).toISOString()}, yet ${late.map((j) => j.id).join(', ')} was placed`,
      );
  }
  for (let i = lostChecked.upTo; i < x.lost.length; i++) {
    const l = x.lost[i]!;
    if (l.allowedSec !== undefined && !l.checkpointFailed && l.lostSec > l.allowedSec + x.lostSlackSec) {
      v(
        'bounded rework',
        `job ${l.jobId} attempt ${l.attempt} lost ${Math.round(l.lostSec)} s of work; its checkpoint interval, grace and save lag allow ${l.allowedSec + x.lostSlackSec} s`,
      );
    }
  }
  lostChecked.upTo = x.lost.length;
  for (let i = lostChecked.resumesUpTo ?? 0; i < (x.staleResumes ?? []).length; i++) {
    const r = x.staleResumes![i]!;
    v(
      'resumed from the newest checkpoint',
      `job ${r.jobId} attempt ${r.attempt} resumed at ${Math.round(r.resumedSec)} s of work, though a complete checkpoint at ${Math.round(r.newestSec)} s was in the index`,
    );
  }
  lostChecked.resumesUpTo = x.staleResumes?.length ?? 0;
  return out;
}
