import { mkdtempSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { App } from 'aws-cdk-lib';
import { Template } from 'aws-cdk-lib/assertions';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { newPendingJob } from '../../core/job.ts';
import { checkJobSpec } from '../../core/job-spec.ts';
import { dynamoStores } from '../../cloud/aws/dynamo-store.ts';
import { environmentFromOutputs, STACK_OUTPUT_VARIABLES } from '../../cloud/aws/stack-outputs.ts';
import type { TableNames } from '../../cloud/aws/tables.ts';
import { fleetConfigFromEnv } from '../../cloud/env.ts';
import { loadConfig } from '../../infra/config.ts';
import { GpuFleetStack } from '../../infra/stack.ts';
import { cliInProcess } from '../support/cli-in-process.ts';
import { startDynalite, type LocalDynamo } from '../support/dynalite.ts';

const root = fileURLToPath(new URL('../..', import.meta.url));

/** Each command in-process with the given environment (test/support/cli-in-process.ts). */
const cli = (args: string[], env: NodeJS.ProcessEnv) => cliInProcess(args, env);

/** A stack's outputs in DescribeStacks' response (the Query protocol's XML, as the API reference shows it). */
function describeStacksXml(name: string, outputs: Readonly<Record<string, string>>): string {
  const esc = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
  const members = Object.entries(outputs)
    .map(([k, v]) => `<member><OutputKey>${esc(k)}</OutputKey><OutputValue>${esc(v)}</OutputValue></member>`)
    .join('');
  return `<DescribeStacksResponse xmlns="http://cloudformation.amazonaws.com/doc/2010-05-15/"><DescribeStacksResult><Stacks><member><StackName>${esc(name)}</StackName><StackId>arn:aws:cloudformation:us-east-1:123456789012:stack/${esc(name)}/aaf549a0-a413-11df-adb3-5081b3858e83</StackId><CreationTime>2026-11-20T09:00:00Z</CreationTime><StackStatus>CREATE_COMPLETE</StackStatus><DisableRollback>false</DisableRollback><Outputs>${members}</Outputs></member></Stacks></DescribeStacksResult><ResponseMetadata><RequestId>b9b4b068-3a41-11e5-94eb-example</RequestId></ResponseMetadata></DescribeStacksResponse>`;
}

function errorXml(code: string, message: string): string {
  return `<ErrorResponse xmlns="http://cloudformation.amazonaws.com/doc/2010-05-15/"><Error><Type>Sender</Type><Code>${code}</Code><Message>${message}</Message></Error><RequestId>4af14eec-350e-11e4-b260-example</RequestId></ErrorResponse>`;
}

describe('the deployed stack tells the CLI every name it needs', () => {
  it('the synthesised template has an output for each, naming what the functions are given', () => {
    const config = loadConfig(resolve(root, 'infra/config.example.json'));
    const app = new App({ context: { 'aws:cdk:bundling-stacks': [] } });
    const stack = new GpuFleetStack(app, config.stackName, {
      config,
      env: { region: config.region },
      agentBundleDir: mkdtempSync(join(tmpdir(), 'agent-')),
    });
    const t = Template.fromStack(stack).toJSON() as {
      Outputs: Record<string, { Value: unknown }>;
      Resources: Record<string, { Type: string; Properties: Record<string, unknown> }>;
    };
    const functions = Object.values(t.Resources).filter(
      (r) => r.Type === 'AWS::Lambda::Function' && (r.Properties.Environment as { Variables?: unknown })?.Variables,
    );
    const reconcileEnv = functions
      .map((f) => (f.Properties.Environment as { Variables: Record<string, unknown> }).Variables)
      .find((v) => v.POWERTOOLS_SERVICE_NAME === 'gpu-fleet-interruption')!;
    for (const [key, variable] of Object.entries(STACK_OUTPUT_VARIABLES)) {
      if (
        variable.startsWith('GPU_FLEET_GCP_') ||
        variable === 'GPU_FLEET_SERVICE_TARGET_GROUPS' ||
        variable === 'GPU_FLEET_RESERVATION_SELECTOR' ||
        variable === 'GPU_FLEET_DISCOUNTS' ||
        variable === 'GPU_FLEET_PEOPLE_API_URL'
      ) {
        if (variable === 'GPU_FLEET_PEOPLE_API_URL') {
          // The people's own: no function is given it, and the CLI goes through it.
          expect(t.Outputs[key], key).toBeDefined();
          continue;
        }
        expect(t.Outputs[key], `${key} only with GCP (or with services, or a reservation selector)`).toBeUndefined();
        continue;
      }
      expect(t.Outputs[key], `output ${key}`).toBeDefined();
      // The output is the very value the interruption function runs with (it has every variable).
      expect(t.Outputs[key]!.Value, `${key} = ${variable}`).toEqual(reconcileEnv[variable]);
    }
    // The team queues are named by the prefix the stack exports.
    const prefix = t.Outputs.TeamQueuePrefix!.Value as string;
    const queueNames = Object.values(t.Resources)
      .filter(
        (r) =>
          r.Type === 'AWS::SQS::Queue' &&
          typeof r.Properties.QueueName === 'string' &&
          (r.Properties.QueueName as string).includes('-team-'),
      )
      .map((r) => r.Properties.QueueName as string);
    expect(queueNames.length).toBe(config.teams.length);
    for (const q of queueNames) expect(q.startsWith(prefix)).toBe(true);
    expect(prefix).toBe('gpufleet-team-');
    // Read back as the CLI reads them, the outputs make a valid config. (References resolve at
    // deploy time; stand-ins of the right form take their place here.)
    const standIn = (key: string) =>
      key === 'DeadLetterQueueUrl'
        ? 'https://sqs.us-west-2.amazonaws.com/123456789012/dead-letters'
        : key === 'PeopleApiUrl'
          ? 'https://abcdefghij0123456789abcdefghij01.lambda-url.us-west-2.on.aws/'
          : `${key.toLowerCase()}-resolved`;
    const asEnv = Object.fromEntries(Object.entries(t.Outputs).map(([k, o]) => [k, typeof o.Value === 'string' ? o.Value : standIn(k)]));
    expect(fleetConfigFromEnv({ ...environmentFromOutputs(asEnv), AWS_REGION: 'us-west-2' }).teamQueuePrefix).toBe('gpufleet-team-');
  });
});

describe('gpu-fleet finds a deployed stack by its name (DescribeStacks on a local server, DynamoDB by dynalite)', () => {
  let db: LocalDynamo;
  let tables: TableNames;
  let cfn: Server;
  const seen: { stackName: string; auth: string }[] = [];
  let base: NodeJS.ProcessEnv;

  beforeAll(async () => {
    db = await startDynalite();
    tables = await db.createTables();
    const stores = dynamoStores(db.doc, tables, 's3://bucket/checkpoints/');
    const spec = checkJobSpec({ image: 'pytorch/pytorch:2.3.0', command: ['python', 'x.py'], gpu: { kind: 'whole', count: 1 } });
    if (!spec.ok) throw new Error(spec.errors.join('; '));
    await stores.jobs.create(newPendingJob({ id: 'nlp.found-by-stack', team: 'nlp', spec: spec.spec, submittedAtMs: Date.now() - 60_000 }));
    const outputs = (jobs: string): Record<string, string> => ({
      JobsTableName: jobs,
      NodesTableName: tables.nodes,
      ControlTableName: tables.control,
      IdempotencyTableName: tables.idempotency,
      CheckpointBucketName: 'fleet-checkpoints-123',
      TeamQueuePrefix: 'myfleet-team-',
      DeadLetterQueueUrl: 'https://sqs.us-east-1.amazonaws.com/123456789012/myfleet-dead-letters',
      ReconcileFunctionName: 'MyFleet-reconcileFunction-AbC123',
      DashboardName: 'MyFleet-gpu-fleet',
    });
    cfn = createServer((req, res) => {
      let body = '';
      req.on('data', (c: Buffer) => (body += c.toString()));
      req.on('end', () => {
        const form = new URLSearchParams(body);
        const stackName = form.get('StackName') ?? '';
        seen.push({ stackName, auth: req.headers.authorization ?? '' });
        const xml = (status: number, text: string) => res.writeHead(status, { 'content-type': 'text/xml' }).end(text);
        if (form.get('Action') !== 'DescribeStacks') return xml(400, errorXml('InvalidAction', 'unexpected action'));
        if (/Credential=REFUSED\//.test(req.headers.authorization ?? ''))
          return xml(403, errorXml('InvalidClientTokenId', 'The security token included in the request is invalid.'));
        if (stackName === 'MyFleet') return xml(200, describeStacksXml(stackName, outputs(tables.jobs)));
        if (stackName === 'Broken') return xml(200, describeStacksXml(stackName, outputs('broken-jobs-table')));
        return xml(400, errorXml('ValidationError', `Stack with id ${stackName} does not exist`));
      });
    });
    await new Promise<void>((r) => cfn.listen(0, '127.0.0.1', r));
    base = {
      PATH: process.env.PATH,
      HOME: mkdtempSync(join(tmpdir(), 'home-')),
      AWS_REGION: 'us-east-1',
      AWS_ACCESS_KEY_ID: 'test',
      AWS_SECRET_ACCESS_KEY: 'test',
      AWS_EC2_METADATA_DISABLED: 'true',
      AWS_ENDPOINT_URL_CLOUDFORMATION: `http://127.0.0.1:${(cfn.address() as AddressInfo).port}`,
      AWS_ENDPOINT_URL_DYNAMODB: db.endpoint,
      AWS_MAX_ATTEMPTS: '1',
      // Node 20 gets a one-time notice from the SDK about Node 22; these tests read stderr line by line.
      AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true',
    };
  }, 60_000);

  afterAll(async () => {
    await db?.close();
    await new Promise((r) => cfn?.close(r));
  });

  it('reads the tables from the stack named by --stack (or GPU_FLEET_STACK), with no GPU_FLEET_* variable set', async () => {
    const out = await cli(['explain', 'nlp.found-by-stack', '--stack', 'MyFleet', '--json'], base);
    expect(out.stderr).toBe('');
    expect(out.code).toBe(0);
    expect(JSON.parse(out.stdout)).toMatchObject({ job: 'nlp.found-by-stack', state: 'pending' });
    expect(seen.at(-1)?.stackName).toBe('MyFleet');
    const byVariable = await cli(['explain', 'nlp.found-by-stack', '--json'], { ...base, GPU_FLEET_STACK: 'MyFleet' });
    expect(byVariable.code).toBe(0);
    expect(seen.at(-1)?.stackName).toBe('MyFleet');
  });

  it('a GPU_FLEET_* variable wins over the stack', async () => {
    const out = await cli(['explain', 'nlp.found-by-stack', '--stack', 'Broken', '--json'], {
      ...base,
      GPU_FLEET_JOBS_TABLE: tables.jobs,
    });
    expect(out.code).toBe(0);
    expect(out.stdout).toContain('nlp.found-by-stack');
  });

  it('looks for the stack GpuFleet when nothing names one, and says what to do when it is not there', async () => {
    const out = await cli(['explain', 'nlp.found-by-stack'], base);
    expect(seen.at(-1)?.stackName).toBe('GpuFleet');
    expect(out.code).toBe(1);
    expect(out.stderr.trim().split('\n')).toHaveLength(1);
    expect(out.stderr).toMatch(/^gpu-fleet: stack GpuFleet does not exist in us-east-1: deploy it \(npx cdk deploy/);
    expect(out.stderr).toContain('--stack NAME or GPU_FLEET_STACK');
    expect(out.stderr).not.toMatch(/\n\s+at /);
  });

  it('a table the stack names but that is not there is named, with the variable to set', async () => {
    const out = await cli(['explain', 'nlp.found-by-stack', '--stack', 'Broken'], base);
    expect(out.code).toBe(1);
    expect(out.stderr.trim().split('\n')).toHaveLength(1);
    expect(out.stderr).toMatch(/table broken-jobs-table does not exist/);
    expect(out.stderr).toContain('deploy the stack, or set GPU_FLEET_JOBS_TABLE');
  });

  it('credentials that AWS refuses, and no credentials at all, are one line each that says what to check', async () => {
    const refused = await cli(['explain', 'nlp.found-by-stack', '--stack', 'MyFleet'], { ...base, AWS_ACCESS_KEY_ID: 'REFUSED' });
    expect(refused.code).toBe(1);
    expect(refused.stderr.trim().split('\n')).toHaveLength(1);
    expect(refused.stderr).toMatch(/InvalidClientTokenId/);
    expect(refused.stderr).toContain('check the AWS credentials');
    const { AWS_ACCESS_KEY_ID: _a, AWS_SECRET_ACCESS_KEY: _s, ...noKeys } = base;
    const none = await cli(['explain', 'nlp.found-by-stack', '--stack', 'MyFleet'], {
      ...noKeys,
      AWS_SHARED_CREDENTIALS_FILE: join(base.HOME!, 'none'),
      AWS_CONFIG_FILE: join(base.HOME!, 'none'),
    });
    expect(none.code).toBe(1);
    expect(none.stderr.trim().split('\n')).toHaveLength(1);
    expect(none.stderr).toMatch(/no AWS credentials found/);
    expect(none.stderr).toContain('check the AWS credentials');
    expect(none.stderr).not.toMatch(/\n\s+at /);
  });
});
