/**
 * What a simulated service's users got, tick by tick: the replicas its load needed (the load ÷
 * the requests per second one replica is scaled to hold, within its min and max), the replicas
 * ready (running past their readiness delay, on a machine still up, and with a load balancer a
 * healthy target of it), and on which capacity. A
 * tick is available when ready ≥ needed. For a service with a latency objective, each tick's
 * requests (its load × the tick) are also counted, and of them those the queueing model of the
 * tick's ready replicas serves within the objective (core/serving/latency.ts). Measures only; the
 * decisions are reconcile's.
 */
import { requeueCounts, usageSoFar, type Job } from '../../core/job.ts';
import { agentFoundAnswering, replicaReady, serviceId, SERVICE_LABEL } from '../../core/serving/service.ts';
import { checkJobSpec, type JobSpec } from '../../core/job-spec.ts';
import type { MicroUsd } from '../../core/money.ts';
import { shareWithinObjective, type ServiceObjective } from '../../core/serving/latency.ts';
import type { ServiceDemand, SimService } from './service-demand.ts';

export interface ServiceSample {
  readonly needed: number;
  readonly ready: number;
  readonly spot: number;
  readonly onDemand: number;
  /** With an objective: the share of this tick's requests served within it. */
  readonly withinObjective?: number;
}

export interface ServiceSummary {
  readonly id: string;
  readonly demand: string;
  /** Ticks with ready ≥ needed, over the ticks after the first replica could have been ready. */
  readonly availabilityPct: number;
  /**
   * With a latency objective: the share of the requests after the same start served within it, by
   * the queueing model of each tick's ready replicas (rounded down to 0.01%).
   */
  readonly requestsWithinObjectivePct?: number;
  /** The objective, in words ("wait ≤ 2 s"). */
  readonly objective?: string;
  /**
   * With an objective: the requests served outside it, by what their tick had ready: none at all
   * (`noneReady`, with the ticks `noneReadyTicks`), fewer than the load needed (`short`), or enough
   * replicas that still queued past the objective (`enough`). Rounded to whole requests.
   */
  readonly missedRequests?: {
    readonly noneReady: number;
    readonly noneReadyTicks: number;
    readonly short: number;
    readonly enough: number;
  };
  readonly shortReplicaMinutes: number;
  readonly peakNeeded: number;
  readonly peakReplicas: number;
  /** Replica-hours held (placement to end), and of them on spot. */
  readonly replicaHours: number;
  readonly spotReplicaHours: number;
  /** Needed replica-hours: what the load asked for. */
  readonly neededReplicaHours: number;
  readonly costMicroUsd: MicroUsd;
  /** The same replica holdings at on-demand prices. */
  readonly onDemandMicroUsd: MicroUsd;
  readonly replicasStarted: number;
  /** Of them, those that pulled their image (the others found it on their machine); with a startup model only. */
  readonly imagePulls?: number;
  /** Of them, those whose image their machine had pulled ahead (its record listed it), finished or under way. */
  readonly imagesPulledAhead?: number;
  /** Replicas whose machine was taken (requeued, then replaced). */
  readonly replicasLost: number;
}

interface Tracked {
  readonly id: string;
  readonly spec: JobSpec;
  readonly demand: ServiceDemand;
  readonly perReplicaRps: number | undefined;
  readonly objective: ServiceObjective | undefined;
  readonly startup: boolean;
  ticks: number;
  requests: number;
  withinObjective: number;
  missed: { noneReady: number; noneReadyTicks: number; short: number; enough: number };
  met: number;
  shortTicks: number;
  peakNeeded: number;
  peakReplicas: number;
  neededMs: number;
}

export class ServiceMeter {
  private readonly tracked: Tracked[];

  constructor(
    services: readonly SimService[],
    private readonly startMs: number,
    /** Seconds before which no replica could be ready (first boot plus readiness delay): not scored. */
    private readonly graceSec: number,
  ) {
    this.tracked = services.flatMap((s) => {
      const check = checkJobSpec(s.spec);
      if (!check.ok || !check.spec.service) return [];
      const rps = check.spec.service.targets.find((t) => t.metric === 'requests-per-second')?.perReplica;
      return [
        {
          id: serviceId(s.team, check.spec.name ?? ''),
          spec: check.spec,
          demand: s.demand,
          perReplicaRps: rps,
          objective: check.spec.service.objective,
          startup: s.startup !== undefined,
          ticks: 0,
          requests: 0,
          withinObjective: 0,
          missed: { noneReady: 0, noneReadyTicks: 0, short: 0, enough: 0 },
          met: 0,
          shortTicks: 0,
          peakNeeded: 0,
          peakReplicas: 0,
          neededMs: 0,
        },
      ];
    });
  }

  /** Replicas needed at a moment: the load over what one replica is scaled to hold, within min and max. */
  needed(t: Tracked, sec: number): number {
    const svc = t.spec.service!;
    const raw = t.perReplicaRps ? Math.ceil(t.demand.rpsAt(sec) / t.perReplicaRps - 1e-9) : svc.replicas.min;
    return Math.min(svc.replicas.max, Math.max(svc.replicas.min, raw));
  }

  /**
   * One tick: `running` are the jobs running now; `liveMachines` the ids of machines still up; with a front door,
   * `taking(serviceId, job)` says whether the load balancer sends the replica traffic (a healthy target).
   */
  note(
    nowMs: number,
    tickMs: number,
    running: readonly Job[],
    liveMachines: ReadonlySet<string>,
    taking?: (serviceId: string, job: Job) => boolean,
  ): Record<string, ServiceSample> {
    const sec = (nowMs - this.startMs) / 1000;
    const out: Record<string, ServiceSample> = {};
    for (const t of this.tracked) {
      const replicas = running.filter((j) => j.spec.labels?.[SERVICE_LABEL] === t.id);
      const up = replicas.filter(
        (j) =>
          j.placement?.nodes.every((n) => liveMachines.has(n.nodeId)) && replicaReady(j, taking ? taking(t.id, j) : agentFoundAnswering(j)),
      );
      const spot = up.filter((j) => j.placement?.capacityType === 'spot').length;
      const needed = this.needed(t, sec);
      t.peakNeeded = Math.max(t.peakNeeded, needed);
      t.peakReplicas = Math.max(t.peakReplicas, replicas.length);
      t.neededMs += needed * tickMs;
      const rps = t.demand.rpsAt(sec);
      const within = t.objective ? shareWithinObjective(up.length, rps, t.objective) : undefined;
      if (sec >= this.graceSec) {
        t.ticks++;
        if (up.length >= needed) t.met++;
        t.shortTicks += Math.max(0, needed - up.length);
        if (within !== undefined) {
          const requests = (rps * tickMs) / 1000;
          t.requests += requests;
          t.withinObjective += requests * within;
          const missed = requests * (1 - within);
          if (up.length === 0) {
            t.missed.noneReady += missed;
            t.missed.noneReadyTicks++;
          } else if (up.length < needed) t.missed.short += missed;
          else t.missed.enough += missed;
        }
      }
      out[t.id] = {
        needed,
        ready: up.length,
        spot,
        onDemand: up.length - spot,
        ...(within !== undefined ? { withinObjective: within } : {}),
      };
    }
    return out;
  }

  summary(
    jobs: readonly Job[],
    endMs: number,
    tickMs: number,
    imagePullsOf?: ReadonlyMap<string, number>,
    pulledAheadOf?: ReadonlyMap<string, number>,
  ): ServiceSummary[] {
    return this.tracked.map((t) => {
      const replicas = jobs.filter((j) => j.spec?.labels?.[SERVICE_LABEL] === t.id);
      let heldSec = 0;
      let spotSec = 0;
      let cost = 0;
      let od = 0;
      for (const j of replicas) {
        const u = usageSoFar(j, endMs);
        if (!u) continue;
        heldSec += u.heldSec;
        spotSec += u.spotSec;
        cost += u.costMicroUsd;
        od += u.onDemandMicroUsd;
      }
      return {
        id: t.id,
        demand: t.demand.source,
        availabilityPct: t.ticks > 0 ? Math.round((10_000 * t.met) / t.ticks) / 100 : 0,
        ...(t.objective
          ? {
              requestsWithinObjectivePct: t.requests > 0 ? Math.floor((10_000 * t.withinObjective) / t.requests) / 100 : 100,
              objective: `wait ≤ ${t.objective.waitSec} s`,
              missedRequests: {
                noneReady: Math.round(t.missed.noneReady),
                noneReadyTicks: t.missed.noneReadyTicks,
                short: Math.round(t.missed.short),
                enough: Math.round(t.missed.enough),
              },
            }
          : {}),
        shortReplicaMinutes: Math.round((t.shortTicks * tickMs) / 60_000),
        peakNeeded: t.peakNeeded,
        peakReplicas: t.peakReplicas,
        replicaHours: Math.round((100 * heldSec) / 3600) / 100,
        spotReplicaHours: Math.round((100 * spotSec) / 3600) / 100,
        neededReplicaHours: Math.round((100 * t.neededMs) / 3_600_000) / 100,
        costMicroUsd: Math.round(cost),
        onDemandMicroUsd: Math.round(od),
        replicasStarted: replicas.length,
        ...(t.startup ? { imagePulls: imagePullsOf?.get(t.id) ?? 0, imagesPulledAhead: pulledAheadOf?.get(t.id) ?? 0 } : {}),
        // Every time a replica's machine was lost under it (a replica lost twice counts twice), as `report` counts them.
        replicasLost: replicas.reduce((n, j) => n + requeueCounts(j).requeues, 0),
      };
    });
  }
}
