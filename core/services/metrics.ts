import type { Snapshot } from '../snapshot.ts';
import type { DecisionRecord, QueueDepth } from '../ports.ts';
import { milliGpusUsed } from '../gpu.ts';
import { inService } from '../fleet.ts';
import { billedPrice, offeringId } from '../catalog.ts';
import { assignmentMilliGpu } from '../job.ts';
import { SERVICE_LABEL } from '../serving/service.ts';

/** One metric data point, for whatever publishes them (EMF in Lambda, the simulator's report). */
export interface MetricPoint {
  readonly name: string;
  readonly unit: 'Count' | 'Milliseconds' | 'None';
  readonly value: number;
  readonly dimensions?: Readonly<Record<string, string>>;
}

/**
 * What a reconcile run reports: queue depth per team, jobs and GPUs waiting, fleet size by
 * group and capacity type, plan time, errors, the spend rate of the fleet (µUSD per hour), and
 * the providers left out because their calls fail (how many, and how long each has been out),
 * and per service the replicas wanted and ready.
 */
export function reconcileMetrics(snapshot: Snapshot, decision: DecisionRecord, depths: ReadonlyMap<string, QueueDepth>): MetricPoint[] {
  const out: MetricPoint[] = [];
  for (const [team, d] of [...depths.entries()].sort(([a], [b]) => a.localeCompare(b))) {
    out.push({ name: 'QueueDepth', unit: 'Count', value: d.visible + d.delayed, dimensions: { Team: team } });
  }
  out.push({ name: 'PendingJobs', unit: 'Count', value: snapshot.pendingJobs.length });
  out.push({
    name: 'PendingGpus',
    unit: 'Count',
    value: snapshot.pendingJobs.reduce((s, j) => s + (milliGpusUsed(j.spec.gpu) * j.spec.nodes) / 1000, 0),
  });
  out.push({ name: 'RunningJobs', unit: 'Count', value: snapshot.activeJobs.length });
  // Machines the plan left out because their GPU report cannot be read: an alarm's input.
  out.push({ name: 'UnreadableNodeRecords', unit: 'Count', value: decision.plan.unreadableNodes?.length ?? 0 });
  const fleet = new Map<string, number>();
  let spendRate = 0;
  for (const n of snapshot.nodes) {
    const i = n.instance;
    if (!inService(i.state) && i.state !== 'terminating-wait') continue; // billed until it is gone
    const key = `${i.groupId}\u0000${i.capacityType}`;
    fleet.set(key, (fleet.get(key) ?? 0) + 1);
    const quote = snapshot.prices.get(offeringId(i));
    spendRate += quote ? billedPrice(quote) : 0;
  }
  for (const [key, count] of [...fleet.entries()].sort(([a], [b]) => a.localeCompare(b))) {
    const [group, capacityType] = key.split('\u0000') as [string, string];
    out.push({ name: 'FleetSize', unit: 'Count', value: count, dimensions: { NodeGroup: group, CapacityType: capacityType } });
  }
  // Each group's warm pool, apart from its capacity: machines prepared and still being prepared.
  for (const g of [...snapshot.groups].sort((a, b) => (a.id < b.id ? -1 : 1))) {
    if (!g.warm) continue;
    out.push({ name: 'WarmPoolReady', unit: 'Count', value: g.warm.ready, dimensions: { NodeGroup: g.id } });
    out.push({ name: 'WarmPoolPreparing', unit: 'Count', value: g.warm.preparing, dimensions: { NodeGroup: g.id } });
  }
  out.push({ name: 'SpendRateMicroUsdPerHour', unit: 'None', value: spendRate });
  // Spend against budget per team, for the dashboard and the budget alarms.
  for (const team of [...snapshot.teams.values()].sort((a, b) => a.id.localeCompare(b.id))) {
    const spent = snapshot.spendMicroUsd.get(team.id) ?? 0;
    out.push({ name: 'TeamSpendMicroUsd', unit: 'None', value: spent, dimensions: { Team: team.id } });
    if (team.budget && team.budget.amountMicroUsd > 0) {
      out.push({
        name: 'TeamBudgetUsedPct',
        unit: 'None',
        value: Math.round((spent * 10_000) / team.budget.amountMicroUsd) / 100,
        dimensions: { Team: team.id },
      });
    }
    if (team.tagProblems.length > 0)
      out.push({ name: 'BudgetTagProblems', unit: 'Count', value: team.tagProblems.length, dimensions: { Team: team.id } });
  }
  // Each service: the replicas it wants and the ready ones (the dashboard's service panel; the alarm on ready < wanted),
  // whether it was available at this look (its average over a period is the availability), and what its replicas cost per hour.
  const services = decision.services ?? [];
  const serviceCost = services.length > 0 ? serviceCostRates(snapshot) : new Map<string, number>();
  for (const svc of services) {
    const dims = { Service: svc.service };
    out.push({ name: 'ServiceReplicasWanted', unit: 'Count', value: svc.target, dimensions: dims });
    out.push({ name: 'ServiceReplicasReady', unit: 'Count', value: svc.ready, dimensions: dims });
    out.push({ name: 'ServiceAvailable', unit: 'None', value: svc.ready >= svc.target ? 1 : 0, dimensions: dims });
    out.push({ name: 'ServiceCostMicroUsdPerHour', unit: 'None', value: serviceCost.get(svc.service) ?? 0, dimensions: dims });
    // With an objective: the requests per second and those served within it, so that a period's share is the ratio of their sums.
    if (svc.objectiveNow) {
      const { requestsPerSec, withinPct } = svc.objectiveNow;
      out.push({ name: 'ServiceRequestsPerSecond', unit: 'None', value: requestsPerSec, dimensions: dims });
      out.push({
        name: 'ServiceRequestsWithinObjectivePerSecond',
        unit: 'None',
        value: (requestsPerSec * withinPct) / 100,
        dimensions: dims,
      });
    }
  }
  // Each active reservation: its machines and those running in it (the dashboard's reservation utilisation).
  if (snapshot.reservations && snapshot.reservations.size > 0) {
    const used = new Map<string, number>();
    for (const n of snapshot.nodes)
      if (n.instance.reservationId !== undefined && (inService(n.instance.state) || n.instance.state === 'terminating-wait'))
        used.set(n.instance.reservationId, (used.get(n.instance.reservationId) ?? 0) + 1);
    for (const r of [...snapshot.reservations.values()].sort((a, b) => (a.id < b.id ? -1 : 1))) {
      if (r.state !== 'active') continue;
      const dims = { Reservation: r.id };
      out.push({ name: 'ReservationInstances', unit: 'Count', value: r.totalCount, dimensions: dims });
      out.push({ name: 'ReservationInstancesUsed', unit: 'Count', value: Math.min(r.totalCount, used.get(r.id) ?? 0), dimensions: dims });
    }
  }
  out.push({ name: 'PlanTime', unit: 'Milliseconds', value: decision.planMs });
  out.push({ name: 'ActionsApplied', unit: 'Count', value: decision.applied });
  out.push({ name: 'ReconcileErrors', unit: 'Count', value: decision.errors.length });
  // Providers (or groups) left out because their calls fail: the count always (0 when all answer, for the alarm), and each one named.
  const degraded = decision.degraded ?? [];
  out.push({ name: 'DegradedProviders', unit: 'Count', value: degraded.length });
  // Machines silent together with most of their zone (a control-plane fault): always, 0 when none, for the alarm.
  out.push({
    name: 'SilentTogetherMachines',
    unit: 'Count',
    value: (decision.controlPlaneSilence ?? []).reduce((n, z) => n + z.silent, 0),
  });
  for (const d of degraded)
    out.push({
      name: 'ProviderDegradedSeconds',
      unit: 'None',
      value: Math.max(0, Math.round((decision.atMs - d.sinceMs) / 1000)),
      dimensions: { Cloud: d.cloud, Scope: d.scope ?? d.cloud },
    });
  return out;
}

/**
 * What each service's replicas cost per hour now (µUSD): each replica's share of its machines' price, by the GPUs it holds
 * there (a replica that fills its machine pays all of it, as the planner places replicas on the smallest machine that holds them).
 */
function serviceCostRates(snapshot: Snapshot): Map<string, number> {
  const nodes = new Map(snapshot.nodes.map((n) => [n.instance.id, n.instance]));
  const out = new Map<string, number>();
  for (const job of snapshot.activeJobs) {
    const service = job.spec.labels?.[SERVICE_LABEL];
    if (service === undefined || job.placement === undefined) continue;
    let rate = 0;
    for (const a of job.placement.nodes) {
      const inst = nodes.get(a.nodeId);
      if (inst === undefined) continue;
      const quote = snapshot.prices.get(offeringId(inst));
      const price = quote ? billedPrice(quote) : 0;
      const gpus = snapshot.instanceTypes.get(inst.instanceType)?.gpuCount ?? 0;
      rate += gpus > 0 ? Math.round(price * Math.min(1, assignmentMilliGpu(a) / (gpus * 1000))) : price;
    }
    out.set(service, (out.get(service) ?? 0) + rate);
  }
  return out;
}
