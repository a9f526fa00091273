import { decideSpot, type SpotDecisionInput, type SpotMode, type SpotPolicyName } from '../../core/spot-policy.ts';

/**
 * The "Can't Be Late" simulation protocol: a job of C0 seconds of work with a deadline D, on a
 * spot availability trace of ticks of `gap` seconds; a decision at every tick boundary, knowing
 * whether spot can be had in the coming tick; every new machine (a restart after a preemption
 * included) does no work for its first d seconds and is paid for them. Cost is counted in spot
 * price units: billed spot seconds + k × billed on-demand seconds; a machine is billed until the
 * job finishes, not to the end of the tick.
 */

export interface JobSetup {
  readonly workSec: number;
  readonly deadlineSec: number;
  readonly changeoverSec: number;
  readonly priceRatio: number;
}

export interface RunResult {
  readonly spotWorkSec: number;
  readonly onDemandWorkSec: number;
  readonly billedSpotSec: number;
  readonly billedOnDemandSec: number;
  /** Seconds from the start to the end of the work (Infinity when it never ended). */
  readonly finishSec: number;
  readonly met: boolean;
  /** Cost in spot-price seconds. */
  readonly cost: number;
}

/** What the simulated machine does in one tick, given its mode and the changeover it still owes. */
export function tickWork(gap: number, owed: number, workLeft: number): { work: number; used: number; owedAfter: number } {
  const overhead = Math.min(owed, gap);
  const work = Math.min(gap - overhead, workLeft);
  return { work, used: overhead + work, owedAfter: owed - overhead };
}

/**
 * Runs one online policy on `avail` (true = spot obtainable in that tick) from tick `start`. The
 * policy sees only the past and the coming tick.
 */
export function runPolicy(
  policy: SpotPolicyName,
  avail: ArrayLike<boolean>,
  start: number,
  gap: number,
  job: JobSetup,
  historyTicks = 0,
): RunResult {
  let mode: SpotMode = 'none';
  let owed = 0;
  let done = 0;
  let committed = false;
  let spotWork = 0;
  let odWork = 0;
  let billedSpot = 0;
  let billedOd = 0;
  let availableSec = 0;
  let unavailableSec = 0;
  let outages = 0;
  let prevAvail: boolean | undefined;
  let runSec = 0;
  // What the control plane has seen of the pool before the job came (its pool history).
  for (let h = Math.max(0, start - historyTicks); h < start; h++) {
    const a = avail[h]!;
    if (prevAvail === true && !a) outages++;
    runSec = prevAvail === a ? runSec + gap : gap;
    prevAvail = a;
    if (a) availableSec += gap;
    else unavailableSec += gap;
  }
  for (let i = 0; ; i++) {
    const elapsed = i * gap;
    const idx = start + i;
    // Past the end of the trace (a late run): no spot.
    const spot = idx < avail.length ? avail[idx]! : false;
    if (prevAvail === true && !spot) outages++;
    runSec = prevAvail === spot ? runSec + gap : gap;
    prevAvail = spot;
    const input: SpotDecisionInput = {
      elapsedSec: elapsed,
      deadlineSec: job.deadlineSec,
      totalWorkSec: job.workSec,
      doneWorkSec: done,
      mode,
      pendingChangeoverSec: owed,
      spotAvailable: spot,
      changeoverSec: job.changeoverSec,
      intervalSec: gap,
      priceRatio: job.priceRatio,
      committedOnDemand: committed,
      observed: { availableSec, unavailableSec, outages, currentRunSec: runSec },
    };
    const decision = decideSpot(policy, input);
    if (decision.commit) committed = true;
    let next: SpotMode = decision.kind === 'wait' ? 'none' : decision.kind;
    if (next === 'spot' && !spot) next = 'none'; // a policy cannot have what is not there
    if (next !== mode && next !== 'none') owed = job.changeoverSec;
    if (next === 'none') owed = 0;
    mode = next;
    if (spot) availableSec += gap;
    else unavailableSec += gap;
    if (mode !== 'none') {
      const t = tickWork(gap, owed, job.workSec - done);
      owed = t.owedAfter;
      done += t.work;
      if (mode === 'spot') {
        spotWork += t.work;
        billedSpot += t.used;
      } else {
        odWork += t.work;
        billedOd += t.used;
      }
      if (done >= job.workSec - 1e-9) {
        const finish = elapsed + t.used;
        return {
          spotWorkSec: spotWork,
          onDemandWorkSec: odWork,
          billedSpotSec: billedSpot,
          billedOnDemandSec: billedOd,
          finishSec: finish,
          met: finish <= job.deadlineSec + 1e-9,
          cost: billedSpot + job.priceRatio * billedOd,
        };
      }
    }
    if (elapsed > job.deadlineSec * 4 + 7 * 86_400) {
      return {
        spotWorkSec: spotWork,
        onDemandWorkSec: odWork,
        billedSpotSec: billedSpot,
        billedOnDemandSec: billedOd,
        finishSec: Infinity,
        met: false,
        cost: billedSpot + job.priceRatio * billedOd,
      };
    }
  }
}
