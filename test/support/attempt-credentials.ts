import { AGENT_API, ATTEMPT_HEADER, claimOf, type AgentApiOp } from '../../cloud/aws/agent-api-protocol.ts';
import { AttemptCredentials } from '../../cloud/aws/attempt-credentials.ts';

/** The key of the agent API's attempt credentials in tests (the stack's is a random secret). */
export const TEST_ATTEMPT_KEY = 'gpu-fleet-test-attempt-key-0123456789abcdefghijklmnop';

export const testAttempts = (): AttemptCredentials => new AttemptCredentials(TEST_ATTEMPT_KEY);

/**
 * The credential header an agent on `nodeId` sends with a raw call to `path` (`/v1/<op>`): of the
 * attempt the call names, else of `attempt` (a read, a job write). None for a machine's own calls.
 */
export function credentialHeaders(nodeId: string, path: string, body: string, attempt = 1): Record<string, string> {
  const op = /^\/v1\/(.+)$/.exec(path)?.[1];
  if (!op || !Object.hasOwn(AGENT_API, op)) return {};
  let parsed: unknown;
  try {
    parsed = JSON.parse(body);
  } catch {
    return {};
  }
  const checked = AGENT_API[op as AgentApiOp].safeParse(parsed);
  if (!checked.success) return {};
  const claim = claimOf(op as AgentApiOp, checked.data as never);
  if (!claim) return {};
  return { [ATTEMPT_HEADER]: testAttempts().mint(nodeId, claim.jobId, claim.attempt ?? attempt) };
}
