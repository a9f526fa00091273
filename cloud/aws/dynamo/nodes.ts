import { DeleteCommand, type DynamoDBDocumentClient, GetCommand, ScanCommand, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { CloudError, ConflictError } from '../../../core/errors.ts';
import { mergeDraining, type Draining, type MachineMeterFacts, type NodeRecord } from '../../../core/fleet.ts';
import type { NodeStore } from '../../../core/ports.ts';
import { isConditionFailure, translateAwsError } from '../errors.ts';
import { call, updateIf } from './common.ts';

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
