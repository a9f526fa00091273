import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * A local CloudWatch Logs for the adapter's tests: it answers the SDK's awsJson1.1 calls
 * (`X-Amz-Target: Logs_20140328.<Operation>`) with the shapes of the CloudWatch Logs API reference
 * (CreateLogStream, PutLogEvents, DescribeLogStreams, GetLogEvents), assembled from the reference,
 * not recorded: log groups that exist, streams created once (ResourceAlreadyExistsException after),
 * events in time order within a call, at most 10,000 of them, 1,048,576 bytes (26 per event
 * besides its message), 256 KiB an event and 24 hours from first to last (InvalidParameterException
 * otherwise); events over 14 days old or 2 hours ahead left out and reported in
 * `rejectedLogEventsInfo`; pages of `pageSize`
 * with the forward token returned unchanged at a stream's end.
 * With `throttle`, PutLogEvents calls past that many a second (a token bucket, one second's worth
 * deep) are refused as the service refuses them, 400 ThrottlingException "Rate exceeded", and
 * counted; with `keepEvents: false` the events taken are counted, not kept (a benchmark's gigabyte).
 * `GET /__stats` (not an AWS call) answers those counts, for a double run in another process.
 */
export class FakeCloudWatchLogs {
  private server: Server | undefined;
  port = 0;
  pageSize = 3;
  readonly groups = new Map<string, Map<string, { timestamp: number; message: string; ingestionTime: number }[]>>();
  /** Every call, as its operation name. */
  readonly calls: string[] = [];
  /** Events taken, their messages' bytes, and the PutLogEvents calls refused as throttled. */
  readonly stats = { events: 0, bytes: 0, throttled: 0 };
  private tokens: number;
  private tokensAtMs = Date.now();

  constructor(
    groupNames: readonly string[],
    private readonly options: { throttle?: { callsPerSec: number }; keepEvents?: boolean } = {},
  ) {
    for (const g of groupNames) this.groups.set(g, new Map());
    this.tokens = options.throttle?.callsPerSec ?? 0;
  }

  /** Takes one PutLogEvents call from the bucket; false when it is empty (throttled). */
  private take(): boolean {
    const rate = this.options.throttle?.callsPerSec;
    if (rate === undefined) return true;
    const now = Date.now();
    this.tokens = Math.min(rate, this.tokens + ((now - this.tokensAtMs) / 1000) * rate);
    this.tokensAtMs = now;
    if (this.tokens < 1) return false;
    this.tokens -= 1;
    return true;
  }

  async start(): Promise<this> {
    this.server = createServer((req, res) => void this.handle(req, res));
    await new Promise<void>((r) => this.server!.listen(0, '127.0.0.1', r));
    this.port = (this.server.address() as AddressInfo).port;
    return this;
  }

  async stop(): Promise<void> {
    await new Promise<void>((r) => (this.server ? this.server.close(() => r()) : r()));
  }

  get endpoint(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    if (req.method === 'GET' && req.url === '/__stats') {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify(this.stats));
      return;
    }
    const target = String(req.headers['x-amz-target'] ?? '');
    const op = target.replace(/^Logs_20140328\./, '');
    this.calls.push(op);
    const body = JSON.parse(Buffer.concat(chunks).toString('utf8') || '{}') as Record<string, unknown>;
    const send = (status: number, json: unknown) => {
      res.writeHead(status, { 'content-type': 'application/x-amz-json-1.1', 'x-amzn-requestid': `req-${this.calls.length}` });
      res.end(JSON.stringify(json));
    };
    const fail = (type: string, message: string) => send(400, { __type: type, message });
    const group = this.groups.get(String(body.logGroupName ?? ''));
    if (!group) return fail('ResourceNotFoundException', 'The specified log group does not exist.');
    const streamName = String(body.logStreamName ?? '');
    switch (op) {
      case 'CreateLogStream':
        if (group.has(streamName)) return fail('ResourceAlreadyExistsException', 'The specified log stream already exists');
        group.set(streamName, []);
        return send(200, {});
      case 'PutLogEvents': {
        if (!this.take()) {
          this.stats.throttled++;
          return fail('ThrottlingException', 'Rate exceeded');
        }
        const stream = group.get(streamName);
        if (!stream) return fail('ResourceNotFoundException', 'The specified log stream does not exist.');
        const events = (body.logEvents ?? []) as { timestamp: number; message: string }[];
        if (events.length === 0 || events.length > 10_000) return fail('InvalidParameterException', '1 validation error detected');
        for (let i = 1; i < events.length; i++)
          if (events[i]!.timestamp < events[i - 1]!.timestamp)
            return fail('InvalidParameterException', 'Log events in a single PutLogEvents request must be in chronological order.');
        // The batch: at most 1,048,576 bytes (each message's UTF-8 bytes plus 26), no event over 256 KiB, a span of at most 24 h.
        const sizes = events.map((e) => Buffer.byteLength(e.message, 'utf8') + 26);
        const total = sizes.reduce((a, b) => a + b, 0);
        if (total > 1_048_576) return fail('InvalidParameterException', `Upload too large: ${total} bytes exceeds limit of 1048576`);
        if (sizes.some((n) => n > 262_144)) return fail('InvalidParameterException', 'Log event too large: exceeds limit of 262144 bytes');
        if (events.at(-1)!.timestamp - events[0]!.timestamp > 86_400_000)
          return fail(
            'InvalidParameterException',
            'The batch of log events in a single PutLogEvents request cannot span more than 24 hours.',
          );
        // Events over 14 days old or over 2 hours ahead are left out, the rest kept, and the call says which (rejectedLogEventsInfo).
        const now = Date.now();
        let oldEnd = 0;
        while (oldEnd < events.length && events[oldEnd]!.timestamp < now - 14 * 86_400_000) oldEnd++;
        let newStart = events.length;
        while (newStart > oldEnd && events[newStart - 1]!.timestamp > now + 2 * 3_600_000) newStart--;
        for (const e of events.slice(oldEnd, newStart)) {
          if (this.options.keepEvents !== false) stream.push({ ...e, ingestionTime: now });
          this.stats.events++;
          this.stats.bytes += Buffer.byteLength(e.message, 'utf8');
        }
        const rejected = {
          ...(oldEnd > 0 ? { tooOldLogEventEndIndex: oldEnd } : {}),
          ...(newStart < events.length ? { tooNewLogEventStartIndex: newStart } : {}),
        };
        return send(200, {
          nextSequenceToken: String(stream.length),
          ...(Object.keys(rejected).length > 0 ? { rejectedLogEventsInfo: rejected } : {}),
        });
      }
      case 'DescribeLogStreams': {
        const prefix = String(body.logStreamNamePrefix ?? '');
        const names = [...group.keys()].filter((n) => n.startsWith(prefix)).sort();
        const from = Number(body.nextToken ?? 0);
        const page = names.slice(from, from + this.pageSize);
        return send(200, {
          logStreams: page.map((n) => ({
            logStreamName: n,
            creationTime: 1_764_000_000_000,
            arn: `arn:aws:logs:us-west-2:123456789012:log-group:${String(body.logGroupName)}:log-stream:${n}`,
            storedBytes: 0,
          })),
          ...(from + this.pageSize < names.length ? { nextToken: String(from + this.pageSize) } : {}),
        });
      }
      case 'GetLogEvents': {
        const stream = group.get(streamName);
        if (!stream) return fail('ResourceNotFoundException', 'The specified log stream does not exist.');
        const since = typeof body.startTime === 'number' ? body.startTime : -Infinity;
        const all = stream.filter((e) => e.timestamp >= since);
        const token = typeof body.nextToken === 'string' ? body.nextToken : 'f/0';
        const from = Number(token.slice(2));
        const page = all.slice(from, from + this.pageSize);
        const next = page.length === 0 ? token : `f/${from + page.length}`;
        return send(200, { events: page, nextForwardToken: next, nextBackwardToken: `b/${from}` });
      }
      default:
        return fail('UnknownOperationException', `fake CloudWatch Logs does not answer ${op}`);
    }
  }
}
