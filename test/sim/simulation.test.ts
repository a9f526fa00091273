import { describe, expect, it } from 'vitest';
import { BUILT_IN_SPOT, BUILT_IN_TRACE, DEFAULT_SIM_GROUPS, defaultTeamTags } from '../../cloud/sim/defaults.ts';
import { DEFAULT_SIM_START_MS, runSimulation, SIM_POLICIES, type SimPolicyName, type SpotSetup } from '../../cloud/sim/simulation.ts';
import { loadWorkload, parseWorkload } from '../../cloud/sim/workload.ts';
import { reworkGpuHours } from '../../core/job.ts';

describe('workload from a trace', () => {
  it('reads the built-in sample: 2,181 Philly jobs, rebased, with teams, checkpoints and some deadlines', () => {
    const w = loadWorkload(BUILT_IN_TRACE);
    expect(w.jobs).toHaveLength(2181);
    expect(w.teams).toEqual(['nlp', 'recsys', 'speech', 'vision']);
    expect(w.jobs[0]).toMatchObject({ id: '6214e9-1412', submitSec: 0, workSec: 893, team: 'recsys' });
    expect(w.jobs.every((j) => j.spec.gpu?.kind === 'whole')).toBe(true);
    expect(w.jobs.find((j) => j.workSec >= 1200)!.spec.checkpoint).toEqual({ intervalSec: 600 });
    const withDeadline = w.jobs.filter((j) => j.deadlineSec !== undefined);
    expect(withDeadline).toHaveLength(40);
    for (const j of withDeadline) expect(j.deadlineSec!).toBeGreaterThan(j.submitSec + j.workSec);
  });

  it('fills empty columns deterministically, makes gangs and fractions, and says what it skipped', () => {
    const csv = [
      'job_id,submit_s,duration_s,gpus,gpu_type,team,status',
      'a,100,60,16,,,',
      'b,150,,1,,,Pending',
      'c,200,30,0.25,T4,Team X,Failed',
      'd,120,10,0,,,',
    ].join('\n');
    const w = parseWorkload('t', csv);
    expect(w.jobs.map((j) => [j.id, j.submitSec])).toEqual([
      ['a', 0],
      ['c', 100],
    ]);
    expect(w.jobs[0]!.spec).toMatchObject({ nodes: 2, gpu: { kind: 'whole', count: 8, models: ['V100'] } });
    expect(w.jobs[1]).toMatchObject({
      team: 'team-x',
      exitCode: 1,
      spec: { gpu: { kind: 'fraction', milliGpu: 250, memoryMiB: 4096, models: ['T4'] } },
    });
    expect(w.skipped).toEqual([
      { row: 3, why: 'no duration (never ran)' },
      { row: 5, why: 'no GPUs' },
    ]);
    expect(parseWorkload('t', csv)).toEqual(w);
    expect(() => parseWorkload('t', 'id,when\n1,2')).toThrow(/missing column "job_id"/);
  });
});

describe('simulation', () => {
  const workload = loadWorkload(BUILT_IN_TRACE, { hours: 6, maxJobs: 150 });
  const run = (seed: number, policy: SimPolicyName = 'gpu-fleet', spot: SpotSetup = BUILT_IN_SPOT) =>
    runSimulation({ workload, groups: DEFAULT_SIM_GROUPS, teamTags: defaultTeamTags(workload.teams), policy, seed, hours: 8, spot });

  it('runs every job through intake, reconcile, interruptions and the agents, and loses none', async () => {
    const { summary, jobs } = await run(1);
    expect(summary.accepted).toBe(workload.jobs.length);
    expect(summary.lost).toBe(0);
    expect(summary.completed + summary.runningAtEnd + summary.pendingAtEnd + summary.failed).toBe(workload.jobs.length);
    expect(summary.completed).toBeGreaterThan(120);
    expect(summary.gpuHoursPaid).toBeGreaterThanOrEqual(summary.gpuHoursUsed);
    expect(summary.costMicroUsd).toBeLessThan(summary.sameMachinesOnDemandMicroUsd);
    // The yardsticks: spot floor ≤ lower bound (spot only while it could be had) ≤ what the run paid.
    expect(summary.spotFloorCostMicroUsd).toBeGreaterThan(0);
    expect(summary.spotFloorCostMicroUsd).toBeLessThanOrEqual(summary.lowerBoundCostMicroUsd);
    expect(summary.lowerBoundCostMicroUsd).toBeLessThanOrEqual(summary.costMicroUsd);
    for (const j of jobs) if (j.firstStartedAtMs !== undefined) expect(j.firstStartedAtMs).toBeGreaterThanOrEqual(j.submittedAtMs);
    const firstStart = Math.min(...jobs.flatMap((j) => (j.firstStartedAtMs === undefined ? [] : [j.firstStartedAtMs])));
    expect(firstStart - DEFAULT_SIM_START_MS).toBeGreaterThanOrEqual(144_000); // nothing before the first machine booted
    const teams = Object.values(summary.costByTeamMicroUsd).reduce((a, b) => a + b, 0);
    expect(Math.abs(teams - summary.costMicroUsd) / summary.costMicroUsd).toBeLessThan(0.05);
    // Up to where the ledger counted, it matches the machines' exact cost, team by team.
    expect(Math.abs(summary.spendErrorPct)).toBeLessThanOrEqual(0.1);
    expect(summary.teamSpendErrorPct).toBeLessThanOrEqual(0.1);
  });

  it('checkpoints and requeues work through real interruption events, finishing it all the same', async () => {
    const heavy: SpotSetup = { kind: 'rates', ratePerHour: () => 1.5 };
    const { summary, jobs } = await run(3, 'gpu-fleet', heavy);
    expect(summary.interruptions).toBeGreaterThan(5);
    expect(summary.requeues).toBeGreaterThan(0);
    expect(summary.lost).toBe(0);
    const resumed = jobs.filter((j) => j.interruptions > 0 && j.state === 'succeeded' && j.checkpoint !== undefined);
    expect(resumed.length).toBeGreaterThan(0);
    // Work lost per interruption is bounded by the checkpoint interval plus the restore, not the whole run.
    expect(summary.reworkGpuHours).toBeLessThan(summary.gpuHoursUsed * 0.25);
    // Rework is one figure: each job's work lost since its newest checkpoint, summed (what report shows per job).
    // Restoring and writing checkpoints are counted apart.
    expect(summary.reworkGpuHours).toBeGreaterThan(0);
    expect(summary.reworkGpuHours).toBeCloseTo(
      jobs.reduce((sum, j) => sum + reworkGpuHours(j), 0),
      2,
    );
    expect(summary.overheadGpuHours).toBeGreaterThan(0);
  });

  it('loses no job under any policy', async () => {
    for (const policy of SIM_POLICIES) {
      const { summary } = await run(2, policy);
      expect(summary.lost, policy).toBe(0);
      expect(summary.accepted, policy).toBe(workload.jobs.length);
    }
  });

  it('is deterministic for a seed, spot market included', async () => {
    const a = await run(7);
    const b = await run(7);
    const strip = (s: typeof a.summary) => ({ ...s, wallMs: 0 });
    expect(strip(a.summary)).toEqual(strip(b.summary));
    expect(a.timeline).toEqual(b.timeline);
  });
});
