// Lambda entry: the interruption function (EventBridge rules for spot warnings, rebalance,
// state changes, terminate lifecycle actions and AWS Health scheduled changes).
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { DynamoDBPersistenceLayer } from '@aws-lambda-powertools/idempotency/dynamodb';
import { awsConfigFromEnv, awsPorts } from '../../cloud/aws/runtime.ts';
import { createInterruptionHandler } from '../interruption.ts';
import { observability } from '../observability.ts';

const config = awsConfigFromEnv();
const ports = awsPorts(config);
export const handler = createInterruptionHandler({
  ports: ports.interruption,
  policy: config.policy,
  trigger: ports.trigger,
  obs: observability('gpu-fleet-interruption'),
  idempotency: new DynamoDBPersistenceLayer({ tableName: config.tables.idempotency, awsSdkV3Client: new DynamoDBClient({ region: config.region }) }),
  lifecycleTimeoutSec: config.lifecycleTimeoutSec,
});
