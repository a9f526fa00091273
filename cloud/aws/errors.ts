import { CloudError, type CloudErrorCode } from '../../core/errors.ts';

/** AWS error names, by the port vocabulary they mean. */
const CODES: Readonly<Record<string, CloudErrorCode>> = {
  ThrottlingException: 'throttled',
  Throttling: 'throttled',
  ThrottledException: 'throttled',
  RequestLimitExceeded: 'throttled',
  TooManyRequestsException: 'throttled',
  ProvisionedThroughputExceededException: 'throttled',
  RequestThrottledException: 'throttled',
  SlowDown: 'throttled',
  InsufficientInstanceCapacity: 'insufficient-capacity',
  InsufficientCapacity: 'insufficient-capacity',
  MaxSpotInstanceCountExceeded: 'quota-exceeded',
  VcpuLimitExceeded: 'quota-exceeded',
  InstanceLimitExceeded: 'quota-exceeded',
  LimitExceededException: 'quota-exceeded',
  LimitExceeded: 'quota-exceeded',
  ServiceQuotaExceededException: 'quota-exceeded',
  ResourceNotFoundException: 'not-found',
  NoSuchKey: 'not-found',
  NoSuchBucket: 'not-found',
  'AWS.SimpleQueueService.NonExistentQueue': 'not-found',
  QueueDoesNotExist: 'not-found',
  'InvalidInstanceID.NotFound': 'not-found',
  TargetGroupNotFoundException: 'not-found',
  TargetGroupNotFound: 'not-found',
  TooManyTargetsException: 'quota-exceeded',
  TooManyTargets: 'quota-exceeded',
  AccessDeniedException: 'access-denied',
  CredentialsProviderError: 'access-denied',
  SignatureDoesNotMatch: 'access-denied',
  ExpiredToken: 'access-denied',
  InvalidSignatureException: 'access-denied',
  AccessDenied: 'access-denied',
  UnauthorizedOperation: 'access-denied',
  UnrecognizedClientException: 'access-denied',
  InvalidClientTokenId: 'access-denied',
  ExpiredTokenException: 'access-denied',
  ValidationError: 'invalid-request',
  ValidationException: 'invalid-request',
  InvalidParameterValue: 'invalid-request',
  InvalidParameterCombination: 'invalid-request',
  'InvalidInstanceID.Malformed': 'invalid-request',
  ConditionalCheckFailedException: 'conflict',
  TransactionConflictException: 'conflict',
  ResourceContention: 'conflict',
  ScalingActivityInProgress: 'conflict',
  InternalServerError: 'unavailable',
  InternalFailure: 'unavailable',
  InternalError: 'unavailable',
  ServiceUnavailable: 'unavailable',
  ServiceUnavailableException: 'unavailable',
  Unavailable: 'unavailable',
};

/**
 * Translates an AWS SDK error into the port's vocabulary, keeping the AWS code and message and
 * the call's context. No SDK error type leaves an adapter.
 */
export function translateAwsError(error: unknown, context: { operation: string; resource?: string }): CloudError {
  if (error instanceof CloudError) return error;
  const e = error as {
    name?: string;
    Code?: string;
    code?: string;
    message?: string;
    $metadata?: { httpStatusCode?: number };
    tableName?: string;
    tableVariable?: string;
  };
  if (e?.name === 'ResourceNotFoundException' && typeof e.tableName === 'string') {
    // DynamoDB names no table in this error; the document client's middleware noted which it was.
    const fix = `deploy the stack, or set ${e.tableVariable ?? 'the GPU_FLEET_*_TABLE variable'} to the name of the table`;
    return new CloudError(
      'not-found',
      `${context.operation} failed: table ${e.tableName} does not exist (ResourceNotFoundException); ${fix}`,
      { ...context, resource: e.tableName, cloud: 'aws' },
      { cause: error },
    );
  }
  if (e?.name === 'CredentialsProviderError') {
    return new CloudError(
      'access-denied',
      `${context.operation} failed: no AWS credentials found (${e.message ?? 'no provider gave any'})`,
      { ...context, cloud: 'aws' },
      { cause: error },
    );
  }
  const name = e?.name ?? e?.Code ?? e?.code ?? 'UnknownError';
  const status = e?.$metadata?.httpStatusCode;
  const code: CloudErrorCode =
    CODES[name] ??
    (status === 429
      ? 'throttled'
      : status !== undefined && status >= 500
        ? 'unavailable'
        : status === 403
          ? 'access-denied'
          : status === 404
            ? 'not-found'
            : 'invalid-request');
  const where = context.resource ? ` on ${context.resource}` : '';
  return new CloudError(
    code,
    `${context.operation}${where} failed: ${name}: ${e?.message ?? String(error)}`,
    { ...context, cloud: 'aws' },
    { cause: error },
  );
}

export function isConditionFailure(error: unknown): boolean {
  return (error as { name?: string })?.name === 'ConditionalCheckFailedException';
}
