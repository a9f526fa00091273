import { CloudError, type CloudErrorCode } from '../../core/errors.ts';

/**
 * Compute API error reasons (`error.errors[].reason`, or the google.rpc.ErrorInfo reason), and the
 * operation error codes of failed launches, by the port vocabulary they mean.
 */
const REASONS: Readonly<Record<string, CloudErrorCode>> = {
  notFound: 'not-found',
  forbidden: 'access-denied',
  accessNotConfigured: 'access-denied',
  insufficientPermissions: 'access-denied',
  authError: 'access-denied',
  rateLimitExceeded: 'throttled',
  userRateLimitExceeded: 'throttled',
  RATE_LIMIT_EXCEEDED: 'throttled',
  quotaExceeded: 'quota-exceeded',
  QUOTA_EXCEEDED: 'quota-exceeded',
  ZONE_RESOURCE_POOL_EXHAUSTED: 'insufficient-capacity',
  ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS: 'insufficient-capacity',
  RESOURCE_POOL_EXHAUSTED: 'insufficient-capacity',
  resource_availability: 'insufficient-capacity',
  conditionNotMet: 'conflict',
  CONDITION_NOT_MET: 'conflict',
  resourceNotReady: 'conflict',
  resourceInUseByAnotherResource: 'conflict',
  invalid: 'invalid-request',
  badRequest: 'invalid-request',
  required: 'invalid-request',
  backendError: 'unavailable',
  internalError: 'unavailable',
};

/** gRPC status codes (google-gax errors carry them in `code`). */
const GRPC: Readonly<Record<number, CloudErrorCode>> = {
  3: 'invalid-request', // INVALID_ARGUMENT
  4: 'unavailable', // DEADLINE_EXCEEDED
  5: 'not-found', // NOT_FOUND
  6: 'conflict', // ALREADY_EXISTS
  7: 'access-denied', // PERMISSION_DENIED
  8: 'throttled', // RESOURCE_EXHAUSTED
  9: 'conflict', // FAILED_PRECONDITION
  10: 'conflict', // ABORTED
  13: 'unavailable', // INTERNAL
  14: 'unavailable', // UNAVAILABLE
  16: 'access-denied', // UNAUTHENTICATED
};

const HTTP: Readonly<Record<number, CloudErrorCode>> = {
  400: 'invalid-request',
  401: 'access-denied',
  403: 'access-denied',
  404: 'not-found',
  409: 'conflict',
  412: 'conflict',
  429: 'throttled',
};

/** The code of a Compute error from its reason, its HTTP status, then its gRPC status. */
export function gcpErrorCode(e: { reason?: string; httpStatusCode?: number; code?: number | string; message?: string }): CloudErrorCode {
  const byReason = REASONS[e.reason ?? ''];
  if (byReason) return byReason;
  // Compute reports rate quotas as 403 rateLimitExceeded and stockouts in the message text.
  const text = e.message ?? '';
  if (/rate ?limit|Quota exceeded for quota (group|metric) '.*(Read|Write|Operation)/i.test(text)) return 'throttled';
  if (/QUOTA_EXCEEDED|Quota '.*' exceeded/i.test(text)) return 'quota-exceeded';
  if (/STOCKOUT|RESOURCE_POOL_EXHAUSTED|does not have enough resources available/i.test(text)) return 'insufficient-capacity';
  // Cloud Storage's ApiError carries the HTTP status in `code` (gRPC codes stop at 16).
  const status = e.httpStatusCode ?? (typeof e.code === 'number' && e.code >= 100 ? e.code : undefined);
  const byStatus = status === undefined ? undefined : (HTTP[status] ?? (status >= 500 ? 'unavailable' : undefined));
  if (byStatus) return byStatus;
  return (typeof e.code === 'number' ? GRPC[e.code] : undefined) ?? 'invalid-request';
}

/**
 * Translates a google-gax, Cloud Storage (or operation) error into the port's vocabulary, keeping Google's
 * reason and message and the call's context. No SDK error type leaves an adapter.
 */
export function translateGcpError(error: unknown, context: { operation: string; resource?: string }): CloudError {
  if (error instanceof CloudError) return error;
  const raw = (error ?? {}) as {
    reason?: string;
    httpStatusCode?: number;
    code?: number | string;
    message?: string;
    errors?: readonly { reason?: string }[];
  };
  // Cloud Storage's ApiError names its reason in errors[0].reason.
  const reason = raw.reason ?? (Array.isArray(raw.errors) ? raw.errors[0]?.reason : undefined);
  // Read field by field: an Error's message is its own property, but not an enumerable one (a spread would drop it).
  const e = { reason, httpStatusCode: raw.httpStatusCode, code: raw.code, message: raw.message };
  const code = gcpErrorCode(e);
  const where = context.resource ? ` on ${context.resource}` : '';
  const why = e.reason ? ` (${e.reason})` : '';
  return new CloudError(
    code,
    `GCP ${context.operation}${where} failed${why}: ${e.message ?? String(error)}`,
    { ...context, cloud: 'gcp' },
    { cause: error },
  );
}

/** The errors a finished Compute operation carries (`error.errors[]`), as one CloudError, or undefined. */
export function operationError(
  op: {
    error?: { errors?: readonly { code?: string | null; message?: string | null }[] | null } | null;
    httpErrorStatusCode?: number | null;
    httpErrorMessage?: string | null;
    name?: string | null;
    operationType?: string | null;
  },
  context: { operation: string; resource?: string },
): CloudError | undefined {
  const errors = op.error?.errors ?? [];
  if (errors.length === 0) return undefined;
  const first = errors[0]!;
  const code = gcpErrorCode({
    reason: first.code ?? undefined,
    message: first.message ?? undefined,
    ...(op.httpErrorStatusCode ? { httpStatusCode: op.httpErrorStatusCode } : {}),
  });
  const text = errors.map((x) => `${x.code ?? 'ERROR'}: ${x.message ?? ''}`).join('; ');
  return new CloudError(
    code,
    `GCP ${context.operation}${context.resource ? ` on ${context.resource}` : ''} failed (operation ${op.name ?? '?'}): ${text}`,
    { ...context, cloud: 'gcp' },
  );
}
