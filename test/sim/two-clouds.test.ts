import { describe, expect, it } from 'vitest';
import type { Job } from '../../core/job.ts';
import { acrossClouds, BUILT_IN_SPOT, BUILT_IN_TRACE, defaultTeamTags, simGroupsFor } from '../../cloud/sim/defaults.ts';
import { faultProfile, type FaultProfile } from '../../cloud/sim/faults.ts';
import { DEFAULT_SIM_START_MS, runSimulation, type SpotSetup } from '../../cloud/sim/simulation.ts';
import { SIM_GCP_PROJECT } from '../../cloud/sim/sim-cloud.ts';
import { loadWorkload } from '../../cloud/sim/workload.ts';

const HOUR = 3_600_000;
const workload = acrossClouds(loadWorkload(BUILT_IN_TRACE, { hours: 6, maxJobs: 150 }));
const base = { workload, groups: simGroupsFor(['aws', 'gcp']), teamTags: defaultTeamTags(workload.teams), seed: 1, hours: 8 };
const models = (j: Job) => (j.spec.gpu.kind === 'mig' ? [] : (j.spec.gpu.models ?? []));
const gcpOnly = (j: Job) => models(j).length === 1 && models(j)[0] === 'A100-40GB';

describe('the simulator with two clouds', () => {
  it('splits the V100 trace into AWS-only, GCP-only and either, deterministically', () => {
    const kinds = new Map<string, number>();
    for (const j of workload.jobs) {
      const g = j.spec.gpu;
      const key = g.kind === 'mig' ? 'mig' : JSON.stringify(g.models);
      kinds.set(key, (kinds.get(key) ?? 0) + 1);
    }
    expect([...kinds.keys()].sort()).toEqual(['["A100-40GB"]', '["V100","A100-40GB"]', '["V100"]']);
    expect(acrossClouds(loadWorkload(BUILT_IN_TRACE, { hours: 6, maxJobs: 150 }))).toEqual(workload);
  });

  it('runs GCP zonal groups beside AWS, each cloud its own provider; a GCP preemption is seen by the agent 30 s ahead and found by polling after', async () => {
    // Spot machines are taken back only on GCP, about twice an hour each.
    const gcpOnlyRisk: SpotSetup = { kind: 'rates', ratePerHour: (o) => (o.zone.startsWith('us-west-2') ? 0 : 2) };
    // The first 60 jobs made three-hour runs that checkpoint every 10 minutes, so preemptions meet running work.
    const long = {
      ...workload,
      jobs: workload.jobs.slice(0, 60).map((j) => ({
        ...j,
        workSec: 3 * 3600,
        spec: { ...j.spec, expectedRuntimeSec: 3 * 3600, checkpoint: { intervalSec: 600 } },
      })),
    };
    const { summary, env, jobs } = await runSimulation({ ...base, workload: long, spot: gcpOnlyRisk });
    expect(env.ports.providers.map((p) => p.cloud)).toEqual(['aws', 'gcp']);
    expect(summary).toMatchObject({ lost: 0, duplicated: 0, violations: 0 });
    expect(summary.interruptions).toBeGreaterThan(3);
    // Both clouds ran work.
    const launched = Object.entries(summary.groupActivity).filter(([, a]) => a.launched > 0);
    expect(launched.some(([id]) => id.startsWith('a2-'))).toBe(true);
    expect(launched.some(([id]) => id.startsWith('p3-'))).toBe(true);
    // The agent's notice rule checkpointed and requeued the work on the preempted machines...
    const preempted = jobs.filter((j) => j.requeueReason?.message.includes('preempted notice (instance/preempted)'));
    expect(preempted.length).toBeGreaterThan(0);
    // ... and the reconcile's poll of the zone operations (production's GcpPreemptions) counted each against its pool.
    const stats = await env.pools.stats(0);
    const gcpInterruptions = [...stats].filter(([id]) => id.startsWith('gcp/')).reduce((n, [, s]) => n + s.interruptions, 0);
    let preemptionOps = 0;
    for (const zone of ['us-central1-a', 'us-central1-b', 'us-west1-b'])
      for await (const op of env.cloud.zoneOperations.listAsync({ project: SIM_GCP_PROJECT, zone }))
        if (op.operationType === 'compute.instances.preempted') preemptionOps++;
    // (A machine found idle in its 30 s is scaled in before it is preempted: the market counted it, Compute Engine did not.)
    expect(preemptionOps).toBeGreaterThan(20);
    expect(preemptionOps).toBeLessThanOrEqual(summary.interruptions);
    expect(gcpInterruptions).toBe(preemptionOps);
    expect(Object.keys(summary.waitByCloud ?? {})).toEqual(['aws', 'gcp']);
  }, 60_000);

  it('with GCP out for an hour: AWS is planned and applied all along, GCP-only work waits with provider-degraded, GCP comes back on its first good call, nothing is lost', async () => {
    const outage: FaultProfile = { name: 'outage', description: 'GCP down from 1 h to 2 h', outage: { cloud: 'gcp', atHour: 1, hours: 1 } };
    const awsCalls = (calls: readonly { method: string; args: unknown[] }[]) =>
      calls.filter((c) => c.method === 'setDesiredCapacity' && String(c.args[0]).startsWith('p3-')).length;
    const seen = { awsCallsAt1h: 0, awsCallsAt2h: 0 };
    const { summary, env } = await runSimulation({
      ...base,
      spot: { kind: 'none' },
      faults: outage,
      onTick: async (e, t) => {
        if (t === HOUR + 60_000) seen.awsCallsAt1h = awsCalls(e.cloud.calls);
        if (t === 2 * HOUR) seen.awsCallsAt2h = awsCalls(e.cloud.calls);
      },
    });
    expect(summary).toMatchObject({ lost: 0, duplicated: 0, violations: 0 });
    expect(summary.faults.outageErrors).toBeGreaterThan(0);
    expect(summary.faults.reconcileFailures).toBe(0);
    // AWS kept being scaled during the outage.
    expect(seen.awsCallsAt2h).toBeGreaterThan(seen.awsCallsAt1h);
    const decisions = await env.decisions.recent(2_000);
    const during = decisions.filter((d) => d.atMs >= DEFAULT_SIM_START_MS + HOUR && d.atMs < DEFAULT_SIM_START_MS + 2 * HOUR);
    expect(during.length).toBeGreaterThan(50);
    // Only work GCP alone could run waited for the outage, with the reason saying so.
    const held = new Set(during.flatMap((d) => d.plan.waiting.filter((w) => w.reason.code === 'provider-degraded').map((w) => w.jobId)));
    expect(held.size).toBeGreaterThan(0);
    for (const id of held) expect(gcpOnly((await env.jobs.get(id))!)).toBe(true);
    expect(during[0]!.plan.waiting.find((w) => held.has(w.jobId))?.reason.message).toMatch(
      /no healthy node group offers a machine that can hold .*; gcp is left out \(its calls fail: gcp is not answering/,
    );
    for (const d of during)
      expect(d.degraded).toEqual([expect.objectContaining({ cloud: 'gcp', code: 'unavailable', sinceMs: DEFAULT_SIM_START_MS + HOUR })]);
    const after = decisions.filter((d) => d.atMs >= DEFAULT_SIM_START_MS + 2 * HOUR);
    expect(after.length).toBeGreaterThan(0);
    expect(after.every((d) => d.degraded === undefined)).toBe(true);
    // What AWS alone could run waited as long as without the outage (within 10% at p95).
    const calm = await runSimulation({ ...base, spot: { kind: 'none' } });
    expect(summary.waitByCloud!.aws!.p95WaitSec).toBeLessThanOrEqual(calm.summary.waitByCloud!.aws!.p95WaitSec * 1.1);
  }, 90_000);

  it('fault profiles aimed at one cloud: api-errors:gcp, cloud-outage:aws; anything else is refused with what is allowed', async () => {
    expect(faultProfile('api-errors:gcp')).toMatchObject({ name: 'api-errors:gcp', apiErrorRate: 0.1, apiErrorCloud: 'gcp' });
    expect(faultProfile('cloud-outage:aws').outage).toEqual({ cloud: 'aws', atHour: 16, hours: 1 });
    expect(faultProfile('cloud-outage').outage?.cloud).toBeUndefined();
    expect(() => faultProfile('api-errors:azure')).toThrow(
      /only api-errors and cloud-outage take a cloud, as api-errors:gcp .*clouds: aws, gcp/,
    );
    expect(() => faultProfile('slow-uploads:gcp')).toThrow(/only api-errors and cloud-outage take a cloud/);
    expect(() => faultProfile('nope')).toThrow(/unknown fault profile "nope"; profiles: none, /);
    // api-errors:gcp fails GCP's calls only: AWS is never degraded.
    const { summary, env } = await runSimulation({ ...base, hours: 3, spot: BUILT_IN_SPOT, faults: faultProfile('api-errors:gcp') });
    expect(summary.faults.apiErrors).toBeGreaterThan(0);
    expect(summary.lost).toBe(0);
    const degraded = (await env.decisions.recent(2_000)).flatMap((d) => d.degraded ?? []);
    expect(degraded.length).toBeGreaterThan(0);
    expect(new Set(degraded.map((d) => d.cloud))).toEqual(new Set(['gcp']));
  }, 60_000);
});
