import { describe, expect, it } from 'vitest';
import { defaultTeamTags } from '../../cloud/sim/defaults.ts';
import type { SimGroupConfig, SimReservationConfig } from '../../cloud/sim/sim-cloud.ts';
import { DEFAULT_SIM_START_MS, runSimulation, type SimPolicyName } from '../../cloud/sim/simulation.ts';
import type { Workload, WorkloadJob } from '../../cloud/sim/workload.ts';

const H = 3_600_000;
const P3_16XL_OD = 24_480_000;

/** A Capacity Block of two p3.16xlarge from 1 h to 5 h (its machines go at 4 h 30 min), beside on-demand. */
const BLOCK: SimReservationConfig = {
  id: 'cr-0b10c0000000000a1',
  zone: 'us-west-2a',
  instanceType: 'p3.16xlarge',
  kind: 'capacity-block',
  count: 2,
  startMs: DEFAULT_SIM_START_MS + 1 * H,
  endMs: DEFAULT_SIM_START_MS + 5 * H,
  priceMicroUsdPerHour: P3_16XL_OD / 2,
};
const GROUPS: SimGroupConfig[] = [
  { id: 'p3-16xl-od', instanceTypes: ['p3.16xlarge'], zones: ['us-west-2a'], capacityType: 'on-demand', minSize: 0, maxSize: 10 },
  {
    id: 'p3-16xl-block',
    instanceTypes: ['p3.16xlarge'],
    zones: ['us-west-2a'],
    capacityType: 'reserved',
    reservationId: BLOCK.id,
    minSize: 0,
    maxSize: 2,
  },
];

function job(id: string, submitSec: number, workSec: number, checkpointSec: number | undefined): WorkloadJob {
  return {
    id,
    submitSec,
    workSec,
    team: 'nlp',
    exitCode: 0,
    spec: {
      image: 'pytorch/pytorch:2.3.0',
      command: ['python', 'train.py'],
      gpu: { kind: 'whole', count: 8, models: ['V100'] },
      expectedRuntimeSec: workSec,
      ...(checkpointSec ? { checkpoint: { intervalSec: checkpointSec } } : {}),
    },
  };
}

/** Eight-GPU jobs arriving once the block is delivered: long ones that checkpoint, long ones that cannot, and short ones. */
const WORKLOAD: Workload = {
  name: 'block-scenario',
  teams: ['nlp'],
  skipped: [],
  jobs: [
    // Arrives first, and comes first in a first-fit's order too.
    job('a-long-nockpt', 3900, 6 * 3600, undefined),
    job('long-ckpt-1', 3900, 6 * 3600, 600),
    job('long-ckpt-2', 3960, 6 * 3600, 600),
    job('short-1', 4000, 2 * 3600, undefined),
    job('short-2', 9000, 1 * 3600, undefined),
  ],
};

async function run(policy: SimPolicyName) {
  const r = await runSimulation({
    workload: WORKLOAD,
    groups: GROUPS,
    teamTags: defaultTeamTags(['nlp']),
    seed: 3,
    hours: 14,
    reservations: [BLOCK],
    policy,
  });
  return r.summary;
}

describe('a Capacity Block in the simulated control loop', () => {
  it('runs work that finishes or checkpoints before the block ends on it, checkpoints and requeues it ahead of the end, and kills nothing', async () => {
    const s = await run('gpu-fleet');
    expect(s.lost).toBe(0);
    expect(s.violations).toBe(0);
    expect(s.completed).toBe(5);
    const [block] = s.reservations!;
    expect(block).toMatchObject({ id: BLOCK.id, kind: 'capacity-block', killedAtEnd: 0 });
    // Paid in full: 2 machines × 4 h at half the on-demand price.
    expect(block!.paidMicroUsd).toBe(2 * 4 * (P3_16XL_OD / 2));
    // Both machines were taken soon after the work came (1 h 05 min) and held to the block's end: no work waited for it meanwhile.
    expect(block!.utilizationPct).toBeGreaterThanOrEqual(90);
    expect(block!.queuedMinutes).toBe(0);
    expect(s.costWithReservationsMicroUsd).toBe(s.costMicroUsd - block!.usedMicroUsd + block!.paidMicroUsd);
  });

  it('a baseline that places anything on the block kills work at the block’s end; gpu-fleet does not', async () => {
    const baseline = await run('reserved-first');
    expect(baseline.lost).toBe(0);
    expect(baseline.reservations![0]!.killedAtEnd).toBeGreaterThan(0);
  });
});
