import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';

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
  const script = `const S3rver = require('s3rver'); new S3rver({ port: 0, address: '127.0.0.1', silent: true, directory: ${JSON.stringify(directory)} }).run().then(({ port }) => process.stdout.write(String(port) + '\\n'));`;
  const child = spawn(process.execPath, ['--openssl-legacy-provider', '-e', script], {
    cwd: fileURLToPath(new URL('../..', import.meta.url)),
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const port = await new Promise<number>((resolve, reject) => {
    let out = '';
    child.stdout.on('data', (d: Buffer) => {
      out += String(d);
      if (out.includes('\n')) resolve(Number(out.trim()));
    });
    child.once('exit', (code) => reject(new Error(`s3rver exited with code ${String(code)} before it listened`)));
  });
  return {
    endpoint: `http://127.0.0.1:${port}`,
    async close() {
      child.kill();
      await new Promise<void>((resolve) => (child.exitCode !== null ? resolve() : child.once('exit', () => resolve())));
    },
  };
}
