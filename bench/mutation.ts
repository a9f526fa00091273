// bench:mutation — how well the tests pin core's behaviour: StrykerJS mutates each file (flips
// conditions, drops statements, swaps operators...) and runs the tests that cover the change;
// a mutant no test notices is a behaviour nobody pins.
//
//   npm run bench:mutation [-- --files GLOB[,GLOB]] [--json] [--no-recheck]
//
// Stryker's vitest runner counts a test file that fails to load as "no test failed", so a
// mutant that makes a module throw on import shows as a survivor that is not one. Each
// surviving mutant in module-level code is therefore re-run with plain vitest on a copy of the
// tree before it counts. Mutants known to be equivalent (no behaviour can tell them apart) are
// listed in bench/mutation-equivalents.json with why, and left out of the score.
import { execFile } from 'node:child_process';
import { cpSync, existsSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { Command } from 'commander';
import type { LogLevel } from '@stryker-mutator/api/core';
import { Stryker } from '@stryker-mutator/core';

const ROOT = resolve(import.meta.dirname, '..');
const REPORT = join(ROOT, 'reports/mutation/mutation.json');
const EQUIVALENTS = join(import.meta.dirname, 'mutation-equivalents.json');

/** The files issue 16 set a target for (≥ 85% each). */
export const DEFAULT_FILES = [
  'core/money.ts',
  'core/budget.ts',
  'core/job.ts',
  'core/services/accrual.ts',
  'core/mig.ts',
  'core/spot-policy.ts',
] as const;

interface Location {
  readonly start: { readonly line: number; readonly column: number };
  readonly end: { readonly line: number; readonly column: number };
}

interface ReportMutant {
  readonly id: string;
  readonly mutatorName: string;
  readonly replacement: string;
  readonly status: 'Killed' | 'Survived' | 'NoCoverage' | 'Timeout' | 'CompileError' | 'RuntimeError' | 'Ignored';
  readonly static?: boolean;
  readonly coveredBy?: readonly string[];
  readonly location: Location;
}

interface Report {
  readonly files: Record<string, { readonly source: string; readonly mutants: readonly ReportMutant[] }>;
  readonly testFiles?: Record<string, { readonly tests: readonly { readonly id: string; readonly name: string }[] }>;
}

export interface Equivalent {
  readonly file: string;
  readonly mutator: string;
  readonly replacement: string;
  /** The source line the mutant starts on, trimmed: how an entry finds its mutant as the file changes around it. */
  readonly line: string;
  readonly why: string;
}

export interface Survivor {
  readonly file: string;
  readonly line: number;
  readonly mutator: string;
  readonly original: string;
  readonly replacement: string;
  readonly status: 'Survived' | 'NoCoverage';
}

export interface FileScore {
  readonly file: string;
  readonly mutants: number;
  readonly killed: number;
  readonly survived: number;
  readonly noCoverage: number;
  /** Survivors a plain vitest run killed (the module failed to load under the mutant). */
  readonly recheckedKilled: number;
  readonly equivalent: number;
  /** (killed + timeouts) ÷ (all − equivalent), percent. */
  readonly scorePct: number;
  readonly survivors: readonly Survivor[];
}

function textAt(source: string, loc: Location): string {
  const lines = source.split('\n');
  if (loc.start.line === loc.end.line) return lines[loc.start.line - 1]!.slice(loc.start.column - 1, loc.end.column - 1);
  const first = lines[loc.start.line - 1]!.slice(loc.start.column - 1);
  const middle = lines.slice(loc.start.line, loc.end.line - 1);
  const last = lines[loc.end.line - 1]!.slice(0, loc.end.column - 1);
  return [first, ...middle, last].join('\n');
}

function applyMutant(source: string, m: ReportMutant): string {
  const lines = source.split('\n');
  const offset = (line: number, column: number) => lines.slice(0, line - 1).reduce((n, l) => n + l.length + 1, 0) + column - 1;
  const a = offset(m.location.start.line, m.location.start.column);
  const b = offset(m.location.end.line, m.location.end.column);
  return source.slice(0, a) + m.replacement + source.slice(b);
}

function vitest(cwd: string, files: readonly string[]): Promise<number> {
  return new Promise((done) => {
    execFile(
      process.execPath,
      [join(ROOT, 'node_modules/vitest/vitest.mjs'), 'run', '--config', 'vitest.mutation.config.ts', ...files],
      { cwd, timeout: 300_000, maxBuffer: 64 * 1024 * 1024 },
      (error) => done(error ? ((error as { code?: number }).code ?? 1) : 0),
    );
  });
}

/** A copy of the tree (node_modules linked) where a mutant can be applied and tested with plain vitest. */
function scratchTree(): string {
  const dir = mkdtempSync(join(tmpdir(), 'gpu-fleet-mutant-'));
  for (const entry of ['core', 'cloud', 'functions', 'agent', 'infra', 'cli', 'bench', 'test', 'data', 'bin']) {
    if (existsSync(join(ROOT, entry))) cpSync(join(ROOT, entry), join(dir, entry), { recursive: true });
  }
  for (const f of ['package.json', 'tsconfig.json', 'vitest.config.ts', 'vitest.mutation.config.ts']) cpSync(join(ROOT, f), join(dir, f));
  symlinkSync(join(ROOT, 'node_modules'), join(dir, 'node_modules'));
  return dir;
}

export async function benchMutation(options: {
  files: readonly string[];
  recheck: boolean;
  log?: (line: string) => void;
}): Promise<FileScore[]> {
  const log = options.log ?? (() => {});
  const stryker = new Stryker({
    configFile: join(ROOT, 'stryker.config.mjs'),
    mutate: [...options.files],
    reporters: ['json'],
    // LogLevel is a const enum, which isolated modules cannot read: its value for warnings.
    logLevel: 'warn' as unknown as LogLevel,
  });
  await stryker.runMutationTest();
  const report = JSON.parse(readFileSync(REPORT, 'utf8')) as Report;
  const testFileOf = new Map<string, string>();
  for (const [file, t] of Object.entries(report.testFiles ?? {})) for (const test of t.tests) testFileOf.set(test.id, file);
  const equivalents = existsSync(EQUIVALENTS) ? (JSON.parse(readFileSync(EQUIVALENTS, 'utf8')) as Equivalent[]) : [];
  const scores: FileScore[] = [];
  let tree: string | undefined;
  try {
    for (const [file, { source, mutants }] of Object.entries(report.files).sort(([a], [b]) => a.localeCompare(b))) {
      const lineOf = (m: ReportMutant) => source.split('\n')[m.location.start.line - 1]!.trim();
      const isEquivalent = (m: ReportMutant) =>
        equivalents.some((e) => e.file === file && e.mutator === m.mutatorName && e.replacement === m.replacement && e.line === lineOf(m));
      let killed = 0;
      let recheckedKilled = 0;
      let equivalent = 0;
      const survivors: Survivor[] = [];
      for (const m of mutants) {
        if (m.status === 'Killed' || m.status === 'Timeout') {
          killed++;
          continue;
        }
        if (m.status !== 'Survived' && m.status !== 'NoCoverage') continue;
        if (isEquivalent(m)) {
          equivalent++;
          continue;
        }
        if (options.recheck && m.status === 'Survived' && m.static) {
          tree ??= scratchTree();
          const target = join(tree, file);
          writeFileSync(target, applyMutant(source, m));
          const tests = [...new Set((m.coveredBy ?? []).map((id) => testFileOf.get(id)).filter((f): f is string => f !== undefined))];
          const code = await vitest(tree, tests.length > 0 ? tests : []);
          writeFileSync(target, source);
          log(`  re-checked ${file}:${m.location.start.line} ${m.mutatorName}: ${code === 0 ? 'survives' : 'killed by plain vitest'}`);
          if (code !== 0) {
            recheckedKilled++;
            continue;
          }
        }
        survivors.push({
          file,
          line: m.location.start.line,
          mutator: m.mutatorName,
          original: textAt(source, m.location),
          replacement: m.replacement,
          status: m.status,
        });
      }
      const total = mutants.filter((m) => ['Killed', 'Timeout', 'Survived', 'NoCoverage'].includes(m.status)).length;
      const counted = total - equivalent;
      scores.push({
        file,
        mutants: total,
        killed: killed + recheckedKilled,
        survived: survivors.filter((s) => s.status === 'Survived').length,
        noCoverage: survivors.filter((s) => s.status === 'NoCoverage').length,
        recheckedKilled,
        equivalent,
        scorePct: counted > 0 ? Math.round(((killed + recheckedKilled) * 1000) / counted) / 10 : 100,
        survivors,
      });
    }
  } finally {
    if (tree) rmSync(tree, { recursive: true, force: true });
  }
  return scores;
}

const invokedDirectly = process.argv[1] !== undefined && import.meta.url === new URL(`file://${process.argv[1]}`).href;
if (invokedDirectly) {
  const o = new Command('bench:mutation')
    .description('StrykerJS over core: the mutation score per file and the surviving mutants (a behaviour no test pins)')
    .option('--files <globs>', `comma-separated files or globs to mutate (default: ${DEFAULT_FILES.join(', ')})`)
    .option('--no-recheck', 'do not re-run module-level survivors with plain vitest')
    .option('--json', 'print the scores and survivors as JSON')
    .parse()
    .opts<{ files?: string; recheck: boolean; json?: boolean }>();
  const files = o.files ? o.files.split(',').map((f) => f.trim()) : [...DEFAULT_FILES];
  const started = performance.now();
  const scores = await benchMutation({ files, recheck: o.recheck, log: (l) => process.stderr.write(`${l}\n`) });
  if (o.json) process.stdout.write(`${JSON.stringify(scores, null, 2)}\n`);
  else {
    for (const s of scores) {
      for (const v of s.survivors) {
        process.stdout.write(
          `${v.status === 'NoCoverage' ? 'no test' : 'survived'}  ${v.file}:${v.line}  ${v.mutator}: ${v.original.replace(/\s+/g, ' ').slice(0, 80)}  →  ${v.replacement.replace(/\s+/g, ' ').slice(0, 60)}\n`,
        );
      }
    }
    process.stdout.write(
      `\n${'file'.padEnd(28)} ${'score'.padStart(7)} ${'mutants'.padStart(8)} ${'killed'.padStart(7)} ${'survived'.padStart(9)} ${'no test'.padStart(8)} ${'equivalent'.padStart(11)} ${'re-checked'.padStart(11)}\n`,
    );
    for (const s of scores) {
      process.stdout.write(
        `${s.file.padEnd(28)} ${`${s.scorePct.toFixed(1)}%`.padStart(7)} ${String(s.mutants).padStart(8)} ${String(s.killed).padStart(7)} ${String(s.survived).padStart(9)} ${String(s.noCoverage).padStart(8)} ${String(s.equivalent).padStart(11)} ${String(s.recheckedKilled).padStart(11)}\n`,
      );
    }
    const killed = scores.reduce((a, s) => a + s.killed, 0);
    const counted = scores.reduce((a, s) => a + s.mutants - s.equivalent, 0);
    process.stdout.write(
      `${'all'.padEnd(28)} ${`${counted > 0 ? ((100 * killed) / counted).toFixed(1) : '100.0'}%`.padStart(7)}\n(${((performance.now() - started) / 60_000).toFixed(1)} min; equivalent mutants are listed in bench/mutation-equivalents.json)\n`,
    );
  }
}
