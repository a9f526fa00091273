import { describe, expect, it } from 'vitest';
import { checkJobSpec, REJECTED_BODY_KEPT, rejectedBody } from '../../core/job-spec.ts';

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
      { ...valid, gpu: { kind: 'whole', count: 8, models: ['A100-40GB', 'A100-80GB', 'H100'], minMemoryMiB: 40_000 }, nodes: 4 },
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
    [{ ...valid, gpu: { kind: 'whole', count: 1, models: ['X9'] } }, 'gpu.models.0: unknown GPU model; allowed: K80, T4'],
    [{ ...valid, gpu: { kind: 'whole', count: 1, models: ['a100-80gb'] } }, 'unknown GPU model (did you mean "A100-80GB"?)'],
    // Two GPUs go by the name: 40 and 80 GB are different machines, so the choice is the submitter's.
    [
      { ...valid, gpu: { kind: 'whole', count: 1, models: ['A100'] } },
      'gpu.models.0: "A100" names 2 GPUs: "A100-40GB" or "A100-80GB"; name the one the job needs, or list them all to accept any',
    ],
    // A misspelt field gets the one meant, at every depth; of a GPU request, the fields of its kind.
    [{ ...valid, expectedRuntimeSecs: 600 }, '(spec): unknown field "expectedRuntimeSecs" (did you mean "expectedRuntimeSec"?)'],
    [{ ...valid, checkpoint: { intervalSec: 600, interval: 600 } }, 'checkpoint: unknown field "interval" (did you mean "intervalSec"?)'],
    [
      { ...valid, gpu: { kind: 'whole', count: 1, minMemoryMB: 1 } },
      'gpu: unknown field "minMemoryMB" (did you mean "minMemoryMiB"?); allowed: kind, count, models, minMemoryMiB, rightsize',
    ],
    [
      {
        ...valid,
        name: 'web',
        service: { port: 8000, replicas: { min: 1, max: 2 }, targets: [{ metric: 'waiting-requests', perReplica: 1, prometheus: 'x' }] },
      },
      'service.targets.0: unknown field "prometheus" (did you mean "prometheusMetric"?)',
    ],
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
    [{ ...valid, extra: 1 }, '(spec): unknown field "extra"; allowed: name, image, command'],
    [{ ...valid, team: 'other-team' }, 'team: a job spec cannot name its team'],
    [{ command: ['x'], gpu: { kind: 'whole', count: 1 } }, 'image: is required'],
    [null, '(spec): must be a JSON object'],
    [[1, 2], '(spec): must be a JSON object'],
    [{ ...valid, container: { shmSizeMiB: 16 } }, 'container.shmSizeMiB: must be at least 64 MiB; got 16'],
    [{ ...valid, container: { memlock: -1 } }, 'container: unknown field "memlock"; allowed: shmSizeMiB, lockedMemoryMiB'],
    [
      {
        ...valid,
        name: 'web',
        service: { port: 22, replicas: { min: 1, max: 1 }, targets: [{ metric: 'waiting-requests', perReplica: 1 }] },
      },
      "service.port: must be 1024 or above: lower ports are the machine's own (sshd's 22 among them); got 22",
    ],
    [
      {
        ...valid,
        name: 'web',
        service: { port: 9400, replicas: { min: 1, max: 1 }, targets: [{ metric: 'waiting-requests', perReplica: 1 }] },
      },
      "service.port: port 9400 is the machine's own (the dcgm-exporter's and the agent's /metrics)",
    ],
  ])('rejects %j with a message naming the field and what is allowed', (input, expected) => {
    const r = checkJobSpec(input);
    expect(r.ok).toBe(false);
    if (r.ok) return;
    expect(r.errors.join('\n')).toContain(expected);
  });
});

describe('a service in the spec', () => {
  const service = {
    name: 'chat',
    image: 'vllm/vllm-openai:v0.6.3',
    command: ['vllm', 'serve', 'meta-llama/Llama-3.1-8B-Instruct'],
    gpu: { kind: 'whole', count: 1 },
    service: { port: 8000, replicas: { min: 0, max: 8 }, targets: [{ metric: 'waiting-requests', perReplica: 6 }] },
  };

  it('is checked by the same schema, with readiness, on-demand base and delays defaulted', () => {
    const out = checkJobSpec(service);
    expect(out.ok).toBe(true);
    if (!out.ok) return;
    expect(out.spec.service).toEqual({
      port: 8000,
      readiness: { path: '/health', initialDelaySec: 30, periodSec: 10, unhealthyLimitSec: 300 },
      replicas: { min: 0, max: 8 },
      targets: [{ metric: 'waiting-requests', perReplica: 6 }],
      onDemandBase: 0,
      scaleUpDelaySec: 0,
      scaleDownWindowSec: 300,
      scaleAhead: false,
    });
  });

  it('says per field what is wrong with a service and what is allowed', () => {
    const bad = {
      ...service,
      name: undefined,
      checkpoint: { intervalSec: 600 },
      service: {
        port: 70_000,
        replicas: { min: 5, max: 2 },
        targets: [{ metric: 'gpu-temperature', perReplica: 0, prometheusMetric: 'not a name' }],
        readiness: { path: 'health' },
      },
    };
    const out = checkJobSpec(bad);
    expect(out.ok).toBe(false);
    if (out.ok) return;
    expect(out.errors).toEqual(
      expect.arrayContaining([
        'service.port: must be at most 65535; got 70000',
        'service.replicas: max must be at least min; got {"min":5,"max":2}',
        'service.targets.0.metric: must be one of requests-per-second, waiting-requests, running-requests, gpu-utilization, gpu-memory; got "gpu-temperature"',
        'service.targets.0.perReplica: must be above 0; got 0',
        'service.targets.0.prometheusMetric: a Prometheus metric name, e.g. "vllm:num_requests_waiting"; got "not a name"',
        'service.readiness.path: an HTTP path starting with "/", without spaces, e.g. "/health"; got "health"',
      ]),
    );
    const rules = checkJobSpec({ ...service, name: undefined, checkpoint: { intervalSec: 600 }, nodes: 2 });
    expect(rules.ok || rules.errors).toEqual(
      expect.arrayContaining([
        'name: a service needs a name: it is known as team.name',
        expect.stringMatching(/^checkpoint: a service replica has no checkpoints: a new one starts in its place; got \{"intervalSec":600/),
        'nodes: a service replica runs on one machine; got 2',
      ]),
    );
  });

  it('takes a latency objective (concurrency defaulted to one) and refuses one the scaling target would always overrun', () => {
    const withObjective = (objective: object, targets = [{ metric: 'requests-per-second', perReplica: 2 }]) =>
      checkJobSpec({ ...service, service: { ...service.service, targets, objective } });
    const ok = withObjective({ waitSec: 2, replicaRps: 2.8 });
    expect(ok.ok && ok.spec.service?.objective).toEqual({ waitSec: 2, replicaRps: 2.8, concurrency: 1 });
    const over = withObjective({ waitSec: 2, replicaRps: 2, concurrency: 16 });
    expect(over.ok || over.errors).toEqual([
      "service.objective.replicaRps: a replica scaled to carry 2 requests per second (the requests-per-second target) must serve more than that at full load, or every request queues; give the replica's measured throughput, above 2; got 2",
    ]);
    const bad = withObjective({ waitSec: 0, replicaRps: -1, concurrency: 0.5, p99: true });
    expect(bad.ok || bad.errors).toEqual(
      expect.arrayContaining([
        'service.objective.waitSec: must be above 0 s; got 0',
        'service.objective.replicaRps: must be above 0; got -1',
        expect.stringMatching(/^service\.objective\.concurrency: /),
        expect.stringMatching(/^service\.objective: .*p99/),
      ]),
    );
    // A service scaled on another figure may state any throughput.
    expect(withObjective({ waitSec: 1, replicaRps: 1 }, [{ metric: 'waiting-requests', perReplica: 6 }]).ok).toBe(true);
  });
});

describe('the body a rejected job keeps (rejectedBody)', () => {
  it('keeps the names of the environment, never its values, also in a body that is not quite JSON', () => {
    expect(rejectedBody('{"image":"x","env":{"TOKEN":"hunter2","N":12345}}')).toBe(
      '{"image":"x","env":{"TOKEN":"(7 characters, not kept)","N":"(5 characters, not kept)"}}',
    );
    // A missing brace and a trailing comma: the tolerant parse still finds the values.
    expect(rejectedBody('{"env": {"TOKEN": "hunter2",}, "gpu": ')).toBe('{"env": {"TOKEN": "(7 characters, not kept)",}, "gpu": ');
    expect(rejectedBody('{"env": "TOKEN=hunter2"}')).toBe('{"env": "(13 characters, not kept)"}');
    expect(rejectedBody('not json at all')).toBe('not json at all');
  });

  it('cuts a long body the same way every time, so a redelivery is known as the same submission', () => {
    const long = JSON.stringify({ image: 'x', command: ['a'.repeat(20_000)], env: { K: 'secret' } });
    expect(rejectedBody(long)).toHaveLength(REJECTED_BODY_KEPT + 1);
    expect(rejectedBody(long)).toBe(rejectedBody(long));
    expect(rejectedBody(long)).not.toContain('secret');
  });
});

describe('a problem under a key the body chose', () => {
  it('cuts a long path and keeps what is wrong, so every problem reads "where: what"', () => {
    const key = 'k'.repeat(5000);
    const check = checkJobSpec({ ...valid, env: { [key]: 'v\n' } });
    expect(check.ok).toBe(false);
    const [problem] = check.ok ? [] : check.errors;
    expect(problem).toMatch(/^env\.k{195}…: environment variable names are /);
    expect(problem!.length).toBeLessThan(400);
  });
});
