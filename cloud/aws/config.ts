import type { Clock } from '../../core/ports.ts';
import { DEFAULT_POLICY, type Policy } from '../../core/snapshot.ts';
import { tableNamesFromEnv, type TableNames } from './tables.ts';

/**
 * gpu-fleet's AWS settings from the environment, without any SDK client: each Lambda entry
 * builds only the clients its function calls, so each bundle holds only what it uses.
 */

/** The wall clock, for adapters and functions (core never reads it directly). */
export const systemClock: Clock = { nowMs: () => Date.now() };

export interface AwsConfig {
  readonly region: string;
  readonly tables: TableNames;
  readonly checkpointBucket: string;
  readonly teamQueuePrefix: string;
  readonly deadLetterQueueUrl?: string;
  readonly reconcileFunction?: string;
  readonly lifecycleTimeoutSec: number;
  readonly policy: Policy;
}

/**
 * Configuration from the environment the stack gives each function (and that `gpu-fleet
 * reconcile --once` reads locally). Region and credentials come from the standard SDK chain;
 * `AWS_ENDPOINT_URL` and `AWS_ENDPOINT_URL_<SERVICE>` point any client at an AWS-compatible endpoint.
 */
export function awsConfigFromEnv(env: Readonly<Record<string, string | undefined>> = process.env): AwsConfig {
  const num = (name: string, fallback: number) => {
    const v = env[name];
    if (v === undefined || v === '') return fallback;
    const n = Number(v);
    if (!Number.isFinite(n) || n < 0) throw new Error(`${name} must be a non-negative number, got "${v}"`);
    return n;
  };
  return {
    region: env.AWS_REGION ?? env.AWS_DEFAULT_REGION ?? 'us-east-1',
    tables: tableNamesFromEnv(env),
    checkpointBucket: env.GPU_FLEET_CHECKPOINT_BUCKET ?? 'gpu-fleet-checkpoints',
    teamQueuePrefix: env.GPU_FLEET_TEAM_QUEUE_PREFIX ?? 'gpu-fleet-team-',
    ...(env.GPU_FLEET_DLQ_URL ? { deadLetterQueueUrl: env.GPU_FLEET_DLQ_URL } : {}),
    ...(env.GPU_FLEET_RECONCILE_FUNCTION ? { reconcileFunction: env.GPU_FLEET_RECONCILE_FUNCTION } : {}),
    lifecycleTimeoutSec: num('GPU_FLEET_LIFECYCLE_TIMEOUT_SEC', 300),
    policy: {
      ...DEFAULT_POLICY,
      reconcileIntervalSec: num('GPU_FLEET_RECONCILE_INTERVAL_SEC', DEFAULT_POLICY.reconcileIntervalSec),
      idleCooldownSec: num('GPU_FLEET_IDLE_COOLDOWN_SEC', DEFAULT_POLICY.idleCooldownSec),
      noticeMarginSec: num('GPU_FLEET_NOTICE_MARGIN_SEC', DEFAULT_POLICY.noticeMarginSec),
      spotPatienceSec: num('GPU_FLEET_SPOT_PATIENCE_SEC', DEFAULT_POLICY.spotPatienceSec),
    },
  };
}
