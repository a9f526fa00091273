import { listenInChild } from './child-server.ts';

/** A local S3-compatible server (s3rver) in a child process, on a free port, keeping its objects in `directory`. */
export interface LocalS3 {
  readonly endpoint: string;
  close(): Promise<void>;
}

/**
 * s3rver in its own process. It is started with OpenSSL's legacy provider: s3rver makes its
 * ListObjectsV2 continuation tokens with DES, which Node 20's OpenSSL 3 leaves out by default, so
 * without it every listing longer than one page fails with InternalError.
 */
export async function startS3rverProcess(directory: string): Promise<LocalS3> {
  const { port, stop } = await listenInChild(
    `const S3rver = require('s3rver'); new S3rver({ port: 0, address: '127.0.0.1', silent: true, directory: ${JSON.stringify(directory)} }).run().then(({ port }) => process.stdout.write(String(port) + '\\n'));`,
    ['--openssl-legacy-provider'],
  );
  return { endpoint: `http://127.0.0.1:${port}`, close: stop };
}
