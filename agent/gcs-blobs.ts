import { createWriteStream } from 'node:fs';
import { mkdir, rm } from 'node:fs/promises';
import { dirname, resolve, sep } from 'node:path';
import { pipeline } from 'node:stream/promises';
import type { Storage } from '@google-cloud/storage';
import { gcs, parseGsLocation } from '../cloud/gcp/checkpoint-store.ts';
import { GpuFleetError } from '../core/errors.ts';
import type { CheckpointBlobs } from './checkpoint-files.ts';
import { closeAll, openJobFolder, readStream } from './job-files.ts';

/** Files up to this size go up in one request (a multipart upload); larger ones in a resumable upload. */
const SIMPLE_UPLOAD_MAX_BYTES = 8 * 1024 * 1024;

/**
 * Cloud Storage as the checkpoint store of a GCP machine (`gs://bucket/prefix/` locations, a bucket
 * in the machine's own region), with the machine's service account. A large file goes up in one
 * resumable upload, which Cloud Storage bills as one operation, and is checked against the CRC32C
 * the library computes as it sends. Files are read as agent/job-files.ts hands them out (regular
 * files of the job's folder, from the handle they were judged by).
 */
export class GcsBlobs implements CheckpointBlobs {
  constructor(private readonly storage: Storage) {}

  async upload(localDir: string, location: string, within = localDir): Promise<readonly number[]> {
    const { bucket, prefix } = parseGsLocation(location);
    const files = await openJobFolder(localDir, within);
    try {
      for (const f of files) {
        const name = prefix + f.path;
        const file = this.storage.bucket(bucket).file(name);
        await gcs('upload checkpoint', `gs://${bucket}/${name}`, async () => {
          const options = { validation: 'crc32c' as const, contentType: 'application/octet-stream' };
          if (f.bytes <= SIMPLE_UPLOAD_MAX_BYTES) return pipeline(readStream(f), file.createWriteStream({ ...options, resumable: false }));
          // The session is opened first, with the machine's credentials; its URI then carries the bytes (it needs no others).
          const [uri] = await file.createResumableUpload({ metadata: { contentType: options.contentType } });
          return pipeline(readStream(f), file.createWriteStream({ ...options, resumable: true, uri }));
        });
      }
      return files.map((f) => f.bytes);
    } finally {
      await closeAll(files);
    }
  }

  async download(location: string, localDir: string): Promise<boolean> {
    const { bucket, prefix } = parseGsLocation(location);
    const [files] = await gcs('list checkpoint', location, () => this.storage.bucket(bucket).getFiles({ prefix, autoPaginate: true }));
    const names = files.map((f) => f.name).filter((n) => !n.endsWith('/'));
    if (names.length === 0) return false;
    await rm(localDir, { recursive: true, force: true });
    for (const name of names) {
      const target = resolve(localDir, ...name.slice(prefix.length).split('/'));
      if (!target.startsWith(resolve(localDir) + sep)) throw new GpuFleetError(`object ${name} would land outside ${localDir}`);
      await mkdir(dirname(target), { recursive: true });
      await gcs('read checkpoint', `gs://${bucket}/${name}`, () =>
        pipeline(this.storage.bucket(bucket).file(name).createReadStream({ validation: 'crc32c' }), createWriteStream(target)),
      );
    }
    return true;
  }
}

/**
 * Stores by location scheme: a machine saves into its own site's store, and resumes from wherever
 * the job's newest save is (a job moved between clouds reads its save from the other cloud's).
 */
export class BlobsByScheme implements CheckpointBlobs {
  constructor(private readonly stores: Readonly<Record<string, CheckpointBlobs>>) {}

  private of(location: string): CheckpointBlobs {
    const scheme = /^([a-z0-9]+):\/\//.exec(location)?.[1];
    const store = scheme === undefined ? undefined : this.stores[scheme];
    if (!store)
      throw new GpuFleetError(
        `no checkpoint store on this machine reads ${location}; it has ${Object.keys(this.stores)
          .map((s) => `${s}://`)
          .join(', ')}`,
      );
    return store;
  }

  async upload(localDir: string, location: string, within?: string): Promise<readonly number[]> {
    return this.of(location).upload(localDir, location, within);
  }
  async download(location: string, localDir: string): Promise<boolean> {
    return this.of(location).download(location, localDir);
  }
}
