// Lambda entry: the reconcile function (every minute, and when the interruption function asks).
import { plan } from '../../core/planner/planner.ts';
import { awsConfigFromEnv, awsPorts } from '../../cloud/aws/runtime.ts';
import { observability } from '../observability.ts';
import { createReconcileHandler } from '../reconcile.ts';

const config = awsConfigFromEnv();
const ports = awsPorts(config);
export const handler = createReconcileHandler({ ports: ports.reconcile, queue: ports.queue, planner: plan, policy: config.policy, obs: observability('gpu-fleet-reconcile') });
