/** A mistake in how the command was called: exit code 2, message to stderr. */
export class UsageError extends Error {
  override name = 'UsageError';
}
