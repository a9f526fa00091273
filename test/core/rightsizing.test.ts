import { describe, expect, it } from 'vitest';
import type { GpuModel, GpuRequest } from '../../core/gpu.ts';
import { addGpuLook, gpuUseProblem, jobGpuUse, newGpuUseTally, summarizeGpuUse, type AttemptGpuUse } from '../../core/gpu-use.ts';
import {
  mergeFamilyRuns,
  recommendShape,
  rightsizeAtIntake,
  rightsizeFamily,
  type GpuOffers,
  type RightsizeRun,
} from '../../core/rightsizing.ts';
import { checkJobSpec, type JobSpec } from '../../core/job-spec.ts';
import { aGpuUse, aRightsizeRun } from '../builders.ts';

// Per-GPU on-demand prices in the shape the catalogue gives them (µUSD per GPU-hour; p4de.24xlarge ÷ 8, g6.xlarge, g5.xlarge, …).
const OFFERS: GpuOffers = new Map<GpuModel, { memoryMiB: number; microUsdPerGpuHour: number }>([
  ['A100-80GB', { memoryMiB: 81_920, microUsdPerGpuHour: 5_120_000 }],
  ['H100', { memoryMiB: 81_920, microUsdPerGpuHour: 6_880_000 }],
  ['L40S', { memoryMiB: 46_068, microUsdPerGpuHour: 1_860_000 }],
  ['L4', { memoryMiB: 23_034, microUsdPerGpuHour: 805_000 }],
  ['A10G', { memoryMiB: 23_028, microUsdPerGpuHour: 1_006_000 }],
  ['T4', { memoryMiB: 15_360, microUsdPerGpuHour: 526_000 }],
]);

const WHOLE_A100: GpuRequest = { kind: 'whole', count: 1, models: ['A100-80GB'] };

const use = aGpuUse;
const run = (jobId: string, endedAtMs: number, over: Partial<RightsizeRun> = {}, u: Partial<AttemptGpuUse> = {}) =>
  aRightsizeRun(jobId, endedAtMs, { gpu: WHOLE_A100, ...over }, u);

describe('GPU use per attempt: the agent tallies its looks', () => {
  it('keeps the peak memory, the mean and the nearest-rank 95th percentile of utilisation, and which devices were used', () => {
    let t = newGpuUseTally();
    // 20 looks at two devices: the first busy at 10% (and 50% at every tenth look), the second idle throughout.
    for (let k = 0; k < 20; k++)
      t = addGpuLook(t, [
        { model: 'A100-80GB', memoryTotalMiB: 81_920, memoryUsedMiB: 8000 + k * 10, smPct: k % 10 === 9 ? 50 : 10 },
        { model: 'A100-80GB', memoryTotalMiB: 81_920, memoryUsedMiB: 3, smPct: 0 },
      ]);
    const u = summarizeGpuUse(t, 2, 0)!;
    expect(u).toMatchObject({ attempt: 2, rank: 0, looks: 20, devices: 2, busyDevices: 1, model: 'A100-80GB', peakMemoryMiB: 8190 });
    // The idle device's readings do not count: 20 readings, 18 at 10% and 2 at 50% → mean 14; the 19th of 20 sorted is 50%.
    expect(u.meanSmPct).toBe(14);
    expect(u.p95SmPct).toBe(50);
    expect(gpuUseProblem(u)).toBeUndefined();
  });

  it('a MIG slice reports memory and no utilisation; a look that read none of the devices changes nothing', () => {
    let t = addGpuLook(newGpuUseTally(), [{ model: 'H100', memoryTotalMiB: 9_984, memoryUsedMiB: 6_000 }]);
    t = addGpuLook(t, []);
    const u = summarizeGpuUse(t, 1, 0)!;
    expect(u).toEqual({
      attempt: 1,
      rank: 0,
      looks: 1,
      devices: 1,
      busyDevices: 1,
      model: 'H100',
      deviceMemoryMiB: 9_984,
      peakMemoryMiB: 6_000,
    });
    expect(summarizeGpuUse(newGpuUseTally(), 1, 0)).toBeUndefined();
  });

  it('refuses figures no agent measures', () => {
    expect(gpuUseProblem(use({ p95SmPct: 140 }))).toMatch(/p95SmPct must be a percentage from 0 to 100, got 140/);
    expect(gpuUseProblem(use({ busyDevices: 3 }))).toMatch(/busyDevices \(3\) exceeds devices \(1\)/);
    expect(gpuUseProblem(use({ looks: 0 }))).toMatch(/looks must be at least 1/);
    expect(gpuUseProblem(use({ model: 'Z9' as GpuModel }))).toMatch(/"Z9" is not a GPU model/);
  });

  it("a job's use over its attempts: the highest peak and p95, the mean weighted by looks", () => {
    const j = jobGpuUse([
      use({ attempt: 1, looks: 100, meanSmPct: 10, p95SmPct: 12, peakMemoryMiB: 5000 }),
      use({ attempt: 2, looks: 300, meanSmPct: 20, p95SmPct: 25, peakMemoryMiB: 4000 }),
    ]);
    expect(j).toMatchObject({ looks: 400, peakMemoryMiB: 5000, meanSmPct: 17.5, p95SmPct: 25 });
    expect(jobGpuUse([])).toBeUndefined();
  });
});

describe('right-sizing: the cheapest shape that holds what the runs used', () => {
  it('9 GiB of an 80 GiB A100 at 12% utilisation: a 2g.20gb slice, at 29% of the cost (1g.20gb has the memory, not the compute)', () => {
    const r = recommendShape('nlp/ranker/img', [run('a', 1), run('b', 2), run('c', 3)], OFFERS);
    expect(r.ok).toBe(true);
    if (!r.ok) return;
    const rec = r.recommendation;
    expect(rec.to).toMatchObject({ kind: 'mig', gpu: { kind: 'mig', profile: '2g.20gb', models: ['A100-80GB'] } });
    expect(rec.to.costRatio).toBeCloseTo(286 / 1000, 5);
    // Each run's cost less 28.6% of it: 71.4% saved.
    expect(rec.savingMicroUsd).toBe(3 * Math.round(5_120_000 * (1 - 0.286)));
    expect(rec.needMemoryMiB).toBe(Math.ceil(9 * 1024 * 1.2));
    expect(rec.memoryHeadroomPct).toBeCloseTo(55, 0);
    expect(rec.confidence).toBe('medium'); // 3 runs: not yet 5
    expect(rec.why).toMatch(/3 runs: peak 9\.0 GiB of 80 GiB, 12% utilisation at p95; MIG 2g.20gb \(A100-80GB\) keeps 20 GiB/);
    // A time-sliced share would be cheaper still, and comes last: it has no isolation.
    expect(rec.candidates.at(-1)).toMatchObject({ kind: 'fraction', gpu: { milliGpu: 150, memoryMiB: 11_264 } });
  });

  it('never gives less memory than the peak plus 20% (at least 1 GiB more): 17 GiB used needs 3g.40gb, not 2g.20gb', () => {
    const r = recommendShape('f', [run('a', 1, {}, { peakMemoryMiB: 17 * 1024 })], OFFERS);
    expect(r.ok && r.recommendation.to.gpu).toEqual({ kind: 'mig', profile: '3g.40gb', models: ['A100-80GB'] });
    const small = recommendShape('f', [run('a', 1, {}, { peakMemoryMiB: 300, p95SmPct: 1 })], OFFERS);
    // 300 MiB + 1 GiB: the smallest slice (1g.10gb) holds it.
    expect(small.ok && small.recommendation.needMemoryMiB).toBe(1324);
    expect(small.ok && small.recommendation.to.gpu).toMatchObject({ kind: 'mig', profile: '1g.10gb' });
  });

  it('five runs well inside the shape are high confidence; one run is low', () => {
    const five = recommendShape(
      'f',
      [1, 2, 3, 4, 5].map((i) => run(`j${i}`, i)),
      OFFERS,
    );
    expect(five.ok && five.recommendation.confidence).toBe('high');
    const one = recommendShape('f', [run('a', 1)], OFFERS);
    expect(one.ok && one.recommendation.confidence).toBe('low');
  });

  it('a busy job keeps its GPU; a gang and a time-sliced share get no recommendation, saying why', () => {
    const busy = recommendShape('f', [run('a', 1, {}, { peakMemoryMiB: 70_000, p95SmPct: 98 })], OFFERS);
    expect(busy).toEqual({ ok: false, family: 'f', why: 'no smaller shape holds it: peak 68 GiB of 80 GiB, 98% utilisation (p95)' });
    expect(recommendShape('f', [run('a', 1, { nodes: 4 })], OFFERS)).toMatchObject({ ok: false, why: /gang/ });
    const share: GpuRequest = { kind: 'fraction', milliGpu: 500, memoryMiB: 20_000 };
    expect(recommendShape('f', [run('a', 1, { gpu: share })], OFFERS)).toMatchObject({ ok: false, why: /time-sliced share/ });
    expect(recommendShape('f', [run('a', 1, { state: 'failed' })], OFFERS)).toMatchObject({
      ok: false,
      why: 'no finished run was measured',
    });
  });

  it('a GPU without MIG: a cheaper model that is as fast as the need on both throughput and bandwidth (L40S at 20% → L4)', () => {
    const ran: GpuRequest = { kind: 'whole', count: 1, models: ['L40S'] };
    const r = recommendShape(
      'f',
      [run('a', 1, { gpu: ran, costMicroUsd: 1_860_000 }, { model: 'L40S', deviceMemoryMiB: 46_068, peakMemoryMiB: 10_000, p95SmPct: 20 })],
      OFFERS,
    );
    expect(r.ok).toBe(true);
    if (!r.ok) return;
    expect(r.recommendation.to).toMatchObject({ kind: 'model', gpu: { kind: 'whole', count: 1, models: ['L4'] } });
    expect(r.recommendation.to.costRatio).toBeCloseTo(805_000 / 1_860_000, 5);
    // T4 is cheaper and has the memory, but not the throughput (65 TFLOPS < 20% × 1.2 × 362); A10G has less bandwidth need met but costs more.
    expect(r.recommendation.candidates.map((c) => c.gpu.models?.[0])).not.toContain('T4');
    // The same job at 40%: no model here is fast enough and cheaper, and a share of the L40S is all that is left.
    const hot = recommendShape(
      'f',
      [run('a', 1, { gpu: ran }, { model: 'L40S', deviceMemoryMiB: 46_068, peakMemoryMiB: 10_000, p95SmPct: 40 })],
      OFFERS,
    );
    expect(hot.ok && hot.recommendation.to.kind).toBe('fraction');
  });

  it('8 GPUs held and 2 used: fewer GPUs (only suggested: the count is the parallelism)', () => {
    const eight: GpuRequest = { kind: 'whole', count: 8, models: ['A100-80GB'] };
    const r = recommendShape(
      'f',
      [run('a', 1, { gpu: eight }, { devices: 8, busyDevices: 2, p95SmPct: 90, peakMemoryMiB: 60_000 })],
      OFFERS,
    );
    expect(r.ok && r.recommendation.to).toMatchObject({ kind: 'fewer-gpus', gpu: { kind: 'whole', count: 2 }, costRatio: 0.25 });
  });

  it("a MIG run's utilisation is not reported: the next shape keeps all the compute it had", () => {
    const slice: GpuRequest = { kind: 'mig', profile: '2g.20gb', models: ['A100-80GB'] };
    const r = recommendShape(
      'f',
      [run('a', 1, { gpu: slice }, { deviceMemoryMiB: 20_480, peakMemoryMiB: 4_000, meanSmPct: undefined, p95SmPct: undefined })],
      OFFERS,
      WHOLE_A100,
    );
    // From a whole GPU the family goes to 2g.20gb (memory would allow 1g.10gb; compute is not known to be less than 2 slices).
    expect(r.ok && r.recommendation.to.gpu).toMatchObject({ kind: 'mig', profile: '2g.20gb' });
    expect(r.ok && r.recommendation.why).toMatch(/utilisation not reported/);
  });
});

describe('right-sizing at intake: suggest, or auto for a recurring family', () => {
  const spec = (mode: 'suggest' | 'auto', gpu: Record<string, unknown> = { kind: 'whole', count: 1, models: ['A100-80GB'] }): JobSpec => {
    const c = checkJobSpec({
      image: 'ghcr.io/acme/ranker:3',
      command: ['python', 'train.py'],
      gpu: { ...gpu, rightsize: mode },
      labels: { project: 'ranker' },
    });
    if (!c.ok) throw new Error(c.errors.join('; '));
    return c.spec;
  };
  const all = () => true;

  it('the spec option is checked, with what is allowed', () => {
    const c = checkJobSpec({ image: 'x', command: ['x'], gpu: { kind: 'whole', count: 1, rightsize: 'always' } });
    expect(c.ok).toBe(false);
    expect(!c.ok && c.errors[0]).toMatch(/gpu.rightsize: must be "suggest" .* or "auto"/);
  });

  it('the family is the team, the project label and the image', () => {
    expect(rightsizeFamily('nlp', spec('auto'))).toBe('nlp/ranker/ghcr.io/acme/ranker:3');
  });

  it('auto with two measured runs: the next submission takes the recommended slice, and the decision says why', () => {
    const out = rightsizeAtIntake('nlp', spec('auto'), [run('a', 1), run('b', 2)], OFFERS, 10, all)!;
    expect(out.spec.gpu).toEqual({ kind: 'mig', profile: '2g.20gb', models: ['A100-80GB'], rightsize: 'auto' });
    expect(out.decision).toMatchObject({ mode: 'auto', applied: true, from: { kind: 'whole', count: 1 }, atMs: 10 });
    expect(out.decision.why).toMatch(
      /^ran in MIG 2g.20gb \(A100-80GB\) instead of 1 × A100-80GB \(29% of its cost\): 2 runs: peak 9.0 GiB/,
    );
  });

  it('auto keeps the shape with one run, with a count above 1, after a failed right-sized run, and where no group runs the slice', () => {
    expect(rightsizeAtIntake('nlp', spec('auto'), [run('a', 1)], OFFERS, 10, all)!.decision).toMatchObject({
      applied: false,
      to: { kind: 'mig', profile: '2g.20gb' },
      why: expect.stringMatching(/1 measured run of 2 needed/),
    });
    const two = spec('auto', { kind: 'whole', count: 2, models: ['A100-80GB'] });
    const twoRuns = [1, 2].map((i) => run(`j${i}`, i, { gpu: two.gpu }, { devices: 2, busyDevices: 1 }));
    expect(rightsizeAtIntake('nlp', two, twoRuns, OFFERS, 10, all)!.decision.why).toMatch(/the number of GPUs is the job's parallelism/);
    const slice: GpuRequest = { kind: 'mig', profile: '2g.20gb', models: ['A100-80GB'] };
    const failed = run('c', 3, { state: 'failed', gpu: slice, rightsizedFrom: WHOLE_A100 });
    const off = rightsizeAtIntake('nlp', spec('auto'), [run('a', 1), run('b', 2), failed], OFFERS, 10, all)!;
    expect(off.decision).toMatchObject({ applied: false, why: expect.stringMatching(/right-sized run c failed in MIG 2g.20gb/) });
    // A run in its own shape succeeding after the failure turns auto back on.
    const again = rightsizeAtIntake('nlp', spec('auto'), [run('a', 1), run('b', 2), failed, run('d', 4)], OFFERS, 10, all)!;
    expect(again.decision.applied).toBe(true);
    // No group runs MIG: the next shape that holds it and that a group runs is taken (an L4: fast enough on both measures).
    const noMig = rightsizeAtIntake('nlp', spec('auto'), [run('a', 1), run('b', 2)], OFFERS, 10, (g) => g.kind !== 'mig')!;
    expect(noMig.spec.gpu).toEqual({ kind: 'whole', count: 1, models: ['L4'], rightsize: 'auto' });
    expect(noMig.decision.why).toMatch(/MIG 2g.20gb \(A100-80GB\) comes first but no node group can run it/);
    // Nor another model: a time-sliced share of the A100.
    const shareOnly = rightsizeAtIntake('nlp', spec('auto'), [run('a', 1), run('b', 2)], OFFERS, 10, (g) => g.kind === 'fraction')!;
    expect(shareOnly.spec.gpu).toMatchObject({ kind: 'fraction', milliGpu: 150, memoryMiB: 11_264 });
    const unknown = rightsizeAtIntake('nlp', spec('auto'), [run('a', 1), run('b', 2)], OFFERS, 10, undefined)!;
    expect(unknown.decision).toMatchObject({ applied: false, why: expect.stringMatching(/node groups are not known/) });
  });

  it('suggest never changes the shape; a spec without the option is left alone', () => {
    const out = rightsizeAtIntake('nlp', spec('suggest'), [run('a', 1), run('b', 2)], OFFERS, 10, all)!;
    expect(out.spec).toEqual(spec('suggest'));
    expect(out.decision).toMatchObject({ mode: 'suggest', applied: false, to: { kind: 'mig', profile: '2g.20gb' } });
    const plain = checkJobSpec({ image: 'x', command: ['x'], gpu: { kind: 'whole', count: 1 } });
    expect(plain.ok && rightsizeAtIntake('nlp', plain.spec, [run('a', 1)], OFFERS, 10, all)).toBeUndefined();
  });

  it("a family's runs are kept once per job, newest 20, oldest first", () => {
    const runs = Array.from({ length: 25 }, (_, i) => run(`j${i}`, i));
    const kept = mergeFamilyRuns(runs.slice(0, 10), runs.slice(5));
    expect(kept.map((r) => r.jobId)).toEqual(runs.slice(5).map((r) => r.jobId));
    expect(mergeFamilyRuns(kept, [run('j24', 24)])).toEqual(kept);
  });
});
