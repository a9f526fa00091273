import { describe, expect, it } from 'vitest';
import { plan as planSimple } from '../../core/planner/planner.ts';
import { fleetShapeFrom, intake } from '../../core/services/intake.ts';
import { reconcile } from '../../core/reconcile/reconcile.ts';
import { newPendingJob, type Job } from '../../core/job.ts';
import { checkJobSpec } from '../../core/job-spec.ts';
import { rightsizeFamily, runOf } from '../../core/rightsizing.ts';
import { DEFAULT_POLICY } from '../../core/snapshot.ts';
import { defaultTeamTags } from '../../cloud/sim/defaults.ts';
import { createSimEnvironment } from '../../cloud/sim/environment.ts';
import { aGpuUse, T0 } from '../builders.ts';

// Right-sizing's path through the services: reconcile notes what finished jobs used, intake gives the next submission its shape.

const SPEC = {
  image: 'ghcr.io/acme/ranker:3',
  command: ['python', 'rank.py'],
  gpu: { kind: 'whole', count: 1, models: ['A100-80GB'], rightsize: 'auto' },
  labels: { project: 'ranker' },
};

function env(migEnabled: boolean) {
  return createSimEnvironment({
    startMs: T0,
    seed: 1,
    teams: ['nlp'],
    teamTags: defaultTeamTags(['nlp']),
    groups: [
      {
        id: 'a100',
        instanceTypes: ['p4de.24xlarge'],
        zones: ['us-east-1a'],
        capacityType: 'on-demand',
        minSize: 0,
        maxSize: 2,
        migEnabled,
      },
    ],
  });
}

/** A job of the family that ran on a whole A100 and succeeded, using 9 GiB at 12% (p95). */
function finished(id: string, endedAtMs: number): Job {
  const c = checkJobSpec(SPEC);
  if (!c.ok) throw new Error(c.errors.join('; '));
  return {
    ...newPendingJob({ id, team: 'nlp', spec: c.spec, submittedAtMs: endedAtMs - 3_600_000 }),
    state: 'succeeded',
    version: 5,
    exitCode: 0,
    endedAtMs,
    updatedAtMs: endedAtMs,
    heldAttempts: [{ attempt: 1, nodes: [{ nodeId: 'i-gone', milliGpu: 1000 }], fromMs: endedAtMs - 3_600_000, toMs: endedAtMs }],
    usage: {
      attempts: 1,
      heldSec: 3600,
      gpuSec: 3600,
      spotSec: 0,
      costMicroUsd: 5_120_000,
      onDemandMicroUsd: 5_120_000,
      reworkSec: 0,
      gpuUse: [aGpuUse()],
    },
  };
}

const submit = (e: ReturnType<typeof env>, token: string, body = SPEC) =>
  intake(
    {
      jobs: e.jobs,
      clock: e.clock,
      fleetShape: fleetShapeFrom(e.ports.providers, e.catalog.instanceTypes, e.clock),
      rightsizing: { families: e.families, offers: e.offers },
    },
    { team: 'nlp', body: JSON.stringify(body), token },
  );

describe('right-sizing through reconcile and intake', () => {
  it("reconcile notes each finished job's measured run in its family; a run it sees again is kept once", async () => {
    const e = env(true);
    e.clock.advanceTo(T0 + 3_600_000);
    await e.jobs.create(finished('nlp.r1', T0 + 3_500_000));
    await e.jobs.create(finished('nlp.r2', T0 + 3_550_000));
    await reconcile(e.ports, { planner: planSimple, policy: DEFAULT_POLICY });
    e.clock.advanceTo(T0 + 3_660_000);
    await reconcile(e.ports, { planner: planSimple, policy: DEFAULT_POLICY });
    const family = rightsizeFamily('nlp', { image: SPEC.image, labels: SPEC.labels });
    expect((await e.families.runs(family)).map((r) => r.jobId)).toEqual(['nlp.r1', 'nlp.r2']);
  });

  it('the next auto submission takes the 2g.20gb slice, says why on the job, and a repeat delivery of it is a duplicate', async () => {
    const e = env(true);
    const family = rightsizeFamily('nlp', { image: SPEC.image, labels: SPEC.labels });
    await e.families.note([finished('nlp.r1', T0 - 2), finished('nlp.r2', T0 - 1)].map((j) => ({ family, run: runOf(j)! })));
    const out = await submit(e, 'next');
    expect(out).toMatchObject({
      outcome: 'accepted',
      job: {
        spec: { gpu: { kind: 'mig', profile: '2g.20gb', models: ['A100-80GB'], rightsize: 'auto' } },
        rightsize: { mode: 'auto', applied: true, from: SPEC.gpu, family },
      },
    });
    expect((await e.jobs.get('nlp.next'))!.rightsize!.why).toMatch(/^ran in MIG 2g.20gb \(A100-80GB\) instead of 1 × A100-80GB/);
    expect(await submit(e, 'next')).toMatchObject({ outcome: 'duplicate' });
    expect(await submit(e, 'next', { ...SPEC, command: ['python', 'other.py'] })).toMatchObject({ outcome: 'token-reused' });
  });

  it('a fleet without MIG groups: the slice cannot run, so the next shape that holds it is taken, or none', async () => {
    const e = env(false);
    const family = rightsizeFamily('nlp', { image: SPEC.image, labels: SPEC.labels });
    await e.families.note([finished('nlp.r1', T0 - 2), finished('nlp.r2', T0 - 1)].map((j) => ({ family, run: runOf(j)! })));
    const out = await submit(e, 'next');
    // Only A100 machines here: no other model, so a time-sliced share of the A100.
    expect(out).toMatchObject({ outcome: 'accepted', job: { spec: { gpu: { kind: 'fraction', milliGpu: 150, memoryMiB: 11_264 } } } });
    expect(out.outcome === 'accepted' && out.job.rightsize!.why).toMatch(
      /MIG 2g.20gb \(A100-80GB\) comes first but no node group can run it/,
    );
  });
});
