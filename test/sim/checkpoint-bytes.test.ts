import { describe, expect, it } from 'vitest';
import { SimCheckpointBucket } from '../../cloud/sim/checkpoint-bucket.ts';
import { VirtualClock } from '../../cloud/sim/clock.ts';
import { BUILT_IN_SPOT, BUILT_IN_TRACE, DEFAULT_SIM_GROUPS, defaultTeamTags } from '../../cloud/sim/defaults.ts';
import { MemoryCheckpointStore, MemoryJobStore } from '../../cloud/sim/memory-stores.ts';
import { runSimulation } from '../../cloud/sim/simulation.ts';
import { loadWorkload } from '../../cloud/sim/workload.ts';
import { defaultNetworkLayout, type Site } from '../../core/bytes.ts';
import { checkpointFolder } from '../../core/job.ts';
import { aJob } from '../builders.ts';

const GIB = 2 ** 30;
const HOUR = 3_600_000;

describe('the simulated checkpoint bucket: what is kept, for how long, and who pays', () => {
  it('holds each part from its upload until the sweep lets it go, and counts its storage, requests and path to its team', async () => {
    const clock = new VirtualClock(Date.UTC(2026, 10, 2));
    const jobs = new MemoryJobStore();
    const checkpoints = new MemoryCheckpointStore(clock, 's3://bucket/checkpoints/');
    const job = { ...aJob({ id: 'nlp.b', state: 'running' as const }), team: 'nlp' };
    await jobs.create(job);
    const machine: Site = { cloud: 'aws', region: 'us-west-2', zone: 'us-west-2b' };
    const bucket = new SimCheckpointBucket({
      clock,
      jobs,
      checkpoints,
      store: { cloud: 'aws', region: 'us-west-2' },
      layout: { s3Path: 'nat', natZones: ['us-west-2a'] },
      retentionDays: 30,
    });
    // Three saves of 10 GiB an hour apart, each complete when it lands.
    const locations: string[] = [];
    for (let k = 1; k <= 3; k++) {
      const location = `${checkpointFolder('s3://bucket/checkpoints/', job.id, 1)}step-${k}/`;
      locations.push(location);
      bucket.put({ objectUri: location, jobId: job.id, team: 'nlp', bytes: 10 * GIB, machine });
      await checkpoints.markComplete({ jobId: job.id, attempt: 1, location, completedAtMs: clock.nowMs(), progressSec: k * 3600 });
      if (k < 3) clock.advanceBy(HOUR);
    }
    // The first save is superseded: gone at the sweep, after two hours. The second was replaced just now: kept for an hour.
    expect((await bucket.sweep()).deleted).toBe(1);
    expect(locations.map((l) => bucket.has(l))).toEqual([false, true, true]);
    clock.advanceBy(HOUR);
    expect((await bucket.sweep()).deleted).toBe(1);
    expect(locations.map((l) => bucket.has(l))).toEqual([false, false, true]);
    // A resume reads the newest back.
    bucket.get({ objectUri: locations[2]!, team: 'nlp', bytes: 10 * GIB, machine });
    const account = bucket.account(clock.nowMs());
    const use = account.byTeam.get('nlp')!['aws:us-west-2']!;
    expect(use.bytesUploaded).toBe(30 * GIB);
    expect(use.bytesDownloaded).toBe(10 * GIB);
    // 10 GiB for 2 h (the first), 2 h (the second) and 1 h (the newest, to now).
    expect(use.storageGiBHours).toBeCloseTo(50, 9);
    // 10 GiB in 160 parts of 64 MiB, plus initiate and complete, per upload; 160 GETs to read it back.
    expect(use.writeRequests).toBe(3 * 162);
    expect(use.readRequests).toBe(160);
    // Through the one NAT gateway, in another zone: NAT processing each way, and a zone crossed each way.
    expect(use.transferBytes).toEqual({ nat: 40 * GIB, 'cross-zone': 80 * GIB });
    expect(account).toMatchObject({ uploads: 3, downloads: 1, deletedObjects: 2, heldObjects: 1, heldBytes: 10 * GIB });
  });
});

describe('a simulation bills the checkpoint bytes of gpu-fleet and of every baseline, on the path the deployment has', () => {
  const workload = loadWorkload(BUILT_IN_TRACE, { hours: 6, maxJobs: 150 });
  const run = (policy: 'gpu-fleet' | 'on-demand', network?: ReturnType<typeof defaultNetworkLayout>) =>
    runSimulation({
      workload,
      groups: DEFAULT_SIM_GROUPS,
      teamTags: defaultTeamTags(workload.teams),
      policy,
      seed: 1,
      hours: 6,
      spot: BUILT_IN_SPOT,
      ...(network ? { network } : {}),
    });

  it('through the gateway endpoint the network is free; through one NAT gateway the same bytes pay its processing and the crossings', async () => {
    const [viaGateway, viaNat, onDemand] = await Promise.all([
      run('gpu-fleet'),
      run('gpu-fleet', { s3Path: 'nat', natZones: ['us-west-2a'] }),
      run('on-demand'),
    ]);
    const g = viaGateway.summary.checkpointBytes;
    const n = viaNat.summary.checkpointBytes;
    expect(g.bytesUploaded).toBeGreaterThan(100 * GIB);
    expect(g.network).toEqual(defaultNetworkLayout(['us-west-2a', 'us-west-2b']));
    expect(g.bill.networkMicroUsd).toBe(0);
    expect(g.bill.storageMicroUsd).toBeGreaterThan(0);
    expect(g.bill.requestsMicroUsd).toBeGreaterThan(0);
    // The same run, the same bytes; the NAT path charges at least $0.045 a GB (us-west-2) of them.
    expect(n.bytesUploaded).toBe(g.bytesUploaded);
    expect(n.bill.networkMicroUsd).toBeGreaterThanOrEqual(Math.floor(((n.bytesUploaded + n.bytesDownloaded) / 1e9) * 45_000));
    // The whole bill is the machines and the bytes; the teams' byte bills add up to it.
    for (const s of [viaGateway.summary, viaNat.summary, onDemand.summary]) {
      expect(s.wholeBillMicroUsd).toBe(s.costMicroUsd + s.checkpointBytes.bill.totalMicroUsd);
      const teams = Object.values(s.checkpointBytes.billByTeam).reduce((a, b) => a + b.totalMicroUsd, 0);
      expect(teams).toBe(s.checkpointBytes.bill.totalMicroUsd);
    }
    // The teams are charged for their bytes as a deployment charges them (the agents' reported sizes, in the index's byte
    // logs, through spend accrual): within half a percent of the bucket's own account, team by team, on either path.
    for (const b of [g, n])
      for (const [team, bill] of Object.entries(b.billByTeam)) {
        const charged = b.chargedByTeam[team] ?? 0;
        expect({ team, off: Math.abs(charged - bill.totalMicroUsd) / bill.totalMicroUsd < 0.005 }).toEqual({ team, off: true });
      }
    // A baseline's checkpoints are billed the same way.
    expect(onDemand.summary.checkpointBytes.bytesUploaded).toBeGreaterThan(0);
    expect(onDemand.summary.checkpointBytes.bill.totalMicroUsd).toBeGreaterThan(0);
  }, 120_000);
});
