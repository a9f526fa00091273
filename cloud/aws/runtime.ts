import { AutoScalingClient } from '@aws-sdk/client-auto-scaling';
import { CloudWatchClient } from '@aws-sdk/client-cloudwatch';
import { EC2Client } from '@aws-sdk/client-ec2';
import { LambdaClient } from '@aws-sdk/client-lambda';
import { ResourceGroupsTaggingAPIClient } from '@aws-sdk/client-resource-groups-tagging-api';
import { SQSClient } from '@aws-sdk/client-sqs';
import type { Clock } from '../../core/ports.ts';
import { systemClock, type AwsConfig } from './config.ts';
import type { InterruptionPorts } from '../../core/services/interruption.ts';
import type { ReconcilePorts } from '../../core/services/reconcile.ts';
import { AsgNodeGroups } from './asg-node-groups.ts';
import { CloudWatchGpuMetrics } from './cloudwatch-metrics.ts';
import { documentClient, dynamoStores } from './dynamo-store.ts';
import { Ec2Catalog, AwsPriceSource } from './ec2-catalog.ts';
import { reconcileTrigger } from './trigger.ts';
import { deadLetterFor, SqsJobQueue } from './sqs-queue.ts';
import { TaggingBudgetSource } from './tagging-budgets.ts';

export { awsConfigFromEnv, systemClock, type AwsConfig } from './config.ts';

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
    // With an SQS endpoint configured (an SQS-compatible server), queue URLs may name hosts only
    // that server knows: send to the configured endpoint, not to the queue URL's host.
    sqs: new SQSClient({
      ...common,
      ...(process.env.AWS_ENDPOINT_URL_SQS || process.env.AWS_ENDPOINT_URL ? { useQueueUrlAsEndpoint: false } : {}),
    }),
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
  const interruption: InterruptionPorts = {
    clock,
    jobs: stores.jobs,
    nodes: stores.nodes,
    checkpoints: stores.checkpoints,
    pools: stores.pools,
    providers: [groups],
  };
  const queue = new SqsJobQueue(clients.sqs, { teamQueuePrefix: config.teamQueuePrefix, clock });
  return {
    doc,
    stores,
    groups,
    reconcile,
    interruption,
    queue,
    metrics: new CloudWatchGpuMetrics(clients.cloudwatch, clock),
    deadLetter: deadLetterFor(clients.sqs, config.deadLetterQueueUrl),
    trigger: reconcileTrigger(clients.lambda, config.reconcileFunction),
  };
}
