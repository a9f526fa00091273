import { CloudError } from '../../core/errors.ts';
import { mergeDraining, type Draining, type MachineMeterFacts, type NodeRecord } from '../../core/fleet.ts';
import {
  afterNewestSave,
  afterSweep,
  checkpointCompletion,
  checkpointFolder,
  CheckpointRefused,
  NO_SAVES,
  storedBytes,
  type CheckpointRef,
  type Job,
  type JobState,
  type RetainedSaves,
  type SaveMeter,
} from '../../core/job.ts';
import { byteEventsToPut, logRead, logTouches, type ByteCarry, type ByteEvent, type ByteLog, type Site } from '../../core/bytes.ts';
import type { PlanAction } from '../../core/plan.ts';
import { poolStatsOf, type MachineHistory } from '../../core/risk.ts';
import type { Team } from '../../core/team.ts';
import { mergeFamilyRuns, type RightsizeRun } from '../../core/rightsizing.ts';
import type { ServiceRecord } from '../../core/serving/service.ts';
import type {
  FamilyRunStore,
  BudgetMemory,
  JournaledPlan,
  PlanJournal,
  PoolHistory,
  PoolStats,
  BudgetTagSource,
  CheckpointHistory,
  CheckpointStore,
  Clock,
  DecisionLog,
  DecisionRecord,
  JobLogBatch,
  JobLogSink,
  JobLogSource,
  JobQueue,
  JobStore,
  LeaseStore,
  LogLine,
  NodeStore,
  QueueDepth,
  ServiceStore,
  SpendAccrual,
  SpendCursor,
  SpendLedger,
  TeamTagSet,
  WriteResult,
} from '../../core/ports.ts';

/** The finished states a job can reach after holding machines (a rejected job never held any). */
const ENDED_STATES: readonly JobState[] = ['succeeded', 'failed', 'cancelled'];

/**
 * In-memory implementations of the state-store ports, for the simulator, the CLI's local mode
 * and tests. They keep the contracts of the real stores (conditional writes, idempotency) so
 * that code which passes against them passes against DynamoDB too (test/contract/ checks both).
 * Stored values are frozen: callers get the stored object and cannot change it behind the store.
 */
/** DynamoDB's item limit (400 KB, names and values): the memory stores refuse what DynamoDB would, as its ValidationException. */
const DYNAMO_ITEM_MAX_BYTES = 400 * 1024;
function refuseOversized(what: string, id: string, value: unknown): void {
  const bytes = storedBytes(value);
  if (bytes > DYNAMO_ITEM_MAX_BYTES)
    throw new CloudError('invalid-request', `${what} ${id}: Item size has exceeded the maximum allowed size (${bytes} bytes)`, {
      operation: `write ${what}`,
      resource: id,
    });
}

export class MemoryJobStore implements JobStore {
  private readonly byId = new Map<string, Job>();
  private readonly byState = new Map<JobState, Map<string, Job>>();

  async create(job: Job): Promise<{ created: boolean; job: Job }> {
    const existing = this.byId.get(job.id);
    if (existing) return { created: false, job: existing };
    refuseOversized('job', job.id, job);
    this.put(Object.freeze({ ...job }));
    return { created: true, job: this.byId.get(job.id)! };
  }

  async get(id: string): Promise<Job | undefined> {
    return this.byId.get(id);
  }

  async update(next: Job, expectedVersion: number): Promise<WriteResult> {
    const current = this.byId.get(next.id);
    if (!current || current.version !== expectedVersion || next.version !== expectedVersion + 1) return { ok: false, current };
    refuseOversized('job', next.id, next);
    this.byState.get(current.state)?.delete(current.id);
    this.put(Object.freeze({ ...next }));
    return { ok: true, job: this.byId.get(next.id)! };
  }

  async listByState(states: readonly JobState[], team?: string): Promise<Job[]> {
    const out: Job[] = [];
    for (const s of states) for (const j of this.byState.get(s)?.values() ?? []) if (team === undefined || j.team === team) out.push(j);
    return out.sort((a, b) => a.submittedAtMs - b.submittedAtMs || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  }

  async listEndedSince(sinceMs: number, untilMs: number): Promise<Job[]> {
    const out: Job[] = [];
    for (const s of ENDED_STATES)
      for (const j of this.byState.get(s)?.values() ?? [])
        if (j.heldAttempts && j.endedAtMs !== undefined && j.endedAtMs >= sinceMs && j.endedAtMs <= untilMs) out.push(j);
    return out.sort((a, b) => (a.endedAtMs ?? 0) - (b.endedAtMs ?? 0) || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  }

  /** Every job, for reports. */
  all(): Job[] {
    return [...this.byId.values()];
  }

  dump(): Job[] {
    return this.all();
  }

  restore(jobs: readonly Job[]): void {
    for (const j of jobs) this.put(Object.freeze({ ...j }));
  }

  /** Told of every job written (the simulator keeps its own log of who held what from it). */
  onWrite: ((job: Job) => void) | undefined;

  private put(job: Job): void {
    this.onWrite?.(job);
    this.byId.set(job.id, job);
    let m = this.byState.get(job.state);
    if (!m) {
      m = new Map();
      this.byState.set(job.state, m);
    }
    m.set(job.id, job);
  }
}

export class MemoryServiceStore implements ServiceStore {
  private readonly byId = new Map<string, ServiceRecord>();

  async create(record: ServiceRecord): Promise<{ created: boolean; record: ServiceRecord }> {
    const existing = this.byId.get(record.id);
    if (existing) return { created: false, record: existing };
    this.byId.set(record.id, Object.freeze({ ...record }));
    return { created: true, record: this.byId.get(record.id)! };
  }

  async get(id: string): Promise<ServiceRecord | undefined> {
    return this.byId.get(id);
  }

  async update(
    next: ServiceRecord,
    expectedVersion: number,
  ): Promise<{ ok: true; record: ServiceRecord } | { ok: false; current: ServiceRecord | undefined }> {
    const current = this.byId.get(next.id);
    if (!current || current.version !== expectedVersion || next.version !== expectedVersion + 1) return { ok: false, current };
    this.byId.set(next.id, Object.freeze({ ...next }));
    return { ok: true, record: this.byId.get(next.id)! };
  }

  async list(): Promise<ServiceRecord[]> {
    return this.dump();
  }

  dump(): ServiceRecord[] {
    return [...this.byId.values()].sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  }

  restore(records: readonly ServiceRecord[]): void {
    for (const r of records) this.byId.set(r.id, Object.freeze({ ...r }));
  }
}

export class MemoryNodeStore implements NodeStore {
  private readonly records = new Map<string, NodeRecord>();

  async register(record: NodeRecord): Promise<void> {
    const existing = this.records.get(record.instanceId);
    this.records.set(
      record.instanceId,
      Object.freeze({
        ...record,
        ...(existing?.draining ? { draining: existing.draining } : {}),
        ...(existing?.assigned ? { assigned: existing.assigned } : {}),
        ...(existing?.meter ? { meter: existing.meter } : {}),
        ...(existing?.endedAtMs !== undefined ? { endedAtMs: existing.endedAtMs } : {}),
        ...(existing?.prefetchImages ? { prefetchImages: existing.prefetchImages } : {}),
        ...(existing?.images ? { images: existing.images } : {}),
        registeredAtMs: existing?.registeredAtMs ?? record.registeredAtMs,
      }),
    );
  }

  async heartbeat(instanceId: string, atMs: number, health?: { healthy: boolean; problem?: string }): Promise<boolean> {
    const r = this.records.get(instanceId);
    if (!r) return false;
    const next: NodeRecord = {
      ...r,
      lastHeartbeatAtMs: Math.max(r.lastHeartbeatAtMs, atMs),
      ...(health ? { healthy: health.healthy, healthProblem: health.problem } : {}),
    };
    this.records.set(instanceId, Object.freeze(next));
    return true;
  }

  async get(instanceId: string): Promise<NodeRecord | undefined> {
    return this.records.get(instanceId);
  }

  async list(): Promise<NodeRecord[]> {
    return [...this.records.values()].sort((a, b) => (a.instanceId < b.instanceId ? -1 : 1));
  }

  async markDraining(instanceId: string, drain: Draining & { groupId?: string }): Promise<NodeRecord> {
    const r = this.records.get(instanceId);
    const { groupId: _g, ...mark } = drain;
    const merged = mergeDraining(r?.draining, mark);
    if (r && !merged) return r;
    const base: NodeRecord = r ?? {
      instanceId,
      groupId: drain.groupId ?? 'unknown',
      registeredAtMs: drain.sinceMs,
      lastHeartbeatAtMs: drain.sinceMs,
      gpus: [],
      healthy: true,
    };
    const next = Object.freeze({ ...base, draining: merged ?? mark });
    this.records.set(instanceId, next);
    return next;
  }

  async setIdleSince(instanceId: string, idleSinceMs: number | undefined): Promise<void> {
    const r = this.records.get(instanceId);
    if (!r) return;
    const { idleSinceMs: _old, ...rest } = r;
    this.records.set(instanceId, Object.freeze(idleSinceMs === undefined ? rest : { ...rest, idleSinceMs }));
  }

  async setPrefetch(instanceId: string, images: readonly string[]): Promise<boolean> {
    const r = this.records.get(instanceId);
    if (!r) return false;
    const { prefetchImages: _old, ...rest } = r;
    this.records.set(instanceId, Object.freeze(images.length === 0 ? rest : { ...rest, prefetchImages: Object.freeze([...images]) }));
    return true;
  }

  async noteImages(instanceId: string, images: readonly string[]): Promise<boolean> {
    const r = this.records.get(instanceId);
    if (!r) return false;
    const { images: _old, ...rest } = r;
    this.records.set(instanceId, Object.freeze(images.length === 0 ? rest : { ...rest, images: Object.freeze([...images].sort()) }));
    return true;
  }

  async remove(instanceId: string): Promise<void> {
    this.records.delete(instanceId);
  }

  async noteMeter(instanceId: string, meter: MachineMeterFacts): Promise<boolean> {
    const r = this.records.get(instanceId);
    if (!r) return false;
    if (!r.meter) this.records.set(instanceId, Object.freeze({ ...r, meter }));
    return true;
  }

  async noteEnded(instanceId: string, atMs: number): Promise<void> {
    const r = this.records.get(instanceId);
    if (!r || (r.endedAtMs !== undefined && r.endedAtMs <= atMs)) return;
    this.records.set(instanceId, Object.freeze({ ...r, endedAtMs: atMs }));
  }

  async assign(instanceId: string, jobId: string, attempt: number): Promise<boolean> {
    const r = this.records.get(instanceId);
    if (!r) return false;
    if ((r.assigned?.[jobId] ?? 0) >= attempt) return true;
    this.records.set(instanceId, Object.freeze({ ...r, assigned: Object.freeze({ ...r.assigned, [jobId]: attempt }) }));
    return true;
  }

  async unassign(instanceId: string, jobId: string, attempt: number): Promise<void> {
    const r = this.records.get(instanceId);
    const current = r?.assigned?.[jobId];
    if (!r || current === undefined || current > attempt) return;
    const { [jobId]: _gone, ...rest } = r.assigned!;
    this.records.set(instanceId, Object.freeze({ ...r, assigned: Object.freeze(rest) }));
  }

  dump(): NodeRecord[] {
    return [...this.records.values()];
  }

  restore(records: readonly NodeRecord[]): void {
    for (const r of records) this.records.set(r.instanceId, Object.freeze({ ...r }));
  }
}

export class MemoryDecisionLog implements DecisionLog {
  private readonly byId = new Map<string, DecisionRecord>();
  constructor(private readonly keep = 2_000) {}

  async record(decision: DecisionRecord): Promise<void> {
    this.byId.set(decision.id, decision);
    if (this.byId.size > this.keep) {
      const oldest = [...this.byId.keys()].sort()[0]!;
      this.byId.delete(oldest);
    }
  }
  async get(id: string): Promise<DecisionRecord | undefined> {
    return this.byId.get(id);
  }
  async recent(limit: number): Promise<DecisionRecord[]> {
    return [...this.byId.values()].sort((a, b) => b.atMs - a.atMs || (a.id < b.id ? 1 : -1)).slice(0, limit);
  }

  dump(): DecisionRecord[] {
    return [...this.byId.values()];
  }

  restore(records: readonly DecisionRecord[]): void {
    for (const d of records) this.byId.set(d.id, d);
  }
}

interface LedgerRow {
  spentMicroUsd: number;
  accruedUntilMs: number | undefined;
  lastFromMs: number | undefined;
  carry?: ByteCarry;
}

export class MemorySpendLedger implements SpendLedger {
  private readonly rows = new Map<string, LedgerRow>();

  async read(team: string, period: string): Promise<SpendCursor> {
    const r = this.rows.get(`${team}\u0000${period}`);
    return { spentMicroUsd: r?.spentMicroUsd ?? 0, accruedUntilMs: r?.accruedUntilMs, ...(r?.carry ? { carry: r.carry } : {}) };
  }

  async accrue(entry: SpendAccrual): Promise<boolean> {
    const key = `${entry.team}\u0000${entry.period}`;
    const r = this.rows.get(key) ?? { spentMicroUsd: 0, accruedUntilMs: undefined, lastFromMs: undefined };
    if (r.accruedUntilMs === entry.toMs && r.lastFromMs === entry.fromMs) return true; // a repeat of the last window
    if (r.accruedUntilMs !== undefined && r.accruedUntilMs !== entry.fromMs) return false;
    if (entry.toMs <= entry.fromMs) return false;
    this.rows.set(key, {
      spentMicroUsd: r.spentMicroUsd + entry.amountMicroUsd,
      accruedUntilMs: entry.toMs,
      lastFromMs: entry.fromMs,
      ...((entry.carry ?? r.carry) ? { carry: entry.carry ?? r.carry } : {}),
    });
    return true;
  }

  dump(): [string, LedgerRow][] {
    return [...this.rows.entries()];
  }

  restore(rows: readonly [string, LedgerRow][]): void {
    for (const [k, r] of rows) this.rows.set(k, { ...r });
  }

  async list(): Promise<(SpendCursor & { team: string; period: string })[]> {
    return [...this.rows.entries()].map(([k, r]) => {
      const [team, period] = k.split('\u0000') as [string, string];
      return { team, period, spentMicroUsd: r.spentMicroUsd, accruedUntilMs: r.accruedUntilMs };
    });
  }
}

export class MemoryLeaseStore implements LeaseStore {
  private readonly leases = new Map<string, { holder: string; untilMs: number }>();
  async acquire(name: string, holder: string, nowMs: number, ttlMs: number): Promise<boolean> {
    const l = this.leases.get(name);
    if (l && l.holder !== holder && l.untilMs > nowMs) return false;
    this.leases.set(name, { holder, untilMs: nowMs + ttlMs });
    return true;
  }
  async release(name: string, holder: string): Promise<void> {
    if (this.leases.get(name)?.holder === holder) this.leases.delete(name);
  }
}

export class MemoryCheckpointStore implements CheckpointStore, CheckpointHistory {
  private readonly saves = new Map<string, RetainedSaves>();
  private readonly events = new Map<string, ByteEvent>();
  private readonly teams = new Set<string>();
  /** `clock` is the store's own (the server's): it dates what the store records, and judges the machines' dates. */
  constructor(
    private readonly clock: Clock,
    readonly root = 'sim://checkpoints',
  ) {}

  locationFor(jobId: string, attempt: number): string {
    return checkpointFolder(this.root, jobId, attempt);
  }
  /** Per checkpoint location: the parts of the save under way, and of the last complete one (rank → completion time). */
  private readonly parts = new Map<string, { saving: Map<number, number>; done?: Map<number, number> }>();
  async markComplete(ref: CheckpointRef, rank = 0, meter?: SaveMeter): Promise<boolean> {
    const now = this.clock.nowMs();
    // A part dated in the future is refused before it counts towards a gang's save.
    const dated = checkpointCompletion(undefined, ref, now);
    if (dated.kind === 'refused') throw new CheckpointRefused(dated.why);
    const ranks = ref.ranks ?? 1;
    if (ranks > 1) {
      const key = `${ref.jobId}\u0000${ref.location}`;
      const got = this.parts.get(key) ?? { saving: new Map<number, number>() };
      this.parts.set(key, got);
      // This part of the complete save, again: judged again below, as the DynamoDB index does (a save the index refused
      // stays refused). A new save of the location starts from no part.
      if (got.done?.get(rank) !== ref.completedAtMs) {
        got.saving.set(rank, ref.completedAtMs);
        if (got.saving.size < ranks) return false;
        got.done = got.saving;
        got.saving = new Map();
      }
    }
    const held = this.saves.get(ref.jobId) ?? NO_SAVES;
    const taken = checkpointCompletion(held.newest, ref, now);
    if (taken.kind === 'refused') throw new CheckpointRefused(taken.why);
    if (taken.kind === 'newest') this.saves.set(ref.jobId, afterNewestSave(held, Object.freeze({ ...ref }), now, meter));
    this.putEvents(ref.jobId);
    return true;
  }
  /** The job's recent byte events, put beside its log (again, on a repeat), as the DynamoDB index does. */
  private putEvents(jobId: string): void {
    for (const e of byteEventsToPut(this.saves.get(jobId)?.bytes, this.clock.nowMs())) {
      this.events.set(e.id, e);
      this.teams.add(e.owner.team);
    }
  }
  async latest(jobId: string): Promise<CheckpointRef | undefined> {
    return this.saves.get(jobId)?.newest;
  }
  async retained(jobId: string): Promise<RetainedSaves> {
    return this.saves.get(jobId) ?? NO_SAVES;
  }
  async forgetSuperseded(jobId: string, locations: readonly string[]): Promise<void> {
    const held = this.saves.get(jobId);
    if (held) this.saves.set(jobId, afterSweep(held, locations, this.clock.nowMs()));
    this.putEvents(jobId);
  }
  async noteRead(
    jobId: string,
    location: string,
    read: { readonly key: string; readonly atMs: number; readonly machine?: Site },
  ): Promise<void> {
    const held = this.saves.get(jobId);
    const bytes = held && logRead(held.bytes, location, read);
    if (held && bytes) this.saves.set(jobId, { ...held, bytes });
    this.putEvents(jobId);
  }
  async byteEvents(): Promise<ByteEvent[]> {
    return [...this.events.values()];
  }
  async forgetByteEvents(ids: readonly string[]): Promise<void> {
    for (const id of ids) this.events.delete(id);
  }
  async byteTeams(): Promise<string[]> {
    return [...this.teams].sort();
  }
  async byteLogs(sinceMs: number): Promise<ByteLog[]> {
    return [...this.saves.values()].flatMap((h) => (h.bytes && logTouches(h.bytes, sinceMs) ? [h.bytes] : []));
  }

  dump(): RetainedSaves[] {
    return [...this.saves.values()];
  }

  dumpEvents(): ByteEvent[] {
    return [...this.events.values()];
  }

  restoreEvents(events: readonly ByteEvent[]): void {
    for (const e of events) this.events.set(e.id, e);
    for (const saves of this.saves.values()) if (saves.bytes) this.teams.add(saves.bytes.owner.team);
  }

  /** Restores a dump; a state saved before the index kept its history holds bare newest refs. */
  restore(saves: readonly (RetainedSaves | CheckpointRef)[]): void {
    for (const s of saves) {
      const held: RetainedSaves = 'location' in s ? { newest: s, superseded: [] } : s;
      if (held.newest) this.saves.set(held.newest.jobId, held);
    }
  }
}

export interface QueuedMessage {
  readonly team: string;
  readonly body: string;
  readonly token: string;
  readonly messageId: string;
  /** When it was sent (SQS's SentTimestamp), on the queue's clock when it has one. */
  readonly sentAtMs?: number;
}

/** Team queues. `receive` hands messages to intake; an unacknowledged message is not redelivered here (the simulator acknowledges at once). */
export class MemoryJobQueue implements JobQueue {
  private readonly queues = new Map<string, QueuedMessage[]>();
  private readonly seenTokens = new Map<string, Set<string>>();
  private counter = 0;

  constructor(
    teams: readonly string[],
    private readonly clock?: Clock,
  ) {
    for (const t of teams) {
      this.queues.set(t, []);
      this.seenTokens.set(t, new Set());
    }
  }

  async send(team: string, body: string, token: string): Promise<{ messageId: string }> {
    const q = this.queues.get(team);
    if (!q)
      throw new CloudError('not-found', `team "${team}" has no queue; known teams: ${[...this.queues.keys()].join(', ')}`, {
        operation: 'send',
        resource: team,
      });
    const seen = this.seenTokens.get(team)!;
    const messageId = `m-${(++this.counter).toString(16).padStart(8, '0')}`;
    if (seen.has(token)) return { messageId }; // deduplicated, like an SQS FIFO deduplication id
    seen.add(token);
    q.push({ team, body, token, messageId, ...(this.clock ? { sentAtMs: this.clock.nowMs() } : {}) });
    return { messageId };
  }

  async depth(team: string): Promise<QueueDepth> {
    const q = this.queues.get(team);
    if (!q) throw new CloudError('not-found', `team "${team}" has no queue`, { operation: 'depth', resource: team });
    return { visible: q.length, inFlight: 0, delayed: 0 };
  }

  async teams(): Promise<string[]> {
    return [...this.queues.keys()].sort();
  }

  /** Takes up to `max` messages from a team's queue (the simulated SQS event source). */
  receive(team: string, max = 10): QueuedMessage[] {
    const q = this.queues.get(team) ?? [];
    return q.splice(0, max);
  }
}

/** Budget tags held in memory; `setTags` changes them live, like re-tagging a queue. */
export class StaticBudgetTags implements BudgetTagSource {
  private sets: TeamTagSet[];
  constructor(sets: readonly TeamTagSet[]) {
    this.sets = [...sets];
  }
  async readTeamTags(): Promise<TeamTagSet[]> {
    return this.sets.map((s) => ({ ...s, tags: { ...s.tags } }));
  }
  setTags(team: string, tags: Record<string, string>): void {
    this.sets = [...this.sets.filter((s) => s.team !== team), { team, resource: `sim:queue/${team}`, tags }];
  }
  dump(): TeamTagSet[] {
    return this.sets.map((s) => ({ ...s, tags: { ...s.tags } }));
  }
  restore(sets: readonly TeamTagSet[]): void {
    this.sets = sets.map((s) => ({ ...s, tags: { ...s.tags } }));
  }
}

export class MemoryPoolHistory implements PoolHistory {
  private readonly spans = new Map<string, { offeringId: string; firstMs: number; lastMs: number }>();
  private readonly interrupted = new Map<string, { offeringId: string; atMs: number }>();

  async noteAlive(notes: readonly { instanceId: string; offeringId: string; atMs: number }[]): Promise<void> {
    for (const n of notes) {
      const s = this.spans.get(n.instanceId);
      if (!s) this.spans.set(n.instanceId, { offeringId: n.offeringId, firstMs: n.atMs, lastMs: n.atMs });
      else {
        s.firstMs = Math.min(s.firstMs, n.atMs);
        s.lastMs = Math.max(s.lastMs, n.atMs);
      }
    }
  }

  async noteInterrupted(instanceId: string, offeringId: string, atMs: number): Promise<void> {
    if (!this.interrupted.has(instanceId)) this.interrupted.set(instanceId, { offeringId, atMs });
  }

  dump(): {
    spans: [string, { offeringId: string; firstMs: number; lastMs: number }][];
    interrupted: [string, { offeringId: string; atMs: number }][];
  } {
    return { spans: [...this.spans.entries()], interrupted: [...this.interrupted.entries()] };
  }

  restore(d: ReturnType<MemoryPoolHistory['dump']>): void {
    for (const [k, v] of d.spans) this.spans.set(k, { ...v });
    for (const [k, v] of d.interrupted) this.interrupted.set(k, { ...v });
  }

  async stats(sinceMs: number): Promise<Map<string, PoolStats>> {
    return poolStatsOf(await this.machines(sinceMs), sinceMs);
  }

  async machines(sinceMs: number): Promise<MachineHistory[]> {
    const machines = new Map<string, MachineHistory>([...this.spans].map(([id, s]) => [id, { ...s }]));
    for (const [id, i] of this.interrupted) machines.set(id, { offeringId: i.offeringId, ...machines.get(id), interruptedAtMs: i.atMs });
    return [...machines.values()].filter((m) => Math.max(m.lastMs ?? 0, m.interruptedAtMs ?? 0) >= sinceMs);
  }
}

export class MemoryPlanJournal implements PlanJournal {
  private readonly plans = new Map<string, { atMs: number; actions: readonly PlanAction[]; done: Set<number>; finished: boolean }>();

  async start(planId: string, atMs: number, actions: readonly PlanAction[]): Promise<void> {
    if (!this.plans.has(planId)) this.plans.set(planId, { atMs, actions, done: new Set(), finished: false });
    // Keep the journal short: finished plans are only history.
    if (this.plans.size > 50) for (const [id, p] of this.plans) if (p.finished && this.plans.size > 50) this.plans.delete(id);
  }

  async done(planId: string, index: number): Promise<void> {
    this.plans.get(planId)?.done.add(index);
  }

  async finish(planId: string): Promise<void> {
    const p = this.plans.get(planId);
    if (p) p.finished = true;
  }

  async unfinished(): Promise<JournaledPlan | undefined> {
    let newest: [string, { atMs: number; actions: readonly PlanAction[]; done: Set<number>; finished: boolean }] | undefined;
    for (const entry of this.plans) if (!entry[1].finished && (!newest || entry[1].atMs > newest[1].atMs)) newest = entry;
    if (!newest) return undefined;
    const [planId, p] = newest;
    return { planId, atMs: p.atMs, actions: p.actions, done: new Set(p.done), finished: false };
  }
}

export class MemoryBudgetMemory implements BudgetMemory {
  private readonly teams = new Map<string, Team>();
  async load(): Promise<Map<string, Team>> {
    return new Map(this.teams);
  }
  async save(team: Team): Promise<void> {
    this.teams.set(team.id, team);
  }
}

/** Right-sizing's family runs in memory (the simulator's and the tests'). */
export class MemoryFamilyRuns implements FamilyRunStore {
  private readonly families = new Map<string, RightsizeRun[]>();
  async runs(family: string): Promise<RightsizeRun[]> {
    return [...(this.families.get(family) ?? [])];
  }
  async note(runs: readonly { readonly family: string; readonly run: RightsizeRun }[]): Promise<void> {
    for (const { family, run } of runs) this.families.set(family, mergeFamilyRuns(this.families.get(family) ?? [], [run]));
  }
  /** Every family's runs, for a saved simulation. */
  dump(): [string, RightsizeRun[]][] {
    return [...this.families.entries()];
  }
  restore(entries: readonly (readonly [string, RightsizeRun[]])[]): void {
    for (const [k, v] of entries) this.families.set(k, [...v]);
  }
}

/**
 * Job output in memory: each attempt's and rank's lines by their number (a batch sent twice keeps
 * one copy), read back attempt by attempt. The simulator's processes write here, and `dump`
 * and `restore` carry it with a saved simulation.
 */
export class MemoryJobLogs implements JobLogSink, JobLogSource {
  private readonly byJob = new Map<string, Map<string, LogLine & { attempt: number; rank: number }>>();
  /** Lines kept per job at most (the oldest go first): a simulated week of chatty jobs stays small. */
  constructor(private readonly maxLinesPerJob = 2000) {}

  async append(batch: JobLogBatch): Promise<void> {
    let lines = this.byJob.get(batch.jobId);
    if (!lines) this.byJob.set(batch.jobId, (lines = new Map()));
    for (const l of batch.lines) lines.set(`${batch.attempt}/${batch.rank}/${l.seq}`, { ...l, attempt: batch.attempt, rank: batch.rank });
    while (lines.size > this.maxLinesPerJob) lines.delete(lines.keys().next().value!);
  }

  async read(
    jobId: string,
    options: { attempt?: number; sinceMs?: number } = {},
  ): Promise<(LogLine & { attempt: number; rank: number })[]> {
    return [...(this.byJob.get(jobId)?.values() ?? [])]
      .filter(
        (l) =>
          (options.attempt === undefined || l.attempt === options.attempt) && (options.sinceMs === undefined || l.atMs >= options.sinceMs),
      )
      .sort((a, b) => a.attempt - b.attempt || a.rank - b.rank || a.seq - b.seq);
  }

  dump(): [string, (LogLine & { attempt: number; rank: number })[]][] {
    return [...this.byJob.entries()].map(([id, m]) => [id, [...m.values()]]);
  }

  restore(rows: readonly [string, readonly (LogLine & { attempt: number; rank: number })[]][]): void {
    for (const [id, lines] of rows) {
      const m = new Map<string, LogLine & { attempt: number; rank: number }>();
      for (const l of lines) m.set(`${l.attempt}/${l.rank}/${l.seq}`, { ...l });
      this.byJob.set(id, m);
    }
  }
}
