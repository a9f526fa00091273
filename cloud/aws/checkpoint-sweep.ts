import { DeleteObjectsCommand, ListObjectsV2Command, S3Client } from '@aws-sdk/client-s3';
import { GetCommand, PutCommand, type DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import type { CheckpointHistory, Clock, JobStore } from '../../core/ports.ts';
import { BucketSweep, type ListedObject, type SweepPosition, type SweptBucket } from '../checkpoint-sweep.ts';
import { parseS3Location } from './checkpoint-urls.ts';
import { checkpointRoot } from './dynamo-store.ts';
import { translateAwsError } from './errors.ts';

/** Where a bucket's sweep position is kept in the control table: the fleet's own bucket under the name it always had. */
export function sweepPositionKey(root: string, home: boolean): { pk: string; sk: string } {
  return { pk: 'sweep', sk: home ? 'checkpoints' : `checkpoints:${root}` };
}

/** The sweep's position for one root, kept in the control table. */
export function tablePosition(doc: DynamoDBDocumentClient, table: string, key: { pk: string; sk: string }): SweepPosition {
  const call = async <T>(operation: string, f: () => Promise<T>): Promise<T> => {
    try {
      return await f();
    } catch (error) {
      throw translateAwsError(error, { operation, resource: key.sk });
    }
  };
  return {
    position: async () =>
      ((await call('read checkpoint sweep position', () => doc.send(new GetCommand({ TableName: table, Key: key, ConsistentRead: true }))))
        .Item?.after as string | undefined) ?? '',
    keepPosition: async (after) =>
      void (await call('keep checkpoint sweep position', () => doc.send(new PutCommand({ TableName: table, Item: { ...key, after } })))),
  };
}

/** The fleet's S3 checkpoint bucket, as a sweep lists and deletes it (DeleteObjects, 1,000 keys a call). */
export class S3SweptBucket implements SweptBucket {
  readonly prefix: string;
  private readonly bucket: string;

  constructor(
    private readonly s3: S3Client,
    readonly root: string,
  ) {
    const { bucket, prefix } = parseS3Location(root);
    this.bucket = bucket;
    this.prefix = prefix;
  }

  uriOf(key: string): string {
    return `s3://${this.bucket}/${key}`;
  }

  async list(prefix: string, page: { startAfter?: string; token?: string; max: number }) {
    const out = await this.call('list checkpoint objects', prefix, () =>
      this.s3.send(
        new ListObjectsV2Command({
          Bucket: this.bucket,
          Prefix: prefix,
          MaxKeys: page.max,
          ...(page.startAfter ? { StartAfter: page.startAfter } : {}),
          ...(page.token ? { ContinuationToken: page.token } : {}),
        }),
      ),
    );
    const objects: ListedObject[] = [];
    for (const o of out.Contents ?? []) if (o.Key && o.LastModified) objects.push({ key: o.Key, modifiedAtMs: o.LastModified.getTime() });
    return { objects, ...(out.IsTruncated && out.NextContinuationToken ? { token: out.NextContinuationToken } : {}) };
  }

  async delete(keys: readonly string[]): Promise<number> {
    const out = await this.call('delete expired checkpoints', keys[0]!, () =>
      this.s3.send(new DeleteObjectsCommand({ Bucket: this.bucket, Delete: { Objects: keys.map((Key) => ({ Key })), Quiet: true } })),
    );
    const failed = out.Errors ?? [];
    if (failed.length > 0)
      throw translateAwsError(
        new Error(`${failed.length} of ${keys.length} objects not deleted: ${failed[0]!.Code} ${failed[0]!.Message}`),
        { operation: 'delete expired checkpoints', resource: failed[0]!.Key ?? '' },
      );
    return keys.length;
  }

  private async call<T>(operation: string, resource: string, f: () => Promise<T>): Promise<T> {
    try {
      return await f();
    } catch (error) {
      throw translateAwsError(error, { operation, resource });
    }
  }
}

/** The sweep of the fleet's S3 checkpoint bucket (the rule and its order: cloud/checkpoint-sweep.ts). */
export class S3CheckpointSweep extends BucketSweep {
  constructor(deps: {
    readonly s3: S3Client;
    /** The checkpoint root, `s3://bucket/prefix/` (what the index's locations start with). */
    readonly root: string;
    readonly jobs: JobStore;
    readonly checkpoints: CheckpointHistory;
    /** Where the sweep's position is kept: the control table. */
    readonly doc: DynamoDBDocumentClient;
    readonly table: string;
    readonly clock: Clock;
    readonly retentionDays: number;
    readonly budgetMs?: number;
    readonly concurrency?: number;
  }) {
    super(new S3SweptBucket(deps.s3, deps.root), tablePosition(deps.doc, deps.table, sweepPositionKey(deps.root, true)), deps);
  }
}

/**
 * The sweep for a fleet's config, when it has one: an S3 checkpoint root and a retention (the
 * stack sets GPU_FLEET_CHECKPOINT_RETENTION_DAYS on its reconcile function). Built by the
 * reconcile entry alone, so the other functions carry no S3 client.
 */
export function checkpointSweepFor(
  config: {
    readonly region: string;
    readonly checkpointBucket: string;
    readonly checkpointRetentionDays?: number;
    readonly tables: { readonly control: string };
  },
  deps: { readonly jobs: JobStore; readonly checkpoints: CheckpointHistory; readonly doc: DynamoDBDocumentClient; readonly clock: Clock },
  s3: S3Client = new S3Client({ region: config.region, retryMode: 'adaptive', maxAttempts: 5 }),
): S3CheckpointSweep | undefined {
  const root = checkpointRoot(config.checkpointBucket);
  if (config.checkpointRetentionDays === undefined || !root.startsWith('s3://')) return undefined;
  return new S3CheckpointSweep({ s3, root, ...deps, table: config.tables.control, retentionDays: config.checkpointRetentionDays });
}
