import { build } from 'esbuild';
import { describe, expect, it } from 'vitest';
import { bundleOptions, FUNCTION_ENTRIES } from '../../infra/bundling.ts';

const inputsOf = async (entry: string, gcp: boolean) => {
  const out = await build({ ...bundleOptions(entry, { gcp }), write: false, metafile: true, outfile: 'x.mjs' });
  return Object.keys(out.metafile.inputs);
};

describe('the Lambda bundles', () => {
  it('leave GCP out unless it is configured: no Compute client, no GCP adapter, no GCP catalogue', async () => {
    for (const entry of Object.values(FUNCTION_ENTRIES)) {
      const inputs = await inputsOf(entry, false);
      expect(inputs.filter((i) => /@google-cloud|google-gax|cloud\/gcp\/|gcp-gpu-machines|client-secrets-manager/.test(i))).toEqual([]);
      expect(inputs.some((i) => i.startsWith('cloud/wiring.ts'))).toBe(true);
    }
    // The agent API with GCP regions' buckets carries the Cloud Storage store and no Compute client; so does the agent.
    const gcsOnly = Object.keys(
      (
        await build({
          ...bundleOptions(FUNCTION_ENTRIES.agentApi, { gcp: false, gcs: true }),
          write: false,
          metafile: true,
          outfile: 'x.mjs',
        })
      ).metafile.inputs,
    );
    expect(gcsOnly).toEqual(
      expect.arrayContaining([
        'cloud/gcp/checkpoint-store.ts',
        'cloud/gcp/storage.ts',
        'cloud/gcp/credentials.ts',
        'cloud/gcp/control-plane-storage.ts',
        'cloud/gcp/identity-token.ts',
      ]),
    );
    expect(gcsOnly.some((i) => i.includes('@google-cloud/storage'))).toBe(true);
    expect(gcsOnly.filter((i) => /@google-cloud\/compute|google-gax|cloud\/gcp\/(runtime|mig-node-groups)\.ts/.test(i))).toEqual([]);
    const withGcp = await inputsOf(FUNCTION_ENTRIES.reconcile, true);
    expect(withGcp).toEqual(
      expect.arrayContaining(['cloud/gcp/runtime.ts', 'cloud/gcp/mig-node-groups.ts', 'data/catalog/gcp-gpu-machines.json']),
    );
  }, 60_000);

  it('keep only the SDK shapes gpu-fleet uses (the schema-keys plugin makes them tree-shakeable)', async () => {
    const out = await build({
      ...bundleOptions(FUNCTION_ENTRIES.reconcile, { gcp: false }),
      write: false,
      metafile: true,
      outfile: 'x.mjs',
    });
    const ec2 = Object.entries(out.metafile.outputs['x.mjs']!.inputs).find(([f]) =>
      f.includes('client-ec2/dist-es/schemas/schemas_0.js'),
    )![1];
    const code = out.outputFiles[0]!.text;
    // The shapes of the calls made are there; the other ~3,000 shapes of the EC2 API are not.
    expect(code).toContain('DescribeSpotPriceHistory');
    expect(code).not.toContain('AcceptAddressTransferRequest');
    expect(ec2.bytesInOutput).toBeLessThan(120 * 1024);
  }, 60_000);
});
