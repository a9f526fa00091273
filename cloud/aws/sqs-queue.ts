import { GetQueueAttributesCommand, ListQueuesCommand, SendMessageCommand, TagQueueCommand, type SQSClient } from '@aws-sdk/client-sqs';
import { CloudError } from '../../core/errors.ts';
import type { Clock, JobQueue, QueueDepth } from '../../core/ports.ts';
import { translateAwsError } from './errors.ts';

export interface SqsQueueOptions {
  /** Team queues are named `${teamQueuePrefix}${team}` (default "gpu-fleet-team-"). */
  readonly teamQueuePrefix?: string;
  /** How long the list of team queues is cached, seconds (default 300). */
  readonly cacheSec?: number;
  readonly clock: Clock;
}

/** The message attribute carrying the submitter's idempotency token (see functions/intake.ts). */
export const TOKEN_ATTRIBUTE = 'gpu-fleet-token';

/**
 * The team job queues on SQS. Teams are found by queue name (`gpu-fleet-team-<team>`), listed
 * with ListQueues and cached; a team without a queue is `not-found`.
 */
export class SqsJobQueue implements JobQueue {
  private readonly prefix: string;
  private cache: { atMs: number; urls: Map<string, string> } | undefined;

  constructor(
    private readonly sqs: SQSClient,
    private readonly options: SqsQueueOptions,
  ) {
    this.prefix = options.teamQueuePrefix ?? 'gpu-fleet-team-';
  }

  private async urls(refresh = false): Promise<Map<string, string>> {
    const now = this.options.clock.nowMs();
    if (!refresh && this.cache && now - this.cache.atMs < (this.options.cacheSec ?? 300) * 1000) return this.cache.urls;
    const urls = new Map<string, string>();
    let token: string | undefined;
    do {
      const page = await this.call('list team queues', this.prefix, () =>
        this.sqs.send(new ListQueuesCommand({ QueueNamePrefix: this.prefix, MaxResults: 1000, ...(token ? { NextToken: token } : {}) })),
      );
      for (const url of page.QueueUrls ?? []) {
        const name = url.split('/').pop() ?? '';
        if (name.startsWith(this.prefix) && name.length > this.prefix.length) urls.set(name.slice(this.prefix.length), url);
      }
      token = page.NextToken;
    } while (token);
    this.cache = { atMs: now, urls };
    return urls;
  }

  private async url(team: string, operation: string): Promise<string> {
    const url = (await this.urls()).get(team) ?? (await this.urls(true)).get(team);
    if (!url)
      throw new CloudError(
        'not-found',
        `team "${team}" has no queue (${this.prefix}${team}); teams with queues: ${[...(await this.urls()).keys()].join(', ') || 'none'}`,
        { operation, resource: team, cloud: 'aws' },
      );
    return url;
  }

  async teams(): Promise<string[]> {
    return [...(await this.urls()).keys()].sort();
  }

  async send(team: string, body: string, token: string): Promise<{ messageId: string }> {
    const QueueUrl = await this.url(team, 'send job');
    const out = await this.call('send job', team, () =>
      this.sqs.send(
        new SendMessageCommand({
          QueueUrl,
          MessageBody: body,
          MessageAttributes: { [TOKEN_ATTRIBUTE]: { DataType: 'String', StringValue: token } },
        }),
      ),
    );
    return { messageId: out.MessageId ?? '' };
  }

  async depth(team: string): Promise<QueueDepth> {
    const QueueUrl = await this.url(team, 'queue depth');
    const out = await this.call('queue depth', team, () =>
      this.sqs.send(
        new GetQueueAttributesCommand({
          QueueUrl,
          AttributeNames: ['ApproximateNumberOfMessages', 'ApproximateNumberOfMessagesNotVisible', 'ApproximateNumberOfMessagesDelayed'],
        }),
      ),
    );
    const a = out.Attributes ?? {};
    return {
      visible: Number(a.ApproximateNumberOfMessages ?? 0),
      inFlight: Number(a.ApproximateNumberOfMessagesNotVisible ?? 0),
      delayed: Number(a.ApproximateNumberOfMessagesDelayed ?? 0),
    };
  }

  /**
   * Sets `gpu-fleet:*` budget tags on a team's queue (TagQueue: the named keys change, the rest
   * stay). Whether the caller may is IAM's to say: a team's role may tag its own queue only where
   * the fleet config lets the team set its own budget; the admin role may tag every team's.
   */
  async tagTeam(team: string, tags: Readonly<Record<string, string>>): Promise<void> {
    const QueueUrl = await this.url(team, 'tag team queue');
    await this.call('tag team queue', team, () => this.sqs.send(new TagQueueCommand({ QueueUrl, Tags: { ...tags } })));
  }

  private async call<T>(operation: string, resource: string, f: () => Promise<T>): Promise<T> {
    try {
      return await f();
    } catch (error) {
      throw translateAwsError(error, { operation, resource });
    }
  }
}

/** Sends a message that cannot be attributed to a team to the dead-letter queue, with why. */
export class SqsDeadLetter {
  constructor(
    private readonly sqs: SQSClient,
    private readonly queueUrl: string,
  ) {}

  async send(input: { body: string; reason: string; sourceQueueArn: string; messageId: string }): Promise<void> {
    try {
      await this.sqs.send(
        new SendMessageCommand({
          QueueUrl: this.queueUrl,
          MessageBody: input.body,
          MessageAttributes: {
            'gpu-fleet-reason': { DataType: 'String', StringValue: input.reason.slice(0, 1000) },
            'gpu-fleet-source-queue': { DataType: 'String', StringValue: input.sourceQueueArn },
            'gpu-fleet-source-message': { DataType: 'String', StringValue: input.messageId },
          },
        }),
      );
    } catch (error) {
      throw translateAwsError(error, { operation: 'dead-letter message', resource: this.queueUrl });
    }
  }
}

/** The dead-letter queue intake sends unattributable messages to; without one configured, sending fails loudly. */
export function deadLetterFor(sqs: SQSClient, queueUrl: string | undefined): Pick<SqsDeadLetter, 'send'> {
  if (queueUrl) return new SqsDeadLetter(sqs, queueUrl);
  return {
    send: async () =>
      Promise.reject(new Error('GPU_FLEET_DLQ_URL is not set: a message that cannot be attributed to a team has nowhere to go')),
  };
}
