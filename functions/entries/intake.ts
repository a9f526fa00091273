// Lambda entry: the intake function (SQS event source on every team queue).
import { fleetPortsFromEnv } from '../../cloud/wiring.ts';
import { createIntakeHandler, teamFromQueueArn } from '../intake.ts';
import { observability } from '../observability.ts';

const ports = await fleetPortsFromEnv();
export const handler = createIntakeHandler({
  jobs: ports.stores.jobs,
  clock: ports.clock,
  deadLetter: ports.deadLetter,
  teamOfQueue: teamFromQueueArn(ports.config.teamQueuePrefix),
  obs: observability('gpu-fleet-intake'),
});
