import { AutoScalingClient } from '@aws-sdk/client-auto-scaling';
import { CloudWatchClient } from '@aws-sdk/client-cloudwatch';
import { EC2Client } from '@aws-sdk/client-ec2';
import { InvokeCommand, LambdaClient } from '@aws-sdk/client-lambda';
import { ResourceGroupsTaggingAPIClient } from '@aws-sdk/client-resource-groups-tagging-api';
import { SQSClient } from '@aws-sdk/client-sqs';
import type { Clock } from '../../core/ports.ts';
import type { InterruptionPorts } from '../../core/services/interruption.ts';
import type { ReconcilePorts } from '../../core/services/reconcile.ts';
import { DEFAULT_POLICY, type Policy } from '../../core/snapshot.ts';
import { AsgNodeGroups } from './asg-node-groups.ts';
import { CloudWatchGpuMetrics } from './cloudwatch-metrics.ts';
import { documentClient, dynamoStores } from './dynamo-store.ts';
import { Ec2Catalog, AwsPriceSource } from './ec2-catalog.ts';
import { translateAwsError } from './errors.ts';
import { SqsDeadLetter, SqsJobQueue } from './sqs-queue.ts';
import { tableNamesFromEnv, type TableNames } from './tables.ts';
import { TaggingBudgetSource } from './tagging-budgets.ts';

/** The wall clock, for adapters and functions (core never reads it directly). */
export const systemClock: Clock = { nowMs: () => Date.now() };

export interface AwsConfig {
  readonly region: string;
  readonly tables: TableNames;
  readonly checkpointBucket: string;
  readonly teamQueuePrefix: string;
  readonly deadLetterQueueUrl?: string;
  readonly reconcileFunction?: string;
  readonly lifecycleTimeoutSec: number;
  readonly policy: Policy;
}

/**
 * Configuration from the environment the stack gives each function (and that `gpu-fleet
 * reconcile --once` reads locally). Region and credentials come from the standard SDK chain;
 * `AWS_ENDPOINT_URL` and `AWS_ENDPOINT_URL_<SERVICE>` point any client at an AWS-compatible endpoint.
 */
export function awsConfigFromEnv(env: Readonly<Record<string, string | undefined>> = process.env): AwsConfig {
  const num = (name: string, fallback: number) => {
    const v = env[name];
    if (v === undefined || v === '') return fallback;
    const n = Number(v);
    if (!Number.isFinite(n) || n < 0) throw new Error(`${name} must be a non-negative number, got "${v}"`);
    return n;
  };
  return {
    region: env.AWS_REGION ?? env.AWS_DEFAULT_REGION ?? 'us-east-1',
    tables: tableNamesFromEnv(env),
    checkpointBucket: env.GPU_FLEET_CHECKPOINT_BUCKET ?? 'gpu-fleet-checkpoints',
    teamQueuePrefix: env.GPU_FLEET_TEAM_QUEUE_PREFIX ?? 'gpu-fleet-team-',
    ...(env.GPU_FLEET_DLQ_URL ? { deadLetterQueueUrl: env.GPU_FLEET_DLQ_URL } : {}),
    ...(env.GPU_FLEET_RECONCILE_FUNCTION ? { reconcileFunction: env.GPU_FLEET_RECONCILE_FUNCTION } : {}),
    lifecycleTimeoutSec: num('GPU_FLEET_LIFECYCLE_TIMEOUT_SEC', 300),
    policy: {
      ...DEFAULT_POLICY,
      reconcileIntervalSec: num('GPU_FLEET_RECONCILE_INTERVAL_SEC', DEFAULT_POLICY.reconcileIntervalSec),
      idleCooldownSec: num('GPU_FLEET_IDLE_COOLDOWN_SEC', DEFAULT_POLICY.idleCooldownSec),
      noticeMarginSec: num('GPU_FLEET_NOTICE_MARGIN_SEC', DEFAULT_POLICY.noticeMarginSec),
      spotPatienceSec: num('GPU_FLEET_SPOT_PATIENCE_SEC', DEFAULT_POLICY.spotPatienceSec),
    },
  };
}

export interface AwsClients {
  readonly asg: AutoScalingClient;
  readonly ec2: EC2Client;
  readonly cloudwatch: CloudWatchClient;
  readonly sqs: SQSClient;
  readonly tagging: ResourceGroupsTaggingAPIClient;
  readonly lambda: LambdaClient;
}

/** SDK clients, built once per Lambda container; adaptive retries everywhere. */
export function awsClients(config: Pick<AwsConfig, 'region'>): AwsClients {
  const common = { region: config.region, retryMode: 'adaptive' as const, maxAttempts: 5 };
  return {
    asg: new AutoScalingClient(common),
    ec2: new EC2Client(common),
    cloudwatch: new CloudWatchClient(common),
    sqs: new SQSClient(common),
    tagging: new ResourceGroupsTaggingAPIClient(common),
    lambda: new LambdaClient(common),
  };
}

export function awsPorts(config: AwsConfig, clients: AwsClients = awsClients(config), clock: Clock = systemClock) {
  const doc = documentClient({ region: config.region, retryMode: 'adaptive', maxAttempts: 5 });
  const stores = dynamoStores(doc, config.tables, config.checkpointBucket);
  const groups = new AsgNodeGroups(clients.asg, clients.ec2, { region: config.region, clock });
  const reconcile: ReconcilePorts = {
    ...stores,
    clock,
    providers: [groups],
    catalog: new Ec2Catalog(clients.ec2),
    prices: new AwsPriceSource(clients.ec2, { clock }),
    budgets: new TaggingBudgetSource(clients.tagging),
  };
  const interruption: InterruptionPorts = { clock, jobs: stores.jobs, nodes: stores.nodes, checkpoints: stores.checkpoints, pools: stores.pools, providers: [groups] };
  const queue = new SqsJobQueue(clients.sqs, { teamQueuePrefix: config.teamQueuePrefix, clock });
  return {
    doc,
    stores,
    groups,
    reconcile,
    interruption,
    queue,
    metrics: new CloudWatchGpuMetrics(clients.cloudwatch, clock),
    deadLetter: config.deadLetterQueueUrl
      ? new SqsDeadLetter(clients.sqs, config.deadLetterQueueUrl)
      : { send: async () => Promise.reject(new Error('GPU_FLEET_DLQ_URL is not set: a message that cannot be attributed to a team has nowhere to go')) },
    trigger: {
      async reconcileSoon(reason: string) {
        if (!config.reconcileFunction) return;
        try {
          await clients.lambda.send(new InvokeCommand({ FunctionName: config.reconcileFunction, InvocationType: 'Event', Payload: new TextEncoder().encode(JSON.stringify({ reason })) }));
        } catch (error) {
          throw translateAwsError(error, { operation: 'trigger reconcile', resource: config.reconcileFunction });
        }
      },
    },
  };
}
