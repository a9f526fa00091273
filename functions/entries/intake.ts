// Lambda entry: the intake function (SQS event source on every team queue).
import { awsConfigFromEnv, awsPorts, systemClock } from '../../cloud/aws/runtime.ts';
import { createIntakeHandler, teamFromQueueArn } from '../intake.ts';
import { observability } from '../observability.ts';

const config = awsConfigFromEnv();
const ports = awsPorts(config);
export const handler = createIntakeHandler({
  jobs: ports.stores.jobs,
  clock: systemClock,
  deadLetter: ports.deadLetter,
  teamOfQueue: teamFromQueueArn(config.teamQueuePrefix),
  obs: observability('gpu-fleet-intake'),
});
