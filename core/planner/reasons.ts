/**
 * Every sentence the planner writes, in one place: each function takes the facts of one decision
 * and returns its reason (a stable code and a message a person can read). Phases decide; they do
 * not word. A message may improve here without touching a decision; a code may not change.
 */
import type { Job } from '../job.ts';
import { reason, type Reason } from '../reason.ts';
import type { Snapshot } from '../snapshot.ts';

/** What a job asks for, in words: "2 A100-80GB GPUs", "0.3 of a GPU with 8000 MiB", "4 nodes × a 1g.10gb MIG slice". */
export function describeRequest(job: Job): string {
  const g = job.spec.gpu;
  const models = g.models ? ` ${g.models.join('/')}` : '';
  const what =
    g.kind === 'whole'
      ? `${g.count}${models} GPU${g.count > 1 ? 's' : ''}`
      : g.kind === 'fraction'
        ? `${g.milliGpu / 1000} of a${models} GPU with ${g.memoryMiB} MiB`
        : `a ${g.profile}${models} MIG slice`;
  return job.spec.nodes > 1 ? `${job.spec.nodes} nodes × ${what}` : what;
}

/** "g5.xlarge (spot, us-east-1a)" */
export interface Where {
  readonly id?: string;
  readonly instanceType: string;
  readonly capacityType: string;
  readonly zone: string;
}
const machine = (w: Where) => `${w.instanceType} (${w.capacityType}, ${w.zone})`;
const dollars = (microUsd: number) => `$${(microUsd / 1e6).toFixed(2)}`;

// ---- launch cancellation ---------------------------------------------------------------

export const launchesCancelled = (groupId: string, count: number): Reason =>
  reason(
    'offering-unavailable',
    `${count} launch(es) of ${groupId} cannot be fulfilled: every offering of the group failed to launch or was interrupted recently`,
  );

// ---- classification and limits ---------------------------------------------------------

export const budgetHeld = (state: 'hold' | 'stop', team: string, statusMessage: string | undefined): Reason =>
  reason(state === 'stop' ? 'budget-stop' : 'budget-hold', statusMessage ?? `team ${team} has no budget; new work is held`);

export const spotOnlyBudget = (team: string): Reason =>
  reason(
    'budget-spot-only',
    `team ${team} spent its budget (action spot-only) and this job is not interruptible, so it cannot run on spot`,
  );

export const budgetStopped = (statusMessage: string, checkpointable: boolean): Reason =>
  reason(
    'budget-stop',
    `${statusMessage}: ${checkpointable ? 'checkpointed and requeued, it resumes from its checkpoint' : 'it cannot checkpoint, so it is stopped and requeued from the start'}`,
  );

export const teamGpuCap = (team: string, maxGpus: number): Reason =>
  reason('team-gpu-cap', `team ${team} would hold more than its cap of ${maxGpus} GPUs (gpu-fleet:max-gpus)`);

export const overBudget = (team: string, expectedMicroUsd: number, leftMicroUsd: number): Reason =>
  reason(
    'budget-hold',
    `its expected cost (${dollars(expectedMicroUsd)}) is more than what is left of team ${team}'s budget (${dollars(leftMicroUsd)}; action hold)`,
  );

export const noOfferingFits = (job: Job, capacity: 'any' | 'spot' | 'on-demand'): Reason =>
  reason(
    'no-offering-fits',
    `no offering allowed for it (${capacity === 'any' ? 'spot or on-demand' : capacity}${job.spec.placement ? ', placement limits' : ''}) can hold ${describeRequest(job)}`,
  );

export const noGroupOffers = (job: Job): Reason =>
  reason('no-offering-fits', `no node group offers a machine that can hold ${describeRequest(job)}`);

export const providerDegraded = (job: Job, degraded: NonNullable<Snapshot['degraded']>): Reason =>
  reason(
    'provider-degraded',
    `no healthy node group offers a machine that can hold ${describeRequest(job)}; ${degraded.map((d) => `${d.scope ? `${d.cloud} ${d.scope}` : d.cloud} is left out (its calls fail: ${d.error})`).join('; ')}`,
  );

// ---- existing capacity -----------------------------------------------------------------

export const placedOnFree = (where: readonly Where[]): Reason =>
  reason(
    'placed-on-free-capacity',
    `fits on free GPUs of ${where.map((w) => `${w.id} (${w.instanceType}, ${w.capacityType}, ${w.zone})`).join(', ')}; the fullest node that fits, keeping bigger holes for bigger jobs`,
  );

export const sharesNewMachine = (w: Where): Reason => reason('waiting-for-capacity', `shares a new ${machine(w)} ordered in this plan`);

export const waitsForStarting = (planned: boolean, where: readonly Where[]): Reason =>
  reason(
    planned ? 'waiting-for-capacity' : 'waiting-for-boot',
    `${planned ? 'shares new capacity ordered in this plan' : 'capacity for it is starting'}: ${[...new Set(where.map(machine))].join(', ')}`,
  );

// ---- new capacity ----------------------------------------------------------------------

export const ordered = (w: Where, why: string): Reason => reason('waiting-for-capacity', `new ${machine(w)} ordered for it: ${why}`);

/** Why an offering won: its expected price per GPU used, rework included, and how full waiting work would keep it. */
export const cheapestPerGpu = (effMicroUsdPerMilliHour: number, factor: number, fillMilli: number, gpuCount: number): string =>
  `the lowest expected cost per GPU used ($${((effMicroUsdPerMilliHour * 1000) / 1e6).toFixed(3)}/GPU-h${factor > 1.0001 ? `, spot rework included ×${factor.toFixed(3)}` : ''}; ${Math.round(fillMilli / 1000)} of its ${gpuCount} GPUs wanted by waiting work)`;

export const groupsAtMax = (job: Job): Reason =>
  reason('group-at-max', `every node group that could hold ${describeRequest(job)} is at its maximum size`);

export const offeringsAvoided = (job: Job): Reason =>
  reason(
    'offering-unavailable',
    `the offerings that could hold ${describeRequest(job)} failed to launch or were interrupted recently and are avoided for now`,
  );

export const noGroupLaunches = (job: Job): Reason =>
  reason('no-offering-fits', `no node group can launch a machine for ${describeRequest(job)}`);

export const scaleUp = (count: number, instanceType: string, capacityType: string): Reason =>
  reason(
    'scale-up-for-pending',
    `${count} more ${instanceType} (${capacityType}) for waiting jobs that fit nowhere else, the cheapest capacity for them`,
  );

// ---- preemption ------------------------------------------------------------------------

export const preemptedFor = (forJob: string, priority: number, victimPriority: number): Reason =>
  reason(
    'preempt-for-priority',
    `checkpointed and requeued to make room for ${forJob} (priority ${priority} over ${victimPriority}); it resumes from its checkpoint`,
  );

export const roomBeingFreed = (victims: number): Reason =>
  reason(
    'waiting-for-capacity',
    `groups are at their maximum; ${victims > 0 ? `${victims} lower-priority job(s) are being checkpointed to make room for it` : 'room is being freed by jobs already checkpointing'}`,
  );

// ---- disruption ------------------------------------------------------------------------

export const drainedEmpty = (instanceId: string, drainReason: string): Reason =>
  reason('scale-in-idle', `${instanceId} is draining (${drainReason}) and has no work left`);

export const silentMachine = (instanceId: string, registered: boolean, silentMs: number, atMinimum = false): Reason =>
  reason(
    'scale-in-unhealthy',
    `${instanceId}: ${registered ? `its agent has sent no heartbeat for ${Math.round(silentMs / 1000)} s` : `its agent never registered in the ${Math.round(silentMs / 60_000)} min since it launched`}; it holds no work and is let go${atMinimum ? ' (its group is at its minimum, so the group launches a machine in its place)' : ''}`,
  );

export const idleMachine = (w: Where & { id: string }, emptyMs: number, cooldownSec: number): Reason =>
  reason(
    'scale-in-idle',
    `${w.id} (${w.instanceType}, ${w.capacityType}) has been empty for ${Math.round(emptyMs / 60_000)} min, past the ${Math.round(cooldownSec / 60)} min cool-down`,
  );

export const consolidated = (nodeId: string, usedMilli: number, gpus: number, savingMicroUsd: number, restartMicroUsd: number): Reason =>
  reason(
    'scale-in-consolidate',
    `moved off underused ${nodeId} (${Math.round(usedMilli / 10) / 100} of ${gpus} GPUs used): freeing it saves about ${dollars(savingMicroUsd)} against ${dollars(restartMicroUsd)} of restart cost; it resumes from its checkpoint on another node`,
  );

export const movedToSpot = (nodeId: string, instanceType: string, zone: string, savingMicroUsd: number, costMicroUsd: number): Reason =>
  reason(
    'rebalance-to-spot',
    `moved from on-demand ${nodeId} to spot (${instanceType}, ${zone}): about ${dollars(savingMicroUsd)} saved over its remaining run against ${dollars(costMicroUsd)} for the move; it resumes from its checkpoint`,
  );

export const deadlineToOnDemand = (slackSec: number, workLeftSec: number, deadline: string): Reason =>
  reason(
    'deadline-on-demand',
    `its slack on spot has run out (${Math.round(slackSec / 60)} min for ${Math.round(workLeftSec / 60)} min of work before ${deadline}): checkpointed and moved to on-demand while that can still make it`,
  );

/**
 * A requeued job's earlier attempt is still on a live machine's work list: its agent has not yet
 * stopped it and said so, and has not been silent long enough to have fenced itself.
 */
export function previousAttemptStillRuns(attempt: number, instanceId: string, fencedByMs: number): Reason {
  return reason(
    'waiting-for-stop',
    `attempt ${attempt} may still run on ${instanceId}: it is placed again once that machine's agent has stopped it (or, silent, has fenced itself by ${new Date(fencedByMs).toISOString().slice(11, 19)} UTC), so two attempts never run at once`,
  );
}
