// Lambda entry: the interruption function (EventBridge rules for spot warnings, rebalance,
// state changes, terminate lifecycle actions and AWS Health scheduled changes). It builds only
// what it calls: the state store, the Auto Scaling groups, and the reconcile trigger.
import { AutoScalingClient } from '@aws-sdk/client-auto-scaling';
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { EC2Client } from '@aws-sdk/client-ec2';
import { LambdaClient } from '@aws-sdk/client-lambda';
import { DynamoDBPersistenceLayer } from '@aws-lambda-powertools/idempotency/dynamodb';
import { AsgNodeGroups } from '../../cloud/aws/asg-node-groups.ts';
import { awsConfigFromEnv, systemClock } from '../../cloud/aws/config.ts';
import { documentClient, dynamoStores } from '../../cloud/aws/dynamo-store.ts';
import { reconcileTrigger } from '../../cloud/aws/trigger.ts';
import { createInterruptionHandler } from '../interruption.ts';
import { observability } from '../observability.ts';

const config = awsConfigFromEnv();
const common = { region: config.region, retryMode: 'adaptive' as const, maxAttempts: 5 };
const stores = dynamoStores(documentClient(common), config.tables, config.checkpointBucket);
const groups = new AsgNodeGroups(new AutoScalingClient(common), new EC2Client(common), { region: config.region, clock: systemClock });
export const handler = createInterruptionHandler({
  ports: {
    clock: systemClock,
    jobs: stores.jobs,
    nodes: stores.nodes,
    checkpoints: stores.checkpoints,
    pools: stores.pools,
    providers: [groups],
  },
  policy: config.policy,
  trigger: reconcileTrigger(new LambdaClient(common), config.reconcileFunction),
  obs: observability('gpu-fleet-interruption'),
  idempotency: new DynamoDBPersistenceLayer({ tableName: config.tables.idempotency, awsSdkV3Client: new DynamoDBClient(common) }),
  lifecycleTimeoutSec: config.lifecycleTimeoutSec,
});
