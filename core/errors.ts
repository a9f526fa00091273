import { parse as parseTolerantly, printParseErrorCode, type ParseError } from 'jsonc-parser';

/**
 * The project's errors: one root, {@link GpuFleetError}, that every error class of gpu-fleet
 * extends. Each subclass sets `name`, keeps the `cause` it was given and carries context (the
 * resource, the value, the operation) as data, so a log line or a decision record can say what
 * failed without parsing the message.
 *
 * The port error vocabulary ({@link CloudError}) is here too: adapters translate every SDK or
 * HTTP error into one of these, with context; no SDK error type leaves an adapter. Expected
 * outcomes (a job that does not fit, a budget that says no) are values, not errors.
 */

/** What an error was about, as data. Keys are short nouns (`resource`, `value`, `operation`). */
export type ErrorContext = Readonly<Record<string, unknown>>;

export interface GpuFleetErrorOptions {
  readonly cause?: unknown;
  readonly context?: ErrorContext;
}

export class GpuFleetError extends Error {
  override name = 'GpuFleetError';
  readonly context: ErrorContext;

  constructor(message: string, options: GpuFleetErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.context = options.context ?? {};
  }
}

export type CloudErrorCode =
  'throttled' | 'insufficient-capacity' | 'quota-exceeded' | 'not-found' | 'access-denied' | 'invalid-request' | 'conflict' | 'unavailable';

export const CLOUD_ERROR_CODES: readonly CloudErrorCode[] = [
  'throttled',
  'insufficient-capacity',
  'quota-exceeded',
  'not-found',
  'access-denied',
  'invalid-request',
  'conflict',
  'unavailable',
];

export type CloudErrorContext = {
  readonly operation: string;
  readonly resource?: string;
  readonly cloud?: string;
};

/** A call to the outside world failed; `code` says how, in the ports' words. */
export class CloudError extends GpuFleetError {
  override name = 'CloudError';
  override readonly context: CloudErrorContext;

  constructor(
    readonly code: CloudErrorCode,
    message: string,
    context: CloudErrorContext = { operation: 'unknown' },
    options?: { cause?: unknown },
  ) {
    super(message, { context, ...(options?.cause !== undefined ? { cause: options.cause } : {}) });
    this.context = context;
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

/** An amount of money, a price or a duration that is not what the money arithmetic allows. */
export class MoneyError extends GpuFleetError {
  override name = 'MoneyError';
}

/**
 * A mistake in how a command was called (a flag, an argument, a file it names): the command
 * exits with code 2 and prints the message, which says what was wrong and what is allowed.
 */
export class UsageError extends GpuFleetError {
  override name = 'UsageError';
}

/**
 * Configuration that cannot be used (an environment variable, a config file): every problem is
 * listed, each naming the setting, the value received and what is allowed.
 */
export class ConfigError extends GpuFleetError {
  override name = 'ConfigError';
  constructor(
    readonly source: string,
    readonly problems: readonly string[],
    options: { cause?: unknown; what?: string } = {},
  ) {
    super(`${source} is not a valid ${options.what ?? 'gpu-fleet config'}:\n${problems.map((p) => `  - ${p}`).join('\n')}`, {
      context: { source, problems },
      ...(options.cause !== undefined ? { cause: options.cause } : {}),
    });
  }
}

/** Applying one action of a plan failed for a reason of gpu-fleet's own (not a failed cloud call). */
export class ApplyError extends GpuFleetError {
  override name = 'ApplyError';
  constructor(
    readonly code: 'refused' | 'unregistered' | 'no-provider',
    message: string,
    readonly resource: string,
  ) {
    super(message, { context: { code, resource } });
  }
}

/** The message of anything thrown, for logs, records and people (never a stack). */
export function messageOf(error: unknown): string {
  if (error instanceof Error) return error.message;
  if (typeof error === 'string') return error;
  try {
    return JSON.stringify(error) ?? String(error);
  } catch {
    return String(error);
  }
}

/** The code of an error in the ports' vocabulary, when it has one. */
export function codeOf(error: unknown): CloudErrorCode | undefined {
  return error instanceof CloudError ? error.code : undefined;
}

/**
 * Parses JSON text; a syntax error is thrown as a GpuFleetError saying where, by line and column
 * (found by jsonc-parser's scanner, which reports an offset for every kind of mistake), with that
 * line shown: `line 4, column 3: a comma is missing (at: "period": "monthly")`.
 */
export function parseJson(text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch (error) {
    const found: ParseError[] = [];
    parseTolerantly(text, found, { disallowComments: true, allowTrailingComma: false, allowEmptyContent: false });
    const first = found[0];
    const position = first ? first.offset : text.length;
    const before = text.slice(0, position).split('\n');
    const line = before.length;
    const column = before.at(-1)!.length + 1;
    const shown = (text.split('\n')[line - 1] ?? '').trim();
    const what =
      text.trim() === ''
        ? 'there is no JSON: the text is empty'
        : first
          ? (JSON_MISTAKES[printParseErrorCode(first.error)] ?? printParseErrorCode(first.error))
          : messageOf(error);
    throw new GpuFleetError(
      `line ${line}, column ${column}: ${what}${shown ? ` (at: ${shown.length > 60 ? `${shown.slice(0, 57)}...` : shown})` : ''}`,
      { cause: error, context: { line, column } },
    );
  }
}

/** jsonc-parser's error codes, said as what to fix. */
const JSON_MISTAKES: Readonly<Record<string, string>> = {
  InvalidSymbol: 'not JSON here (a value is a string in double quotes, a number, true, false, null, an object or an array)',
  InvalidNumberFormat: 'not a JSON number',
  PropertyNameExpected: 'a field name in double quotes was expected (JSON has no trailing commas)',
  ValueExpected: 'a value was expected (JSON has no trailing commas)',
  ColonExpected: 'a ":" was expected after the field name',
  CommaExpected: 'a comma is missing before this',
  CloseBraceExpected: 'a "}" is missing',
  CloseBracketExpected: 'a "]" is missing',
  EndOfFileExpected: 'more text follows the end of the JSON value',
  InvalidCommentToken: 'JSON has no comments',
  UnexpectedEndOfComment: 'JSON has no comments',
  UnexpectedEndOfString: 'a string is not closed with a double quote',
  UnexpectedEndOfNumber: 'a number is cut short',
  InvalidUnicode: 'a \\u escape needs four hex digits',
  InvalidEscapeCharacter: 'not a JSON escape (\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX)',
  InvalidCharacter: 'a control character (such as a tab or line break) inside a string',
};

/**
 * A person's role sees one team, and the request was about another (or about the whole fleet).
 * Decided from the ids asked for, never from what is stored: it says nothing of whether the
 * other team's job exists.
 */
export class OutOfViewError extends GpuFleetError {
  override name = 'OutOfViewError';

  constructor(
    readonly team: string,
    message: string,
  ) {
    super(message, { context: { team } });
  }
}
