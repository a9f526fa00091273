import { resolve } from 'node:path';
import { CfnOutput, Duration, RemovalPolicy, Stack, Tags, Validations, type StackProps } from 'aws-cdk-lib';
import * as autoscaling from 'aws-cdk-lib/aws-autoscaling';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import * as cwActions from 'aws-cdk-lib/aws-cloudwatch-actions';
import * as dynamodb from 'aws-cdk-lib/aws-dynamodb';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as elbv2 from 'aws-cdk-lib/aws-elasticloadbalancingv2';
import * as events from 'aws-cdk-lib/aws-events';
import * as targets from 'aws-cdk-lib/aws-events-targets';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as kms from 'aws-cdk-lib/aws-kms';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import * as destinations from 'aws-cdk-lib/aws-lambda-destinations';
import { SqsEventSource } from 'aws-cdk-lib/aws-lambda-event-sources';
import * as logs from 'aws-cdk-lib/aws-logs';
import * as s3 from 'aws-cdk-lib/aws-s3';
import * as s3assets from 'aws-cdk-lib/aws-s3-assets';
import * as secretsmanager from 'aws-cdk-lib/aws-secretsmanager';
import * as sns from 'aws-cdk-lib/aws-sns';
import * as subscriptions from 'aws-cdk-lib/aws-sns-subscriptions';
import * as sqs from 'aws-cdk-lib/aws-sqs';
import type { Construct } from 'constructs';
import { AGENT_METRICS, SERVICE_METRICS_NAMESPACE } from '../cloud/aws/cloudwatch-metrics.ts';
import { GROUP_TAGS, MIG_TAG_VALUE } from '../cloud/aws/asg-node-groups.ts';
import { STACK_OUTPUT_VARIABLES } from '../cloud/aws/stack-outputs.ts';
import { TABLES, type TableNames } from '../cloud/aws/tables.ts';
import { FLEET_VARIABLES } from '../cloud/env.ts';
import { targetGroupDimension } from '../cloud/aws/elb-load.ts';
import { METRICS_NAMESPACE } from '../functions/observability.ts';
import { DEFAULT_POLICY } from '../core/snapshot.ts';
import { SERVICE_DEREGISTRATION_DELAY_SEC } from '../core/serving/service.ts';
import { bundleAgentSync } from './agent-bundle.ts';
import { agentUserData, DATA_VOLUME_DEVICE } from './node-setup.ts';
import { networkLayoutOf, type GpuFleetConfig, type NodeGroupConfig } from './config.ts';
import { FUNCTION_ENTRIES, type FunctionName } from './bundling.ts';

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

/** The drain hook on every node group; reconcile drains a machine it holds even when the event is lost (core's policy names it). */
export const LIFECYCLE_HOOK_NAME = DEFAULT_POLICY.drainHookName;
/**
 * The launch hook of a group with a warm pool: a machine launched into the pool waits in it while
 * its agent pulls the images of the services that may place a replica on it, then the group stops
 * it; started into service, it waits in it again until its agent runs. Its agent lets it go through
 * the agent API (`node/launch-ready`); at the timeout the launch goes on all the same.
 */
export const LAUNCH_HOOK_NAME = 'gpu-fleet-prepare';
const LAUNCH_HOOK_TIMEOUT_SEC = 900;
const LIFECYCLE_TIMEOUT_SEC = DEFAULT_POLICY.drainHookTimeoutSec;

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
  private readonly interfaceEndpoints: ec2.InterfaceVpcEndpoint[] = [];
  readonly jobLogs: logs.LogGroup;
  readonly dashboard: cloudwatch.Dashboard;
  /** Each service's target group: id, ARN and its CloudWatch dimension (configured or created). */
  readonly serviceTargets: { id: string; arn: string; dimension: string }[];
  readonly alarms: cloudwatch.Alarm[] = [];

  private readonly bundles: Readonly<Record<FunctionName, string>> | undefined;

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
    const vpc = this.network(config);
    const agentAsset = new s3assets.Asset(this, 'AgentBundle', {
      path: props.agentBundleFile ?? bundleAgentSync(props.agentBundleDir ?? resolve(import.meta.dirname, '../cdk.out-agent')).file,
    });
    this.agentRole = this.agentRoleFor(agentAsset, config.ecrRepositories ?? []);
    // The one way a machine writes state: a function URL its instance role may call (and nothing else may).
    // The key of the attempts' credentials (cloud/aws/attempt-credentials.ts): random, made by Secrets Manager, read by the
    // agent API alone. No rotation: a new key voids every credential the agents hold (each gets new ones with its work list).
    const attemptKey = new secretsmanager.Secret(this, 'AttemptCredentialKey', {
      description: "gpu-fleet: the agent API's key for the attempts' credentials",
      generateSecretString: { passwordLength: 64, excludePunctuation: true },
    });
    const agentApi = this.fn('agentApi', {
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
    this.grantAgentApi(agentApi.role!);
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
    for (const g of config.nodeGroups) this.groups.set(g.name, this.nodeGroup(g, config, vpc, nodeSg, agentAsset));
    this.serviceTargets = this.servicesFrontDoor(config, vpc, nodeSg, accessLogs);
    this.grantAgentApiExtras(agentApi, config);

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
    const reconcile = this.fn('reconcile', {
      memoryMb: 1769,
      timeout: Duration.seconds(Math.min(config.policy.reconcileIntervalSec, 300)),
      env: { ...env, ...gcpEnv, ...serviceEnv, ...reservationEnv },
      reservedConcurrency: 1,
    });
    const imageEnv: Record<string, string> = config.images ? { GPU_FLEET_IMAGE_POLICY: JSON.stringify(config.images) } : {};
    const intake = this.fn('intake', { memoryMb: 512, timeout: Duration.seconds(30), env: { ...env, ...serviceEnv, ...imageEnv } });
    const interruption = this.fn('interruption', {
      memoryMb: 512,
      timeout: Duration.seconds(60),
      env: { ...env, GPU_FLEET_RECONCILE_FUNCTION: reconcile.functionName },
    });
    // The people API: people's commands (status, explain, logs, cancel, budget, report) under a team's role or the admin's.
    const peopleApi = this.fn('peopleApi', {
      memoryMb: 1024,
      timeout: Duration.seconds(30),
      env: {
        ...env,
        ...gcpEnv,
        ...serviceEnv,
        GPU_FLEET_PEOPLE_ROLES: JSON.stringify({
          ...Object.fromEntries(config.teams.map((t) => [this.teamRoleName(t.name), t.name])),
          [this.adminRoleName()]: '*',
        }),
        GPU_FLEET_PEOPLE_TEAMS: JSON.stringify(Object.fromEntries(config.teams.map((t) => [t.name, { setsOwnBudget: t.setsOwnBudget }]))),
      },
    });
    this.peopleApiUrl = peopleApi.addFunctionUrl({ authType: lambda.FunctionUrlAuthType.AWS_IAM });
    this.grantPeopleApi(peopleApi.role!, config);
    this.functions = { reconcile, intake, interruption, agentApi, peopleApi };
    this.peopleRoles(config, peopleApi);
    this.grantReconcile(reconcile.role!, config);
    this.grantIntake(intake, config);
    this.grantInterruption(interruption.role!, reconcile);

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
    this.dashboard = this.dashboardFor(config);
    this.alarmsFor(config);

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

  // ---- pieces ---------------------------------------------------------------------------------
  /**
   * The services' front door: the target groups the config names, and, with `loadBalancer`, an
   * Application Load Balancer the stack creates (internal unless said, access logs on, invalid
   * headers dropped) with a listener per service on its own port (HTTPS with a certificate)
   * forwarding to an IP target group on the service's port, health-checked on its readiness path,
   * 30 s deregistration delay. Its security group takes the listener ports from `allowFrom` (the
   * VPC by default) and reaches the nodes on the services' ports only.
   */
  private servicesFrontDoor(
    config: GpuFleetConfig,
    vpc: ec2.IVpc,
    nodeSg: ec2.SecurityGroup,
    accessLogs: s3.Bucket,
  ): { id: string; arn: string; dimension: string }[] {
    const out = Object.entries(config.services?.targetGroups ?? {}).map(([id, arn]) => ({ id, arn, dimension: targetGroupDimension(arn) }));
    const lb = config.services?.loadBalancer;
    if (!lb) return out;
    const from = lb.allowFrom ?? ('create' in config.vpc ? config.vpc.create.cidr : undefined);
    if (!from)
      throw new Error(
        'services.loadBalancer.allowFrom: give the CIDR that may reach the services (with an existing VPC the stack does not know its range)',
      );
    if (lb.internetFacing && !('create' in config.vpc))
      throw new Error(
        'services.loadBalancer.internetFacing: an existing VPC is described by its private subnets only; an internet-facing load balancer needs the stack to create the VPC',
      );
    const sg = new ec2.SecurityGroup(this, 'ServicesLoadBalancerSecurityGroup', {
      vpc,
      description: 'gpu-fleet services load balancer: listener ports from allowFrom, the services ports on the nodes',
      allowAllOutbound: false,
    });
    const alb = new elbv2.ApplicationLoadBalancer(this, 'ServicesLoadBalancer', {
      vpc,
      internetFacing: lb.internetFacing,
      securityGroup: sg,
      dropInvalidHeaderFields: true,
      vpcSubnets: { subnetType: lb.internetFacing ? ec2.SubnetType.PUBLIC : ec2.SubnetType.PRIVATE_WITH_EGRESS },
    });
    alb.logAccessLogs(accessLogs, 'services-load-balancer');
    lb.services.forEach((svc, i) => {
      const tg = new elbv2.ApplicationTargetGroup(this, `ServiceTargetGroup${i}`, {
        vpc,
        targetType: elbv2.TargetType.IP,
        port: svc.port,
        protocol: elbv2.ApplicationProtocol.HTTP,
        healthCheck: { path: svc.healthCheckPath, interval: Duration.seconds(10), healthyThresholdCount: 2 },
        deregistrationDelay: Duration.seconds(SERVICE_DEREGISTRATION_DELAY_SEC),
      });
      alb.addListener(`ServiceListener${i}`, {
        port: svc.listenerPort,
        open: false,
        ...(lb.certificateArn
          ? { protocol: elbv2.ApplicationProtocol.HTTPS, certificates: [elbv2.ListenerCertificate.fromArn(lb.certificateArn)] }
          : { protocol: elbv2.ApplicationProtocol.HTTP }),
        defaultTargetGroups: [tg],
      });
      sg.addIngressRule(ec2.Peer.ipv4(from), ec2.Port.tcp(svc.listenerPort), `${svc.id}: clients`);
      sg.addEgressRule(nodeSg, ec2.Port.tcp(svc.port), `${svc.id}: its replicas`);
      nodeSg.addIngressRule(sg, ec2.Port.tcp(svc.port), `${svc.id}: from the services load balancer`);
      out.push({ id: svc.id, arn: tg.targetGroupArn, dimension: tg.targetGroupFullName });
    });
    new CfnOutput(this, 'ServicesLoadBalancerDns', {
      value: alb.loadBalancerDnsName,
      description: 'the services load balancer (one listener port per service)',
    });
    return out;
  }

  private network(config: GpuFleetConfig): ec2.IVpc {
    if ('existing' in config.vpc) {
      // No lookup at synth time: the VPC is described by its ids.
      return ec2.Vpc.fromVpcAttributes(this, 'Vpc', {
        vpcId: config.vpc.existing.vpcId,
        availabilityZones: config.vpc.existing.zones,
        privateSubnetIds: config.vpc.existing.privateSubnetIds,
      });
    }
    const create = config.vpc.create;
    // A NAT gateway in every zone by default: a zone's failure then cuts off only its own machines (docs/getting-started.md prices it).
    const vpc = new ec2.Vpc(this, 'Vpc', {
      ipAddresses: ec2.IpAddresses.cidr(create.cidr),
      availabilityZones: create.zones,
      natGateways: create.natGateways ?? create.zones.length,
      subnetConfiguration: [
        { name: 'public', subnetType: ec2.SubnetType.PUBLIC, cidrMask: 24 },
        { name: 'nodes', subnetType: ec2.SubnetType.PRIVATE_WITH_EGRESS, cidrMask: 20 },
      ],
    });
    // Checkpoint bytes (and ECR's image layers, which S3 serves) go to S3 through a gateway endpoint on the node
    // subnets' route tables: no hourly charge and no data processing, where a NAT gateway charges $0.045 a GB.
    vpc.addGatewayEndpoint('S3Endpoint', {
      service: ec2.GatewayVpcEndpointAwsService.S3,
      subnets: [{ subnetType: ec2.SubnetType.PRIVATE_WITH_EGRESS }],
    });
    const services: Record<(typeof create.interfaceEndpoints & {})[number], ec2.InterfaceVpcEndpointAwsService[]> = {
      ecr: [ec2.InterfaceVpcEndpointAwsService.ECR, ec2.InterfaceVpcEndpointAwsService.ECR_DOCKER],
      monitoring: [ec2.InterfaceVpcEndpointAwsService.CLOUDWATCH_MONITORING],
    };
    // Each endpoint is closed but to the GPU nodes (opened once their security group exists: see nodeSecurityGroup).
    for (const name of create.interfaceEndpoints ?? [])
      services[name].forEach((service, i) =>
        this.interfaceEndpoints.push(
          vpc.addInterfaceEndpoint(`${name === 'ecr' ? (i === 0 ? 'EcrApi' : 'EcrDocker') : 'Monitoring'}Endpoint`, {
            service,
            subnets: { subnetType: ec2.SubnetType.PRIVATE_WITH_EGRESS },
            privateDnsEnabled: true,
            open: false,
          }),
        ),
      );
    const flowLogs = new logs.LogGroup(this, 'VpcFlowLogs', {
      retention: logs.RetentionDays.ONE_MONTH,
      encryptionKey: this.key,
      removalPolicy: RemovalPolicy.DESTROY,
    });
    vpc.addFlowLog('FlowLog', {
      destination: ec2.FlowLogDestination.toCloudWatchLogs(flowLogs),
      trafficType: ec2.FlowLogTrafficType.REJECT,
    });
    return vpc;
  }

  /**
   * What the agent on a GPU node may do: call the agent API (which checks each write against the
   * node's own records), publish its GPU metrics, fetch its bundle, pull job images. No table, no
   * checkpoint object, no key: its state and its jobs' checkpoints go through the API.
   */
  private agentRoleFor(agentAsset: s3assets.Asset, ecrRepositories: readonly string[]): iam.Role {
    const role = new iam.Role(this, 'AgentRole', {
      assumedBy: new iam.ServicePrincipal('ec2.amazonaws.com'),
      description: 'gpu-fleet node agent',
    });
    role.addToPolicy(
      new iam.PolicyStatement({
        sid: 'GpuMetrics',
        actions: ['cloudwatch:PutMetricData'],
        resources: ['*'],
        conditions: { StringEquals: { 'cloudwatch:namespace': AGENT_METRICS.namespace } },
      }),
    );
    // Job images from ECR: only the repositories the config names (none without them).
    const repositories = ecrRepositories.map((r) => `arn:${this.partition}:ecr:${this.region}:${this.account}:repository/${r}`);
    if (repositories.length > 0) {
      role.addToPolicy(new iam.PolicyStatement({ sid: 'EcrLogin', actions: ['ecr:GetAuthorizationToken'], resources: ['*'] }));
      role.addToPolicy(
        new iam.PolicyStatement({
          sid: 'EcrPull',
          actions: ['ecr:BatchGetImage', 'ecr:GetDownloadUrlForLayer', 'ecr:BatchCheckLayerAvailability'],
          resources: repositories,
        }),
      );
    }
    // Exactly the bundle object, not the whole asset bucket.
    role.addToPolicy(
      new iam.PolicyStatement({
        sid: 'AgentBundle',
        actions: ['s3:GetObject'],
        resources: [`arn:${this.partition}:s3:::${agentAsset.s3BucketName}/${agentAsset.s3ObjectKey}`],
      }),
    );
    acknowledge(role, {
      'AwsSolutions-IAM5[Resource::*]':
        'cloudwatch:PutMetricData and ecr:GetAuthorizationToken support no resource-level permissions; PutMetricData is held to the GpuFleet namespace by a condition.',
      ...Object.fromEntries(
        ecrRepositories
          .filter((r) => r.endsWith('*'))
          .map((r) => [
            `AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:ecr:${nagRegion(this)}:<AWS::AccountId>:repository/${r}]`,
            `The fleet config lets the machines pull (read only) from the ECR repositories under ${r}, as it names them.`,
          ]),
      ),
    });
    return role;
  }

  private nodeGroup(
    g: NodeGroupConfig,
    config: GpuFleetConfig,
    vpc: ec2.IVpc,
    sg: ec2.SecurityGroup,
    agentAsset: s3assets.Asset,
  ): autoscaling.AutoScalingGroup {
    const machineImage =
      'ssmParameter' in g.ami
        ? ec2.MachineImage.fromSsmParameter(g.ami.ssmParameter, { os: ec2.OperatingSystemType.LINUX })
        : ec2.MachineImage.genericLinux({ [config.region]: g.ami.amiId });
    const userData = ec2.UserData.forLinux();
    userData.addCommands(
      ...agentUserData({
        assetUrl: agentAsset.s3ObjectUrl,
        region: this.region,
        agentApiUrl: this.agentApiUrl.url,
        bucket: this.bucket.bucketName,
        noticeMarginSec: config.policy.noticeMarginSec,
        migEnabled: g.migEnabled,
        ...(g.warmPool ? { launchHook: LAUNCH_HOOK_NAME } : {}),
        ...(config.prometheus ? { prometheusPort: config.prometheus.port } : {}),
        ...(config.dcgmExporterUrl ? { dcgmExporterUrl: config.dcgmExporterUrl } : {}),
        openPorts: [
          ...(config.services?.loadBalancer?.services.map((s) => s.port) ?? []),
          ...(config.services?.replicaPorts ?? []).map((r) => r.port),
        ],
      }),
    );
    const template = new ec2.LaunchTemplate(this, `LaunchTemplate-${g.name}`, {
      machineImage,
      role: this.agentRole,
      securityGroup: sg,
      userData,
      requireImdsv2: true,
      httpPutResponseHopLimit: 1, // containers on the bridge network cannot reach the node's credentials
      instanceMetadataTags: true, // the agent reads its group name from the instance's tags
      blockDevices: [
        {
          deviceName: '/dev/xvda',
          volume: ec2.BlockDeviceVolume.ebs(g.diskGiB, {
            volumeType: ec2.EbsDeviceVolumeType.GP3,
            encrypted: true,
            deleteOnTermination: true,
          }),
        },
        // Docker's data and the job folders' disks, apart from the root volume (the node's boot mounts it: dataVolumeScript).
        ...(g.dataDiskGiB !== undefined
          ? [
              {
                deviceName: DATA_VOLUME_DEVICE,
                volume: ec2.BlockDeviceVolume.ebs(g.dataDiskGiB, {
                  volumeType: ec2.EbsDeviceVolumeType.GP3,
                  encrypted: true,
                  deleteOnTermination: true,
                }),
              },
            ]
          : []),
      ],
      detailedMonitoring: true,
      // A reserved group launches its one type into its reservation (the template names both); a group with a warm
      // pool launches its one type from the template too (a warm pool cannot go with a mixed instances policy).
      ...(g.reservation || g.warmPool ? { instanceType: new ec2.InstanceType(g.instanceTypes[0]!) } : {}),
      // Hibernated warm machines keep their memory on the (encrypted) root volume.
      ...(g.warmPool?.state === 'Hibernated' ? { hibernationConfigured: true } : {}),
    });
    if (g.reservation) {
      // The L2 template has no reservation target or capacity-block market: set them on the template's data.
      const data = template.node.defaultChild as ec2.CfnLaunchTemplate;
      data.addPropertyOverride('LaunchTemplateData.CapacityReservationSpecification', {
        CapacityReservationTarget: { CapacityReservationId: g.reservation.id },
      });
      if (g.reservation.kind === 'capacity-block')
        data.addPropertyOverride('LaunchTemplateData.InstanceMarketOptions', { MarketType: 'capacity-block' });
    }
    const spot = g.capacityType === 'spot';
    const subnets: ec2.SubnetSelection = g.subnetIds
      ? { subnets: g.subnetIds.map((id, i) => ec2.Subnet.fromSubnetAttributes(this, `Subnet-${g.name}-${i}`, { subnetId: id })) }
      : { subnetType: ec2.SubnetType.PRIVATE_WITH_EGRESS, availabilityZones: g.zones! };
    const asg = new autoscaling.AutoScalingGroup(this, `NodeGroup-${g.name}`, {
      vpc,
      vpcSubnets: subnets,
      autoScalingGroupName: this.groupName(g.name),
      minCapacity: g.minSize,
      maxCapacity: g.maxSize,
      // No desired capacity: reconcile owns it, and a deploy must not reset it.
      // A reserved group launches its template as it is (one type, into its reservation), as does one with a warm pool;
      // the others mix their types.
      ...(g.reservation || g.warmPool
        ? { launchTemplate: template }
        : {
            mixedInstancesPolicy: {
              launchTemplate: template,
              launchTemplateOverrides: g.instanceTypes.map((t) => ({ instanceType: new ec2.InstanceType(t) })),
              instancesDistribution: {
                onDemandBaseCapacity: 0,
                onDemandPercentageAboveBaseCapacity: spot ? 0 : 100,
                ...(spot
                  ? { spotAllocationStrategy: autoscaling.SpotAllocationStrategy.PRICE_CAPACITY_OPTIMIZED }
                  : { onDemandAllocationStrategy: autoscaling.OnDemandAllocationStrategy.LOWEST_PRICE }),
              },
            },
          }),
      capacityRebalance: spot,
      healthChecks: autoscaling.HealthChecks.ec2({ gracePeriod: Duration.minutes(10) }),
      groupMetrics: [autoscaling.GroupMetrics.all()],
    });
    // Machines prepared ahead: MinSize and MaxGroupPreparedCapacity equal give the pool an absolute size (PutWarmPool).
    if (g.warmPool)
      asg.addWarmPool({
        minSize: g.warmPool.size,
        maxGroupPreparedCapacity: g.warmPool.size,
        poolState: g.warmPool.state === 'Hibernated' ? autoscaling.PoolState.HIBERNATED : autoscaling.PoolState.STOPPED,
      });
    if (g.warmPool)
      asg.addLifecycleHook('Prepare', {
        lifecycleHookName: LAUNCH_HOOK_NAME,
        lifecycleTransition: autoscaling.LifecycleTransition.INSTANCE_LAUNCHING,
        heartbeatTimeout: Duration.seconds(LAUNCH_HOOK_TIMEOUT_SEC),
        defaultResult: autoscaling.DefaultResult.CONTINUE,
      });
    asg.addLifecycleHook('Drain', {
      lifecycleHookName: LIFECYCLE_HOOK_NAME,
      lifecycleTransition: autoscaling.LifecycleTransition.INSTANCE_TERMINATING,
      heartbeatTimeout: Duration.seconds(LIFECYCLE_TIMEOUT_SEC),
      defaultResult: autoscaling.DefaultResult.CONTINUE,
    });
    Tags.of(asg).add(GROUP_TAGS.managed, 'true', { applyToLaunchedInstances: true });
    Tags.of(asg).add(GROUP_TAGS.capacityType, g.capacityType, { applyToLaunchedInstances: true });
    if (g.migEnabled) Tags.of(asg).add(GROUP_TAGS.mig, MIG_TAG_VALUE, { applyToLaunchedInstances: true });
    if (g.reservation) Tags.of(asg).add(GROUP_TAGS.reservation, g.reservation.id, { applyToLaunchedInstances: true });
    acknowledge(asg, {
      'AwsSolutions-EC26':
        'The root volume is encrypted (gp3, encrypted) in the launch template; the rule cannot read through the launch template reference.',
    });
    acknowledge(asg, {
      'AwsSolutions-AS3':
        "Scaling is gpu-fleet's own decision, recorded with its reasons in every reconcile's decision record and metrics; an SNS notification per launch would repeat it.",
    });
    return asg;
  }

  private fn(
    name: FunctionName,
    o: { memoryMb: number; timeout: Duration; env: Record<string, string>; reservedConcurrency?: number },
  ): lambda.Function {
    const logGroup = new logs.LogGroup(this, `${name}Logs`, {
      retention: logs.RetentionDays.ONE_MONTH,
      encryptionKey: this.key,
      removalPolicy: RemovalPolicy.DESTROY,
    });
    const role = new iam.Role(this, `${name}Role`, {
      assumedBy: new iam.ServicePrincipal('lambda.amazonaws.com'),
      description: `gpu-fleet ${name} function`,
    });
    logGroup.grantWrite(role);
    const f = new lambda.Function(this, `${name}Function`, {
      code: this.functionCode(name),
      handler: 'index.handler',
      runtime: lambda.Runtime.NODEJS_22_X,
      architecture: lambda.Architecture.ARM_64,
      memorySize: o.memoryMb,
      timeout: o.timeout,
      role,
      logGroup,
      tracing: lambda.Tracing.ACTIVE,
      environment: { ...o.env, POWERTOOLS_SERVICE_NAME: `gpu-fleet-${name}`, NODE_OPTIONS: '--enable-source-maps' },
      ...(o.reservedConcurrency !== undefined ? { reservedConcurrentExecutions: o.reservedConcurrency } : {}),
      // Called synchronously (an SQS batch, a function URL): the caller sees a failure and retries; no failure destination.
      ...(name === 'intake' || name === 'agentApi' || name === 'peopleApi'
        ? {}
        : { onFailure: new destinations.SqsDestination(this.failures), retryAttempts: 2 }),
    });
    acknowledge(role, {
      'AwsSolutions-IAM5[Resource::*]':
        'X-Ray trace segments (Lambda active tracing) and the Describe/List/GetMetricData/GetResources calls in this policy support no resource-level permissions.',
    });
    acknowledge(f, {
      'AwsSolutions-L1': 'Node.js 22 is the runtime gpu-fleet is built and tested for; Node.js 24 has not been qualified yet.',
    });
    return f;
  }

  /**
   * A function's code: the folder infra/app.ts bundled it into (infra/bundling.ts, the options
   * bench:bundles measures). A stack built without bundles is allowed only where CDK skips
   * bundling (tests, `cdk synth --exclusively` of another stack); it gets a placeholder.
   */
  private functionCode(name: FunctionName): lambda.Code {
    const dir = this.bundles?.[name];
    if (dir) return lambda.Code.fromAsset(dir);
    if (this.bundlingRequired)
      throw new Error(
        `no bundle for the ${name} function (${FUNCTION_ENTRIES[name]}): infra/app.ts bundles the functions before it builds the stack`,
      );
    return lambda.Code.fromInline(
      `exports.handler = async () => { throw new Error('the ${name} function was synthesised without its bundle'); };`,
    );
  }

  /** Use of the stack's key for the tables, queues and bucket a role touches: no wildcard actions. */
  private allowKey(role: iam.IRole): void {
    allow(role, 'StackKey', ['kms:Decrypt', 'kms:Encrypt', 'kms:GenerateDataKey', 'kms:DescribeKey'], [this.key.keyArn]);
  }

  private groupArns(): string[] {
    return [...this.groups.keys()].map(
      (name) =>
        `arn:${this.partition}:autoscaling:${this.region}:${this.account}:autoScalingGroup:*:autoScalingGroupName/${this.groupName(name)}`,
    );
  }

  /** An Auto Scaling group's name: fixed, so policies and rules name it without a reference. */
  groupName(nodeGroup: string): string {
    return `${this.stackName}-${nodeGroup}`;
  }

  /** Mutating Auto Scaling calls: gpu-fleet's groups by name, and only while they carry the managed tag. */
  private managedGroupStatement(role: iam.IRole, sid: string, actions: string[]): void {
    allow(role, sid, actions, this.groupArns(), { StringEquals: { [`aws:ResourceTag/${GROUP_TAGS.managed}`]: 'true' } });
    const reasons: Record<string, string> = {};
    for (const name of this.groups.keys()) {
      reasons[
        `AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:autoscaling:${nagRegion(this)}:<AWS::AccountId>:autoScalingGroup:*:autoScalingGroupName/${this.groupName(name)}]`
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
  private grantAgentApiExtras(agentApi: lambda.Function, config: GpuFleetConfig): void {
    const role = agentApi.role!;
    // GCP regions' checkpoint buckets: a machine resuming a job moved from GCP reads its save through URLs the API signs
    // with the control plane's service account key.
    if (config.gcp?.checkpointRoots) {
      agentApi.addEnvironment('GPU_FLEET_GCP_PROJECTS', JSON.stringify(config.gcp.projects));
      agentApi.addEnvironment('GPU_FLEET_GCP_CREDENTIALS_SECRET', config.gcp.credentialsSecretName);
      agentApi.addEnvironment('GPU_FLEET_GCP_CHECKPOINT_ROOTS', JSON.stringify(config.gcp.checkpointRoots));
      this.allowGcpCredentials(role, config.gcp);
    }
    if (this.serviceTargets.length > 0) {
      agentApi.addEnvironment(
        'GPU_FLEET_SERVICE_TARGET_GROUPS',
        this.toJsonString(Object.fromEntries(this.serviceTargets.map((t) => [t.id, t.arn]))),
      );
      allow(
        role,
        'ServiceTargetsLeave',
        ['elasticloadbalancing:DeregisterTargets'],
        this.serviceTargets.map((t) => t.arn),
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
    this.managedGroupStatement(role, 'LetPreparedMachinesLaunch', ['autoscaling:CompleteLifecycleAction']);
    if (this.serviceTargets.length > 0)
      role.addToPrincipalPolicy(
        new iam.PolicyStatement({
          sid: 'ServiceRecordsRead',
          actions: ['dynamodb:Query'],
          resources: [this.tables.control.tableArn],
          conditions: { 'ForAllValues:StringEquals': { 'dynamodb:LeadingKeys': ['service'] } },
        }),
      );
  }

  /**
   * The agent API's own permissions: what the agents needed when they wrote directly, now held by
   * the one function that checks every call against the caller's records first.
   */
  private grantAgentApi(role: iam.IRole): void {
    // Job output: streams in the jobs' log group only; which attempt a machine may write is checked per call (core/services/agent-access.ts).
    role.addToPrincipalPolicy(
      new iam.PolicyStatement({
        sid: 'JobOutput',
        actions: ['logs:CreateLogStream', 'logs:PutLogEvents'],
        resources: [`${this.jobLogs.logGroupArn}:log-stream:*`],
      }),
    );
    allow(role, 'JobsOfTheCallingNode', ['dynamodb:GetItem', 'dynamodb:PutItem'], [this.tables.jobs.tableArn]);
    allow(role, 'TheCallingNodesRecord', ['dynamodb:GetItem', 'dynamodb:UpdateItem'], [this.tables.nodes.tableArn]);
    role.addToPrincipalPolicy(
      new iam.PolicyStatement({
        sid: 'CheckpointIndexOnly',
        // The newest checkpoint of each job, and the parts a gang's ranks have saved of one.
        actions: ['dynamodb:GetItem', 'dynamodb:PutItem', 'dynamodb:UpdateItem'],
        resources: [this.tables.control.tableArn],
        conditions: { 'ForAllValues:StringEquals': { 'dynamodb:LeadingKeys': ['ckpt', 'ckpt-parts'] } },
      }),
    );
    role.addToPrincipalPolicy(
      new iam.PolicyStatement({
        sid: 'CheckpointObjects',
        // Presigned URLs carry these: each URL it hands out is one object of a job the caller holds.
        actions: ['s3:GetObject', 's3:PutObject', 's3:AbortMultipartUpload'],
        resources: [this.bucket.arnForObjects('checkpoints/*')],
      }),
    );
    allow(role, 'ListCheckpoints', ['s3:ListBucket'], [this.bucket.bucketArn], { StringLike: { 's3:prefix': ['checkpoints/*'] } });
    this.allowKey(role);
    // Secrets by reference (core/secrets.ts): only under the teams' gpu-fleet/ prefixes; which team's a machine gets is checked
    // per call (the attempt's credential, its job's team).
    allow(
      role,
      'TeamSecretsParameters',
      ['ssm:GetParameter'],
      [`arn:${this.partition}:ssm:${this.region}:${this.account}:parameter/gpu-fleet/*`],
    );
    allow(
      role,
      'TeamSecrets',
      ['secretsmanager:GetSecretValue'],
      [`arn:${this.partition}:secretsmanager:${this.region}:${this.account}:secret:gpu-fleet/*`],
    );
    acknowledge(role, {
      [`AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:ssm:${nagRegion(this)}:<AWS::AccountId>:parameter/gpu-fleet/*]`]:
        "The teams' secrets, which jobs name by reference: a machine is given only its attempt's job's own team's, checked per call.",
      [`AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:secretsmanager:${nagRegion(this)}:<AWS::AccountId>:secret:gpu-fleet/*]`]:
        "The teams' secrets, which jobs name by reference: a machine is given only its attempt's job's own team's, checked per call.",
    });
    acknowledge(role, {
      [`AwsSolutions-IAM5[Resource::<${this.getLogicalId(this.bucket.node.defaultChild as s3.CfnBucket)}.Arn>/checkpoints/*]`]:
        'The agent API signs URLs for the checkpoints of whichever jobs the calling machine holds (checked per call): every key under the checkpoints/ prefix, nothing else in the bucket.',
      [`AwsSolutions-IAM5[Resource::<${this.getLogicalId(this.jobLogs.node.defaultChild as logs.CfnLogGroup)}.Arn>:log-stream:*]`]:
        "The jobs' output has a stream per attempt and rank, created as jobs run: any stream of the jobs' log group, nothing else; which attempt a machine may write is checked per call.",
    });
  }

  private teamRoleName(team: string): string {
    return `${this.stackName}-team-${team}`.slice(0, 64);
  }

  private adminRoleName(): string {
    return `${this.stackName}-admin`.slice(0, 64);
  }

  /** What the people API reads to answer (the tables, queues, groups, metrics, job output) and writes (a cancel). */
  private grantPeopleApi(role: iam.IRole, config: GpuFleetConfig): void {
    const jobs = this.tables.jobs;
    allow(
      role,
      'ReadJobs',
      ['dynamodb:GetItem', 'dynamodb:Query'],
      [jobs.tableArn, ...TABLES.jobs.indexes.map((ix) => `${jobs.tableArn}/index/${ix.name}`)],
    );
    // A cancel: the job's conditional write (and a service's record, which lives in the control table).
    allow(role, 'CancelJobs', ['dynamodb:PutItem'], [jobs.tableArn]);
    allow(role, 'ReadNodes', ['dynamodb:GetItem', 'dynamodb:Scan'], [this.tables.nodes.tableArn]);
    allow(role, 'Control', ['dynamodb:GetItem', 'dynamodb:Query', 'dynamodb:PutItem'], [this.tables.control.tableArn]);
    this.allowKey(role);
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
      [...this.teamQueues.values()].map((q) => q.queueArn),
    );
    allow(role, 'ReadJobOutput', ['logs:GetLogEvents', 'logs:FilterLogEvents', 'logs:DescribeLogStreams'], [this.jobLogs.logGroupArn]);
    if (config.gcp) this.allowGcpCredentials(role, config.gcp);
  }

  /**
   * A role per team and the platform's admin role. A team's role calls the people API (which
   * answers for its team only), sends to its own queue, keeps its own secrets under
   * gpu-fleet/<team>/, and tags its own queue (sets its budget) only where the config says so;
   * it is denied the state, the output and the bucket outright, and tagging any other queue.
   * Who may assume them is the account's to grant (an IAM policy or an SSO permission set).
   */
  private peopleRoles(config: GpuFleetConfig, peopleApi: lambda.Function): void {
    const assumedBy = () =>
      config.people.assumeRoleFrom.length > 0
        ? new iam.CompositePrincipal(
            ...config.people.assumeRoleFrom.map((p) => (/^\d{12}$/.test(p) ? new iam.AccountPrincipal(p) : new iam.ArnPrincipal(p))),
          )
        : new iam.AccountRootPrincipal();
    const stackArn = `arn:${this.partition}:cloudformation:${this.region}:${this.account}:stack/${this.stackName}/*`;
    const sqsViaService = { StringEquals: { 'kms:ViaService': `sqs.${this.region}.amazonaws.com` } };
    const queueArns = [...this.teamQueues.values()].map((q) => q.queueArn);
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
      allow(role, 'QueueKey', ['kms:GenerateDataKey', 'kms:Decrypt'], [this.key.keyArn], sqsViaService);
    };
    for (const team of config.teams) {
      const queue = this.teamQueues.get(team.name)!;
      const role = new iam.Role(this, `TeamRole-${team.name}`, {
        roleName: this.teamRoleName(team.name),
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
        [`arn:${this.partition}:ssm:${this.region}:${this.account}:parameter/gpu-fleet/${team.name}/*`],
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
        [`arn:${this.partition}:secretsmanager:${this.region}:${this.account}:secret:gpu-fleet/${team.name}/*`],
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
          resources: others.length > 0 ? others : [this.deadLetters.queueArn],
        }),
      );
      role.addToPrincipalPolicy(
        new iam.PolicyStatement({
          sid: 'NeverTheStateDirectly',
          effect: iam.Effect.DENY,
          actions: ['dynamodb:*', 'logs:GetLogEvents', 'logs:FilterLogEvents', 'logs:StartQuery', 's3:GetObject', 's3:ListBucket'],
          resources: [
            ...Object.values(this.tables).flatMap((t) => [t.tableArn, `${t.tableArn}/index/*`]),
            this.jobLogs.logGroupArn,
            this.bucket.bucketArn,
            this.bucket.arnForObjects('*'),
          ],
        }),
      );
      acknowledge(role, {
        'AwsSolutions-IAM5[Resource::*]': 'sqs:ListQueues takes no resource: it finds the team queue by its prefix.',
        [`AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:cloudformation:${nagRegion(this)}:<AWS::AccountId>:stack/${this.stackName}/*]`]:
          "DescribeStacks of this stack alone (its id is the wildcard part): the CLI finds the fleet's names in its outputs.",
        [`AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:ssm:${nagRegion(this)}:<AWS::AccountId>:parameter/gpu-fleet/${team.name}/*]`]:
          "The team's own secrets, under its own prefix: no other team's.",
        [`AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:secretsmanager:${nagRegion(this)}:<AWS::AccountId>:secret:gpu-fleet/${team.name}/*]`]:
          "The team's own secrets, under its own prefix: no other team's.",
        'AwsSolutions-IAM5[Action::dynamodb:*]': 'A Deny: the team role reaches the state only through the people API.',
        [`AwsSolutions-IAM5[Resource::<${this.getLogicalId(this.bucket.node.defaultChild as s3.CfnBucket)}.Arn>/*]`]:
          'A Deny: the team role reads no checkpoint itself.',
        ...Object.fromEntries(
          Object.values(this.tables).map((t) => [
            `AwsSolutions-IAM5[Resource::<${this.getLogicalId(t.node.defaultChild as dynamodb.CfnTable)}.Arn>/index/*]`,
            'A Deny: the team role queries no index itself.',
          ]),
        ),
      });
      this.teamRoles.set(team.name, role);
    }
    this.adminRole = new iam.Role(this, 'AdminRole', {
      roleName: this.adminRoleName(),
      assumedBy: assumedBy(),
      description: "gpu-fleet: the platform's admin (every team's jobs, output and spend; every team's budget)",
      maxSessionDuration: Duration.hours(12),
    });
    common(this.adminRole);
    allow(this.adminRole, 'SubmitAny', ['sqs:SendMessage', 'sqs:GetQueueUrl', 'sqs:GetQueueAttributes'], queueArns);
    allow(this.adminRole, 'SetBudgets', [...tagActions, 'sqs:ListQueueTags'], queueArns);
    acknowledge(this.adminRole, {
      'AwsSolutions-IAM5[Resource::*]': 'sqs:ListQueues takes no resource: it finds the team queues by their prefix.',
      [`AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:cloudformation:${nagRegion(this)}:<AWS::AccountId>:stack/${this.stackName}/*]`]:
        "DescribeStacks of this stack alone (its id is the wildcard part): the CLI finds the fleet's names in its outputs.",
    });
    new CfnOutput(this, 'TeamRoleArns', {
      value: this.toJsonString(Object.fromEntries([...this.teamRoles].map(([t, r]) => [t, r.roleArn]))),
      description:
        "each team's role: its people assume it to submit to, see and cancel the team's own work (docs/concepts.md, People and roles)",
    });
    new CfnOutput(this, 'AdminRoleArn', {
      value: this.adminRole.roleArn,
      description: "the platform's admin role: every team, every budget",
    });
  }

  private grantReconcile(role: iam.IRole, config: GpuFleetConfig): void {
    const jobs = this.tables.jobs;
    allow(
      role,
      'Jobs',
      ['dynamodb:GetItem', 'dynamodb:PutItem', 'dynamodb:Query'],
      [jobs.tableArn, ...TABLES.jobs.indexes.map((ix) => `${jobs.tableArn}/index/${ix.name}`)],
    );
    allow(role, 'Nodes', ['dynamodb:GetItem', 'dynamodb:UpdateItem', 'dynamodb:DeleteItem', 'dynamodb:Scan'], [this.tables.nodes.tableArn]);
    allow(
      role,
      'Control',
      ['dynamodb:GetItem', 'dynamodb:PutItem', 'dynamodb:UpdateItem', 'dynamodb:DeleteItem', 'dynamodb:Query', 'dynamodb:BatchWriteItem'],
      [this.tables.control.tableArn],
    );
    this.allowKey(role);
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
    this.managedGroupStatement(role, 'ScaleManagedGroups', [
      'autoscaling:SetDesiredCapacity',
      'autoscaling:TerminateInstanceInAutoScalingGroup',
      'autoscaling:SetInstanceProtection',
      'autoscaling:CompleteLifecycleAction',
      // Keeps a draining machine in its hook while a checkpoint is still being written or uploaded.
      'autoscaling:RecordLifecycleActionHeartbeat',
    ]);
    // The checkpoint retention (cloud/aws/checkpoint-sweep.ts): lists the job folders, deletes what the index lets go.
    allow(role, 'SweepCheckpoints', ['s3:DeleteObject'], [this.bucket.arnForObjects('checkpoints/*')]);
    allow(role, 'ListCheckpointFolders', ['s3:ListBucket'], [this.bucket.bucketArn], { StringLike: { 's3:prefix': ['checkpoints/*'] } });
    acknowledge(role, {
      [`AwsSolutions-IAM5[Resource::<${this.getLogicalId(this.bucket.node.defaultChild as s3.CfnBucket)}.Arn>/checkpoints/*]`]:
        "The checkpoint retention deletes checkpoints past their retention that no attempt will resume from (never a live job's newest), job by job: any key under the checkpoints/ prefix, nothing else in the bucket.",
    });
    allow(
      role,
      'QueueDepth',
      ['sqs:GetQueueAttributes'],
      [...this.teamQueues.values()].map((q) => q.queueArn),
    );
    if (this.serviceTargets.length > 0) {
      // Register and deregister replicas in the services' own target groups only.
      allow(
        role,
        'ServiceTargets',
        ['elasticloadbalancing:RegisterTargets', 'elasticloadbalancing:DeregisterTargets'],
        this.serviceTargets.map((t) => t.arn),
      );
      // DescribeTargetHealth takes no resource-level permission (Service Authorization Reference).
      allow(role, 'ServiceTargetHealth', ['elasticloadbalancing:DescribeTargetHealth'], ['*']);
    }
    if (config.gcp) {
      this.allowGcpCredentials(role, config.gcp);
    }
  }

  /** The control plane's GCP service account key, for a function that calls GCP (its secret's ARN ends in six random characters). */
  private allowGcpCredentials(role: iam.IRole, gcp: NonNullable<GpuFleetConfig['gcp']>): void {
    allow(
      role,
      'GcpCredentials',
      ['secretsmanager:GetSecretValue'],
      [`arn:${this.partition}:secretsmanager:${this.region}:${this.account}:secret:${gcp.credentialsSecretName}-??????`],
    );
  }

  private grantIntake(intake: lambda.Function, config: GpuFleetConfig): void {
    const role = intake.role!;
    // A service's record is a control-table item (pk "service"): intake creates and updates it, and touches nothing else there.
    if (config.services)
      role.addToPrincipalPolicy(
        new iam.PolicyStatement({
          sid: 'ServiceRecords',
          actions: ['dynamodb:GetItem', 'dynamodb:PutItem'],
          resources: [this.tables.control.tableArn],
          conditions: { 'ForAllValues:StringEquals': { 'dynamodb:LeadingKeys': ['service'] } },
        }),
      );
    role.addToPrincipalPolicy(
      new iam.PolicyStatement({ sid: 'Jobs', actions: ['dynamodb:GetItem', 'dynamodb:PutItem'], resources: [this.tables.jobs.tableArn] }),
    );
    // A spec with gpu.rightsize reads its family's measured runs (control-table items under pk "family"; reconcile writes them).
    role.addToPrincipalPolicy(
      new iam.PolicyStatement({
        sid: 'RightsizingFamilies',
        actions: ['dynamodb:GetItem'],
        resources: [this.tables.control.tableArn],
        conditions: { 'ForAllValues:StringEquals': { 'dynamodb:LeadingKeys': ['family'] } },
      }),
    );
    allow(
      role,
      'Idempotency',
      ['dynamodb:GetItem', 'dynamodb:PutItem', 'dynamodb:UpdateItem', 'dynamodb:DeleteItem'],
      [this.tables.idempotency.tableArn],
    );
    this.deadLetters.grantSendMessages(role);
    this.allowKey(role);
    // Intake says at once when no node group can ever hold a job: it lists the managed groups (read only).
    allow(role, 'DescribeGroups', ['autoscaling:DescribeAutoScalingGroups', 'ec2:DescribeLaunchTemplateVersions'], ['*']);
  }

  private grantInterruption(role: iam.IRole, reconcile: lambda.IFunction): void {
    const jobs = this.tables.jobs;
    allow(
      role,
      'Jobs',
      ['dynamodb:GetItem', 'dynamodb:PutItem', 'dynamodb:Query'],
      [jobs.tableArn, ...TABLES.jobs.indexes.map((ix) => `${jobs.tableArn}/index/${ix.name}`)],
    );
    allow(role, 'Nodes', ['dynamodb:GetItem', 'dynamodb:UpdateItem'], [this.tables.nodes.tableArn]);
    allow(
      role,
      'Control',
      ['dynamodb:GetItem', 'dynamodb:PutItem', 'dynamodb:UpdateItem', 'dynamodb:Query'],
      [this.tables.control.tableArn],
    );
    allow(
      role,
      'Idempotency',
      ['dynamodb:GetItem', 'dynamodb:PutItem', 'dynamodb:UpdateItem', 'dynamodb:DeleteItem'],
      [this.tables.idempotency.tableArn],
    );
    this.allowKey(role);
    allow(
      role,
      'Describe',
      ['autoscaling:DescribeAutoScalingInstances', 'autoscaling:DescribeAutoScalingGroups', 'ec2:DescribeInstances'],
      ['*'],
    );
    this.managedGroupStatement(role, 'ReleaseDrainedMachines', ['autoscaling:CompleteLifecycleAction']);
    role.addToPrincipalPolicy(
      new iam.PolicyStatement({ sid: 'ReconcileSoon', actions: ['lambda:InvokeFunction'], resources: [reconcile.functionArn] }),
    );
  }

  private dashboardFor(config: GpuFleetConfig): cloudwatch.Dashboard {
    const ns = METRICS_NAMESPACE;
    const search = (expr: string, label: string, period = Duration.minutes(1)) =>
      new cloudwatch.MathExpression({ expression: expr, label, period, usingMetrics: {} });
    const d = new cloudwatch.Dashboard(this, 'Dashboard', {
      dashboardName: `${this.stackName}-gpu-fleet`,
      defaultInterval: Duration.hours(6),
    });
    d.addWidgets(
      new cloudwatch.GraphWidget({
        title: 'Queue depth per team',
        width: 12,
        left: [search(`SEARCH('{${ns},Team,service} MetricName="QueueDepth"', 'Maximum', 60)`, '')],
      }),
      new cloudwatch.GraphWidget({
        title: 'Jobs waiting and running',
        width: 12,
        left: ['PendingJobs', 'RunningJobs', 'PendingGpus'].map(
          (m) =>
            new cloudwatch.Metric({
              namespace: ns,
              metricName: m,
              dimensionsMap: { service: 'gpu-fleet-reconcile' },
              statistic: 'Maximum',
              period: Duration.minutes(1),
            }),
        ),
      }),
    );
    // Services: replicas wanted against ready (from reconcile), and what each target group's load balancer sees.
    if (this.serviceTargets.length > 0) {
      const groups = this.serviceTargets.map((t) => [t.id, t.dimension] as const);
      const reconcileMetric = (metricName: string, service: string, statistic: string, period: Duration) =>
        new cloudwatch.Metric({
          namespace: ns,
          metricName,
          dimensionsMap: { Service: service, service: 'gpu-fleet-reconcile' },
          statistic,
          period,
        });
      d.addWidgets(
        new cloudwatch.GraphWidget({
          title: 'Service replicas: wanted and ready',
          width: 12,
          left: [
            search(`SEARCH('{${ns},Service,service} MetricName="ServiceReplicasWanted"', 'Maximum', 60)`, 'wanted'),
            search(`SEARCH('{${ns},Service,service} MetricName="ServiceReplicasReady"', 'Minimum', 60)`, 'ready'),
          ],
        }),
        new cloudwatch.GraphWidget({
          title: 'Service availability (% of reconciles with ready ≥ wanted, hourly) and cost ($ per hour)',
          width: 12,
          left: groups.map(
            ([id]) =>
              new cloudwatch.MathExpression({
                expression: '100 * a',
                label: `${id} availability %`,
                period: Duration.hours(1),
                usingMetrics: { a: reconcileMetric('ServiceAvailable', id, 'Average', Duration.hours(1)) },
              }),
          ),
          right: groups.map(
            ([id]) =>
              new cloudwatch.MathExpression({
                expression: 'c / 1000000',
                label: `${id} $ per hour`,
                period: Duration.minutes(5),
                usingMetrics: { c: reconcileMetric('ServiceCostMicroUsdPerHour', id, 'Average', Duration.minutes(5)) },
              }),
          ),
          leftYAxis: { min: 0, max: 100 },
        }),
        new cloudwatch.GraphWidget({
          title: 'Service requests within objective (% by the queueing model of the ready replicas, hourly)',
          width: 12,
          left: groups.map(
            ([id]) =>
              new cloudwatch.MathExpression({
                expression: '100 * w / r',
                label: `${id} within objective %`,
                period: Duration.hours(1),
                usingMetrics: {
                  w: reconcileMetric('ServiceRequestsWithinObjectivePerSecond', id, 'Average', Duration.hours(1)),
                  r: reconcileMetric('ServiceRequestsPerSecond', id, 'Average', Duration.hours(1)),
                },
              }),
          ),
          leftYAxis: { min: 0, max: 100 },
        }),
        new cloudwatch.GraphWidget({
          title: 'Service requests per target (per minute) and healthy targets',
          width: 12,
          left: groups.map(
            ([id, arn]) =>
              new cloudwatch.Metric({
                namespace: 'AWS/ApplicationELB',
                metricName: 'RequestCountPerTarget',
                dimensionsMap: { TargetGroup: arn },
                statistic: 'Sum',
                period: Duration.minutes(1),
                label: `${id} requests per target`,
              }),
          ),
          right: groups.map(([id, arn]) =>
            search(
              `SEARCH('{AWS/ApplicationELB,LoadBalancer,TargetGroup} MetricName="HealthyHostCount" TargetGroup="${arn}"', 'Minimum', 60)`,
              `${id} healthy targets`,
            ),
          ),
        }),
      );
    }
    // Reserved capacity: machines running in each reservation against its size (its utilisation; unused is paid all the same).
    d.addWidgets(
      new cloudwatch.GraphWidget({
        title: 'Reservations: machines used and reserved',
        width: 12,
        left: [
          search(
            `SEARCH('{${ns},Reservation,service} MetricName="ReservationInstancesUsed"', 'Average', 300)`,
            'used',
            Duration.minutes(5),
          ),
          search(
            `SEARCH('{${ns},Reservation,service} MetricName="ReservationInstances"', 'Maximum', 300)`,
            'reserved',
            Duration.minutes(5),
          ),
        ],
      }),
    );
    d.addWidgets(
      new cloudwatch.GraphWidget({
        title: 'Fleet size by node group and capacity type',
        width: 12,
        stacked: true,
        left: [search(`SEARCH('{${ns},CapacityType,NodeGroup,service} MetricName="FleetSize"', 'Maximum', 60)`, '')],
        // Warm pools beside the groups that have one: machines prepared ahead, not yet the group's capacity.
        ...(config.nodeGroups.some((g) => g.warmPool)
          ? { right: [search(`SEARCH('{${ns},NodeGroup,service} MetricName="WarmPoolReady"', 'Minimum', 60)`, 'warm ')] }
          : {}),
      }),
      new cloudwatch.GraphWidget({
        title: 'GPU utilisation by node group (mean over GPUs)',
        width: 12,
        left: config.nodeGroups.map((g) =>
          search(
            `AVG(SEARCH('{${AGENT_METRICS.namespace},GpuIndex,InstanceId,NodeGroup} MetricName="${AGENT_METRICS.utilization}" NodeGroup="${this.stackName}-${g.name}"', 'Average', 300))`,
            g.name,
            Duration.minutes(5),
          ),
        ),
        leftYAxis: { min: 0, max: 100, label: '%' },
      }),
    );
    d.addWidgets(
      new cloudwatch.GraphWidget({
        title: "Spend against budget, per team (% of the period's budget)",
        width: 12,
        left: [search(`SEARCH('{${ns},Team,service} MetricName="TeamBudgetUsedPct"', 'Maximum', 300)`, '', Duration.minutes(5))],
        leftAnnotations: [{ value: 100, label: 'budget', color: cloudwatch.Color.RED }],
      }),
      new cloudwatch.GraphWidget({
        title: 'Interruptions and requeues',
        width: 12,
        left: ['SpotInterruptions', 'NodeNotices', 'JobsRequeued'].map(
          (m) =>
            new cloudwatch.Metric({
              namespace: ns,
              metricName: m,
              dimensionsMap: { service: 'gpu-fleet-interruption' },
              statistic: 'Sum',
              period: Duration.minutes(5),
            }),
        ),
      }),
    );
    d.addWidgets(
      new cloudwatch.GraphWidget({
        title: 'Reconcile duration',
        width: 8,
        left: [
          this.functions.reconcile.metricDuration({ statistic: 'p99' }),
          this.functions.reconcile.metricDuration({ statistic: 'Average' }),
        ],
        right: [
          new cloudwatch.Metric({
            namespace: ns,
            metricName: 'PlanTime',
            dimensionsMap: { service: 'gpu-fleet-reconcile' },
            statistic: 'Maximum',
          }),
        ],
      }),
      new cloudwatch.GraphWidget({
        title: 'Reconcile errors',
        width: 8,
        left: [
          this.functions.reconcile.metricErrors({ statistic: 'Sum' }),
          new cloudwatch.Metric({
            namespace: ns,
            metricName: 'ReconcileErrors',
            dimensionsMap: { service: 'gpu-fleet-reconcile' },
            statistic: 'Sum',
          }),
        ],
      }),
      new cloudwatch.GraphWidget({
        title: 'Jobs taken in',
        width: 8,
        left: ['JobsAccepted', 'JobsRejected', 'JobsDeadLettered'].map(
          (m) =>
            new cloudwatch.Metric({
              namespace: ns,
              metricName: m,
              dimensionsMap: { service: 'gpu-fleet-intake' },
              statistic: 'Sum',
              period: Duration.minutes(5),
            }),
        ),
      }),
    );
    return d;
  }

  private alarmsFor(config: GpuFleetConfig): void {
    const topic = new sns.Topic(this, 'Alarms', { displayName: 'gpu-fleet alarms', masterKey: this.key, enforceSSL: true });
    if (config.alarmEmail) topic.addSubscription(new subscriptions.EmailSubscription(config.alarmEmail));
    const add = (id: string, alarm: Omit<cloudwatch.AlarmProps, 'actionsEnabled'>) => {
      const a = new cloudwatch.Alarm(this, id, { ...alarm, actionsEnabled: true });
      a.addAlarmAction(new cwActions.SnsAction(topic));
      this.alarms.push(a);
    };
    add('DeadLettersNotEmpty', {
      alarmDescription: 'Job specs or events gpu-fleet could not attribute or process are waiting in the dead-letter queue.',
      metric: this.deadLetters.metricApproximateNumberOfMessagesVisible({ period: Duration.minutes(1), statistic: 'Maximum' }),
      threshold: 0,
      comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
      evaluationPeriods: 1,
      treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
    });
    add('FunctionFailuresNotEmpty', {
      alarmDescription: 'A function invocation failed after its retries (reconcile or interruption).',
      metric: this.failures.metricApproximateNumberOfMessagesVisible({ period: Duration.minutes(1), statistic: 'Maximum' }),
      threshold: 0,
      comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
      evaluationPeriods: 1,
      treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
    });
    add('ReconcileFailing', {
      alarmDescription: 'Reconcile has failed (or recorded action errors) in 3 of the last 5 minutes.',
      metric: new cloudwatch.MathExpression({
        expression: 'errors + actionErrors',
        usingMetrics: {
          errors: this.functions.reconcile.metricErrors({ period: Duration.minutes(1), statistic: 'Sum' }),
          actionErrors: new cloudwatch.Metric({
            namespace: METRICS_NAMESPACE,
            metricName: 'ReconcileErrors',
            dimensionsMap: { service: 'gpu-fleet-reconcile' },
            period: Duration.minutes(1),
            statistic: 'Sum',
          }),
        },
        period: Duration.minutes(1),
      }),
      threshold: 0,
      comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
      evaluationPeriods: 5,
      datapointsToAlarm: 3,
      treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
    });
    // A figure reconcile reports each minute (its largest in the minute): degraded providers, machines silent together.
    const reconcileGauge = (metricName: string) =>
      new cloudwatch.Metric({
        namespace: METRICS_NAMESPACE,
        metricName,
        dimensionsMap: { service: 'gpu-fleet-reconcile' },
        period: Duration.minutes(1),
        statistic: 'Maximum',
      });
    add('ProviderDegraded', {
      alarmDescription:
        'A cloud provider (a region, GCP projects) or a node group has been left out of reconcile for 5 minutes because its API calls fail: it is not scaled, and work only it could run waits (gpu-fleet status says which, since when, and the last error).',
      metric: reconcileGauge('DegradedProviders'),
      threshold: 0,
      comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
      evaluationPeriods: 5,
      datapointsToAlarm: 5,
      treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
    });
    add('ControlPlaneSilence', {
      alarmDescription:
        "Most machines of a zone stopped sending heartbeats at once while their cloud lists them running: the agent API (or its table) is failing, not the machines. Reconcile requeues nothing for it and lets none of them go (gpu-fleet status names the zones); check the agent API function's errors and throttles.",
      metric: reconcileGauge('SilentTogetherMachines'),
      threshold: 0,
      comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
      evaluationPeriods: 2,
      datapointsToAlarm: 2,
      treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
    });
    add('UnreadableNodeRecords', {
      alarmDescription:
        "A machine's stored GPU report cannot be read, so the planner leaves the machine out (no work goes to it); the decision record's plan names the machine and what is wrong. Its agent's next registration replaces the record.",
      metric: reconcileGauge('UnreadableNodeRecords'),
      threshold: 0,
      comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
      evaluationPeriods: 1,
      treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
    });
    add('ReconcileNotRunning', {
      alarmDescription: 'Reconcile has not run for 5 minutes: nothing scales, nothing is placed.',
      metric: this.functions.reconcile.metricInvocations({ period: Duration.minutes(5), statistic: 'Sum' }),
      threshold: 1,
      comparisonOperator: cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD,
      evaluationPeriods: 1,
      treatMissingData: cloudwatch.TreatMissingData.BREACHING,
    });
    for (const team of config.teams) {
      for (const pct of team.alertAtPct) {
        add(`Budget-${team.name}-${pct}`, {
          alarmDescription: `Team ${team.name} has spent ${pct}% of its ${team.period} budget (as configured at deploy; the live tags decide what gpu-fleet enforces).`,
          metric: new cloudwatch.Metric({
            namespace: METRICS_NAMESPACE,
            metricName: 'TeamBudgetUsedPct',
            dimensionsMap: { service: 'gpu-fleet-reconcile', Team: team.name },
            period: Duration.minutes(5),
            statistic: 'Maximum',
          }),
          threshold: pct,
          comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
          evaluationPeriods: 1,
          treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
        });
      }
    }
  }
}

/** The region as cdk-nag prints it in finding ids: the name when the stack has one, else the pseudo parameter. */
function nagRegion(stack: Stack): string {
  return /^[a-z]{2}(-gov)?-[a-z]+-\d$/.test(stack.region) ? stack.region : '<AWS::Region>';
}

/** Acknowledges cdk-nag findings on a construct (and its children), each with its reason. */
function acknowledge(scope: Construct, reasons: Record<string, string>): void {
  for (const [id, reason] of Object.entries(reasons)) Validations.of(scope).acknowledge({ id: `AwsSolutions::${id}`, reason });
}

/** One least-privilege statement on a role: these actions on these resources (under these conditions). */
function allow(role: iam.IRole, sid: string, actions: string[], resources: string[], conditions?: Record<string, unknown>): void {
  role.addToPrincipalPolicy(new iam.PolicyStatement({ sid, actions, resources, ...(conditions ? { conditions } : {}) }));
}

/** The log group retention of the config's days (CloudWatch Logs takes only some values; the config allows only those). */
function retentionOf(days: number): logs.RetentionDays {
  const found = Object.values(logs.RetentionDays).find((v) => v === days);
  if (found === undefined) throw new Error(`jobLogs.retentionDays ${days} is not a CloudWatch Logs retention`);
  return found as logs.RetentionDays;
}

/** TCP port ranges covering 1–65535 but the given ports. */
export function tcpRangesWithout(ports: readonly number[]): { from: number; to: number }[] {
  const out: { from: number; to: number }[] = [];
  let from = 1;
  for (const p of [...new Set(ports)].sort((a, b) => a - b)) {
    if (p > from) out.push({ from, to: p - 1 });
    from = Math.max(from, p + 1);
  }
  if (from <= 65535) out.push({ from, to: 65535 });
  return out;
}
