import { CfnOutput, Duration } from 'aws-cdk-lib';
import type * as dynamodb from 'aws-cdk-lib/aws-dynamodb';
import * as iam from 'aws-cdk-lib/aws-iam';
import type * as lambda from 'aws-cdk-lib/aws-lambda';
import type * as s3 from 'aws-cdk-lib/aws-s3';
import { TABLES } from '../../cloud/aws/tables.ts';
import type { GpuFleetConfig } from '../config.ts';
import type { FleetStack } from './parts.ts';
import { allowGcpCredentials, allowKey } from './grants.ts';
import { acknowledge, allow, nagRegion } from './helpers.ts';

export function teamRoleName(stack: FleetStack, team: string): string {
  return `${stack.stackName}-team-${team}`.slice(0, 64);
}

export function adminRoleName(stack: FleetStack): string {
  return `${stack.stackName}-admin`.slice(0, 64);
}

/** What the people API reads to answer (the tables, queues, groups, metrics, job output) and writes (a cancel). */
export function grantPeopleApi(stack: FleetStack, role: iam.IRole, config: GpuFleetConfig): void {
  const jobs = stack.tables.jobs;
  allow(
    role,
    'ReadJobs',
    ['dynamodb:GetItem', 'dynamodb:Query'],
    [jobs.tableArn, ...TABLES.jobs.indexes.map((ix) => `${jobs.tableArn}/index/${ix.name}`)],
  );
  // A cancel: the job's conditional write (and a service's record, which lives in the control table).
  allow(role, 'CancelJobs', ['dynamodb:PutItem'], [jobs.tableArn]);
  allow(role, 'ReadNodes', ['dynamodb:GetItem', 'dynamodb:Scan'], [stack.tables.nodes.tableArn]);
  allow(role, 'Control', ['dynamodb:GetItem', 'dynamodb:Query', 'dynamodb:PutItem'], [stack.tables.control.tableArn]);
  allowKey(stack, role);
  allow(
    role,
    'Describe',
    [
      'autoscaling:DescribeAutoScalingGroups',
      'autoscaling:DescribeScalingActivities',
      'autoscaling:DescribeWarmPool',
      'ec2:DescribeInstances',
      'ec2:DescribeInstanceTypes',
      'ec2:DescribeLaunchTemplateVersions',
      'tag:GetResources',
      'cloudwatch:GetMetricData',
      'sqs:ListQueues',
    ],
    ['*'],
  );
  allow(
    role,
    'QueueDepth',
    ['sqs:GetQueueAttributes'],
    [...stack.teamQueues.values()].map((q) => q.queueArn),
  );
  allow(role, 'ReadJobOutput', ['logs:GetLogEvents', 'logs:FilterLogEvents', 'logs:DescribeLogStreams'], [stack.jobLogs.logGroupArn]);
  if (config.gcp) allowGcpCredentials(stack, role, config.gcp);
}

/**
 * A role per team and the platform's admin role. A team's role calls the people API (which
 * answers for its team only), sends to its own queue, keeps its own secrets under
 * gpu-fleet/<team>/, and tags its own queue (sets its budget) only where the config says so;
 * it is denied the state, the output and the bucket outright, and tagging any other queue.
 * Who may assume them is the account's to grant (an IAM policy or an SSO permission set).
 */
export function peopleRoles(stack: FleetStack, config: GpuFleetConfig, peopleApi: lambda.Function): void {
  const assumedBy = () =>
    config.people.assumeRoleFrom.length > 0
      ? new iam.CompositePrincipal(
          ...config.people.assumeRoleFrom.map((p) => (/^\d{12}$/.test(p) ? new iam.AccountPrincipal(p) : new iam.ArnPrincipal(p))),
        )
      : new iam.AccountRootPrincipal();
  const stackArn = `arn:${stack.partition}:cloudformation:${stack.region}:${stack.account}:stack/${stack.stackName}/*`;
  const sqsViaService = { StringEquals: { 'kms:ViaService': `sqs.${stack.region}.amazonaws.com` } };
  const queueArns = [...stack.teamQueues.values()].map((q) => q.queueArn);
  const tagActions = ['sqs:TagQueue', 'sqs:UntagQueue'];
  const common = (role: iam.Role) => {
    role.addToPrincipalPolicy(
      new iam.PolicyStatement({
        sid: 'PeopleApi',
        actions: ['lambda:InvokeFunctionUrl'],
        resources: [peopleApi.functionArn],
        conditions: { StringEquals: { 'lambda:FunctionUrlAuthType': 'AWS_IAM' } },
      }),
    );
    allow(role, 'FindTheFleet', ['cloudformation:DescribeStacks'], [stackArn]);
    allow(role, 'FindQueues', ['sqs:ListQueues'], ['*']);
    allow(role, 'QueueKey', ['kms:GenerateDataKey', 'kms:Decrypt'], [stack.key.keyArn], sqsViaService);
  };
  for (const team of config.teams) {
    const queue = stack.teamQueues.get(team.name)!;
    const role = new iam.Role(stack, `TeamRole-${team.name}`, {
      roleName: teamRoleName(stack, team.name),
      assumedBy: assumedBy(),
      description: `gpu-fleet: team ${team.name}'s people (its queue, jobs, output, spend${team.setsOwnBudget ? ' and budget' : ''})`,
      maxSessionDuration: Duration.hours(12),
    });
    common(role);
    allow(role, 'Submit', ['sqs:SendMessage', 'sqs:GetQueueUrl', 'sqs:GetQueueAttributes'], [queue.queueArn]);
    if (team.setsOwnBudget) allow(role, 'SetOwnBudget', [...tagActions, 'sqs:ListQueueTags'], [queue.queueArn]);
    // Secrets by reference: the team keeps its own under gpu-fleet/<team>/; the agent API resolves them for its attempts.
    allow(
      role,
      'OwnSecrets',
      ['ssm:PutParameter', 'ssm:GetParameter', 'ssm:DeleteParameter', 'ssm:AddTagsToResource'],
      [`arn:${stack.partition}:ssm:${stack.region}:${stack.account}:parameter/gpu-fleet/${team.name}/*`],
    );
    allow(
      role,
      'OwnSecretsManager',
      [
        'secretsmanager:CreateSecret',
        'secretsmanager:PutSecretValue',
        'secretsmanager:DeleteSecret',
        'secretsmanager:TagResource',
        'secretsmanager:DescribeSecret',
      ],
      [`arn:${stack.partition}:secretsmanager:${stack.region}:${stack.account}:secret:gpu-fleet/${team.name}/*`],
    );
    // Whatever else the account attaches to the role, it never tags another team's queue (nor its own where the platform
    // keeps the budget), and never reads the state, the output or the checkpoints itself: those go through the people API.
    const others = queueArns.filter((a) => a !== queue.queueArn);
    role.addToPrincipalPolicy(
      new iam.PolicyStatement({
        sid: 'NeverOtherBudgets',
        effect: iam.Effect.DENY,
        actions: tagActions,
        resources: team.setsOwnBudget ? others : queueArns,
      }),
    );
    role.addToPrincipalPolicy(
      new iam.PolicyStatement({
        sid: 'NeverOtherQueues',
        effect: iam.Effect.DENY,
        actions: ['sqs:SendMessage', 'sqs:ReceiveMessage', 'sqs:DeleteMessage', 'sqs:PurgeQueue', 'sqs:SetQueueAttributes'],
        resources: others.length > 0 ? others : [stack.deadLetters.queueArn],
      }),
    );
    role.addToPrincipalPolicy(
      new iam.PolicyStatement({
        sid: 'NeverTheStateDirectly',
        effect: iam.Effect.DENY,
        actions: ['dynamodb:*', 'logs:GetLogEvents', 'logs:FilterLogEvents', 'logs:StartQuery', 's3:GetObject', 's3:ListBucket'],
        resources: [
          ...Object.values(stack.tables).flatMap((t) => [t.tableArn, `${t.tableArn}/index/*`]),
          stack.jobLogs.logGroupArn,
          stack.bucket.bucketArn,
          stack.bucket.arnForObjects('*'),
        ],
      }),
    );
    acknowledge(role, {
      'AwsSolutions-IAM5[Resource::*]': 'sqs:ListQueues takes no resource: it finds the team queue by its prefix.',
      [`AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:cloudformation:${nagRegion(stack)}:<AWS::AccountId>:stack/${stack.stackName}/*]`]:
        "DescribeStacks of stack stack alone (its id is the wildcard part): the CLI finds the fleet's names in its outputs.",
      [`AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:ssm:${nagRegion(stack)}:<AWS::AccountId>:parameter/gpu-fleet/${team.name}/*]`]:
        "The team's own secrets, under its own prefix: no other team's.",
      [`AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:secretsmanager:${nagRegion(stack)}:<AWS::AccountId>:secret:gpu-fleet/${team.name}/*]`]:
        "The team's own secrets, under its own prefix: no other team's.",
      'AwsSolutions-IAM5[Action::dynamodb:*]': 'A Deny: the team role reaches the state only through the people API.',
      [`AwsSolutions-IAM5[Resource::<${stack.getLogicalId(stack.bucket.node.defaultChild as s3.CfnBucket)}.Arn>/*]`]:
        'A Deny: the team role reads no checkpoint itself.',
      ...Object.fromEntries(
        Object.values(stack.tables).map((t) => [
          `AwsSolutions-IAM5[Resource::<${stack.getLogicalId(t.node.defaultChild as dynamodb.CfnTable)}.Arn>/index/*]`,
          'A Deny: the team role queries no index itself.',
        ]),
      ),
    });
    stack.teamRoles.set(team.name, role);
  }
  stack.adminRole = new iam.Role(stack, 'AdminRole', {
    roleName: adminRoleName(stack),
    assumedBy: assumedBy(),
    description: "gpu-fleet: the platform's admin (every team's jobs, output and spend; every team's budget)",
    maxSessionDuration: Duration.hours(12),
  });
  common(stack.adminRole);
  allow(stack.adminRole, 'SubmitAny', ['sqs:SendMessage', 'sqs:GetQueueUrl', 'sqs:GetQueueAttributes'], queueArns);
  allow(stack.adminRole, 'SetBudgets', [...tagActions, 'sqs:ListQueueTags'], queueArns);
  acknowledge(stack.adminRole, {
    'AwsSolutions-IAM5[Resource::*]': 'sqs:ListQueues takes no resource: it finds the team queues by their prefix.',
    [`AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:cloudformation:${nagRegion(stack)}:<AWS::AccountId>:stack/${stack.stackName}/*]`]:
      "DescribeStacks of stack stack alone (its id is the wildcard part): the CLI finds the fleet's names in its outputs.",
  });
  new CfnOutput(stack, 'TeamRoleArns', {
    value: stack.toJsonString(Object.fromEntries([...stack.teamRoles].map(([t, r]) => [t, r.roleArn]))),
    description:
      "each team's role: its people assume it to submit to, see and cancel the team's own work (docs/concepts.md, People and roles)",
  });
  new CfnOutput(stack, 'AdminRoleArn', {
    value: stack.adminRole.roleArn,
    description: "the platform's admin role: every team, every budget",
  });
}
