import type { Stack } from 'aws-cdk-lib';
import type * as autoscaling from 'aws-cdk-lib/aws-autoscaling';
import type * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import type * as dynamodb from 'aws-cdk-lib/aws-dynamodb';
import type * as ec2 from 'aws-cdk-lib/aws-ec2';
import type * as iam from 'aws-cdk-lib/aws-iam';
import type * as kms from 'aws-cdk-lib/aws-kms';
import type * as lambda from 'aws-cdk-lib/aws-lambda';
import type * as logs from 'aws-cdk-lib/aws-logs';
import type * as s3 from 'aws-cdk-lib/aws-s3';
import type * as sqs from 'aws-cdk-lib/aws-sqs';
import type { TableNames } from '../../cloud/aws/tables.ts';
import { DEFAULT_POLICY } from '../../core/snapshot.ts';
import type { FunctionName } from '../bundling.ts';

/** The drain hook on every node group; reconcile drains a machine it holds even when the event is lost (core's policy names it). */
export const LIFECYCLE_HOOK_NAME = DEFAULT_POLICY.drainHookName;
/**
 * The launch hook of a group with a warm pool: a machine launched into the pool waits in it while
 * its agent pulls the images of the services that may place a replica on it, then the group stops
 * it; started into service, it waits in it again until its agent runs. Its agent lets it go through
 * the agent API (`node/launch-ready`); at the timeout the launch goes on all the same.
 */
export const LAUNCH_HOOK_NAME = 'gpu-fleet-prepare';
export const LAUNCH_HOOK_TIMEOUT_SEC = 900;
export const LIFECYCLE_TIMEOUT_SEC = DEFAULT_POLICY.drainHookTimeoutSec;

/**
 * What the stack's builders (this folder) read and fill in of the stack they build into: the stack
 * itself is each construct's scope, so every logical ID stays what it was when they were its methods.
 */
export interface FleetStack extends Stack {
  readonly key: kms.Key;
  readonly tables: Record<keyof TableNames, dynamodb.Table>;
  readonly bucket: s3.Bucket;
  readonly teamQueues: Map<string, sqs.Queue>;
  readonly deadLetters: sqs.Queue;
  readonly failures: sqs.Queue;
  readonly functions: Record<FunctionName, lambda.Function>;
  readonly groups: Map<string, autoscaling.AutoScalingGroup>;
  readonly agentRole: iam.Role;
  readonly agentApiUrl: lambda.FunctionUrl;
  readonly peopleApiUrl: lambda.FunctionUrl;
  readonly teamRoles: Map<string, iam.Role>;
  adminRole: iam.Role;
  gceAgentApiUrl?: lambda.FunctionUrl;
  readonly interfaceEndpoints: ec2.InterfaceVpcEndpoint[];
  readonly jobLogs: logs.LogGroup;
  readonly dashboard: cloudwatch.Dashboard;
  readonly serviceTargets: { id: string; arn: string; dimension: string }[];
  readonly alarms: cloudwatch.Alarm[];
  /** The functions' bundles, by name (none: the functions are bundled from their entries at synth). */
  readonly bundles: Readonly<Record<FunctionName, string>> | undefined;
  /** The Auto Scaling group's name of a node group. */
  groupName(nodeGroup: string): string;
}
