import { type DynamoDBDocumentClient, GetCommand, PutCommand } from '@aws-sdk/lib-dynamodb';
import { isTerminal, type Job, type JobState } from '../../../core/job.ts';
import type { JobStore, WriteResult } from '../../../core/ports.ts';
import { isConditionFailure, translateAwsError } from '../errors.ts';
import { FINISHED_JOB_TTL_S, DAY_MS, endedDayOf, call, queryAll } from './common.ts';

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
