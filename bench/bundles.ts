// Prints what each deployed bundle weighs (the three Lambda functions and the node agent), with
// the largest packages in each, using the same esbuild settings as the stack.
//   npm run bench:bundles [-- --json]
import { gzipSync } from 'node:zlib';
import { resolve } from 'node:path';
import { buildSync, type Metafile } from 'esbuild';

const ENTRIES = {
  intake: 'functions/entries/intake.ts',
  reconcile: 'functions/entries/reconcile.ts',
  interruption: 'functions/entries/interruption.ts',
  agent: 'agent/main.ts',
} as const;

const rows = Object.entries(ENTRIES).map(([name, entry]) => {
  const out = buildSync({
    entryPoints: [resolve(import.meta.dirname, '..', entry)],
    bundle: true,
    platform: 'node',
    target: name === 'agent' ? 'node20' : 'node22',
    format: 'esm',
    minify: true,
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
    process.stdout.write(`${r.bundle.padEnd(13)} ${kib(r.bytes).padStart(9)} minified, ${kib(r.gzipBytes).padStart(8)} gzipped   (${r.entry})\n`);
    process.stdout.write(`${''.padEnd(13)} largest: ${r.top.map((t) => `${t.pkg} ${kib(t.bytes)}`).join(', ')}\n`);
  }
}
