// Lambda entry: the reconcile function (every minute, and when the interruption function asks).
import { checkpointSweepFor, sweepPositionKey, tablePosition } from '../../cloud/aws/checkpoint-sweep.ts';
import { sweepsInTurn } from '../../cloud/checkpoint-sweep.ts';
import { plan } from '../../core/planner/planner.ts';
import { fleetPortsFromEnv } from '../../cloud/wiring.ts';
import { observability } from '../observability.ts';
import { createReconcileHandler } from '../reconcile.ts';

const ports = await fleetPortsFromEnv();
const deps = { jobs: ports.stores.jobs, checkpoints: ports.stores.checkpoints, clock: ports.clock };
// The checkpoint retention the index derives: this function alone sweeps (and carries an S3 client).
const s3Sweep = checkpointSweepFor(ports.config, { ...deps, doc: ports.doc });
// Each GCP region's Cloud Storage bucket, with the control plane's service account (the Cloud Storage client is loaded only then).
const gcsRoots = Object.values(ports.config.gcp?.checkpointRoots ?? {});
const retentionDays = ports.config.checkpointRetentionDays;
const gcsSweeps =
  gcsRoots.length > 0 && retentionDays !== undefined
    ? await (async () => {
        const [{ gcsCheckpointSweep }, { controlPlaneStorage }] = await Promise.all([
          import('../../cloud/gcp/checkpoint-store.ts'),
          import('../../cloud/gcp/control-plane-storage.ts'),
        ]);
        const storage = await controlPlaneStorage(ports.config.gcp!, ports.config.region);
        return gcsRoots.map((root) =>
          gcsCheckpointSweep({
            storage,
            root,
            at: tablePosition(ports.doc, ports.config.tables.control, sweepPositionKey(root, false)),
            ...deps,
            retentionDays,
          }),
        );
      })()
    : [];
const checkpointSweep = sweepsInTurn([...(s3Sweep ? [s3Sweep] : []), ...gcsSweeps]);
export const handler = createReconcileHandler({
  ports: { ...ports.reconcile, ...(checkpointSweep ? { checkpointSweep } : {}) },
  queue: ports.queue,
  planner: plan,
  policy: ports.config.policy,
  obs: observability('gpu-fleet-reconcile'),
});
