import { gunzipSync, gzipSync } from 'node:zlib';
import { DynamoDBClient, type DynamoDBClientConfig } from '@aws-sdk/client-dynamodb';
import {
  BatchWriteCommand,
  DynamoDBDocumentClient,
  QueryCommand,
  UpdateCommand,
  type QueryCommandInput,
  type UpdateCommandInput,
} from '@aws-sdk/lib-dynamodb';
import { byteCarryProblem, type ByteCarry } from '../../../core/bytes.ts';
import type { Clock } from '../../../core/ports.ts';
import { isConditionFailure, translateAwsError } from '../errors.ts';

// What every DynamoDB store shares: the document client, the call wrapper that translates errors, conditional updates,
// batched writes, paged queries, and the compressed blobs big records are kept in.

/** A document client over a new DynamoDB client with adaptive retries. */
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

export const DAY_S = 86_400;

/** The control plane's clock where none is given: the machine's own (a Lambda function's). */
export const wallClock: Clock = { nowMs: () => Date.now() };

export const FINISHED_JOB_TTL_S = 90 * DAY_S;

export const DAY_MS = DAY_S * 1000;

/** The UTC day (`2026-12-01`) of a time: the partition of the ended-jobs index. */
export function endedDayOf(ms: number): string {
  return new Date(ms).toISOString().slice(0, 10);
}

export async function call<T>(operation: string, resource: string, f: () => Promise<T>): Promise<T> {
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
export async function updateIf(
  doc: DynamoDBDocumentClient,
  input: UpdateCommandInput,
  operation: string,
  resource: string,
): Promise<boolean> {
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
export async function batchWrite(
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

export async function queryAll(
  doc: DynamoDBDocumentClient,
  input: QueryCommandInput,
  operation: string,
): Promise<Record<string, unknown>[]> {
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

/** Large values (plans, decisions) are stored gzipped in parts of at most this many base64 characters. */
export const PART_CHARS = 300_000;

export class Blobs {
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

/**
 * A budget row's byte carry. One that cannot be read is left out (its team's bytes are counted from
 * nothing held, and its events charged again at most once more) and said in the log, never thrown:
 * spend accrual goes on for every team.
 */
export function carryOf(item: Record<string, unknown> | undefined, resource: string): { carry?: ByteCarry } {
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
