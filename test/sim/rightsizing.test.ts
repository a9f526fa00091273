import { describe, expect, it } from 'vitest';
import { migProfile } from '../../core/mig.ts';
import { MEMORY_MARGIN_MIN_MIB, MEMORY_MARGIN_PCT } from '../../core/rightsizing.ts';
import { BUILT_IN_TRACE, defaultTeamTags, rightsizingScenario } from '../../cloud/sim/defaults.ts';
import { OUT_OF_MEMORY_EXIT_CODE } from '../../cloud/sim/sim-agent.ts';
import { runSimulation } from '../../cloud/sim/simulation.ts';
import { loadWorkload } from '../../cloud/sim/workload.ts';

// Right-sizing in the simulated fleet: the simulated processes use what their script says, their agents measure it
// with the same tally as the real agent, reconcile notes the runs, and intake sizes the next submissions.

describe('right-sizing in the simulated fleet (invariants checked every minute)', () => {
  const base = loadWorkload(BUILT_IN_TRACE, { hours: 8, maxJobs: 250 });
  const run = (mode: 'suggest' | 'auto') => {
    const { workload, groups } = rightsizingScenario(base, { oversizedShare: 0.5, mode });
    return runSimulation({ workload, groups, teamTags: defaultTeamTags(workload.teams, 1_000_000), seed: 1, hours: 8, invariants: 'stop' });
  };

  it('auto: once a family has run twice, its next jobs run in a MIG slice that holds what they used, and none fails', async () => {
    const { summary, jobs, env } = await run('auto');
    expect(summary).toMatchObject({ lost: 0, duplicated: 0, violations: 0, failed: 0 });
    const sized = jobs.filter((j) => j.rightsize?.applied);
    expect(sized.length).toBeGreaterThan(20);
    // The reconcile that placed each of them says so in its decision record, with what it asked for and why.
    const noted = new Map(env.decisions.dump().flatMap((d) => (d.rightsized ?? []).map((r) => [r.jobId, r] as const)));
    for (const j of sized.filter((x) => x.firstStartedAtMs !== undefined))
      expect(noted.get(j.id)).toEqual({ jobId: j.id, from: j.rightsize!.from, to: j.spec.gpu, why: j.rightsize!.why });
    const { workload: scripted } = rightsizingScenario(base, { oversizedShare: 0.5, mode: 'auto' });
    const truth = new Map(scripted.jobs.map((w) => [`${w.team}.${w.id}`, w.gpuUse!]));
    for (const j of sized) {
      expect(j.spec.gpu.kind).toBe('mig');
      const profile = j.spec.gpu.kind === 'mig' ? migProfile('A100-40GB', j.spec.gpu.profile)! : undefined;
      // Never below the measured peak plus the margin; and so never below what the process really uses.
      const peak = truth.get(j.id)!.peakMemoryMiB;
      expect(profile!.memoryMiB).toBeGreaterThanOrEqual(Math.min(peak * (1 + MEMORY_MARGIN_PCT / 100), peak + MEMORY_MARGIN_MIN_MIB));
      expect(j.rightsize!.why).toMatch(/^ran in MIG \dg\.\d+gb \(A100-40GB\) instead of 1 × A100-40GB/);
      expect(j.state === 'failed').toBe(false);
    }
    // The measured runs it was sized from are the family's, measured on whole GPUs by the agents' tally.
    const finished = jobs.filter((j) => j.state === 'succeeded' && !j.rightsize?.applied && j.usage?.gpuUse);
    expect(finished.length).toBeGreaterThan(20);
    for (const j of finished.slice(0, 20)) {
      const use = j.usage!.gpuUse!.at(-1)!;
      expect(use).toMatchObject({ model: 'A100-40GB', deviceMemoryMiB: 40_960, busyDevices: use.devices });
      expect(use.peakMemoryMiB).toBeLessThanOrEqual(truth.get(j.id)!.peakMemoryMiB);
    }
  }, 120_000);

  it('suggest: every shape is the one asked for, and each job says what it could have run in', async () => {
    const { summary, jobs } = await run('suggest');
    expect(summary).toMatchObject({ lost: 0, violations: 0, failed: 0 });
    expect(jobs.some((j) => j.rightsize?.applied)).toBe(false);
    const suggested = jobs.filter((j) => j.rightsize?.to);
    expect(suggested.length).toBeGreaterThan(20);
    expect(suggested.every((j) => j.spec.gpu.kind === 'whole' && j.rightsize!.why.startsWith('suggested '))).toBe(true);
  }, 120_000);

  it('a process given less GPU memory than it uses fails, out of memory (the world the auto rule keeps jobs out of)', async () => {
    const w = loadWorkload(BUILT_IN_TRACE, { hours: 2, maxJobs: 3 });
    const { workload, groups } = rightsizingScenario(w, { oversizedShare: 0, mode: 'suggest' });
    const tooSmall = {
      ...workload,
      jobs: workload.jobs.map((j) => ({
        ...j,
        spec: { ...j.spec, gpu: { kind: 'mig' as const, profile: '1g.5gb', models: ['A100-40GB'] } },
      })),
    };
    const { jobs } = await runSimulation({
      workload: tooSmall,
      groups,
      teamTags: defaultTeamTags(workload.teams, 1_000_000),
      seed: 1,
      hours: 2,
      invariants: 'count',
    });
    expect(jobs.length).toBe(3);
    for (const j of jobs) expect(j).toMatchObject({ state: 'failed', exitCode: OUT_OF_MEMORY_EXIT_CODE });
    // Its agent measured the slice full.
    expect(jobs[0]!.usage!.gpuUse![0]!.peakMemoryMiB).toBe(5 * 1024);
  }, 60_000);
});
