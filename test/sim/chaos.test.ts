import { describe, expect, it } from 'vitest';
import type { NodeGroup } from '../../core/fleet.ts';
import type { Job, Placement } from '../../core/job.ts';
import { BUILT_IN_SPOT, BUILT_IN_TRACE, DEFAULT_SIM_GROUPS, defaultTeamTags } from '../../cloud/sim/defaults.ts';
import { applyJobEvent } from '../../core/services/job-updates.ts';
import { intake } from '../../core/services/intake.ts';
import { requeueAttempt } from '../../core/services/requeue.ts';
import { SeededRandom } from '../../cloud/sim/clock.ts';
import { createSimEnvironment } from '../../cloud/sim/environment.ts';
import { conflictingJobs, FAULT_PROFILES } from '../../cloud/sim/faults.ts';
import { SimAgents } from '../../cloud/sim/sim-agent.ts';
import { checkInvariants, type InvariantInput } from '../../cloud/sim/invariants.ts';
import { MemorySpendLedger } from '../../cloud/sim/memory-stores.ts';
import { runSimulation } from '../../cloud/sim/simulation.ts';
import { loadWorkload } from '../../cloud/sim/workload.ts';
import { benchChaos } from '../../bench/chaos.ts';
import { aJob, aNode, aGroup, T0 } from '../builders.ts';

const group: NodeGroup = aGroup({ id: 'g', maxSize: 2, desiredCapacity: 1 });
function world(over: Partial<InvariantInput> = {}): InvariantInput {
  const jobs: Job[] = [
    aJob({ id: 'nlp.a', team: 'nlp' }),
    aJob({ id: 'nlp.b', team: 'nlp', state: 'running', attempt: 2, placedAtMs: T0 }),
  ];
  return {
    atMs: T0,
    jobs,
    submitted: new Set(['nlp.a', 'nlp.b']),
    processes: [{ instanceId: 'i-1', jobId: 'nlp.b', attempt: 2, rank: 0 }],
    checkpointTimeoutSec: () => 300,
    groups: [group],
    instances: [aNode('i-1', { group }).instance],
    exitCodeOf: () => 0,
    lost: [],
    lostSlackSec: 95,
    teamTags: [],
    ledger: new MemorySpendLedger(),
    overBudgetSince: new Map(),
    reconcileIntervalMs: 60_000,
    ...over,
  };
}
const names = async (x: InvariantInput) => (await checkInvariants(x, { upTo: 0 })).map((v) => v.invariant);

/** One spot machine running job nlp.a (placed, its agent registered): a world for an agent's write races. */
async function oneJobOnOneMachine(spec: Record<string, unknown> = {}, placed: Pick<Placement, 'saves'> = {}) {
  const env = createSimEnvironment({
    startMs: T0,
    seed: 1,
    teams: ['nlp'],
    teamTags: defaultTeamTags(['nlp']),
    bootSec: 60,
    groups: [{ id: 'g', instanceTypes: ['p3.2xlarge'], zones: ['us-west-2a'], capacityType: 'spot', minSize: 0, maxSize: 2 }],
  });
  await env.cloud.setDesiredCapacity('g', 1);
  env.clock.advanceBy(120_000);
  env.cloud.tick();
  const [inst] = await env.cloud.listInstances();
  await intake(env, {
    team: 'nlp',
    token: 'a',
    body: JSON.stringify({ image: 'x/y:1', command: ['run'], gpu: { kind: 'whole', count: 1 }, ...spec }),
  });
  await env.nodes.register({
    instanceId: inst!.id,
    groupId: 'g',
    registeredAtMs: T0,
    lastHeartbeatAtMs: T0,
    healthy: true,
    gpus: [{ index: 0, model: 'V100', memoryMiB: 16_384 }],
  });
  await env.nodes.assign(inst!.id, 'nlp.a', 1);
  await applyJobEvent(
    env.jobs,
    'nlp.a',
    { type: 'place', attempt: 1, placement: { nodes: [{ nodeId: inst!.id, gpuIndices: [0] }], capacityType: 'spot', ...placed } },
    T0,
  );
  return env;
}

/** Simulated agents over one world's stores, each job `workSec` of work; `over` replaces any option (a store, a fault). */
function agentsOver(
  env: Awaited<ReturnType<typeof oneJobOnOneMachine>>,
  workSec: number,
  over: Partial<ConstructorParameters<typeof SimAgents>[0]> = {},
): SimAgents {
  return new SimAgents({
    clock: env.clock,
    jobs: env.jobs,
    nodes: env.nodes,
    checkpoints: env.checkpoints,
    instanceTypes: env.catalog.instanceTypes,
    workSecOf: () => workSec,
    ...over,
  });
}

describe('simulated agents: how often a job saves', () => {
  it('saves at the cadence its placement chose, as the real agent asks the job to, not at the spec’s longest gap', async () => {
    const saved = async (placed: Pick<Placement, 'saves'>) => {
      const env = await oneJobOnOneMachine({ checkpoint: { intervalSec: 1800 } }, placed);
      const agents = agentsOver(env, 4 * 3600);
      for (let k = 0; k < 4 * 40; k++) {
        await agents.tick(await env.cloud.listInstances());
        env.clock.advanceBy(15_000);
      }
      return (await env.checkpoints.byteLogs(0)).flatMap((l) => l.saves).length;
    };
    // 40 minutes of work: every 5 minutes is 7 or 8 saves; every 30 minutes, 1.
    expect(await saved({ saves: { everySec: 300, hazardPerHour: 3, savePriceMicroUsd: 50_000, by: 'price' } })).toBeGreaterThanOrEqual(7);
    expect(await saved({})).toBe(1);
  });
});

describe('invariants', () => {
  it('hold in a sound world', async () => {
    expect(await names(world())).toEqual([]);
  });

  it('each one fires when its promise is broken, with a message that says what and where', async () => {
    expect(await names(world({ submitted: new Set(['nlp.a', 'nlp.b', 'nlp.gone']) }))).toEqual(['one state per job']);
    const proc = (instanceId: string, attempt: number, rank = 0) => ({ instanceId, jobId: 'nlp.b', attempt, rank });
    expect(await names(world({ processes: [proc('i-1', 1), proc('i-2', 2)] }))).toEqual(['no two running attempts']);
    expect(await names(world({ processes: [proc('i-1', 1)] }))).toEqual(['no two running attempts']);
    // One rank on two machines (one of them being drained, say) is the job running twice too; two ranks of a gang are not.
    expect(await names(world({ processes: [proc('i-1', 2), proc('i-2', 2)] }))).toEqual(['no two running attempts']);
    expect(await names(world({ processes: [proc('i-1', 2, 0), proc('i-2', 2, 1)] }))).toEqual([]);
    const failed = aJob({ id: 'nlp.a', team: 'nlp', state: 'failed', exitCode: 137 });
    const v = await checkInvariants(world({ jobs: [failed], submitted: new Set(['nlp.a']), processes: [] }), { upTo: 0 });
    expect(v.map((x) => x.message)).toEqual([
      expect.stringMatching(/job nlp.a failed with exit code 137, not its program's 0: the platform failed it/),
    ]);
    expect(await names(world({ groups: [{ ...group, desiredCapacity: 3 }] }))).toEqual(['no group above its max']);
    const three = ['i-1', 'i-2', 'i-3'].map((id) => aNode(id, { group }).instance);
    expect(await names(world({ instances: three }))).toEqual(['no group above its max']);
    expect(await names(world({ lost: [{ jobId: 'nlp.b', attempt: 1, lostSec: 2000, allowedSec: 690, checkpointFailed: false }] }))).toEqual(
      ['bounded rework'],
    );
    // Checkpointing past its timeout plus one reconcile interval (300 s + 60 s here).
    const asked = (agoSec: number) =>
      aJob({ id: 'nlp.b', team: 'nlp', state: 'checkpointing', attempt: 2, placedAtMs: T0, checkpointRequestedAtMs: T0 - agoSec * 1000 });
    expect(await names(world({ jobs: [world().jobs[0]!, asked(360)] }))).toEqual([]);
    const stuck = await checkInvariants(world({ jobs: [world().jobs[0]!, asked(361)] }), { upTo: 0 });
    expect(stuck.map((x) => x.message)).toEqual([expect.stringMatching(/job nlp.b has been checkpointing for 361 s; .* allow 360 s/)]);
    // A failed checkpoint voids the bound; a job without checkpoints has none.
    expect(
      await names(
        world({
          lost: [
            { jobId: 'nlp.b', attempt: 1, lostSec: 2000, allowedSec: 690, checkpointFailed: true },
            { jobId: 'nlp.a', attempt: 1, lostSec: 9000, checkpointFailed: false },
          ],
        }),
      ),
    ).toEqual([]);
  });

  it('a hold team over its budget gets no new placement after one reconcile interval', async () => {
    const ledger = new MemorySpendLedger();
    await ledger.accrue({ team: 'nlp', period: '2026-11', fromMs: T0 - 3_600_000, toMs: T0, amountMicroUsd: 200_000_000 });
    const teamTags = [
      {
        team: 'nlp',
        resource: 'arn:aws:sqs:us-east-1:123456789012:gpu-fleet-team-nlp',
        tags: {
          'gpu-fleet:team': 'nlp',
          'gpu-fleet:budget-usd': '100',
          'gpu-fleet:budget-period': 'monthly',
          'gpu-fleet:budget-action': 'hold',
        },
      },
    ];
    const overBudgetSince = new Map<string, number>();
    const late = aJob({ id: 'nlp.c', team: 'nlp', state: 'running', placedAtMs: T0 + 5 * 60_000 });
    expect(await names(world({ ledger, teamTags, overBudgetSince }))).toEqual([]);
    expect(
      await names(
        world({
          atMs: T0 + 6 * 60_000,
          ledger,
          teamTags,
          overBudgetSince,
          jobs: [...world().jobs, late],
          submitted: new Set(['nlp.a', 'nlp.b', 'nlp.c']),
        }),
      ),
    ).toEqual(['hold keeps the budget']);
  });
});

describe('the control loop under faults (simulated cloud, invariants checked every minute)', () => {
  const workload = loadWorkload(BUILT_IN_TRACE, { hours: 24 });
  const base = { workload, groups: DEFAULT_SIM_GROUPS, teamTags: defaultTeamTags(workload.teams), seed: 1, hours: 24, spot: BUILT_IN_SPOT };

  it('loses no job, runs none twice and breaks no invariant with every fault at once', async () => {
    const { summary } = await runSimulation({ ...base, faults: FAULT_PROFILES.all!, invariants: 'stop' });
    expect(summary).toMatchObject({ lost: 0, duplicated: 0, violations: 0 });
    const f = summary.faults;
    const kinds = [
      'apiErrors',
      'storeConflicts',
      'crashes',
      'duplicateEvents',
      'stormInterruptions',
      'deadAgents',
      'agentsDown',
      'watchdogStopped',
      'checkpointFailures',
      'uploadFailures',
      'uploadsGivenUp',
      'rankStartFailures',
      'unansweredAgentCalls',
      'fencedAttempts',
      'redelivered',
    ] as const;
    expect(kinds.filter((k) => f[k] === 0)).toEqual([]);
    // The simulated agents go through the agent API's rules, and through every fault none of their calls is refused.
    expect(f.agentCallsRefused).toBe(0);
    expect(summary.accepted).toBe(summary.completed + summary.failed + summary.cancelled + summary.runningAtEnd + summary.pendingAtEnd);
  }, 120_000);

  it("agents that die while their containers run on: none lost, none run twice, nothing requeued wrongly; without the machines' watchdog, broken", async () => {
    const profile = FAULT_PROFILES['agent-dies']!;
    const { summary } = await runSimulation({ ...base, faults: profile, invariants: 'stop' });
    expect(summary).toMatchObject({ lost: 0, duplicated: 0, violations: 0 });
    const f = summary.faults;
    expect(f.wrongfulRequeues).toBe(0);
    // Some agents came back and adopted their containers; the others' containers were stopped by the watchdog.
    expect(f.agentsDown).toBeGreaterThan(0);
    expect(f.agentRestarts).toBeGreaterThan(0);
    expect(f.adopted).toBeGreaterThan(0);
    expect(f.watchdogStopped).toBeGreaterThan(0);
    // The same world without the watchdog: a dead agent's containers run on past the point where their work is requeued.
    const bare = await runSimulation({ ...base, faults: { ...profile, noWatchdog: true }, invariants: 'count' });
    expect(bare.summary.faults.wrongfulRequeues + bare.summary.violations).toBeGreaterThan(0);
  }, 120_000);

  it('prints the same rows for the same seed: every fault and the services at once, run twice (issue 63)', async () => {
    const options = { hours: 2, seed: 1, profiles: ['all'], services: true };
    const [one, two] = [await benchChaos(options), await benchChaos(options)];
    expect(two.rows).toEqual(one.rows);
    expect(one.rows[0]!.services).toBeDefined();
  }, 120_000);

  it('an outage of the agent API requeues nothing as lost while its machines run it: the agents fence themselves, and their work resumes', async () => {
    const profile = FAULT_PROFILES['agent-api-outage']!;
    const { summary } = await runSimulation({ ...base, hours: 17, faults: profile, invariants: 'stop' });
    expect(summary).toMatchObject({ lost: 0, duplicated: 0, violations: 0 });
    expect(summary.faults.unansweredAgentCalls).toBeGreaterThan(0);
    expect(summary.faults.fencedAttempts).toBeGreaterThan(0);
    expect(summary.faults.wrongfulRequeues).toBe(0);
    // The rule as it was (a silent machine's work requeued at the 90 s heartbeat timeout, correlated silence unknown): the count catches it.
    const old = await runSimulation({
      ...base,
      hours: 17,
      faults: { ...profile, policy: { silenceShare: 2, silentRequeueSec: 90 } },
      invariants: 'count',
    });
    expect(old.summary.faults.wrongfulRequeues).toBeGreaterThan(0);
  }, 120_000);

  it("stops at the first broken invariant with a clear message (a running job marked failed behind the loop's back)", async () => {
    const sabotage = (env: Parameters<NonNullable<Parameters<typeof runSimulation>[0]['onTick']>>[0], t: number) => {
      if (t !== 2 * 3_600_000) return;
      const victim = env.jobs.all().find((j) => j.state === 'running')!;
      env.jobs.restore([{ ...victim, state: 'failed', exitCode: 99, version: victim.version + 1 }]);
    };
    await expect(runSimulation({ ...base, hours: 3, onTick: sabotage })).rejects.toThrow(
      /invariant "nothing lost" broken at 2026-11-02T02:01:00.000Z: job \S+ failed with exit code 99, not its program's 0: the platform failed it/,
    );
  }, 60_000);

  it('an agent that loses the same write race again and again tries again at its next tick instead of dying', async () => {
    const env = await oneJobOnOneMachine();
    const counts = { injected: 0 };
    const agents = agentsOver(env, 60, { jobs: conflictingJobs(env.jobs, new SeededRandom(1), 1, counts) });
    await expect(agents.tick(await env.cloud.listInstances())).resolves.toBeUndefined();
    expect(agents.stats.writeRetries).toBe(1);
    expect(counts.injected).toBe(5);
    expect((await env.jobs.get('nlp.a'))!.state).toBe('placed');
    // Once the race is won, the job starts.
    const fair = agentsOver(env, 60);
    await fair.tick(await env.cloud.listInstances());
    expect((await env.jobs.get('nlp.a'))!.state).toBe('running');
  });

  it('a checkpoint marked complete again, after its job write lost every race, is attached as the index recorded it (not refused)', async () => {
    const env = await oneJobOnOneMachine({ checkpoint: { intervalSec: 60 } });
    // Every write that attaches a checkpoint loses its race while `racing` holds; every other write goes through.
    let racing = true;
    const jobs = new Proxy(env.jobs, {
      get(target, prop, receiver) {
        const v = Reflect.get(target, prop, receiver) as unknown;
        if (prop === 'update')
          return async (job: Job, expected: number) => {
            const stored = await target.get(job.id);
            if (racing && job.checkpoint && job.checkpoint.location !== stored?.checkpoint?.location) return { ok: false, current: stored };
            return target.update(job, expected);
          };
        return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
      },
    });
    const agents = agentsOver(env, 3600, { jobs });
    // Run until the first checkpoint is complete in the index while the job's write of it keeps losing.
    for (let k = 0; k < 40 && !(await env.checkpoints.latest('nlp.a')); k++) {
      await agents.tick(await env.cloud.listInstances());
      env.clock.advanceBy(15_000);
    }
    const recorded = await env.checkpoints.latest('nlp.a');
    expect(recorded).toBeDefined();
    expect((await env.jobs.get('nlp.a'))!.checkpoint).toBeUndefined();
    // The race is won at the next tick: the completion is marked again (dated now), and the job names the index's record.
    racing = false;
    await agents.tick(await env.cloud.listInstances());
    expect(agents.stats.refusedCalls).toBe(0);
    expect((await env.jobs.get('nlp.a'))!.checkpoint).toEqual(recorded);
  });

  it('a checkpoint whose upload completes after reconcile gave up on it and requeued the job is kept in the index, and the agent writes nothing to the job it no longer holds (not refused)', async () => {
    const env = await oneJobOnOneMachine({ checkpoint: { intervalSec: 600 } });
    // The first two tries of every upload fail: the save is still under way when reconcile gives up on it.
    const agents = agentsOver(env, 3600, { uploadFails: ({ tries }) => tries < 3 });
    const tick = async () => {
      await agents.tick(await env.cloud.listInstances());
      env.clock.advanceBy(15_000);
    };
    for (let k = 0; k < 8; k++) await tick();
    expect((await env.jobs.get('nlp.a'))!.state).toBe('running');
    // The control plane asks for a checkpoint (a preemption); the agent starts saving, and its upload fails.
    await applyJobEvent(
      env.jobs,
      'nlp.a',
      { type: 'checkpoint-requested', attempt: 1, reason: { code: 'preempt-for-priority', message: 'test' } },
      env.clock.nowMs(),
    );
    for (let k = 0; k < 20 && agents.stats.uploadFailures === 0; k++) await tick();
    expect(agents.stats.uploadFailures).toBeGreaterThan(0);
    // Reconcile gives up on it (checkpoint-timed-out) and requeues attempt 1 from the start.
    await requeueAttempt(env, {
      jobId: 'nlp.a',
      attempt: 1,
      reason: { code: 'checkpoint-timed-out', message: 'test' },
      nowMs: env.clock.nowMs(),
    });
    expect((await env.jobs.get('nlp.a'))!).toMatchObject({ state: 'pending', attempt: 2 });
    // The upload's third try lands: the index takes it; the job, now attempt 2 and on no machine, is not written by this one.
    for (let k = 0; k < 40 && !(await env.checkpoints.latest('nlp.a')); k++) await tick();
    expect(await env.checkpoints.latest('nlp.a')).toBeDefined();
    expect(agents.stats.refusedCalls).toBe(0);
    expect((await env.jobs.get('nlp.a'))!).toMatchObject({ state: 'pending', attempt: 2 });
  });

  it('bench:chaos reports every profile with the keys the issue names, against the fault-free run', async () => {
    const { rows } = await benchChaos({ hours: 4, seed: 1, profiles: ['none', 'store-conflicts'] });
    expect(rows.map((r) => Object.keys(r).sort())).toEqual(
      Array(2).fill([
        'accepted',
        'completed',
        'costOverheadPct',
        'duplicated',
        'lost',
        'p95WaitOverheadPct',
        'profile',
        'savesCutByHook',
        'spendErrorPct',
        'staleResumes',
        'teamSpendErrorPct',
        'violations',
        'wrongfulRequeues',
      ]),
    );
    expect(rows[0]).toMatchObject({ profile: 'none', costOverheadPct: 0, p95WaitOverheadPct: 0, lost: 0, violations: 0, staleResumes: 0 });
    // The ledger against the exact integral of the simulated machines' prices over their lives, per team: within 0.1%.
    for (const r of rows) {
      expect(Math.abs(r.spendErrorPct)).toBeLessThanOrEqual(0.1);
      expect(r.teamSpendErrorPct).toBeLessThanOrEqual(0.1);
    }
  }, 60_000);

  it('runs MIG groups: the fractional pods of the openb trace as MIG slices, none lost, and no MIG machine scaled in while MIG work waits', async () => {
    const { rows } = await benchChaos({ hours: 12, seed: 1, profiles: ['none'], mig: true });
    const [row] = rows;
    expect(row).toMatchObject({ lost: 0, duplicated: 0, violations: 0 });
    expect(row!.completed).toBeGreaterThan(0);
    expect(row!.migGroup!.launched).toBeGreaterThan(0);
    expect(row!.migGroup!.scaledInWithWorkWaiting).toBe(0);
  }, 120_000);
});
