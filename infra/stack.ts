import { resolve } from 'node:path';
import { CfnOutput, Duration, RemovalPolicy, Stack, Tags, type StackProps } from 'aws-cdk-lib';
import type * as autoscaling from 'aws-cdk-lib/aws-autoscaling';
import type * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import * as dynamodb from 'aws-cdk-lib/aws-dynamodb';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as events from 'aws-cdk-lib/aws-events';
import * as targets from 'aws-cdk-lib/aws-events-targets';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as kms from 'aws-cdk-lib/aws-kms';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import { SqsEventSource } from 'aws-cdk-lib/aws-lambda-event-sources';
import * as logs from 'aws-cdk-lib/aws-logs';
import * as s3 from 'aws-cdk-lib/aws-s3';
import * as s3assets from 'aws-cdk-lib/aws-s3-assets';
import * as secretsmanager from 'aws-cdk-lib/aws-secretsmanager';
import * as sqs from 'aws-cdk-lib/aws-sqs';
import type { Construct } from 'constructs';
import { STACK_OUTPUT_VARIABLES } from '../cloud/aws/stack-outputs.ts';
import { TABLES, type TableNames } from '../cloud/aws/tables.ts';
import { FLEET_VARIABLES } from '../cloud/env.ts';
import { METRICS_NAMESPACE } from '../functions/observability.ts';
import { bundleAgentSync } from './agent-bundle.ts';
import { networkLayoutOf, type GpuFleetConfig } from './config.ts';
import type { FunctionName } from './bundling.ts';
import { fn } from './stack/functions.ts';
import { grantAgentApi, grantAgentApiExtras, grantIntake, grantInterruption, grantReconcile } from './stack/grants.ts';
import { acknowledge, retentionOf, tcpRangesWithout } from './stack/helpers.ts';
import { agentRoleFor, network, nodeGroup, servicesFrontDoor } from './stack/network.ts';
import { alarmsFor, dashboardFor } from './stack/observability.ts';
import { adminRoleName, grantPeopleApi, peopleRoles, teamRoleName } from './stack/people.ts';
import { LIFECYCLE_HOOK_NAME, LIFECYCLE_TIMEOUT_SEC } from './stack/parts.ts';
export { LAUNCH_HOOK_NAME, LIFECYCLE_HOOK_NAME } from './stack/parts.ts';
export { tcpRangesWithout } from './stack/helpers.ts';
/**
 * The whole of gpu-fleet in one stack: state (DynamoDB), checkpoints (S3), team queues (SQS), the
 * three functions and what triggers them, the GPU node groups with their agent, a dashboard and
 * alarms. Everything is encrypted with one customer-managed key; every role has only what its
 * code calls, and mutating Auto Scaling calls only reach groups tagged `gpu-fleet:managed=true`.
 */

export interface GpuFleetStackProps extends StackProps {
  readonly config: GpuFleetConfig;
  /** Where the agent bundle is written at synth time (default: cdk.out-agent under the project). */
  readonly agentBundleDir?: string;
  /** The agent bundle infra/app.ts built (infra/agent-bundle.ts `bundleAgent`); without it the stack bundles the agent itself, without the SDK schema plugin. */
  readonly agentBundleFile?: string;
  /** Each function's bundle folder (infra/bundling.ts `bundleFunctions`); needed whenever CDK bundles this stack. */
  readonly functionBundles?: Readonly<Record<FunctionName, string>>;
}

export class GpuFleetStack extends Stack {
  readonly key: kms.Key;
  readonly tables: Record<keyof TableNames, dynamodb.Table>;
  readonly bucket: s3.Bucket;
  readonly teamQueues: Map<string, sqs.Queue>;
  readonly deadLetters: sqs.Queue;
  readonly failures: sqs.Queue;
  readonly functions: Record<FunctionName, lambda.Function>;
  readonly groups: Map<string, autoscaling.AutoScalingGroup>;
  readonly agentRole: iam.Role;
  readonly agentApiUrl: lambda.FunctionUrl;
  /** The people API's URL: the CLI's people commands, under a team role or the admin role. */
  readonly peopleApiUrl: lambda.FunctionUrl;
  /** Each team's role (what its people assume), and the platform's admin role. */
  readonly teamRoles = new Map<string, iam.Role>();
  adminRole!: iam.Role;
  /** The agent API's URL for GCP machines (unsigned; a GCE identity token identifies the caller), where the config names their accounts. */
  gceAgentApiUrl?: lambda.FunctionUrl;
  /** The interface endpoints a created VPC has (config `vpc.create.interfaceEndpoints`). */
  readonly interfaceEndpoints: ec2.InterfaceVpcEndpoint[] = [];
  readonly jobLogs: logs.LogGroup;
  readonly dashboard: cloudwatch.Dashboard;
  /** Each service's target group: id, ARN and its CloudWatch dimension (configured or created). */
  readonly serviceTargets: { id: string; arn: string; dimension: string }[];
  readonly alarms: cloudwatch.Alarm[] = [];

  readonly bundles: Readonly<Record<FunctionName, string>> | undefined;

  constructor(scope: Construct, id: string, props: GpuFleetStackProps) {
    super(scope, id, props);
    this.bundles = props.functionBundles;
    // Access logs are delivered by bucket policy (no ACLs anywhere in the stack).
    this.node.setContext('@aws-cdk/aws-s3:serverAccessLogsUseBucketPolicy', true);
    const config = props.config;
    const queuePrefix = `${this.stackName.toLowerCase()}-team-`;

    // ---- encryption, state, checkpoints -----------------------------------------------------
    this.key = new kms.Key(this, 'Key', {
      description: 'gpu-fleet: queues, tables, checkpoints, logs',
      enableKeyRotation: true,
      removalPolicy: RemovalPolicy.RETAIN,
    });
    this.key.grantEncryptDecrypt(new iam.ServicePrincipal(`logs.${this.region}.amazonaws.com`));

    this.tables = {} as Record<keyof TableNames, dynamodb.Table>;
    for (const [kind, def] of Object.entries(TABLES) as [keyof TableNames, (typeof TABLES)[keyof TableNames]][]) {
      const table = new dynamodb.Table(this, `${kind[0]!.toUpperCase()}${kind.slice(1)}Table`, {
        partitionKey: { name: def.partitionKey, type: dynamodb.AttributeType.STRING },
        ...(def.sortKey ? { sortKey: { name: def.sortKey, type: dynamodb.AttributeType.STRING } } : {}),
        billingMode: dynamodb.BillingMode.PAY_PER_REQUEST,
        pointInTimeRecoverySpecification: { pointInTimeRecoveryEnabled: true },
        encryption: dynamodb.TableEncryption.CUSTOMER_MANAGED,
        encryptionKey: this.key,
        ...(def.ttlAttribute ? { timeToLiveAttribute: def.ttlAttribute } : {}),
        removalPolicy: kind === 'idempotency' ? RemovalPolicy.DESTROY : RemovalPolicy.RETAIN,
      });
      for (const ix of def.indexes) {
        table.addGlobalSecondaryIndex({
          indexName: ix.name,
          partitionKey: { name: ix.partitionKey, type: dynamodb.AttributeType.STRING },
          sortKey: { name: ix.sortKey, type: ix.sortKeyType === 'number' ? dynamodb.AttributeType.NUMBER : dynamodb.AttributeType.STRING },
        });
      }
      this.tables[kind] = table;
    }

    const accessLogs = new s3.Bucket(this, 'AccessLogs', {
      encryption: s3.BucketEncryption.S3_MANAGED, // S3 server access logging cannot deliver to a KMS-encrypted bucket
      enforceSSL: true,
      blockPublicAccess: s3.BlockPublicAccess.BLOCK_ALL,
      objectOwnership: s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
      lifecycleRules: [{ expiration: Duration.days(90) }],
      removalPolicy: RemovalPolicy.RETAIN,
    });
    acknowledge(accessLogs, {
      'AwsSolutions-S1': 'This is the access-log bucket of the checkpoint bucket; logging its own accesses would loop.',
    });

    this.bucket = new s3.Bucket(this, 'Checkpoints', {
      ...(config.checkpoints.bucketName ? { bucketName: config.checkpoints.bucketName } : {}),
      encryption: s3.BucketEncryption.KMS,
      encryptionKey: this.key,
      bucketKeyEnabled: true,
      enforceSSL: true,
      blockPublicAccess: s3.BlockPublicAccess.BLOCK_ALL,
      objectOwnership: s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
      serverAccessLogsBucket: accessLogs,
      serverAccessLogsPrefix: 'checkpoints/',
      // No expiry of checkpoints by age: a job held or pending for months resumes from its newest. The retention
      // the index derives (reconcile's sweep, cloud/aws/checkpoint-sweep.ts) deletes what no attempt will resume from.
      lifecycleRules: [{ id: 'abort-incomplete-uploads', abortIncompleteMultipartUploadAfter: Duration.days(2) }],
      removalPolicy: RemovalPolicy.RETAIN,
    });

    // ---- queues -------------------------------------------------------------------------------
    const queueDefaults = { encryption: sqs.QueueEncryption.KMS, encryptionMasterKey: this.key, enforceSSL: true } as const;
    // The dead-letter and failure queues use SQS-managed encryption: whatever sends to them then
    // needs no key permissions (team queues redrive into them whatever their key).
    const internal = { encryption: sqs.QueueEncryption.SQS_MANAGED, enforceSSL: true, retentionPeriod: Duration.days(14) } as const;
    this.deadLetters = new sqs.Queue(this, 'DeadLetters', { ...internal, queueName: `${queuePrefix.replace(/-team-$/, '')}-dead-letters` });
    this.failures = new sqs.Queue(this, 'FunctionFailures', internal);
    acknowledge(this.failures, {
      'AwsSolutions-SQS3':
        'This queue is itself the failure destination (a dead-letter queue) of the reconcile and interruption functions and their triggers; the FunctionFailuresNotEmpty alarm watches it.',
    });
    this.teamQueues = new Map();
    for (const team of config.teams) {
      const q = new sqs.Queue(this, `TeamQueue-${team.name}`, {
        ...queueDefaults,
        queueName: `${queuePrefix}${team.name}`,
        // Six times the intake timeout, as Lambda's SQS event source asks.
        visibilityTimeout: Duration.seconds(180),
        retentionPeriod: Duration.days(14),
        deadLetterQueue: { queue: this.deadLetters, maxReceiveCount: 5 },
      });
      Tags.of(q).add('gpu-fleet:team', team.name);
      Tags.of(q).add('gpu-fleet:budget-usd', String(team.budgetUsd));
      Tags.of(q).add('gpu-fleet:budget-period', team.period);
      Tags.of(q).add('gpu-fleet:budget-action', team.action);
      Tags.of(q).add('gpu-fleet:budget-alert-at', team.alertAtPct.join('/'));
      Tags.of(q).add('gpu-fleet:weight', String(team.weight));
      if (team.maxGpus !== undefined) Tags.of(q).add('gpu-fleet:max-gpus', String(team.maxGpus));
      this.teamQueues.set(team.name, q);
    }

    // ---- the jobs' output: a log group the agent API writes (each machine its own attempts) and people read ----
    this.jobLogs = new logs.LogGroup(this, 'JobLogs', {
      logGroupName: `/gpu-fleet/${this.stackName}/jobs`,
      retention: retentionOf(config.jobLogs.retentionDays),
      encryptionKey: this.key,
      // The output outlives the stack, like the tables and the checkpoints.
      removalPolicy: RemovalPolicy.RETAIN,
    });

    // ---- the settings every function reads --------------------------------------------------
    const env: Record<string, string> = {
      GPU_FLEET_JOB_LOG_GROUP: this.jobLogs.logGroupName,
      GPU_FLEET_JOBS_TABLE: this.tables.jobs.tableName,
      GPU_FLEET_NODES_TABLE: this.tables.nodes.tableName,
      GPU_FLEET_CONTROL_TABLE: this.tables.control.tableName,
      GPU_FLEET_IDEMPOTENCY_TABLE: this.tables.idempotency.tableName,
      GPU_FLEET_CHECKPOINT_BUCKET: this.bucket.bucketName,
      GPU_FLEET_TEAM_QUEUE_PREFIX: queuePrefix,
      GPU_FLEET_DLQ_URL: this.deadLetters.queueUrl,
      GPU_FLEET_LIFECYCLE_TIMEOUT_SEC: String(LIFECYCLE_TIMEOUT_SEC),
      GPU_FLEET_RECONCILE_INTERVAL_SEC: String(config.policy.reconcileIntervalSec),
      GPU_FLEET_IDLE_COOLDOWN_SEC: String(config.policy.idleCooldownSec),
      GPU_FLEET_NOTICE_MARGIN_SEC: String(config.policy.noticeMarginSec),
      GPU_FLEET_CHECKPOINT_RETENTION_DAYS: String(config.checkpoints.expireAfterDays),
      // The checkpoint bytes' path, priced on the bill: what network() builds, or what an existing VPC's config says.
      GPU_FLEET_NETWORK: JSON.stringify(networkLayoutOf(config)),
      POWERTOOLS_METRICS_NAMESPACE: METRICS_NAMESPACE,
    };
    // ---- network and node groups ------------------------------------------------------------
    const vpc = network(this, config);
    const agentAsset = new s3assets.Asset(this, 'AgentBundle', {
      path: props.agentBundleFile ?? bundleAgentSync(props.agentBundleDir ?? resolve(import.meta.dirname, '../cdk.out-agent')).file,
    });
    this.agentRole = agentRoleFor(this, agentAsset, config.ecrRepositories ?? []);
    // The one way a machine writes state: a function URL its instance role may call (and nothing else may).
    // The key of the attempts' credentials (cloud/aws/attempt-credentials.ts): random, made by Secrets Manager, read by the
    // agent API alone. No rotation: a new key voids every credential the agents hold (each gets new ones with its work list).
    const attemptKey = new secretsmanager.Secret(this, 'AttemptCredentialKey', {
      description: "gpu-fleet: the agent API's key for the attempts' credentials",
      generateSecretString: { passwordLength: 64, excludePunctuation: true },
    });
    const agentApi = fn(this, 'agentApi', {
      memoryMb: 512,
      timeout: Duration.seconds(30),
      env: { ...env, GPU_FLEET_AGENT_ROLE_NAME: this.agentRole.roleName, GPU_FLEET_ATTEMPT_KEY_SECRET: attemptKey.secretArn },
    });
    attemptKey.grantRead(agentApi);
    acknowledge(attemptKey, {
      'AwsSolutions-SMG4':
        "The key signs the attempts' credentials, which are checked, never stored: a new value voids every credential the agents hold, and each gets new ones with its next read of its work list. Replace it by hand (a new secret value, then a new agent API version) after a suspected leak; a schedule would void them mid-attempt for no threat.",
    });
    this.agentApiUrl = agentApi.addFunctionUrl({ authType: lambda.FunctionUrlAuthType.AWS_IAM });
    // The fleet's GCP machines have no instance role: they call a second URL, unsigned, on an alias of the same function,
    // each with its instance identity token, which the function checks (signature, audience, account, project) before
    // it takes the machine's name as the caller (functions/agent-api.ts).
    if (config.gcp?.agentServiceAccounts) {
      const audience = `gpu-fleet/${this.stackName}/agent-api`;
      agentApi.addEnvironment(
        'GPU_FLEET_GCE_AGENTS',
        JSON.stringify({
          audience,
          serviceAccounts: config.gcp.agentServiceAccounts,
          projects: config.gcp.projects.map((p) => p.projectId),
        }),
      );
      const gcp = new lambda.Alias(this, 'AgentApiGcp', { aliasName: 'gcp', version: agentApi.currentVersion });
      this.gceAgentApiUrl = gcp.addFunctionUrl({ authType: lambda.FunctionUrlAuthType.NONE });
      new CfnOutput(this, 'GceAgentApiUrl', {
        value: this.gceAgentApiUrl.url,
        description: `the agent API for GCP machines (each call carries the machine's identity token for the audience ${audience})`,
      });
      new CfnOutput(this, 'GceAgentApiAudience', { value: audience });
    }
    agentApi.grantInvokeUrl(this.agentRole);
    grantAgentApi(this, agentApi.role!);
    const nodeSg = new ec2.SecurityGroup(this, 'NodeSecurityGroup', {
      vpc,
      description: 'gpu-fleet GPU nodes: all egress; nodes of a gang talk to each other',
      allowAllOutbound: true,
    });
    // Machines reach each other (a gang's NCCL and rendezvous ports are chosen at run time; each machine's own wall lets
    // only the machines of its gangs in), but never /metrics nor a replica's port behind the stack's load balancer:
    // those only the scrapers and the load balancer reach.
    const replicaPorts = config.services?.replicaPorts ?? [];
    const closedToPeers = [
      ...(config.prometheus ? [config.prometheus.port] : []),
      ...(config.services?.loadBalancer?.services.map((s) => s.port) ?? []),
      ...replicaPorts.map((r) => r.port),
    ];
    for (const r of replicaPorts) {
      const peer = 'cidr' in r.allowFrom ? ec2.Peer.ipv4(r.allowFrom.cidr) : ec2.Peer.securityGroupId(r.allowFrom.securityGroupId);
      nodeSg.addIngressRule(peer, ec2.Port.tcp(r.port), 'a load balancer reaches its replicas');
    }
    if (closedToPeers.length === 0)
      nodeSg.addIngressRule(nodeSg, ec2.Port.allTraffic(), 'gang members (NCCL, torch.distributed) reach each other');
    else {
      for (const r of tcpRangesWithout(closedToPeers))
        nodeSg.addIngressRule(nodeSg, ec2.Port.tcpRange(r.from, r.to), 'gang members (NCCL, torch.distributed) reach each other');
      nodeSg.addIngressRule(nodeSg, ec2.Port.allUdp(), 'gang members reach each other (UDP)');
      nodeSg.addIngressRule(nodeSg, ec2.Port.allIcmp(), 'gang members reach each other (ICMP)');
    }
    for (const e of this.interfaceEndpoints) e.connections.allowDefaultPortFrom(nodeSg, 'GPU nodes call the service through its endpoint');
    // Prometheus scrapes of the agents' /metrics: from the configured CIDR or security group only.
    if (config.prometheus) {
      const from = config.prometheus.allowFrom;
      const peer = 'cidr' in from ? ec2.Peer.ipv4(from.cidr) : ec2.Peer.securityGroupId(from.securityGroupId);
      nodeSg.addIngressRule(peer, ec2.Port.tcp(config.prometheus.port), "Prometheus scrapes the agents' /metrics");
    }
    this.groups = new Map();
    for (const g of config.nodeGroups) this.groups.set(g.name, nodeGroup(this, g, config, vpc, nodeSg, agentAsset));
    this.serviceTargets = servicesFrontDoor(this, config, vpc, nodeSg, accessLogs);
    grantAgentApiExtras(this, agentApi, config);

    // ---- functions --------------------------------------------------------------------------
    // Only reconcile works with GCP (it scales the managed instance groups and polls preemptions).
    const gcpEnv: Record<string, string> = config.gcp
      ? {
          GPU_FLEET_GCP_PROJECTS: JSON.stringify(config.gcp.projects),
          GPU_FLEET_GCP_CREDENTIALS_SECRET: config.gcp.credentialsSecretName,
          // Each region's Cloud Storage bucket: reconcile sweeps it, and the agent API signs reads of it.
          ...(config.gcp.checkpointRoots ? { GPU_FLEET_GCP_CHECKPOINT_ROOTS: JSON.stringify(config.gcp.checkpointRoots) } : {}),
        }
      : {};
    // Services: reconcile registers their replicas in their target groups and reads their load; intake stores their records.
    const serviceEnv: Record<string, string> =
      this.serviceTargets.length > 0
        ? {
            GPU_FLEET_SERVICE_TARGET_GROUPS: this.toJsonString(Object.fromEntries(this.serviceTargets.map((t) => [t.id, t.arn]))),
            // The ports the machines let the load balancers (and only them) reach: intake refuses a service on another.
            GPU_FLEET_SERVICE_PORTS: JSON.stringify([
              ...new Set([
                ...(config.services?.loadBalancer?.services.map((s) => s.port) ?? []),
                ...(config.services?.replicaPorts ?? []).map((r) => r.port),
              ]),
            ]),
          }
        : {};
    // Which capacity reservations reconcile reads, beside those the reserved groups launch into.
    const reservationEnv: Record<string, string> = {
      ...(config.reservations ? { GPU_FLEET_RESERVATION_SELECTOR: JSON.stringify(config.reservations.selector) } : {}),
      // Savings Plans and RIs as declared: reconcile prices on-demand usage with them.
      ...(config.discounts ? { GPU_FLEET_DISCOUNTS: JSON.stringify(config.discounts) } : {}),
      ...(config.hostNetworkSharing?.length ? { GPU_FLEET_HOST_NETWORK_SHARING: JSON.stringify(config.hostNetworkSharing) } : {}),
    };
    const reconcile = fn(this, 'reconcile', {
      memoryMb: 1769,
      timeout: Duration.seconds(Math.min(config.policy.reconcileIntervalSec, 300)),
      env: { ...env, ...gcpEnv, ...serviceEnv, ...reservationEnv },
      reservedConcurrency: 1,
    });
    const imageEnv: Record<string, string> = config.images ? { GPU_FLEET_IMAGE_POLICY: JSON.stringify(config.images) } : {};
    const intake = fn(this, 'intake', { memoryMb: 512, timeout: Duration.seconds(30), env: { ...env, ...serviceEnv, ...imageEnv } });
    const interruption = fn(this, 'interruption', {
      memoryMb: 512,
      timeout: Duration.seconds(60),
      env: { ...env, GPU_FLEET_RECONCILE_FUNCTION: reconcile.functionName },
    });
    // The people API: people's commands (status, explain, logs, cancel, budget, report) under a team's role or the admin's.
    const peopleApi = fn(this, 'peopleApi', {
      memoryMb: 1024,
      timeout: Duration.seconds(30),
      env: {
        ...env,
        ...gcpEnv,
        ...serviceEnv,
        GPU_FLEET_PEOPLE_ROLES: JSON.stringify({
          ...Object.fromEntries(config.teams.map((t) => [teamRoleName(this, t.name), t.name])),
          [adminRoleName(this)]: '*',
        }),
        GPU_FLEET_PEOPLE_TEAMS: JSON.stringify(Object.fromEntries(config.teams.map((t) => [t.name, { setsOwnBudget: t.setsOwnBudget }]))),
      },
    });
    this.peopleApiUrl = peopleApi.addFunctionUrl({ authType: lambda.FunctionUrlAuthType.AWS_IAM });
    grantPeopleApi(this, peopleApi.role!, config);
    this.functions = { reconcile, intake, interruption, agentApi, peopleApi };
    peopleRoles(this, config, peopleApi);
    grantReconcile(this, reconcile.role!, config);
    grantIntake(this, intake, config);
    grantInterruption(this, interruption.role!, reconcile);

    for (const q of this.teamQueues.values())
      intake.addEventSource(
        new SqsEventSource(q, { batchSize: 10, reportBatchItemFailures: true, maxBatchingWindow: Duration.seconds(1) }),
      );

    // ---- triggers -----------------------------------------------------------------------------
    new events.Rule(this, 'ReconcileSchedule', {
      description: 'gpu-fleet: reconcile every interval',
      schedule: events.Schedule.rate(Duration.seconds(config.policy.reconcileIntervalSec)),
      // A missed turn is not retried: the next one comes within the interval.
      targets: [
        new targets.LambdaFunction(reconcile, { retryAttempts: 0, maxEventAge: Duration.seconds(60), deadLetterQueue: this.failures }),
      ],
    });
    const toInterruption = () =>
      new targets.LambdaFunction(interruption, { retryAttempts: 8, maxEventAge: Duration.minutes(10), deadLetterQueue: this.failures });
    new events.Rule(this, 'SpotNotices', {
      description: 'gpu-fleet: spot interruption warnings and rebalance recommendations',
      eventPattern: {
        source: ['aws.ec2'],
        detailType: ['EC2 Spot Instance Interruption Warning', 'EC2 Instance Rebalance Recommendation'],
      },
      targets: [toInterruption()],
    });
    new events.Rule(this, 'InstanceStateChanges', {
      description: 'gpu-fleet: machines that stop or terminate (with or without a warning)',
      eventPattern: {
        source: ['aws.ec2'],
        detailType: ['EC2 Instance State-change Notification'],
        detail: { state: ['stopping', 'stopped', 'shutting-down', 'terminated'] },
      },
      targets: [toInterruption()],
    });
    new events.Rule(this, 'TerminateLifecycleActions', {
      description: 'gpu-fleet: node group machines held by the drain lifecycle hook',
      eventPattern: {
        source: ['aws.autoscaling'],
        detailType: ['EC2 Instance-terminate Lifecycle Action'],
        detail: { AutoScalingGroupName: [...this.groups.keys()].map((n) => this.groupName(n)), LifecycleHookName: [LIFECYCLE_HOOK_NAME] },
      },
      targets: [toInterruption()],
    });
    new events.Rule(this, 'ReservationNotices', {
      description: 'gpu-fleet: Capacity Blocks delivered and ending, and interruptible reservations taking machines back',
      eventPattern: {
        source: ['aws.ec2'],
        // AWS's documentation spells the Capacity Block events with and without "Reservation": both are matched.
        detailType: [
          'Capacity Block Delivered',
          'Capacity Block Reservation Delivered',
          'Capacity Block Expiration Warning',
          'Capacity Block Reservation Expiration Warning',
          'EC2 Capacity Reservation Instance Interruption Warning',
        ],
      },
      targets: [toInterruption()],
    });
    new events.Rule(this, 'ScheduledMaintenance', {
      description: 'gpu-fleet: AWS Health scheduled changes for EC2 machines',
      eventPattern: {
        source: ['aws.health'],
        detailType: ['AWS Health Event'],
        detail: { service: ['EC2'], eventTypeCategory: ['scheduledChange'] },
      },
      targets: [toInterruption()],
    });

    // ---- observability ------------------------------------------------------------------------
    this.dashboard = dashboardFor(this, config);
    alarmsFor(this, config);

    // ---- outputs: every name the gpu-fleet CLI needs, so it finds the fleet by the stack's name ------
    const values: Record<string, string> = {
      ...env,
      ...gcpEnv,
      ...serviceEnv,
      ...reservationEnv,
      GPU_FLEET_RECONCILE_FUNCTION: reconcile.functionName,
      GPU_FLEET_PEOPLE_API_URL: this.peopleApiUrl.url,
    };
    for (const [key, variable] of Object.entries(STACK_OUTPUT_VARIABLES)) {
      const value = values[variable];
      if (value !== undefined) new CfnOutput(this, key, { value, description: `${FLEET_VARIABLES[variable]} (${variable})` });
    }
    new CfnOutput(this, 'IntakeFunctionName', {
      value: intake.functionName,
      description: 'the intake function (SQS event source on the team queues)',
    });
    new CfnOutput(this, 'InterruptionFunctionName', {
      value: interruption.functionName,
      description: 'the interruption function (EventBridge rules)',
    });
    new CfnOutput(this, 'TeamQueueUrls', {
      value: [...this.teamQueues].map(([t, q]) => `${t}=${q.queueUrl}`).join(' '),
      description: 'Where each team sends its job specs',
    });
    new CfnOutput(this, 'AgentApiUrl', {
      value: this.agentApiUrl.url,
      description: 'the agent API (IAM-signed calls from the node agents only)',
    });
    new CfnOutput(this, 'DashboardName', { value: this.dashboard.dashboardName });
  }

  /** An Auto Scaling group's name: fixed, so policies and rules name it without a reference. */
  groupName(nodeGroup: string): string {
    return `${this.stackName}-${nodeGroup}`;
  }
}
