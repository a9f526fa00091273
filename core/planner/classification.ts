/**
 * Classification: what each pending job may run on and in what order jobs are served. Decides,
 * per job, the capacity types it may use (interruptible or not, a spot-only budget, deadline
 * slack, patience for spot) and so its class: the offerings that may hold it, each with the
 * expected cost factor of rework on spot. Held teams' jobs wait here. Then the order: priority,
 * weighted fair share between teams, and (when capacity is not scarce) largest first for packing.
 * It must not take room on any machine or buy anything.
 */
import { jobSpotFactor, remainingWorkSec } from '../cost-model.ts';
import { deadlineChoice } from '../deadline.ts';
import { milliGpusUsed } from '../gpu.ts';
import type { Job } from '../job.ts';
import { hostPortsOf } from '../job-spec.ts';
import { reason, type Reason } from '../reason.ts';
import { placementAllowed, typeCanHold, usedMilli, whyNoGroupHolds } from './capacity.ts';
import { hostNetTeamOf, hostNetWall } from './host-net.ts';
import { budgetMessage, teamBudget } from './limits.ts';
import { fairShareOrder } from './ordering.ts';
import { budgetHeld, noGroupOffers, noOfferingFits, previousAttemptStillRuns, providerDegraded, spotOnlyBudget } from './reasons.ts';
import { fencedBySec } from '../services/node-rules.ts';
import type { Snapshot } from '../snapshot.ts';
import { fitsBeforeTermination } from '../reservation.ts';
import { survival } from '../spot-model.ts';
import { unavailable, wait, type CapacityChoice, type Entry, type JobClass, type PlanningState } from './state.ts';

/**
 * Per job, an attempt still on the work list of a machine the cloud has not ended, whose agent
 * has been heard from within its fence (lease + fence grace + stop grace, node-rules
 * {@link fencedBySec}): that attempt may still run there. The agent takes the pointer off when it
 * has stopped the attempt; an agent silent longer has stopped everything on its own. Of several
 * (a gang's ranks), the one whose fence ends last.
 */
export function earlierAttemptsOnMachines(
  s: Pick<Snapshot, 'nodes' | 'nowMs'>,
): Map<string, { attempt: number; instanceId: string; fencedByMs: number }> {
  const out = new Map<string, { attempt: number; instanceId: string; fencedByMs: number }>();
  const fenceMs = fencedBySec() * 1000;
  for (const n of s.nodes) {
    const r = n.record;
    if (!r?.assigned || n.instance.state === 'terminated' || r.endedAtMs !== undefined) continue;
    const fencedByMs = r.lastHeartbeatAtMs + fenceMs;
    if (fencedByMs <= s.nowMs) continue;
    for (const [jobId, attempt] of Object.entries(r.assigned)) {
      const known = out.get(jobId);
      if (!known || attempt > known.attempt || (attempt === known.attempt && fencedByMs > known.fencedByMs))
        out.set(jobId, { attempt, instanceId: r.instanceId, fencedByMs });
    }
  }
  return out;
}

/** The pending jobs that may be planned, classified and in planning order; held ones wait. Sets `st.scarce`. */
export function classify(st: PlanningState): Entry[] {
  const s = st.s;
  const entries: Entry[] = [];
  const stillOn = earlierAttemptsOnMachines(s);
  for (const job of s.pendingJobs) {
    // Two attempts never run at once: a requeued job waits until every machine that ran its
    // earlier attempt has stopped it (its agent takes the pointer off) or must have fenced itself.
    const earlier = stillOn.get(job.id);
    if (earlier && earlier.attempt < job.attempt) {
      wait(st, job, previousAttemptStillRuns(earlier.attempt, earlier.instanceId, earlier.fencedByMs));
      continue;
    }
    const b = teamBudget(st, job.team);
    if (b.state === 'hold' || b.state === 'stop') {
      wait(st, job, budgetHeld(b.state, job.team, budgetMessage(st, job.team)), true);
      continue;
    }
    if (b.state === 'spot-only' && !job.spec.interruptible) {
      wait(st, job, spotOnlyBudget(job.team), true);
      continue;
    }
    let capacity: CapacityChoice = job.spec.interruptible ? 'any' : 'on-demand';
    if (b.state === 'spot-only') capacity = 'spot';
    const deadline = job.spec.deadline
      ? deadlineChoice(job, s.nowMs, s.policy, {
          mode: 'none',
          spotAvailable: job.spec.interruptible && spotObtainable(st, classOf(st, job, 'spot')),
        })
      : ({ mode: 'free' } as const);
    if (deadline.mode === 'on-demand' && capacity !== 'spot') capacity = 'on-demand';
    // The deadline allows waiting for spot rather than paying for on-demand now.
    if (deadline.mode === 'wait-for-spot' && capacity === 'any') capacity = 'spot';
    // A job moved off on-demand to save money waits a while for spot, so it does not land back where it was.
    const waitedMs = s.nowMs - job.queuedAtMs;
    if (capacity === 'any' && job.requeueReason?.code === 'rebalance-to-spot' && waitedMs < s.policy.moveToSpotPatienceSec * 1000)
      capacity = 'spot';
    // A service's spot replica goes on spot or nowhere: its service chose the capacity (its on-demand replicas are jobs of their own).
    if (capacity === 'any' && job.spec.service) capacity = 'spot';
    let cls = classOf(st, job, capacity);
    // Interruptible work without deadline pressure waits a while for spot when none can be had now:
    // up to half its remaining work (at least a boot time), capped by the policy.
    if (capacity === 'any' && deadline.mode !== 'on-demand' && s.policy.spotPatienceSec > 0 && !spotObtainable(st, cls)) {
      const patienceSec = Math.min(s.policy.spotPatienceSec, Math.max(s.policy.expectedBootSec, remainingWorkSec(job, s.policy) / 2));
      if (waitedMs < patienceSec * 1000) {
        const spotOnly = classOf(st, job, 'spot');
        if (spotOnly.eligible.size > 0) cls = spotOnly;
      }
    }
    entries.push({ job, team: job.team, cls });
  }
  const fair = fairShareOrder(
    entries,
    st.teamUsedMilli,
    (team) => s.teams.get(team)?.weight ?? 1,
    (e) => e.cls.milli * e.cls.nodes,
  );
  st.scarce = capacityIsScarce(st, entries);
  if (!st.scarce) {
    // Everyone will get capacity within a boot time: pack well (largest first within a
    // priority, first-fit decreasing); fair-share order still breaks ties between equal sizes.
    const keyed = fair.map((e, i) => ({ e, i, priority: e.job.spec.priority, size: e.cls.milli * e.cls.nodes }));
    keyed.sort((a, b) => b.priority - a.priority || b.size - a.size || a.i - b.i);
    return keyed.map((k) => k.e);
  }
  return fair;
}

/**
 * Capacity is scarce when the waiting work could not all be held by the free GPUs of live
 * machines plus what the groups may still add. Then the order decides who runs, and it is
 * priority and fair share; otherwise it only decides packing.
 */
function capacityIsScarce(st: PlanningState, entries: readonly Entry[]): boolean {
  let demand = 0;
  for (const e of entries) demand += e.cls.milli * e.cls.nodes;
  let supply = 0;
  for (const n of st.nodeById.values()) supply += n.gpus.length * 1000 - usedMilli(n);
  for (const gs of st.groups.values()) {
    let biggest = 0;
    for (const o of gs.group.offerings) biggest = Math.max(biggest, st.s.instanceTypes.get(o.instanceType)?.gpuCount ?? 0);
    supply += gs.room * biggest * 1000;
    if (supply > demand) return false;
  }
  return supply < demand;
}

/** Why no group offers a machine for the job, naming the requirement none meets (as intake says it). */
function noGroupHolds(job: Job, s: PlanningState['s']): Reason {
  const why = whyNoGroupHolds(job.spec, s.groups, s.instanceTypes);
  return why ? reason('no-offering-fits', why) : noGroupOffers(job);
}

/** Jobs that ask the same thing in the same way share one class and one eligibility computation. */
export function classOf(st: PlanningState, job: Job, capacity: CapacityChoice): JobClass {
  const s = st.s;
  const spec = job.spec;
  const workBucket = workBucketOf(job, s.policy);
  const g = spec.gpu;
  const shape =
    g.kind === 'whole' ? `w${g.count}/${g.minMemoryMiB ?? 0}` : g.kind === 'fraction' ? `f${g.milliGpu}/${g.memoryMiB}` : `m${g.profile}`;
  const where = spec.placement
    ? `${spec.placement.clouds?.join('+') ?? ''}/${spec.placement.regions?.join('+') ?? ''}/${spec.placement.zones?.join('+') ?? ''}`
    : '';
  const ports = hostPortsOf(spec);
  // Work on the host's network is its team's class: the wall between teams depends on the team.
  const wallTeam = hostNetTeamOf(job);
  const key = `${shape}|${g.models?.join('+') ?? ''}|${spec.nodes}|${capacity}|${where}|${spec.checkpoint?.intervalSec ?? 0}|${workBucket}${spec.service ? '|service' : ''}${ports.length > 0 ? `|ports:${ports.join('+')}` : ''}${wallTeam !== undefined ? `|hostnet:${wallTeam}` : ''}`;
  const cached = st.classes.get(key);
  if (cached) return cached;
  const eligible = new Map<string, number>();
  let sawType = false;
  const restartSec = s.policy.expectedBootSec + s.policy.restoreSec;
  const representative = { ...job, spec: { ...spec, expectedRuntimeSec: 2 ** workBucket }, checkpoint: undefined } as Job;
  const factorByRisk = new Map<number, number>();
  const gpusOf = new Map<string, number>();
  for (const info of st.allOfferings) {
    const o = info.offering;
    if (!typeCanHold(info.type, spec.gpu, info.migEnabled)) continue;
    sawType = true;
    if (o.capacityType === 'reserved') {
      // Prepaid capacity: any work may use it, except a service's spot replica (its service chose spot for its zones),
      // and work that may not be interrupted on a reservation its owner may take back.
      if (capacity === 'spot' && spec.service) continue;
      if (capacity === 'on-demand' && info.interruptible) continue;
      // On a reservation that ends (a Capacity Block), only work that finishes or reaches a checkpoint before its machines go.
      const fits = fitsBeforeTermination(
        {
          remainingSec: 2 ** workBucket,
          ...(spec.checkpoint ? { checkpointIntervalSec: spec.checkpoint.intervalSec } : {}),
          interruptible: spec.interruptible && capacity !== 'on-demand',
        },
        s.policy.expectedBootSec,
        s.nowMs,
        info.terminationMs,
      );
      if (!fits) continue;
    } else {
      if (capacity === 'spot' && o.capacityType !== 'spot') continue;
      if (capacity === 'on-demand' && o.capacityType !== 'on-demand') continue;
    }
    if (!placementAllowed(spec.placement, o)) continue;
    let factor = 1;
    if (o.capacityType === 'spot') {
      // The rate the work would meet in this pool from now: the spot model's survival over the machine's boot and the
      // work up to its first checkpoint (the pool's age matters: one just back drops again soon far more often).
      const risk = s.spotModel ? riskOver(st, o.id, spotHorizonSec(s, spec, 2 ** workBucket)) : info.riskPerHour;
      // Pools share a few interruption rates: one factor per rate.
      factor = factorByRisk.get(risk) ?? NaN;
      if (Number.isNaN(factor)) {
        factor = jobSpotFactor(representative, risk, { defaultRuntimeSec: s.policy.defaultRuntimeSec, restartSec });
        factorByRisk.set(risk, factor);
      }
      // Spot is not chosen when its expected cost, rework included, is higher than on-demand.
      if (!Number.isFinite(factor) || (capacity !== 'spot' && info.onDemandPrice > 0 && info.price * factor > info.onDemandPrice)) continue;
    }
    eligible.set(info.key, factor);
    if (spec.service) gpusOf.set(info.key, info.type.gpuCount);
  }
  // A service replica runs for days and cannot be moved by checkpoint: it gets a machine of the smallest size that holds
  // it, so it never keeps a larger machine alive whose other GPUs batch work has left idle.
  if (spec.service && eligible.size > 0) {
    const smallest = Math.min(...gpusOf.values());
    for (const k of [...eligible.keys()]) if (gpusOf.get(k) !== smallest) eligible.delete(k);
  }
  const noFit =
    eligible.size > 0
      ? undefined
      : sawType
        ? noOfferingFits(job, capacity)
        : s.degraded && s.degraded.length > 0
          ? providerDegraded(job, s.degraded)
          : noGroupHolds(job, s);
  const cls: JobClass = {
    key,
    request: spec.gpu,
    nodes: spec.nodes,
    milli: milliGpusUsed(spec.gpu),
    ports,
    ...(wallTeam !== undefined ? { wall: hostNetWall(wallTeam, s.policy.hostNetworkSharing) } : {}),
    eligible,
    ...(noFit ? { noFit } : {}),
  };
  st.classes.set(key, cls);
  return cls;
}

/** Spot factors depend on remaining work and checkpointing; the work is bucketed (×2 steps, as log2) so classes stay few. */
export function workBucketOf(job: Job, policy: PlanningState['s']['policy']): number {
  return Math.ceil(Math.log2(Math.max(60, remainingWorkSec(job, policy))));
}

/** What a spot machine for the work must survive: its boot, then the work up to its first checkpoint. */
export function spotHorizonSec(s: PlanningState['s'], spec: Job['spec'], workSec: number): number {
  return s.policy.expectedBootSec + Math.min(workSec, spec.checkpoint?.intervalSec ?? Infinity);
}

/**
 * The constant rate of interruptions that gives a machine launched in the pool now the spot
 * model's chance of surviving `horizonSec`: −ln S(horizon) / horizon, per hour.
 */
export function riskOver(st: PlanningState, pool: string, horizonSec: number): number {
  const key = `${pool}|${Math.round(horizonSec)}`;
  let risk = st.survivalRisk.get(key);
  if (risk === undefined) {
    const model = st.s.spotModel;
    const alive = model ? survival(model, pool, st.s.nowMs, horizonSec).survival : 1;
    risk = -Math.log(Math.max(alive, 1e-12)) / (horizonSec / 3600);
    st.survivalRisk.set(key, risk);
  }
  return risk;
}

/**
 * Whether some spot pool the class may use has free capacity now or could launch a machine.
 * True when the class has no spot pool at all (there is nothing to wait for).
 */
export function spotObtainable(st: PlanningState, cls: JobClass): boolean {
  let ok = st.obtainableCache.get(cls);
  if (ok === undefined) {
    ok = true;
    let sawSpot = false;
    for (const key of cls.eligible.keys()) {
      const info = st.offerings.get(key);
      if (!info || info.offering.capacityType !== 'spot') continue;
      if (!sawSpot) {
        sawSpot = true;
        ok = false;
      }
      if (info.groups.some((g) => g.room > 0) && !unavailable(st.s, info.offering.id)) {
        ok = true;
        break;
      }
      if (st.ready.pool(key)?.hasFree() || st.booting.pool(key)?.hasFree()) {
        ok = true;
        break;
      }
    }
    st.obtainableCache.set(cls, ok);
  }
  return ok;
}
