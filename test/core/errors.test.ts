import { describe, expect, it } from 'vitest';
import {
  ApplyError,
  CloudError,
  ConfigError,
  ConflictError,
  GpuFleetError,
  messageOf,
  MoneyError,
  UsageError,
  codeOf,
} from '../../core/errors.ts';
import { assertMicroUsd } from '../../core/money.ts';
import { applyPlan } from '../../core/reconcile/reconcile.ts';
import { createSimEnvironment } from '../../cloud/sim/environment.ts';
import { DEFAULT_SIM_START_MS } from '../../cloud/sim/simulation.ts';
import { reason } from '../../core/reason.ts';

describe('one error root', () => {
  it('every error class of the project is a GpuFleetError with its name, cause and context', () => {
    const cause = new Error('socket hang up');
    const errors: GpuFleetError[] = [
      new CloudError('throttled', 'Rate exceeded', { operation: 'set desired capacity', resource: 'g1', cloud: 'aws' }, { cause }),
      new ConflictError('job moved', { context: { resource: 'nlp.1' } }),
      new MoneyError('bad', { context: { value: 1.5 } }),
      new UsageError('--seed must be a whole number'),
      new ConfigError('environment', ['GPU_FLEET_X="y" is not allowed'], { what: 'gpu-fleet environment' }),
      new ApplyError('refused', 'job is succeeded', 'nlp.1'),
    ];
    for (const e of errors) {
      expect(e).toBeInstanceOf(GpuFleetError);
      expect(e).toBeInstanceOf(Error);
      expect(e.name).toBe(e.constructor.name);
      expect(typeof e.context).toBe('object');
    }
    expect(errors[0]!.cause).toBe(cause);
    expect(errors[0]!.context).toEqual({ operation: 'set desired capacity', resource: 'g1', cloud: 'aws' });
    expect(errors[4]!.message).toBe('environment is not a valid gpu-fleet environment:\n  - GPU_FLEET_X="y" is not allowed');
  });

  it('money errors name the value they were given', () => {
    let caught: unknown;
    try {
      assertMicroUsd(0.5, 'price per hour');
    } catch (e) {
      caught = e;
    }
    expect(caught).toBeInstanceOf(MoneyError);
    expect((caught as MoneyError).context).toEqual({ what: 'price per hour', value: 0.5 });
  });

  it('messageOf reads the message of anything thrown', () => {
    expect(messageOf(new Error('boom'))).toBe('boom');
    expect(messageOf('plain text')).toBe('plain text');
    expect(messageOf({ code: 7 })).toBe('{"code":7}');
    expect(messageOf(undefined)).toBe('undefined');
    const cyclic: Record<string, unknown> = {};
    cyclic.self = cyclic;
    expect(messageOf(cyclic)).toBe('[object Object]');
    expect(codeOf(new CloudError('not-found', 'gone'))).toBe('not-found');
    expect(codeOf(new Error('x'))).toBeUndefined();
  });
});

describe('applyPlan keeps what failed as data', () => {
  it('records the code and resource of each failed action, and applies the rest', async () => {
    const env = createSimEnvironment({
      startMs: DEFAULT_SIM_START_MS,
      seed: 1,
      groups: [{ id: 'g1', instanceTypes: ['p3.2xlarge'], zones: ['us-west-2a'], capacityType: 'on-demand', minSize: 0, maxSize: 2 }],
      teams: ['nlp'],
      teamTags: [],
    });
    const provider = env.cloud;
    const out = await applyPlan(
      env.ports,
      [
        { kind: 'scale-up', groupId: 'g1', fromDesired: 0, toDesired: 5, expected: [], reason: reason('scale-up-for-pending', 'too many') },
        { kind: 'scale-up', groupId: 'nowhere', fromDesired: 0, toDesired: 1, expected: [], reason: reason('scale-up-for-pending', 'x') },
        { kind: 'scale-up', groupId: 'g1', fromDesired: 0, toDesired: 1, expected: [], reason: reason('scale-up-for-pending', 'one') },
        { kind: 'preempt', jobId: 'nlp.missing', attempt: 1, reason: reason('preempt-for-priority', 'x') },
      ],
      new Map([['g1', provider]]),
      env.clock.nowMs(),
    );
    expect(out.applied).toBe(2);
    expect(out.errors).toEqual([
      { index: 0, kind: 'scale-up', resource: 'g1', code: 'invalid-request', message: expect.stringContaining('outside its limits') },
      { index: 1, kind: 'scale-up', resource: 'nowhere', code: 'no-provider', message: 'no configured cloud holds group nowhere' },
    ]);
    expect((await provider.listGroups())[0]!.desiredCapacity).toBe(1);
  });
});
