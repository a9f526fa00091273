import { makeOffering, type CapacityType, type InstanceType, type Offering, type PriceQuote } from '../core/catalog.ts';
import type { FleetNode, Instance, NodeGroup, NodeRecord } from '../core/fleet.ts';
import { newPendingJob, type Job } from '../core/job.ts';
import { JobSpecSchema, type JobSpec, type JobSpecInput } from '../core/job-spec.ts';
import { DEFAULT_POLICY, type Policy, type Snapshot } from '../core/snapshot.ts';
import type { Team } from '../core/team.ts';
import type { Reservation } from '../core/reservation.ts';
import type { AttemptGpuUse } from '../core/gpu-use.ts';
import type { RightsizeRun } from '../core/rightsizing.ts';
import { defaultTeamTags } from '../cloud/sim/defaults.ts';
import { createSimEnvironment, type SimEnvironment, type SimEnvironmentOptions } from '../cloud/sim/environment.ts';

/** Builders for domain objects in tests: `aJob({ gpu: { kind: 'whole', count: 8 } })`. */

export const T0 = Date.UTC(2026, 10, 2, 0, 0, 0);

export function aSpec(overrides: Partial<JobSpecInput> = {}): JobSpec {
  return JobSpecSchema.parse({
    image: 'pytorch/pytorch:2.3.0',
    command: ['python', 'train.py'],
    gpu: { kind: 'whole', count: 1 },
    ...overrides,
  });
}

export function aJob(overrides: Partial<Omit<Job, 'spec'>> & { spec?: Partial<JobSpecInput> } = {}): Job {
  const { spec, ...rest } = overrides;
  const id = rest.id ?? 'team-a.job-1';
  const team = rest.team ?? 'team-a';
  return { ...newPendingJob({ id, team, spec: aSpec(spec), submittedAtMs: rest.submittedAtMs ?? T0 }), ...rest };
}

export const INSTANCE_TYPES: Record<string, InstanceType> = {
  'g5.xlarge': { name: 'g5.xlarge', cloud: 'aws', gpuModel: 'A10G', gpuCount: 1, gpuMemoryMiB: 24_576, vcpus: 4, memoryMiB: 16_384 },
  'g5.12xlarge': { name: 'g5.12xlarge', cloud: 'aws', gpuModel: 'A10G', gpuCount: 4, gpuMemoryMiB: 24_576, vcpus: 48, memoryMiB: 196_608 },
  'p3.2xlarge': { name: 'p3.2xlarge', cloud: 'aws', gpuModel: 'V100', gpuCount: 1, gpuMemoryMiB: 16_384, vcpus: 8, memoryMiB: 62_464 },
  'p3.16xlarge': { name: 'p3.16xlarge', cloud: 'aws', gpuModel: 'V100', gpuCount: 8, gpuMemoryMiB: 16_384, vcpus: 64, memoryMiB: 499_712 },
  'p4d.24xlarge': {
    name: 'p4d.24xlarge',
    cloud: 'aws',
    gpuModel: 'A100-40GB',
    gpuCount: 8,
    gpuMemoryMiB: 40_960,
    vcpus: 96,
    memoryMiB: 1_179_648,
  },
};

/** µUSD per hour: on-demand, and spot. */
export const PRICES: Record<string, { od: number; spot: number }> = {
  'g5.xlarge': { od: 1_006_000, spot: 400_000 },
  'g5.12xlarge': { od: 5_672_000, spot: 2_100_000 },
  'p3.2xlarge': { od: 3_060_000, spot: 900_000 },
  'p3.16xlarge': { od: 24_480_000, spot: 7_000_000 },
  'p4d.24xlarge': { od: 21_957_642, spot: 9_000_000 },
};

export function anOffering(instanceType: string, capacityType: CapacityType = 'on-demand', zone = 'us-east-1a'): Offering {
  return makeOffering({ cloud: 'aws', region: zone.slice(0, -1), zone, instanceType, capacityType });
}

export function aGroup(
  overrides: Partial<NodeGroup> & { instanceType?: string; capacityType?: CapacityType; zones?: string[] } = {},
): NodeGroup {
  const mig = overrides.migEnabled ? { migEnabled: true } : {};
  const type = overrides.instanceType ?? 'g5.xlarge';
  const capacityType = overrides.capacityType ?? 'on-demand';
  const zones = overrides.zones ?? ['us-east-1a'];
  return {
    id: overrides.id ?? `${type}-${capacityType}`,
    cloud: 'aws',
    region: 'us-east-1',
    offerings: overrides.offerings ?? zones.map((z) => anOffering(type, capacityType, z)),
    minSize: overrides.minSize ?? 0,
    maxSize: overrides.maxSize ?? 10,
    desiredCapacity: overrides.desiredCapacity ?? 0,
    ...mig,
    ...(overrides.warm ? { warm: overrides.warm } : {}),
  };
}

export function aNode(
  id: string,
  overrides: {
    group?: NodeGroup;
    instanceType?: string;
    capacityType?: CapacityType;
    zone?: string;
    state?: Instance['state'];
    record?: Partial<NodeRecord> | null;
    schedulable?: boolean;
  } = {},
): FleetNode {
  const type = overrides.instanceType ?? overrides.group?.offerings[0]?.instanceType ?? 'g5.xlarge';
  const capacityType = overrides.capacityType ?? overrides.group?.offerings[0]?.capacityType ?? 'on-demand';
  const zone = overrides.zone ?? overrides.group?.offerings[0]?.zone ?? 'us-east-1a';
  const it = INSTANCE_TYPES[type]!;
  const instance: Instance = {
    id,
    groupId: overrides.group?.id ?? `${type}-${capacityType}`,
    cloud: 'aws',
    region: zone.slice(0, -1),
    zone,
    instanceType: type,
    capacityType,
    state: overrides.state ?? 'running',
    launchedAtMs: T0 - 3_600_000,
  };
  const record: NodeRecord | undefined =
    overrides.record === null
      ? undefined
      : {
          instanceId: id,
          groupId: instance.groupId,
          registeredAtMs: T0 - 3_000_000,
          lastHeartbeatAtMs: T0,
          healthy: true,
          gpus: Array.from({ length: it.gpuCount }, (_, index) => ({ index, model: it.gpuModel, memoryMiB: it.gpuMemoryMiB })),
          ...overrides.record,
        };
  return {
    instance,
    ...(record ? { record } : {}),
    schedulable: overrides.schedulable ?? (record !== undefined && instance.state === 'running' && !record.draining),
  };
}

export function aTeam(id: string, overrides: Partial<Team> = {}): Team {
  return {
    id,
    weight: 1,
    tagProblems: [],
    budget: { amountMicroUsd: 1_000_000_000_000, period: 'monthly', action: 'alert', alertAtPct: [80, 100] },
    ...overrides,
  };
}

export function pricesFor(groups: readonly NodeGroup[]): Map<string, PriceQuote> {
  const out = new Map<string, PriceQuote>();
  for (const g of groups) {
    for (const o of g.offerings) {
      const p = PRICES[o.instanceType]!;
      out.set(o.id, {
        offeringId: o.id,
        priceMicroUsdPerHour: o.capacityType === 'spot' ? p.spot : p.od,
        onDemandMicroUsdPerHour: p.od,
        source: 'test',
      });
    }
  }
  return out;
}

export function aSnapshot(overrides: Partial<Omit<Snapshot, 'policy'>> & { policy?: Partial<Policy> } = {}): Snapshot {
  const groups = overrides.groups ?? [aGroup()];
  const jobs = [...(overrides.pendingJobs ?? []), ...(overrides.activeJobs ?? [])];
  const teams = overrides.teams ?? new Map([...new Set(jobs.map((j) => j.team))].map((t) => [t, aTeam(t)]));
  return {
    nowMs: overrides.nowMs ?? T0,
    pendingJobs: overrides.pendingJobs ?? [],
    activeJobs: overrides.activeJobs ?? [],
    groups,
    nodes: overrides.nodes ?? [],
    instanceTypes: overrides.instanceTypes ?? new Map(Object.entries(INSTANCE_TYPES)),
    prices: overrides.prices ?? pricesFor(groups),
    poolRiskPerHour: overrides.poolRiskPerHour ?? new Map(),
    unavailableUntilMs: overrides.unavailableUntilMs ?? new Map(),
    teams,
    spendMicroUsd: overrides.spendMicroUsd ?? new Map(),
    ...(overrides.committedMicroUsd ? { committedMicroUsd: overrides.committedMicroUsd } : {}),
    ...(overrides.degraded ? { degraded: overrides.degraded } : {}),
    ...(overrides.reservations ? { reservations: overrides.reservations } : {}),
    ...(overrides.spotModel ? { spotModel: overrides.spotModel } : {}),
    ...(overrides.saveBytes ? { saveBytes: overrides.saveBytes } : {}),
    policy: { ...DEFAULT_POLICY, ...overrides.policy },
  };
}

/** An active ODCR of four g5.xlarge in us-east-1a, billed at on-demand. */
export function aReservation(overrides: Partial<Reservation> = {}): Reservation {
  return {
    id: 'cr-0a1b2c3d4e5f60718',
    cloud: 'aws',
    region: 'us-east-1',
    zone: 'us-east-1a',
    instanceType: 'g5.xlarge',
    kind: 'odcr',
    interruptible: false,
    totalCount: 4,
    availableCount: 4,
    state: 'active',
    priceMicroUsdPerHour: PRICES['g5.xlarge']!.od,
    ...overrides,
  };
}

/** One attempt's measured GPU use: 9 GiB of a whole A100 80GB at 9% mean and 12% p95 utilisation (an oversized job). */
export function aGpuUse(overrides: Partial<AttemptGpuUse> = {}): AttemptGpuUse {
  return {
    attempt: 1,
    rank: 0,
    looks: 240,
    devices: 1,
    busyDevices: 1,
    model: 'A100-80GB',
    deviceMemoryMiB: 81_920,
    peakMemoryMiB: 9 * 1024,
    meanSmPct: 9,
    p95SmPct: 12,
    ...overrides,
  };
}

/** A finished, measured run of a job family (right-sizing's input): a whole A100 80GB used as aGpuUse says, an hour at on-demand. */
export function aRightsizeRun(
  jobId: string,
  endedAtMs: number,
  overrides: Partial<RightsizeRun> = {},
  use: Partial<AttemptGpuUse> = {},
): RightsizeRun {
  const { attempt: _attempt, rank: _rank, ...measured } = aGpuUse(use);
  return {
    jobId,
    endedAtMs,
    state: 'succeeded',
    gpu: { kind: 'whole', count: 1, models: ['A100-80GB'] },
    nodes: 1,
    use: measured,
    costMicroUsd: 5_120_000,
    ...overrides,
  };
}

/**
 * A simulated world of one team (`nlp`, the default budget tags) at {@link T0}, seed 1, machines
 * up 60 s after launch, with the groups (and any other options) the test gives.
 */
export function nlpWorld(
  options: Omit<SimEnvironmentOptions, 'startMs' | 'seed' | 'teams' | 'teamTags' | 'bootSec'> & Partial<SimEnvironmentOptions>,
): SimEnvironment {
  return createSimEnvironment({ startMs: T0, seed: 1, teams: ['nlp'], teamTags: defaultTeamTags(['nlp']), bootSec: 60, ...options });
}
