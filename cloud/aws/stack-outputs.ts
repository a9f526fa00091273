import { CloudFormationClient, DescribeStacksCommand } from '@aws-sdk/client-cloudformation';
import { CloudError, ConfigError } from '../../core/errors.ts';
import type { Environment, FleetVariable } from '../env.ts';
import { translateAwsError } from './errors.ts';

/**
 * What the deployed stack tells a person's machine: every name the CLI needs is a CloudFormation
 * output of the stack (infra/stack.ts writes them from this table), so `gpu-fleet status` finds
 * the tables, queues, bucket and functions of a fleet by its stack name alone.
 */

/** Stack output key → the environment variable it stands for. */
export const STACK_OUTPUT_VARIABLES = {
  JobsTableName: 'GPU_FLEET_JOBS_TABLE',
  NodesTableName: 'GPU_FLEET_NODES_TABLE',
  ControlTableName: 'GPU_FLEET_CONTROL_TABLE',
  IdempotencyTableName: 'GPU_FLEET_IDEMPOTENCY_TABLE',
  CheckpointBucketName: 'GPU_FLEET_CHECKPOINT_BUCKET',
  TeamQueuePrefix: 'GPU_FLEET_TEAM_QUEUE_PREFIX',
  DeadLetterQueueUrl: 'GPU_FLEET_DLQ_URL',
  ReconcileFunctionName: 'GPU_FLEET_RECONCILE_FUNCTION',
  LifecycleTimeoutSec: 'GPU_FLEET_LIFECYCLE_TIMEOUT_SEC',
  ReconcileIntervalSec: 'GPU_FLEET_RECONCILE_INTERVAL_SEC',
  IdleCooldownSec: 'GPU_FLEET_IDLE_COOLDOWN_SEC',
  NoticeMarginSec: 'GPU_FLEET_NOTICE_MARGIN_SEC',
  GcpProjects: 'GPU_FLEET_GCP_PROJECTS',
  GcpCredentialsSecret: 'GPU_FLEET_GCP_CREDENTIALS_SECRET',
  GcpCheckpointRoots: 'GPU_FLEET_GCP_CHECKPOINT_ROOTS',
  ServiceTargetGroups: 'GPU_FLEET_SERVICE_TARGET_GROUPS',
  ReservationSelector: 'GPU_FLEET_RESERVATION_SELECTOR',
  Discounts: 'GPU_FLEET_DISCOUNTS',
  JobLogGroup: 'GPU_FLEET_JOB_LOG_GROUP',
  Network: 'GPU_FLEET_NETWORK',
  PeopleApiUrl: 'GPU_FLEET_PEOPLE_API_URL',
} as const satisfies Readonly<Record<string, FleetVariable>>;

/** Outputs that name things a person may want but no command variable stands for. */
export const STACK_INFO_OUTPUTS = [
  'IntakeFunctionName',
  'InterruptionFunctionName',
  'TeamQueueUrls',
  'DashboardName',
  'TeamRoleArns',
  'AdminRoleArn',
] as const;

/** The stack name the CLI looks for when none is given (`--stack`, `GPU_FLEET_STACK`). */
export const DEFAULT_STACK_NAME = 'GpuFleet';

/**
 * The outputs of a deployed stack, by key. A stack that does not exist, credentials that are
 * missing or refused, and a missing region are ConfigErrors that say what to do.
 */
export async function readStackOutputs(cfn: CloudFormationClient, stackName: string, region: string): Promise<Record<string, string>> {
  let out;
  try {
    out = await cfn.send(new DescribeStacksCommand({ StackName: stackName }));
  } catch (error) {
    throw explain(error, stackName, region);
  }
  const stack = out.Stacks?.[0];
  if (!stack) throw notDeployed(stackName, region);
  const outputs: Record<string, string> = {};
  for (const o of stack.Outputs ?? []) if (o.OutputKey && o.OutputValue !== undefined) outputs[o.OutputKey] = o.OutputValue;
  return outputs;
}

/** The environment a stack's outputs stand for (output values become the variables). */
export function environmentFromOutputs(outputs: Readonly<Record<string, string>>): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [key, variable] of Object.entries(STACK_OUTPUT_VARIABLES)) {
    const v = outputs[key];
    if (v !== undefined && v !== '') env[variable] = v;
  }
  return env;
}

/**
 * The environment to run a command with: the variables a person set, over the outputs of the
 * stack named by `stack` (or GPU_FLEET_STACK, or the default `GpuFleet`). The stack is not read
 * when no name was given and the tables are all set by hand.
 */
export async function environmentWithStack(input: {
  env: Environment;
  stack?: string;
  cloudFormation?: CloudFormationClient;
}): Promise<{ env: Environment; stack?: { name: string; outputs: Record<string, string> } }> {
  const { env } = input;
  const named = input.stack ?? (env.GPU_FLEET_STACK?.trim() || undefined);
  const byHand = ['GPU_FLEET_JOBS_TABLE', 'GPU_FLEET_NODES_TABLE', 'GPU_FLEET_CONTROL_TABLE'].every((k) => (env[k] ?? '').trim() !== '');
  if (!named && byHand) return { env };
  const name = named ?? DEFAULT_STACK_NAME;
  const region = env.AWS_REGION?.trim() || env.AWS_DEFAULT_REGION?.trim();
  if (!region) {
    throw new ConfigError(
      'the environment',
      [`AWS_REGION is not set: set it to the region the ${name} stack is deployed in (export AWS_REGION=us-east-1)`],
      {
        what: 'gpu-fleet environment',
      },
    );
  }
  const cfn = input.cloudFormation ?? new CloudFormationClient({ region, maxAttempts: 3 });
  const outputs = await readStackOutputs(cfn, name, region);
  const set = Object.fromEntries(Object.entries(env).filter(([, v]) => v !== undefined && v.trim() !== ''));
  return { env: { ...environmentFromOutputs(outputs), ...set }, stack: { name, outputs } };
}

function notDeployed(stackName: string, region: string): CloudError {
  return new CloudError(
    'not-found',
    `stack ${stackName} does not exist in ${region}: deploy it (npx cdk deploy -c config=my-fleet.json), name the one you deployed with --stack NAME or GPU_FLEET_STACK, or set GPU_FLEET_JOBS_TABLE, GPU_FLEET_NODES_TABLE and GPU_FLEET_CONTROL_TABLE by hand`,
    { operation: 'describe stack', resource: stackName, cloud: 'aws' },
  );
}

function explain(error: unknown, stackName: string, region: string): Error {
  const name = (error as { name?: string })?.name ?? '';
  const message = (error as { message?: string })?.message ?? '';
  if (name === 'ValidationError' && /does not exist/.test(message)) return notDeployed(stackName, region);
  return translateAwsError(error, { operation: 'describe stack', resource: stackName });
}

/** A cloud error about the credentials (missing or refused), as CloudError('access-denied') says. */
export function isCredentialsError(error: unknown): error is CloudError {
  return error instanceof CloudError && error.code === 'access-denied';
}
