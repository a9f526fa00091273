import { mkdirSync, statSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { buildSync } from 'esbuild';

/**
 * Bundles the node agent (agent/main.ts) into one ES module file for the node groups' user data
 * to download and run with Node.js. Deterministic: the same sources give the same bytes (and so
 * the same asset hash, and no needless instance refresh).
 */
export const AGENT_ENTRY = resolve(import.meta.dirname, '../agent/main.ts');

export function bundleAgent(outDir: string): { file: string; bytes: number } {
  mkdirSync(outDir, { recursive: true });
  const file = join(outDir, 'gpu-fleet-agent.mjs');
  buildSync({
    entryPoints: [AGENT_ENTRY],
    outfile: file,
    bundle: true,
    platform: 'node',
    target: 'node20',
    format: 'esm',
    minify: true,
    legalComments: 'none',
    mainFields: ['module', 'main'],
    // Some dependencies are CommonJS and call require(): give the module one.
    banner: { js: "import { createRequire as __gpuFleetRequire } from 'node:module'; const require = __gpuFleetRequire(import.meta.url);" },
    logLevel: 'error',
  });
  return { file, bytes: statSync(file).size };
}
