import { OAuth2Client, type Certificates } from 'google-auth-library';
import '../../core/schema.ts';
import * as z from 'zod/mini';

/**
 * A GCE machine's identity, as the agent API knows it: the instance identity token its metadata
 * server issues (`instance/service-accounts/default/identity?audience=…&format=full`), signed by
 * Google, naming the instance it was asked from (`google.compute_engine`). Only that machine's
 * metadata server issues a token naming it, and the node's wall lets only root and the agent reach
 * that server, so the token is the GCP equivalent of the session name EC2 gives an instance role:
 * the API checks its signature, audience and lifetime, the service account and the project, and
 * takes the instance name as the caller's machine.
 * https://cloud.google.com/compute/docs/instances/verifying-instance-identity
 */

/** The fleet's rules on GCE callers (the fleet config's `gcp`, through `GPU_FLEET_GCE_AGENTS`). */
export const GceAgentsSchema = z.strictObject({
  /** The audience the agents ask their tokens for: the API's own name, never another service's. */
  audience: z.string().check(z.minLength(1), z.maxLength(256)),
  /** The service accounts the fleet's GCP machines run as (their e-mail addresses). */
  serviceAccounts: z.array(z.string().check(z.regex(/^[a-z0-9-]+@[a-z0-9-]+\.iam\.gserviceaccount\.com$/))).check(z.minLength(1)),
  /** The projects the fleet's GCP machines are in. */
  projects: z.array(z.string()).check(z.minLength(1)),
});
export type GceAgents = z.infer<typeof GceAgentsSchema>;

/** What a verified token says of its machine. */
export interface GceCaller {
  readonly instanceName: string;
  readonly instanceId: string;
  readonly projectId: string;
  readonly zone: string;
  readonly serviceAccount: string;
}

/** Google's issuers of instance identity tokens. */
const ISSUERS = ['https://accounts.google.com', 'accounts.google.com'];

/** What `format=full` adds: the instance the token was asked from. */
const ComputeEngineClaims = z.object({
  project_id: z.string(),
  zone: z.string(),
  instance_id: z.string(),
  instance_name: z.string().check(z.regex(/^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$/)),
});

/** The shape of an EC2 instance id: a GCE machine named so would pass for an AWS one. */
const EC2_ID_RE = /^i-[0-9a-f]{8,17}$/;

/**
 * Verifies an instance identity token, and says which machine sent it, or why it is refused.
 * `certs` gives Google's signing keys (Google's published certificates by default, which the
 * library caches for as long as Google's answer says).
 */
export async function verifyGceIdentityToken(
  token: string,
  rules: GceAgents,
  certs: () => Promise<Certificates> = googleCerts,
): Promise<GceCaller | { error: string }> {
  let payload: Record<string, unknown> | undefined;
  try {
    const ticket = await new OAuth2Client().verifySignedJwtWithCertsAsync(token, await certs(), rules.audience, ISSUERS);
    payload = ticket.getPayload() as Record<string, unknown> | undefined;
  } catch (error) {
    return { error: `the GCE identity token is not valid: ${(error as Error).message}` };
  }
  if (!payload) return { error: 'the GCE identity token holds no claims' };
  const email = typeof payload.email === 'string' ? payload.email : undefined;
  if (payload.email_verified !== true || !email || !rules.serviceAccounts.includes(email))
    return {
      error: `the GCE identity token is for ${email ?? 'no service account'}, not one of the fleet's machines' (${rules.serviceAccounts.join(', ')})`,
    };
  const google = payload.google as { compute_engine?: unknown } | undefined;
  const machine = ComputeEngineClaims.safeParse(google?.compute_engine);
  if (!machine.success) return { error: 'the GCE identity token names no instance: ask the metadata server for it with format=full' };
  const m = machine.data;
  if (!rules.projects.includes(m.project_id))
    return { error: `the machine is in project ${m.project_id}, not one of the fleet's (${rules.projects.join(', ')})` };
  if (EC2_ID_RE.test(m.instance_name))
    return { error: `a GCE machine named ${m.instance_name} would pass for an EC2 instance; the fleet's GCP machines are not named so` };
  return { instanceName: m.instance_name, instanceId: m.instance_id, projectId: m.project_id, zone: m.zone, serviceAccount: email };
}

let client: OAuth2Client | undefined;

/** Google's current signing certificates (the library caches them by the answer's max-age). */
async function googleCerts(): Promise<Certificates> {
  client ??= new OAuth2Client();
  return (await client.getFederatedSignonCertsAsync()).certs;
}
