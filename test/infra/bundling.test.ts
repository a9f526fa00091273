import { mkdtempSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { build } from 'esbuild';
import { describe, expect, it } from 'vitest';
import { bundleOptions, FUNCTION_ENTRIES, projectFields } from '../../infra/bundling.ts';
import * as z from 'zod/mini';
import { PriceRecordSchema, shippedByteRates } from '../../cloud/prices.ts';
import { awsShippedCatalog } from '../../cloud/catalog/shipped.ts';

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

/**
 * What every record of the shipped price table must also say, for people (data/PROVENANCE.md): where
 * the price comes from, as of when, and whether it was confirmed or assumed. The code reads none of
 * it, and a deployed bundle leaves it out.
 */
const PRICE_TABLE_WITH_PROVENANCE = z.object({
  currency: z.literal('USD'),
  asOf: z.string(),
  prices: z.array(
    z.extend(PriceRecordSchema, {
      source: z.string().check(z.regex(/^https?:\/\/\S+$/)),
      // A date as precise as the source gives it (2024, 2026-06, 2022-07-07), or "undated".
      sourceDate: z.string().check(z.regex(/^(\d{4}(-\d{2}(-\d{2})?)?|undated)$/)),
      confidence: z.enum(['confirmed', 'assumed']),
    }),
  ),
});

describe('the shipped data in a bundle', () => {
  const ROOT = resolve(import.meta.dirname, '../..');

  it('keeps every field its readers use: the catalogue and the byte rates read from a built bundle are those read from data/', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'shipped-data-'));
    const entry = join(dir, 'entry.ts');
    writeFileSync(
      entry,
      `export { shippedByteRates } from ${JSON.stringify(join(ROOT, 'cloud/prices.ts'))};\n` +
        `export { awsShippedCatalog } from ${JSON.stringify(join(ROOT, 'cloud/catalog/shipped.ts'))};\n`,
    );
    const outfile = join(dir, 'bundle.mjs');
    await build({ ...bundleOptions(entry, { gcp: false }), outfile });
    const bundled = (await import(pathToFileURL(outfile).href)) as {
      shippedByteRates: typeof shippedByteRates;
      awsShippedCatalog: typeof awsShippedCatalog;
    };
    expect(bundled.shippedByteRates()).toEqual(shippedByteRates());
    expect(bundled.awsShippedCatalog()).toEqual(awsShippedCatalog());
    expect(awsShippedCatalog().instanceTypes.size).toBeGreaterThan(20);
    // What it leaves out is the provenance: the bundle holds neither a source's title nor its note.
    const text = readFileSync(outfile, 'utf8');
    expect(text).not.toContain('sourceTitle');
    expect(text).not.toContain('allocatable_eks');
    expect(statSync(outfile).size).toBeLessThan(
      statSync(join(ROOT, 'data/prices/cloud-services.json')).size + statSync(join(ROOT, 'data/catalog/aws-gpu-instances.json')).size,
    );
  });

  it('projects a value to the fields a shape names, every key under "*", each element of an array', () => {
    expect(
      projectFields(
        { a: 1, b: { c: 2, d: 3 }, e: [{ f: 1, g: 2 }], h: { x: { k: 1, l: 2 }, y: { k: 3 } } },
        {
          b: { c: true },
          e: [{ g: true }],
          h: { '*': { k: true } },
        },
      ),
    ).toEqual({ b: { c: 2 }, e: [{ g: 2 }], h: { x: { k: 1 }, y: { k: 3 } } });
  });

  it('the price table in data/ says where each price comes from, as of when, and how sure it is (a record without a source is refused)', () => {
    const table = JSON.parse(readFileSync(join(ROOT, 'data/prices/cloud-services.json'), 'utf8')) as { prices: Record<string, unknown>[] };
    expect(() => PRICE_TABLE_WITH_PROVENANCE.parse(table)).not.toThrow();
    const { source: _gone, ...unsourced } = table.prices[0]!;
    expect(() => PRICE_TABLE_WITH_PROVENANCE.parse({ ...table, prices: [unsourced, ...table.prices.slice(1)] })).toThrow(/source/);
  });
});
