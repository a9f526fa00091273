import { Logger } from '@aws-lambda-powertools/logger';
import type { SQSEvent, SQSRecord } from 'aws-lambda';
import { describe, expect, it } from 'vitest';
import { CloudError } from '../../core/errors.ts';
import { intake } from '../../core/services/intake.ts';
import { MAX_STORED_JOB_BYTES, REJECTION_ERRORS_KEPT, storedBytes } from '../../core/job.ts';
import type { JobStore } from '../../core/ports.ts';
import { createIntakeHandler, teamFromQueueArn, TOKEN_ATTRIBUTE, type DeadLetter } from '../../functions/intake.ts';
import { observability } from '../../functions/observability.ts';
import { VirtualClock } from '../../cloud/sim/clock.ts';
import { MemoryJobStore, MemoryServiceStore } from '../../cloud/sim/memory-stores.ts';
import { T0 } from '../builders.ts';
import { lambdaContext } from '../../functions/context.ts';

const QUEUE = 'arn:aws:sqs:us-east-1:123456789012:gpu-fleet-team-nlp';
const good = JSON.stringify({ image: 'pytorch/pytorch:2.3.0', command: ['python', 'train.py'], gpu: { kind: 'whole', count: 1 } });

function record(id: string, body: string, extra: Partial<SQSRecord> = {}): SQSRecord {
  return {
    messageId: id,
    receiptHandle: `rh-${id}`,
    body,
    attributes: { ApproximateReceiveCount: '1', SentTimestamp: String(T0), SenderId: 'AIDA', ApproximateFirstReceiveTimestamp: String(T0) },
    messageAttributes: {},
    md5OfBody: '',
    eventSource: 'aws:sqs',
    eventSourceARN: QUEUE,
    awsRegion: 'us-east-1',
    ...extra,
  };
}

function setup(jobs: JobStore = new MemoryJobStore(), services?: MemoryServiceStore, obs = observability('intake-test')) {
  const dead: Parameters<DeadLetter['send']>[0][] = [];
  const handler = createIntakeHandler({
    jobs,
    ...(services ? { services } : {}),
    clock: new VirtualClock(T0),
    deadLetter: { send: async (m) => void dead.push(m) },
    teamOfQueue: teamFromQueueArn('gpu-fleet-team-'),
    obs,
    timeoutEarlyInMillis: 0,
  });
  return { handler, dead, jobs };
}

describe('intake function', () => {
  it('stores good specs as pending, bad ones as rejected with reasons, and fails nothing in the batch', async () => {
    const { handler, jobs } = setup();
    const event: SQSEvent = { Records: [record('m1', good), record('m2', '{"image": "x"}'), record('m3', 'not json')] };
    expect(await handler(event, lambdaContext())).toEqual({ batchItemFailures: [] });
    expect(await jobs.get('nlp.m1')).toMatchObject({ state: 'pending', team: 'nlp' });
    expect(await jobs.get('nlp.m2')).toMatchObject({
      state: 'rejected',
      rejection: { errors: expect.arrayContaining([expect.stringContaining('command: is required')]) },
    });
    expect((await jobs.get('nlp.m3'))!.rejection!.errors[0]).toContain('not valid JSON');
  });

  it('echoes no environment value of a bad spec: not in its errors, its stored record or the log (the names may)', async () => {
    // The function's own logger, at every level (the suite silences logs otherwise).
    const { handler, jobs } = setup(new MemoryJobStore(), undefined, {
      ...observability('intake-test'),
      logger: new Logger({ serviceName: 'intake-test', logLevel: 'DEBUG' }),
    });
    const body = JSON.stringify({
      image: 'pytorch/pytorch:2.3.0',
      command: ['python', 'train.py'],
      gpu: { kind: 'whole', count: 1 },
      env: { API_TOKEN: 'sk-live-S3CRET-ONE\nmore', '1BAD_NAME': 'sk-live-S3CRET-TWO', NUMBER: 987654321, GOOD: 'sk-live-S3CRET-THREE' },
    });
    // Everything the process writes while the function runs (its log lines), kept here instead of printed.
    const written: string[] = [];
    const [out, err] = [process.stdout.write, process.stderr.write];
    const capture = ((chunk: string | Uint8Array) => written.push(String(chunk)) > 0) as typeof process.stdout.write;
    process.stdout.write = capture;
    process.stderr.write = capture;
    try {
      await handler({ Records: [record('m1', body)] }, lambdaContext());
      // Delivered again: still recognised as the same submission, though its record keeps no values.
      await handler({ Records: [record('m1', body)] }, lambdaContext());
    } finally {
      process.stdout.write = out;
      process.stderr.write = err;
    }
    const job = (await jobs.get('nlp.m1'))!;
    expect(job.state).toBe('rejected');
    expect(job.rejection!.errors).toEqual(
      expect.arrayContaining([
        expect.stringMatching(/^env\.API_TOKEN: environment values may not contain line breaks/),
        expect.stringMatching(/^env\.1BAD_NAME: environment variable names are letters/),
        expect.stringMatching(/^env\.NUMBER: /),
      ]),
    );
    expect(job.rejection!.body).toContain('"API_TOKEN":"(23 characters, not kept)"');
    expect(job.version).toBe(1);
    const everything = JSON.stringify(job) + written.join('');
    expect(written.join('')).toContain('job rejected');
    for (const secret of ['S3CRET', '987654321']) expect(everything).not.toContain(secret);
    expect(everything).toContain('API_TOKEN');
  });

  it('refuses oversized submissions at the door with a record that fits the store, and fails none of the batch (issue 63)', async () => {
    const { handler, jobs, dead } = setup();
    // 20,000 bad label keys: a 209 KB body whose every key is a problem.
    const labels = Object.fromEntries(Array.from({ length: 20_000 }, (_, i) => [`Bad Key ${i}`, 'v']));
    const noisy = JSON.stringify({ image: 'x/y:1', command: ['run'], gpu: { kind: 'whole', count: 1 }, labels });
    // A spec valid field by field whose record would be 780 KB: 26 variables of 30,000 characters.
    const env = Object.fromEntries(Array.from({ length: 26 }, (_, i) => [`V${i}`, 'x'.repeat(30_000)]));
    const huge = JSON.stringify({ image: 'x/y:1', command: ['run'], gpu: { kind: 'whole', count: 1 }, env });
    expect(noisy.length).toBeGreaterThan(200_000);
    expect(huge.length).toBeGreaterThan(780_000);
    expect(await handler({ Records: [record('m1', noisy), record('m2', huge)] }, lambdaContext())).toEqual({ batchItemFailures: [] });
    expect(dead).toEqual([]);
    const a = (await jobs.get('nlp.m1'))!;
    expect(a.state).toBe('rejected');
    expect(a.rejection!.errors).toHaveLength(REJECTION_ERRORS_KEPT + 1);
    expect(a.rejection!.errors.at(-1)).toMatch(/^… and \d+ more problems$/);
    expect(storedBytes(a)).toBeLessThan(MAX_STORED_JOB_BYTES);
    const b = (await jobs.get('nlp.m2'))!;
    expect(b.state).toBe('rejected');
    expect(b.rejection!.errors).toEqual([expect.stringMatching(/^\(spec\): its record would hold \d+ bytes, over the 350000 a job may/)]);
    expect(storedBytes(b)).toBeLessThan(MAX_STORED_JOB_BYTES);
  });

  it('knows a bad body over 16 KiB delivered again as the same submission, not a reused token', async () => {
    const jobs = new MemoryJobStore();
    const body = JSON.stringify({ image: 'x/y:1', command: ['run', 'a'.repeat(20_000)], gpu: { kind: 'whole', count: 0 } });
    const take = () => intake({ jobs, clock: new VirtualClock(T0) }, { team: 'nlp', token: 'tok', body });
    expect((await take()).outcome).toBe('rejected');
    expect((await take()).outcome).toBe('duplicate');
    // Another bad body under the same token, the same as the first for its first 16 KiB (all the record keeps of it):
    // a reused token, not the same submission.
    const other = body.replace(/a"\]/, 'b"]');
    expect(other).not.toBe(body);
    expect(other.slice(0, 16_384)).toBe(body.slice(0, 16_384));
    expect(await intake({ jobs, clock: new VirtualClock(T0) }, { team: 'nlp', token: 'tok', body: other })).toMatchObject({
      outcome: 'token-reused',
    });
  });

  it('makes one job of a message delivered twice, and of two messages with the same idempotency token', async () => {
    const { handler, jobs } = setup();
    await handler({ Records: [record('m1', good)] }, lambdaContext());
    await handler({ Records: [record('m1', good)] }, lambdaContext());
    const token = { [TOKEN_ATTRIBUTE]: { stringValue: 'tok-7', dataType: 'String', stringListValues: [], binaryListValues: [] } };
    await handler(
      { Records: [record('m2', good, { messageAttributes: token }), record('m3', good, { messageAttributes: token })] },
      lambdaContext(),
    );
    expect((await jobs.listByState(['pending'])).map((j) => j.id)).toEqual(['nlp.m1', 'nlp.tok-7']);
  });

  it('orders a service’s messages by their SentTimestamp: a redelivered older spec never reverts a newer one', async () => {
    const services = new MemoryServiceStore();
    const { handler } = setup(new MemoryJobStore(), services);
    const svc = (image: string) =>
      JSON.stringify({
        image,
        command: ['vllm', 'serve'],
        name: 'chat',
        gpu: { kind: 'whole', count: 1 },
        service: { port: 8000, replicas: { min: 1, max: 2 }, targets: [{ metric: 'waiting-requests', perReplica: 6 }] },
      });
    const sent = (id: string, image: string, at: number) =>
      record(id, svc(image), {
        attributes: {
          ApproximateReceiveCount: '1',
          SentTimestamp: String(at),
          SenderId: 'AIDA',
          ApproximateFirstReceiveTimestamp: String(at),
        },
      });
    await handler({ Records: [sent('m2', 'vllm/vllm-openai:2.0', T0 + 2000)] }, lambdaContext());
    // m1 was sent first and arrives last (SQS standard queues deliver at least once, in no set order).
    await handler({ Records: [sent('m1', 'vllm/vllm-openai:1.0', T0 + 1000)] }, lambdaContext());
    expect((await services.get('nlp.chat'))!).toMatchObject({ spec: { image: 'vllm/vllm-openai:2.0' }, specSentAtMs: T0 + 2000 });
  });

  it("refuses an image from a registry the fleet does not allow, named by an address, or another team's private repository (issue 68)", async () => {
    const jobs = new MemoryJobStore();
    const ecr = '123456789012.dkr.ecr.us-east-1.amazonaws.com';
    const handler = createIntakeHandler({
      jobs,
      clock: new VirtualClock(T0),
      deadLetter: { send: async () => {} },
      teamOfQueue: teamFromQueueArn('gpu-fleet-team-'),
      images: { registries: ['docker.io', ecr], teamRepositories: [{ repositories: `${ecr}/cv/*`, teams: ['cv'] }] },
      obs: observability('intake-test'),
      timeoutEarlyInMillis: 0,
    });
    const spec = (image: string) => JSON.stringify({ image, command: ['python', 'train.py'], gpu: { kind: 'whole', count: 1 } });
    const event: SQSEvent = {
      Records: [
        record('ok', spec(`${ecr}/nlp/trainer:3`)),
        record('theirs', spec(`${ecr}/cv/detector:1`)),
        record('addr', spec('10.0.7.12:5000/probe:1')),
        record('other', spec('ghcr.io/someone/x:1')),
        record('nvidia', JSON.stringify({ ...(JSON.parse(good) as object), env: { NVIDIA_DRIVER_CAPABILITIES: 'all' } })),
        record('root', JSON.stringify({ ...(JSON.parse(spec(`${ecr}/nlp/trainer:3`)) as object), container: { runAsRoot: true } })),
      ],
    };
    expect(await handler(event, lambdaContext())).toEqual({ batchItemFailures: [] });
    expect(await jobs.get('nlp.ok')).toMatchObject({ state: 'pending' });
    const why = async (id: string) => (await jobs.get(id))!.rejection!.errors;
    expect(await why('nlp.theirs')).toEqual([`image: ${ecr}/cv/detector is a repository of team cv; team nlp may not run it`]);
    expect((await why('nlp.addr'))[0]).toMatch(/^image names the registry by the address 10\.0\.7\.12/);
    expect((await why('nlp.other'))[0]).toBe(`image: registry ghcr.io is not one this fleet allows; allowed: docker.io, ${ecr}`);
    expect((await why('nlp.nvidia'))[0]).toMatch(
      /^env\.NVIDIA_DRIVER_CAPABILITIES: NVIDIA_\* variables choose what the NVIDIA runtime gives/,
    );
    // Root in its container only for the teams the config names (none here).
    expect((await why('nlp.root'))[0]).toMatch(/^container\.runAsRoot: team nlp may not run a container as root/);
  });

  it("refuses a service on a port the fleet's machines do not keep to its load balancers", async () => {
    const jobs = new MemoryJobStore();
    const services = new MemoryServiceStore();
    const handler = createIntakeHandler({
      jobs,
      services,
      clock: new VirtualClock(T0),
      deadLetter: { send: async () => {} },
      teamOfQueue: teamFromQueueArn('gpu-fleet-team-'),
      servicePorts: [8000],
      obs: observability('intake-test'),
      timeoutEarlyInMillis: 0,
    });
    const service = (port: number) =>
      JSON.stringify({
        name: `chat-${port}`,
        image: 'vllm/vllm-openai:v0.6.3',
        command: ['serve'],
        gpu: { kind: 'whole', count: 1 },
        service: { port, replicas: { min: 1, max: 2 }, targets: [{ metric: 'waiting-requests', perReplica: 8 }] },
      });
    expect(await handler({ Records: [record('s1', service(8000)), record('s2', service(9000))] }, lambdaContext())).toEqual({
      batchItemFailures: [],
    });
    expect(await services.get('nlp.chat-8000')).toMatchObject({ state: 'active' });
    expect((await jobs.get('nlp.s2'))!.rejection!.errors).toEqual([
      "service.port: 9000 is not a port this fleet's machines keep to its load balancers (8000: the config's services.replicaPorts and load balancer services); any other would be open to every machine of the fleet",
    ]);
  });

  it('takes the team from the queue, never from the body', async () => {
    const { handler, jobs } = setup();
    await handler({ Records: [record('m1', JSON.stringify({ ...JSON.parse(good), team: 'vision' }))] }, lambdaContext());
    expect(await jobs.get('nlp.m1')).toMatchObject({ team: 'nlp', state: 'rejected' });
    expect(await jobs.get('vision.m1')).toBeUndefined();
  });

  it('sends a message from a queue that is no team queue to the dead-letter queue, with why', async () => {
    const { handler, dead, jobs } = setup();
    const out = await handler(
      { Records: [record('m9', good, { eventSourceARN: 'arn:aws:sqs:us-east-1:123456789012:somebody-else' })] },
      lambdaContext(),
    );
    expect(out).toEqual({ batchItemFailures: [] });
    expect(dead).toEqual([
      {
        body: good,
        reason: expect.stringContaining('is not a gpu-fleet team queue'),
        sourceQueueArn: 'arn:aws:sqs:us-east-1:123456789012:somebody-else',
        messageId: 'm9',
      },
    ]);
    expect(await jobs.listByState(['pending', 'rejected'])).toEqual([]);
  });

  it('retries only the messages whose store write failed (partial batch response)', async () => {
    const store = new MemoryJobStore();
    const flaky: JobStore = {
      ...store,
      get: (id) => store.get(id),
      update: (n, v) => store.update(n, v),
      listByState: (s, t) => store.listByState(s, t),
      listEndedSince: (a, b) => store.listEndedSince(a, b),
      create: async (job) => {
        if (job.id === 'nlp.m2') throw new CloudError('throttled', 'ProvisionedThroughputExceededException', { operation: 'create job' });
        return store.create(job);
      },
    };
    const { handler } = setup(flaky);
    const out = await handler({ Records: [record('m1', good), record('m2', good), record('m3', good)] }, lambdaContext());
    expect(out).toEqual({ batchItemFailures: [{ itemIdentifier: 'm2' }] });
    expect((await store.listByState(['pending'])).map((j) => j.id)).toEqual(['nlp.m1', 'nlp.m3']);
  });
});
