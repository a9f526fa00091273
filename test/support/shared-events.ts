import { readFileSync } from 'node:fs';
import { parseCloudEvent } from '../../cloud/aws/events.ts';
import type { Draining } from '../../core/fleet.ts';
import { drainingFor, type NodeNotice } from '../../core/services/interruption.ts';
import { DEFAULT_POLICY } from '../../core/snapshot.ts';
import { T0 } from '../builders.ts';

const dir = new URL('../fixtures/events/', import.meta.url);

/** A shared EventBridge sample (../shared/data/events, copied to test/fixtures/events) parsed into a notice. */
export function sharedNotice(file: string, lifecycleTimeoutSec = 300): NodeNotice {
  const parsed = parseCloudEvent(JSON.parse(readFileSync(new URL(file, dir), 'utf8')) as unknown, {
    receivedAtMs: T0,
    lifecycleTimeoutSec,
  });
  if (parsed.kind !== 'notice') throw new Error(`${file} is not a notice: ${JSON.stringify(parsed)}`);
  return parsed.notice;
}

/** A notice moved to machine `instanceId` and to `atMs`, its deadline moved with it. */
export function retarget<N extends NodeNotice>(notice: N, instanceId: string, atMs: number): N {
  const shift = atMs - notice.atMs;
  const moved = { ...notice, atMs, ...('instanceId' in notice ? { instanceId } : {}) };
  return ('deadlineMs' in notice ? { ...moved, deadlineMs: notice.deadlineMs + shift } : moved) as N;
}

/**
 * The three notices one machine may get, from the shared samples, one minute apart: a rebalance
 * recommendation (T0), the group's terminate lifecycle action (T0 + 30 s, its hook times out in
 * 300 s), and the spot interruption warning (T0 + 60 s, two minutes). As draining marks of group g.
 */
export function sharedEventNotices(instanceId = 'i-1', baseMs = T0): NodeNotice[] {
  return [
    retarget(sharedNotice('nth-ec2-instance-rebalance-recommendation.json'), instanceId, baseMs),
    retarget(sharedNotice('nth-ec2-instance-terminate-lifecycle-action.json'), instanceId, baseMs + 30_000),
    retarget(sharedNotice('nth-ec2-spot-instance-interruption-warning.json'), instanceId, baseMs + 60_000),
  ];
}

export function sharedEventMarks(instanceId = 'i-1'): (Draining & { groupId?: string })[] {
  return sharedEventNotices(instanceId).map((n) => drainingFor(n, DEFAULT_POLICY, 'g')!);
}

export function permutations<T>(items: readonly T[]): T[][] {
  if (items.length <= 1) return [[...items]];
  return items.flatMap((x, i) => permutations([...items.slice(0, i), ...items.slice(i + 1)]).map((rest) => [x, ...rest]));
}
