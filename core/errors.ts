/**
 * The port error vocabulary. Adapters translate every SDK or HTTP error into one of these,
 * with context; no SDK error type leaves an adapter. Expected outcomes (a job that does not
 * fit, a budget that says no) are values, not errors.
 */
export type CloudErrorCode =
  'throttled' | 'insufficient-capacity' | 'quota-exceeded' | 'not-found' | 'access-denied' | 'invalid-request' | 'conflict' | 'unavailable';

export class GpuFleetError extends Error {
  override name = 'GpuFleetError';
}

export class CloudError extends GpuFleetError {
  override name = 'CloudError';
  constructor(
    readonly code: CloudErrorCode,
    message: string,
    readonly context: { readonly operation: string; readonly resource?: string; readonly cloud?: string } = { operation: 'unknown' },
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }

  /** Worth retrying later (with backoff): the call may succeed unchanged. */
  get retryable(): boolean {
    return this.code === 'throttled' || this.code === 'unavailable' || this.code === 'conflict';
  }
}

export function isCloudError(error: unknown, code?: CloudErrorCode): error is CloudError {
  return error instanceof CloudError && (code === undefined || error.code === code);
}

/** Raised by a store when a conditional write lost a race (the version moved). */
export class ConflictError extends GpuFleetError {
  override name = 'ConflictError';
}
