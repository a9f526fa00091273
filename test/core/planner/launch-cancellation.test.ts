import { describe, expect, it } from 'vitest';
import { cancelLaunches } from '../../../core/planner/launch-cancellation.ts';
import { aGroup, aNode, anOffering, T0 } from '../../builders.ts';
import { indexed } from './support.ts';

describe('planner phase: launch cancellation', () => {
  const failing = aGroup({ id: 'failing', capacityType: 'spot', zones: ['us-east-1a', 'us-east-1b'], minSize: 1, desiredCapacity: 4 });
  const unavailable = new Map(failing.offerings.map((o) => [o.id, T0 + 600_000]));

  it('cancels the launches of a group whose every offering is failing, down to what it has and never below its minimum', () => {
    const st = indexed({ groups: [failing], nodes: [aNode('i-1', { group: failing })], unavailableUntilMs: unavailable });
    // indexSnapshot already ran the phase: its action is the plan's first, and nothing waits for the launches.
    expect(st.actions).toEqual([expect.objectContaining({ kind: 'cancel-launches', groupId: 'failing', fromDesired: 4, toDesired: 1 })]);
    expect(st.cancelled.get('failing')).toBe(1);
    expect(st.booting.allNodes()).toEqual([]);
    // Run again on the same state: the same decision, and it touches no capacity.
    expect(cancelLaunches(st)).toEqual([expect.objectContaining({ kind: 'cancel-launches', toDesired: 1 })]);
    expect(st.ready.allNodes().map((n) => n.id)).toEqual(['i-1']);
  });

  it('writes no action for a group already at its minimum, but still counts on none of its launches', () => {
    const atMin = { ...failing, minSize: 4 };
    const st = indexed({ groups: [atMin], unavailableUntilMs: unavailable });
    expect(st.actions).toEqual([]);
    expect(st.undeliverable.has('failing')).toBe(true);
    expect(st.booting.allNodes()).toEqual([]);
  });

  it('leaves a group alone while one of its offerings can still launch', () => {
    const g = aGroup({
      id: 'half',
      offerings: [anOffering('g5.xlarge', 'spot', 'us-east-1a'), anOffering('g5.xlarge', 'spot', 'us-east-1b')],
      desiredCapacity: 2,
    });
    const st = indexed({ groups: [g], unavailableUntilMs: new Map([[g.offerings[0]!.id, T0 + 600_000]]) });
    expect(st.actions).toEqual([]);
    expect(st.booting.allNodes()).toHaveLength(2);
  });
});
