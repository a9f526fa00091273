// Lambda entry: the reconcile function (every minute, and when the interruption function asks).
import { plan } from '../../core/planner/planner.ts';
import { fleetPortsFromEnv } from '../../cloud/wiring.ts';
import { observability } from '../observability.ts';
import { createReconcileHandler } from '../reconcile.ts';

const ports = await fleetPortsFromEnv();
export const handler = createReconcileHandler({
  ports: ports.reconcile,
  queue: ports.queue,
  planner: plan,
  policy: ports.config.policy,
  obs: observability('gpu-fleet-reconcile'),
});
