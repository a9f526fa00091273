import { JOB_STATES, type Job } from '../core/job.ts';
import { agentFoundAnswering, replicaReady, SERVICE_LABEL, type ServiceRecord } from '../core/serving/service.ts';
import { UsageError } from '../core/errors.ts';
import type { Fleet } from './fleet.ts';

/** A service as `explain --service` shows it: its target, its replicas and where they are, and why. */
export async function serviceView(fleet: Fleet, id: string) {
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
export function summarizeService(record: ServiceRecord, jobs: readonly Job[]) {
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
export function onMachines(p: NonNullable<Job['placement']>, machines: string): string {
  return p.capacityType === 'reserved'
    ? `reservation ${p.reservationId ?? '(unknown)'} (prepaid): ${machines}`
    : `${machines} (${p.capacityType})`;
}
