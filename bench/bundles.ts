// bench:bundles — what each deployed bundle weighs (the three Lambda functions, with and without
// GCP, and the node agent), against the target for a Lambda bundle, with the largest packages in
// each. The esbuild options are the stack's own (infra/bundling.ts).
//
//   npm run bench:bundles [-- --json] [--top N]
import { gzipSync } from 'node:zlib';
import { Command } from 'commander';
import { build, type Metafile } from 'esbuild';
import { wholeNumber } from '../cloud/flags.ts';
import { AGENT_ENTRY } from '../infra/agent-bundle.ts';
import { bundleOptions, FUNCTION_ENTRIES, LAMBDA_BUNDLE_TARGET_KIB } from '../infra/bundling.ts';

export interface BundleRow {
  readonly bundle: string;
  readonly entry: string;
  /** Minified size, KiB. */
  readonly kib: number;
  readonly gzipKib: number;
  /** The target for this bundle, KiB (none for the agent, which is not a Lambda function). */
  readonly targetKib?: number;
  readonly largest: readonly { readonly pkg: string; readonly kib: number }[];
}

const BUNDLES: readonly { name: string; entry: string; gcp: boolean; target: string; targetKib?: number }[] = [
  { name: 'intake', entry: FUNCTION_ENTRIES.intake, gcp: false, target: 'node22', targetKib: LAMBDA_BUNDLE_TARGET_KIB },
  { name: 'reconcile', entry: FUNCTION_ENTRIES.reconcile, gcp: false, target: 'node22', targetKib: LAMBDA_BUNDLE_TARGET_KIB },
  { name: 'interruption', entry: FUNCTION_ENTRIES.interruption, gcp: false, target: 'node22', targetKib: LAMBDA_BUNDLE_TARGET_KIB },
  { name: 'agent-api', entry: FUNCTION_ENTRIES.agentApi, gcp: false, target: 'node22', targetKib: LAMBDA_BUNDLE_TARGET_KIB },
  { name: 'people-api', entry: FUNCTION_ENTRIES.peopleApi, gcp: false, target: 'node22', targetKib: LAMBDA_BUNDLE_TARGET_KIB },
  { name: 'reconcile+gcp', entry: FUNCTION_ENTRIES.reconcile, gcp: true, target: 'node22' },
  { name: 'agent', entry: AGENT_ENTRY, gcp: false, target: 'node20' },
];

const kib = (bytes: number) => Math.round((bytes / 1024) * 10) / 10;

export async function benchBundles(top = 6): Promise<BundleRow[]> {
  const rows: BundleRow[] = [];
  for (const b of BUNDLES) {
    const out = await build({
      ...bundleOptions(b.entry, { gcp: b.gcp, target: b.target }),
      write: false,
      metafile: true,
      outfile: `${b.name}.mjs`,
    });
    const code = out.outputFiles[0]!.contents;
    const byPackage = new Map<string, number>();
    for (const output of Object.values((out.metafile as Metafile).outputs)) {
      for (const [input, info] of Object.entries(output.inputs)) {
        const m = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(input);
        const key = m ? m[1]! : input.startsWith('data/') ? '(gpu-fleet data)' : '(gpu-fleet)';
        byPackage.set(key, (byPackage.get(key) ?? 0) + info.bytesInOutput);
      }
    }
    rows.push({
      bundle: b.name,
      entry: b.entry.replace(/^.*?\/(functions|agent)\//, '$1/'),
      kib: kib(code.length),
      gzipKib: kib(gzipSync(code).length),
      ...(b.targetKib !== undefined ? { targetKib: b.targetKib } : {}),
      largest: [...byPackage.entries()]
        .sort((a, c) => c[1] - a[1])
        .slice(0, top)
        .map(([pkg, bytes]) => ({ pkg, kib: kib(bytes) })),
    });
  }
  return rows;
}

const invokedDirectly = process.argv[1] !== undefined && import.meta.url === new URL(`file://${process.argv[1]}`).href;
if (invokedDirectly) {
  const o = new Command('bench:bundles')
    .description('What each Lambda bundle and the agent bundle weigh (minified), against the target, and their largest packages')
    .option('--top <n>', 'packages listed per bundle', wholeNumber('--top', 1, 100), 6)
    .option('--json', 'print the rows as JSON')
    .parse()
    .opts<{ top: number; json?: boolean }>();
  const rows = await benchBundles(o.top);
  if (o.json) process.stdout.write(`${JSON.stringify(rows, null, 2)}\n`);
  else {
    for (const r of rows) {
      const verdict =
        r.targetKib === undefined
          ? '(no target)'
          : r.kib <= r.targetKib
            ? `≤ ${r.targetKib} KiB target: met`
            : `> ${r.targetKib} KiB target: MISSED`;
      process.stdout.write(
        `${r.bundle.padEnd(14)} ${`${r.kib.toFixed(0)} KiB`.padStart(9)} minified, ${`${r.gzipKib.toFixed(0)} KiB`.padStart(8)} gzipped  ${verdict}  (${r.entry})\n`,
      );
      process.stdout.write(`${''.padEnd(14)} largest: ${r.largest.map((t) => `${t.pkg} ${t.kib.toFixed(0)} KiB`).join(', ')}\n`);
    }
  }
}
