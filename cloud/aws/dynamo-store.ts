import { gunzipSync, gzipSync } from 'node:zlib';
import { DynamoDBClient, type DynamoDBClientConfig } from '@aws-sdk/client-dynamodb';
import {
  BatchWriteCommand,
  DeleteCommand,
  DynamoDBDocumentClient,
  GetCommand,
  PutCommand,
  QueryCommand,
  ScanCommand,
  UpdateCommand,
  type QueryCommandInput,
  type UpdateCommandInput,
} from '@aws-sdk/lib-dynamodb';
import { CloudError, ConflictError, GpuFleetError } from '../../core/errors.ts';
import { mergeDraining, type Draining, type MachineMeterFacts, type NodeRecord } from '../../core/fleet.ts';
import {
  afterNewestSave,
  afterSweep,
  checkpointCompletion,
  checkpointFolder,
  CheckpointRefused,
  isTerminal,
  NO_SAVES,
  type CheckpointRef,
  type Job,
  type JobState,
  type RetainedSaves,
  type SaveMeter,
} from '../../core/job.ts';
import {
  byteEventsToPut,
  byteCarryProblem,
  logRead,
  logTouches,
  type ByteCarry,
  type ByteEvent,
  type ByteLog,
  type Site,
} from '../../core/bytes.ts';
import type { ActionFailure, PlanAction } from '../../core/plan.ts';
import { poolStatsOf, type MachineHistory } from '../../core/risk.ts';
import type { Team } from '../../core/team.ts';
import type {
  BudgetMemory,
  Clock,
  FamilyRunStore,
  CheckpointHistory,
  CheckpointStore,
  DecisionLog,
  DecisionRecord,
  JobStore,
  JournaledPlan,
  LeaseStore,
  NodeStore,
  PlanJournal,
  PoolHistory,
  PoolStats,
  ServiceStore,
  SpendAccrual,
  SpendCursor,
  SpendLedger,
  WriteResult,
} from '../../core/ports.ts';
import type { ServiceRecord } from '../../core/serving/service.ts';
import { mergeFamilyRuns, type RightsizeRun } from '../../core/rightsizing.ts';
import { isConditionFailure, translateAwsError } from './errors.ts';
import type { TableNames } from './tables.ts';

/**
 * The state store on DynamoDB: every state-store port, on the tables described in tables.ts.
 * Every write that can race is a conditional write; "not found" is a value; other failures are
 * CloudErrors in the port vocabulary.
 */
export function documentClient(config: DynamoDBClientConfig = {}): DynamoDBDocumentClient {
  return documentClientFor(new DynamoDBClient({ retryMode: 'adaptive', ...config }));
}

/**
 * The document client the stores use, over a DynamoDB client. `variables` names the setting
 * behind each table (`GPU_FLEET_JOBS_TABLE` for the jobs table), so a missing table's error says
 * which setting to fix.
 */
export function documentClientFor(client: DynamoDBClient, variables: Readonly<Record<string, string>> = {}): DynamoDBDocumentClient {
  const doc = DynamoDBDocumentClient.from(client, { marshallOptions: { removeUndefinedValues: true, convertClassInstanceToMap: false } });
  // A failed call says which table it was about, so "not found" can name the missing table.
  doc.middlewareStack.add(
    (next) => async (args) => {
      try {
        return await next(args);
      } catch (error) {
        const table = (args.input as { TableName?: unknown }).TableName;
        if (typeof table === 'string' && error !== null && typeof error === 'object') {
          Object.assign(error, { tableName: table, ...(variables[table] ? { tableVariable: variables[table] } : {}) });
        }
        throw error;
      }
    },
    { step: 'initialize', name: 'gpuFleetTableOfError' },
  );
  return doc;
}

const DAY_S = 86_400;
/** The control plane's clock where none is given: the machine's own (a Lambda function's). */
const wallClock: Clock = { nowMs: () => Date.now() };
const FINISHED_JOB_TTL_S = 90 * DAY_S;
const DAY_MS = DAY_S * 1000;

/** The UTC day (`2026-12-01`) of a time: the partition of the ended-jobs index. */
function endedDayOf(ms: number): string {
  return new Date(ms).toISOString().slice(0, 10);
}

async function call<T>(operation: string, resource: string, f: () => Promise<T>): Promise<T> {
  try {
    return await f();
  } catch (error) {
    throw translateAwsError(error, { operation, resource });
  }
}

/**
 * An update that applies only when its condition holds: true when written, false when the
 * condition failed (the caller's "nothing to do"); any other failure is translated and thrown.
 */
async function updateIf(doc: DynamoDBDocumentClient, input: UpdateCommandInput, operation: string, resource: string): Promise<boolean> {
  try {
    await doc.send(new UpdateCommand(input));
    return true;
  } catch (error) {
    if (!isConditionFailure(error)) throw translateAwsError(error, { operation, resource });
    return false;
  }
}

/** Runs a query to the end, page by page. */
/** Writes up to 25 put or delete requests in one BatchWriteItem, again for what comes back unprocessed. */
async function batchWrite(
  doc: DynamoDBDocumentClient,
  table: string,
  requests: readonly Record<string, unknown>[],
  operation: string,
  resource: string,
): Promise<void> {
  let pending: Record<string, unknown>[] | undefined = [...requests];
  for (let tries = 0; pending && pending.length > 0; tries++) {
    const batch: Record<string, unknown>[] = pending;
    const out = await call(operation, resource, () => doc.send(new BatchWriteCommand({ RequestItems: { [table]: batch } })));
    pending = out.UnprocessedItems?.[table] as Record<string, unknown>[] | undefined;
    if (pending && pending.length > 0 && tries > 8)
      throw translateAwsError(new Error('unprocessed items after retries'), { operation, resource });
  }
}

async function queryAll(doc: DynamoDBDocumentClient, input: QueryCommandInput, operation: string): Promise<Record<string, unknown>[]> {
  const out: Record<string, unknown>[] = [];
  let start: Record<string, unknown> | undefined;
  do {
    const page = await call(operation, input.TableName ?? '', () =>
      doc.send(new QueryCommand({ ...input, ...(start ? { ExclusiveStartKey: start } : {}) })),
    );
    out.push(...((page.Items ?? []) as Record<string, unknown>[]));
    start = page.LastEvaluatedKey as Record<string, unknown> | undefined;
  } while (start);
  return out;
}

// ---- jobs -------------------------------------------------------------------------------

export class DynamoJobStore implements JobStore {
  constructor(
    private readonly doc: DynamoDBDocumentClient,
    private readonly table: string,
  ) {}

  private item(job: Job): Record<string, unknown> {
    const order = `${String(job.submittedAtMs).padStart(15, '0')}#${job.id}`;
    return {
      id: job.id,
      state: job.state,
      team: job.team,
      teamState: `${job.team}#${job.state}`,
      order,
      version: job.version,
      job,
      ...(isTerminal(job.state) ? { expiresAt: Math.floor((job.endedAtMs ?? job.updatedAtMs) / 1000) + FINISHED_JOB_TTL_S } : {}),
      // Sparse index of finished jobs that held machines, by UTC day of their end: spend accrual
      // reads the few that ended since its oldest cursor, one query per day.
      ...(isTerminal(job.state) && job.heldAttempts && job.endedAtMs !== undefined
        ? { endedDay: endedDayOf(job.endedAtMs), endedAtMs: job.endedAtMs }
        : {}),
    };
  }

  async listEndedSince(sinceMs: number, untilMs: number): Promise<Job[]> {
    const days: string[] = [];
    for (let d = Math.floor(sinceMs / DAY_MS); d <= Math.floor(Math.max(sinceMs, untilMs) / DAY_MS); d++) days.push(endedDayOf(d * DAY_MS));
    const lists = await Promise.all(
      days.map((day) =>
        queryAll(
          this.doc,
          {
            TableName: this.table,
            IndexName: 'byEndedDay',
            KeyConditionExpression: 'endedDay = :d AND endedAtMs BETWEEN :from AND :to',
            ExpressionAttributeValues: { ':d': day, ':from': sinceMs, ':to': untilMs },
          },
          'list ended jobs',
        ),
      ),
    );
    return lists
      .flat()
      .map((it) => it.job as Job)
      .sort((a, b) => (a.endedAtMs ?? 0) - (b.endedAtMs ?? 0) || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  }

  async create(job: Job): Promise<{ created: boolean; job: Job }> {
    try {
      await this.doc.send(new PutCommand({ TableName: this.table, Item: this.item(job), ConditionExpression: 'attribute_not_exists(id)' }));
      return { created: true, job };
    } catch (error) {
      if (!isConditionFailure(error)) throw translateAwsError(error, { operation: 'create job', resource: job.id });
      const existing = await this.get(job.id);
      if (!existing) throw translateAwsError(error, { operation: 'create job', resource: job.id });
      return { created: false, job: existing };
    }
  }

  async get(id: string): Promise<Job | undefined> {
    const out = await call('get job', id, () =>
      this.doc.send(new GetCommand({ TableName: this.table, Key: { id }, ConsistentRead: true })),
    );
    return out.Item?.job as Job | undefined;
  }

  async update(next: Job, expectedVersion: number): Promise<WriteResult> {
    if (next.version !== expectedVersion + 1) return { ok: false, current: await this.get(next.id) };
    try {
      await this.doc.send(
        new PutCommand({
          TableName: this.table,
          Item: this.item(next),
          ConditionExpression: '#v = :v',
          ExpressionAttributeNames: { '#v': 'version' },
          ExpressionAttributeValues: { ':v': expectedVersion },
        }),
      );
      return { ok: true, job: next };
    } catch (error) {
      if (!isConditionFailure(error)) throw translateAwsError(error, { operation: 'update job', resource: next.id });
      return { ok: false, current: await this.get(next.id) };
    }
  }

  async listByState(states: readonly JobState[], team?: string): Promise<Job[]> {
    const lists = await Promise.all(
      states.map((state) =>
        queryAll(
          this.doc,
          team === undefined
            ? {
                TableName: this.table,
                IndexName: 'byState',
                KeyConditionExpression: '#s = :s',
                ExpressionAttributeNames: { '#s': 'state' },
                ExpressionAttributeValues: { ':s': state },
              }
            : {
                TableName: this.table,
                IndexName: 'byTeamState',
                KeyConditionExpression: 'teamState = :ts',
                ExpressionAttributeValues: { ':ts': `${team}#${state}` },
              },
          'list jobs',
        ),
      ),
    );
    // The indexes are eventually consistent: an item may show its old state for a moment. Keep
    // only items whose own state matches, and each job once.
    const seen = new Map<string, { order: string; job: Job }>();
    for (const items of lists)
      for (const it of items)
        if (states.includes((it.job as Job).state)) seen.set(it.id as string, { order: it.order as string, job: it.job as Job });
    return [...seen.values()].sort((a, b) => (a.order < b.order ? -1 : a.order > b.order ? 1 : 0)).map((x) => x.job);
  }
}

// ---- nodes ------------------------------------------------------------------------------

export class DynamoNodeStore implements NodeStore {
  constructor(
    private readonly doc: DynamoDBDocumentClient,
    private readonly table: string,
  ) {}

  async register(record: NodeRecord): Promise<void> {
    await call('register node', record.instanceId, () =>
      this.doc.send(
        new UpdateCommand({
          TableName: this.table,
          Key: { instanceId: record.instanceId },
          UpdateExpression:
            'SET groupId = :g, gpus = :gpus, healthy = :h, lastHeartbeatAtMs = :hb, registeredAtMs = if_not_exists(registeredAtMs, :reg), assigned = if_not_exists(assigned, :none)' +
            (record.address ? ', address = :addr' : '') +
            (record.healthProblem ? ', healthProblem = :p' : ' REMOVE healthProblem'),
          ExpressionAttributeValues: {
            ':g': record.groupId,
            ':gpus': record.gpus,
            ':h': record.healthy,
            ':hb': record.lastHeartbeatAtMs,
            ':reg': record.registeredAtMs,
            ':none': {},
            ...(record.address ? { ':addr': record.address } : {}),
            ...(record.healthProblem ? { ':p': record.healthProblem } : {}),
          },
        }),
      ),
    );
  }

  async heartbeat(instanceId: string, atMs: number, health?: { healthy: boolean; problem?: string }): Promise<boolean> {
    const sets = ['lastHeartbeatAtMs = :t'];
    const values: Record<string, unknown> = { ':t': atMs };
    let remove = '';
    if (health) {
      sets.push('healthy = :h');
      values[':h'] = health.healthy;
      if (health.problem) {
        sets.push('healthProblem = :p');
        values[':p'] = health.problem;
      } else remove = ' REMOVE healthProblem';
    }
    try {
      await this.doc.send(
        new UpdateCommand({
          TableName: this.table,
          Key: { instanceId },
          UpdateExpression: `SET ${sets.join(', ')}${remove}`,
          ConditionExpression: 'attribute_exists(instanceId) AND (attribute_not_exists(lastHeartbeatAtMs) OR lastHeartbeatAtMs < :t)',
          ExpressionAttributeValues: values,
        }),
      );
      return true;
    } catch (error) {
      if (!isConditionFailure(error)) throw translateAwsError(error, { operation: 'heartbeat', resource: instanceId });
      return (await this.get(instanceId)) !== undefined; // an older heartbeat for a known node is simply not newer
    }
  }

  async get(instanceId: string): Promise<NodeRecord | undefined> {
    const out = await call('get node', instanceId, () =>
      this.doc.send(new GetCommand({ TableName: this.table, Key: { instanceId }, ConsistentRead: true })),
    );
    return out.Item ? toNode(out.Item) : undefined;
  }

  async list(): Promise<NodeRecord[]> {
    const out: NodeRecord[] = [];
    let start: Record<string, unknown> | undefined;
    do {
      const page = await call('list nodes', this.table, () =>
        this.doc.send(new ScanCommand({ TableName: this.table, ConsistentRead: true, ...(start ? { ExclusiveStartKey: start } : {}) })),
      );
      for (const it of page.Items ?? []) out.push(toNode(it));
      start = page.LastEvaluatedKey;
    } while (start);
    return out.sort((a, b) => (a.instanceId < b.instanceId ? -1 : 1));
  }

  /**
   * Read, merge (core's mergeDraining), and write on the condition that the mark is still the one
   * read: a concurrent notice makes the write fail, and the merge is done again on what it wrote.
   */
  async markDraining(instanceId: string, drain: Draining & { groupId?: string }): Promise<NodeRecord> {
    const { groupId, ...mark } = drain;
    for (let tries = 0; tries < 8; tries++) {
      const current = await this.get(instanceId);
      const merged = mergeDraining(current?.draining, mark);
      if (current && !merged) return current;
      const seen = current?.draining;
      const condition = seen
        ? [
            'draining.deadlineMs = :dl0',
            'draining.sinceMs = :s0',
            seen.lifecycle?.token !== undefined
              ? 'draining.lifecycle.#tok = :tok0'
              : seen.lifecycle
                ? 'attribute_exists(draining.lifecycle) AND attribute_not_exists(draining.lifecycle.#tok)'
                : 'attribute_not_exists(draining.lifecycle)',
          ].join(' AND ')
        : 'attribute_not_exists(draining)';
      try {
        const out = await this.doc.send(
          new UpdateCommand({
            TableName: this.table,
            Key: { instanceId },
            UpdateExpression:
              'SET draining = :d, groupId = if_not_exists(groupId, :g), registeredAtMs = if_not_exists(registeredAtMs, :t), lastHeartbeatAtMs = if_not_exists(lastHeartbeatAtMs, :t), gpus = if_not_exists(gpus, :none), healthy = if_not_exists(healthy, :yes), assigned = if_not_exists(assigned, :empty)',
            ConditionExpression: condition,
            ...(seen?.lifecycle ? { ExpressionAttributeNames: { '#tok': 'token' } } : {}),
            ExpressionAttributeValues: {
              ':d': merged ?? mark,
              ':g': groupId ?? 'unknown',
              ':t': drain.sinceMs,
              ':none': [],
              ':yes': true,
              ':empty': {},
              ...(seen ? { ':dl0': seen.deadlineMs, ':s0': seen.sinceMs } : {}),
              ...(seen?.lifecycle?.token !== undefined ? { ':tok0': seen.lifecycle.token } : {}),
            },
            ReturnValues: 'ALL_NEW',
          }),
        );
        return toNode(out.Attributes!);
      } catch (error) {
        if (!isConditionFailure(error)) throw translateAwsError(error, { operation: 'mark node draining', resource: instanceId });
      }
    }
    throw new ConflictError(`could not mark ${instanceId} draining: its mark kept changing under concurrent notices`, {
      context: { instanceId },
    });
  }

  async setIdleSince(instanceId: string, idleSinceMs: number | undefined): Promise<void> {
    await updateIf(
      this.doc,
      {
        TableName: this.table,
        Key: { instanceId },
        UpdateExpression: idleSinceMs === undefined ? 'REMOVE idleSinceMs' : 'SET idleSinceMs = :i',
        ConditionExpression: 'attribute_exists(instanceId)',
        ...(idleSinceMs === undefined ? {} : { ExpressionAttributeValues: { ':i': idleSinceMs } }),
      },
      'set idle time',
      instanceId,
    );
  }

  async setPrefetch(instanceId: string, images: readonly string[]): Promise<boolean> {
    return this.setImageList(instanceId, 'prefetchImages', images, 'set prefetch images');
  }

  async noteImages(instanceId: string, images: readonly string[]): Promise<boolean> {
    return this.setImageList(instanceId, 'images', [...images].sort(), 'note node images');
  }

  /** Sets (or, empty, removes) one list attribute of a registered node's record; false when it has none. */
  private setImageList(
    instanceId: string,
    attribute: 'prefetchImages' | 'images',
    list: readonly string[],
    operation: string,
  ): Promise<boolean> {
    return updateIf(
      this.doc,
      {
        TableName: this.table,
        Key: { instanceId },
        UpdateExpression: list.length === 0 ? `REMOVE ${attribute}` : `SET ${attribute} = :l`,
        ConditionExpression: 'attribute_exists(instanceId)',
        ...(list.length === 0 ? {} : { ExpressionAttributeValues: { ':l': [...list] } }),
      },
      operation,
      instanceId,
    );
  }

  async noteMeter(instanceId: string, meter: MachineMeterFacts): Promise<boolean> {
    const input = {
      TableName: this.table,
      Key: { instanceId },
      UpdateExpression: 'SET meter = :m',
      ConditionExpression: 'attribute_exists(instanceId) AND attribute_not_exists(meter)',
      ExpressionAttributeValues: { ':m': meter },
    };
    // Not written: either the node has no record, or it has its meter already.
    return (await updateIf(this.doc, input, 'note node meter', instanceId)) || (await this.get(instanceId)) !== undefined;
  }

  async noteEnded(instanceId: string, atMs: number): Promise<void> {
    await updateIf(
      this.doc,
      {
        TableName: this.table,
        Key: { instanceId },
        UpdateExpression: 'SET endedAtMs = :t',
        ConditionExpression: 'attribute_exists(instanceId) AND (attribute_not_exists(endedAtMs) OR endedAtMs > :t)',
        ExpressionAttributeValues: { ':t': atMs },
      },
      'note node ended',
      instanceId,
    );
  }

  async remove(instanceId: string): Promise<void> {
    await call('remove node', instanceId, () => this.doc.send(new DeleteCommand({ TableName: this.table, Key: { instanceId } })));
  }

  /**
   * The work list is a map attribute on the node's item, so the agent reads it with its own
   * record. A nested SET needs the map to exist: records made by register and markDraining
   * always have it; an item from before it existed gets it with a second conditional write.
   */
  async assign(instanceId: string, jobId: string, attempt: number): Promise<boolean> {
    for (let tries = 0; tries < 3; tries++) {
      try {
        await this.doc.send(
          new UpdateCommand({
            TableName: this.table,
            Key: { instanceId },
            UpdateExpression: 'SET assigned.#j = :a',
            ConditionExpression: 'attribute_exists(assigned) AND (attribute_not_exists(assigned.#j) OR assigned.#j < :a)',
            ExpressionAttributeNames: { '#j': jobId },
            ExpressionAttributeValues: { ':a': attempt },
          }),
        );
        return true;
      } catch (error) {
        if (!isConditionFailure(error))
          throw translateAwsError(error, { operation: 'assign job to node', resource: `${instanceId}/${jobId}` });
      }
      const out = await call('get node', instanceId, () =>
        this.doc.send(new GetCommand({ TableName: this.table, Key: { instanceId }, ConsistentRead: true })),
      );
      if (!out.Item) return false;
      const assigned = out.Item.assigned as Record<string, number> | undefined;
      if (assigned) {
        if ((assigned[jobId] ?? 0) >= attempt) return true; // already there, or a newer attempt is
        continue; // the pointer moved between the two reads: try again
      }
      try {
        await this.doc.send(
          new UpdateCommand({
            TableName: this.table,
            Key: { instanceId },
            UpdateExpression: 'SET assigned = :m',
            ConditionExpression: 'attribute_exists(instanceId) AND attribute_not_exists(assigned)',
            ExpressionAttributeValues: { ':m': { [jobId]: attempt } },
          }),
        );
        return true;
      } catch (error) {
        if (!isConditionFailure(error))
          throw translateAwsError(error, { operation: 'assign job to node', resource: `${instanceId}/${jobId}` });
      }
    }
    throw new CloudError('conflict', `assign job to node on ${instanceId}/${jobId} failed: the work list kept changing`, {
      operation: 'assign job to node',
      resource: instanceId,
      cloud: 'aws',
    });
  }

  async unassign(instanceId: string, jobId: string, attempt: number): Promise<void> {
    await updateIf(
      this.doc,
      {
        TableName: this.table,
        Key: { instanceId },
        UpdateExpression: 'REMOVE assigned.#j',
        ConditionExpression: 'assigned.#j <= :a',
        ExpressionAttributeNames: { '#j': jobId },
        ExpressionAttributeValues: { ':a': attempt },
      },
      'unassign job from node',
      `${instanceId}/${jobId}`,
    );
  }
}

function toNode(it: Record<string, unknown>): NodeRecord {
  return {
    instanceId: it.instanceId as string,
    groupId: it.groupId as string,
    registeredAtMs: it.registeredAtMs as number,
    lastHeartbeatAtMs: it.lastHeartbeatAtMs as number,
    gpus: (it.gpus as NodeRecord['gpus']) ?? [],
    healthy: (it.healthy as boolean) ?? true,
    ...(it.address ? { address: it.address as string } : {}),
    ...(it.healthProblem ? { healthProblem: it.healthProblem as string } : {}),
    ...(it.draining ? { draining: it.draining as Draining } : {}),
    ...(it.idleSinceMs !== undefined ? { idleSinceMs: it.idleSinceMs as number } : {}),
    ...(it.assigned !== undefined ? { assigned: it.assigned as Record<string, number> } : {}),
    ...(it.meter ? { meter: it.meter as MachineMeterFacts } : {}),
    ...(it.endedAtMs !== undefined ? { endedAtMs: it.endedAtMs as number } : {}),
    ...(Array.isArray(it.prefetchImages) ? { prefetchImages: it.prefetchImages as string[] } : {}),
    ...(Array.isArray(it.images) ? { images: it.images as string[] } : {}),
  };
}

// ---- the control table ------------------------------------------------------------------

/** Large values (plans, decisions) are stored gzipped in parts of at most this many base64 characters. */
const PART_CHARS = 300_000;

class Blobs {
  constructor(
    private readonly doc: DynamoDBDocumentClient,
    private readonly table: string,
  ) {}

  /** Writes a value as parts under pk; returns the number of parts. */
  async write(pk: string, value: unknown, expiresAt: number): Promise<number> {
    const data = gzipSync(Buffer.from(JSON.stringify(value))).toString('base64');
    const parts: string[] = [];
    for (let i = 0; i < data.length || i === 0; i += PART_CHARS) parts.push(data.slice(i, i + PART_CHARS));
    for (let i = 0; i < parts.length; i += 25) {
      const batch = parts
        .slice(i, i + 25)
        .map((p, j) => ({ PutRequest: { Item: { pk, sk: `part#${String(i + j).padStart(5, '0')}`, data: p, expiresAt } } }));
      await batchWrite(this.doc, this.table, batch, 'write parts', pk);
    }
    return parts.length;
  }

  async read<T>(pk: string): Promise<T | undefined> {
    const items = await queryAll(
      this.doc,
      {
        TableName: this.table,
        KeyConditionExpression: 'pk = :pk AND begins_with(sk, :p)',
        ExpressionAttributeValues: { ':pk': pk, ':p': 'part#' },
        ConsistentRead: true,
      },
      'read parts',
    );
    if (items.length === 0) return undefined;
    const data = items.map((i) => i.data as string).join('');
    return JSON.parse(gunzipSync(Buffer.from(data, 'base64')).toString('utf8')) as T;
  }
}

export class DynamoLeaseStore implements LeaseStore {
  constructor(
    private readonly doc: DynamoDBDocumentClient,
    private readonly table: string,
  ) {}

  async acquire(name: string, holder: string, nowMs: number, ttlMs: number): Promise<boolean> {
    try {
      await this.doc.send(
        new PutCommand({
          TableName: this.table,
          Item: { pk: 'lease', sk: name, holder, untilMs: nowMs + ttlMs, expiresAt: Math.floor((nowMs + ttlMs) / 1000) + DAY_S },
          ConditionExpression: 'attribute_not_exists(pk) OR untilMs <= :now OR holder = :h',
          ExpressionAttributeValues: { ':now': nowMs, ':h': holder },
        }),
      );
      return true;
    } catch (error) {
      if (isConditionFailure(error)) return false;
      throw translateAwsError(error, { operation: 'acquire lease', resource: name });
    }
  }

  async release(name: string, holder: string): Promise<void> {
    try {
      await this.doc.send(
        new DeleteCommand({
          TableName: this.table,
          Key: { pk: 'lease', sk: name },
          ConditionExpression: 'holder = :h',
          ExpressionAttributeValues: { ':h': holder },
        }),
      );
    } catch (error) {
      if (!isConditionFailure(error)) throw translateAwsError(error, { operation: 'release lease', resource: name });
    }
  }
}

export class DynamoPlanJournal implements PlanJournal {
  private readonly blobs: Blobs;
  constructor(
    private readonly doc: DynamoDBDocumentClient,
    private readonly table: string,
  ) {
    this.blobs = new Blobs(doc, table);
  }

  async start(planId: string, atMs: number, actions: readonly PlanAction[]): Promise<void> {
    const existing = await call('read plan', planId, () =>
      this.doc.send(new GetCommand({ TableName: this.table, Key: { pk: 'plan', sk: planId }, ConsistentRead: true })),
    );
    if (existing.Item) return; // started already: a second start changes nothing
    const expiresAt = Math.floor(atMs / 1000) + 7 * DAY_S;
    const parts = await this.blobs.write(`plan#${planId}`, actions, expiresAt);
    try {
      await this.doc.send(
        new PutCommand({
          TableName: this.table,
          Item: { pk: 'plan', sk: planId, atMs, parts, count: actions.length, finished: false, expiresAt },
          ConditionExpression: 'attribute_not_exists(pk)',
        }),
      );
    } catch (error) {
      if (!isConditionFailure(error)) throw translateAwsError(error, { operation: 'start plan', resource: planId });
    }
  }

  async done(planId: string, index: number): Promise<void> {
    await call('record action done', planId, () =>
      this.doc.send(
        new UpdateCommand({
          TableName: this.table,
          Key: { pk: 'plan', sk: planId },
          UpdateExpression: 'ADD done :i',
          ExpressionAttributeValues: { ':i': new Set([index]) },
        }),
      ),
    );
  }

  async finish(planId: string): Promise<void> {
    await call('finish plan', planId, () =>
      this.doc.send(
        new UpdateCommand({
          TableName: this.table,
          Key: { pk: 'plan', sk: planId },
          UpdateExpression: 'SET finished = :t',
          ExpressionAttributeValues: { ':t': true },
        }),
      ),
    );
  }

  async unfinished(): Promise<JournaledPlan | undefined> {
    const page = await call('find unfinished plan', this.table, () =>
      this.doc.send(
        new QueryCommand({
          TableName: this.table,
          KeyConditionExpression: 'pk = :p',
          ExpressionAttributeValues: { ':p': 'plan' },
          ScanIndexForward: false,
          Limit: 20,
          ConsistentRead: true,
        }),
      ),
    );
    const head = (page.Items ?? []).find((i) => i.finished === false);
    if (!head) return undefined;
    const actions = (await this.blobs.read<PlanAction[]>(`plan#${head.sk as string}`)) ?? [];
    return {
      planId: head.sk as string,
      atMs: head.atMs as number,
      actions,
      done: new Set((head.done as Set<number> | undefined) ?? []),
      finished: false,
    };
  }
}

export class DynamoDecisionLog implements DecisionLog {
  private readonly blobs: Blobs;
  constructor(
    private readonly doc: DynamoDBDocumentClient,
    private readonly table: string,
    private readonly keepDays = 30,
  ) {
    this.blobs = new Blobs(doc, table);
  }

  async record(decision: DecisionRecord): Promise<void> {
    const expiresAt = Math.floor(decision.atMs / 1000) + this.keepDays * DAY_S;
    const { plan, ...header } = decision;
    const parts = await this.blobs.write(`decision#${decision.id}`, plan, expiresAt);
    await call('record decision', decision.id, () =>
      this.doc.send(new PutCommand({ TableName: this.table, Item: { pk: 'decision', sk: decision.id, header, parts, expiresAt } })),
    );
  }

  async get(id: string): Promise<DecisionRecord | undefined> {
    const out = await call('get decision', id, () =>
      this.doc.send(new GetCommand({ TableName: this.table, Key: { pk: 'decision', sk: id }, ConsistentRead: true })),
    );
    if (!out.Item) return undefined;
    return this.assemble(out.Item);
  }

  async recent(limit: number): Promise<DecisionRecord[]> {
    const page = await call('list decisions', this.table, () =>
      this.doc.send(
        new QueryCommand({
          TableName: this.table,
          KeyConditionExpression: 'pk = :p',
          ExpressionAttributeValues: { ':p': 'decision' },
          ScanIndexForward: false,
          Limit: limit,
        }),
      ),
    );
    return Promise.all((page.Items ?? []).map((i) => this.assemble(i)));
  }

  private async assemble(item: Record<string, unknown>): Promise<DecisionRecord> {
    const plan = (await this.blobs.read<DecisionRecord['plan']>(`decision#${item.sk as string}`)) ?? {
      actions: [],
      waiting: [],
      addedCostMicroUsdPerHour: 0,
      addedExpectedCostMicroUsdPerHour: 0,
    };
    const header = item.header as Omit<DecisionRecord, 'plan'>;
    // Records written before action failures were data carry them as sentences.
    const errors = (header.errors as readonly (ActionFailure | string)[]).map((e, index) =>
      typeof e === 'string' ? { index, kind: 'place' as const, resource: '', code: 'failed', message: e } : e,
    );
    return { ...header, errors, plan };
  }
}

/**
 * A budget row's byte carry. One that cannot be read is left out (its team's bytes are counted from
 * nothing held, and its events charged again at most once more) and said in the log, never thrown:
 * spend accrual goes on for every team.
 */
function carryOf(item: Record<string, unknown> | undefined, resource: string): { carry?: ByteCarry } {
  if (typeof item?.carry !== 'string') return {};
  let carry: unknown;
  try {
    carry = JSON.parse(item.carry);
  } catch {
    carry = undefined;
  }
  const problem = byteCarryProblem(carry);
  if (problem === undefined) return { carry: carry as ByteCarry };
  console.warn(JSON.stringify({ level: 'WARN', message: 'spend row has a byte carry that cannot be read; left out', resource, problem }));
  return {};
}

export class DynamoSpendLedger implements SpendLedger {
  constructor(
    private readonly doc: DynamoDBDocumentClient,
    private readonly table: string,
  ) {}

  async read(team: string, period: string): Promise<SpendCursor> {
    const out = await call('read spend', `${team}/${period}`, () =>
      this.doc.send(new GetCommand({ TableName: this.table, Key: { pk: 'spend', sk: `${team}#${period}` }, ConsistentRead: true })),
    );
    return {
      spentMicroUsd: (out.Item?.spentMicroUsd as number | undefined) ?? 0,
      accruedUntilMs: out.Item?.accruedUntilMs as number | undefined,
      ...carryOf(out.Item, `${team}/${period}`),
    };
  }

  async accrue(entry: SpendAccrual): Promise<boolean> {
    if (entry.toMs <= entry.fromMs) return false;
    try {
      await this.doc.send(
        new UpdateCommand({
          TableName: this.table,
          Key: { pk: 'spend', sk: `${entry.team}#${entry.period}` },
          UpdateExpression: `SET accruedUntilMs = :to, lastFromMs = :from, team = :team, #p = :period${entry.carry ? ', carry = :carry' : ''} ADD spentMicroUsd :amt`,
          ConditionExpression: 'attribute_not_exists(accruedUntilMs) OR accruedUntilMs = :from',
          ExpressionAttributeNames: { '#p': 'period' },
          ExpressionAttributeValues: {
            ':to': entry.toMs,
            ':from': entry.fromMs,
            ':amt': entry.amountMicroUsd,
            ':team': entry.team,
            ':period': entry.period,
            // As JSON: a carry's site keys and event ids are data, not attribute names.
            ...(entry.carry ? { ':carry': JSON.stringify(entry.carry) } : {}),
          },
        }),
      );
      return true;
    } catch (error) {
      if (!isConditionFailure(error))
        throw translateAwsError(error, { operation: 'accrue spend', resource: `${entry.team}/${entry.period}` });
      const out = await call('read spend', entry.team, () =>
        this.doc.send(
          new GetCommand({ TableName: this.table, Key: { pk: 'spend', sk: `${entry.team}#${entry.period}` }, ConsistentRead: true }),
        ),
      );
      return out.Item?.accruedUntilMs === entry.toMs && out.Item?.lastFromMs === entry.fromMs; // a repeat of the last window
    }
  }

  async list(): Promise<(SpendCursor & { team: string; period: string })[]> {
    const items = await queryAll(
      this.doc,
      { TableName: this.table, KeyConditionExpression: 'pk = :p', ExpressionAttributeValues: { ':p': 'spend' } },
      'list spend',
    );
    return items.map((i) => ({
      team: i.team as string,
      period: i.period as string,
      spentMicroUsd: (i.spentMicroUsd as number) ?? 0,
      accruedUntilMs: i.accruedUntilMs as number | undefined,
    }));
  }
}

export class DynamoPoolHistory implements PoolHistory {
  constructor(
    private readonly doc: DynamoDBDocumentClient,
    private readonly table: string,
    private readonly keepDays = 35,
  ) {}

  async noteAlive(notes: readonly { instanceId: string; offeringId: string; atMs: number }[]): Promise<void> {
    for (const n of notes) {
      const expiresAt = Math.floor(n.atMs / 1000) + this.keepDays * DAY_S;
      try {
        await this.doc.send(
          new UpdateCommand({
            TableName: this.table,
            Key: { pk: 'poolinst', sk: n.instanceId },
            UpdateExpression: 'SET offeringId = :o, firstMs = if_not_exists(firstMs, :t), lastMs = :t, expiresAt = :e',
            ConditionExpression: 'attribute_not_exists(lastMs) OR lastMs < :t',
            ExpressionAttributeValues: { ':o': n.offeringId, ':t': n.atMs, ':e': expiresAt },
          }),
        );
      } catch (error) {
        if (!isConditionFailure(error)) throw translateAwsError(error, { operation: 'note pool exposure', resource: n.instanceId });
        // An older note: it may only move the start back.
        try {
          await this.doc.send(
            new UpdateCommand({
              TableName: this.table,
              Key: { pk: 'poolinst', sk: n.instanceId },
              UpdateExpression: 'SET firstMs = :t',
              ConditionExpression: 'firstMs > :t',
              ExpressionAttributeValues: { ':t': n.atMs },
            }),
          );
        } catch (inner) {
          if (!isConditionFailure(inner)) throw translateAwsError(inner, { operation: 'note pool exposure', resource: n.instanceId });
        }
      }
    }
  }

  async noteInterrupted(instanceId: string, offeringId: string, atMs: number): Promise<void> {
    try {
      await this.doc.send(
        new UpdateCommand({
          TableName: this.table,
          Key: { pk: 'poolinst', sk: instanceId },
          UpdateExpression:
            'SET interruptedAtMs = :t, offeringId = if_not_exists(offeringId, :o), expiresAt = if_not_exists(expiresAt, :e)',
          ConditionExpression: 'attribute_not_exists(interruptedAtMs)',
          ExpressionAttributeValues: { ':t': atMs, ':o': offeringId, ':e': Math.floor(atMs / 1000) + this.keepDays * DAY_S },
        }),
      );
    } catch (error) {
      if (!isConditionFailure(error)) throw translateAwsError(error, { operation: 'note interruption', resource: instanceId });
    }
  }

  async stats(sinceMs: number): Promise<Map<string, PoolStats>> {
    return poolStatsOf(await this.machines(sinceMs), sinceMs);
  }

  async machines(sinceMs: number): Promise<MachineHistory[]> {
    const items = await queryAll(
      this.doc,
      { TableName: this.table, KeyConditionExpression: 'pk = :p', ExpressionAttributeValues: { ':p': 'poolinst' } },
      'read pool history',
    );
    return items
      .map((i) => ({
        offeringId: i.offeringId as string,
        ...(typeof i.firstMs === 'number' ? { firstMs: i.firstMs } : {}),
        ...(typeof i.lastMs === 'number' ? { lastMs: i.lastMs } : {}),
        ...(typeof i.interruptedAtMs === 'number' ? { interruptedAtMs: i.interruptedAtMs } : {}),
      }))
      .filter((m) => Math.max(m.lastMs ?? 0, m.interruptedAtMs ?? 0) >= sinceMs);
  }
}

/**
 * Checkpoints live in S3 (written by the node agent); this index in the control table records
 * the newest complete one of each job, with a conditional write so an older one never wins.
 * `root` is where attempts write: `s3://bucket/checkpoints/` (or `file:///…/` for a node that
 * keeps them on a shared file system).
 */
export class DynamoCheckpointIndex implements CheckpointStore, CheckpointHistory {
  private readonly root: string;
  /** `clock` is the control plane's (the server's): it dates what the index records and judges the machines' dates. */
  constructor(
    private readonly doc: DynamoDBDocumentClient,
    private readonly table: string,
    root: string,
    private readonly clock: Clock = wallClock,
  ) {
    if (!/^(s3|gs|file):\/\/./.test(root))
      throw new GpuFleetError(`a checkpoint root is s3://bucket/prefix/, gs://bucket/prefix/ or file:///path/; got "${root}"`);
    this.root = root.endsWith('/') ? root : `${root}/`;
  }

  locationFor(jobId: string, attempt: number): string {
    return checkpointFolder(this.root, jobId, attempt);
  }

  /**
   * The completion is judged by the rule every store follows (`checkpointCompletion`): refused when
   * dated in the future, or behind the newest one's progress; newest otherwise, the store's clock
   * ordering. The write is conditional on the progress it was judged against, so a racing newer
   * completion is never overwritten; a lost race is judged again on what won it.
   */
  async markComplete(ref: CheckpointRef, rank = 0, meter?: SaveMeter): Promise<boolean> {
    const dated = checkpointCompletion(undefined, ref, this.clock.nowMs());
    if (dated.kind === 'refused') throw new CheckpointRefused(dated.why);
    const ranks = ref.ranks ?? 1;
    if (ranks > 1 && !(await this.recordPart(ref, rank, ranks))) return false;
    for (let tries = 0; ; tries++) {
      const held = await this.retained(ref.jobId);
      const current = held.newest;
      const now = this.clock.nowMs();
      const taken = checkpointCompletion(current, ref, now);
      if (taken.kind === 'refused') throw new CheckpointRefused(taken.why);
      if (taken.kind === 'again') {
        await this.putEvents(held.bytes);
        return true;
      }
      const next = afterNewestSave(held, ref, now, meter);
      const rev = this.revs.get(held);
      try {
        await this.doc.send(
          new PutCommand({
            TableName: this.table,
            Item: {
              pk: 'ckpt',
              sk: ref.jobId,
              ref,
              ...(next.previous ? { previous: next.previous, replacedAtMs: next.replacedAtMs } : {}),
              ...(next.superseded.length > 0 ? { superseded: next.superseded } : {}),
              ...(next.bytes ? { bytes: next.bytes } : {}),
              rev: (rev ?? 0) + 1,
              recordedAtMs: now,
              progressSec: ref.progressSec,
              expiresAt: Math.floor(now / 1000) + 120 * DAY_S,
            },
            ...(current ? this.unchangedSince(held) : { ConditionExpression: 'attribute_not_exists(sk)' }),
          }),
        );
        await this.putEvents(next.bytes);
        return true;
      } catch (error) {
        if (!isConditionFailure(error) || tries >= 4)
          throw translateAwsError(error, { operation: 'record checkpoint', resource: ref.jobId });
      }
    }
  }

  /**
   * A gang's part of one save: an attribute per rank (`rank<r>` = the part's completion time) on an
   * item per checkpoint location. The save is complete when every rank has one; its parts then move
   * to `done`, so the next save of the same location starts again from none (a location saved again
   * by one rank alone is not complete), while a repeated call for a part of the completed save
   * (same rank, same time) still answers complete.
   */
  private async recordPart(ref: CheckpointRef, rank: number, ranks: number): Promise<boolean> {
    const key = { pk: 'ckpt-parts', sk: `${ref.jobId}#${ref.location}` };
    let attrs: Record<string, unknown> | undefined;
    try {
      const out = await this.doc.send(
        new UpdateCommand({
          TableName: this.table,
          Key: key,
          UpdateExpression: 'SET #r = :c, expiresAt = :e',
          ConditionExpression: 'attribute_not_exists(done.#r) OR done.#r <> :c',
          ExpressionAttributeNames: { '#r': `rank${rank}` },
          ExpressionAttributeValues: { ':c': ref.completedAtMs, ':e': Math.floor(ref.completedAtMs / 1000) + 7 * DAY_S },
          ReturnValues: 'ALL_NEW',
        }),
      );
      attrs = out.Attributes;
    } catch (error) {
      if (isConditionFailure(error)) return true; // this part of the completed save, again
      throw translateAwsError(error, { operation: 'record checkpoint part', resource: ref.jobId });
    }
    const parts = Object.entries(attrs ?? {}).filter(([k]) => /^rank\d+$/.test(k));
    if (parts.length < ranks) return false;
    // Complete: the parts become the done save's, only as they were read (a concurrent new save's part is left alone).
    const names = Object.fromEntries(parts.map(([k], i) => [`#p${i}`, k]));
    const values = Object.fromEntries(parts.map(([, v], i) => [`:p${i}`, v]));
    try {
      await this.doc.send(
        new UpdateCommand({
          TableName: this.table,
          Key: key,
          UpdateExpression: `SET done = :done REMOVE ${Object.keys(names).join(', ')}`,
          ConditionExpression: Object.keys(names)
            .map((n, i) => `${n} = :p${i}`)
            .join(' AND '),
          ExpressionAttributeNames: names,
          ExpressionAttributeValues: { ...values, ':done': Object.fromEntries(parts) },
        }),
      );
    } catch (error) {
      if (!isConditionFailure(error)) throw translateAwsError(error, { operation: 'complete checkpoint parts', resource: ref.jobId });
    }
    return true;
  }

  async latest(jobId: string): Promise<CheckpointRef | undefined> {
    return (await this.retained(jobId)).newest;
  }

  async retained(jobId: string): Promise<RetainedSaves> {
    const out = await call('read checkpoint', jobId, () =>
      this.doc.send(new GetCommand({ TableName: this.table, Key: { pk: 'ckpt', sk: jobId }, ConsistentRead: true })),
    );
    return out.Item ? this.heldOf(out.Item) : NO_SAVES;
  }

  /** Each record read, and its revision (bumped by every write): the writes after a read are conditional on it. */
  private readonly revs = new WeakMap<RetainedSaves, number>();

  private heldOf(item: Record<string, unknown>): RetainedSaves {
    const held: RetainedSaves = {
      newest: item.ref as CheckpointRef,
      ...(item.previous ? { previous: item.previous as CheckpointRef, replacedAtMs: item.replacedAtMs as number } : {}),
      superseded: (item.superseded as string[] | undefined) ?? [],
      ...(item.bytes ? { bytes: item.bytes as ByteLog } : {}),
    };
    this.revs.set(held, (item.rev as number | undefined) ?? 0);
    return held;
  }

  /**
   * The condition that the record is as `held` was read: the same newest save and, for records
   * written since the index kept revisions, the same revision (a record without one is matched by
   * its newest save alone, as before).
   */
  private unchangedSince(held: RetainedSaves) {
    const rev = this.revs.get(held) ?? 0;
    return {
      ConditionExpression: `#r.#l = :l AND #r.#p = :p AND ${rev > 0 ? 'rev = :rev' : 'attribute_not_exists(rev)'}`,
      ExpressionAttributeNames: { '#r': 'ref', '#l': 'location', '#p': 'progressSec' },
      ExpressionAttributeValues: { ':l': held.newest!.location, ':p': held.newest!.progressSec, ...(rev > 0 ? { ':rev': rev } : {}) },
    };
  }

  /** Writes what changed of a record read as `held` (its superseded list and byte log), conditional on it being unchanged since. */
  private async rewrite(jobId: string, held: RetainedSaves, next: RetainedSaves): Promise<void> {
    const cond = this.unchangedSince(held);
    const set = ['rev = :next'];
    const remove: string[] = [];
    const values: Record<string, unknown> = { ...cond.ExpressionAttributeValues, ':next': (this.revs.get(held) ?? 0) + 1 };
    if (next.superseded.length > 0) {
      set.push('superseded = :s');
      values[':s'] = next.superseded;
    } else remove.push('superseded');
    if (next.bytes) {
      set.push('bytes = :b');
      values[':b'] = next.bytes;
    }
    await this.doc.send(
      new UpdateCommand({
        TableName: this.table,
        Key: { pk: 'ckpt', sk: jobId },
        UpdateExpression: `SET ${set.join(', ')}${remove.length > 0 ? ` REMOVE ${remove.join(', ')}` : ''}`,
        ConditionExpression: cond.ConditionExpression,
        ExpressionAttributeNames: cond.ExpressionAttributeNames,
        ExpressionAttributeValues: values,
      }),
    );
  }

  /**
   * Drops deleted locations from the superseded list and closes their saves in the byte log,
   * conditional on the record being as it was read (the caller's read, when given, saves a read):
   * a write meanwhile (a save completing, a read noted) re-reads and applies the sweep to it.
   */
  async forgetSuperseded(jobId: string, locations: readonly string[], read?: RetainedSaves): Promise<void> {
    if (locations.length === 0) return;
    await this.change(jobId, 'forget swept checkpoints', read, (held) => {
      const next = afterSweep(held, locations, this.clock.nowMs());
      return next.superseded.length === held.superseded.length && next.bytes === held.bytes ? undefined : next;
    });
  }

  async noteRead(
    jobId: string,
    location: string,
    read: { readonly key: string; readonly atMs: number; readonly machine?: Site },
  ): Promise<void> {
    await this.change(jobId, 'note a checkpoint read', undefined, (held) => {
      const bytes = logRead(held.bytes, location, read);
      return bytes ? { ...held, bytes } : undefined;
    });
  }

  /** One conditional change of a job's record: `f` gives the record it becomes (undefined: nothing to write); a lost race reads again. */
  private async change(
    jobId: string,
    operation: string,
    read: RetainedSaves | undefined,
    f: (held: RetainedSaves) => RetainedSaves | undefined,
  ): Promise<void> {
    for (let tries = 0; ; tries++) {
      const held = tries === 0 && read && this.revs.has(read) ? read : await this.retained(jobId);
      const next = held.newest ? f(held) : undefined;
      if (!next) {
        // Nothing to change: perhaps a repeat of a call whose events were not put; they are put again (the same ids).
        await this.putEvents(held.bytes);
        return;
      }
      try {
        await this.rewrite(jobId, held, next);
        await this.putEvents(next.bytes);
        return;
      } catch (error) {
        if (!isConditionFailure(error) || tries >= 4) throw translateAwsError(error, { operation, resource: jobId });
      }
    }
  }

  /**
   * A log's recent events (core/bytes.ts `byteEventsToPut`), each an item of its own (pk
   * `bytes-event`, sk its id) beside the index: put after the index write, so an event never
   * stands for a change that did not happen; a repeat of the call puts them again (same keys).
   * They expire after two weeks, should accrual stop reading them.
   */
  private async putEvents(log: ByteLog | undefined): Promise<void> {
    const now = this.clock.nowMs();
    const events = byteEventsToPut(log, now);
    if (events.length === 0) return;
    const expiresAt = Math.floor(now / 1000) + 14 * DAY_S;
    // The team's mark (pk `bytes-team`) rides in the first batch: accrual counts what each marked team holds.
    const items = [
      { pk: 'bytes-team', sk: events[0]!.owner.team },
      ...events.map((e) => ({ pk: 'bytes-event', sk: e.id, event: e, expiresAt })),
    ];
    for (let i = 0; i < items.length; i += 25)
      await batchWrite(
        this.doc,
        this.table,
        items.slice(i, i + 25).map((Item) => ({ PutRequest: { Item } })),
        'record checkpoint byte events',
        events[0]!.owner.jobId,
      );
  }

  async byteTeams(): Promise<string[]> {
    const items = await queryAll(
      this.doc,
      { TableName: this.table, KeyConditionExpression: 'pk = :p', ExpressionAttributeValues: { ':p': 'bytes-team' }, ConsistentRead: true },
      'read teams holding checkpoint bytes',
    );
    return items.map((i) => i.sk as string);
  }

  async byteEvents(): Promise<ByteEvent[]> {
    const items = await queryAll(
      this.doc,
      {
        TableName: this.table,
        KeyConditionExpression: 'pk = :p',
        ExpressionAttributeValues: { ':p': 'bytes-event' },
        ConsistentRead: true,
      },
      'read checkpoint byte events',
    );
    return items.map((i) => i.event as ByteEvent);
  }

  async forgetByteEvents(ids: readonly string[]): Promise<void> {
    for (let i = 0; i < ids.length; i += 25)
      await batchWrite(
        this.doc,
        this.table,
        ids.slice(i, i + 25).map((id) => ({ DeleteRequest: { Key: { pk: 'bytes-event', sk: id } } })),
        'forget checkpoint byte events',
        ids[i]!,
      );
  }

  /**
   * The byte logs of every job with a save held at or after `sinceMs`: every record of the index is
   * read (its byte log only), a page at a time. For `gpu-fleet report`, not spend accrual.
   */
  async byteLogs(sinceMs: number): Promise<ByteLog[]> {
    const items = await queryAll(
      this.doc,
      {
        TableName: this.table,
        KeyConditionExpression: 'pk = :p',
        ExpressionAttributeValues: { ':p': 'ckpt' },
        ProjectionExpression: 'bytes',
        ConsistentRead: true,
      },
      'read checkpoint byte logs',
    );
    return items.flatMap((i) => {
      const log = i.bytes as ByteLog | undefined;
      return log && logTouches(log, sinceMs) ? [log] : [];
    });
  }
}

export class DynamoBudgetMemory implements BudgetMemory {
  constructor(
    private readonly doc: DynamoDBDocumentClient,
    private readonly table: string,
  ) {}

  async load(): Promise<Map<string, Team>> {
    const items = await queryAll(
      this.doc,
      { TableName: this.table, KeyConditionExpression: 'pk = :p', ExpressionAttributeValues: { ':p': 'budget' }, ConsistentRead: true },
      'read budgets',
    );
    return new Map(items.map((i) => [i.sk as string, i.team as Team]));
  }

  async save(team: Team): Promise<void> {
    await call('save budget', team.id, () =>
      this.doc.send(new PutCommand({ TableName: this.table, Item: { pk: 'budget', sk: team.id, team } })),
    );
  }
}

/** The checkpoint root a bucket name or root URI stands for: a bare bucket keeps its checkpoints under `checkpoints/`. */
export function checkpointRoot(checkpoints: string): string {
  return /^[a-z0-9]+:\/\//.test(checkpoints) ? checkpoints : `s3://${checkpoints}/checkpoints/`;
}

/** Every state-store port on one document client. `checkpoints` is a bucket name or a root URI (s3://…/, file:///…/). */
export function dynamoStores(doc: DynamoDBDocumentClient, tables: TableNames, checkpoints: string, clock: Clock = wallClock) {
  return {
    jobs: new DynamoJobStore(doc, tables.jobs),
    nodes: new DynamoNodeStore(doc, tables.nodes),
    lease: new DynamoLeaseStore(doc, tables.control),
    journal: new DynamoPlanJournal(doc, tables.control),
    decisions: new DynamoDecisionLog(doc, tables.control),
    ledger: new DynamoSpendLedger(doc, tables.control),
    pools: new DynamoPoolHistory(doc, tables.control),
    checkpoints: new DynamoCheckpointIndex(doc, tables.control, checkpointRoot(checkpoints), clock),
    budgetMemory: new DynamoBudgetMemory(doc, tables.control),
    families: new DynamoFamilyRuns(doc, tables.control),
  };
}

/**
 * Right-sizing's family runs in the control table (pk `family`, sk the family): the kept runs as
 * JSON in `body`, with a version for the conditional write. Reconcile is the one writer (under its
 * lease); a write that loses a race anyway is read and merged again.
 */
export class DynamoFamilyRuns implements FamilyRunStore {
  constructor(
    private readonly doc: DynamoDBDocumentClient,
    private readonly table: string,
  ) {}

  private async read(family: string): Promise<{ runs: RightsizeRun[]; version: number }> {
    const out = await call('read family runs', family, () =>
      this.doc.send(new GetCommand({ TableName: this.table, Key: { pk: 'family', sk: family }, ConsistentRead: true })),
    );
    return out.Item
      ? { runs: JSON.parse(out.Item.body as string) as RightsizeRun[], version: out.Item.version as number }
      : { runs: [], version: 0 };
  }

  async runs(family: string): Promise<RightsizeRun[]> {
    return (await this.read(family)).runs;
  }

  async note(runs: readonly { readonly family: string; readonly run: RightsizeRun }[]): Promise<void> {
    const byFamily = new Map<string, RightsizeRun[]>();
    for (const { family, run } of runs) byFamily.set(family, [...(byFamily.get(family) ?? []), run]);
    for (const [family, added] of byFamily) {
      for (let tries = 0; ; tries++) {
        const { runs: kept, version } = await this.read(family);
        const merged = mergeFamilyRuns(kept, added);
        if (JSON.stringify(merged) === JSON.stringify(kept)) break;
        try {
          await this.doc.send(
            new PutCommand({
              TableName: this.table,
              Item: { pk: 'family', sk: family, version: version + 1, body: JSON.stringify(merged) },
              ConditionExpression: 'attribute_not_exists(pk) OR version = :v',
              ExpressionAttributeValues: { ':v': version },
            }),
          );
          break;
        } catch (error) {
          if (!isConditionFailure(error) || tries >= 4)
            throw translateAwsError(error, { operation: 'write family runs', resource: family });
        }
      }
    }
  }
}

// ---- services ---------------------------------------------------------------------------

/**
 * Service records in the control table (pk `service`, sk the service id): the record as JSON in
 * `body` (its memory and history are the service's own business, read and written whole), and
 * its version beside it for the conditional writes.
 */
export class DynamoServiceStore implements ServiceStore {
  constructor(
    private readonly doc: DynamoDBDocumentClient,
    private readonly table: string,
  ) {}

  async create(record: ServiceRecord): Promise<{ created: boolean; record: ServiceRecord }> {
    try {
      await this.doc.send(
        new PutCommand({
          TableName: this.table,
          Item: { pk: 'service', sk: record.id, version: record.version, body: JSON.stringify(record) },
          ConditionExpression: 'attribute_not_exists(pk)',
        }),
      );
      return { created: true, record };
    } catch (error) {
      if (!isConditionFailure(error)) throw translateAwsError(error, { operation: 'create service', resource: record.id });
      const stored = await this.get(record.id);
      if (!stored) throw translateAwsError(error, { operation: 'create service', resource: record.id });
      return { created: false, record: stored };
    }
  }

  async get(id: string): Promise<ServiceRecord | undefined> {
    const out = await call('read service', id, () =>
      this.doc.send(new GetCommand({ TableName: this.table, Key: { pk: 'service', sk: id }, ConsistentRead: true })),
    );
    return out.Item ? (JSON.parse(out.Item.body as string) as ServiceRecord) : undefined;
  }

  async update(
    next: ServiceRecord,
    expectedVersion: number,
  ): Promise<{ ok: true; record: ServiceRecord } | { ok: false; current: ServiceRecord | undefined }> {
    if (next.version !== expectedVersion + 1) return { ok: false, current: await this.get(next.id) };
    try {
      await this.doc.send(
        new PutCommand({
          TableName: this.table,
          Item: { pk: 'service', sk: next.id, version: next.version, body: JSON.stringify(next) },
          ConditionExpression: 'version = :v',
          ExpressionAttributeValues: { ':v': expectedVersion },
        }),
      );
      return { ok: true, record: next };
    } catch (error) {
      if (!isConditionFailure(error)) throw translateAwsError(error, { operation: 'update service', resource: next.id });
      return { ok: false, current: await this.get(next.id) };
    }
  }

  async list(): Promise<ServiceRecord[]> {
    const items = await queryAll(
      this.doc,
      { TableName: this.table, KeyConditionExpression: 'pk = :p', ExpressionAttributeValues: { ':p': 'service' }, ConsistentRead: true },
      'list services',
    );
    return items.map((i) => JSON.parse(i.body as string) as ServiceRecord);
  }
}
