import { describe, expect, it } from 'vitest';
import { newPendingJob, type Job } from '../../core/job.ts';
import { domainOfZone, replicaLimit, spotZonesFor } from '../../core/services/serving.ts';
import { aGroup, INSTANCE_TYPES } from '../builders.ts';
import { checkJobSpec, type JobSpec, type JobSpecInput } from '../../core/job-spec.ts';
import {
  agentLeavesFrontDoorNow,
  decideReplicas,
  frontDoorLeaveAtMs,
  newServiceRecord,
  replicaSpec,
  SERVICE_LABEL,
  servesThroughNotice,
  SPOT_GIVE_UP_MS,
  type ReplicaView,
  type ServiceRecord,
} from '../../core/serving/service.ts';

import { shareWithinObjective } from '../../core/serving/latency.ts';

const T0 = Date.UTC(2026, 11, 1);

function spec(extra: Partial<JobSpecInput['service']> = {}, top: Partial<JobSpecInput> = {}): JobSpec {
  const check = checkJobSpec({
    name: 'chat',
    image: 'vllm/vllm-openai:v0.6.3',
    command: ['--port', '8000'],
    gpu: { kind: 'whole', count: 1, models: ['V100'] },
    service: {
      port: 8000,
      readiness: { path: '/health', initialDelaySec: 60, periodSec: 10 },
      replicas: { min: 1, max: 10 },
      targets: [{ metric: 'requests-per-second', perReplica: 2 }],
      ...extra,
    },
    ...top,
  });
  if (!check.ok) throw new Error(check.errors.join('; '));
  return check.spec;
}

/** A replica job of the record, in a state, on spot or on-demand, in a zone. */
function replica(
  record: ServiceRecord,
  n: number,
  o: {
    state?: Job['state'];
    capacity?: 'spot' | 'on-demand';
    zone?: string;
    startedAgoMs?: number;
    attempt?: number;
    queuedAgoMs?: number;
    /** Whether its readiness path answers (default: running past its 60 s initial delay). */
    answering?: boolean;
  },
  nowMs: number,
): ReplicaView {
  const capacity = o.capacity ?? 'spot';
  const s = replicaSpec({ ...record, nextReplica: n }, capacity === 'spot' ? { capacity, zone: o.zone ?? 'z-a' } : { capacity });
  const base = newPendingJob({ id: `nlp.chat-r${n}`, team: 'nlp', spec: s, submittedAtMs: nowMs - 3_600_000 });
  const state = o.state ?? 'running';
  const job: Job = {
    ...base,
    state,
    attempt: o.attempt ?? 1,
    queuedAtMs: nowMs - (o.queuedAgoMs ?? 0),
    ...(state === 'running'
      ? {
          startedAtMs: nowMs - (o.startedAgoMs ?? 600_000),
          placement: { nodes: [{ nodeId: `i-${n}`, gpuIndices: [0] }], capacityType: capacity },
        }
      : {}),
  };
  const answering = o.answering ?? (state === 'running' && (o.startedAgoMs ?? 600_000) >= 60_000);
  return { job, leaving: false, answering, ...(o.zone || capacity === 'spot' ? { zone: o.zone ?? 'z-a' } : {}) };
}

const base = { intervalSec: 60, coldStartSec: 300 };

describe('a service in the control loop (decideReplicas)', () => {
  it('a new service starts at its minimum; load scales it as HPA does, desired = ceil(load ÷ target), and each decision says why', () => {
    const record = newServiceRecord('nlp', spec(), T0);
    expect(record.id).toBe('nlp.chat');
    expect(record.target).toBe(1);
    const d = decideReplicas({
      ...base,
      nowMs: T0,
      record,
      replicas: [],
      spotZones: ['z-a', 'z-b', 'z-c'],
      load: { 'requests-per-second': 9 },
    });
    expect(d.record.target).toBe(5);
    expect(d.record.reason).toMatch(/^1 → 5: 9 requests per second per replica against a target of 2/);
    // Five spot replicas spread one per calm zone first, and on-demand covering all five while none is ready.
    const spot = d.start.filter((s) => s.capacity === 'spot');
    expect(spot).toHaveLength(5);
    expect(new Set(spot.map((s) => s.zone))).toEqual(new Set(['z-a', 'z-b', 'z-c']));
    expect(d.start.filter((s) => s.capacity === 'on-demand')).toHaveLength(5);
    expect(d.cancel).toEqual([]);
    expect(d.record.nextReplica).toBe(11);
  });

  it('with an objective, each decision says the share of requests its ready replicas serve within it, by the queueing model', () => {
    const objective = { waitSec: 2, replicaRps: 2.8, concurrency: 32 };
    let record: ServiceRecord = { ...newServiceRecord('nlp', spec({ objective }), T0), target: 3, zones: ['z-a'] };
    const ready = [1, 2].map((n) => replica(record, n, {}, T0));
    const d = decideReplicas({ ...base, nowMs: T0, record, replicas: ready, spotZones: ['z-a'], load: { 'requests-per-second': 5 } });
    const within = Math.floor(10_000 * shareWithinObjective(2, 5, objective)) / 100;
    expect(within).toBeGreaterThan(50);
    expect(within).toBeLessThan(100);
    expect(d.record.objectiveNow).toEqual({ requestsPerSec: 5, withinPct: within });
    expect(d.record.reason).toContain(`; ${within}% of 5 requests/s within a 2 s wait`);
    // No request rate read this time: no figure, and the last one is not kept as if it were now.
    record = d.record;
    const blind = decideReplicas({ ...base, nowMs: T0 + 60_000, record, replicas: ready, spotZones: ['z-a'], load: {} });
    expect(blind.record.objectiveNow).toBeUndefined();
    expect(blind.record.reason).not.toMatch(/within a/);
    // A service without an objective has none.
    const plain = decideReplicas({
      ...base,
      nowMs: T0,
      record: newServiceRecord('nlp', spec(), T0),
      replicas: [],
      spotZones: ['z-a'],
      load: { 'requests-per-second': 5 },
    });
    expect(plain.record.objectiveNow).toBeUndefined();
  });

  it('once the spot replicas are ready, on-demand ones are released, never taking ready replicas below the target', () => {
    let record: ServiceRecord = { ...newServiceRecord('nlp', spec(), T0), target: 2, zones: ['z-a', 'z-b'] };
    record = { ...record, memory: { ...record.memory, asked: [1, 1] } };
    const now = T0 + 3_600_000;
    const replicas = [
      replica(record, 1, { zone: 'z-a' }, now),
      replica(record, 2, { zone: 'z-b' }, now),
      replica(record, 3, { capacity: 'on-demand' }, now),
      replica(record, 4, { capacity: 'on-demand' }, now),
    ];
    const d = decideReplicas({ ...base, nowMs: now, record, replicas, spotZones: ['z-a', 'z-b'], load: { 'requests-per-second': 4 } });
    expect(d.ready).toBe(4);
    expect(d.start).toEqual([]);
    expect(d.cancel.map((c) => c.jobId).sort()).toEqual(['nlp.chat-r3', 'nlp.chat-r4']);
    // With one spot replica not ready yet, one on-demand replica stays: ready never drops below the target.
    const booting = [
      replica(record, 1, { zone: 'z-a' }, now),
      replica(record, 2, { zone: 'z-b', startedAgoMs: 10_000 }, now),
      ...replicas.slice(2),
    ];
    const d2 = decideReplicas({
      ...base,
      nowMs: now,
      record,
      replicas: booting,
      spotZones: ['z-a', 'z-b'],
      load: { 'requests-per-second': 4 },
    });
    expect(d2.cancel).toHaveLength(1);
  });

  it('a replica on a machine that was warned is replaced at once, in another zone, and its requeued job is cancelled, not rerun', () => {
    let record: ServiceRecord = { ...newServiceRecord('nlp', spec(), T0), target: 2, zones: ['z-a', 'z-b', 'z-c'] };
    record = { ...record, memory: { ...record.memory, asked: [1, 1, 0] } };
    const now = T0 + 3_600_000;
    const warned = { ...replica(record, 1, { zone: 'z-a' }, now), leaving: true };
    const d = decideReplicas({
      ...base,
      nowMs: now,
      record,
      replicas: [warned, replica(record, 2, { zone: 'z-b' }, now)],
      spotZones: ['z-a', 'z-b', 'z-c'],
      load: { 'requests-per-second': 4 },
    });
    const spot = d.start.filter((s) => s.capacity === 'spot');
    expect(spot).toEqual([{ capacity: 'spot', zone: 'z-c' }]);
    // One ready replica short of the target, plus the hedge after a loss: on-demand covers until the new one is ready.
    expect(d.start.filter((s) => s.capacity === 'on-demand').length).toBeGreaterThanOrEqual(1);
    // The warned replica still serves until its machine goes: it is not cancelled.
    expect(d.cancel).toEqual([]);
    expect(d.record.memory.losses?.[0]).toBe(1);

    // Its machine gone, the job is back in the queue: it is cancelled (the replacement is already there).
    const requeued = replica(record, 1, { state: 'pending', attempt: 2, zone: 'z-a' }, now);
    const d2 = decideReplicas({
      ...base,
      nowMs: now + 120_000,
      record: d.record,
      replicas: [requeued, replica(record, 2, { zone: 'z-b' }, now)],
      spotZones: ['z-a', 'z-b', 'z-c'],
      load: { 'requests-per-second': 4 },
    });
    expect(d2.cancel.map((c) => c.jobId)).toContain('nlp.chat-r1');
    expect(d2.cancel.find((c) => c.jobId === 'nlp.chat-r1')?.why).toMatch(/lost its machine/);
  });

  it('a cancelled service takes every replica out, and its decision is written like any other', () => {
    const record: ServiceRecord = { ...newServiceRecord('nlp', spec(), T0), state: 'cancelled', target: 2 };
    const now = T0 + 60_000;
    const d = decideReplicas({
      ...base,
      nowMs: now,
      record,
      replicas: [replica(record, 1, {}, now), replica(record, 2, { state: 'pending' }, now)],
      spotZones: ['z-a'],
      load: {},
    });
    expect(d.cancel.map((c) => c.jobId)).toEqual(['nlp.chat-r1', 'nlp.chat-r2']);
    expect(d.record).toMatchObject({ version: record.version + 1, updatedAtMs: now, target: 0, reason: 'cancelled: 2 replica(s) leaving' });
  });

  it('a replica is ready only while its readiness path answers; one silent past its limit is replaced, and the decision says why', () => {
    // Initial delay 60 s, limit 300 s (the default). Replica 1 answers; 2 has run 10 min and never answered (a hung load).
    let record: ServiceRecord = { ...newServiceRecord('nlp', spec({ spareSpot: 0 }), T0), target: 2, zones: ['z-a'] };
    record = { ...record, memory: { ...record.memory, asked: [2] } };
    const now = T0 + 3_600_000;
    const input = (replicas: ReplicaView[], at: number, rec: ServiceRecord) => ({
      ...base,
      nowMs: at,
      record: rec,
      replicas,
      spotZones: ['z-a'],
      load: { 'requests-per-second': 4 },
    });
    const hung = replica(record, 2, { answering: false }, now);
    const d = decideReplicas(input([replica(record, 1, {}, now), hung], now, record));
    expect(d.ready).toBe(1);
    expect(d.replaced).toEqual([
      {
        jobId: 'nlp.chat-r2',
        why: 'replica nlp.chat-r2 has not answered /health for 540 s (never since it started; the limit is 300 s): a replacement is started',
      },
    ]);
    expect(d.cancel.map((c) => c.jobId)).toEqual(['nlp.chat-r2']);
    expect(d.start).toContainEqual({ capacity: 'spot', zone: 'z-a' });
    expect(d.record.reason).toContain('replica nlp.chat-r2 has not answered /health for 540 s');
    // Within the limit it only waits: not ready, not replaced.
    const young = replica(record, 3, { answering: false, startedAgoMs: 200_000 }, now);
    const d2 = decideReplicas(input([replica(record, 1, {}, now), young], now, record));
    expect(d2.ready).toBe(1);
    expect(d2.replaced).toEqual([]);
    // One that answered, then stopped: counted from when it was last seen answering.
    const at = (min: number) => now + min * 60_000;
    const r1 = replica(record, 1, {}, now);
    let rec = decideReplicas(input([r1, replica(record, 2, {}, now)], at(0), record)).record;
    expect(rec.answeredAtMs).toEqual({ 'nlp.chat-r1': at(0), 'nlp.chat-r2': at(0) });
    const silent = { ...r1, answering: false };
    rec = decideReplicas(input([silent, replica(record, 2, {}, now)], at(4), rec)).record;
    expect(rec.answeredAtMs?.['nlp.chat-r1']).toBe(at(0));
    const d3 = decideReplicas(input([silent, replica(record, 2, {}, now)], at(6), rec));
    expect(d3.replaced.map((r) => r.why)).toEqual([
      'replica nlp.chat-r1 has not answered /health for 360 s (since it last did; the limit is 300 s): a replacement is started',
    ]);
  });

  it('a spot replica a planner put on on-demand counts as the spot replica it was asked as (not lost, not asked again)', () => {
    let record: ServiceRecord = { ...newServiceRecord('nlp', spec({ spareSpot: 0 }), T0), target: 2, zones: ['z-a'] };
    record = { ...record, memory: { ...record.memory, asked: [2] } };
    const now = T0 + 3_600_000;
    const onOd = (n: number): ReplicaView => {
      const r = replica(record, n, { zone: 'z-a' }, now);
      return { ...r, job: { ...r.job, placement: { ...r.job.placement!, capacityType: 'on-demand' } } };
    };
    const d = decideReplicas({
      ...base,
      nowMs: now,
      record,
      replicas: [onOd(1), onOd(2)],
      spotZones: ['z-a'],
      load: { 'requests-per-second': 4 },
    });
    expect(d.start).toEqual([]);
    expect(d.cancel).toEqual([]);
    expect(d.record.memory.losses).toEqual([0]);
  });

  it('a spot replica its zone does not give within ten minutes is given up and asked elsewhere; the zone counts as a loss', () => {
    let record: ServiceRecord = {
      ...newServiceRecord('nlp', spec({ replicas: { min: 1, max: 1 } }), T0),
      target: 1,
      zones: ['z-a', 'z-b'],
    };
    record = { ...record, memory: { ...record.memory, asked: [1, 0] } };
    const now = T0 + 3_600_000;
    const stuck = replica(record, 1, { state: 'pending', zone: 'z-a', queuedAgoMs: SPOT_GIVE_UP_MS + 60_000 }, now);
    const d = decideReplicas({ ...base, nowMs: now, record, replicas: [stuck], spotZones: ['z-a', 'z-b'], load: {} });
    expect(d.cancel.map((c) => c.jobId)).toEqual(['nlp.chat-r1']);
    expect(d.start).toContainEqual({ capacity: 'spot', zone: 'z-b' });
    expect(d.record.memory.losses).toEqual([1, 0]);
  });

  it('scale-in keeps the stabilisation window, and then cancels starting replicas before ready ones', () => {
    const record: ServiceRecord = {
      ...newServiceRecord('nlp', spec({ scaleDownWindowSec: 300 }, { interruptible: false }), T0),
      target: 3,
      history: [{ atMs: T0 + 3_500_000, replicas: 3 }],
    };
    const now = T0 + 3_600_000;
    const replicas = [
      replica(record, 1, { capacity: 'on-demand' }, now),
      replica(record, 2, { capacity: 'on-demand' }, now),
      replica(record, 3, { capacity: 'on-demand', startedAgoMs: 5_000 }, now),
    ];
    const held = decideReplicas({ ...base, nowMs: now, record, replicas, spotZones: ['z-a'], load: { 'requests-per-second': 1 } });
    expect(held.record.target).toBe(3);
    expect(held.record.reason).toMatch(/down to 1 once it holds for 300 s/);
    expect(held.cancel).toEqual([]);
    const later = decideReplicas({
      ...base,
      nowMs: now + 301_000,
      record: held.record,
      replicas,
      spotZones: ['z-a'],
      load: { 'requests-per-second': 1 },
    });
    expect(later.record.target).toBe(1);
    // Work that may not be interrupted: all on-demand; the one still starting goes first.
    expect(later.start).toEqual([]);
    expect(later.cancel.map((c) => c.jobId)).toEqual(['nlp.chat-r3', 'nlp.chat-r2']);
  });

  it('a smaller spread that leaves a risky zone cancels its replicas only while the ready ones stay at the target', () => {
    let record: ServiceRecord = {
      ...newServiceRecord('nlp', spec({ scaleDownWindowSec: 0, spareSpot: 0 }), T0),
      target: 3,
      zones: ['z-a', 'z-b', 'z-c'],
    };
    // z-a has lost replicas; z-b and z-c have held theirs for hours.
    record = { ...record, memory: { ...record.memory, tick: 500, asked: [2, 1, 0], losses: [6, 0, 0], exposure: [600, 3000, 3000] } };
    const now = T0 + 3_600_000;
    const replicas = [
      replica(record, 1, { zone: 'z-a' }, now),
      replica(record, 2, { zone: 'z-a' }, now),
      replica(record, 3, { zone: 'z-b' }, now),
    ];
    const d = decideReplicas({
      ...base,
      nowMs: now,
      record,
      replicas,
      spotZones: ['z-a', 'z-b', 'z-c'],
      load: { 'requests-per-second': 4 },
    });
    expect(d.record.target).toBe(2);
    // The spread for two goes to z-b and z-c; of z-a's two ready replicas one goes, the other stays until z-c's is ready.
    expect(d.start).toEqual([{ capacity: 'spot', zone: 'z-c' }]);
    expect(d.cancel.map((c) => c.jobId)).toEqual(['nlp.chat-r2']);
  });

  it('a cancelled service cancels every replica; a replica spec is pinned to its zone, labelled with its service and kept off checkpoints', () => {
    const record: ServiceRecord = { ...newServiceRecord('nlp', spec(), T0), state: 'cancelled' };
    const now = T0 + 60_000;
    const d = decideReplicas({ ...base, nowMs: now, record, replicas: [replica(record, 1, {}, now)], spotZones: ['z-a'], load: {} });
    expect(d.cancel.map((c) => c.jobId)).toEqual(['nlp.chat-r1']);
    const s = replicaSpec(record, { capacity: 'spot', zone: 'z-b' });
    expect(s.interruptible).toBe(true);
    expect(s.placement?.zones).toEqual(['z-b']);
    expect(s.labels[SERVICE_LABEL]).toBe('nlp.chat');
    expect(s.checkpoint).toBeUndefined();
    expect(replicaSpec(record, { capacity: 'on-demand' }).interruptible).toBe(false);
  });
});

describe('failure domains a service can target (spotZonesFor)', () => {
  it('a single-zone spot group is its zone; a group spanning zones is one domain; on-demand, larger machines and groups that cannot hold it are left out', () => {
    const types = new Map(Object.entries(INSTANCE_TYPES));
    const groups = [
      aGroup({ instanceType: 'p3.2xlarge', capacityType: 'spot', zones: ['us-east-1a'] }),
      { ...aGroup({ instanceType: 'p3.2xlarge', capacityType: 'spot', zones: ['us-east-1b', 'us-east-1c'] }), id: 'bc' },
      aGroup({ instanceType: 'p3.2xlarge', zones: ['us-east-1d'] }),
      aGroup({ instanceType: 'g5.xlarge', capacityType: 'spot', zones: ['us-east-1e'] }),
      // Larger machines are not where the planner puts a replica: not a domain of their own.
      aGroup({ instanceType: 'p3.16xlarge', capacityType: 'spot', zones: ['us-east-1a', 'us-east-1f'] }),
    ];
    expect(spotZonesFor(spec(), groups, types)).toEqual(['us-east-1a', 'us-east-1b+us-east-1c']);
    expect(domainOfZone('us-east-1c', ['us-east-1a', 'us-east-1b+us-east-1c'])).toBe('us-east-1b+us-east-1c');
    // A replica for a domain is allowed in all of its zones.
    const record = newServiceRecord('nlp', spec(), T0);
    expect(replicaSpec(record, { capacity: 'spot', zone: 'us-east-1b+us-east-1c' }).placement?.zones).toEqual(['us-east-1b', 'us-east-1c']);
  });
});

describe("the team's limits on a service (replicaLimit)", () => {
  const team = { id: 'nlp', spentMicroUsd: 0, committedMicroUsd: 0, state: 'ok' as const };
  it('a spent budget that holds work holds the replicas where they are; a GPU cap counts the GPUs of the team’s other work', () => {
    const record: ServiceRecord = { ...newServiceRecord('nlp', spec(), T0), target: 2 };
    expect(replicaLimit(record, { ...team, state: 'hold' } as never, [])).toEqual({
      replicas: 2,
      why: "team nlp's budget is spent (action hold)",
    });
    const other = {
      ...newPendingJob({ id: 'nlp.train', team: 'nlp', spec: spec({}, { service: undefined, name: 'train' }), submittedAtMs: T0 }),
      state: 'running' as const,
    };
    const capped = replicaLimit(record, { ...team, maxGpus: 3 } as never, [other, other]);
    expect(capped).toEqual({ replicas: 1, why: "team nlp's GPU cap of 3 (its other work holds 2)" });
    expect(replicaLimit(record, team as never, [])).toBeUndefined();
    const d = decideReplicas({
      ...base,
      nowMs: T0,
      record,
      replicas: [],
      spotZones: ['z-a'],
      load: { 'requests-per-second': 20 },
      limit: capped!,
    });
    expect(d.record.target).toBe(2);
    expect(d.record.reason).toMatch(/held at 2: team nlp's GPU cap of 3/);
  });
});

describe('a warned machine’s replica and its target group (core/serving/service.ts)', () => {
  const T = 1_800_000_000_000;
  const mark = T + 100_000; // the drain mark: a notice at T, 2 min less the 20 s margin

  it('the agent takes it out at its last look before the drain mark less the deregistration delay', () => {
    expect(frontDoorLeaveAtMs(mark, 30)).toBe(T + 70_000);
    const looks = [0, 15, 30, 45, 60, 75].map((s) => T + s * 1000);
    expect(looks.filter((now) => agentLeavesFrontDoorNow(mark, now, 30, 15)).map((now) => (now - T) / 1000)).toEqual([60, 75]);
    // Looking every 5 s, it leaves 5 s early at most.
    expect(agentLeavesFrontDoorNow(mark, T + 65_000, 30, 5)).toBe(false);
    expect(agentLeavesFrontDoorNow(mark, T + 66_000, 30, 5)).toBe(true);
  });

  it('reconcile keeps it until then while it hears the agent, and alone leaves a reconcile interval ahead; no deadline, at once', () => {
    const heard = { drainSec: 30, intervalSec: 60, agentHeard: true };
    const silent = { ...heard, agentHeard: false };
    expect(servesThroughNotice(mark, T + 30_000, heard)).toBe(true);
    expect(servesThroughNotice(mark, T + 69_000, heard)).toBe(true);
    expect(servesThroughNotice(mark, T + 70_000, heard)).toBe(false);
    expect(servesThroughNotice(mark, T + 5_000, silent)).toBe(true);
    expect(servesThroughNotice(mark, T + 10_000, silent)).toBe(false);
    expect(servesThroughNotice(undefined, T, heard)).toBe(false);
  });
});
