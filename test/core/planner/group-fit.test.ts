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
      'no node group can hold it: no group has a GPU it names (L4, A10G); the groups offer p3.2xlarge (1 V100)',
    );
    expect(whyNoGroupHolds(spec({ interruptible: false }), [v100Spot], types)).toMatch(/\(it may not be interrupted, so on-demand only\)$/);
    expect(whyNoGroupHolds(spec({ nodes: 2 }), [v100Spot], types)).toMatch(/^no node group can hold it/);
    expect(whyNoGroupHolds(spec({ placement: { zones: ['us-west-2a'] } }), [v100Spot], types)).toMatch(/within its placement limits$/);
    expect(whyNoGroupHolds(spec({}), [], types)).toBe('no node group can hold it: there are no node groups');
    // A machine type the catalogue does not know could hold anything: nothing is said against it.
    const unknown = { ...v100Spot, offerings: [{ ...v100Spot.offerings[0]!, instanceType: 'p9.huge' }] };
    expect(whyNoGroupHolds(spec({ gpu: { kind: 'whole', count: 1, models: ['L4'] } }), [unknown], types)).toBeUndefined();
  });

  it('names the requirement no group meets: memory, GPU count, MIG profile, on-demand, placement, gang size', () => {
    const v100Spot = aGroup({ instanceType: 'p3.2xlarge', capacityType: 'spot', maxSize: 1 });
    const why = (over: Record<string, unknown>) => whyNoGroupHolds(spec(over), [v100Spot], types);
    expect(why({ gpu: { kind: 'whole', count: 1, minMemoryMiB: 600_000 } })).toMatch(
      /^no node group can hold it: it asks for 600,000 MiB of memory per GPU; the most a group's GPU has is 16,384 MiB \(p3\.2xlarge, V100\); the groups offer/,
    );
    expect(why({ gpu: { kind: 'whole', count: 4 } })).toMatch(
      /it asks for 4 GPUs on one machine; the most a group's machine has is 1 \(p3\.2xlarge\)/,
    );
    expect(why({ gpu: { kind: 'mig', profile: '1g.10gb' } })).toMatch(
      /it asks for the MIG profile 1g\.10gb, and no group runs in MIG mode/,
    );
    expect(why({ interruptible: false })).toMatch(/it may not be interrupted, and only spot groups have machines that can hold it/);
    expect(why({ placement: { zones: ['eu-west-1a'] } })).toMatch(/no group that can hold it is within its placement limits/);
    expect(why({ nodes: 2 })).toMatch(/it is a gang of 2 machines; a group that can hold one has at most 1/);
  });
});
