// Lambda entry: the interruption function (EventBridge rules for spot warnings, rebalance
// recommendations, state changes, terminate lifecycle actions and AWS Health scheduled changes).
import { DynamoDBPersistenceLayer } from '@aws-lambda-powertools/idempotency/dynamodb';
import { fleetPortsFromEnv } from '../../cloud/wiring.ts';
import { createInterruptionHandler } from '../interruption.ts';
import { observability } from '../observability.ts';

const ports = await fleetPortsFromEnv();
export const handler = createInterruptionHandler({
  ports: ports.interruption,
  policy: ports.config.policy,
  trigger: ports.trigger,
  obs: observability('gpu-fleet-interruption'),
  idempotency: new DynamoDBPersistenceLayer({ tableName: ports.config.tables.idempotency, awsSdkV3Client: ports.clients.dynamodb }),
  lifecycleTimeoutSec: ports.config.lifecycleTimeoutSec,
});
