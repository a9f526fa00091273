import type { Context } from 'aws-lambda';

/** A Lambda context for invoking handlers outside Lambda: in tests and with `gpu-fleet invoke`. */
export function lambdaContext(name = 'gpu-fleet-test', requestId = `local-${process.hrtime.bigint().toString(36)}`): Context {
  return {
    callbackWaitsForEmptyEventLoop: false,
    functionName: name,
    functionVersion: '$LATEST',
    invokedFunctionArn: `arn:aws:lambda:us-east-1:123456789012:function:${name}`,
    memoryLimitInMB: '512',
    awsRequestId: requestId,
    logGroupName: `/aws/lambda/${name}`,
    logStreamName: 'test',
    getRemainingTimeInMillis: () => 60_000,
    done: () => undefined,
    fail: () => undefined,
    succeed: () => undefined,
  };
}
