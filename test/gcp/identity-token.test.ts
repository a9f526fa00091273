import { describe, expect, it } from 'vitest';
import { verifyGceIdentityToken, type GceAgents } from '../../cloud/gcp/identity-token.ts';
import { gceTokenSigner } from '../support/gce-identity.ts';

const rules: GceAgents = {
  audience: 'gpu-fleet/GpuFleet/agent-api',
  serviceAccounts: ['gpu-fleet-node@ml-prod.iam.gserviceaccount.com'],
  projects: ['ml-prod'],
};

describe("a GCE machine's identity token, as the agent API checks it", () => {
  const google = gceTokenSigner();
  const verify = (token: string) => verifyGceIdentityToken(token, rules, google.certs);

  it("names the machine it was issued to, when Google signed it for this API, the fleet's account and project", async () => {
    expect(await verify(google.token({ audience: rules.audience, instance: 'gf-a100-spot-7xq2' }))).toEqual({
      instanceName: 'gf-a100-spot-7xq2',
      instanceId: '4417370290000001234',
      projectId: 'ml-prod',
      zone: 'us-central1-a',
      serviceAccount: 'gpu-fleet-node@ml-prod.iam.gserviceaccount.com',
    });
  });

  it('refuses a token for another audience, expired, signed by another key, of another account or project, or naming no instance', async () => {
    const refused = async (token: string) => {
      const got = await verify(token);
      expect(got).toHaveProperty('error');
      return (got as { error: string }).error;
    };
    const base = { audience: rules.audience, instance: 'gf-a100-spot-7xq2' };
    expect(await refused(google.token({ ...base, audience: 'https://other-service.example' }))).toMatch(/Wrong recipient|audience/i);
    expect(await refused(google.token({ ...base, ageSec: 2 * 3600 }))).toMatch(/too late|expired/i);
    expect(await refused(google.token({ ...base, key: google.otherKey() }))).toMatch(/Invalid token signature/);
    expect(await refused(google.token({ ...base, email: 'someone@other-proj.iam.gserviceaccount.com' }))).toBe(
      "the GCE identity token is for someone@other-proj.iam.gserviceaccount.com, not one of the fleet's machines' (gpu-fleet-node@ml-prod.iam.gserviceaccount.com)",
    );
    expect(await refused(google.token({ ...base, project: 'someone-else' }))).toBe(
      "the machine is in project someone-else, not one of the fleet's (ml-prod)",
    );
    expect(await refused(google.token({ ...base, full: false }))).toBe(
      'the GCE identity token names no instance: ask the metadata server for it with format=full',
    );
    // A GCE machine may be named like an EC2 instance id; it never passes for one.
    expect(await refused(google.token({ ...base, instance: 'i-0123456789abcdef0' }))).toMatch(/would pass for an EC2 instance/);
    expect(await refused('not.a.token')).toMatch(/^the GCE identity token is not valid/);
    // A token's claims changed after signing.
    const [h, , s] = google.token(base).split('.');
    const forged = Buffer.from(JSON.stringify({ aud: rules.audience, email: rules.serviceAccounts[0] })).toString('base64url');
    expect(await refused(`${h}.${forged}.${s}`)).toMatch(/Invalid token signature/);
  });
});
