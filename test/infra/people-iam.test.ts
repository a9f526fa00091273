import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { runSimulation, type Simulation } from '@cloud-copilot/iam-simulate';
import { App } from 'aws-cdk-lib';
import { Template } from 'aws-cdk-lib/assertions';
import { beforeAll, describe, expect, it } from 'vitest';
import { loadConfig, type GpuFleetConfig } from '../../infra/config.ts';
import { GpuFleetStack } from '../../infra/stack.ts';

/**
 * The people's roles, proven on the synthesised template with a real IAM policy evaluator
 * (@cloud-copilot/iam-simulate): the template's intrinsic functions are resolved to the ARNs a
 * deployment in account 123456789012 would have, each role's identity policies are collected, and
 * each request of the matrix is evaluated as IAM would (identity policies, the resource's own
 * policy where it has one: queue policies, the key policy).
 */

const root = fileURLToPath(new URL('../..', import.meta.url));
const ACCOUNT = '123456789012';
const REGION = 'us-east-1';

type Resource = { Type: string; Properties?: Record<string, unknown> };
type TemplateJson = { Resources: Record<string, Resource>; Outputs?: Record<string, unknown> };

function synth(config: GpuFleetConfig): TemplateJson {
  const app = new App({ context: { 'aws:cdk:bundling-stacks': [] } });
  const stack = new GpuFleetStack(app, config.stackName, {
    config,
    env: { region: config.region },
    agentBundleDir: mkdtempSync(join(tmpdir(), 'agent-')),
  });
  return Template.fromStack(stack).toJSON() as TemplateJson;
}

/** The physical ARN (or name) a resource would get: its given name where the template sets one, else its logical id. */
function arnOf(t: TemplateJson, id: string, attr: string): string {
  const r = t.Resources[id];
  if (!r) throw new Error(`no resource ${id}`);
  const p = r.Properties ?? {};
  const name = (key: string) => (typeof p[key] === 'string' ? (p[key] as string) : id.toLowerCase());
  switch (r.Type) {
    case 'AWS::SQS::Queue':
      if (attr === 'QueueName') return name('QueueName');
      return `arn:aws:sqs:${REGION}:${ACCOUNT}:${name('QueueName')}`;
    case 'AWS::DynamoDB::Table':
      return `arn:aws:dynamodb:${REGION}:${ACCOUNT}:table/${id}`;
    case 'AWS::Logs::LogGroup':
      return `arn:aws:logs:${REGION}:${ACCOUNT}:log-group:${name('LogGroupName')}:*`;
    case 'AWS::Lambda::Function':
      return `arn:aws:lambda:${REGION}:${ACCOUNT}:function:${id}`;
    case 'AWS::KMS::Key':
      return `arn:aws:kms:${REGION}:${ACCOUNT}:key/${id}`;
    case 'AWS::S3::Bucket':
      return `arn:aws:s3:::${name('BucketName')}`;
    case 'AWS::IAM::Role':
      return `arn:aws:iam::${ACCOUNT}:role/${name('RoleName')}`;
    case 'AWS::SecretsManager::Secret':
      return `arn:aws:secretsmanager:${REGION}:${ACCOUNT}:secret:${id}-AbCdEf`;
    default:
      return `arn:aws:unknown:${REGION}:${ACCOUNT}:${id}`;
  }
}

/** The template's value with Ref, Fn::GetAtt, Fn::Join and Fn::Select resolved. */
function resolveValue(t: TemplateJson, v: unknown): unknown {
  if (Array.isArray(v)) return v.map((x) => resolveValue(t, x));
  if (!v || typeof v !== 'object') return v;
  const o = v as Record<string, unknown>;
  if ('Ref' in o) {
    const ref = o.Ref as string;
    if (ref === 'AWS::Partition') return 'aws';
    if (ref === 'AWS::Region') return REGION;
    if (ref === 'AWS::AccountId') return ACCOUNT;
    if (ref === 'AWS::URLSuffix') return 'amazonaws.com';
    const r = t.Resources[ref];
    if (r?.Type === 'AWS::SQS::Queue') return `https://sqs.${REGION}.amazonaws.com/${ACCOUNT}/${arnOf(t, ref, 'QueueName')}`;
    if (r?.Type === 'AWS::IAM::Role' || r?.Type === 'AWS::S3::Bucket' || r?.Type === 'AWS::Logs::LogGroup')
      return arnOf(t, ref, 'Arn')
        .split(/[:/]/)
        .at(r.Type === 'AWS::Logs::LogGroup' ? -2 : -1);
    return ref;
  }
  if ('Fn::GetAtt' in o) {
    const [id, attr] = o['Fn::GetAtt'] as [string, string];
    return arnOf(t, id, attr);
  }
  if ('Fn::Join' in o) {
    const [sep, parts] = o['Fn::Join'] as [string, unknown[]];
    return (resolveValue(t, parts) as unknown[]).map(String).join(sep);
  }
  if ('Fn::Select' in o) {
    const [i, list] = o['Fn::Select'] as [number, unknown];
    return (resolveValue(t, list) as unknown[])[i];
  }
  return Object.fromEntries(Object.entries(o).map(([k, x]) => [k, resolveValue(t, x)]));
}

interface Fleet {
  t: TemplateJson;
  roleId: (roleName: string) => string;
  identityPolicies: (roleId: string) => { name: string; policy: unknown }[];
  resourcePolicyOf: (arn: string) => unknown;
  queue: (team: string) => string;
  table: (kind: string) => string;
  fn: (prefix: string) => string;
  key: string;
  jobLogs: string;
  bucket: string;
}

function fleetOf(t: TemplateJson): Fleet {
  const ids = Object.keys(t.Resources);
  const byType = (type: string) => ids.filter((id) => t.Resources[id]!.Type === type);
  const roleId = (roleName: string) => {
    const id = byType('AWS::IAM::Role').find((r) => t.Resources[r]!.Properties?.RoleName === roleName);
    if (!id) throw new Error(`no role named ${roleName}`);
    return id;
  };
  const identityPolicies = (role: string) =>
    byType('AWS::IAM::Policy')
      .filter((p) => ((t.Resources[p]!.Properties!.Roles as { Ref: string }[]) ?? []).some((r) => r.Ref === role))
      .map((p) => ({ name: p, policy: resolveValue(t, t.Resources[p]!.Properties!.PolicyDocument) }));
  const queuePolicies = byType('AWS::SQS::QueuePolicy').map((p) => ({
    queues: (resolveValue(t, t.Resources[p]!.Properties!.Queues) as string[]).map((url) => url.split('/').at(-1)!),
    policy: resolveValue(t, t.Resources[p]!.Properties!.PolicyDocument),
  }));
  const keyId = byType('AWS::KMS::Key')[0]!;
  const key = arnOf(t, keyId, 'Arn');
  const resourcePolicyOf = (arn: string) => {
    if (arn === key) return resolveValue(t, t.Resources[keyId]!.Properties!.KeyPolicy);
    if (arn.startsWith('arn:aws:sqs:')) return queuePolicies.find((q) => q.queues.includes(arn.split(':').at(-1)!))?.policy;
    return undefined;
  };
  const queue = (team: string) => `arn:aws:sqs:${REGION}:${ACCOUNT}:gpufleet-team-${team}`;
  const tableId = (kind: string) =>
    byType('AWS::DynamoDB::Table').find((id) => id.startsWith(`${kind[0]!.toUpperCase()}${kind.slice(1)}Table`))!;
  return {
    t,
    roleId,
    identityPolicies,
    resourcePolicyOf,
    queue,
    table: (kind) => arnOf(t, tableId(kind), 'Arn'),
    fn: (prefix) =>
      arnOf(
        t,
        byType('AWS::Lambda::Function').find((id) => id.startsWith(prefix))!,
        'Arn',
      ),
    key,
    jobLogs: arnOf(
      t,
      byType('AWS::Logs::LogGroup').find((id) => id.startsWith('JobLogs'))!,
      'Arn',
    ),
    bucket: arnOf(
      t,
      byType('AWS::S3::Bucket').find((id) => id.startsWith('Checkpoints'))!,
      'Arn',
    ),
  };
}

type Outcome = 'Allowed' | 'ExplicitlyDenied' | 'ImplicitlyDenied';

async function decide(
  f: Fleet,
  roleName: string,
  action: string,
  resource: string,
  context: Record<string, string> = {},
): Promise<Outcome> {
  const role = f.t.Resources[roleName]?.Type === 'AWS::IAM::Role' ? roleName : f.roleId(roleName);
  const resourcePolicy = f.resourcePolicyOf(resource);
  const simulation: Simulation = {
    request: {
      action,
      principal: `arn:aws:sts::${ACCOUNT}:assumed-role/${roleName}/person`,
      resource: { resource, accountId: resource.startsWith('arn:aws:s3:::') ? ACCOUNT : ACCOUNT },
      contextVariables: { 'aws:SecureTransport': 'true', 'aws:PrincipalArn': `arn:aws:iam::${ACCOUNT}:role/${roleName}`, ...context },
    },
    identityPolicies: f.identityPolicies(role) as Simulation['identityPolicies'],
    serviceControlPolicies: [],
    resourceControlPolicies: [],
    ...(resourcePolicy ? { resourcePolicy: resourcePolicy as Simulation['resourcePolicy'] } : {}),
  };
  const out = await runSimulation(simulation, {});
  if (out.resultType === 'error') throw new Error(`${action} on ${resource}: ${JSON.stringify(out.errors)}`);
  return out.overallResult as Outcome;
}

const allowed = (o: Outcome) => o === 'Allowed';

describe("people's roles in the synthesised template, evaluated as IAM would", () => {
  let keeps: Fleet;
  let sets: Fleet;
  const teams = ['nlp', 'vision', 'research'];

  beforeAll(() => {
    const config = loadConfig(resolve(root, 'infra/config.example.json'));
    keeps = fleetOf(synth(config));
    // The same fleet where vision sets its own budget.
    sets = fleetOf(synth({ ...config, teams: config.teams.map((t) => (t.name === 'vision' ? { ...t, setsOwnBudget: true } : t)) }));
  }, 120_000);

  it('a team role calls the people API (IAM-signed URL only), submits to its own queue and keeps its own secrets; nothing of another team', async () => {
    for (const team of teams) {
      const role = `GpuFleet-team-${team}`;
      const api = keeps.fn('peopleApiFunction');
      expect(await decide(keeps, role, 'lambda:InvokeFunctionUrl', api, { 'lambda:FunctionUrlAuthType': 'AWS_IAM' })).toBe('Allowed');
      expect(allowed(await decide(keeps, role, 'lambda:InvokeFunctionUrl', api, { 'lambda:FunctionUrlAuthType': 'NONE' }))).toBe(false);
      // Never the agents' API: that one acts for machines.
      expect(
        allowed(
          await decide(keeps, role, 'lambda:InvokeFunctionUrl', keeps.fn('agentApiFunction'), { 'lambda:FunctionUrlAuthType': 'AWS_IAM' }),
        ),
      ).toBe(false);
      expect(await decide(keeps, role, 'sqs:SendMessage', keeps.queue(team))).toBe('Allowed');
      expect(await decide(keeps, role, 'kms:GenerateDataKey', keeps.key, { 'kms:ViaService': `sqs.${REGION}.amazonaws.com` })).toBe(
        'Allowed',
      );
      // The key only through SQS: not to decrypt the tables' or the logs' data some other way.
      expect(allowed(await decide(keeps, role, 'kms:Decrypt', keeps.key, { 'kms:ViaService': `dynamodb.${REGION}.amazonaws.com` }))).toBe(
        false,
      );
      expect(await decide(keeps, role, 'ssm:PutParameter', `arn:aws:ssm:${REGION}:${ACCOUNT}:parameter/gpu-fleet/${team}/hf-token`)).toBe(
        'Allowed',
      );
      expect(
        await decide(
          keeps,
          role,
          'secretsmanager:CreateSecret',
          `arn:aws:secretsmanager:${REGION}:${ACCOUNT}:secret:gpu-fleet/${team}/wandb-AbCdEf`,
        ),
      ).toBe('Allowed');
      for (const other of teams.filter((t) => t !== team)) {
        expect(await decide(keeps, role, 'sqs:SendMessage', keeps.queue(other)), `${team} → ${other}'s queue`).toBe('ExplicitlyDenied');
        expect(await decide(keeps, role, 'sqs:TagQueue', keeps.queue(other)), `${team} tags ${other}'s queue`).toBe('ExplicitlyDenied');
        expect(
          allowed(await decide(keeps, role, 'ssm:GetParameter', `arn:aws:ssm:${REGION}:${ACCOUNT}:parameter/gpu-fleet/${other}/hf-token`)),
        ).toBe(false);
        expect(
          allowed(
            await decide(
              keeps,
              role,
              'secretsmanager:PutSecretValue',
              `arn:aws:secretsmanager:${REGION}:${ACCOUNT}:secret:gpu-fleet/${other}/wandb-AbCdEf`,
            ),
          ),
        ).toBe(false);
      }
    }
  });

  it("a team role reads no table, index, output or checkpoint itself: its jobs, spend and logs come only through the API's view", async () => {
    for (const team of teams) {
      const role = `GpuFleet-team-${team}`;
      for (const kind of ['jobs', 'nodes', 'control']) {
        expect(await decide(keeps, role, 'dynamodb:GetItem', keeps.table(kind)), `${team} GetItem ${kind}`).toBe('ExplicitlyDenied');
        expect(await decide(keeps, role, 'dynamodb:UpdateItem', keeps.table(kind)), `${team} UpdateItem ${kind}`).toBe('ExplicitlyDenied');
      }
      expect(await decide(keeps, role, 'dynamodb:Query', `${keeps.table('jobs')}/index/byTeamState`)).toBe('ExplicitlyDenied');
      expect(await decide(keeps, role, 'logs:FilterLogEvents', keeps.jobLogs)).toBe('ExplicitlyDenied');
      expect(await decide(keeps, role, 's3:GetObject', `${keeps.bucket}/checkpoints/${team}.job/1/model.pt`)).toBe('ExplicitlyDenied');
    }
  });

  it('who sets the purse: by default only the admin role tags a team queue; with setsOwnBudget the team tags its own, never another', async () => {
    for (const team of teams) {
      expect(await decide(keeps, `GpuFleet-team-${team}`, 'sqs:TagQueue', keeps.queue(team)), `${team} keeps: own queue`).toBe(
        'ExplicitlyDenied',
      );
      expect(await decide(keeps, 'GpuFleet-admin', 'sqs:TagQueue', keeps.queue(team)), `admin tags ${team}`).toBe('Allowed');
      expect(await decide(sets, 'GpuFleet-admin', 'sqs:TagQueue', sets.queue(team)), `admin tags ${team}`).toBe('Allowed');
    }
    expect(await decide(sets, 'GpuFleet-team-vision', 'sqs:TagQueue', sets.queue('vision'))).toBe('Allowed');
    expect(await decide(sets, 'GpuFleet-team-vision', 'sqs:UntagQueue', sets.queue('vision'))).toBe('Allowed');
    expect(await decide(sets, 'GpuFleet-team-vision', 'sqs:TagQueue', sets.queue('nlp'))).toBe('ExplicitlyDenied');
    expect(await decide(sets, 'GpuFleet-team-nlp', 'sqs:TagQueue', sets.queue('nlp'))).toBe('ExplicitlyDenied');
    expect(await decide(sets, 'GpuFleet-team-nlp', 'sqs:TagQueue', sets.queue('vision'))).toBe('ExplicitlyDenied');
  });

  it("the people API's own role reads what it answers from and writes only a cancel: no tag, no message, no checkpoint", async () => {
    const role = Object.keys(keeps.t.Resources).find((id) => id.startsWith('peopleApiRole'))!;
    expect(await decide(keeps, role, 'dynamodb:Query', `${keeps.table('jobs')}/index/byTeamState`)).toBe('Allowed');
    expect(await decide(keeps, role, 'dynamodb:PutItem', keeps.table('jobs'))).toBe('Allowed');
    expect(await decide(keeps, role, 'logs:FilterLogEvents', keeps.jobLogs)).toBe('Allowed');
    expect(allowed(await decide(keeps, role, 'dynamodb:DeleteItem', keeps.table('jobs')))).toBe(false);
    expect(allowed(await decide(keeps, role, 'dynamodb:PutItem', keeps.table('nodes')))).toBe(false);
    for (const team of teams) {
      expect(allowed(await decide(keeps, role, 'sqs:TagQueue', keeps.queue(team)))).toBe(false);
      expect(allowed(await decide(keeps, role, 'sqs:SendMessage', keeps.queue(team)))).toBe(false);
    }
    expect(allowed(await decide(keeps, role, 's3:GetObject', `${keeps.bucket}/checkpoints/nlp.a/1/model.pt`))).toBe(false);
  });

  it('the admin role calls the people API and sends to any queue; it too reads no table itself', async () => {
    expect(
      await decide(keeps, 'GpuFleet-admin', 'lambda:InvokeFunctionUrl', keeps.fn('peopleApiFunction'), {
        'lambda:FunctionUrlAuthType': 'AWS_IAM',
      }),
    ).toBe('Allowed');
    for (const team of teams) expect(await decide(keeps, 'GpuFleet-admin', 'sqs:SendMessage', keeps.queue(team))).toBe('Allowed');
    expect(allowed(await decide(keeps, 'GpuFleet-admin', 'dynamodb:GetItem', keeps.table('jobs')))).toBe(false);
  });
});
