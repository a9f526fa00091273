// Each client from its own module: the package's index also loads every generated message class
// (31 MB of protos.js), which the REST transport does not need.
import { InstanceGroupManagersClient } from '@google-cloud/compute/build/src/v1/instance_group_managers_client.js';
import { InstancesClient } from '@google-cloud/compute/build/src/v1/instances_client.js';
import { InstanceTemplatesClient } from '@google-cloud/compute/build/src/v1/instance_templates_client.js';
import { MachineTypesClient } from '@google-cloud/compute/build/src/v1/machine_types_client.js';
import { RegionInstanceGroupManagersClient } from '@google-cloud/compute/build/src/v1/region_instance_group_managers_client.js';
import { RegionInstanceTemplatesClient } from '@google-cloud/compute/build/src/v1/region_instance_templates_client.js';
import { ReservationsClient } from '@google-cloud/compute/build/src/v1/reservations_client.js';
import { RegionOperationsClient } from '@google-cloud/compute/build/src/v1/region_operations_client.js';
import { ZoneOperationsClient } from '@google-cloud/compute/build/src/v1/zone_operations_client.js';
import type { GcpClients } from './mig-node-groups.ts';

/**
 * Options for every Compute client: a service account's JSON key (from the secret the stack names),
 * or any other google-auth-library client; `apiEndpoint`/`port`/`protocol` point them elsewhere
 * (tests use a local server over HTTP).
 */
export interface GcpClientOptions {
  readonly credentials?: { client_email: string; private_key: string };
  readonly projectId?: string;
  readonly authClient?: unknown;
  readonly apiEndpoint?: string;
  readonly port?: number;
  readonly protocol?: 'http' | 'https';
}

/** The Compute clients gpu-fleet uses, REST transport (no gRPC in Lambda), built once per process. */
export function gcpClients(options: GcpClientOptions = {}): GcpClients {
  const o = { fallback: true, ...options } as ConstructorParameters<typeof InstanceGroupManagersClient>[0];
  return {
    instanceGroupManagers: new InstanceGroupManagersClient(o),
    regionInstanceGroupManagers: new RegionInstanceGroupManagersClient(o),
    instanceTemplates: new InstanceTemplatesClient(o),
    regionInstanceTemplates: new RegionInstanceTemplatesClient(o),
    instances: new InstancesClient(o),
    zoneOperations: new ZoneOperationsClient(o),
    regionOperations: new RegionOperationsClient(o),
    machineTypes: new MachineTypesClient(o),
    reservations: new ReservationsClient(o),
  };
}
