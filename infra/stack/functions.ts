import { type Duration, RemovalPolicy } from 'aws-cdk-lib';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import * as destinations from 'aws-cdk-lib/aws-lambda-destinations';
import * as logs from 'aws-cdk-lib/aws-logs';
import { FUNCTION_ENTRIES, type FunctionName } from '../bundling.ts';
import type { FleetStack } from './parts.ts';
import { acknowledge } from './helpers.ts';

export function fn(
  stack: FleetStack,
  name: FunctionName,
  o: { memoryMb: number; timeout: Duration; env: Record<string, string>; reservedConcurrency?: number },
): lambda.Function {
  const logGroup = new logs.LogGroup(stack, `${name}Logs`, {
    retention: logs.RetentionDays.ONE_MONTH,
    encryptionKey: stack.key,
    removalPolicy: RemovalPolicy.DESTROY,
  });
  const role = new iam.Role(stack, `${name}Role`, {
    assumedBy: new iam.ServicePrincipal('lambda.amazonaws.com'),
    description: `gpu-fleet ${name} function`,
  });
  logGroup.grantWrite(role);
  const f = new lambda.Function(stack, `${name}Function`, {
    code: functionCode(stack, name),
    handler: 'index.handler',
    runtime: lambda.Runtime.NODEJS_22_X,
    architecture: lambda.Architecture.ARM_64,
    memorySize: o.memoryMb,
    timeout: o.timeout,
    role,
    logGroup,
    tracing: lambda.Tracing.ACTIVE,
    environment: { ...o.env, POWERTOOLS_SERVICE_NAME: `gpu-fleet-${name}`, NODE_OPTIONS: '--enable-source-maps' },
    ...(o.reservedConcurrency !== undefined ? { reservedConcurrentExecutions: o.reservedConcurrency } : {}),
    // Called synchronously (an SQS batch, a function URL): the caller sees a failure and retries; no failure destination.
    ...(name === 'intake' || name === 'agentApi' || name === 'peopleApi'
      ? {}
      : { onFailure: new destinations.SqsDestination(stack.failures), retryAttempts: 2 }),
  });
  acknowledge(role, {
    'AwsSolutions-IAM5[Resource::*]':
      'X-Ray trace segments (Lambda active tracing) and the Describe/List/GetMetricData/GetResources calls in stack policy support no resource-level permissions.',
  });
  acknowledge(f, {
    'AwsSolutions-L1': 'Node.js 22 is the runtime gpu-fleet is built and tested for; Node.js 24 has not been qualified yet.',
  });
  return f;
}

/**
 * A function's code: the folder infra/app.ts bundled it into (infra/bundling.ts, the options
 * bench:bundles measures). A stack built without bundles is allowed only where CDK skips
 * bundling (tests, `cdk synth --exclusively` of another stack); it gets a placeholder.
 */
export function functionCode(stack: FleetStack, name: FunctionName): lambda.Code {
  const dir = stack.bundles?.[name];
  if (dir) return lambda.Code.fromAsset(dir);
  if (stack.bundlingRequired)
    throw new Error(
      `no bundle for the ${name} function (${FUNCTION_ENTRIES[name]}): infra/app.ts bundles the functions before it builds the stack`,
    );
  return lambda.Code.fromInline(
    `exports.handler = async () => { throw new Error('the ${name} function was synthesised without its bundle'); };`,
  );
}
