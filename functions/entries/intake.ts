// Lambda entry: the intake function (SQS event source on every team queue). It builds only what
// intake calls (the jobs table and the dead-letter queue), so its bundle holds nothing else.
import { SQSClient } from '@aws-sdk/client-sqs';
import { awsConfigFromEnv, systemClock } from '../../cloud/aws/config.ts';
import { documentClient, DynamoJobStore } from '../../cloud/aws/dynamo-store.ts';
import { deadLetterFor } from '../../cloud/aws/sqs-queue.ts';
import { createIntakeHandler, teamFromQueueArn } from '../intake.ts';
import { observability } from '../observability.ts';

const config = awsConfigFromEnv();
const common = { region: config.region, retryMode: 'adaptive' as const, maxAttempts: 5 };
export const handler = createIntakeHandler({
  jobs: new DynamoJobStore(documentClient(common), config.tables.jobs),
  clock: systemClock,
  deadLetter: deadLetterFor(new SQSClient(common), config.deadLetterQueueUrl),
  teamOfQueue: teamFromQueueArn(config.teamQueuePrefix),
  obs: observability('gpu-fleet-intake'),
});
