import { createHmac, randomUUID, timingSafeEqual } from 'node:crypto';
import { createReadStream, createWriteStream } from 'node:fs';
import { mkdir, readFile, rm, stat, writeFile, readdir } from 'node:fs/promises';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { dirname, join, relative, resolve, sep } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { fileURLToPath } from 'node:url';
import type { AwsCredentialIdentity } from '@smithy/types';
import type { LambdaFunctionURLEventWithIAMAuthorizer } from 'aws-lambda';
import type { UploadTarget } from '../../cloud/aws/agent-api-protocol.ts';
import type { CheckpointUrls } from '../../cloud/aws/checkpoint-urls.ts';
import { CloudError } from '../../core/errors.ts';
import type {
  CheckpointHistory,
  CheckpointStore,
  Clock,
  JobLogSink,
  JobStore,
  NodeStore,
  SecretReader,
  ServiceMetricSink,
} from '../../core/ports.ts';
import { createAgentApiHandler } from '../../functions/agent-api.ts';
import { lambdaContext } from '../../functions/context.ts';
import { observability } from '../../functions/observability.ts';
import { testAttempts } from './attempt-credentials.ts';
import { checkSigV4, readBody } from './sigv4.ts';

export const AGENT_ROLE = 'gpu-fleet-AgentRole1234';
const REGION = 'us-west-2';

/**
 * The agent API as a function URL would run it, on a local port: each request's SigV4 signature
 * is checked (recomputed with the caller's secret, as IAM does), the caller becomes the instance
 * role session of its machine, and the real handler answers. Checkpoint URLs are this server's
 * own (HMAC-signed, one file and one method each) over a folder standing in for the bucket.
 */
export async function startAgentApi(o: {
  jobs: JobStore;
  nodes: NodeStore;
  checkpoints: CheckpointStore;
  /** The index's history, where reads of saves are noted for the bill (as the deployed API has it). */
  history?: Pick<CheckpointHistory, 'noteRead'>;
  clock: Clock;
  /** The folder of `file://` checkpoint locations (the checkpoint store's root). */
  storeRoot: string;
  /** Files larger than this go up in parts of this size (small, so that tests exercise multipart uploads). */
  partBytes?: number;
  /** Where attempts' output goes (`logs/put`). */
  jobLogs?: JobLogSink;
  /** Where replicas' load figures go (`service/metrics`). */
  serviceMetrics?: ServiceMetricSink;
  /** The fleet's GCP machines, which call the unsigned URL (`/gce/…` here) with their identity tokens. */
  gceAgents?: Parameters<typeof createAgentApiHandler>[0]['gceAgents'];
  /** Reads the secrets jobs name by reference (`attempt/secrets`). */
  secrets?: SecretReader;
}) {
  const secret = 'local-url-secret';
  const calls: { op: string; caller: string | undefined; status: number; bytes: number; error?: string }[] = [];
  let base = '';
  const sign = (method: string, path: string) => createHmac('sha256', secret).update(`${method} ${path}`).digest('hex');
  const fileOf = (location: string, path = '') => {
    const dir = fileURLToPath(location);
    const p = resolve(dir, path);
    if (p !== resolve(o.storeRoot) && !p.startsWith(resolve(o.storeRoot) + sep)) throw new Error(`${location} is outside the store`);
    return p;
  };
  const urlFor = (method: string, path: string) => `${base}/blob?path=${encodeURIComponent(path)}&sig=${sign(method, path)}`;
  const partBytes = o.partBytes ?? 64 * 1024 * 1024;
  // Multipart uploads begun and not finished: upload id → (file, parts), as S3 keeps them (an unknown id is NoSuchUpload).
  const uploads = new Map<string, { file: string; parts: number }>();
  const urls: CheckpointUrls = {
    async uploadTargets(location, files) {
      const out: UploadTarget[] = [];
      for (const f of files) {
        const file = fileOf(location, f.path);
        if (f.bytes <= partBytes) out.push({ path: f.path, url: urlFor('PUT', file) });
        else {
          const parts = Math.ceil(f.bytes / partBytes);
          const uploadId = `up-${randomUUID()}`;
          uploads.set(uploadId, { file, parts });
          out.push({ path: f.path, uploadId, partBytes, parts });
        }
      }
      return out;
    },
    async partUrls(location, path, uploadId, firstPart, count) {
      const file = fileOf(location, path);
      const up = uploads.get(uploadId);
      if (!up || up.file !== file) throw new CloudError('not-found', `NoSuchUpload: ${uploadId} of ${path}`, { operation: 'sign part' });
      if (firstPart < 1 || firstPart + count - 1 > 10_000)
        throw new CloudError('invalid-request', 'part numbers are 1 to 10,000', { operation: 'sign part' });
      return Array.from({ length: count }, (_, k) => urlFor('PUT', `${file}.${uploadId}.part-${firstPart + k}`));
    },
    async finishUpload(location, path, uploadId, parts) {
      const file = fileOf(location, path);
      if (uploads.get(uploadId)?.file !== file)
        throw new CloudError('not-found', `NoSuchUpload: ${uploadId} of ${path}`, { operation: 'finish upload' });
      const chunks: Buffer[] = [];
      for (const p of [...parts].sort((a, b) => a.partNumber - b.partNumber)) {
        const part = `${file}.${uploadId}.part-${p.partNumber}`;
        const body = await readFile(part);
        if (p.etag !== etagOf(body)) throw new Error(`part ${p.partNumber} of ${path}: ETag ${p.etag} is not the part's`);
        chunks.push(body);
        await rm(part);
      }
      await writeFile(file, Buffer.concat(chunks));
      uploads.delete(uploadId);
    },
    async downloadUrls(location, after, limit = 1000) {
      const dir = fileOf(location);
      let entries: string[];
      try {
        entries = (await readdir(dir, { recursive: true, withFileTypes: true }))
          .filter((e) => e.isFile())
          .map((e) => join(e.parentPath, e.name));
      } catch {
        return { files: [] };
      }
      // As S3 lists: in key order, after `after`, a page at a time.
      const all = entries
        .map((file) => ({ path: relative(dir, file).split(sep).join('/'), file }))
        .sort((a, b) => (a.path < b.path ? -1 : 1));
      const rest = all.filter((f) => after === undefined || f.path > after);
      const page = rest.slice(0, limit);
      return {
        files: page.map((f) => ({ path: f.path, url: urlFor('GET', f.file) })),
        ...(rest.length > limit ? { next: page.at(-1)!.path } : {}),
      };
    },
  };
  const handler = createAgentApiHandler({
    jobs: o.jobs,
    nodes: o.nodes,
    checkpoints: o.checkpoints,
    ...(o.history ? { history: o.history } : {}),
    urls,
    ...(o.jobLogs ? { jobLogs: o.jobLogs } : {}),
    ...(o.serviceMetrics ? { serviceMetrics: o.serviceMetrics } : {}),
    clock: o.clock,
    ...(o.gceAgents ? { gceAgents: o.gceAgents } : {}),
    ...(o.secrets ? { secrets: o.secrets } : {}),
    agentRoleName: AGENT_ROLE,
    attempts: testAttempts(),
    obs: observability('agent-api-test'),
  });

  const server: Server = createServer((req, res) => {
    void (async () => {
      const url = new URL(req.url ?? '/', 'http://localhost');
      if (url.pathname === '/blob') {
        const path = url.searchParams.get('path') ?? '';
        const sig = url.searchParams.get('sig') ?? '';
        const want = sign(req.method ?? '', path);
        if (sig.length !== want.length || !timingSafeEqual(Buffer.from(sig), Buffer.from(want))) {
          res.writeHead(403).end('SignatureDoesNotMatch');
          return;
        }
        if (req.method === 'PUT') {
          if (req.headers['content-length'] === undefined) {
            res.writeHead(411).end('MissingContentLength');
            return;
          }
          await mkdir(dirname(path), { recursive: true });
          await pipeline(req, createWriteStream(path));
          res.writeHead(200, { etag: etagOf(await readFile(path)) }).end();
          return;
        }
        try {
          await stat(path);
        } catch {
          res.writeHead(404).end('NoSuchKey');
          return;
        }
        res.writeHead(200);
        await pipeline(createReadStream(path), res);
        return;
      }
      const body = await readBody(req);
      // The unsigned URL: no IAM check in front; the handler takes the caller from the identity token itself.
      const unsigned = url.pathname.startsWith('/gce/');
      const path = unsigned ? url.pathname.slice('/gce'.length) : url.pathname;
      const caller = unsigned ? undefined : await verify(req, url, body);
      if (!unsigned && typeof caller !== 'string') {
        res.writeHead(403, { 'content-type': 'application/json' }).end(JSON.stringify({ message: (caller as { error: string }).error }));
        return;
      }
      const event = {
        rawPath: path,
        body,
        isBase64Encoded: false,
        headers: req.headers,
        requestContext: {
          http: { method: req.method ?? 'GET', path },
          ...(typeof caller === 'string'
            ? { authorizer: { iam: { userArn: `arn:aws:sts::123456789012:assumed-role/${AGENT_ROLE}/${caller}` } } }
            : {}),
        },
      } as unknown as LambdaFunctionURLEventWithIAMAuthorizer;
      const out = (await handler(event, lambdaContext('agent-api'))) as { statusCode: number; body: string };
      calls.push({
        op: path.replace(/^\/v1\//, ''),
        caller: typeof caller === 'string' ? caller : undefined,
        status: out.statusCode,
        bytes: Buffer.byteLength(out.body),
        ...(out.statusCode >= 400 ? { error: (JSON.parse(out.body) as { error: string }).error } : {}),
      });
      res.writeHead(out.statusCode, { 'content-type': 'application/json' }).end(out.body);
    })().catch((error: unknown) => res.writeHead(500).end(String(error)));
  });

  /** The caller's machine, when the request's SigV4 signature is right for its credentials. */
  async function verify(req: IncomingMessage, url: URL, body: string): Promise<string | { error: string }> {
    const out = await checkSigV4(req, url, body, (key) => {
      const machine = /^AKIDLOCAL(i-[0-9a-f]+)$/.exec(key)?.[1];
      return machine ? credentialsFor(machine) : undefined;
    });
    return 'error' in out ? out : /^AKIDLOCAL(i-[0-9a-f]+)$/.exec(out.accessKeyId)![1]!;
  }

  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    url: `${base}/`,
    /** The unsigned URL of GCP machines. */
    gceUrl: `${base}/gce/`,
    region: REGION,
    calls,
    credentialsFor,
    close: () => new Promise<void>((r) => server.close(() => r())),
  };
}

/** A machine's credentials, as its instance role would give them (the access key names the machine, for the local IAM). */
export function credentialsFor(instanceId: string): AwsCredentialIdentity {
  return { accessKeyId: `AKIDLOCAL${instanceId}`, secretAccessKey: `secret-of-${instanceId}` };
}

function etagOf(body: Buffer): string {
  return `"${createHmac('md5', '').update(body).digest('hex')}"`;
}
