import { reason, type Reason } from './reason.ts';

/**
 * Spot or on-demand, and when: the decision for one job with a deadline, taken again at every
 * decision point (every reconcile in the live system, every trace tick in bench:spot).
 *
 * Terms (after Wu et al., "Can't Be Late", NSDI'24): C(t) is the work left, R(t) the time left to
 * the deadline, d the changeover delay (a new machine, or a restart after a preemption, does no
 * work for its first d and is paid for it), k the on-demand/spot price ratio. A decision is made
 * knowing whether spot can be had for the coming interval.
 *
 * Three policies share one input and one output:
 * - `greedy`: spot when it can be had, else wait; on-demand to the end once waiting one more
 *   interval would make the deadline unreachable.
 * - `uniform-progress`: the paper's policy (catch up with the line C0·t/D on on-demand; take spot
 *   whenever it comes; hysteresis of 2d on on-demand; a safety net of 2d).
 * - `gpu-fleet`: gpu-fleet's own, which plans on-demand against the spot supply it expects rather
 *   than against a uniform line (see `gpuFleetDecision`).
 */

export type SpotMode = 'none' | 'spot' | 'on-demand';
export type SpotDecisionKind = 'wait' | 'spot' | 'on-demand';

/** What has been seen of the spot pool so far (by this job, or by gpu-fleet's pool history). */
export interface SpotObservations {
  /** Seconds during which spot could be had, and could not. */
  readonly availableSec: number;
  readonly unavailableSec: number;
  /** Number of outages begun (transitions from available to not). */
  readonly outages: number;
  /** How long spot has been in its present state (available, or not), up to and including the coming interval. */
  readonly currentRunSec: number;
}

export interface SpotDecisionInput {
  /** Seconds since the job was submitted (or since planning began). */
  readonly elapsedSec: number;
  /** Seconds from submission to the deadline. */
  readonly deadlineSec: number;
  /** Total work of the job, in seconds of compute. */
  readonly totalWorkSec: number;
  /** Work done so far (the newest checkpoint's progress, plus the work of a running attempt). */
  readonly doneWorkSec: number;
  /** What the job runs on now. */
  readonly mode: SpotMode;
  /** Changeover seconds the current machine still owes before it does work (0 when running steadily). */
  readonly pendingChangeoverSec: number;
  /** Whether spot can be had for the coming interval. */
  readonly spotAvailable: boolean;
  /** Changeover delay d, seconds. */
  readonly changeoverSec: number;
  /** Seconds until the next decision. */
  readonly intervalSec: number;
  /** On-demand price ÷ spot price. */
  readonly priceRatio: number;
  /** Set once the policy has committed the job to on-demand until the end. */
  readonly committedOnDemand: boolean;
  readonly observed: SpotObservations;
}

export interface SpotDecision {
  readonly kind: SpotDecisionKind;
  /** Commit to on-demand until the job ends (the policy will not look back). */
  readonly commit: boolean;
  readonly reason: Reason;
}

export type SpotPolicyName = 'greedy' | 'uniform-progress' | 'gpu-fleet';
export const SPOT_POLICIES: readonly SpotPolicyName[] = ['greedy', 'uniform-progress', 'gpu-fleet'];

export function decideSpot(policy: SpotPolicyName, input: SpotDecisionInput): SpotDecision {
  switch (policy) {
    case 'greedy':
      return greedyDecision(input);
    case 'uniform-progress':
      return uniformProgressDecision(input);
    case 'gpu-fleet':
      return gpuFleetDecision(input);
  }
}

const hours = (sec: number) => `${(sec / 3600).toFixed(1)} h`;

function remaining(i: SpotDecisionInput): { work: number; time: number } {
  return { work: Math.max(0, i.totalWorkSec - i.doneWorkSec), time: i.deadlineSec - i.elapsedSec };
}

/**
 * The latest moment rule every policy shares: if the job does not start on-demand now, could it
 * still finish on on-demand after one more interval? Staying on spot that is available counts
 * the work the interval will do.
 */
export function mustCommitNow(i: SpotDecisionInput): boolean {
  const { work, time } = remaining(i);
  const onSpotNext = i.spotAvailable && i.mode === 'spot' ? Math.max(0, i.intervalSec - i.pendingChangeoverSec) : 0;
  return time - i.intervalSec < work - onSpotNext + i.changeoverSec;
}

function commit(i: SpotDecisionInput, why: string): SpotDecision {
  const { work, time } = remaining(i);
  return {
    kind: 'on-demand',
    commit: true,
    reason: reason('deadline-on-demand', `${why}: ${hours(work)} of work left and ${hours(time)} to the deadline; on-demand to the end`),
  };
}

export function greedyDecision(i: SpotDecisionInput): SpotDecision {
  if (i.committedOnDemand || mustCommitNow(i)) return commit(i, 'waiting longer would miss the deadline');
  if (i.spotAvailable)
    return { kind: 'spot', commit: false, reason: reason('deadline-spot-safe', 'spot can be had and the deadline allows waiting for it') };
  return { kind: 'wait', commit: false, reason: reason('deadline-spot-safe', 'no spot now; the deadline still allows waiting for it') };
}

/** The paper's Uniform Progress, rule by rule. */
export function uniformProgressDecision(i: SpotDecisionInput): SpotDecision {
  const { work, time } = remaining(i);
  const d = i.changeoverSec;
  const expected = (atSec: number) => (i.totalWorkSec * Math.min(atSec, i.deadlineSec)) / i.deadlineSec;
  if (i.committedOnDemand) return commit(i, 'committed');
  // Safety net: idle (or just preempted) with less than 2d of slack: on-demand to the end.
  const margin = Math.max(2 * d, d + i.intervalSec);
  if ((i.mode !== 'spot' || !i.spotAvailable) && i.mode !== 'on-demand' && time < work + margin) return commit(i, 'safety net');
  if (mustCommitNow(i)) return commit(i, 'waiting longer would miss the deadline');
  // Hysteresis: on on-demand, stay until progress is ahead of the line at t + 2d, and then
  // leave only for spot (on-demand is never dropped to wait).
  if (i.mode === 'on-demand' && (!i.spotAvailable || i.doneWorkSec < expected(i.elapsedSec + 2 * d))) {
    return { kind: 'on-demand', commit: false, reason: reason('deadline-on-demand', 'catching up with uniform progress on on-demand') };
  }
  // Taking risks: spot whenever it can be had.
  if (i.spotAvailable) return { kind: 'spot', commit: false, reason: reason('deadline-spot-safe', 'spot can be had') };
  // Uniform progress: behind the line, catch up on on-demand.
  if (i.doneWorkSec < expected(i.elapsedSec))
    return {
      kind: 'on-demand',
      commit: false,
      reason: reason('deadline-on-demand', 'behind uniform progress and no spot: on-demand catches up'),
    };
  return { kind: 'wait', commit: false, reason: reason('deadline-spot-safe', 'ahead of uniform progress: waiting for spot') };
}

/**
 * The constants of gpu-fleet's policy, tuned on the eight shared availability traces
 * (bench:spot, first 312 h, k = 3.14) and checked on traces of other zones and months.
 */
export const GPU_FLEET_SPOT_TUNING = {
  /** Prior belief about spot availability, and its weight in hours of observation. Optimistic on purpose: waiting is free until the slack runs out. */
  priorAvailability: 0.8,
  priorHours: 24,
  /** Prior mean length of a spell of availability, hours, and its weight in spells. */
  priorUpHours: 6,
  priorSpells: 1,
  /** Factor on the spot supply expected from the observed availability. */
  supplyFactor: 1.2,
  /** Leave on-demand for spot only once spot has been back this long: a flicker is not worth two changeovers. */
  spotSettleSec: 1800,
  /** Start on-demand for a deficit once an outage has lasted this long (at once when the deficit is large). */
  outageSettleSec: 1200,
} as const;

/**
 * gpu-fleet's policy: on-demand is planned against the spot supply the pool is expected to give
 * in the time left, and each changeover is treated as the cost it is.
 * - Spot that can be had is taken, except by a job already on on-demand while spot has only just
 *   come back (leaving on-demand costs a changeover now and another at the next outage).
 * - With no spot, on-demand starts only when the work left exceeds the spot expected before the
 *   deadline (observed availability, with a prior, times the time left, less a changeover per
 *   spell of availability), and only once the outage has settled unless the deficit is large.
 * - On-demand, once started, is left only for spot, never to wait (a restart would cost another
 *   changeover).
 * - Whatever the estimate, the job goes on-demand to the end when waiting one more interval
 *   would make the deadline unreachable.
 */
export function gpuFleetDecision(i: SpotDecisionInput): SpotDecision {
  const T = GPU_FLEET_SPOT_TUNING;
  const { work, time } = remaining(i);
  const d = i.changeoverSec;
  if (i.committedOnDemand || mustCommitNow(i)) return commit(i, 'waiting longer would miss the deadline');
  const obs = i.observed;
  const seenH = (obs.availableSec + obs.unavailableSec) / 3600;
  const availability = (obs.availableSec / 3600 + T.priorAvailability * T.priorHours) / (seenH + T.priorHours);
  const upH = (obs.availableSec / 3600 + T.priorUpHours * T.priorSpells) / (obs.outages + T.priorSpells);
  const perSpellLoss = Math.min(1, d / 3600 / Math.max(upH, 1e-6));
  const supply = T.supplyFactor * availability * (1 - perSpellLoss) * time;
  const deficit = work + d - supply;
  const expected = `${hours(supply)} of spot expected before the deadline at ${(100 * availability).toFixed(0)}% availability`;
  if (i.spotAvailable) {
    if (i.mode === 'on-demand' && deficit > 0 && obs.currentRunSec < T.spotSettleSec) {
      return {
        kind: 'on-demand',
        commit: false,
        reason: reason(
          'deadline-on-demand',
          `spot is back but has not settled, and ${hours(work)} of work exceeds the ${expected}: staying on on-demand`,
        ),
      };
    }
    return {
      kind: 'spot',
      commit: false,
      reason: reason('deadline-spot-safe', `spot can be had; ${hours(time - work)} of slack before the deadline`),
    };
  }
  if (i.mode === 'on-demand' || (deficit > 0 && (obs.currentRunSec >= T.outageSettleSec || deficit > 2 * d))) {
    return {
      kind: 'on-demand',
      commit: false,
      reason: reason('deadline-on-demand', `no spot, and ${hours(work)} of work exceeds the ${expected}: on-demand fills the outage`),
    };
  }
  return {
    kind: 'wait',
    commit: false,
    reason: reason('deadline-spot-safe', `no spot now; the ${expected} covers the ${hours(work)} left: waiting for it`),
  };
}
