import { createServer, request, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { CreateQueueCommand, GetQueueUrlCommand, ListQueueTagsCommand, ReceiveMessageCommand, SQSClient } from '@aws-sdk/client-sqs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dynamoStores } from '../../cloud/aws/dynamo-store.ts';
import { SqsJobQueue } from '../../cloud/aws/sqs-queue.ts';
import type { TableNames } from '../../cloud/aws/tables.ts';
import { MemoryJobLogs } from '../../cloud/sim/memory-stores.ts';
import { intake } from '../../core/services/intake.ts';
import { startDynalite, type LocalDynamo } from '../support/dynalite.ts';
import { startSqs } from '../support/fauxqs.ts';
import { cliInProcess } from '../support/cli-in-process.ts';
import { principal, startPeopleApi, TWO_TEAMS, twoTeamBudgets, type LocalPrincipal } from '../support/people-api-server.ts';

const cli = cliInProcess;

/**
 * The CLI as a team's person and as the platform's admin: every read and the cancel go through the
 * people API (a local function URL that checks SigV4 and passes the role on), the DynamoDB endpoint
 * the CLI is given is a closed port (its credentials read no table), submit goes to SQS (fauxqs),
 * and the tag writes meet IAM's answer as the template's policies give it (a proxy in front of fauxqs
 * refuses TagQueue where the role may not, as SQS does).
 */
describe('gpu-fleet under a team role and under the admin role (people API, SQS by fauxqs)', () => {
  let db: LocalDynamo;
  let tables: TableNames;
  let sqs: Awaited<ReturnType<typeof startSqs>>;
  let api: Awaited<ReturnType<typeof startPeopleApi>>;
  let iamSqs: Server;
  let closed: Server;
  const nlp = principal('GpuFleet-team-nlp');
  const vision = principal('GpuFleet-team-vision');
  const admin = principal('GpuFleet-admin');
  // Who may tag which queue, as the template's policies say (test/infra/people-iam.test.ts proves them): vision sets its own.
  const mayTag: Record<string, string[]> = {
    'GpuFleet-team-nlp': [],
    'GpuFleet-team-vision': ['vision'],
    'GpuFleet-admin': ['nlp', 'vision'],
  };
  let base: NodeJS.ProcessEnv;
  const as = (p: LocalPrincipal): NodeJS.ProcessEnv => ({
    ...base,
    AWS_ACCESS_KEY_ID: p.credentials.accessKeyId,
    AWS_SECRET_ACCESS_KEY: p.credentials.secretAccessKey,
  });

  beforeAll(async () => {
    db = await startDynalite();
    tables = await db.createTables();
    sqs = await startSqs();
    for (const t of ['nlp', 'vision']) await sqs.sqs.send(new CreateQueueCommand({ QueueName: `gpu-fleet-team-${t}` }));
    const stores = dynamoStores(db.doc, tables, 'bucket');
    const at = { nowMs: () => Date.now() - 120_000 };
    const spec = (env?: Record<string, string>) =>
      JSON.stringify({
        image: 'pytorch/pytorch:2.3.0',
        command: ['python', 'train.py'],
        gpu: { kind: 'whole', count: 1 },
        ...(env ? { env } : {}),
      });
    await intake({ jobs: stores.jobs, clock: at }, { team: 'nlp', token: 'a', body: spec({ HF_TOKEN: 'hf_inline_value' }) });
    await intake({ jobs: stores.jobs, clock: at }, { team: 'vision', token: 'big', body: spec() });
    const logs = new MemoryJobLogs();
    await logs.append({
      jobId: 'nlp.a',
      attempt: 1,
      rank: 0,
      team: 'nlp',
      labels: {},
      lines: [{ atMs: Date.now() - 60_000, seq: 0, line: 'loss 0.1' }],
    });
    await logs.append({
      jobId: 'vision.big',
      attempt: 1,
      rank: 0,
      team: 'vision',
      labels: {},
      lines: [{ atMs: Date.now(), seq: 0, line: 'vision only' }],
    });
    const queue = new SqsJobQueue(
      new SQSClient({
        endpoint: sqs.server.address,
        region: 'us-east-1',
        credentials: { accessKeyId: 'test', secretAccessKey: 'test' },
        useQueueUrlAsEndpoint: false,
      }),
      {
        teamQueuePrefix: 'gpu-fleet-team-',
        clock: { nowMs: () => Date.now() },
      },
    );
    api = await startPeopleApi(
      {
        ports: {
          jobs: stores.jobs,
          nodes: stores.nodes,
          decisions: stores.decisions,
          ledger: stores.ledger,
          queue,
          budgets: twoTeamBudgets(),
          jobLogs: logs,
        },
        stores: { jobs: stores.jobs },
        ...TWO_TEAMS,
        clock: { nowMs: () => Date.now() },
      },
      [nlp, vision, admin],
    );
    // SQS behind IAM: TagQueue is refused as SQS refuses it where the caller's role may not tag the queue.
    const target = new URL(sqs.server.address);
    const roleOfKey = new Map([nlp, vision, admin].map((p) => [p.credentials.accessKeyId, p.role]));
    iamSqs = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        const body = Buffer.concat(chunks);
        const key = /Credential=([^/]+)\//.exec(req.headers.authorization ?? '')?.[1] ?? '';
        const role = roleOfKey.get(key) ?? 'unknown';
        if (req.headers['x-amz-target'] === 'AmazonSQS.TagQueue') {
          const queueTeam = /gpu-fleet-team-([a-z0-9-]+)/.exec((JSON.parse(body.toString()) as { QueueUrl: string }).QueueUrl)?.[1] ?? '';
          if (!(mayTag[role] ?? []).includes(queueTeam)) {
            res.writeHead(400, { 'content-type': 'application/x-amz-json-1.0', 'x-amzn-query-error': 'AccessDenied;Sender' }).end(
              JSON.stringify({
                __type: 'com.amazon.coral.service#AccessDeniedException',
                message: `User: arn:aws:sts::123456789012:assumed-role/${role}/person is not authorized to perform: sqs:tagqueue on resource: arn:aws:sqs:us-east-1:123456789012:gpu-fleet-team-${queueTeam} with an explicit deny in an identity-based policy`,
              }),
            );
            return;
          }
        }
        const out = request({ host: target.hostname, port: target.port, path: req.url, method: req.method, headers: req.headers }, (up) => {
          res.writeHead(up.statusCode ?? 500, up.headers);
          up.pipe(res);
        });
        out.end(body);
      });
    });
    await new Promise<void>((r) => iamSqs.listen(0, '127.0.0.1', r));
    // The tables' endpoint the CLI is given: nothing answers there.
    closed = createServer((req) => req.socket.destroy());
    await new Promise<void>((r) => closed.listen(0, '127.0.0.1', r));
    base = {
      ...process.env,
      AWS_REGION: 'us-east-1',
      AWS_ENDPOINT_URL_SQS: `http://127.0.0.1:${(iamSqs.address() as AddressInfo).port}`,
      AWS_ENDPOINT_URL_DYNAMODB: `http://127.0.0.1:${(closed.address() as AddressInfo).port}`,
      GPU_FLEET_JOBS_TABLE: 'not-for-people',
      GPU_FLEET_NODES_TABLE: 'not-for-people',
      GPU_FLEET_CONTROL_TABLE: 'not-for-people',
      GPU_FLEET_TEAM_QUEUE_PREFIX: 'gpu-fleet-team-',
      GPU_FLEET_PEOPLE_API_URL: api.url,
      AWS_MAX_ATTEMPTS: '1',
    };
  }, 60_000);

  afterAll(async () => {
    await api?.close();
    await sqs?.close();
    await db?.close();
    await new Promise((r) => iamSqs?.close(r));
    await new Promise((r) => closed?.close(r));
  });

  it("status, explain, logs, budget and report under nlp's role show nlp's rows and say the rest is out of view", async () => {
    const s = await cli(['status', '--json'], as(nlp));
    expect(s.code).toBe(0);
    expect(s.stderr).toMatch(
      /as team nlp's role \(GpuFleet-team-nlp\): this shows team nlp's jobs, services, spend and output; other teams are out of view/,
    );
    const status = JSON.parse(s.stdout) as { pending: { id: string }[]; queues: { team: string }[] };
    expect(status.pending.map((p) => p.id)).toEqual(['nlp.a']);
    expect(status.queues.map((q) => q.team)).toEqual(['nlp']);
    const explain = await cli(['explain', 'vision.big'], as(nlp));
    expect(explain.code).toBe(1);
    expect(explain.stderr).toMatch(
      /^gpu-fleet: as team nlp's role[^\n]*\ngpu-fleet: job vision\.big is out of view: it belongs to team vision, and this role sees team nlp's work only/,
    );
    expect(explain.stderr).not.toMatch(/\n\s+at /); // no stack trace
    const mine = await cli(['explain', 'nlp.a', '--json'], as(nlp));
    expect(mine.code).toBe(0);
    expect(mine.stdout).not.toContain('hf_inline_value');
    expect((await cli(['logs', 'nlp.a'], as(nlp))).stdout).toContain('loss 0.1');
    const otherLogs = await cli(['logs', 'vision.big'], as(nlp));
    expect(otherLogs.code).toBe(1);
    expect(otherLogs.stdout).not.toContain('vision only');
    const budget = JSON.parse((await cli(['budget', '--json'], as(nlp))).stdout) as { team: string }[];
    expect(budget.map((b) => b.team)).toEqual(['nlp']);
    const report = JSON.parse((await cli(['report', '--period', 'last-7d', '--json'], as(nlp))).stdout) as { notes: string[] };
    expect(report.notes.join(' ')).toMatch(/team nlp's view: its own jobs, spend and checkpoint bytes; other teams' rows/);
    const otherReport = await cli(['report', '--team', 'vision', '--json'], as(nlp));
    expect(otherReport.code).toBe(1);
    expect(otherReport.stderr).toMatch(/team vision's jobs is out of view/);
  }, 120_000);

  it("cancel under nlp's role: another team's job is refused and stays; submit goes only to its own queue", async () => {
    const refused = await cli(['cancel', 'vision.big'], as(nlp));
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/job vision\.big is out of view/);
    const v = JSON.parse((await cli(['status', '--json'], as(vision))).stdout) as { pending: { id: string }[] };
    expect(v.pending.map((p) => p.id)).toEqual(['vision.big']);
    const sent = await cli(['submit', '--team', 'vision', '--image', 'pytorch/pytorch:2.3.0', '--', 'python', 'x.py'], as(nlp));
    expect(sent.code).toBe(1);
    expect(sent.stderr).toMatch(/--team vision: this role is team nlp's and sends to its own queue only/);
    const own = await cli(
      ['submit', '--team', 'nlp', '--image', 'pytorch/pytorch:2.3.0', '--token', 't1', '--', 'python', 'x.py'],
      as(nlp),
    );
    expect(own.code).toBe(0);
    const { QueueUrl } = await sqs.sqs.send(new GetQueueUrlCommand({ QueueName: 'gpu-fleet-team-nlp' }));
    const got = await sqs.sqs.send(new ReceiveMessageCommand({ QueueUrl, WaitTimeSeconds: 1 }));
    expect(got.Messages).toHaveLength(1);
  }, 120_000);

  it('budget set: refused for a team whose budget the platform keeps, saying so; allowed where the team sets its own, and for the admin', async () => {
    const kept = await cli(['budget', 'set', '--team', 'nlp', '--usd', '99999'], as(nlp));
    expect(kept.code).toBe(1);
    expect(kept.stderr).toMatch(
      /budget set --team nlp: refused: the platform keeps team nlp's budget: the fleet config says teams\[\]\.setsOwnBudget is false for nlp, so only the platform's admin role may tag its queue/,
    );
    const other = await cli(['budget', 'set', '--team', 'nlp', '--usd', '1'], as(vision));
    expect(other.code).toBe(2);
    expect(other.stderr).toMatch(/this role is team vision's and may never tag another team's queue/);
    expect((await cli(['budget', 'set', '--team', 'vision', '--usd', '1200'], as(vision))).code).toBe(0);
    expect((await cli(['budget', 'set', '--team', 'nlp', '--usd', '3000', '--action', 'hold'], as(admin))).code).toBe(0);
    const tagsOf = async (team: string) => {
      const { QueueUrl } = await sqs.sqs.send(new GetQueueUrlCommand({ QueueName: `gpu-fleet-team-${team}` }));
      return (await sqs.sqs.send(new ListQueueTagsCommand({ QueueUrl }))).Tags ?? {};
    };
    expect(await tagsOf('vision')).toMatchObject({ 'gpu-fleet:budget-usd': '1200' });
    expect(await tagsOf('nlp')).toEqual({ 'gpu-fleet:budget-usd': '3000', 'gpu-fleet:budget-action': 'hold' });
  }, 120_000);

  it('the admin role sees every team', async () => {
    const s = await cli(['status', '--json'], as(admin));
    expect(s.code).toBe(0);
    expect(s.stderr).not.toMatch(/out of view/);
    const status = JSON.parse(s.stdout) as { pending: { id: string }[]; queues: { team: string }[] };
    // nlp.t1 waits in its queue (no intake runs here): the stored jobs are these.
    expect(status.pending.map((p) => p.id).sort()).toEqual(['nlp.a', 'vision.big']);
    expect(status.queues.map((q) => q.team)).toEqual(['nlp', 'vision']);
    expect((await cli(['logs', 'vision.big'], as(admin))).stdout).toContain('vision only');
  }, 120_000);
});
