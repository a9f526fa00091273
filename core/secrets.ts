/**
 * Secrets by reference, as ECS task definitions pass them: a spec names an SSM SecureString
 * parameter or a Secrets Manager secret by ARN (`secrets: [{ name, valueFrom }]`), the job record
 * keeps the reference and never the value, and the node agent resolves it for the attempt (through
 * the agent API, under that attempt's credential) into the container's env file only.
 *
 * A team uses only its own secrets: they live under `gpu-fleet/<team>/` (the SSM parameter
 * `/gpu-fleet/<team>/…`, the Secrets Manager secret `gpu-fleet/<team>/…`). Its role may write
 * there (infra/stack.ts), the agent API may read there only, and a reference elsewhere is refused
 * at intake and again when resolved.
 */

export type SecretKind = 'ssm' | 'secretsmanager';

export interface SecretRef {
  readonly kind: SecretKind;
  readonly region: string;
  readonly account: string;
  /** The team whose prefix it is under, when it is under one. */
  readonly team?: string;
  /** The parameter's name (`/gpu-fleet/…`) or the secret's id (its ARN, as Secrets Manager takes it). */
  readonly id: string;
}

const SSM_RE = /^arn:aws[a-z-]*:ssm:([a-z0-9-]+):(\d{12}):parameter(\/[A-Za-z0-9_.\-/]{1,1011})$/u;
const SM_RE = /^arn:aws[a-z-]*:secretsmanager:([a-z0-9-]+):(\d{12}):secret:([A-Za-z0-9/_+=.@-]{1,512})$/u;
const TEAM_PREFIX_RE = /^\/?gpu-fleet\/([a-z0-9][a-z0-9-]{0,31})\/[^/]/u;

/** What a `valueFrom` names, or undefined when it is neither an SSM parameter's nor a Secrets Manager secret's ARN. */
export function parseSecretRef(valueFrom: string): SecretRef | undefined {
  const ssm = SSM_RE.exec(valueFrom);
  if (ssm) {
    const team = TEAM_PREFIX_RE.exec(ssm[3]!)?.[1];
    return { kind: 'ssm', region: ssm[1]!, account: ssm[2]!, id: ssm[3]!, ...(team ? { team } : {}) };
  }
  const sm = SM_RE.exec(valueFrom);
  if (sm) {
    const team = TEAM_PREFIX_RE.exec(sm[3]!)?.[1];
    return { kind: 'secretsmanager', region: sm[1]!, account: sm[2]!, id: valueFrom, ...(team ? { team } : {}) };
  }
  return undefined;
}

export const SECRET_REF_FORMS =
  'an SSM parameter ARN (arn:aws:ssm:REGION:ACCOUNT:parameter/gpu-fleet/TEAM/NAME) or a Secrets Manager secret ARN (arn:aws:secretsmanager:REGION:ACCOUNT:secret:gpu-fleet/TEAM/NAME-abcdef)';

/** Why a job of `team` may not use these references (one line each), or none. */
export function secretProblems(secrets: readonly { readonly name: string; readonly valueFrom: string }[], team: string): string[] {
  const out: string[] = [];
  for (const [i, s] of secrets.entries()) {
    const ref = parseSecretRef(s.valueFrom);
    if (!ref) out.push(`secrets[${i}].valueFrom: must be ${SECRET_REF_FORMS}`);
    else if (ref.team !== team)
      out.push(
        `secrets[${i}] (${s.name}): ${ref.team ? `names team ${ref.team}'s secret` : 'is not under gpu-fleet/<team>/'}; a job of team ${team} may use only its own team's secrets, under ${ref.kind === 'ssm' ? `/gpu-fleet/${team}/` : `gpu-fleet/${team}/`}`,
      );
  }
  return out;
}
