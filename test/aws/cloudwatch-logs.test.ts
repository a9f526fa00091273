import { CloudWatchLogsClient } from '@aws-sdk/client-cloudwatch-logs';
import { afterAll, describe, expect, it } from 'vitest';
import { CloudWatchJobLogs, logStreamName } from '../../cloud/aws/cloudwatch-logs.ts';
import { MemoryJobLogs } from '../../cloud/sim/memory-stores.ts';
import { isCloudError } from '../../core/errors.ts';
import { jobLogsContract } from '../contract/job-logs.contract.ts';
import { FakeCloudWatchLogs } from '../../bench/support/fake-logs.ts';

/** Line times an hour ago: CloudWatch Logs leaves out events over 14 days old or 2 hours ahead, as the fake does. */
const T = Date.now() - 3_600_000;

const servers: FakeCloudWatchLogs[] = [];
afterAll(async () => Promise.all(servers.map((s) => s.stop())));
async function world() {
  const fake = await new FakeCloudWatchLogs(['/gpu-fleet/GpuFleet/jobs']).start();
  servers.push(fake);
  const client = new CloudWatchLogsClient({
    region: 'us-west-2',
    endpoint: fake.endpoint,
    credentials: { accessKeyId: 'x', secretAccessKey: 'x' },
  });
  return { fake, logs: new CloudWatchJobLogs(client, '/gpu-fleet/GpuFleet/jobs'), client };
}

jobLogsContract('CloudWatch Logs (the real client, a local server in the API’s shapes)', async () => (await world()).logs);
jobLogsContract('memory (the simulator’s)', async () => new MemoryJobLogs());

describe('CloudWatch Logs job output', () => {
  it('creates a stream per attempt and rank once, writes each line as JSON with the job, team and labels as fields', async () => {
    const { fake, logs, client } = await world();
    const batch = { jobId: 'nlp.j', attempt: 1, rank: 0, team: 'nlp', labels: { project: 'ranking' } };
    await logs.append({ ...batch, lines: [{ atMs: T + 1000, seq: 0, line: 'hello' }] });
    await logs.append({ ...batch, lines: [{ atMs: T + 2000, seq: 1, line: 'again' }] });
    expect(fake.calls.filter((c) => c === 'CreateLogStream')).toHaveLength(1);
    const stream = fake.groups.get('/gpu-fleet/GpuFleet/jobs')!.get(logStreamName('nlp.j', 1, 0))!;
    expect(JSON.parse(stream[0]!.message)).toEqual({
      line: 'hello',
      seq: 0,
      job: 'nlp.j',
      attempt: 1,
      rank: 0,
      team: 'nlp',
      labels: { project: 'ranking' },
    });
    // A second writer (a restarted agent) finds the stream there already: it writes on.
    const restarted = new CloudWatchJobLogs(client, '/gpu-fleet/GpuFleet/jobs');
    await restarted.append({ ...batch, lines: [{ atMs: T + 3000, seq: 2, line: 'after a restart' }] });
    expect((await logs.read('nlp.j')).map((l) => l.line)).toEqual(['hello', 'again', 'after a restart']);
  });

  it('splits a batch spanning more than 24 hours into calls that each span at most 24 hours (lines held back by a long outage)', async () => {
    const { fake, logs } = await world();
    const from = Date.now() - 30 * 3_600_000;
    const lines = [0, 10, 23.5, 25, 29].map((h, seq) => ({ atMs: from + h * 3_600_000, seq, line: `at ${h} h` }));
    await logs.append({ jobId: 'nlp.j', attempt: 1, rank: 0, team: 'nlp', labels: {}, lines });
    expect(fake.calls.filter((c) => c === 'PutLogEvents')).toHaveLength(2);
    expect((await logs.read('nlp.j')).map((l) => l.line)).toEqual(lines.map((l) => l.line));
  });

  it('splits a big batch into calls within the API’s limits (1 MiB, counting 26 bytes an event)', async () => {
    const { fake, logs } = await world();
    const line = 'x'.repeat(15_000);
    await logs.append({
      jobId: 'nlp.big',
      attempt: 1,
      rank: 0,
      team: 'nlp',
      labels: {},
      lines: Array.from({ length: 150 }, (_, seq) => ({ atMs: T + 1000 + seq, seq, line })),
    });
    expect(fake.calls.filter((c) => c === 'PutLogEvents').length).toBe(3);
    expect((await logs.read('nlp.big')).length).toBe(150);
  });

  it('says what failed when the log group is not there', async () => {
    const { logs, client } = await world();
    void logs;
    const missing = new CloudWatchJobLogs(client, '/gpu-fleet/nope');
    const error = await missing
      .append({ jobId: 'nlp.j', attempt: 1, rank: 0, team: 'nlp', labels: {}, lines: [{ atMs: T + 1, seq: 0, line: 'x' }] })
      .catch((e: unknown) => e);
    expect(isCloudError(error) && error.code).toBe('not-found');
    expect((error as Error).message).toMatch(/log group does not exist/);
  });
});
