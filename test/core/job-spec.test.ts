import { describe, expect, it } from 'vitest';
import { checkJobSpec } from '../../core/job-spec.ts';

const valid = {
  image: 'pytorch/pytorch:2.3.0-cuda12.1',
  command: ['python', 'train.py', '--epochs', '3'],
  gpu: { kind: 'whole', count: 1 },
};

describe('job spec', () => {
  it('accepts a minimal spec and fills the defaults', () => {
    const r = checkJobSpec(valid);
    expect(r.ok).toBe(true);
    if (!r.ok) return;
    expect(r.spec).toMatchObject({ nodes: 1, priority: 100, interruptible: true, env: {}, labels: {} });
  });

  it('accepts every GPU shape, gangs, checkpoints, deadlines and placement limits', () => {
    const specs = [
      { ...valid, gpu: { kind: 'whole', count: 8, models: ['A100', 'H100'], minMemoryMiB: 40_000 }, nodes: 4 },
      { ...valid, gpu: { kind: 'fraction', milliGpu: 250, memoryMiB: 4096 } },
      { ...valid, gpu: { kind: 'mig', profile: '3g.40gb', models: ['A100-80GB'] } },
      { ...valid, checkpoint: { intervalSec: 900 }, deadline: '2026-12-04T17:00:00Z', labels: { project: 'llm-eval' } },
      { ...valid, placement: { clouds: ['gcp'], regions: ['europe-west4'], zones: ['europe-west4-a'] } },
    ];
    for (const s of specs) expect(checkJobSpec(s)).toMatchObject({ ok: true });
    const cp = checkJobSpec(specs[3]);
    expect(cp.ok && cp.spec.checkpoint).toEqual({ intervalSec: 900, signal: 'SIGUSR1', gracePeriodSec: 90 });
  });

  it.each([
    [{ ...valid, command: 'python train.py' }, 'command: must be an array of arguments'],
    [{ ...valid, image: 'ubuntu; rm -rf /' }, 'image: must be a container image reference'],
    [{ ...valid, gpu: { kind: 'whole', count: 0 } }, 'gpu.count: must be at least 1; got 0'],
    [{ ...valid, gpu: { kind: 'whole', count: 2.5 } }, 'gpu.count: must be a whole number from 1 to 16; got 2.5'],
    [{ ...valid, gpu: { kind: 'quantum', count: 1 } }, 'gpu.kind: must be "whole", "fraction" or "mig"'],
    [{ ...valid, gpu: { kind: 'whole', count: 1, models: ['Z100'] } }, 'gpu.models.0: unknown GPU model; allowed: K80, T4'],
    [{ ...valid, gpu: { kind: 'mig', profile: 'big' } }, 'gpu.profile: must be a MIG profile such as "1g.10gb"'],
    // Shaped like a profile but in no GPU's table: the error lists each model's profiles.
    [
      { ...valid, gpu: { kind: 'mig', profile: '1g.99gb' } },
      'gpu.profile: "1g.99gb" is not a MIG profile of any GPU (A100-40GB: 1g.5gb, 1g.5gb+me',
    ],
    [
      { ...valid, gpu: { kind: 'mig', profile: '1g.5gb', models: ['H100'] } },
      'of the GPU models asked for (H100: 1g.10gb, 1g.10gb+me, 1g.20gb',
    ],
    [{ ...valid, gpu: { kind: 'mig', profile: '1g.10gb', models: ['T4'] } }, 'gpu.profile: none of the GPU models T4 supports MIG'],
    [{ ...valid, gpu: { kind: 'fraction', milliGpu: 250, memoryMiB: 1024 }, nodes: 2 }, 'nodes: a multi-node gang needs whole GPUs'],
    [{ ...valid, env: { GPU_FLEET_JOB_ID: 'x' } }, 'env.GPU_FLEET_JOB_ID: GPU_FLEET_* variables are set by gpu-fleet'],
    [{ ...valid, deadline: 'friday' }, 'deadline: must be an ISO 8601 date-time'],
    [{ ...valid, priority: 5000 }, 'priority: must be at most 1000; got 5000'],
    [{ ...valid, extra: 1 }, '(spec): unknown field(s) "extra"; allowed: name, image, command'],
    [{ ...valid, team: 'other-team' }, 'team: a job spec cannot name its team'],
    [{ command: ['x'], gpu: { kind: 'whole', count: 1 } }, 'image: is required'],
    [null, '(spec): must be a JSON object'],
    [[1, 2], '(spec): must be a JSON object'],
  ])('rejects %j with a message naming the field and what is allowed', (input, expected) => {
    const r = checkJobSpec(input);
    expect(r.ok).toBe(false);
    if (r.ok) return;
    expect(r.errors.join('\n')).toContain(expected);
  });
});
