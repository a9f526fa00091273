import { describe, expect, it } from 'vitest';
import { reconcileMetrics } from '../../core/services/metrics.ts';
import type { DecisionRecord } from '../../core/ports.ts';
import { aGroup, aJob, aNode, aReservation, aSnapshot, aTeam } from '../builders.ts';

/** A decision record that planned nothing, with what a test sets. */
function aDecision(over: Partial<DecisionRecord> = {}): DecisionRecord {
  return {
    id: 'd',
    atMs: 0,
    dryRun: false,
    inputs: { pendingJobs: 0, activeJobs: 0, nodes: 0, groups: [] },
    plan: { actions: [], waiting: [], addedCostMicroUsdPerHour: 0, addedExpectedCostMicroUsdPerHour: 0 },
    applied: 0,
    errors: [],
    planMs: 1,
    ...over,
  };
}

describe('reconcile metrics', () => {
  it('reports queue depth per team, spend against each team budget, and tag problems', () => {
    const snapshot = aSnapshot({
      teams: new Map([
        ['nlp', aTeam('nlp', { budget: { amountMicroUsd: 2_000_000_000, period: 'monthly', action: 'hold', alertAtPct: [80, 100] } })],
        ['vision', aTeam('vision', { budget: undefined, tagProblems: ['gpu-fleet:budget-usd="lots" is not allowed'] })],
      ]),
      spendMicroUsd: new Map([['nlp', 1_234_567_891]]),
    });
    const decision = aDecision({ errors: [{ index: 0, kind: 'scale-up', resource: 'g', code: 'throttled', message: 'x' }], planMs: 12 });
    const points = reconcileMetrics(snapshot, decision, new Map([['nlp', { visible: 3, inFlight: 1, delayed: 2 }]]));
    const find = (name: string, team?: string) =>
      points.find((p) => p.name === name && (team === undefined || p.dimensions?.Team === team));
    expect(find('QueueDepth', 'nlp')).toEqual({ name: 'QueueDepth', unit: 'Count', value: 5, dimensions: { Team: 'nlp' } });
    expect(find('TeamBudgetUsedPct', 'nlp')!.value).toBe(61.73);
    expect(find('TeamSpendMicroUsd', 'nlp')!.value).toBe(1_234_567_891);
    expect(find('TeamBudgetUsedPct', 'vision')).toBeUndefined(); // no valid budget: no percentage to show
    expect(find('BudgetTagProblems', 'vision')!.value).toBe(1);
    expect(find('ReconcileErrors')!.value).toBe(1);
    expect(find('PlanTime')!.value).toBe(12);
    expect(find('DegradedProviders')!.value).toBe(0);
  });

  it('says how many providers are left out and, for each, which and for how long', () => {
    const decision = aDecision({
      atMs: 600_000,
      degraded: [
        { cloud: 'gcp', scope: 'project ml-1', sinceMs: 0, error: '503', code: 'unavailable' },
        { cloud: 'aws', sinceMs: 540_000, error: 'Rate exceeded', code: 'throttled' },
      ],
    });
    const points = reconcileMetrics(aSnapshot(), decision, new Map());
    expect(points.find((p) => p.name === 'DegradedProviders')!.value).toBe(2);
    expect(points.filter((p) => p.name === 'ProviderDegradedSeconds')).toEqual([
      { name: 'ProviderDegradedSeconds', unit: 'None', value: 600, dimensions: { Cloud: 'gcp', Scope: 'project ml-1' } },
      { name: 'ProviderDegradedSeconds', unit: 'None', value: 60, dimensions: { Cloud: 'aws', Scope: 'aws' } },
    ]);
  });

  it('reports each service’s replicas wanted and ready, whether it is available, and what its replicas cost per hour', () => {
    const decision = aDecision({
      atMs: 600_000,
      services: [
        { service: 'nlp.chat', target: 4, ready: 3, reason: '3 → 4: …', objectiveNow: { requestsPerSec: 8, withinPct: 75 } },
        { service: 'cv.detect', target: 1, ready: 1, reason: '1 → 1: …' },
      ],
    });
    // Two chat replicas share a 4-GPU spot machine (a quarter of its price each), one fills a 1-GPU on-demand machine;
    // a batch job on the shared machine is no service's cost.
    const big = aGroup({ instanceType: 'g5.12xlarge', capacityType: 'spot' });
    const small = aGroup({ instanceType: 'g5.xlarge' });
    const replica = (id: string, nodeId: string, gpu: number, service = 'nlp.chat') =>
      aJob({
        id,
        state: 'running',
        spec: { labels: { 'gpu-fleet/service': service } },
        placement: { nodes: [{ nodeId, gpuIndices: [gpu] }], capacityType: nodeId === 'i-big' ? 'spot' : 'on-demand' },
      });
    const snapshot = aSnapshot({
      groups: [big, small],
      nodes: [aNode('i-big', { group: big }), aNode('i-small', { group: small })],
      activeJobs: [
        replica('r1', 'i-big', 0),
        replica('r2', 'i-big', 1),
        replica('r3', 'i-small', 0),
        aJob({ id: 'batch', state: 'running', placement: { nodes: [{ nodeId: 'i-big', gpuIndices: [2, 3] }], capacityType: 'spot' } }),
      ],
    });
    const points = reconcileMetrics(snapshot, decision, new Map()).filter((p) => p.name.startsWith('Service'));
    const chat = { Service: 'nlp.chat' };
    expect(points.filter((p) => p.dimensions?.Service === 'nlp.chat')).toEqual([
      { name: 'ServiceReplicasWanted', unit: 'Count', value: 4, dimensions: chat },
      { name: 'ServiceReplicasReady', unit: 'Count', value: 3, dimensions: chat },
      { name: 'ServiceAvailable', unit: 'None', value: 0, dimensions: chat },
      { name: 'ServiceCostMicroUsdPerHour', unit: 'None', value: 2_100_000 / 2 + 1_006_000, dimensions: chat },
      // With an objective: the request rate and the rate served within it (a period's share is the ratio of their sums).
      { name: 'ServiceRequestsPerSecond', unit: 'None', value: 8, dimensions: chat },
      { name: 'ServiceRequestsWithinObjectivePerSecond', unit: 'None', value: 6, dimensions: chat },
    ]);
    // Available with its one replica ready; no replica running here, so no cost.
    expect(points.filter((p) => p.dimensions?.Service === 'cv.detect').map((p) => [p.name, p.value])).toEqual([
      ['ServiceReplicasWanted', 1],
      ['ServiceReplicasReady', 1],
      ['ServiceAvailable', 1],
      ['ServiceCostMicroUsdPerHour', 0],
    ]);
  });

  it('reports each warm pool apart from its group’s size: machines prepared and being prepared', () => {
    const warm = aGroup({ id: 'a10g-serve-od', instanceType: 'g5.12xlarge', warm: { state: 'Stopped', ready: 2, preparing: 1 } });
    const points = reconcileMetrics(aSnapshot({ groups: [aGroup(), warm] }), aDecision(), new Map()).filter((p) =>
      p.name.startsWith('WarmPool'),
    );
    expect(points).toEqual([
      { name: 'WarmPoolReady', unit: 'Count', value: 2, dimensions: { NodeGroup: 'a10g-serve-od' } },
      { name: 'WarmPoolPreparing', unit: 'Count', value: 1, dimensions: { NodeGroup: 'a10g-serve-od' } },
    ]);
  });

  it('reports each active reservation’s size and the machines running in it', () => {
    const r = aReservation({ availableCount: 3 });
    const n = aNode('i-r');
    const decision = aDecision();
    const points = reconcileMetrics(
      aSnapshot({
        nodes: [{ ...n, instance: { ...n.instance, capacityType: 'reserved', reservationId: r.id } }],
        reservations: new Map([
          [r.id, r],
          ['cr-0b10c0000000b0001', { ...r, id: 'cr-0b10c0000000b0001', state: 'scheduled' }],
        ]),
      }),
      decision,
      new Map(),
    ).filter((p) => p.name.startsWith('Reservation'));
    expect(points).toEqual([
      { name: 'ReservationInstances', unit: 'Count', value: 4, dimensions: { Reservation: r.id } },
      { name: 'ReservationInstancesUsed', unit: 'Count', value: 1, dimensions: { Reservation: r.id } },
    ]);
  });
});
