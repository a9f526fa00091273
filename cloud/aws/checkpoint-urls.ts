import {
  CompleteMultipartUploadCommand,
  CreateMultipartUploadCommand,
  GetObjectCommand,
  ListObjectsV2Command,
  PutObjectCommand,
  UploadPartCommand,
  type S3Client,
} from '@aws-sdk/client-s3';
import { getSignedUrl } from '@aws-sdk/s3-request-presigner';
import { GpuFleetError } from '../../core/errors.ts';
import {
  DOWNLOAD_FILES_PER_CALL,
  partBytesFor,
  MAX_PART_BYTES,
  MAX_PARTS,
  SINGLE_PUT_MAX_BYTES,
  type UploadTarget,
} from './agent-api-protocol.ts';
import { translateAwsError } from './errors.ts';

/**
 * Presigned S3 URLs for one checkpoint folder: what the agent API hands a machine so that it
 * reads and writes the checkpoint objects of its own jobs, and no others, without an S3 permission
 * of its own. Each URL names one object and one method and lasts `expiresInSec`.
 */
export interface CheckpointUrls {
  /** Where each file goes (path under the folder → one PUT, or a multipart upload begun, its part URLs asked for by partUrls). */
  uploadTargets(location: string, files: readonly { path: string; bytes: number }[]): Promise<UploadTarget[]>;
  /** The PUT URLs of parts `firstPart` … `firstPart + count - 1` of a multipart upload begun by uploadTargets. */
  partUrls(location: string, path: string, uploadId: string, firstPart: number, count: number): Promise<string[]>;
  /** Completes a multipart upload begun by uploadTargets. */
  finishUpload(location: string, path: string, uploadId: string, parts: readonly { partNumber: number; etag: string }[]): Promise<void>;
  /**
   * One GET per object under the folder, a page of at most `limit` in path order, after the path
   * `after` when given; `next` names the page's last path when more may follow.
   */
  downloadUrls(location: string, after?: string, limit?: number): Promise<{ files: { path: string; url: string }[]; next?: string }>;
}

/** `s3://bucket/prefix/` as bucket and key prefix (ending in "/", or empty). */
export function parseS3Location(location: string): { bucket: string; prefix: string } {
  const m = /^s3:\/\/([a-z0-9][a-z0-9.-]{1,61}[a-z0-9])\/(.*)$/.exec(location);
  if (!m) throw new GpuFleetError(`not an S3 location (s3://bucket/prefix/): ${location}`);
  const prefix = m[2]!;
  return { bucket: m[1]!, prefix: prefix === '' || prefix.endsWith('/') ? prefix : `${prefix}/` };
}

export class S3CheckpointUrls implements CheckpointUrls {
  constructor(
    private readonly s3: S3Client,
    private readonly expiresInSec = 3600,
  ) {}

  async uploadTargets(location: string, files: readonly { path: string; bytes: number }[]): Promise<UploadTarget[]> {
    const { bucket, prefix } = parseS3Location(location);
    const out: UploadTarget[] = [];
    for (const f of files) {
      const Key = prefix + f.path;
      if (f.bytes <= SINGLE_PUT_MAX_BYTES) {
        out.push({ path: f.path, url: await this.sign(new PutObjectCommand({ Bucket: bucket, Key })) });
        continue;
      }
      const partBytes = partBytesFor(f.bytes);
      const parts = Math.ceil(f.bytes / partBytes);
      if (partBytes > MAX_PART_BYTES || parts > MAX_PARTS)
        throw new GpuFleetError(`${f.path} is ${f.bytes} bytes; a checkpoint file may be at most ${MAX_PARTS * MAX_PART_BYTES} bytes`);
      const started = await this.call('start checkpoint upload', Key, () =>
        this.s3.send(new CreateMultipartUploadCommand({ Bucket: bucket, Key })),
      );
      out.push({ path: f.path, uploadId: started.UploadId!, partBytes, parts });
    }
    return out;
  }

  async partUrls(location: string, path: string, uploadId: string, firstPart: number, count: number): Promise<string[]> {
    const { bucket, prefix } = parseS3Location(location);
    const Key = prefix + path;
    if (!Number.isSafeInteger(firstPart) || !Number.isSafeInteger(count) || firstPart < 1 || count < 1 || firstPart + count - 1 > 10_000)
      throw new GpuFleetError(`parts ${firstPart}-${firstPart + count - 1} of ${path}: a multipart upload has parts 1 to 10,000`);
    const out: string[] = [];
    for (let n = firstPart; n < firstPart + count; n++)
      out.push(await this.sign(new UploadPartCommand({ Bucket: bucket, Key, UploadId: uploadId, PartNumber: n })));
    return out;
  }

  async finishUpload(
    location: string,
    path: string,
    uploadId: string,
    parts: readonly { partNumber: number; etag: string }[],
  ): Promise<void> {
    const { bucket, prefix } = parseS3Location(location);
    const Key = prefix + path;
    await this.call('finish checkpoint upload', Key, () =>
      this.s3.send(
        new CompleteMultipartUploadCommand({
          Bucket: bucket,
          Key,
          UploadId: uploadId,
          MultipartUpload: {
            Parts: [...parts].sort((a, b) => a.partNumber - b.partNumber).map((p) => ({ PartNumber: p.partNumber, ETag: p.etag })),
          },
        }),
      ),
    );
  }

  async downloadUrls(
    location: string,
    after?: string,
    limit = DOWNLOAD_FILES_PER_CALL,
  ): Promise<{ files: { path: string; url: string }[]; next?: string }> {
    const { bucket, prefix } = parseS3Location(location);
    const page = await this.call('list checkpoint', prefix, () =>
      this.s3.send(
        new ListObjectsV2Command({
          Bucket: bucket,
          Prefix: prefix,
          MaxKeys: limit,
          ...(after !== undefined ? { StartAfter: prefix + after } : {}),
        }),
      ),
    );
    const keys = (page.Contents ?? []).map((o) => o.Key).filter((k): k is string => k !== undefined);
    const files: { path: string; url: string }[] = [];
    // A folder's marker object ("…/") is no file; it still moves the page on.
    for (const Key of keys)
      if (!Key.endsWith('/'))
        files.push({ path: Key.slice(prefix.length), url: await this.sign(new GetObjectCommand({ Bucket: bucket, Key })) });
    const last = keys.at(-1);
    return { files, ...(page.IsTruncated && last !== undefined ? { next: last.slice(prefix.length) } : {}) };
  }

  private sign(command: PutObjectCommand | UploadPartCommand | GetObjectCommand): Promise<string> {
    return getSignedUrl(this.s3, command as PutObjectCommand, { expiresIn: this.expiresInSec });
  }

  private async call<T>(operation: string, resource: string, f: () => Promise<T>): Promise<T> {
    try {
      return await f();
    } catch (error) {
      throw translateAwsError(error, { operation, resource });
    }
  }
}
