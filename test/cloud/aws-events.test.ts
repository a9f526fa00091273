import { readdirSync, readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import {
  instanceStateChange,
  parseCloudEvent,
  rebalanceRecommendation,
  spotInterruptionWarning,
  terminateLifecycleAction,
} from '../../cloud/aws/events.ts';

const dir = new URL('../fixtures/events/', import.meta.url);
const load = (name: string) => JSON.parse(readFileSync(new URL(name, dir), 'utf8')) as unknown;
const RECEIVED = Date.UTC(2026, 10, 30, 12, 0, 0);

describe('EventBridge events', () => {
  it('turns the spot interruption warning into a two-minute notice', () => {
    const r = parseCloudEvent(load('nth-ec2-spot-instance-interruption-warning.json'), { receivedAtMs: RECEIVED });
    expect(r).toEqual({
      kind: 'notice',
      warnings: [],
      notice: {
        kind: 'interruption-warning',
        eventId: '1e5527d7-bb36-4607-3370-4164db56a40e',
        instanceId: 'i-0b662ef9931388ba0',
        atMs: 0,
        deadlineMs: 120_000,
      },
    });
  });

  it('reads Capacity Block events in both of the documentation’s spellings, and the interruptible reservation’s warning', () => {
    const parse = (f: string) => parseCloudEvent(load(f), { receivedAtMs: RECEIVED });
    for (const f of ['built-ec2-capacity-block-delivered.json', 'built-ec2-capacity-block-reservation-delivered-docs-spelling.json'])
      expect(parse(f)).toEqual({
        kind: 'notice',
        warnings: [],
        notice: {
          kind: 'reservation-delivered',
          eventId: 'cr-0b10c0000000000a1-delivered',
          reservationId: 'cr-0b10c0000000000a1',
          atMs: Date.parse('2026-12-03T11:30:00Z'),
        },
      });
    // The machines go 30 min before the block's end; without an end date, 10 min after the warning (sent 40 min before the end).
    expect(parse('built-ec2-capacity-block-expiration-warning.json')).toMatchObject({
      kind: 'notice',
      notice: { kind: 'reservation-ending', reservationId: 'cr-0b10c0000000000a1', terminationMs: Date.parse('2026-12-04T11:00:00Z') },
    });
    expect(parse('built-ec2-capacity-block-reservation-expiration-warning.json')).toMatchObject({
      kind: 'notice',
      notice: { kind: 'reservation-ending', atMs: Date.parse('2026-12-04T10:50:00Z'), terminationMs: Date.parse('2026-12-04T11:00:00Z') },
    });
    expect(parse('built-ec2-capacity-reservation-instance-interruption-warning.json')).toEqual({
      kind: 'notice',
      warnings: [],
      notice: {
        kind: 'interruption-warning',
        eventId: '3f1e2d4c-5b6a-4789-8a9b-0c1d2e3f4a5b',
        instanceId: 'i-0abcdef1234567890',
        atMs: Date.parse('2026-12-02T09:00:00Z'),
        deadlineMs: Date.parse('2026-12-02T09:02:00Z'),
        cause: 'interruptible capacity reservation reclaimed',
      },
    });
    // A bad reservation id is invalid, with what was wrong.
    const bad = { ...(load('built-ec2-capacity-block-expiration-warning.json') as object), detail: { 'capacity-reservation-id': 'i-123' } };
    expect(parseCloudEvent(bad, { receivedAtMs: RECEIVED })).toMatchObject({
      kind: 'invalid',
      error: expect.stringMatching(/capacity-reservation-id is not a capacity reservation id/),
    });
  });

  it('reads rebalance recommendations, state changes, terminate lifecycle actions and Health scheduled changes', () => {
    expect(parseCloudEvent(load('nth-ec2-instance-rebalance-recommendation.json'), { receivedAtMs: RECEIVED })).toMatchObject({
      kind: 'notice',
      notice: { kind: 'rebalance', instanceId: 'i-0b662ef9931388ba0', atMs: Date.parse('2020-10-26T14:14:14Z') },
    });
    expect(parseCloudEvent(load('nth-ec2-instance-state-change-notification.json'), { receivedAtMs: RECEIVED })).toMatchObject({
      kind: 'notice',
      notice: { kind: 'state-change', instanceId: 'i-abcd1111', state: 'pending' },
    });
    expect(
      parseCloudEvent(load('nth-ec2-instance-terminate-lifecycle-action.json'), { receivedAtMs: RECEIVED, lifecycleTimeoutSec: 600 }),
    ).toMatchObject({
      kind: 'notice',
      notice: {
        kind: 'lifecycle-terminate',
        instanceId: 'i-0633ac2b0d9769723',
        groupName: 'testt1.demo-0a20f32c.kops.sh',
        hookName: 'cluster-termination-handler',
        token: '0befcbdb-6ecd-498a-9ff7-ae9b54447cd6',
        deadlineMs: Date.parse('2020-07-01T22:19:58Z') + 600_000,
      },
    });
    expect(parseCloudEvent(load('nth-aws-health-event-scheduled-change.json'), { receivedAtMs: RECEIVED })).toMatchObject({
      kind: 'notice',
      notice: { kind: 'scheduled-change', instanceIds: ['i-12345678'], startMs: Date.parse('Sat, 05 Jun 2016 15:10:09 GMT') },
    });
  });

  it('keeps a documentation sample with a placeholder time, using the time it was received, and says so', () => {
    const r = parseCloudEvent(load('awsdocs-ec2-spot-instance-interruption-warning.json'), { receivedAtMs: RECEIVED });
    expect(r).toMatchObject({
      kind: 'notice',
      notice: { kind: 'interruption-warning', instanceId: 'i-1234567890abcdef0', atMs: RECEIVED, deadlineMs: RECEIVED + 120_000 },
    });
    expect(r.kind === 'notice' && r.warnings).toEqual([
      'event time "yyyy-mm-ddThh:mm:ssZ" is not a date; using the time it was received',
      'instance-action "action" is not terminate, stop or hibernate; treated as terminate',
    ]);
  });

  it('classifies every shared sample: a notice, ignored with a reason, or invalid with an error', () => {
    const files = readdirSync(dir).filter((f) => f.endsWith('.json'));
    expect(files.length).toBeGreaterThan(30);
    const kinds: Record<string, string[]> = { notice: [], ignored: [], invalid: [] };
    for (const f of files) {
      const r = parseCloudEvent(load(f), { receivedAtMs: RECEIVED });
      kinds[r.kind]!.push(f);
      if (r.kind === 'ignored') expect(r.reason).toMatch(/need(s)? no action|not a termination|names no EC2 instance/);
      if (r.kind === 'invalid') expect(r.error.length).toBeGreaterThan(20);
    }
    // The IMDS bodies are the agent's, not EventBridge events.
    expect(kinds.invalid!.sort()).toEqual([
      'imds-rebalance-recommendation.json',
      'imds-spot-instance-action-stop.json',
      'imds-spot-instance-action-terminate.json',
    ]);
    expect(kinds.notice).toHaveLength(15); // 10 shared samples, 5 built reservation events
    expect(kinds.ignored!.filter((f) => f.includes('launch'))).not.toHaveLength(0);
  });

  it('rejects malformed instance ids and details with the field named', () => {
    const bad = { ...(load('nth-ec2-spot-instance-interruption-warning.json') as object), detail: { 'instance-id': 'not-an-id' } };
    expect(parseCloudEvent(bad, { receivedAtMs: RECEIVED })).toEqual({
      kind: 'invalid',
      error:
        'spot interruption warning event 1e5527d7-bb36-4607-3370-4164db56a40e: instance-id is not an EC2 instance id (i- followed by 8 or 17 hex digits)',
    });
    expect(parseCloudEvent(42, { receivedAtMs: RECEIVED }).kind).toBe('invalid');
  });

  it('builds events the parser reads back, as the simulated cloud sends them', () => {
    const w = spotInterruptionWarning({
      id: 'e1',
      instanceId: 'i-0123456789abcdef0',
      zone: 'us-west-2a',
      region: 'us-west-2',
      atMs: RECEIVED,
    });
    expect(parseCloudEvent(w, { receivedAtMs: 0 })).toMatchObject({
      kind: 'notice',
      warnings: [],
      notice: { kind: 'interruption-warning', atMs: RECEIVED },
    });
    const t = instanceStateChange({
      id: 'e2',
      instanceId: 'i-0123456789abcdef0',
      region: 'us-west-2',
      atMs: RECEIVED,
      state: 'terminated',
    });
    expect(parseCloudEvent(t, { receivedAtMs: 0 })).toMatchObject({
      kind: 'notice',
      notice: { kind: 'state-change', state: 'terminated' },
    });
  });

  it('the rebalance and lifecycle events the simulated groups send read back as the same notices as real ones', () => {
    const at = Date.UTC(2026, 10, 2, 3, 0, 0);
    const rebalance = rebalanceRecommendation({ id: 'sim-1', instanceId: 'i-0123456789abcdef0', region: 'us-west-2', atMs: at });
    expect(parseCloudEvent(rebalance, { receivedAtMs: at })).toEqual({
      kind: 'notice',
      warnings: [],
      notice: { kind: 'rebalance', eventId: 'sim-1', instanceId: 'i-0123456789abcdef0', atMs: at },
    });
    const hook = terminateLifecycleAction({
      id: 'sim-2',
      instanceId: 'i-0123456789abcdef0',
      groupName: 'g',
      hookName: 'gpu-fleet-drain',
      token: 't',
      region: 'us-west-2',
      atMs: at,
    });
    expect(parseCloudEvent(hook, { receivedAtMs: at, lifecycleTimeoutSec: 300 })).toEqual({
      kind: 'notice',
      warnings: [],
      notice: {
        kind: 'lifecycle-terminate',
        eventId: 'sim-2',
        instanceId: 'i-0123456789abcdef0',
        atMs: at,
        groupName: 'g',
        hookName: 'gpu-fleet-drain',
        token: 't',
        deadlineMs: at + 300_000,
      },
    });
    // The same shape as AWS's documented sample.
    expect(Object.keys(hook).sort()).toEqual(
      Object.keys(load('awsdocs-asg-ec2-instance-terminate-lifecycle-action.json') as object).sort(),
    );
  });
});
