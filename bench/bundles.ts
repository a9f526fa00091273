// Prints what each deployed bundle weighs (the three Lambda functions and the node agent), with
// the largest packages in each, using the same esbuild settings as the stack.
//   npm run bench:bundles [-- --json]
import { gzipSync } from 'node:zlib';
import { resolve } from 'node:path';
import { buildSync, type Metafile } from 'esbuild';
import { GCP_ONLY_MODULES } from '../infra/bundling.ts';

/** Each bundle, and the packages left out of it (as the stack leaves them out when GCP is not configured). */
const ENTRIES: Record<string, { entry: string; external: readonly string[] }> = {
  intake: { entry: 'functions/entries/intake.ts', external: GCP_ONLY_MODULES },
  reconcile: { entry: 'functions/entries/reconcile.ts', external: GCP_ONLY_MODULES },
  'reconcile+gcp': { entry: 'functions/entries/reconcile.ts', external: [] },
  interruption: { entry: 'functions/entries/interruption.ts', external: GCP_ONLY_MODULES },
  agent: { entry: 'agent/main.ts', external: [] },
};

const rows = Object.entries(ENTRIES).map(([name, { entry, external }]) => {
  const out = buildSync({
    entryPoints: [resolve(import.meta.dirname, '..', entry)],
    bundle: true,
    platform: 'node',
    target: name === 'agent' ? 'node20' : 'node22',
    format: 'esm',
    minify: true,
    external: [...external],
    mainFields: ['module', 'main'],
    write: false,
    metafile: true,
    outfile: `${name}.mjs`,
    logLevel: 'error',
  });
  const code = out.outputFiles[0]!.contents;
  const byPackage = new Map<string, number>();
  const meta = out.metafile as Metafile;
  for (const output of Object.values(meta.outputs)) {
    for (const [input, info] of Object.entries(output.inputs)) {
      const m = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(input);
      const key = m ? m[1]! : '(gpu-fleet)';
      byPackage.set(key, (byPackage.get(key) ?? 0) + info.bytesInOutput);
    }
  }
  const top = [...byPackage.entries()].sort((a, b) => b[1] - a[1]).slice(0, 6);
  return { bundle: name, entry, bytes: code.length, gzipBytes: gzipSync(code).length, top: top.map(([pkg, bytes]) => ({ pkg, bytes })) };
});

if (process.argv.includes('--json')) {
  process.stdout.write(`${JSON.stringify(rows, null, 2)}\n`);
} else {
  const kib = (n: number) => `${(n / 1024).toFixed(0)} KiB`;
  for (const r of rows) {
    process.stdout.write(
      `${r.bundle.padEnd(13)} ${kib(r.bytes).padStart(9)} minified, ${kib(r.gzipBytes).padStart(8)} gzipped   (${r.entry})\n`,
    );
    process.stdout.write(`${''.padEnd(13)} largest: ${r.top.map((t) => `${t.pkg} ${kib(t.bytes)}`).join(', ')}\n`);
  }
}
