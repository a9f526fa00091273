// Lambda entry: the intake function (SQS event source on every team queue).
import { awsShippedCatalog, gpuOffers } from '../../cloud/catalog/shipped.ts';
import { fleetPortsFromEnv } from '../../cloud/wiring.ts';
import { fleetShapeFrom } from '../../core/services/intake.ts';
import { createIntakeHandler, teamFromQueueArn } from '../intake.ts';
import { observability } from '../observability.ts';

const ports = await fleetPortsFromEnv();
export const handler = createIntakeHandler({
  jobs: ports.stores.jobs,
  clock: ports.clock,
  deadLetter: ports.deadLetter,
  teamOfQueue: teamFromQueueArn(ports.config.teamQueuePrefix),
  // AWS groups only: intake has no GCP credentials, and a job is never called unschedulable on half the fleet.
  ...(ports.config.gcp ? {} : { fleetShape: fleetShapeFrom(ports.providers, awsShippedCatalog().instanceTypes, ports.clock) }),
  ...(ports.services ? { services: ports.services } : {}),
  ...(ports.config.images ? { images: ports.config.images } : {}),
  ...(ports.config.services?.ports ? { servicePorts: ports.config.services.ports } : {}),
  rightsizing: { families: ports.stores.families, offers: gpuOffers(awsShippedCatalog()) },
  obs: observability('gpu-fleet-intake'),
});
