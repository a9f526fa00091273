import { mkdirSync, statSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { build, type BuildOptions, type Plugin } from 'esbuild';
import { AWS_CATALOG_FIELDS_READ } from '../cloud/catalog/shipped.ts';
import { PRICE_FIELDS_READ } from '../cloud/prices.ts';

/**
 * How gpu-fleet's Lambda functions and node agent are bundled: one ES module file each, minified,
 * with what a fleet without GCP never loads left out. The stack and `npm run bench:bundles` use
 * these very options, so what the bench measures is what is deployed.
 */

/** Each Lambda bundle's size target (minified, not gzipped), without GCP. */
export const LAMBDA_BUNDLE_TARGET_KIB = 1024;

/**
 * What only the GCP side of the wiring loads (cloud/wiring.ts imports './gcp/runtime.ts' lazily,
 * when GCP projects are configured). Without GCP they are left out of the bundle: the Compute
 * client's API description alone is about 4 MB, and the GCP adapter and its catalogue ~150 KiB.
 * `./gcp/runtime.ts` is matched as the wiring writes the import.
 */
/**
 * What the Cloud Storage checkpoint store loads (a GCP region's bucket: the agent on a GCP machine
 * writes it, reconcile sweeps it, the agent API signs reads of it), matched as its importers write
 * the imports. Kept apart from the Compute side, so a bundle that needs only Cloud Storage carries
 * no Compute client. The agent API's check of GCP machines' identity tokens goes with it (the same
 * Google library).
 */
export const GCS_MODULES: readonly string[] = [
  '@google-cloud/storage',
  'google-auth-library',
  '@aws-sdk/client-secrets-manager',
  '../../cloud/gcp/checkpoint-store.ts',
  '../../cloud/gcp/control-plane-storage.ts',
  './gcs-blobs.ts',
  '../cloud/gcp/storage.ts',
  // The check of GCP machines' identity tokens (the agent API, with gcp.agentServiceAccounts): Google's token library.
  '../cloud/gcp/identity-token.ts',
  '../../cloud/gcp/identity-token.ts',
];

export const GCP_ONLY_MODULES: readonly string[] = ['@google-cloud/compute', 'google-gax', './gcp/runtime.ts', ...GCS_MODULES];

// Some dependencies are CommonJS and call require(): give the ES module one.
const REQUIRE_BANNER =
  "import { createRequire as __gpuFleetRequire } from 'node:module'; const require = __gpuFleetRequire(import.meta.url);";

/**
 * The AWS SDK's generated schema modules (one per service) declare every shape of the API, and
 * write each member's serialisation traits with computed keys (`{ [_xN]: "Tag" }` where
 * `const _xN = "xmlName"`). A bundler must assume a computed key may run code, so it keeps every
 * shape: EC2's 531 KiB of them for the four calls gpu-fleet makes. This plugin writes those keys
 * as the literal strings they are (same object, same behaviour), and the unused shapes drop out.
 */
export const literalSchemaKeys: Plugin = {
  name: 'gpu-fleet-literal-schema-keys',
  setup(b) {
    b.onLoad({ filter: /[\\/]@aws-sdk[\\/][^\\/]+[\\/]dist-es[\\/]schemas[\\/]schemas_\d+\.js$/ }, async (args) => {
      const source = await readFile(args.path, 'utf8');
      const strings = new Map<string, string>();
      for (const m of source.matchAll(/^const (_\w+) = ("[^"\\\n]*");$/gm)) strings.set(m[1]!, m[2]!);
      const contents = source.replace(/\[(_\w+)\]:/g, (whole, name: string) => (strings.has(name) ? `${strings.get(name)}:` : whole));
      return { contents, loader: 'js' };
    });
  },
};

/**
 * Which fields of a JSON value to keep: `true`, all of it; `[shape]`, each element of an array by
 * that shape; an object, the keys it names, each by its shape (`'*'`: every key the value has).
 */
export type FieldShape = true | readonly [FieldShape] | { readonly [key: string]: FieldShape };

/** A JSON value with only the fields `shape` names (a field the value lacks stays absent). */
export function projectFields(value: unknown, shape: FieldShape): unknown {
  if (shape === true || value === null || typeof value !== 'object') return value;
  if (Array.isArray(shape)) return Array.isArray(value) ? value.map((v: unknown) => projectFields(v, shape[0]!)) : value;
  const fields = shape as { readonly [key: string]: FieldShape };
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value)) {
    const sub = fields[k] ?? fields['*'];
    if (sub !== undefined) out[k] = projectFields(v, sub);
  }
  return out;
}

/** The shipped data files the functions import, each with the fields their readers use. */
const SHIPPED_DATA_READ: readonly { readonly file: RegExp; readonly shape: FieldShape }[] = [
  { file: /[\\/]data[\\/]catalog[\\/]aws-gpu-instances\.json$/, shape: AWS_CATALOG_FIELDS_READ },
  { file: /[\\/]data[\\/]prices[\\/]cloud-services\.json$/, shape: PRICE_FIELDS_READ },
];

/**
 * A deployed bundle carries of each shipped data file only the fields the code reads: the
 * provenance (sources, titles, notes: half of the AWS catalogue and of the price table) stays in
 * data/ for people, and 60 KiB less is parsed at every cold start.
 */
export const shippedDataAsRead: Plugin = {
  name: 'gpu-fleet-shipped-data-as-read',
  setup(b) {
    for (const { file, shape } of SHIPPED_DATA_READ)
      b.onLoad({ filter: file }, async (args) => ({
        contents: JSON.stringify(projectFields(JSON.parse(await readFile(args.path, 'utf8')), shape)),
        loader: 'json',
      }));
  },
};

/** esbuild options for one bundle. */
export function bundleOptions(entry: string, options: { gcp: boolean; gcs?: boolean; target?: string }): BuildOptions {
  // gcp: the whole GCP side; gcs: only the Cloud Storage checkpoint store.
  const external = options.gcp ? [] : GCP_ONLY_MODULES.filter((m) => !(options.gcs && GCS_MODULES.includes(m)));
  return {
    entryPoints: [entry],
    bundle: true,
    platform: 'node',
    target: options.target ?? 'node22',
    format: 'esm',
    minify: true,
    legalComments: 'none',
    mainFields: ['module', 'main'],
    banner: { js: REQUIRE_BANNER },
    external,
    plugins: [literalSchemaKeys, shippedDataAsRead],
    logLevel: 'error',
  };
}

/** The Lambda functions and their entry files. */
export const FUNCTION_ENTRIES = {
  intake: resolve(import.meta.dirname, '../functions/entries/intake.ts'),
  reconcile: resolve(import.meta.dirname, '../functions/entries/reconcile.ts'),
  interruption: resolve(import.meta.dirname, '../functions/entries/interruption.ts'),
  agentApi: resolve(import.meta.dirname, '../functions/entries/agent-api.ts'),
  peopleApi: resolve(import.meta.dirname, '../functions/entries/people-api.ts'),
} as const;
export type FunctionName = keyof typeof FUNCTION_ENTRIES;

/** Bundles a Lambda entry into `outDir/index.mjs` (the handler is `index.handler`), with its source map. */
export async function bundleFunction(
  entry: string,
  outDir: string,
  options: { gcp: boolean; gcs?: boolean },
): Promise<{ file: string; bytes: number }> {
  mkdirSync(outDir, { recursive: true });
  const file = join(outDir, 'index.mjs');
  await build({ ...bundleOptions(entry, options), outfile: file, sourcemap: 'linked' });
  return { file, bytes: statSync(file).size };
}

/**
 * Every function's bundle, each in its own folder under `outDir` (the CDK app builds them before
 * the stack: esbuild runs plugins only in its asynchronous API). Only the reconcile function ever
 * loads the GCP adapter, and only when GCP is configured; the agent API loads the Cloud Storage
 * store when GCP regions keep their own checkpoint buckets (`gcs`).
 */
export async function bundleFunctions(outDir: string, options: { gcp: boolean; gcs?: boolean }): Promise<Record<FunctionName, string>> {
  const out = {} as Record<FunctionName, string>;
  for (const [name, entry] of Object.entries(FUNCTION_ENTRIES) as [FunctionName, string][]) {
    const dir = join(outDir, name);
    await bundleFunction(entry, dir, { gcp: options.gcp && name === 'reconcile', gcs: !!options.gcs && name === 'agentApi' });
    out[name] = dir;
  }
  return out;
}
