import { type DynamoDBDocumentClient, GetCommand, PutCommand, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { GpuFleetError } from '../../../core/errors.ts';
import {
  afterNewestSave,
  afterSweep,
  checkpointCompletion,
  checkpointFolder,
  CheckpointRefused,
  NO_SAVES,
  type CheckpointRef,
  type RetainedSaves,
  type SaveMeter,
} from '../../../core/job.ts';
import { byteEventsToPut, logRead, logTouches, type ByteEvent, type ByteLog, type Site } from '../../../core/bytes.ts';
import type { Clock, CheckpointHistory, CheckpointStore } from '../../../core/ports.ts';
import { isConditionFailure, translateAwsError } from '../errors.ts';
import { DAY_S, wallClock, call, batchWrite, queryAll } from './common.ts';

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
