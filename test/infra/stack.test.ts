import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { promisify } from 'node:util';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { App, Validations } from 'aws-cdk-lib';
import { Match, Template } from 'aws-cdk-lib/assertions';
import { fleetConfigFromEnv } from '../../cloud/env.ts';
import * as sqs from 'aws-cdk-lib/aws-sqs';
import { AwsSolutionsChecks } from 'cdk-nag';
import { beforeAll, describe, expect, it } from 'vitest';
import { ConfigError, loadConfig, parseConfig, type GpuFleetConfig } from '../../infra/config.ts';
import { DATA_VOLUME_DEVICE } from '../../infra/node-setup.ts';
import { GpuFleetStack, LAUNCH_HOOK_NAME, LIFECYCLE_HOOK_NAME, tcpRangesWithout } from '../../infra/stack.ts';
import { AutoScalingClient, DescribeAutoScalingGroupsCommand } from '@aws-sdk/client-auto-scaling';
import { EC2Client } from '@aws-sdk/client-ec2';
import { mockClient } from 'aws-sdk-client-mock';
import { AsgNodeGroups } from '../../cloud/aws/asg-node-groups.ts';
import { VirtualClock } from '../../cloud/sim/clock.ts';
import { plan } from '../../core/planner/planner.ts';
import { aJob, aSnapshot, pricesFor, T0 } from '../builders.ts';

const EXAMPLE = resolve(import.meta.dirname, '../../infra/config.example.json');
const example = (): GpuFleetConfig => loadConfig(EXAMPLE);

/** Synthesises a stack offline, without bundling the functions (the agent bundle is built: it is quick). */
function synth(config: GpuFleetConfig): { stack: GpuFleetStack; template: Template } {
  const { stack } = build(config);
  return { stack, template: Template.fromStack(stack) };
}

/** The app and stack before synthesis, with cdk-nag's AWS Solutions checks as the real app has them. */
function build(config: GpuFleetConfig, options: { nag?: boolean } = {}): { stack: GpuFleetStack; app: App } {
  const app = new App({ context: { 'aws:cdk:bundling-stacks': [] } });
  const stack = new GpuFleetStack(app, config.stackName, {
    config,
    env: { region: config.region },
    agentBundleDir: mkdtempSync(join(tmpdir(), 'agent-bundle-')),
  });
  if (options.nag) Validations.of(app).addPlugins(new AwsSolutionsChecks(app));
  return { stack, app };
}

type Statement = {
  Effect: string;
  Action: string | string[];
  Resource: unknown;
  Condition?: Record<string, Record<string, unknown>>;
  Sid?: string;
};
function statements(template: Template, rolePrefix: string): Statement[] {
  const policies = template.findResources('AWS::IAM::Policy');
  return Object.entries(policies)
    .filter(([id]) => id.startsWith(rolePrefix))
    .flatMap(([, p]) => (p as { Properties: { PolicyDocument: { Statement: Statement[] } } }).Properties.PolicyDocument.Statement);
}
const actionsOf = (s: Statement) => (Array.isArray(s.Action) ? s.Action : [s.Action]);

describe('the CDK stack, synthesised from the example config', () => {
  let t: Template;
  let stack: GpuFleetStack;
  beforeAll(() => {
    ({ template: t, stack } = synth(example()));
  });

  it('routes exactly the cloud events the interruption handler reads', () => {
    const rules = Object.values(t.findResources('AWS::Events::Rule')).map(
      (r) => (r as { Properties: { EventPattern?: unknown; ScheduleExpression?: string } }).Properties,
    );
    const patterns = rules.map((r) => r.EventPattern).filter(Boolean);
    expect(patterns).toEqual(
      expect.arrayContaining([
        { source: ['aws.ec2'], 'detail-type': ['EC2 Spot Instance Interruption Warning', 'EC2 Instance Rebalance Recommendation'] },
        {
          source: ['aws.ec2'],
          'detail-type': ['EC2 Instance State-change Notification'],
          detail: { state: ['stopping', 'stopped', 'shutting-down', 'terminated'] },
        },
        {
          source: ['aws.autoscaling'],
          'detail-type': ['EC2 Instance-terminate Lifecycle Action'],
          detail: {
            AutoScalingGroupName: ['GpuFleet-l4-spot', 'GpuFleet-l4-od', 'GpuFleet-a10g-spot', 'GpuFleet-a100-mig-od'],
            LifecycleHookName: [LIFECYCLE_HOOK_NAME],
          },
        },
        {
          source: ['aws.health'],
          'detail-type': ['AWS Health Event'],
          detail: { service: ['EC2'], eventTypeCategory: ['scheduledChange'] },
        },
        {
          source: ['aws.ec2'],
          'detail-type': [
            'Capacity Block Delivered',
            'Capacity Block Reservation Delivered',
            'Capacity Block Expiration Warning',
            'Capacity Block Reservation Expiration Warning',
            'EC2 Capacity Reservation Instance Interruption Warning',
          ],
        },
      ]),
    );
    expect(patterns).toHaveLength(5);
    expect(rules.map((r) => r.ScheduleExpression).filter(Boolean)).toEqual(['rate(1 minute)']);
    // Every event rule hands failed deliveries to the failure queue after its retries.
    t.allResourcesProperties('AWS::Events::Rule', {
      Targets: [Match.objectLike({ DeadLetterConfig: Match.anyValue(), RetryPolicy: Match.anyValue() })],
    });
  });

  it('encrypts every table, queue and bucket, with TLS enforced and point-in-time recovery on', () => {
    const tables = Object.values(t.findResources('AWS::DynamoDB::Table')) as { Properties: Record<string, unknown> }[];
    expect(tables).toHaveLength(4);
    for (const table of tables) {
      expect(table.Properties).toMatchObject({
        BillingMode: 'PAY_PER_REQUEST',
        PointInTimeRecoverySpecification: { PointInTimeRecoveryEnabled: true },
        SSESpecification: { SSEEnabled: true, SSEType: 'KMS' },
      });
    }
    t.hasResourceProperties('AWS::DynamoDB::Table', {
      TimeToLiveSpecification: { AttributeName: 'expiresAt', Enabled: true },
      GlobalSecondaryIndexes: Match.arrayWith([Match.objectLike({ IndexName: 'byState' }), Match.objectLike({ IndexName: 'byTeamState' })]),
    });
    const queues = Object.values(t.findResources('AWS::SQS::Queue')) as { Properties: Record<string, unknown> }[];
    expect(queues).toHaveLength(3 + 2); // three teams, dead letters, function failures
    for (const q of queues) expect(q.Properties.KmsMasterKeyId !== undefined || q.Properties.SqsManagedSseEnabled === true).toBe(true);
    for (const policy of Object.values(t.findResources('AWS::SQS::QueuePolicy')) as {
      Properties: { PolicyDocument: { Statement: Statement[] } };
    }[]) {
      expect(policy.Properties.PolicyDocument.Statement).toEqual(
        expect.arrayContaining([expect.objectContaining({ Effect: 'Deny', Condition: { Bool: { 'aws:SecureTransport': 'false' } } })]),
      );
    }
    t.hasResourceProperties('AWS::S3::Bucket', {
      BucketEncryption: {
        ServerSideEncryptionConfiguration: [
          { ServerSideEncryptionByDefault: { SSEAlgorithm: 'aws:kms', KMSMasterKeyID: Match.anyValue() }, BucketKeyEnabled: true },
        ],
      },
      PublicAccessBlockConfiguration: {
        BlockPublicAcls: true,
        BlockPublicPolicy: true,
        IgnorePublicAcls: true,
        RestrictPublicBuckets: true,
      },
      // No checkpoint expires by age (a live job's newest is kept however old): only torn multipart uploads are aborted.
      LifecycleConfiguration: {
        Rules: [Match.objectLike({ Id: 'abort-incomplete-uploads', AbortIncompleteMultipartUpload: { DaysAfterInitiation: 2 } })],
      },
    });
    // The retention the index derives: reconcile sweeps the checkpoints with the configured days, and may delete under checkpoints/ only.
    const reconcileFn = Object.values(t.findResources('AWS::Lambda::Function')).find(
      (f) => JSON.stringify(f).includes('GPU_FLEET_RECONCILE_INTERVAL_SEC') && !JSON.stringify(f).includes('GPU_FLEET_AGENT_ROLE_NAME'),
    ) as { Properties: { Environment: { Variables: Record<string, unknown> } } };
    expect(reconcileFn.Properties.Environment.Variables.GPU_FLEET_CHECKPOINT_RETENTION_DAYS).toBe('30');
    const deletes = Object.values(t.findResources('AWS::IAM::Policy'))
      .flatMap(
        (p) =>
          (p as { Properties: { PolicyDocument: { Statement: { Sid?: string; Action: unknown; Resource: unknown }[] } } }).Properties
            .PolicyDocument.Statement,
      )
      .filter((st) => JSON.stringify(st.Action).includes('s3:DeleteObject'));
    expect(deletes.map((st) => st.Sid)).toEqual(['SweepCheckpoints']);
    expect(JSON.stringify(deletes[0]!.Resource)).toContain('/checkpoints/*');
    t.hasResourceProperties('AWS::KMS::Key', { EnableKeyRotation: true });
  });

  it('gives each team an encrypted queue with a dead-letter queue and its budget tags', () => {
    const nlp = Object.values(t.findResources('AWS::SQS::Queue', { Properties: { QueueName: 'gpufleet-team-nlp' } }))[0] as {
      Properties: { RedrivePolicy: unknown; KmsMasterKeyId: unknown; Tags: { Key: string; Value: string }[] };
    };
    expect(nlp.Properties.RedrivePolicy).toMatchObject({ maxReceiveCount: 5 });
    expect(nlp.Properties.KmsMasterKeyId).toBeDefined();
    expect(Object.fromEntries(nlp.Properties.Tags.map((x) => [x.Key, x.Value]))).toEqual({
      'gpu-fleet:team': 'nlp',
      'gpu-fleet:budget-usd': '25000',
      'gpu-fleet:budget-period': 'monthly',
      'gpu-fleet:budget-action': 'spot-only',
      'gpu-fleet:budget-alert-at': '50/80/100',
      'gpu-fleet:max-gpus': '64',
      'gpu-fleet:weight': '2',
    });
    // The intake function takes every team queue, with partial batch responses.
    expect(Object.values(t.findResources('AWS::Lambda::EventSourceMapping'))).toHaveLength(3);
    t.allResourcesProperties('AWS::Lambda::EventSourceMapping', { FunctionResponseTypes: ['ReportBatchItemFailures'] });
  });

  it('runs the functions on Node.js 22, arm64, with reconcile alone at a time and failures kept', () => {
    const fns = Object.values(t.findResources('AWS::Lambda::Function'))
      .map((f) => (f as { Properties: Record<string, unknown> }).Properties)
      .filter((p) =>
        String((p.Environment as { Variables?: Record<string, string> } | undefined)?.Variables?.POWERTOOLS_SERVICE_NAME ?? '').startsWith(
          'gpu-fleet-',
        ),
      );
    expect(fns).toHaveLength(5); // reconcile, intake, interruption, the agent API, the people API
    for (const f of fns) expect(f).toMatchObject({ Runtime: 'nodejs22.x', Architectures: ['arm64'], TracingConfig: { Mode: 'Active' } });
    t.hasResourceProperties('AWS::Lambda::Function', {
      Environment: { Variables: Match.objectLike({ POWERTOOLS_SERVICE_NAME: 'gpu-fleet-reconcile' }) },
      ReservedConcurrentExecutions: 1,
      Timeout: 60,
    });
    const configs = Object.values(t.findResources('AWS::Lambda::EventInvokeConfig')) as {
      Properties: { DestinationConfig?: { OnFailure?: unknown } };
    }[];
    expect(configs.filter((c) => c.Properties.DestinationConfig?.OnFailure)).toHaveLength(2); // reconcile and interruption
  });

  it('builds node groups with IMDSv2 only, encrypted disks, spot price-capacity-optimized and capacity rebalance', () => {
    t.hasResourceProperties('AWS::EC2::LaunchTemplate', {
      LaunchTemplateData: Match.objectLike({
        MetadataOptions: { HttpTokens: 'required', HttpPutResponseHopLimit: 1, InstanceMetadataTags: 'enabled' },
        BlockDeviceMappings: [
          { DeviceName: '/dev/xvda', Ebs: { Encrypted: true, VolumeSize: 200, VolumeType: 'gp3', DeleteOnTermination: true } },
        ],
        Monitoring: { Enabled: true },
      }),
    });
    t.hasResourceProperties('AWS::AutoScaling::AutoScalingGroup', {
      AutoScalingGroupName: 'GpuFleet-l4-spot',
      MinSize: '0',
      MaxSize: '40',
      CapacityRebalance: true,
      MixedInstancesPolicy: {
        InstancesDistribution: {
          OnDemandBaseCapacity: 0,
          OnDemandPercentageAboveBaseCapacity: 0,
          SpotAllocationStrategy: 'price-capacity-optimized',
        },
        LaunchTemplate: {
          LaunchTemplateSpecification: Match.anyValue(),
          Overrides: [{ InstanceType: 'g6.xlarge' }, { InstanceType: 'g6.2xlarge' }, { InstanceType: 'g6.4xlarge' }],
        },
      },
      Tags: Match.arrayWith([
        { Key: 'gpu-fleet:capacity-type', PropagateAtLaunch: true, Value: 'spot' },
        { Key: 'gpu-fleet:managed', PropagateAtLaunch: true, Value: 'true' },
      ]),
    });
    t.hasResourceProperties('AWS::AutoScaling::AutoScalingGroup', {
      AutoScalingGroupName: 'GpuFleet-a100-mig-od',
      MixedInstancesPolicy: { InstancesDistribution: Match.objectLike({ OnDemandPercentageAboveBaseCapacity: 100 }) },
      Tags: Match.arrayWith([{ Key: 'gpu-fleet:mig', PropagateAtLaunch: true, Value: 'true' }]),
    });
    // Reconcile owns the desired size: a deploy never sets it.
    for (const g of Object.values(t.findResources('AWS::AutoScaling::AutoScalingGroup')) as { Properties: Record<string, unknown> }[])
      expect(g.Properties.DesiredCapacity).toBeUndefined();
    t.resourcePropertiesCountIs(
      'AWS::AutoScaling::LifecycleHook',
      {
        LifecycleHookName: LIFECYCLE_HOOK_NAME,
        LifecycleTransition: 'autoscaling:EC2_INSTANCE_TERMINATING',
        HeartbeatTimeout: 300,
        DefaultResult: 'CONTINUE',
      },
      4,
    );
  });

  it("boots nodes with the agent as a systemd service of its own user, configured with the agent API and the stack's bucket", () => {
    const lt = Object.values(t.findResources('AWS::EC2::LaunchTemplate'))[0] as {
      Properties: { LaunchTemplateData: { UserData: unknown } };
    };
    const userData = JSON.stringify(lt.Properties.LaunchTemplateData.UserData);
    expect(userData).toContain('gpu-fleet-agent.mjs agent run --runner docker');
    expect(userData).toContain('systemctl enable --now gpu-fleet-agent.service');
    // Not root: a user of its own, in the docker group, with sudo for MIG and the folder helper only.
    expect(userData).toContain('User=gpu-fleet');
    expect(userData).toContain('SupplementaryGroups=docker');
    expect(userData).toContain('--sudo-helper /usr/local/sbin/gpu-fleet-clean-job-dir');
    expect(userData).toContain('visudo -cf /etc/sudoers.d/gpu-fleet-agent');
    // The agent API's URL, from the stack's function URL; no table names (the machine writes no table).
    expect(userData).toContain('GPU_FLEET_AGENT_API_URL=');
    expect(userData).toMatch(/"Fn::GetAtt":\["agentApiFunction\w*","FunctionUrl"\]/);
    expect(userData).not.toContain('GPU_FLEET_JOBS_TABLE=');
    expect(userData).not.toContain('GPU_FLEET_NODES_TABLE=');
    expect(userData).toContain('GPU_FLEET_CHECKPOINT_BUCKET=');
    // The AMI comes from the Deep Learning AMI's public SSM parameter, resolved at deploy time.
    expect(JSON.stringify(t.toJSON().Parameters)).toContain(
      '/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-amazon-linux-2023/latest/ami-id',
    );
  });

  it('never grants a wildcard action, and a wildcard resource only to calls that take no resource', () => {
    const all = Object.values(t.findResources('AWS::IAM::Policy')).flatMap(
      (p) => (p as { Properties: { PolicyDocument: { Statement: Statement[] } } }).Properties.PolicyDocument.Statement,
    );
    // A wildcard in a Deny only takes more away (the team roles' "no table, ever"); every Allow names its actions.
    for (const s of all.filter((x) => x.Effect !== 'Deny')) for (const a of actionsOf(s)) expect(a, JSON.stringify(s)).not.toMatch(/\*/);
    const noResourceLevel =
      /^(autoscaling:Describe|ec2:Describe|ec2:GetSpotPlacementScores$|tag:GetResources$|cloudwatch:GetMetricData$|cloudwatch:PutMetricData$|sqs:ListQueues$|ecr:GetAuthorizationToken$|xray:)/;
    for (const s of all.filter((x) => x.Resource === '*' && x.Effect !== 'Deny'))
      for (const a of actionsOf(s)) expect(a, JSON.stringify(s)).toMatch(noResourceLevel);
    // The agent publishes metrics only under gpu-fleet's namespace.
    const put = statements(t, 'AgentRole').find((s) => actionsOf(s).includes('cloudwatch:PutMetricData'))!;
    expect(put.Condition).toEqual({ StringEquals: { 'cloudwatch:namespace': 'GpuFleet' } });
  });

  it('lets reconcile read Spot Placement Scores (zone ids mapped to names) for the spot pools\u2019 prior; the agent may not', () => {
    const reads = (role: string) => statements(t, role).some((x) => actionsOf(x).includes('ec2:GetSpotPlacementScores'));
    expect(reads('reconcileRole')).toBe(true);
    expect(statements(t, 'reconcileRole').some((x) => actionsOf(x).includes('ec2:DescribeAvailabilityZones'))).toBe(true);
    expect(reads('AgentRole')).toBe(false);
  });

  it('attaches no administrator or broad managed policy, and grants no IAM, KMS-admin or cross-account powers', () => {
    const roles = Object.values(t.findResources('AWS::IAM::Role')) as { Properties: { ManagedPolicyArns?: unknown[] } }[];
    const managed = roles.flatMap((r) => (r.Properties.ManagedPolicyArns ?? []).map((a) => JSON.stringify(a)));
    for (const m of managed) expect(m).not.toMatch(/AdministratorAccess|PowerUserAccess|IAMFullAccess|FullAccess/);
    const all = Object.values(t.findResources('AWS::IAM::Policy')).flatMap(
      (p) => (p as { Properties: { PolicyDocument: { Statement: Statement[] } } }).Properties.PolicyDocument.Statement,
    );
    const actions = all.flatMap(actionsOf);
    expect(
      actions.filter((a) =>
        /^(iam|organizations|sts:AssumeRole$|kms:(Create|Delete|Put|Schedule|Disable)|s3:(PutBucketPolicy|DeleteBucket)|dynamodb:(DeleteTable|CreateTable))/.test(
          a,
        ),
      ),
    ).toEqual([]);
    // Every Allow names its resources (no "NotResource"/"NotAction" escape hatches).
    for (const st of all) expect(Object.keys(st), JSON.stringify(st)).not.toEqual(expect.arrayContaining(['NotAction']));
    for (const st of all) expect(Object.keys(st), JSON.stringify(st)).not.toEqual(expect.arrayContaining(['NotResource']));
  });

  it('conditions every mutating Auto Scaling call on the gpu-fleet:managed tag', () => {
    const mutating = /^autoscaling:(SetDesiredCapacity|TerminateInstanceInAutoScalingGroup|SetInstanceProtection|CompleteLifecycleAction)$/;
    const all = [
      ...statements(t, 'reconcileRole'),
      ...statements(t, 'interruptionRole'),
      ...statements(t, 'intakeRole'),
      ...statements(t, 'AgentRole'),
    ];
    const touching = all.filter((s) => actionsOf(s).some((a) => mutating.test(a)));
    expect(touching.length).toBeGreaterThanOrEqual(2);
    for (const s of touching) {
      expect(s.Condition).toEqual({ StringEquals: { 'aws:ResourceTag/gpu-fleet:managed': 'true' } });
      expect(JSON.stringify(s.Resource)).toContain('autoScalingGroupName/GpuFleet-');
    }
    // Intake and the agent cannot scale anything; intake may only list the groups (to say at once when none can hold a job).
    expect(
      statements(t, 'AgentRole')
        .flatMap(actionsOf)
        .filter((a) => a.startsWith('autoscaling:')),
    ).toEqual([]);
    expect(
      statements(t, 'intakeRole')
        .flatMap(actionsOf)
        .filter((a) => a.startsWith('autoscaling:')),
    ).toEqual(['autoscaling:DescribeAutoScalingGroups']);
  });

  it('gives the agent no table, no checkpoint object and no key: only the agent API (through its URL), its metrics, its bundle and image pulls', () => {
    const agent = statements(t, 'AgentRole');
    expect(agent.flatMap(actionsOf).sort()).toEqual(
      [
        'cloudwatch:PutMetricData',
        'ecr:BatchCheckLayerAvailability',
        'ecr:BatchGetImage',
        'ecr:GetAuthorizationToken',
        'ecr:GetDownloadUrlForLayer',
        'lambda:InvokeFunction',
        'lambda:InvokeFunctionUrl',
        's3:GetObject',
      ].sort(),
    );
    // Its metrics only in the agents' namespace: replicas' load figures (another namespace) go through the agent API.
    expect(agent.find((s) => actionsOf(s).includes('cloudwatch:PutMetricData'))!.Condition).toEqual({
      StringEquals: { 'cloudwatch:namespace': 'GpuFleet' },
    });
    // Image pulls from the ECR repositories the config names only (the example: ml/*), and none without them.
    expect(agent.find((s) => s.Sid === 'EcrPull')!.Resource).toEqual({
      'Fn::Join': ['', ['arn:', { Ref: 'AWS::Partition' }, ':ecr:us-east-1:', { Ref: 'AWS::AccountId' }, ':repository/ml/*']],
    });
    const raw = JSON.parse(readFileSync(EXAMPLE, 'utf8')) as Record<string, unknown>;
    const { ecrRepositories: _all, ...noEcr } = raw;
    const none = statements(synth(parseConfig(noEcr)).template, 'AgentRole').flatMap(actionsOf);
    expect(none.filter((a) => a.startsWith('ecr:'))).toEqual([]);
    expect(() => parseConfig({ ...raw, ecrRepositories: ['ML/*', 'a/../b', 'ml/train*'] })).toThrow(
      /ecrRepositories\[0\]: must be an ECR repository name.*got "ML\/\*".*ecrRepositories\[1\].*ecrRepositories\[2\]/s,
    );
    const apiFn = Object.keys(t.findResources('AWS::Lambda::Function')).find((id) => id.startsWith('agentApiFunction'))!;
    const onApi = { 'Fn::GetAtt': [apiFn, 'Arn'] };
    // Only through the function URL with IAM auth: a direct Invoke (with an event naming any caller) is not allowed.
    expect(agent.find((s) => actionsOf(s).includes('lambda:InvokeFunctionUrl'))).toMatchObject({
      Resource: onApi,
      Condition: { StringEquals: { 'lambda:FunctionUrlAuthType': 'AWS_IAM' } },
    });
    expect(agent.find((s) => actionsOf(s).includes('lambda:InvokeFunction'))).toMatchObject({
      Resource: onApi,
      Condition: { Bool: { 'lambda:InvokedViaFunctionUrl': true } },
    });
    // The one S3 object it reads is its bundle, in the asset bucket, not the checkpoint bucket.
    const bucketId = Object.keys(t.findResources('AWS::S3::Bucket')).find((id) => id.startsWith('Checkpoints'))!;
    expect(JSON.stringify(agent.find((s) => actionsOf(s).includes('s3:GetObject'))!.Resource)).not.toContain(bucketId);
    t.hasResourceProperties('AWS::Lambda::Url', { AuthType: 'AWS_IAM', TargetFunctionArn: onApi });
    // The API knows which role's sessions are machines.
    t.hasResourceProperties('AWS::Lambda::Function', {
      Environment: {
        Variables: Match.objectLike({ POWERTOOLS_SERVICE_NAME: 'gpu-fleet-agentApi', GPU_FLEET_AGENT_ROLE_NAME: Match.anyValue() }),
      },
    });
  });

  it("keeps the key of the attempts' credentials in a random secret that the agent API alone reads", () => {
    const secrets = Object.entries(t.findResources('AWS::SecretsManager::Secret')).filter(([id]) => id.startsWith('AttemptCredentialKey'));
    expect(secrets).toHaveLength(1);
    const [secretId, secret] = secrets[0]! as [string, { Properties: { GenerateSecretString: { PasswordLength: number } } }];
    expect(secret.Properties.GenerateSecretString.PasswordLength).toBeGreaterThanOrEqual(32);
    t.hasResourceProperties('AWS::Lambda::Function', {
      Environment: {
        Variables: Match.objectLike({ POWERTOOLS_SERVICE_NAME: 'gpu-fleet-agentApi', GPU_FLEET_ATTEMPT_KEY_SECRET: { Ref: secretId } }),
      },
    });
    // Which roles may read it: the agent API's only (never the machines', whose sessions a job could take).
    const readers = Object.entries(t.findResources('AWS::IAM::Policy'))
      .filter(([, p]) => JSON.stringify(p).includes(secretId) && JSON.stringify(p).includes('secretsmanager:GetSecretValue'))
      .map(([id]) => id);
    expect(readers.length).toBeGreaterThan(0);
    for (const id of readers) expect(id).toMatch(/^agentApi/);
  });

  it('lets the agent API write only the tables, keys and prefix an agent’s calls need', () => {
    const api = statements(t, 'agentApiRole');
    const control = api.find((s) => s.Sid === 'CheckpointIndexOnly')!;
    expect(control.Condition).toEqual({ 'ForAllValues:StringEquals': { 'dynamodb:LeadingKeys': ['ckpt', 'ckpt-parts'] } });
    const tableOf = (prefix: string) => ({
      'Fn::GetAtt': [Object.keys(t.findResources('AWS::DynamoDB::Table')).find((id) => id.startsWith(prefix))!, 'Arn'],
    });
    expect(api.find((s) => s.Sid === 'JobsOfTheCallingNode')).toMatchObject({
      Action: ['dynamodb:GetItem', 'dynamodb:PutItem'],
      Resource: tableOf('Jobs'),
    });
    expect(api.find((s) => s.Sid === 'TheCallingNodesRecord')).toMatchObject({
      Action: ['dynamodb:GetItem', 'dynamodb:UpdateItem'],
      Resource: tableOf('Nodes'),
    });
    const objects = api.find((s) => s.Sid === 'CheckpointObjects')!;
    expect(JSON.stringify(objects.Resource)).toContain('/checkpoints/*');
    expect(
      api
        .flatMap(actionsOf)
        .filter((a) => /^(dynamodb|s3):/.test(a))
        .sort(),
    ).toEqual(
      [
        'dynamodb:GetItem',
        'dynamodb:GetItem',
        'dynamodb:GetItem',
        'dynamodb:PutItem',
        'dynamodb:PutItem',
        'dynamodb:UpdateItem',
        'dynamodb:UpdateItem',
        's3:AbortMultipartUpload',
        's3:GetObject',
        's3:ListBucket',
        's3:PutObject',
      ].sort(),
    );
  });

  it('pairs no teams on host-network machines unless the config says so', () => {
    expect(JSON.stringify(t.toJSON())).not.toContain('GPU_FLEET_HOST_NETWORK_SHARING');
  });

  it("raises alarms for dead letters, failing or silent reconciles, and each team's budget thresholds", () => {
    const alarms = Object.values(t.findResources('AWS::CloudWatch::Alarm')).map(
      (a) => (a as { Properties: { AlarmDescription: string; Threshold: number } }).Properties,
    );
    expect(alarms.some((a) => /dead-letter queue/.test(a.AlarmDescription))).toBe(true);
    expect(alarms.some((a) => /^Reconcile has failed/.test(a.AlarmDescription))).toBe(true);
    expect(alarms.some((a) => /^Reconcile has not run/.test(a.AlarmDescription))).toBe(true);
    expect(alarms.some((a) => /stored GPU report cannot be read/.test(a.AlarmDescription))).toBe(true);
    const budget = alarms.filter((a) => /^Team /.test(a.AlarmDescription));
    // nlp 50/80/100, vision 80/100, research the default 80/100.
    expect(budget.map((a) => a.Threshold).sort((x, y) => x - y)).toEqual([50, 80, 80, 80, 100, 100, 100]);
  });

  it('draws a dashboard of queues, fleet, GPU use, spend, interruptions and reconcile health', () => {
    const body = JSON.stringify(
      t.toJSON().Resources[Object.keys(t.findResources('AWS::CloudWatch::Dashboard'))[0]!].Properties.DashboardBody,
    );
    for (const title of [
      'Queue depth per team',
      'Fleet size by node group and capacity type',
      'GPU utilisation by node group',
      'Spend against budget, per team',
      'Interruptions and requeues',
      'Reconcile duration',
      'Reconcile errors',
    ])
      expect(body).toContain(title);
    expect(stack.dashboard).toBeDefined();
  });
});

describe('cdk-nag', () => {
  it('finds nothing unacknowledged in the example stack, and every acknowledgement has a reason', () => {
    const { app, stack } = build(example(), { nag: true });
    expect(() => app.synth()).not.toThrow();
    const acks = stack.node
      .findAll()
      .flatMap((c) =>
        c.node.metadata
          .filter((m) => m.type === Validations.ACKNOWLEDGED_RULES_METADATA_KEY)
          .flatMap((m) => Object.entries(m.data as Record<string, string>)),
      );
    const nag = acks.filter(([id]) => id.startsWith('AwsSolutions::'));
    expect(nag.length).toBeGreaterThan(5);
    for (const [id, reason] of nag) expect(reason.length, id).toBeGreaterThan(40);
    expect(nag.map(([id]) => id.replace(/\[.*$/, ''))).toEqual(
      expect.arrayContaining(['AwsSolutions::AwsSolutions-IAM5', 'AwsSolutions::AwsSolutions-L1', 'AwsSolutions::AwsSolutions-AS3']),
    );
  });

  it('with reserved groups: the launch template names the reservation (and the capacity-block market for a block), reconcile reads reservations, the events reach the interruption handler; cdk-nag clean', () => {
    const raw = JSON.parse(readFileSync(EXAMPLE, 'utf8')) as { nodeGroups: Record<string, unknown>[] } & Record<string, unknown>;
    const zone = (raw.nodeGroups[0]!.zones as string[])[0]!;
    const reserved = [
      {
        name: 'p4d-odcr',
        instanceTypes: ['p4d.24xlarge'],
        capacityType: 'reserved',
        reservation: { id: 'cr-0a1b2c3d4e5f60718' },
        zones: [zone],
        maxSize: 4,
      },
      {
        name: 'p5-block',
        instanceTypes: ['p5.48xlarge'],
        capacityType: 'reserved',
        reservation: { id: 'cr-0b10c0000000000a1', kind: 'capacity-block' },
        zones: [zone],
        maxSize: 2,
      },
    ];
    const config = parseConfig({
      ...raw,
      nodeGroups: [...raw.nodeGroups, ...reserved],
      reservations: { selector: [{ tags: { 'gpu-fleet:managed': 'true' } }, { id: 'cr-0c0ffee0000000001' }] },
      discounts: [{ family: 'p4d', discountPct: 40, commitmentUsdPerHour: 30, name: 'sp-1' }],
    });
    const { app, stack } = build(config, { nag: true });
    expect(() => app.synth()).not.toThrow();
    const template = Template.fromStack(stack);
    const templates = Object.values(template.findResources('AWS::EC2::LaunchTemplate')) as {
      Properties: { LaunchTemplateData: Record<string, unknown> };
    }[];
    const targeting = (id: string) =>
      templates.find(
        (t) =>
          (
            t.Properties.LaunchTemplateData.CapacityReservationSpecification as {
              CapacityReservationTarget?: { CapacityReservationId?: string };
            }
          )?.CapacityReservationTarget?.CapacityReservationId === id,
      )?.Properties.LaunchTemplateData;
    expect(targeting('cr-0a1b2c3d4e5f60718')).toMatchObject({ InstanceType: 'p4d.24xlarge' });
    expect(targeting('cr-0a1b2c3d4e5f60718')!.InstanceMarketOptions).toBeUndefined();
    expect(targeting('cr-0b10c0000000000a1')).toMatchObject({
      InstanceType: 'p5.48xlarge',
      InstanceMarketOptions: { MarketType: 'capacity-block' },
    });
    // The groups are tagged with their capacity type and reservation, which is what the provider reads.
    const groups = Object.values(template.findResources('AWS::AutoScaling::AutoScalingGroup')) as {
      Properties: { Tags: { Key: string; Value: string }[]; MixedInstancesPolicy?: unknown };
    }[];
    const block = groups.find((g) =>
      g.Properties.Tags.some((t) => t.Key === 'gpu-fleet:reservation' && t.Value === 'cr-0b10c0000000000a1'),
    )!;
    expect(block.Properties.Tags).toEqual(
      expect.arrayContaining([expect.objectContaining({ Key: 'gpu-fleet:capacity-type', Value: 'reserved' })]),
    );
    expect(block.Properties.MixedInstancesPolicy).toBeUndefined();
    const reconcile = statements(template, 'reconcileRole');
    expect(reconcile.some((x) => actionsOf(x).includes('ec2:DescribeCapacityReservations'))).toBe(true);
    expect(JSON.stringify(template.findResources('AWS::CloudWatch::Dashboard'))).toMatch(/ReservationInstancesUsed/);
    const fns = Object.values(template.findResources('AWS::Lambda::Function')) as {
      Properties: { Environment?: { Variables?: Record<string, unknown> } };
    }[];
    const selector = fns.map((f) => f.Properties.Environment?.Variables?.GPU_FLEET_RESERVATION_SELECTOR).filter((v) => v !== undefined);
    expect(selector.map((v) => JSON.parse(v as string))).toEqual([
      [{ tags: { 'gpu-fleet:managed': 'true' } }, { id: 'cr-0c0ffee0000000001' }],
    ]);
    const discounts = fns.map((f) => f.Properties.Environment?.Variables?.GPU_FLEET_DISCOUNTS).filter((v) => v !== undefined);
    // What reconcile reads back is the plan as declared.
    expect(fleetConfigFromEnv({ GPU_FLEET_DISCOUNTS: discounts[0] as string }).discounts).toEqual([
      { family: 'p4d', discountBps: 4000, commitmentMicroUsdPerHour: 30_000_000, name: 'sp-1' },
    ]);
    const rules = Object.values(template.findResources('AWS::Events::Rule')) as {
      Properties: { EventPattern?: { 'detail-type'?: string[] } };
    }[];
    const types = rules.flatMap((r) => r.Properties.EventPattern?.['detail-type'] ?? []);
    for (const t of [
      'Capacity Block Delivered',
      'Capacity Block Reservation Delivered',
      'Capacity Block Expiration Warning',
      'Capacity Block Reservation Expiration Warning',
      'EC2 Capacity Reservation Instance Interruption Warning',
    ])
      expect(types).toContain(t);
    // A reserved group names its reservation, has one type and one zone.
    const bad = () =>
      parseConfig({ ...raw, nodeGroups: [{ ...reserved[0], reservation: undefined, instanceTypes: ['p4d.24xlarge', 'p5.48xlarge'] }] });
    expect(bad).toThrow(/a reserved group names the reservation it launches into/);
    expect(bad).toThrow(/a reserved group has one instance type/);
  });

  it('with a warm pool on an on-demand group of one type: its template names the type, no mixed instances, the pool an absolute size; refused on spot and mixed groups with the API’s reason; cdk-nag clean', () => {
    const raw = JSON.parse(readFileSync(EXAMPLE, 'utf8')) as { nodeGroups: Record<string, unknown>[] } & Record<string, unknown>;
    const warm = { name: 'l4-serve-od', instanceTypes: ['g6.xlarge'], capacityType: 'on-demand', zones: ['us-east-1a'], maxSize: 6 };
    // This group's machines also keep Docker's data and the job folders' disks on a volume of their own.
    const config = parseConfig({ ...raw, nodeGroups: [...raw.nodeGroups, { ...warm, warmPool: { size: 2 }, dataDiskGiB: 400 }] });
    expect(config.nodeGroups.at(-1)!.warmPool).toEqual({ size: 2, state: 'Stopped' });
    const { app, stack } = build(config, { nag: true });
    expect(() => app.synth()).not.toThrow();
    const template = Template.fromStack(stack);
    const pools = Object.values(template.findResources('AWS::AutoScaling::WarmPool')) as { Properties: Record<string, unknown> }[];
    expect(pools).toHaveLength(1);
    expect(pools[0]!.Properties).toMatchObject({ MinSize: 2, MaxGroupPreparedCapacity: 2, PoolState: 'Stopped' });
    const groups = Object.values(template.findResources('AWS::AutoScaling::AutoScalingGroup')) as {
      Properties: { AutoScalingGroupName?: string; MixedInstancesPolicy?: unknown; LaunchTemplate?: unknown };
    }[];
    const group = groups.find((g) => JSON.stringify(g.Properties.AutoScalingGroupName).includes('l4-serve-od'))!;
    expect(group.Properties.MixedInstancesPolicy).toBeUndefined();
    expect(group.Properties.LaunchTemplate).toBeDefined();
    // The pool's machines are prepared (images pulled) in a launch hook their agent lets go; the groups without a pool have none.
    const hooks = Object.values(template.findResources('AWS::AutoScaling::LifecycleHook')) as {
      Properties: { LifecycleHookName: string; LifecycleTransition: string; DefaultResult: string; HeartbeatTimeout: number };
    }[];
    const launchHooks = hooks.filter((h) => h.Properties.LifecycleTransition === 'autoscaling:EC2_INSTANCE_LAUNCHING');
    expect(launchHooks).toHaveLength(1);
    expect(launchHooks[0]!.Properties).toMatchObject({
      LifecycleHookName: LAUNCH_HOOK_NAME,
      DefaultResult: 'CONTINUE',
      HeartbeatTimeout: 900,
    });
    const userData = (Object.values(template.findResources('AWS::EC2::LaunchTemplate')) as unknown[]).map((t) => JSON.stringify(t));
    expect(userData.filter((u) => u.includes(`GPU_FLEET_LAUNCH_HOOK=${LAUNCH_HOOK_NAME}`))).toHaveLength(1);
    const volumes = (
      Object.values(template.findResources('AWS::EC2::LaunchTemplate')) as {
        Properties: { LaunchTemplateData: { BlockDeviceMappings: { DeviceName: string; Ebs: Record<string, unknown> }[] } };
      }[]
    ).map((t) => t.Properties.LaunchTemplateData.BlockDeviceMappings);
    expect(volumes.filter((v) => v.length === 2)).toEqual([
      [
        { DeviceName: '/dev/xvda', Ebs: { Encrypted: true, VolumeSize: 200, VolumeType: 'gp3', DeleteOnTermination: true } },
        { DeviceName: DATA_VOLUME_DEVICE, Ebs: { Encrypted: true, VolumeSize: 400, VolumeType: 'gp3', DeleteOnTermination: true } },
      ],
    ]);
    expect(volumes.filter((v) => v.length === 1)).toHaveLength(raw.nodeGroups.length); // the others: the root volume only
    const agentApi = Object.values(template.findResources('AWS::Lambda::Function')).find((f) =>
      JSON.stringify(f).includes('GPU_FLEET_AGENT_ROLE_NAME'),
    ) as { Properties: { Environment: { Variables: Record<string, unknown> } } };
    expect(agentApi.Properties.Environment.Variables.GPU_FLEET_LAUNCH_HOOK).toBe(LAUNCH_HOOK_NAME);
    const policies = JSON.stringify(template.findResources('AWS::IAM::Policy'));
    expect(policies).toContain('"Sid":"LetPreparedMachinesLaunch"');
    // Hibernated: the template is configured for it.
    const hib = parseConfig({ ...raw, nodeGroups: [...raw.nodeGroups, { ...warm, warmPool: { size: 1, state: 'Hibernated' } }] });
    const hibTemplate = Template.fromStack(build(hib).stack);
    expect(JSON.stringify(hibTemplate.findResources('AWS::EC2::LaunchTemplate'))).toContain('"HibernationOptions":{"Configured":true}');
    // Refused where the API refuses it, saying why.
    const refused = (group: Record<string, unknown>) => () => parseConfig({ ...raw, nodeGroups: [...raw.nodeGroups, group] });
    expect(refused({ ...warm, capacityType: 'spot', warmPool: { size: 1 } })).toThrow(
      /warmPool: a warm pool is for an on-demand group of one instance type, and this group cannot have one: it requests Spot Instances/,
    );
    expect(refused({ ...warm, instanceTypes: ['g6.xlarge', 'g6.2xlarge'], warmPool: { size: 1 } })).toThrow(
      /its 2 instance types make it a mixed instances group/,
    );
    expect(refused({ ...warm, warmPool: { size: 7 } })).toThrow(/warmPool\.size: must be at most maxSize \(6\)/);
  });

  it('hands reconcile the team pairs whose host-network work may share a machine, and refuses a pair of unknown or equal teams', () => {
    const raw = JSON.parse(readFileSync(EXAMPLE, 'utf8')) as Record<string, unknown>;
    const template = synth(parseConfig({ ...raw, hostNetworkSharing: [['nlp', 'vision']] })).template;
    const fns = Object.values(template.findResources('AWS::Lambda::Function')) as {
      Properties: { Environment?: { Variables?: Record<string, unknown> } };
    }[];
    const given = fns.map((f) => f.Properties.Environment?.Variables?.GPU_FLEET_HOST_NETWORK_SHARING).filter((v) => v !== undefined);
    expect(given.length).toBeGreaterThan(0);
    expect(fleetConfigFromEnv({ GPU_FLEET_HOST_NETWORK_SHARING: given[0] as string }).policy.hostNetworkSharing).toEqual([
      ['nlp', 'vision'],
    ]);
    expect(() => parseConfig({ ...raw, hostNetworkSharing: [['nlp', 'nobody']] })).toThrow(
      /hostNetworkSharing\[0\]\[1\]: team "nobody" is not in teams \(nlp, vision, research\)/,
    );
    expect(() => parseConfig({ ...raw, hostNetworkSharing: [['nlp', 'nlp']] })).toThrow(
      /hostNetworkSharing\[0\]: a pair names two different teams/,
    );
  });

  it('with prometheus: the agents serve /metrics on the port, and the nodes’ security group lets in only the configured scrapers; cdk-nag clean', () => {
    const raw = JSON.parse(readFileSync(EXAMPLE, 'utf8')) as Record<string, unknown>;
    const { app, stack } = build(
      parseConfig({ ...raw, prometheus: { allowFrom: { cidr: '10.20.0.0/16' } }, dcgmExporterUrl: 'http://localhost:9401/metrics' }),
      { nag: true },
    );
    expect(() => app.synth()).not.toThrow();
    const template = Template.fromStack(stack);
    const ingress =
      JSON.stringify(template.findResources('AWS::EC2::SecurityGroup')) +
      JSON.stringify(template.findResources('AWS::EC2::SecurityGroupIngress'));
    expect(ingress).toMatch(/"CidrIp":"10\.20\.0\.0\/16"[^}]*"FromPort":9400|"FromPort":9400[^}]*"CidrIp":"10\.20\.0\.0\/16"/);
    const userData = JSON.stringify(
      Object.values(template.findResources('AWS::EC2::LaunchTemplate')).map((t) => (t as { Properties: unknown }).Properties),
    );
    expect(userData).toContain('GPU_FLEET_PROMETHEUS_PORT=9400');
    // The node's dcgm-exporter, read for MIG slices' utilisation: on the machine itself only.
    expect(userData).toContain('GPU_FLEET_DCGM_EXPORTER_URL=http://localhost:9401/metrics');
    expect(() => parseConfig({ ...raw, dcgmExporterUrl: 'http://metrics.example.com/x' })).toThrow(/an http URL on the machine itself/);
    // Off unless configured; never open to the world.
    const plain = JSON.stringify(synth(example()).template.toJSON());
    expect(plain).not.toContain('GPU_FLEET_PROMETHEUS_PORT');
    expect(() => parseConfig({ ...raw, prometheus: { allowFrom: { cidr: '0.0.0.0/0' } } })).toThrow(/a CIDR block no wider than \/8/);
    const bySg = synth(
      parseConfig({ ...raw, prometheus: { port: 9500, allowFrom: { securityGroupId: 'sg-0123456789abcdef0' } } }),
    ).template;
    expect(JSON.stringify(bySg.toJSON())).toMatch(
      /"FromPort":9500[^}]*"SourceSecurityGroupId":"sg-0123456789abcdef0"|"SourceSecurityGroupId":"sg-0123456789abcdef0"[^}]*"FromPort":9500/,
    );
  });

  it('with GCP regions keeping their own checkpoint buckets: reconcile and the agent API are told the roots, and only they read the GCP key', () => {
    const raw = JSON.parse(readFileSync(EXAMPLE, 'utf8')) as Record<string, unknown>;
    const gcp = {
      projects: [{ projectId: 'ml-prod', zones: ['us-central1-a', 'us-central1-b'] }],
      credentialsSecretName: 'gpu-fleet/gcp-key',
      checkpointRoots: { 'us-central1': 'gs://ml-prod-gpu-fleet-us-central1/checkpoints/' },
      agentServiceAccounts: ['gpu-fleet-node@ml-prod.iam.gserviceaccount.com'],
    };
    const { app, stack } = build(parseConfig({ ...raw, gcp }), { nag: true });
    expect(() => app.synth()).not.toThrow(); // cdk-nag clean, the unsigned URL included
    const template = Template.fromStack(stack);
    const envOf = (service: string) =>
      Object.values(template.findResources('AWS::Lambda::Function'))
        .map(
          (f) => (f as { Properties: { Environment?: { Variables?: Record<string, unknown> } } }).Properties.Environment?.Variables ?? {},
        )
        .find((v) => v.POWERTOOLS_SERVICE_NAME === service)!;
    const roots = JSON.stringify(gcp.checkpointRoots);
    expect(envOf('gpu-fleet-reconcile').GPU_FLEET_GCP_CHECKPOINT_ROOTS).toBe(roots);
    expect(envOf('gpu-fleet-agentApi')).toMatchObject({
      GPU_FLEET_GCP_CHECKPOINT_ROOTS: roots,
      GPU_FLEET_GCP_CREDENTIALS_SECRET: 'gpu-fleet/gcp-key',
    });
    expect(envOf('gpu-fleet-intake').GPU_FLEET_GCP_CHECKPOINT_ROOTS).toBeUndefined();
    // GCP machines call a second URL, unsigned, on an alias of the same function, which checks their identity tokens.
    expect(JSON.parse(envOf('gpu-fleet-agentApi').GPU_FLEET_GCE_AGENTS as string)).toEqual({
      audience: expect.stringMatching(/^gpu-fleet\/.+\/agent-api$/) as unknown,
      serviceAccounts: ['gpu-fleet-node@ml-prod.iam.gserviceaccount.com'],
      projects: ['ml-prod'],
    });
    const urls = Object.values(template.findResources('AWS::Lambda::Url')) as { Properties: { AuthType: string; Qualifier?: unknown } }[];
    // The agent API's two (signed, and unsigned for GCE machines on an alias) and the people API's, signed.
    expect(urls.map((u) => u.Properties.AuthType).sort()).toEqual(['AWS_IAM', 'AWS_IAM', 'NONE']);
    expect(urls.find((u) => u.Properties.AuthType === 'NONE')!.Properties.Qualifier).toBeDefined();
    expect(template.findOutputs('GceAgentApiUrl')).not.toEqual({});
    // An address that is not a service account's is refused.
    expect(() => parseConfig({ ...raw, gcp: { ...gcp, agentServiceAccounts: ['alice@example.com'] } })).toThrow(
      /a service account e-mail address/,
    );
    const apiKey = statements(template, 'agentApiRole').find((x) => x.Sid === 'GcpCredentials')!;
    expect(actionsOf(apiKey)).toEqual(['secretsmanager:GetSecretValue']);
    expect(JSON.stringify(apiKey.Resource)).toContain('secret:gpu-fleet/gcp-key-??????');
    // The machines never hold the control plane's GCP key.
    expect(statements(template, 'AgentRole').some((x) => actionsOf(x).some((a) => a.startsWith('secretsmanager:')))).toBe(false);
    expect(() => parseConfig({ ...raw, gcp: { ...gcp, checkpointRoots: { 'europe-west4': 'gs://b-eu/c/' } } })).toThrow(
      /gcp\.checkpointRoots\.europe-west4.*no project has a zone in europe-west4 \(us-central1\)/,
    );
    expect(() => parseConfig({ ...raw, gcp: { ...gcp, checkpointRoots: { 'us-central1': 'gs://b-c/no-slash' } } })).toThrow(
      /a Cloud Storage checkpoint root is gs:\/\/bucket\/prefix\/ \(ending in "\/"\)/,
    );
  });

  it('keeps the jobs’ output in a log group of the configured retention that only the agent API writes, stream by stream', () => {
    const raw = JSON.parse(readFileSync(EXAMPLE, 'utf8')) as Record<string, unknown>;
    const { template } = synth(parseConfig({ ...raw, jobLogs: { retentionDays: 90 } }));
    const groups = Object.values(template.findResources('AWS::Logs::LogGroup')) as {
      Properties: { LogGroupName?: string; RetentionInDays?: number; KmsKeyId?: unknown };
      DeletionPolicy?: string;
    }[];
    const jobs = groups.find((g) => g.Properties.LogGroupName === '/gpu-fleet/GpuFleet/jobs')!;
    expect(jobs.Properties).toMatchObject({ RetentionInDays: 90, KmsKeyId: expect.anything() });
    expect(jobs.DeletionPolicy).toBe('Retain');
    const api = statements(template, 'agentApiRole').find((x) => x.Sid === 'JobOutput')!;
    expect(actionsOf(api).sort()).toEqual(['logs:CreateLogStream', 'logs:PutLogEvents']);
    expect(JSON.stringify(api.Resource)).toMatch(/JobLogs.*:log-stream:\*/);
    // The machines themselves may not write logs: only through the API.
    const machine = statements(template, 'AgentRole');
    expect(machine.length).toBeGreaterThan(0);
    expect(machine.some((x) => actionsOf(x).some((a) => a.startsWith('logs:')))).toBe(false);
    expect(() => parseConfig({ ...raw, jobLogs: { retentionDays: 10 } })).toThrow(
      /must be one of CloudWatch Logs' retentions: 1, 3, 5, 7, 14, 30/,
    );
  });

  it("keeps a replica's port behind a target group it did not make to who the config names: never the fleet's other machines", () => {
    const arn = 'arn:aws:elasticloadbalancing:us-west-2:123456789012:targetgroup/gf-nlp-chat/50dc6c495c0c9188';
    const raw = JSON.parse(readFileSync(EXAMPLE, 'utf8')) as Record<string, unknown>;
    const config = parseConfig({
      ...raw,
      services: {
        targetGroups: { 'nlp.chat': arn },
        replicaPorts: [{ port: 8000, allowFrom: { securityGroupId: 'sg-0123456789abcdef0' } }],
      },
    });
    const { template } = synth(config);
    const ingress = Object.values(template.findResources('AWS::EC2::SecurityGroupIngress')).map(
      (r) =>
        (
          r as {
            Properties: { IpProtocol: string; FromPort?: number; ToPort?: number; SourceSecurityGroupId?: unknown; GroupId?: unknown };
          }
        ).Properties,
    );
    const self = ingress.filter((p) => p.IpProtocol === 'tcp' && JSON.stringify(p.SourceSecurityGroupId) === JSON.stringify(p.GroupId));
    expect(self.map((p) => [p.FromPort, p.ToPort])).toEqual([
      [1, 7999],
      [8001, 65535],
    ]);
    expect(JSON.stringify(template.toJSON())).toMatch(
      /"FromPort":8000[^}]*"SourceSecurityGroupId":"sg-0123456789abcdef0"|"SourceSecurityGroupId":"sg-0123456789abcdef0"[^}]*"FromPort":8000/,
    );
    expect(JSON.stringify(Object.values(template.findResources('AWS::EC2::LaunchTemplate')))).toContain('--dports 8000 -j RETURN');
    expect(() => parseConfig({ ...raw, services: { replicaPorts: [{ port: 80, allowFrom: { cidr: '10.0.0.0/16' } }] } })).toThrow(
      /services\.replicaPorts\[0\]\.port/,
    );
  });

  it('with services: reconcile may register targets in their own target groups only, the agent API deregister them, intake may write service records only; cdk-nag clean', () => {
    const arn = 'arn:aws:elasticloadbalancing:us-west-2:123456789012:targetgroup/gf-nlp-chat/50dc6c495c0c9188';
    const raw = JSON.parse(readFileSync(EXAMPLE, 'utf8')) as Record<string, unknown>;
    const config = parseConfig({
      ...raw,
      services: {
        targetGroups: { 'nlp.chat': arn },
        replicaPorts: [{ port: 8000, allowFrom: { securityGroupId: 'sg-0123456789abcdef0' } }],
      },
    });
    // Without the replicas' ports the machines could not keep them from each other: the config says what to add.
    expect(() => parseConfig({ ...raw, services: { targetGroups: { 'nlp.chat': arn } } })).toThrow(
      /services\.replicaPorts: give the ports the replicas behind targetGroups listen on/,
    );
    const { app, stack } = build(config, { nag: true });
    expect(() => app.synth()).not.toThrow();
    const template = Template.fromStack(stack);
    const reconcile = statements(template, 'reconcileRole');
    expect(reconcile.find((x) => x.Sid === 'ServiceTargets')).toMatchObject({
      Action: ['elasticloadbalancing:RegisterTargets', 'elasticloadbalancing:DeregisterTargets'],
      Resource: arn,
    });
    expect(reconcile.find((x) => x.Sid === 'ServiceTargetHealth')).toMatchObject({ Action: 'elasticloadbalancing:DescribeTargetHealth' });
    const intake = statements(template, 'intakeRole');
    expect(intake.find((x) => x.Sid === 'ServiceRecords')).toMatchObject({
      Action: ['dynamodb:GetItem', 'dynamodb:PutItem'],
      Condition: { 'ForAllValues:StringEquals': { 'dynamodb:LeadingKeys': ['service'] } },
    });
    const fns = Object.values(template.findResources('AWS::Lambda::Function')) as {
      Properties: { Environment?: { Variables?: Record<string, unknown> } };
    }[];
    const withServices = fns.filter((f) => f.Properties.Environment?.Variables?.GPU_FLEET_SERVICE_TARGET_GROUPS !== undefined);
    // Intake is told the ports the machines keep to the load balancers: it refuses a service on another.
    const intakeFn = withServices.find((f) => JSON.stringify((f.Properties as { Role?: unknown }).Role).includes('intake'));
    expect(intakeFn?.Properties.Environment?.Variables?.GPU_FLEET_SERVICE_PORTS).toBe('[8000]');
    // Reconcile, intake, the agent API (a warned machine's replicas leave their target groups through it, deregistering only)
    // and the people API (which reads the services' records).
    expect(withServices).toHaveLength(4);
    expect(statements(template, 'agentApiRole').find((x) => x.Sid === 'ServiceTargetsLeave')).toMatchObject({
      Action: 'elasticloadbalancing:DeregisterTargets',
      Resource: arn,
    });
    // It publishes the replicas' load figures for their machines, in the services' namespace only.
    expect(statements(template, 'agentApiRole').find((x) => x.Sid === 'ServiceMetrics')).toMatchObject({
      Action: 'cloudwatch:PutMetricData',
      Condition: { StringEquals: { 'cloudwatch:namespace': 'GpuFleet/Services' } },
    });
    expect(JSON.parse(withServices[0]!.Properties.Environment!.Variables!.GPU_FLEET_SERVICE_TARGET_GROUPS as string)).toEqual({
      'nlp.chat': arn,
    });
    // The dashboard's service panel: replicas wanted and ready, and what the target group's load balancer sees.
    const dashboard = JSON.stringify(template.findResources('AWS::CloudWatch::Dashboard'));
    expect(dashboard).toMatch(/Service replicas: wanted and ready/);
    expect(dashboard).toMatch(/ServiceReplicasReady/);
    expect(dashboard).toMatch(/ServiceAvailable/);
    expect(dashboard).toMatch(/ServiceCostMicroUsdPerHour/);
    expect(dashboard).toMatch(/RequestCountPerTarget.*targetgroup\/gf-nlp-chat\/50dc6c495c0c9188/);
    expect(() => parseConfig({ ...raw, services: { targetGroups: { chat: 'tg-1' } } })).toThrow(
      /services\.targetGroups\.chat: must be a target group ARN[\s\S]*"chat" is not a service id/,
    );
  });

  it('with a load balancer the stack creates: internal, logged, a listener per service (HTTPS with a certificate), IP targets health-checked on the readiness path; cdk-nag clean', () => {
    const raw = JSON.parse(readFileSync(EXAMPLE, 'utf8')) as Record<string, unknown>;
    const cert = 'arn:aws:acm:us-west-2:123456789012:certificate/0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0';
    const config = parseConfig({
      ...raw,
      services: {
        loadBalancer: { certificateArn: cert, services: [{ id: 'nlp.chat', port: 8000, listenerPort: 443, healthCheckPath: '/health' }] },
      },
    });
    const { app, stack } = build(config, { nag: true });
    expect(() => app.synth()).not.toThrow();
    const template = Template.fromStack(stack);
    template.hasResourceProperties('AWS::ElasticLoadBalancingV2::LoadBalancer', {
      Scheme: 'internal',
      LoadBalancerAttributes: Match.arrayWith([{ Key: 'access_logs.s3.enabled', Value: 'true' }]),
    });
    template.hasResourceProperties('AWS::ElasticLoadBalancingV2::LoadBalancer', {
      LoadBalancerAttributes: Match.arrayWith([{ Key: 'routing.http.drop_invalid_header_fields.enabled', Value: 'true' }]),
    });
    template.hasResourceProperties('AWS::ElasticLoadBalancingV2::TargetGroup', {
      TargetType: 'ip',
      Port: 8000,
      HealthCheckPath: '/health',
      TargetGroupAttributes: Match.arrayWith([{ Key: 'deregistration_delay.timeout_seconds', Value: '30' }]),
    });
    template.hasResourceProperties('AWS::ElasticLoadBalancingV2::Listener', {
      Port: 443,
      Protocol: 'HTTPS',
      Certificates: [{ CertificateArn: cert }],
    });
    // The load balancer's clients come from the VPC only, and it reaches the nodes on the service's port only.
    template.hasResourceProperties('AWS::EC2::SecurityGroup', {
      SecurityGroupIngress: [
        Match.objectLike({ CidrIp: (raw.vpc as { create: { cidr: string } }).create.cidr, FromPort: 443, ToPort: 443 }),
      ],
    });
    template.hasResourceProperties('AWS::EC2::SecurityGroupIngress', { FromPort: 8000, ToPort: 8000, IpProtocol: 'tcp' });
    // The machines reach each other on every TCP port but the replicas' (so only the load balancer reaches those), and the
    // machine's own wall passes the replicas' port (the security group decides who).
    const selfTcp = Object.values(template.findResources('AWS::EC2::SecurityGroupIngress'))
      .map(
        (r) =>
          (
            r as {
              Properties: { IpProtocol: string; FromPort?: number; ToPort?: number; SourceSecurityGroupId?: unknown; GroupId?: unknown };
            }
          ).Properties,
      )
      .filter((p) => p.IpProtocol === 'tcp' && JSON.stringify(p.SourceSecurityGroupId) === JSON.stringify(p.GroupId))
      .map((p) => [p.FromPort, p.ToPort]);
    expect(selfTcp).toEqual([
      [1, 7999],
      [8001, 65535],
    ]);
    expect(tcpRangesWithout([9400, 8000, 8000, 1, 65535])).toEqual([
      { from: 2, to: 7999 },
      { from: 8001, to: 9399 },
      { from: 9401, to: 65534 },
    ]);
    const userData = JSON.stringify(Object.values(template.findResources('AWS::EC2::LaunchTemplate')));
    expect(userData).toContain('--dports 8000 -j RETURN');
    const reconcile = statements(template, 'reconcileRole').find((x) => x.Sid === 'ServiceTargets')!;
    expect(JSON.stringify(reconcile.Resource)).toMatch(/ServiceTargetGroup0/);
    expect(() =>
      parseConfig({
        ...raw,
        services: {
          loadBalancer: {
            services: [
              { id: 'nlp.a', port: 1, listenerPort: 80 },
              { id: 'nlp.b', port: 2, listenerPort: 80 },
            ],
          },
        },
      }),
    ).toThrow(/services\.loadBalancer\.services\[1\]\.listenerPort: each service needs its own listener port/);
  });

  it('fails the synth on a finding nobody acknowledged', () => {
    const { app, stack } = build(example(), { nag: true });
    new sqs.Queue(stack, 'Unencrypted', { encryption: sqs.QueueEncryption.UNENCRYPTED });
    expect(() => app.synth()).toThrow(/AwsSolutions-SQS2[\s\S]*GpuFleet\/Unencrypted/);
  });
});

describe('the config', () => {
  const base = () =>
    JSON.parse(readFileSync(EXAMPLE, 'utf8')) as Record<string, unknown> & {
      nodeGroups: Record<string, unknown>[];
      teams: Record<string, unknown>[];
    };

  it('fills defaults and accepts the example', () => {
    const c = example();
    expect(c.policy).toEqual({ reconcileIntervalSec: 60, idleCooldownSec: 180, noticeMarginSec: 20 });
    expect(c.nodeGroups[0]).toMatchObject({
      minSize: 0,
      diskGiB: 200,
      migEnabled: false,
      ami: { ssmParameter: '/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-amazon-linux-2023/latest/ami-id' },
    });
    expect(c.teams[2]).toMatchObject({ name: 'research', period: 'weekly', action: 'alert', alertAtPct: [80, 100], weight: 1 });
  });

  it('suggests the field or the instance type meant by a typo', () => {
    const bad = base();
    bad.nodeGroups[0] = { ...bad.nodeGroups[0], maxsize: 4, instanceTypes: ['g6.xlarg'] };
    bad.policy = { idleCoolDownSec: 60 };
    expect(() => parseConfig(bad)).toThrow(
      /nodeGroups\["l4-spot"\]: unknown field "maxsize" \(did you mean "maxSize"\?\); allowed: name, instanceTypes, capacityType, reservation, zones, subnetIds, minSize, maxSize, ami, diskGiB, dataDiskGiB, migEnabled/,
    );
    expect(() => parseConfig(bad)).toThrow(/policy: unknown field "idleCoolDownSec" \(did you mean "idleCooldownSec"\?\)/);
    expect(() => parseConfig(bad)).toThrow(/instanceTypes\[0\]: not a GPU instance type .* \(did you mean "g6\.xlarge"\?\)/);
  });

  it('refuses MIG on a type whose GPU has none (an L4), naming the type, its GPU and the GPUs that have MIG', () => {
    const bad = base();
    bad.nodeGroups[0] = { ...bad.nodeGroups[0], instanceTypes: ['g6.xlarge'], migEnabled: true };
    expect(() => parseConfig(bad)).toThrow(
      /nodeGroups\["l4-spot"\]\.migEnabled: MIG needs GPUs that have it \(A100-40GB, A100-80GB, H100, H200, B200\): g6\.xlarge has L4\. Set migEnabled to false/,
    );
  });

  it('refuses a service of a team the config does not have, naming the teams it has', () => {
    const bad = base();
    bad.services = {
      targetGroups: { 'ghost.chat': 'arn:aws:elasticloadbalancing:us-west-2:123456789012:targetgroup/gf-ghost-chat/50dc6c495c0c9188' },
    };
    expect(() => parseConfig(bad)).toThrow(
      /services\.targetGroups(\.|\[")ghost\.chat.*: service ghost\.chat belongs to team "ghost", which is not in teams \(/,
    );
  });

  it("says a library's terse messages again in plain words with an example from the example config", () => {
    const bad = base();
    bad.teams[0] = { ...bad.teams[0], alertAtPct: '50,90' };
    bad.teams[1] = { ...bad.teams[1], alertAtPct: [] };
    bad.region = 5;
    let problems: readonly string[] = [];
    try {
      parseConfig(bad);
    } catch (e) {
      problems = (e as ConfigError).problems;
    }
    expect(problems).toEqual(
      expect.arrayContaining([
        'teams["nlp"].alertAtPct: must be a list (a JSON array), e.g. [50, 80, 100]; got "50,90"',
        'teams["vision"].alertAtPct: give at least 1 entry, e.g. [50, 80, 100]; got []',
        'region: must be text (a JSON string), e.g. "us-east-1"; got 5',
      ]),
    );
    expect(problems.join('\n')).not.toMatch(/Invalid input|Too small|Too big|expected array/);
  });

  it('says where a config that is not JSON goes wrong, by line and column', () => {
    const dir = mkdtempSync(join(tmpdir(), 'gf-config-'));
    const file = join(dir, 'config.json');
    writeFileSync(file, '{\n  "region": "us-west-2",\n  "teams": [\n    { "name": "nlp" "budgetUsd": 5000 }\n  ]\n}\n');
    expect(() => loadConfig(file)).toThrow(
      /config\.json is not a valid gpu-fleet config:\n {2}- not valid JSON: line 4, column 21: a comma is missing before this \(at: \{ "name": "nlp" "budgetUsd": 5000 \}\)/,
    );
    writeFileSync(file, '{\n  "region": "us-west-2",\n}\n');
    expect(() => loadConfig(file)).toThrow(/line 3, column 1: a field name in double quotes was expected \(JSON has no trailing commas\)/);
  });

  it('says which field, which value, and what is allowed', () => {
    const bad = base();
    bad.nodeGroups[0] = {
      ...bad.nodeGroups[0],
      instanceTypes: ['g6.xlarge', 'm5.large'],
      capacityType: 'cheap',
      maxSize: -1,
      zones: ['us-west-2a'],
    };
    bad.teams[1] = { ...bad.teams[1], budgetUsd: '1000', action: 'ignore' };
    bad.policy = { reconcileIntervalSec: 90 };
    bad.extra = true;
    let error: ConfigError | undefined;
    try {
      parseConfig(bad, 'my-config.json');
    } catch (e) {
      error = e as ConfigError;
    }
    expect(error).toBeInstanceOf(ConfigError);
    expect(error!.problems).toEqual(
      expect.arrayContaining([
        '(config): unknown field "extra"; allowed: $schema, stackName, region, account, vpc, nodeGroups, teams, people, policy, checkpoints, alarmEmail, prometheus, dcgmExporterUrl, jobLogs, discounts, hostNetworkSharing, images, ecrRepositories, reservations, services, gcp',
        // Every allowed type, by family; the path names the group, not its index.
        expect.stringMatching(
          /^nodeGroups\["l4-spot"\]\.instanceTypes\[1\]: not a GPU instance type in the shipped catalogue \(data\/catalog\/aws-gpu-instances\.json\); allowed: g4dn \(xlarge, 2xlarge, .*, metal\); g5 \(.*\); p5en \(48xlarge\); got "m5\.large"$/,
        ),
        'nodeGroups["l4-spot"].capacityType: must be "spot", "on-demand" or "reserved"; got "cheap"',
        'nodeGroups["l4-spot"].maxSize: must be at least 1; got -1',
        'teams["vision"].budgetUsd: must be a number of dollars; got "1000"',
        'teams["vision"].action: must be "alert", "spot-only", "hold" or "stop"; got "ignore"',
        'policy.reconcileIntervalSec: must be a whole number of minutes (a multiple of 60): the schedule runs by the minute; got 90',
      ]),
    );
    expect(error!.message).toMatch(/^my-config\.json is not a valid gpu-fleet config:\n {2}- /);
  });

  it('checks zones against the VPC and names against each other', () => {
    const bad = base();
    bad.nodeGroups[1] = { ...bad.nodeGroups[1], name: 'l4-spot', zones: ['us-east-1f'] };
    expect(() => parseConfig(bad)).toThrow(
      /nodeGroups\["l4-spot"\]\.name: node group names must be unique; got "l4-spot"[\s\S]*nodeGroups\["l4-spot"\]\.zones: zone is not one of the VPC's zones \(us-east-1a, us-east-1b, us-east-1c\); got "us-east-1f"/,
    );
    // A zone the region does not have at all, against the region's zones (aws-regions).
    const nowhere = base();
    nowhere.vpc = { create: { cidr: '10.40.0.0/16', zones: ['us-east-1a', 'us-east-1g'] } };
    expect(() => parseConfig(nowhere)).toThrow(
      /vpc\.create\.zones\[1\]: us-east-1 has no zone us-east-1g; its zones are us-east-1a, us-east-1b, us-east-1c, us-east-1d, us-east-1e, us-east-1f \(which of them your account has: aws ec2 describe-availability-zones --region us-east-1\); got "us-east-1g"/,
    );
    const both = base();
    both.nodeGroups[0] = { ...both.nodeGroups[0], subnetIds: ['subnet-0123456789abcdef0'] };
    expect(() => parseConfig(both)).toThrow(
      /give either zones \(in the VPC the stack creates\) or subnetIds \(in an existing VPC\), not both and not neither/,
    );
  });

  it('synthesises into an existing VPC by ids, without lookups', () => {
    const c = base();
    c.vpc = {
      existing: {
        vpcId: 'vpc-0a1b2c3d4e5f60718',
        privateSubnetIds: ['subnet-0a1b2c3d4e5f60711', 'subnet-0a1b2c3d4e5f60712'],
        zones: ['us-east-1a', 'us-east-1b'],
        s3Path: 'gateway-endpoint',
        s3EndpointId: 'vpce-0a1b2c3d4e5f60719',
      },
    };
    c.nodeGroups = [
      {
        name: 'l4-spot',
        instanceTypes: ['g6.xlarge'],
        capacityType: 'spot',
        subnetIds: ['subnet-0a1b2c3d4e5f60711', 'subnet-0a1b2c3d4e5f60712'],
        maxSize: 8,
      },
    ];
    const { template } = synth(parseConfig(c));
    template.resourceCountIs('AWS::EC2::VPC', 0);
    template.hasResourceProperties('AWS::AutoScaling::AutoScalingGroup', {
      VPCZoneIdentifier: ['subnet-0a1b2c3d4e5f60711', 'subnet-0a1b2c3d4e5f60712'],
    });
  });
});

describe('the network a created VPC gets, and what an existing one must say', () => {
  const base = () =>
    JSON.parse(readFileSync(EXAMPLE, 'utf8')) as Record<string, unknown> & { vpc: Record<string, Record<string, unknown>> };
  /** The path every function bills checkpoint bytes on (GPU_FLEET_NETWORK): the same on each, and parsed back. */
  const billedNetwork = (template: Template) => {
    const values = new Set(
      Object.values(template.findResources('AWS::Lambda::Function')).flatMap((f) => {
        const v = (f as { Properties: { Environment?: { Variables?: Record<string, unknown> } } }).Properties.Environment?.Variables;
        return v?.GPU_FLEET_NETWORK !== undefined ? [String(v.GPU_FLEET_NETWORK)] : [];
      }),
    );
    expect(values.size).toBe(1);
    return fleetConfigFromEnv({ GPU_FLEET_NETWORK: [...values][0] }).network;
  };

  it('puts an S3 gateway endpoint on the node subnets’ route tables and a NAT gateway in every zone', () => {
    const { template } = synth(example());
    const zones = (base().vpc.create!.zones as string[]).length;
    template.resourceCountIs('AWS::EC2::NatGateway', zones);
    const endpoints = Object.values(template.findResources('AWS::EC2::VPCEndpoint')).map(
      (r) => (r as { Properties: { VpcEndpointType?: string; RouteTableIds?: unknown[]; ServiceName: unknown } }).Properties,
    );
    const s3 = endpoints.filter((e) => JSON.stringify(e.ServiceName).includes('.s3'));
    expect(s3).toHaveLength(1);
    expect(s3[0]!.VpcEndpointType).toBe('Gateway');
    // One route table per private (node) subnet, each with its own NAT route; the endpoint is on every one of them.
    const privateTables = Object.entries(template.findResources('AWS::EC2::Route'))
      .filter(([, r]) => (r as { Properties: { NatGatewayId?: unknown } }).Properties.NatGatewayId !== undefined)
      .map(([, r]) => JSON.stringify((r as { Properties: { RouteTableId: unknown } }).Properties.RouteTableId));
    expect(privateTables).toHaveLength(zones);
    expect(s3[0]!.RouteTableIds!.map((t) => JSON.stringify(t)).sort()).toEqual([...new Set(privateTables)].sort());
    // No interface endpoint unless asked for (each costs $0.01 an hour per zone).
    expect(endpoints.filter((e) => e.VpcEndpointType === 'Interface')).toHaveLength(0);
    // The bill prices the bytes on this path: free to S3, a NAT gateway in each zone.
    expect(billedNetwork(template)).toEqual({ s3Path: 'gateway-endpoint', natZones: base().vpc.create!.zones });
  });

  it('takes fewer NAT gateways when the config says so, and interface endpoints for ECR and CloudWatch on request', () => {
    const c = base();
    c.vpc.create = { ...c.vpc.create, natGateways: 1, interfaceEndpoints: ['ecr', 'monitoring'] };
    const { app, stack } = build(parseConfig(c), { nag: true });
    expect(() => app.synth()).not.toThrow(); // cdk-nag finds nothing in the endpoints either
    const template = Template.fromStack(stack);
    template.resourceCountIs('AWS::EC2::NatGateway', 1);
    // One NAT gateway, in the first zone: the other zones' machines cross a zone to reach it, and the bill says so.
    expect(billedNetwork(template)).toEqual({ s3Path: 'gateway-endpoint', natZones: [(base().vpc.create!.zones as string[])[0]] });
    const endpoints = Object.values(template.findResources('AWS::EC2::VPCEndpoint')).map(
      (r) => (r as { Properties: { VpcEndpointType?: string; ServiceName: unknown } }).Properties,
    );
    const names = endpoints.filter((e) => e.VpcEndpointType === 'Interface').map((e) => JSON.stringify(e.ServiceName));
    expect(names).toHaveLength(3);
    for (const svc of ['ecr.api', 'ecr.dkr', 'monitoring']) expect(names.some((n) => n.includes(svc))).toBe(true);
    const tooMany = base();
    tooMany.vpc.create = { ...tooMany.vpc.create, natGateways: 5 };
    expect(() => parseConfig(tooMany)).toThrow(/vpc\.create\.natGateways: at most one NAT gateway per zone \(3 zones\)/);
  });

  it('refuses an existing VPC that does not say how S3 is reached, or names a gateway endpoint without its id', () => {
    const existing = (extra: Record<string, unknown>) => {
      const c = base();
      c.vpc = {
        existing: {
          vpcId: 'vpc-0a1b2c3d4e5f60718',
          privateSubnetIds: ['subnet-0a1b2c3d4e5f60711'],
          zones: ['us-east-1a'],
          ...extra,
        },
      };
      c.nodeGroups = [
        { name: 'l4-spot', instanceTypes: ['g6.xlarge'], capacityType: 'spot', subnetIds: ['subnet-0a1b2c3d4e5f60711'], maxSize: 8 },
      ];
      return c;
    };
    expect(() => parseConfig(existing({}))).toThrow(
      /vpc: existing\.s3Path: say how the machines reach S3 .*"nat" \(NAT data processing, \$0\.045\/GB/,
    );
    expect(() => parseConfig(existing({ s3Path: 'gateway-endpoint' }))).toThrow(
      /vpc\.existing\.s3EndpointId: name the S3 gateway-endpoint the subnets' route tables use/,
    );
    expect(() => parseConfig(existing({ s3Path: 'nat', s3EndpointId: 'vpce-0a1b2c3d4e5f60719' }))).toThrow(/not "nat"/);
    const { template } = synth(parseConfig(existing({ s3Path: 'nat' })));
    template.resourceCountIs('AWS::EC2::VPCEndpoint', 0);
    expect(billedNetwork(template)).toEqual({ s3Path: 'nat', natZones: [] });
  });
});

describe('npm run synth', () => {
  it('synthesises the example offline with cdk-nag, bundling each function and the agent', async () => {
    const out = mkdtempSync(join(tmpdir(), 'cdk-out-'));
    const root = resolve(import.meta.dirname, '../..');
    const cdk = (args: string[]) =>
      promisify(execFile)(process.execPath, [resolve(root, 'node_modules/aws-cdk/bin/cdk'), 'synth', '--quiet', '--output', out, ...args], {
        cwd: root,
        timeout: 240_000,
        env: { ...process.env, CDK_DISABLE_VERSION_CHECK: '1' },
      });
    // No config named: an error naming the flag, not the example built (and deployed) by accident.
    const none = await cdk([]).then(
      () => ({ stderr: '' }),
      (error: { stderr: string }) => error,
    );
    expect(none.stderr).toContain('no config given: name it with -c config=path/to/config.json');
    await cdk(['-c', 'config=infra/config.example.json']);
    const template = JSON.parse(readFileSync(join(out, 'GpuFleet.template.json'), 'utf8')) as {
      Resources: Record<string, { Type: string }>;
    };
    expect(Object.values(template.Resources).filter((r) => r.Type === 'AWS::Lambda::Function').length).toBeGreaterThanOrEqual(3);
    const bundles = readdirSync(out)
      .filter((d) => existsSync(join(out, d, 'index.mjs')))
      .map((d) => statSync(join(out, d, 'index.mjs')).size);
    expect(bundles).toHaveLength(5);
    for (const size of bundles) expect(size).toBeLessThan(3 * 1024 * 1024);
    expect(readdirSync(out).some((f) => f.endsWith('.mjs'))).toBe(true); // the agent bundle asset
  }, 300_000);
});

describe("the stack's MIG group, as the Auto Scaling adapter reads it", () => {
  it('is MIG (the stack writes the tag value the adapter reads), and a 1g.5gb job is planned onto it', async () => {
    const { template } = synth(example());
    const [asgProps] = Object.values(template.findResources('AWS::AutoScaling::AutoScalingGroup'))
      .map(
        (r) => (r as { Properties: { AutoScalingGroupName: string; Tags: { Key: string; Value: string }[]; MaxSize: string } }).Properties,
      )
      .filter((p) => p.AutoScalingGroupName === 'GpuFleet-a100-mig-od');
    expect(asgProps).toBeDefined();
    // DescribeAutoScalingGroups as AWS would answer for that group (the recorded response, with the synthesised group's name and tags).
    const recorded = JSON.parse(
      readFileSync(resolve(import.meta.dirname, '../fixtures/api/aws/autoscaling-DescribeAutoScalingGroups-mixed-instances.json'), 'utf8'),
    ).AutoScalingGroups[0];
    const group = {
      ...recorded,
      AutoScalingGroupName: asgProps!.AutoScalingGroupName,
      MinSize: 0,
      MaxSize: Number(asgProps!.MaxSize),
      DesiredCapacity: 0,
      AvailabilityZones: ['us-east-1a'],
      Instances: [],
      Tags: asgProps!.Tags.map((t) => ({ ...t, ResourceId: asgProps!.AutoScalingGroupName, ResourceType: 'auto-scaling-group' })),
      MixedInstancesPolicy: {
        ...recorded.MixedInstancesPolicy,
        LaunchTemplate: { ...recorded.MixedInstancesPolicy.LaunchTemplate, Overrides: [{ InstanceType: 'p4d.24xlarge' }] },
      },
    };
    const asgClient = new AutoScalingClient({ region: 'us-east-1', credentials: { accessKeyId: 'x', secretAccessKey: 'x' } });
    const ec2Client = new EC2Client({ region: 'us-east-1', credentials: { accessKeyId: 'x', secretAccessKey: 'x' } });
    mockClient(asgClient)
      .on(DescribeAutoScalingGroupsCommand)
      .resolves({ AutoScalingGroups: [group] });
    mockClient(ec2Client);
    const groups = await new AsgNodeGroups(asgClient, ec2Client, {
      region: 'us-east-1',
      clock: new VirtualClock(T0),
      cacheSec: 0,
    }).listGroups();
    expect(groups).toEqual([expect.objectContaining({ id: 'GpuFleet-a100-mig-od', migEnabled: true })]);
    const job = aJob({ id: 'nlp.slice', spec: { gpu: { kind: 'mig', profile: '1g.5gb' } } });
    const p = plan(aSnapshot({ groups, pendingJobs: [job], prices: pricesFor(groups) }));
    expect(p.actions).toContainEqual(expect.objectContaining({ kind: 'scale-up', groupId: 'GpuFleet-a100-mig-od' }));
    // It waits for that machine to boot, not for a group that offers MIG.
    expect(p.waiting).toEqual([
      expect.objectContaining({
        jobId: 'nlp.slice',
        reason: expect.objectContaining({ message: expect.stringMatching(/new p4d.24xlarge .* ordered for it/) }),
      }),
    ]);
  });
});
