// Lambda entry: the reconcile function (every minute, and when the interruption function asks).
import { checkpointSweepFor } from '../../cloud/aws/checkpoint-sweep.ts';
import { plan } from '../../core/planner/planner.ts';
import { fleetPortsFromEnv } from '../../cloud/wiring.ts';
import { observability } from '../observability.ts';
import { createReconcileHandler } from '../reconcile.ts';

const ports = await fleetPortsFromEnv();
// The checkpoint retention the index derives: this function alone sweeps (and carries an S3 client).
const checkpointSweep = checkpointSweepFor(ports.config, {
  jobs: ports.stores.jobs,
  checkpoints: ports.stores.checkpoints,
  doc: ports.doc,
  clock: ports.clock,
});
export const handler = createReconcileHandler({
  ports: { ...ports.reconcile, ...(checkpointSweep ? { checkpointSweep } : {}) },
  queue: ports.queue,
  planner: plan,
  policy: ports.config.policy,
  obs: observability('gpu-fleet-reconcile'),
});
