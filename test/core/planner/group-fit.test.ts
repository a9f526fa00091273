import { describe, expect, it } from 'vitest';
import { whyNoGroupHolds } from '../../../core/planner/capacity.ts';
import { JobSpecSchema } from '../../../core/job-spec.ts';
import { aGroup, INSTANCE_TYPES } from '../../builders.ts';

const types = new Map(Object.entries(INSTANCE_TYPES));
const spec = (over: Record<string, unknown>) =>
  JobSpecSchema.parse({ image: 'a/b:1', command: ['x'], gpu: { kind: 'whole', count: 1 }, ...over });

describe('whether any node group could ever hold a spec', () => {
  const v100Spot = aGroup({ instanceType: 'p3.2xlarge', capacityType: 'spot', maxSize: 1 });
  it('is held by a group with a type that fits, in the capacity type and zones it allows, with machines for its gang', () => {
    expect(whyNoGroupHolds(spec({}), [v100Spot], types)).toBeUndefined();
    expect(whyNoGroupHolds(spec({ gpu: { kind: 'whole', count: 1, models: ['L4', 'A10G'] } }), [v100Spot], types)).toBe(
      'no node group can hold it: the groups offer p3.2xlarge (1 V100)',
    );
    expect(whyNoGroupHolds(spec({ interruptible: false }), [v100Spot], types)).toMatch(/\(it may not be interrupted, so on-demand only\)$/);
    expect(whyNoGroupHolds(spec({ nodes: 2 }), [v100Spot], types)).toMatch(/^no node group can hold it/);
    expect(whyNoGroupHolds(spec({ placement: { zones: ['us-west-2a'] } }), [v100Spot], types)).toMatch(/within its placement limits$/);
    expect(whyNoGroupHolds(spec({}), [], types)).toBe('no node group can hold it: there are no node groups');
    // A machine type the catalogue does not know could hold anything: nothing is said against it.
    const unknown = { ...v100Spot, offerings: [{ ...v100Spot.offerings[0]!, instanceType: 'p9.huge' }] };
    expect(whyNoGroupHolds(spec({ gpu: { kind: 'whole', count: 1, models: ['L4'] } }), [unknown], types)).toBeUndefined();
  });
});
