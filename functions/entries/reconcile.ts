// Lambda entry: the reconcile function (every minute, and when the interruption function asks).
import { plan } from '../../core/planner/planner.ts';
import { awsConfigFromEnv, awsPorts, systemClock } from '../../cloud/aws/runtime.ts';
import { MultiCloudCatalog, MultiCloudPrices } from '../../cloud/multi-cloud.ts';
import { observability } from '../observability.ts';
import { createReconcileHandler, type ReconcileDeps } from '../reconcile.ts';

const config = awsConfigFromEnv();
const ports = awsPorts(config);
let reconcilePorts = ports.reconcile;
let notices: ReconcileDeps['notices'];
if (process.env.GPU_FLEET_GCP_PROJECTS) {
  // GCP managed instance groups beside the Auto Scaling groups: one fleet, offerings side by side.
  // Loaded only when configured (the stack bundles the GCP client only then).
  const gcpRuntime = await import('../../cloud/gcp/runtime.ts');
  const { SecretsManagerClient } = await import('@aws-sdk/client-secrets-manager');
  const gcpConfig = gcpRuntime.gcpConfigFromEnv()!;
  const credentials = gcpConfig.credentialsSecret
    ? await gcpRuntime.gcpCredentialsFromSecret(new SecretsManagerClient({ region: config.region }), gcpConfig.credentialsSecret)
    : undefined;
  const gcp = gcpRuntime.gcpPorts(gcpConfig, gcpRuntime.gcpClients(credentials ? { credentials } : {}), systemClock);
  reconcilePorts = {
    ...ports.reconcile,
    providers: [...ports.reconcile.providers, gcp.groups],
    catalog: new MultiCloudCatalog([ports.reconcile.catalog, gcp.catalog]),
    prices: new MultiCloudPrices(
      new Map([
        ['aws', ports.reconcile.prices],
        ['gcp', gcp.prices],
      ]),
    ),
  };
  notices = { sources: [gcp.preemptions], ports: { ...ports.interruption, providers: [...ports.interruption.providers, gcp.groups] } };
}
export const handler = createReconcileHandler({
  ports: reconcilePorts,
  queue: ports.queue,
  planner: plan,
  policy: config.policy,
  obs: observability('gpu-fleet-reconcile'),
  ...(notices ? { notices } : {}),
});
