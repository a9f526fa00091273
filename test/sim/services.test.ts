import { describe, expect, it } from 'vitest';
import {
  BUILT_IN_APP_TRACE,
  BUILT_IN_CHAT_TRACE,
  BUILT_IN_SPOT,
  BUILT_IN_TRACE,
  DEFAULT_SIM_GROUPS,
  defaultSimServices,
  defaultTeamTags,
} from '../../cloud/sim/defaults.ts';
import { alibabaAppDemand, azureLlmDemand, fixedDemand, type SimService } from '../../cloud/sim/service-demand.ts';
import { DEFAULT_SIM_START_MS, runSimulation, type SimulationOptions, type SpotSetup } from '../../cloud/sim/simulation.ts';
import { simulatedAddress } from '../../cloud/sim/sim-agent.ts';
import type { SimGroupConfig } from '../../cloud/sim/sim-cloud.ts';
import { loadWorkload } from '../../cloud/sim/workload.ts';
import { FAULT_PROFILES, type FaultProfile } from '../../cloud/sim/faults.ts';
import { SERVICE_LABEL } from '../../core/serving/service.ts';
import { replicaStartTime } from '../../cloud/sim/replica-start.ts';

describe('service load from real traces', () => {
  it('Azure LLM conversation trace: requests per minute as requests per second, the hour repeated', () => {
    const d = azureLlmDemand(BUILT_IN_CHAT_TRACE);
    expect(d.source).toMatch(/19366 requests over 59 min, repeated/);
    const perMinute = Array.from({ length: 59 }, (_, m) => d.rpsAt(m * 60) * 60);
    expect(perMinute.reduce((a, b) => a + b, 0)).toBeCloseTo(19_366, 6);
    // PROVENANCE: 37 to 507 requests a minute (its last minute is partial here).
    expect(Math.max(...perMinute)).toBeLessThanOrEqual(507);
    expect(d.rpsAt(59 * 60 + 30)).toBe(d.rpsAt(30));
  });

  it("Alibaba app: the app's live instances over time, from its first one", () => {
    const d = alibabaAppDemand(BUILT_IN_APP_TRACE, 'app_0', 2);
    expect(d.rpsAt(-1)).toBe(0);
    expect(d.rpsAt(0)).toBe(2);
    // Three instances start within the first 40 s.
    expect(d.rpsAt(60)).toBe(6);
    expect(d.rpsAt(17 * 86_400)).toBeGreaterThan(d.rpsAt(86_400));
    expect(() => alibabaAppDemand(BUILT_IN_APP_TRACE, 'app_none', 1)).toThrow(/no instances of app "app_none"/);
  });
});

describe('services in the simulated control loop', () => {
  const workload = loadWorkload(BUILT_IN_TRACE, { hours: 4, maxJobs: 40 });
  const chat = (rps: number): SimService => ({
    team: 'nlp',
    spec: {
      name: 'chat',
      image: 'vllm/vllm-openai:v0.6.3',
      command: ['--port', '8000'],
      gpu: { kind: 'whole', count: 1, models: ['V100'] },
      service: {
        port: 8000,
        readiness: { path: '/health', initialDelaySec: 60, periodSec: 10 },
        replicas: { min: 1, max: 6 },
        targets: [{ metric: 'requests-per-second', perReplica: 2 }],
      },
    },
    demand: fixedDemand(rps),
  });
  // The built-in fleet, with its 1-GPU spot group split into one group per zone so a service can choose the zone.
  const perZone: SimGroupConfig[] = [
    ...DEFAULT_SIM_GROUPS.filter((g) => g.id !== 'p3-2xl-spot'),
    ...['us-west-2a', 'us-west-2b'].map((z): SimGroupConfig => ({
      id: `p3-2xl-spot-${z}`,
      instanceTypes: ['p3.2xlarge'],
      zones: [z],
      capacityType: 'spot',
      minSize: 0,
      maxSize: 200,
    })),
  ];
  const run = (
    services: readonly SimService[],
    spot: SpotSetup = BUILT_IN_SPOT,
    groups: readonly SimGroupConfig[] = perZone,
    faults?: FaultProfile,
    onTick?: SimulationOptions['onTick'],
  ) =>
    runSimulation({
      workload,
      groups,
      teamTags: defaultTeamTags(workload.teams),
      seed: 1,
      hours: 6,
      spot,
      services,
      ...(faults ? { faults } : {}),
      ...(onTick ? { onTick } : {}),
    });

  it('a service scales to its load on spot, across zones, through intake and reconcile, beside the jobs', async () => {
    const { summary, env, jobs } = await run([chat(6)]);
    const s = summary.services![0]!;
    expect(s.id).toBe('nlp.chat');
    expect(s.availabilityPct).toBeGreaterThan(95);
    expect(s.peakNeeded).toBe(3);
    expect(s.spotReplicaHours / s.replicaHours).toBeGreaterThan(0.8);
    // Replicas are not jobs in the counts: every trace job is accounted for, none lost.
    expect(summary.accepted).toBe(workload.jobs.length);
    expect(summary.lost).toBe(0);
    expect(summary.violations).toBe(0);
    expect(jobs.some((j) => j.spec?.labels?.[SERVICE_LABEL])).toBe(false);
    const replicas = env.jobs.all().filter((j) => j.spec.labels[SERVICE_LABEL] === 'nlp.chat');
    const running = replicas.filter((j) => j.state === 'running');
    expect(running.length).toBeGreaterThanOrEqual(3);
    // Attributed to the service's team, with checkpoints off; spot replicas pinned to a zone.
    for (const r of replicas) expect(r.team).toBe('nlp');
    for (const r of replicas) expect(r.spec.checkpoint).toBeUndefined();
    const spotReplicas = replicas.filter((x) => x.spec.interruptible);
    for (const r of spotReplicas) expect(r.spec.placement?.zones).toHaveLength(1);
    expect(new Set(spotReplicas.map((r) => r.spec.placement?.zones?.[0]))).toEqual(new Set(['us-west-2a', 'us-west-2b']));
    const decision = (await env.decisions.recent(1))[0]!;
    expect(decision.services?.[0]).toMatchObject({ service: 'nlp.chat', target: 3 });
    expect(decision.services?.[0]?.reason).toMatch(/^3 → 3: 2 requests per second per replica against a target of 2 \(within 10%\)/);
  }, 60_000);

  it('with spot groups that each span both zones, the zones are one failure domain: replicas are allowed in both', async () => {
    const { summary, env } = await run([chat(6)], BUILT_IN_SPOT, DEFAULT_SIM_GROUPS);
    expect(summary.services![0]!.availabilityPct).toBeGreaterThan(95);
    const spotReplicas = env.jobs.all().filter((j) => j.spec.labels[SERVICE_LABEL] === 'nlp.chat' && j.spec.interruptible);
    expect(spotReplicas.length).toBeGreaterThan(0);
    for (const r of spotReplicas) expect(r.spec.placement?.zones).toEqual(['us-west-2a', 'us-west-2b']);
  }, 60_000);

  it('counts requests within each service’s objective by the queueing model of its ready replicas: none where they cannot keep up', async () => {
    const objective = { waitSec: 2, replicaRps: 2.8, concurrency: 32 };
    const withObjective = (name: string, max: number): SimService => {
      const base = chat(6);
      return { ...base, spec: { ...base.spec, name, service: { ...base.spec.service!, replicas: { min: 1, max }, objective } } };
    };
    // Three replicas hold 6 requests per second with room (8.4 at full load); two never keep up (5.6).
    const { summary } = await run([
      withObjective('chat', 6),
      withObjective('capped', 2),
      { ...chat(1), spec: { ...chat(1).spec, name: 'plain' } },
    ]);
    const [ok, capped, plain] = summary.services!;
    expect(ok!).toMatchObject({ id: 'nlp.chat', objective: 'wait ≤ 2 s' });
    expect(ok!.requestsWithinObjectivePct).toBeGreaterThan(95);
    expect(ok!.requestsWithinObjectivePct).toBeLessThanOrEqual(100);
    // Capped at two, it has what its max lets the load ask for on nearly every tick, yet nearly every request queues
    // past the objective (some are served only while a spare spot replica is up beside the two).
    expect(capped!.id).toBe('nlp.capped');
    expect(capped!.availabilityPct).toBeGreaterThan(90);
    expect(capped!.requestsWithinObjectivePct).toBeLessThan(5);
    // Its misses are requests queued past the objective while it had all the replicas its cap allows.
    const m = capped!.missedRequests!;
    expect(m.enough).toBeGreaterThan(0.9 * (m.noneReady + m.short + m.enough));
    // A service without an objective has no request figure, only its ticks.
    expect(plain!.requestsWithinObjectivePct).toBeUndefined();
    expect(plain!.objective).toBeUndefined();
  }, 60_000);

  it('a replica starts in its image pull, weights and warm-up; on a machine that pulled its image ahead, without the pull', async () => {
    const startup = { imageGiB: 5, weightsGiB: 7.5, warmupSec: 30, source: 'test' };
    // Cold: 5 GiB at 100 MiB/s, 7.5 GiB at 400 MiB/s, 30 s.
    expect(replicaStartTime(startup, false)).toEqual({ pullSec: 51.2, weightsSec: 19.2, warmupSec: 30, totalSec: 100.4 });
    expect(replicaStartTime(startup, true).totalSec).toBeCloseTo(49.2, 9);
    const base = chat(6);
    const withStartup: SimService = {
      ...base,
      spec: { ...base.spec, service: { ...base.spec.service!, readiness: { path: '/health', initialDelaySec: 20, periodSec: 10 } } },
      startup,
    };
    const { summary, env } = await run([withStartup], { kind: 'rates', ratePerHour: () => 0.4 });
    const s = summary.services![0]!;
    // Replicas lost to spot start again, on new machines: each pulls its image (a pull ahead begun at
    // the same look saves nothing). Every machine that may serve chat lists the image to pull ahead.
    expect(s.replicasLost).toBeGreaterThan(0);
    expect(s.imagePulls).toBeGreaterThan(0);
    expect(s.imagePulls! + s.imagesPulledAhead!).toBeLessThanOrEqual(s.replicasStarted);
    // Machines up before the load rises (the spot groups keep three each): they pull the image ahead,
    // and the replicas the rise places there start without the pull.
    const kept = perZone.map((g) => (g.id.startsWith('p3-2xl-spot-') ? { ...g, minSize: 3 } : g));
    const rise: SimService = {
      ...withStartup,
      demand: { source: 'a rise from 2 to 8 requests per second at 1 h', rpsAt: (sec) => (sec < 3600 ? 2 : 8) },
    };
    const risen = (await run([rise], { kind: 'none' }, kept)).summary.services![0]!;
    expect(risen.imagesPulledAhead).toBeGreaterThan(0);
    const live = new Set((await env.cloud.listInstances()).filter((i) => i.state === 'running').map((i) => i.id));
    const records = (await env.nodes.list()).filter((r) => live.has(r.instanceId));
    expect(records.length).toBeGreaterThan(0);
    for (const r of records) expect(r.prefetchImages, r.instanceId).toEqual([withStartup.spec.image]);
    // A service that says nothing of its startup answers after its readiness delay, as before, and counts no pulls.
    expect((await run([chat(2)])).summary.services![0]!.imagePulls).toBeUndefined();
  }, 120_000);

  it('replicas taken by spot are replaced at once; the service stays available', async () => {
    const { summary } = await run([chat(6)], { kind: 'rates', ratePerHour: () => 0.4 });
    const s = summary.services![0]!;
    expect(s.replicasLost).toBeGreaterThan(0);
    expect(s.replicasStarted).toBeGreaterThan(s.peakReplicas);
    expect(s.availabilityPct).toBeGreaterThan(90);
    expect(summary.violations).toBe(0);
  }, 60_000);

  it('end to end: a demand step scales it out; a spot-warned replica serves through the notice and leaves the load balancer in time to drain before its machine goes; replacements register once ready', async () => {
    const step: SimService = {
      ...chat(2),
      demand: { source: 'a step from 2 to 8 requests per second at 1 h', rpsAt: (sec) => (sec < 3600 ? 2 : 8) },
    };
    // Each warned machine's drain mark, as its record says (the interruption function writes it).
    const marks = new Map<string, number>();
    const { summary, env, frontDoor } = await run([step], { kind: 'rates', ratePerHour: () => 0.3 }, perZone, undefined, async (e) => {
      for (const r of await e.nodes.list()) if (r.draining) marks.set(r.instanceId, r.draining.deadlineMs);
    });
    const decisions = (await env.decisions.recent(1000)).reverse();
    const targetAt = (h: number) => decisions.filter((d) => d.atMs <= DEFAULT_SIM_START_MS + h * 3_600_000).at(-1)?.services?.[0]?.target;
    expect(targetAt(0.9)).toBe(1);
    expect(targetAt(1.2)).toBe(4);
    const log = frontDoor!.log.filter((l) => l.serviceId === 'nlp.chat');
    expect(log.filter((l) => l.action === 'register').length).toBeGreaterThanOrEqual(4);
    // Each replica spot took: its machine's address left the target group before the machine was gone.
    const lost = env.jobs.all().filter((j) => j.spec.labels[SERVICE_LABEL] === 'nlp.chat' && j.attempt > 1);
    expect(lost.length).toBeGreaterThan(0);
    let checked = 0;
    const leftBeforeEnd: number[] = [];
    for (const j of lost) {
      // The first attempt ended when its machine went (the job was requeued then).
      const first = j.heldAttempts?.find((h) => h.attempt === 1);
      const nodeId = first?.nodes[0]?.nodeId;
      const ip = simulatedAddress(nodeId!);
      const registered = log.find((l) => l.action === 'register' && l.target.ip === ip);
      if (!registered) continue; // lost before it was ever ready
      const out = log.find((l) => l.action === 'deregister' && l.target.ip === ip && l.atMs >= registered.atMs);
      expect(out, `replica ${j.id} on ${nodeId}`).toBeDefined();
      // A warned machine's target is never registered again, while it drains or after.
      expect(log.some((l) => l.action === 'register' && l.target.ip === ip && l.atMs > out!.atMs)).toBe(false);
      // Its agent took it out of the target group at its last look (15 s apart) before its machine's drain
      // mark (2 min after the notice, less the 20 s margin) less the deregistration delay (30 s): it took
      // traffic for most of the notice, and had drained by the drain mark.
      const mark = marks.get(nodeId!);
      expect(mark, `drain mark of ${nodeId}`).toBeDefined();
      leftBeforeEnd.push(mark! - out!.atMs);
      checked++;
    }
    expect(checked).toBeGreaterThan(0);
    for (const before of leftBeforeEnd) {
      expect(before).toBeGreaterThanOrEqual(30_000);
      expect(before).toBeLessThan(30_000 + 15_000);
    }
    // Replacements were registered after each loss, and the service stayed available.
    const lastLoss = Math.max(...lost.map((j) => j.heldAttempts?.find((h) => h.attempt === 1)?.toMs ?? 0));
    expect(log.some((l) => l.action === 'register' && l.atMs > lastLoss - 600_000)).toBe(true);
    expect(summary.services![0]!.availabilityPct).toBeGreaterThan(90);
    expect(summary.violations).toBe(0);
  }, 60_000);

  it('scale-in takes a replica off the load balancer and stops it only once it has drained (the deregistration delay)', async () => {
    const drop: SimService = {
      ...chat(8),
      demand: { source: 'a drop from 8 to 2 requests per second at 1 h', rpsAt: (sec) => (sec < 3600 ? 8 : 2) },
    };
    const { env, frontDoor } = await run([drop], { kind: 'none' });
    const log = frontDoor!.log.filter((l) => l.serviceId === 'nlp.chat');
    const stopped = env.jobs.all().filter((j) => j.spec.labels[SERVICE_LABEL] === 'nlp.chat' && j.state === 'cancelled' && j.attempt === 1);
    let checked = 0;
    for (const j of stopped) {
      const nodeId = j.heldAttempts?.find((h) => h.attempt === 1)?.nodes[0]?.nodeId;
      if (!nodeId) continue;
      const ip = simulatedAddress(nodeId);
      const out = log.filter((l) => l.action === 'deregister' && l.target.ip === ip).at(-1);
      if (!out) continue; // never registered (stopped while starting)
      expect(j.endedAtMs! - out.atMs, j.id).toBeGreaterThanOrEqual(30_000);
      checked++;
    }
    expect(checked).toBeGreaterThanOrEqual(2);
  }, 60_000);

  it('a replica whose load hangs never takes traffic: its health check fails, and it is replaced once past its limit, the decision saying why', async () => {
    const { summary, env, frontDoor } = await run([chat(6)], { kind: 'none' }, perZone, FAULT_PROFILES['hung-replicas']);
    const decisions = await env.decisions.recent(1000);
    const replaced = decisions.flatMap((d) => d.services?.flatMap((s) => s.replaced ?? []) ?? []);
    expect(replaced.length).toBeGreaterThan(0);
    expect(summary.faults.replicasHung).toBeGreaterThanOrEqual(new Set(replaced.map((r) => r.jobId)).size);
    for (const r of replaced)
      expect(r.why).toMatch(/^replica nlp\.chat-r\d+ has not answered \/health for \d+ s \(never since it started; the limit is 300 s\)/);
    const log = frontDoor!.log.filter((l) => l.serviceId === 'nlp.chat');
    for (const { jobId } of new Map(replaced.map((r) => [r.jobId, r])).values()) {
      const job = env.jobs.all().find((j) => j.id === jobId)!;
      // Its agent never found it answering, it was registered and taken out, and it ended cancelled.
      expect(job.replicaHealth).toMatchObject({ answering: false });
      expect(job.state).toBe('cancelled');
      const ip = simulatedAddress(job.heldAttempts!.at(-1)!.nodes[0]!.nodeId);
      expect(log.some((l) => l.action === 'deregister' && l.target.ip === ip)).toBe(true);
    }
    // The replacements carry the service: it stays available, and the hung ones count as held, not as serving.
    const s = summary.services![0]!;
    expect(s.availabilityPct).toBeGreaterThan(90);
    expect(summary.violations).toBe(0);
  }, 60_000);

  it("npm start's services load from the shipped traces", () => {
    const services = defaultSimServices();
    expect(services.map((s) => `${s.team}.${s.spec.name}`)).toEqual(['nlp.chat', 'recsys.recommend']);
    expect(services[0]!.demand.source).toMatch(/AzureLLMInferenceTrace_conv/);
    expect(services[1]!.demand.source).toMatch(/app_0/);
  });
});
