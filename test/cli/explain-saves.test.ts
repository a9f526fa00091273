import { describe, expect, it } from 'vitest';
import { explainJob } from '../../cli/commands/explain.ts';
import { aJob, T0 } from '../builders.ts';

describe('explain: how often a running job is asked to save, and why', () => {
  const running = (saves: NonNullable<NonNullable<ReturnType<typeof aJob>['placement']>['saves']>) =>
    aJob({
      id: 'nlp.train',
      state: 'running',
      startedAtMs: T0,
      spec: { checkpoint: { signal: 'SIGUSR1', intervalSec: 1800, gracePeriodSec: 60 } },
      placement: { nodes: [{ nodeId: 'i-1', gpuIndices: [0] }], capacityType: 'spot', saves },
    });

  it('gives the take-back rate and the save price the planner weighed', () => {
    const why = explainJob(running({ everySec: 420, hazardPerHour: 2.5, savePriceMicroUsd: 15_432, by: 'price' }), [], T0);
    expect(why.details).toContain('asked to save every 7.0 min: 2.50 take-backs/h expected here, a save costs $0.015432 (stall and bytes)');
  });

  it('says when the spec’s own interval stands', () => {
    const why = explainJob(running({ everySec: 1800, hazardPerHour: 0, savePriceMicroUsd: 20_000, by: 'longest' }), [], T0);
    expect(why.details).toContain("asked to save every 30.0 min, the spec's interval (no take-backs expected; a save costs $0.02)");
  });
});
