import { mkdirSync, statSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { build, buildSync } from 'esbuild';
import { bundleOptions } from './bundling.ts';

/**
 * Bundles the node agent (agent/main.ts) into one ES module file for the node groups' user data
 * to download and run with Node.js (20 or later). Deterministic: the same sources give the same
 * bytes (and so the same asset hash, and no needless instance refresh). The agent never loads the
 * Compute side of the wiring; it carries the Cloud Storage store, which it loads on a GCP machine
 * whose checkpoints go to its region's bucket.
 */
export const AGENT_ENTRY = resolve(import.meta.dirname, '../agent/main.ts');
const AGENT_FILE = 'gpu-fleet-agent.mjs';

/** The bundle as the CDK app builds it (with the SDK schema plugin, which needs esbuild's asynchronous API). */
export async function bundleAgent(outDir: string): Promise<{ file: string; bytes: number }> {
  mkdirSync(outDir, { recursive: true });
  const file = join(outDir, AGENT_FILE);
  await build({ ...bundleOptions(AGENT_ENTRY, { gcp: false, gcs: true, target: 'node20' }), outfile: file });
  return { file, bytes: statSync(file).size };
}

/** The same without plugins, for a stack built synchronously outside the app (tests): larger, same behaviour. */
export function bundleAgentSync(outDir: string): { file: string; bytes: number } {
  mkdirSync(outDir, { recursive: true });
  const file = join(outDir, AGENT_FILE);
  buildSync({ ...bundleOptions(AGENT_ENTRY, { gcp: false, gcs: true, target: 'node20' }), plugins: [], outfile: file });
  return { file, bytes: statSync(file).size };
}
