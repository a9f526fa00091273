import { createHash, createPublicKey, verify, type KeyObject } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { CRC32C } from '@google-cloud/storage';

/**
 * A local Cloud Storage server (JSON API v1, and V4 signed XML-API reads) for the GCS checkpoint
 * store's tests and the sweep's benchmark, answering as the Cloud Storage reference documents:
 * - every JSON API call needs `Authorization: Bearer <token>` of a token it was given (401 `authError`
 *   otherwise), except the requests that carry a resumable upload's bytes to its session URI;
 * - uploads: `uploadType=media`, `multipart` (multipart/related: metadata, then the bytes) and
 *   `resumable` (a session URI in `Location`, then PUTs with `Content-Range`; 308 with `Range` until
 *   the last byte, 200 with the object once complete; `bytes N-*\/*` sends the rest in one request).
 *   An object appears only once complete;
 * - objects carry `size` (a string), `generation`, `updated`, `md5Hash` and `crc32c` (base64,
 *   big-endian), and media reads carry `x-goog-hash`;
 * - listing: `prefix`, `startOffset` (inclusive), `maxResults` (≤ 1,000), `pageToken`, name order;
 * - not found: 404 `notFound` for unknown objects ("No such object: b/o") and buckets;
 * - signed URLs (`X-Goog-Algorithm=GOOG4-RSA-SHA256`): the signature is checked with the signing
 *   service account's public key over the canonical request the V4 process defines, and the URL's
 *   date and expiry against this server's clock (403 `SignatureDoesNotMatch`, 400 `ExpiredToken`
 *   as XML, as the XML API answers).
 * It counts operations by Cloud Storage's billing classes (A: inserts, lists; B: reads).
 */
export interface FakeGcsObject {
  readonly data: Buffer;
  readonly generation: string;
  readonly updatedMs: number;
}

interface Session {
  readonly bucket: string;
  readonly name: string;
  readonly chunks: Buffer[];
  received: number;
}

export class FakeGcs {
  private server?: Server;
  readonly buckets = new Map<string, Map<string, FakeGcsObject>>();
  private readonly sessions = new Map<string, Session>();
  private readonly tokens = new Set<string>();
  private readonly signers = new Map<string, KeyObject>();
  private generation = 1_700_000_000_000_000;
  private sessionIds = 0;
  /** Operations by billing class: A (object inserts, completed resumable uploads, lists, deletes are free), B (reads). */
  readonly operations = { classA: 0, classB: 0, deletes: 0, signedReads: 0 };
  /** Requests refused for their credentials or signature. */
  readonly refused: string[] = [];
  /** Requests answered, of any kind. */
  requests = 0;
  /** A delay before each answer, as a stand-in for the service's round trip (a benchmark's; 0 in tests). */
  delayMs = 0;
  /** The server's clock (signed URLs' dates and expiry); objects' `updated` comes from it too. */
  nowMs: () => number = () => Date.now();

  constructor(buckets: readonly string[]) {
    for (const b of buckets) this.buckets.set(b, new Map());
  }

  /** A bearer token the server accepts (the access token of a service account). */
  allowToken(token: string): this {
    this.tokens.add(token);
    return this;
  }

  /** A service account whose V4 signatures the server accepts. */
  allowSigner(clientEmail: string, privateKeyPem: string): this {
    this.signers.set(clientEmail, createPublicKey(privateKeyPem));
    return this;
  }

  async start(): Promise<string> {
    this.server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        this.requests++;
        const answer = () => {
          try {
            this.handle(req, Buffer.concat(chunks), res);
          } catch (error) {
            json(res, 500, { error: { code: 500, message: String(error), errors: [{ reason: 'backendError' }] } });
          }
        };
        if (this.delayMs > 0) setTimeout(answer, this.delayMs);
        else answer();
      });
    });
    await new Promise<void>((r) => this.server!.listen(0, '127.0.0.1', r));
    return this.endpoint;
  }

  get endpoint(): string {
    return `http://127.0.0.1:${(this.server!.address() as AddressInfo).port}`;
  }

  async stop(): Promise<void> {
    this.server?.closeAllConnections();
    await new Promise<void>((r) => (this.server ? this.server.close(() => r()) : r()));
  }

  /** Puts an object as another writer would (a test's setup), dated `updatedMs`. */
  put(bucket: string, name: string, data: Buffer | string, updatedMs = this.nowMs()): void {
    this.bucketOf(bucket)!.set(name, { data: Buffer.from(data), generation: String(this.generation++), updatedMs });
  }

  names(bucket: string): string[] {
    return [...(this.buckets.get(bucket)?.keys() ?? [])].sort();
  }

  private bucketOf(name: string): Map<string, FakeGcsObject> | undefined {
    return this.buckets.get(name);
  }

  private handle(req: IncomingMessage, body: Buffer, res: ServerResponse): void {
    const url = new URL(req.url ?? '/', this.endpoint);
    if (url.searchParams.has('X-Goog-Signature')) return this.signedRead(req, url, res);
    // A resumable session's URI is its own credential: the requests that carry its bytes need no token.
    if (url.searchParams.get('uploadType') === 'resumable' && url.searchParams.has('upload_id') && req.method === 'PUT')
      return this.resumablePut(req, url.searchParams.get('upload_id')!, body, res);
    const auth = req.headers.authorization ?? '';
    const token = /^Bearer (.+)$/.exec(auth)?.[1];
    if (!token || !this.tokens.has(token)) {
      this.refused.push(`${req.method} ${url.pathname}`);
      return json(res, 401, { error: { code: 401, message: 'Invalid Credentials', errors: [{ reason: 'authError', domain: 'global' }] } });
    }
    let m = /^\/upload\/storage\/v1\/b\/([^/]+)\/o$/.exec(url.pathname);
    if (m) return this.upload(req, url, decodeURIComponent(m[1]!), body, res);
    m = /^\/storage\/v1\/b\/([^/]+)\/o$/.exec(url.pathname);
    if (m && req.method === 'GET') return this.list(url, decodeURIComponent(m[1]!), res);
    m = /^\/storage\/v1\/b\/([^/]+)\/o\/(.+)$/.exec(url.pathname);
    if (m) {
      const bucket = decodeURIComponent(m[1]!);
      const name = decodeURIComponent(m[2]!);
      const objects = this.bucketOf(bucket);
      if (!objects) return notFound(res, `The specified bucket does not exist: ${bucket}`);
      const o = objects.get(name);
      if (req.method === 'DELETE') {
        this.operations.deletes++;
        if (!o) return notFound(res, `No such object: ${bucket}/${name}`);
        objects.delete(name);
        res.writeHead(204).end();
        return;
      }
      if (req.method === 'GET') {
        this.operations.classB++;
        if (!o) return notFound(res, `No such object: ${bucket}/${name}`);
        if (url.searchParams.get('alt') === 'media') return media(res, o);
        return json(res, 200, resource(bucket, name, o));
      }
    }
    json(res, 400, { error: { code: 400, message: `not served here: ${req.method} ${url.pathname}`, errors: [{ reason: 'invalid' }] } });
  }

  private upload(req: IncomingMessage, url: URL, bucket: string, body: Buffer, res: ServerResponse): void {
    const objects = this.bucketOf(bucket);
    if (!objects) return notFound(res, `The specified bucket does not exist: ${bucket}`);
    const type = url.searchParams.get('uploadType');
    const uploadId = url.searchParams.get('upload_id');
    if (type === 'resumable' && uploadId !== null) return this.resumablePut(req, uploadId, body, res);
    const metadataName = (b: Buffer): string | undefined => {
      try {
        return (JSON.parse(b.toString('utf8') || '{}') as { name?: string }).name;
      } catch {
        return undefined;
      }
    };
    if (type === 'resumable') {
      const name = url.searchParams.get('name') ?? metadataName(body);
      if (!name) return json(res, 400, { error: { code: 400, message: 'Required: object name', errors: [{ reason: 'required' }] } });
      const id = `s${++this.sessionIds}`;
      this.sessions.set(id, { bucket, name, chunks: [], received: 0 });
      res
        .writeHead(200, {
          location: `${this.endpoint}/upload/storage/v1/b/${encodeURIComponent(bucket)}/o?uploadType=resumable&upload_id=${id}`,
        })
        .end();
      return;
    }
    let name = url.searchParams.get('name') ?? undefined;
    let data = body;
    if (type === 'multipart') {
      const boundary = /boundary=("?)([^";]+)\1/.exec(req.headers['content-type'] ?? '')?.[2];
      if (!boundary)
        return json(res, 400, { error: { code: 400, message: 'multipart upload without a boundary', errors: [{ reason: 'invalid' }] } });
      const parts = splitMultipart(body, boundary);
      if (parts.length !== 2)
        return json(res, 400, { error: { code: 400, message: 'a multipart upload has 2 parts', errors: [{ reason: 'invalid' }] } });
      name = metadataName(parts[0]!) ?? name;
      data = parts[1]!;
    } else if (type !== 'media') {
      return json(res, 400, { error: { code: 400, message: `uploadType ${type}`, errors: [{ reason: 'invalid' }] } });
    }
    if (!name) return json(res, 400, { error: { code: 400, message: 'Required: object name', errors: [{ reason: 'required' }] } });
    this.operations.classA++;
    this.put(bucket, name, data);
    json(res, 200, resource(bucket, name, objects.get(name)!));
  }

  private resumablePut(req: IncomingMessage, id: string, body: Buffer, res: ServerResponse): void {
    const s = this.sessions.get(id);
    if (!s) return notFound(res, `No such upload session: ${id}`);
    const range = /^bytes (?:(\d+)-(\d+|\*)|\*)\/(\d+|\*)$/.exec(
      String(req.headers['content-range'] ?? `bytes 0-${body.length - 1}/${body.length}`),
    );
    if (!range)
      return json(res, 400, {
        error: { code: 400, message: `bad Content-Range: ${req.headers['content-range']}`, errors: [{ reason: 'invalid' }] },
      });
    if (range[1] !== undefined) {
      const start = Number(range[1]);
      if (start !== s.received)
        return json(res, 400, {
          error: { code: 400, message: `expected bytes from ${s.received}, got ${start}`, errors: [{ reason: 'invalid' }] },
        });
      s.chunks.push(body);
      s.received += body.length;
    }
    // `bytes N-*/*`: the rest of the object in this one request, whose end is the object's end (the library's single-request mode).
    const rest = range[2] === '*' && range[3] === '*';
    const total = rest ? s.received : range[3] === '*' ? undefined : Number(range[3]);
    if (total === undefined || s.received < total) {
      res.writeHead(308, s.received > 0 ? { range: `bytes=0-${s.received - 1}` } : {}).end();
      return;
    }
    this.sessions.delete(id);
    this.operations.classA++; // a completed resumable upload is one Class A operation
    this.put(s.bucket, s.name, Buffer.concat(s.chunks));
    json(res, 200, resource(s.bucket, s.name, this.bucketOf(s.bucket)!.get(s.name)!));
  }

  private list(url: URL, bucket: string, res: ServerResponse): void {
    const objects = this.bucketOf(bucket);
    if (!objects) return notFound(res, `The specified bucket does not exist: ${bucket}`);
    this.operations.classA++;
    const prefix = url.searchParams.get('prefix') ?? '';
    const startOffset = url.searchParams.get('startOffset') ?? '';
    const after = url.searchParams.get('pageToken') ?? '';
    const max = Math.min(1000, Number(url.searchParams.get('maxResults') ?? 1000));
    const names = [...objects.keys()].filter((n) => n.startsWith(prefix) && n >= startOffset && (after === '' || n > after)).sort();
    const page = names.slice(0, max);
    json(res, 200, {
      kind: 'storage#objects',
      ...(page.length > 0 ? { items: page.map((n) => resource(bucket, n, objects.get(n)!)) } : {}),
      ...(names.length > max ? { nextPageToken: page[page.length - 1] } : {}),
    });
  }

  /** A V4 signed read (`/bucket/object?X-Goog-…`), checked as Cloud Storage checks it. */
  private signedRead(req: IncomingMessage, url: URL, res: ServerResponse): void {
    const q = url.searchParams;
    const refuse = (status: number, code: string, message: string) => {
      this.refused.push(`${req.method} ${url.pathname}: ${code}`);
      res
        .writeHead(status, { 'content-type': 'application/xml' })
        .end(`<?xml version='1.0' encoding='UTF-8'?><Error><Code>${code}</Code><Message>${message}</Message></Error>`);
    };
    const credential = q.get('X-Goog-Credential') ?? '';
    const [email, day, region, service, terminator] = credential.split('/');
    const key = email ? this.signers.get(email) : undefined;
    const date = q.get('X-Goog-Date') ?? '';
    const dated = /^(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})Z$/.exec(date);
    if (
      q.get('X-Goog-Algorithm') !== 'GOOG4-RSA-SHA256' ||
      !key ||
      !dated ||
      service !== 'storage' ||
      terminator !== 'goog4_request' ||
      day !== date.slice(0, 8)
    )
      return refuse(403, 'SignatureDoesNotMatch', 'The request signature we calculated does not match the signature you provided.');
    const signedAtMs = Date.UTC(+dated[1]!, +dated[2]! - 1, +dated[3]!, +dated[4]!, +dated[5]!, +dated[6]!);
    const expiresSec = Number(q.get('X-Goog-Expires'));
    if (!Number.isInteger(expiresSec) || expiresSec < 1 || expiresSec > 604_800)
      return refuse(400, 'InvalidArgument', 'X-Goog-Expires must be 1 to 604800 seconds');
    if (this.nowMs() > signedAtMs + expiresSec * 1000) return refuse(400, 'ExpiredToken', 'The provided token has expired.');
    const signedHeaders = (q.get('X-Goog-SignedHeaders') ?? '').split(';');
    const canonicalQuery = [...q.entries()]
      .filter(([k]) => k !== 'X-Goog-Signature')
      .map(([k, v]) => [rfc3986(k), rfc3986(v)] as const)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
      .map(([k, v]) => `${k}=${v}`)
      .join('&');
    // Cloud Storage is reached on 443, where Host is the bare name; the library signs the endpoint's hostname, so the port this
    // local server listens on is not part of the signed host.
    const headerOf = (h: string) =>
      h === 'host' ? String(req.headers.host ?? '').replace(/:\d+$/, '') : String(req.headers[h] ?? '').trim();
    const headers = signedHeaders.map((h) => `${h}:${headerOf(h)}\n`).join('');
    const canonical = [req.method, url.pathname, canonicalQuery, headers, signedHeaders.join(';'), 'UNSIGNED-PAYLOAD'].join('\n');
    const toSign = [
      'GOOG4-RSA-SHA256',
      date,
      `${day}/${region}/${service}/${terminator}`,
      createHash('sha256').update(canonical).digest('hex'),
    ].join('\n');
    if (!verify('RSA-SHA256', Buffer.from(toSign), key, Buffer.from(q.get('X-Goog-Signature') ?? '', 'hex')))
      return refuse(403, 'SignatureDoesNotMatch', 'The request signature we calculated does not match the signature you provided.');
    const m = /^\/([^/]+)\/(.+)$/.exec(url.pathname);
    const bucket = m ? decodeURIComponent(m[1]!) : '';
    const name = m ? decodeURIComponent(m[2]!) : '';
    const o = this.bucketOf(bucket)?.get(name);
    if (req.method !== 'GET') return refuse(403, 'SignatureDoesNotMatch', `signed for GET, used for ${req.method}`);
    this.operations.classB++;
    this.operations.signedReads++;
    if (!o) return refuse(404, 'NoSuchKey', 'The specified key does not exist.');
    media(res, o);
  }
}

function rfc3986(s: string): string {
  return encodeURIComponent(s).replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
}

function hashes(data: Buffer): { md5Hash: string; crc32c: string } {
  const crc = new CRC32C();
  crc.update(data);
  return { md5Hash: createHash('md5').update(data).digest('base64'), crc32c: crc.toString() };
}

function resource(bucket: string, name: string, o: FakeGcsObject): Record<string, unknown> {
  const updated = new Date(o.updatedMs).toISOString();
  return {
    kind: 'storage#object',
    id: `${bucket}/${name}/${o.generation}`,
    name,
    bucket,
    generation: o.generation,
    metageneration: '1',
    contentType: 'application/octet-stream',
    storageClass: 'STANDARD',
    size: String(o.data.length),
    timeCreated: updated,
    updated,
    ...hashes(o.data),
  };
}

function media(res: ServerResponse, o: FakeGcsObject): void {
  const h = hashes(o.data);
  res
    .writeHead(200, {
      'content-type': 'application/octet-stream',
      'content-length': String(o.data.length),
      'x-goog-hash': `crc32c=${h.crc32c},md5=${h.md5Hash}`,
      'x-goog-generation': o.generation,
      'x-goog-stored-content-length': String(o.data.length),
    })
    .end(o.data);
}

function json(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { 'content-type': 'application/json; charset=UTF-8' }).end(JSON.stringify(body));
}

function notFound(res: ServerResponse, message: string): void {
  json(res, 404, { error: { code: 404, message, errors: [{ message, domain: 'global', reason: 'notFound' }] } });
}

/** The parts of a multipart/related body, each without its headers. */
function splitMultipart(body: Buffer, boundary: string): Buffer[] {
  const text = body.toString('latin1');
  return text
    .split(`--${boundary}`)
    .slice(1, -1)
    .map((p) => {
      const start = p.indexOf('\r\n\r\n');
      const at = start >= 0 ? start + 4 : p.indexOf('\n\n') + 2;
      return Buffer.from(p.slice(at).replace(/\r?\n$/, ''), 'latin1');
    });
}
