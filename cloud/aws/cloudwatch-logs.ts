import {
  type CloudWatchLogsClient,
  CreateLogStreamCommand,
  DescribeLogStreamsCommand,
  GetLogEventsCommand,
  PutLogEventsCommand,
} from '@aws-sdk/client-cloudwatch-logs';
import type { JobLogBatch, JobLogSink, JobLogSource, LogLine } from '../../core/ports.ts';
import { translateAwsError } from './errors.ts';

/** CloudWatch Logs' limits on one PutLogEvents call: 10,000 events, 1 MiB counting 26 bytes per event, 24 hours first to last. */
const MAX_EVENTS = 10_000;
const MAX_BATCH_BYTES = 1_048_576;
const EVENT_OVERHEAD_BYTES = 26;
const MAX_BATCH_SPAN_MS = 86_400_000;

/** The log stream of one attempt on one rank: `<job>/<attempt>/<rank>` (CloudWatch stream names may hold "/" but not ":" or "*"). */
export function logStreamName(jobId: string, attempt: number, rank: number): string {
  return `${jobId.replace(/[:*]/g, '_')}/${attempt}/${rank}`;
}

/**
 * Job output in CloudWatch Logs: one log group per stack, one stream per attempt and rank. Each
 * event is a JSON object, so Logs Insights finds the job, its team and labels as fields:
 * `{"line": …, "seq": …, "job": …, "attempt": …, "rank": …, "team": …, "labels": {…}}`.
 * Writing creates the stream once (an existing one is fine) and sends the lines in calls within
 * the API's limits. Reading lists the job's streams by prefix and reads each from its start.
 */
export class CloudWatchJobLogs implements JobLogSink, JobLogSource {
  private readonly created = new Set<string>();

  constructor(
    private readonly logs: CloudWatchLogsClient,
    private readonly logGroupName: string,
  ) {}

  async append(batch: JobLogBatch): Promise<void> {
    if (batch.lines.length === 0) return;
    const stream = logStreamName(batch.jobId, batch.attempt, batch.rank);
    await this.ensureStream(stream);
    const events = batch.lines.map((l) => ({
      timestamp: l.atMs,
      message: JSON.stringify({
        line: l.line,
        seq: l.seq,
        job: batch.jobId,
        attempt: batch.attempt,
        rank: batch.rank,
        team: batch.team,
        labels: batch.labels,
      }),
    }));
    // Events in time order (the agent reads them in order; equal times keep their order).
    let chunk: typeof events = [];
    let bytes = 0;
    const send = async () => {
      if (chunk.length === 0) return;
      const logEvents = chunk;
      chunk = [];
      bytes = 0;
      await this.call('put log events', stream, () =>
        this.logs.send(new PutLogEventsCommand({ logGroupName: this.logGroupName, logStreamName: stream, logEvents })),
      );
    };
    for (const e of events) {
      const size = Buffer.byteLength(e.message, 'utf8') + EVENT_OVERHEAD_BYTES;
      // A call's events may span at most 24 hours (lines held back through a long outage of the agent API, say).
      const tooLong = chunk.length > 0 && e.timestamp - chunk[0]!.timestamp > MAX_BATCH_SPAN_MS;
      if (chunk.length >= MAX_EVENTS || bytes + size > MAX_BATCH_BYTES || tooLong) await send();
      chunk.push(e);
      bytes += size;
    }
    await send();
  }

  private async ensureStream(stream: string): Promise<void> {
    if (this.created.has(stream)) return;
    try {
      await this.logs.send(new CreateLogStreamCommand({ logGroupName: this.logGroupName, logStreamName: stream }));
    } catch (error) {
      if ((error as { name?: string }).name !== 'ResourceAlreadyExistsException')
        throw translateAwsError(error, { operation: 'create log stream', resource: `${this.logGroupName}/${stream}` });
    }
    this.created.add(stream);
  }

  async read(
    jobId: string,
    options: { attempt?: number; sinceMs?: number } = {},
  ): Promise<(LogLine & { attempt: number; rank: number })[]> {
    const prefix = `${jobId.replace(/[:*]/g, '_')}/${options.attempt !== undefined ? `${options.attempt}/` : ''}`;
    const streams: string[] = [];
    let token: string | undefined;
    do {
      const page = await this.call('describe log streams', prefix, () =>
        this.logs.send(
          new DescribeLogStreamsCommand({
            logGroupName: this.logGroupName,
            logStreamNamePrefix: prefix,
            ...(token ? { nextToken: token } : {}),
          }),
        ),
      );
      for (const s of page.logStreams ?? []) if (s.logStreamName) streams.push(s.logStreamName);
      token = page.nextToken;
    } while (token);
    const out: (LogLine & { attempt: number; rank: number })[] = [];
    for (const stream of streams) {
      const [, a, r] = /\/(\d+)\/(\d+)$/.exec(stream) ?? [];
      if (a === undefined || r === undefined) continue;
      let next: string | undefined;
      for (;;) {
        const page = await this.call('get log events', stream, () =>
          this.logs.send(
            new GetLogEventsCommand({
              logGroupName: this.logGroupName,
              logStreamName: stream,
              startFromHead: true,
              ...(options.sinceMs !== undefined ? { startTime: options.sinceMs } : {}),
              ...(next ? { nextToken: next } : {}),
            }),
          ),
        );
        for (const e of page.events ?? [])
          out.push({ ...parse(e.message ?? '', out.length), atMs: e.timestamp ?? 0, attempt: Number(a), rank: Number(r) });
        // The end of the stream: the forward token comes back unchanged.
        if (!page.nextForwardToken || page.nextForwardToken === next || (page.events ?? []).length === 0) break;
        next = page.nextForwardToken;
      }
    }
    return out.sort((x, y) => x.attempt - y.attempt || x.rank - y.rank || x.seq - y.seq);
  }

  private async call<T>(operation: string, resource: string, f: () => Promise<T>): Promise<T> {
    try {
      return await f();
    } catch (error) {
      throw translateAwsError(error, { operation, resource: `${this.logGroupName} ${resource}` });
    }
  }
}

/** An event's line and number; an event not written by gpu-fleet (not its JSON) is its whole message. */
function parse(message: string, fallbackSeq: number): { line: string; seq: number } {
  try {
    const v = JSON.parse(message) as { line?: unknown; seq?: unknown };
    if (typeof v.line === 'string' && typeof v.seq === 'number') return { line: v.line, seq: v.seq };
  } catch {
    // not JSON
  }
  return { line: message, seq: fallbackSeq };
}
