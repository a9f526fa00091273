import * as iam from 'aws-cdk-lib/aws-iam';
import type * as lambda from 'aws-cdk-lib/aws-lambda';
import type * as logs from 'aws-cdk-lib/aws-logs';
import type * as s3 from 'aws-cdk-lib/aws-s3';
import { SERVICE_METRICS_NAMESPACE } from '../../cloud/aws/cloudwatch-metrics.ts';
import { GROUP_TAGS } from '../../cloud/aws/asg-node-groups.ts';
import { TABLES } from '../../cloud/aws/tables.ts';
import type { GpuFleetConfig } from '../config.ts';
import { LAUNCH_HOOK_NAME, type FleetStack } from './parts.ts';
import { acknowledge, allow, nagRegion } from './helpers.ts';

/** Use of the stack's key for the tables, queues and bucket a role touches: no wildcard actions. */
export function allowKey(stack: FleetStack, role: iam.IRole): void {
  allow(role, 'StackKey', ['kms:Decrypt', 'kms:Encrypt', 'kms:GenerateDataKey', 'kms:DescribeKey'], [stack.key.keyArn]);
}

export function groupArns(stack: FleetStack): string[] {
  return [...stack.groups.keys()].map(
    (name) =>
      `arn:${stack.partition}:autoscaling:${stack.region}:${stack.account}:autoScalingGroup:*:autoScalingGroupName/${stack.groupName(name)}`,
  );
}

/** Mutating Auto Scaling calls: gpu-fleet's groups by name, and only while they carry the managed tag. */
export function managedGroupStatement(stack: FleetStack, role: iam.IRole, sid: string, actions: string[]): void {
  allow(role, sid, actions, groupArns(stack), { StringEquals: { [`aws:ResourceTag/${GROUP_TAGS.managed}`]: 'true' } });
  const reasons: Record<string, string> = {};
  for (const name of stack.groups.keys()) {
    reasons[
      `AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:autoscaling:${nagRegion(stack)}:<AWS::AccountId>:autoScalingGroup:*:autoScalingGroupName/${stack.groupName(name)}]`
    ] =
      'An Auto Scaling group ARN holds a UUID assigned at creation; the group is named exactly and the gpu-fleet:managed tag is required by condition.';
  }
  acknowledge(role, reasons);
}

/**
 * What the agent API answers beyond the stores: with services, a warned machine's replicas leave
 * their target groups through it (DeregisterTargets on the services' groups only); with warm
 * pools, their machines ask it, while being prepared, which images to pull (the services'
 * records, pk "service", read only) and have it let their launch hook go.
 */
export function grantAgentApiExtras(stack: FleetStack, agentApi: lambda.Function, config: GpuFleetConfig): void {
  const role = agentApi.role!;
  // GCP regions' checkpoint buckets: a machine resuming a job moved from GCP reads its save through URLs the API signs
  // with the control plane's service account key.
  if (config.gcp?.checkpointRoots) {
    agentApi.addEnvironment('GPU_FLEET_GCP_PROJECTS', JSON.stringify(config.gcp.projects));
    agentApi.addEnvironment('GPU_FLEET_GCP_CREDENTIALS_SECRET', config.gcp.credentialsSecretName);
    agentApi.addEnvironment('GPU_FLEET_GCP_CHECKPOINT_ROOTS', JSON.stringify(config.gcp.checkpointRoots));
    allowGcpCredentials(stack, role, config.gcp);
  }
  if (stack.serviceTargets.length > 0) {
    agentApi.addEnvironment(
      'GPU_FLEET_SERVICE_TARGET_GROUPS',
      stack.toJsonString(Object.fromEntries(stack.serviceTargets.map((t) => [t.id, t.arn]))),
    );
    allow(
      role,
      'ServiceTargetsLeave',
      ['elasticloadbalancing:DeregisterTargets'],
      stack.serviceTargets.map((t) => t.arn),
    );
    // Replicas' load figures, which the API publishes for the machine that serves each (the machines may not).
    allow(role, 'ServiceMetrics', ['cloudwatch:PutMetricData'], ['*'], {
      StringEquals: { 'cloudwatch:namespace': SERVICE_METRICS_NAMESPACE },
    });
    acknowledge(role, {
      'AwsSolutions-IAM5[Resource::*]':
        "cloudwatch:PutMetricData supports no resource-level permissions; the agent API's is held to the services' namespace by a condition.",
    });
  }
  if (!config.nodeGroups.some((g) => g.warmPool)) return;
  agentApi.addEnvironment('GPU_FLEET_LAUNCH_HOOK', LAUNCH_HOOK_NAME);
  managedGroupStatement(stack, role, 'LetPreparedMachinesLaunch', ['autoscaling:CompleteLifecycleAction']);
  if (stack.serviceTargets.length > 0)
    role.addToPrincipalPolicy(
      new iam.PolicyStatement({
        sid: 'ServiceRecordsRead',
        actions: ['dynamodb:Query'],
        resources: [stack.tables.control.tableArn],
        conditions: { 'ForAllValues:StringEquals': { 'dynamodb:LeadingKeys': ['service'] } },
      }),
    );
}

/**
 * The agent API's own permissions: what the agents needed when they wrote directly, now held by
 * the one function that checks every call against the caller's records first.
 */
export function grantAgentApi(stack: FleetStack, role: iam.IRole): void {
  // Job output: streams in the jobs' log group only; which attempt a machine may write is checked per call (core/services/agent-access.ts).
  role.addToPrincipalPolicy(
    new iam.PolicyStatement({
      sid: 'JobOutput',
      actions: ['logs:CreateLogStream', 'logs:PutLogEvents'],
      resources: [`${stack.jobLogs.logGroupArn}:log-stream:*`],
    }),
  );
  allow(role, 'JobsOfTheCallingNode', ['dynamodb:GetItem', 'dynamodb:PutItem'], [stack.tables.jobs.tableArn]);
  allow(role, 'TheCallingNodesRecord', ['dynamodb:GetItem', 'dynamodb:UpdateItem'], [stack.tables.nodes.tableArn]);
  role.addToPrincipalPolicy(
    new iam.PolicyStatement({
      sid: 'CheckpointIndexOnly',
      // The newest checkpoint of each job, and the parts a gang's ranks have saved of one.
      actions: ['dynamodb:GetItem', 'dynamodb:PutItem', 'dynamodb:UpdateItem'],
      resources: [stack.tables.control.tableArn],
      conditions: { 'ForAllValues:StringEquals': { 'dynamodb:LeadingKeys': ['ckpt', 'ckpt-parts'] } },
    }),
  );
  role.addToPrincipalPolicy(
    new iam.PolicyStatement({
      sid: 'CheckpointObjects',
      // Presigned URLs carry these: each URL it hands out is one object of a job the caller holds.
      actions: ['s3:GetObject', 's3:PutObject', 's3:AbortMultipartUpload'],
      resources: [stack.bucket.arnForObjects('checkpoints/*')],
    }),
  );
  allow(role, 'ListCheckpoints', ['s3:ListBucket'], [stack.bucket.bucketArn], { StringLike: { 's3:prefix': ['checkpoints/*'] } });
  allowKey(stack, role);
  // Secrets by reference (core/secrets.ts): only under the teams' gpu-fleet/ prefixes; which team's a machine gets is checked
  // per call (the attempt's credential, its job's team).
  allow(
    role,
    'TeamSecretsParameters',
    ['ssm:GetParameter'],
    [`arn:${stack.partition}:ssm:${stack.region}:${stack.account}:parameter/gpu-fleet/*`],
  );
  allow(
    role,
    'TeamSecrets',
    ['secretsmanager:GetSecretValue'],
    [`arn:${stack.partition}:secretsmanager:${stack.region}:${stack.account}:secret:gpu-fleet/*`],
  );
  acknowledge(role, {
    [`AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:ssm:${nagRegion(stack)}:<AWS::AccountId>:parameter/gpu-fleet/*]`]:
      "The teams' secrets, which jobs name by reference: a machine is given only its attempt's job's own team's, checked per call.",
    [`AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:secretsmanager:${nagRegion(stack)}:<AWS::AccountId>:secret:gpu-fleet/*]`]:
      "The teams' secrets, which jobs name by reference: a machine is given only its attempt's job's own team's, checked per call.",
  });
  acknowledge(role, {
    [`AwsSolutions-IAM5[Resource::<${stack.getLogicalId(stack.bucket.node.defaultChild as s3.CfnBucket)}.Arn>/checkpoints/*]`]:
      'The agent API signs URLs for the checkpoints of whichever jobs the calling machine holds (checked per call): every key under the checkpoints/ prefix, nothing else in the bucket.',
    [`AwsSolutions-IAM5[Resource::<${stack.getLogicalId(stack.jobLogs.node.defaultChild as logs.CfnLogGroup)}.Arn>:log-stream:*]`]:
      "The jobs' output has a stream per attempt and rank, created as jobs run: any stream of the jobs' log group, nothing else; which attempt a machine may write is checked per call.",
  });
}

export function grantReconcile(stack: FleetStack, role: iam.IRole, config: GpuFleetConfig): void {
  const jobs = stack.tables.jobs;
  allow(
    role,
    'Jobs',
    ['dynamodb:GetItem', 'dynamodb:PutItem', 'dynamodb:Query'],
    [jobs.tableArn, ...TABLES.jobs.indexes.map((ix) => `${jobs.tableArn}/index/${ix.name}`)],
  );
  allow(role, 'Nodes', ['dynamodb:GetItem', 'dynamodb:UpdateItem', 'dynamodb:DeleteItem', 'dynamodb:Scan'], [stack.tables.nodes.tableArn]);
  allow(
    role,
    'Control',
    ['dynamodb:GetItem', 'dynamodb:PutItem', 'dynamodb:UpdateItem', 'dynamodb:DeleteItem', 'dynamodb:Query', 'dynamodb:BatchWriteItem'],
    [stack.tables.control.tableArn],
  );
  allowKey(stack, role);
  allow(
    role,
    'Describe',
    [
      'autoscaling:DescribeAutoScalingGroups',
      'autoscaling:DescribeScalingActivities',
      'autoscaling:DescribeAutoScalingInstances',
      // A group's warm pool, counted apart from its capacity.
      'autoscaling:DescribeWarmPool',
      'ec2:DescribeInstances',
      'ec2:DescribeInstanceTypes',
      'ec2:DescribeSpotPriceHistory',
      // Spot Placement Scores of the region's zones, the spot pools' prior (zone ids mapped to names).
      'ec2:GetSpotPlacementScores',
      'ec2:DescribeAvailabilityZones',
      'ec2:DescribeLaunchTemplateVersions',
      'ec2:DescribeCapacityReservations',
      'tag:GetResources',
      'cloudwatch:GetMetricData',
      'sqs:ListQueues',
    ],
    ['*'],
  );
  managedGroupStatement(stack, role, 'ScaleManagedGroups', [
    'autoscaling:SetDesiredCapacity',
    'autoscaling:TerminateInstanceInAutoScalingGroup',
    'autoscaling:SetInstanceProtection',
    'autoscaling:CompleteLifecycleAction',
    // Keeps a draining machine in its hook while a checkpoint is still being written or uploaded.
    'autoscaling:RecordLifecycleActionHeartbeat',
  ]);
  // The checkpoint retention (cloud/aws/checkpoint-sweep.ts): lists the job folders, deletes what the index lets go.
  allow(role, 'SweepCheckpoints', ['s3:DeleteObject'], [stack.bucket.arnForObjects('checkpoints/*')]);
  allow(role, 'ListCheckpointFolders', ['s3:ListBucket'], [stack.bucket.bucketArn], { StringLike: { 's3:prefix': ['checkpoints/*'] } });
  acknowledge(role, {
    [`AwsSolutions-IAM5[Resource::<${stack.getLogicalId(stack.bucket.node.defaultChild as s3.CfnBucket)}.Arn>/checkpoints/*]`]:
      "The checkpoint retention deletes checkpoints past their retention that no attempt will resume from (never a live job's newest), job by job: any key under the checkpoints/ prefix, nothing else in the bucket.",
  });
  allow(
    role,
    'QueueDepth',
    ['sqs:GetQueueAttributes'],
    [...stack.teamQueues.values()].map((q) => q.queueArn),
  );
  if (stack.serviceTargets.length > 0) {
    // Register and deregister replicas in the services' own target groups only.
    allow(
      role,
      'ServiceTargets',
      ['elasticloadbalancing:RegisterTargets', 'elasticloadbalancing:DeregisterTargets'],
      stack.serviceTargets.map((t) => t.arn),
    );
    // DescribeTargetHealth takes no resource-level permission (Service Authorization Reference).
    allow(role, 'ServiceTargetHealth', ['elasticloadbalancing:DescribeTargetHealth'], ['*']);
  }
  if (config.gcp) {
    allowGcpCredentials(stack, role, config.gcp);
  }
}

/** The control plane's GCP service account key, for a function that calls GCP (its secret's ARN ends in six random characters). */
export function allowGcpCredentials(stack: FleetStack, role: iam.IRole, gcp: NonNullable<GpuFleetConfig['gcp']>): void {
  allow(
    role,
    'GcpCredentials',
    ['secretsmanager:GetSecretValue'],
    [`arn:${stack.partition}:secretsmanager:${stack.region}:${stack.account}:secret:${gcp.credentialsSecretName}-??????`],
  );
}

export function grantIntake(stack: FleetStack, intake: lambda.Function, config: GpuFleetConfig): void {
  const role = intake.role!;
  // A service's record is a control-table item (pk "service"): intake creates and updates it, and touches nothing else there.
  if (config.services)
    role.addToPrincipalPolicy(
      new iam.PolicyStatement({
        sid: 'ServiceRecords',
        actions: ['dynamodb:GetItem', 'dynamodb:PutItem'],
        resources: [stack.tables.control.tableArn],
        conditions: { 'ForAllValues:StringEquals': { 'dynamodb:LeadingKeys': ['service'] } },
      }),
    );
  role.addToPrincipalPolicy(
    new iam.PolicyStatement({ sid: 'Jobs', actions: ['dynamodb:GetItem', 'dynamodb:PutItem'], resources: [stack.tables.jobs.tableArn] }),
  );
  // A spec with gpu.rightsize reads its family's measured runs (control-table items under pk "family"; reconcile writes them).
  role.addToPrincipalPolicy(
    new iam.PolicyStatement({
      sid: 'RightsizingFamilies',
      actions: ['dynamodb:GetItem'],
      resources: [stack.tables.control.tableArn],
      conditions: { 'ForAllValues:StringEquals': { 'dynamodb:LeadingKeys': ['family'] } },
    }),
  );
  allow(
    role,
    'Idempotency',
    ['dynamodb:GetItem', 'dynamodb:PutItem', 'dynamodb:UpdateItem', 'dynamodb:DeleteItem'],
    [stack.tables.idempotency.tableArn],
  );
  stack.deadLetters.grantSendMessages(role);
  allowKey(stack, role);
  // Intake says at once when no node group can ever hold a job: it lists the managed groups (read only).
  allow(role, 'DescribeGroups', ['autoscaling:DescribeAutoScalingGroups', 'ec2:DescribeLaunchTemplateVersions'], ['*']);
}

export function grantInterruption(stack: FleetStack, role: iam.IRole, reconcile: lambda.IFunction): void {
  const jobs = stack.tables.jobs;
  allow(
    role,
    'Jobs',
    ['dynamodb:GetItem', 'dynamodb:PutItem', 'dynamodb:Query'],
    [jobs.tableArn, ...TABLES.jobs.indexes.map((ix) => `${jobs.tableArn}/index/${ix.name}`)],
  );
  allow(role, 'Nodes', ['dynamodb:GetItem', 'dynamodb:UpdateItem'], [stack.tables.nodes.tableArn]);
  allow(
    role,
    'Control',
    ['dynamodb:GetItem', 'dynamodb:PutItem', 'dynamodb:UpdateItem', 'dynamodb:Query'],
    [stack.tables.control.tableArn],
  );
  allow(
    role,
    'Idempotency',
    ['dynamodb:GetItem', 'dynamodb:PutItem', 'dynamodb:UpdateItem', 'dynamodb:DeleteItem'],
    [stack.tables.idempotency.tableArn],
  );
  allowKey(stack, role);
  allow(
    role,
    'Describe',
    ['autoscaling:DescribeAutoScalingInstances', 'autoscaling:DescribeAutoScalingGroups', 'ec2:DescribeInstances'],
    ['*'],
  );
  managedGroupStatement(stack, role, 'ReleaseDrainedMachines', ['autoscaling:CompleteLifecycleAction']);
  role.addToPrincipalPolicy(
    new iam.PolicyStatement({ sid: 'ReconcileSoon', actions: ['lambda:InvokeFunction'], resources: [reconcile.functionArn] }),
  );
}
