import { GetQueueUrlCommand, ReceiveMessageCommand } from '@aws-sdk/client-sqs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SqsDeadLetter, SqsJobQueue, TOKEN_ATTRIBUTE } from '../../cloud/aws/sqs-queue.ts';
import { VirtualClock } from '../../cloud/sim/clock.ts';
import { T0 } from '../builders.ts';
import { jobQueueContract } from '../contract/sources.contract.ts';
import { startSqs } from '../support/fauxqs.ts';

let env: Awaited<ReturnType<typeof startSqs>>;
let n = 0;
beforeAll(async () => {
  env = await startSqs();
});
afterAll(async () => {
  await env?.close();
});

function teamQueues(...teams: string[]) {
  const prefix = `gf${++n}-team-`;
  for (const t of teams) env.server.createQueue(`${prefix}${t}`);
  return new SqsJobQueue(env.sqs, { teamQueuePrefix: prefix, clock: new VirtualClock(T0) });
}

jobQueueContract('SQS (fauxqs)', async () => ({ queue: teamQueues('nlp'), team: 'nlp' }));

describe('SQS team queues', () => {
  it('finds teams by queue name and sends jobs with their idempotency token', async () => {
    const queue = teamQueues('nlp', 'vision');
    expect(await queue.teams()).toEqual(['nlp', 'vision']);
    await queue.send('vision', '{"image":"x"}', 'tok-1');
    expect(await queue.depth('vision')).toEqual({ visible: 1, inFlight: 0, delayed: 0 });
    const url = (await env.sqs.send(new GetQueueUrlCommand({ QueueName: `gf${n}-team-vision` }))).QueueUrl!;
    const got = await env.sqs.send(new ReceiveMessageCommand({ QueueUrl: url, MessageAttributeNames: ['All'], MaxNumberOfMessages: 10 }));
    expect(got.Messages?.[0]).toMatchObject({ Body: '{"image":"x"}', MessageAttributes: { [TOKEN_ATTRIBUTE]: { StringValue: 'tok-1' } } });
    // The message is in flight now.
    expect(await queue.depth('vision')).toMatchObject({ visible: 0, inFlight: 1 });
  });

  it('sees a queue created after it first looked', async () => {
    const queue = teamQueues('nlp');
    expect(await queue.teams()).toEqual(['nlp']);
    env.server.createQueue(`gf${n}-team-speech`);
    await queue.send('speech', '{}', 't');
    expect(await queue.depth('speech')).toMatchObject({ visible: 1 });
  });

  it('dead-letters a message with its reason and origin', async () => {
    const { queueUrl } = env.server.createQueue(`gf-dlq-${++n}`);
    await new SqsDeadLetter(env.sqs, queueUrl).send({
      body: 'b',
      reason: 'not a team queue',
      sourceQueueArn: 'arn:aws:sqs:us-east-1:1:other',
      messageId: 'm1',
    });
    const got = await env.sqs.send(new ReceiveMessageCommand({ QueueUrl: queueUrl, MessageAttributeNames: ['All'] }));
    expect(got.Messages?.[0]?.MessageAttributes).toMatchObject({
      'gpu-fleet-reason': { StringValue: 'not a team queue' },
      'gpu-fleet-source-message': { StringValue: 'm1' },
    });
  });
});
