import { execFile } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import type { Command } from 'commander';
import { parse as shellParse } from 'shell-quote';
import { beforeAll, describe, expect, it } from 'vitest';
import { buildProgram } from '../../cli/main.ts';

// Every command the README and the docs show is run here, or by .ci/run:
// - `gpu-fleet` commands are parsed by the real CLI (command, options and their values);
// - those that need no cloud (`simulate`, `--sim DIR`, `invoke` on the simulated cloud, `--help`)
//   are also run, their folders and files given here; a `simulate` runs at most 4 simulated hours
//   (its other flags as written), so the suite stays within its time;
// - `npm start` runs in full in .ci/run; `npm run NAME` must be a script of package.json;
// - what needs an AWS account (`aws`, `cdk bootstrap|deploy|destroy`, `gpu-fleet` without `--sim`)
//   is parsed only; the offline `cdk synth` of the example config runs in test/infra/stack.test.ts.

const root = fileURLToPath(new URL('../..', import.meta.url));
const bin = join(root, 'bin/gpu-fleet.js');
const run = promisify(execFile);

interface Shown {
  readonly file: string;
  readonly line: number;
  readonly text: string;
  readonly argv: string[];
}

/** The commands of every ```sh block: continuation lines joined, comments and heredoc bodies left out. */
function shownCommands(file: string, markdown: string): Shown[] {
  const out: Shown[] = [];
  const lines = markdown.split('\n');
  let inBlock = false;
  let heredocEnd: string | undefined;
  let pending: { line: number; text: string } | undefined;
  lines.forEach((raw, i) => {
    if (/^```sh\s*$/.test(raw)) return void (inBlock = true);
    if (inBlock && /^```\s*$/.test(raw)) return void (inBlock = false);
    if (!inBlock) return;
    if (heredocEnd !== undefined) {
      if (raw.trim() === heredocEnd) heredocEnd = undefined;
      return;
    }
    const text = pending ? `${pending.text} ${raw.trim()}` : raw.trim();
    const start = pending?.line ?? i + 1;
    if (text.endsWith('\\')) return void (pending = { line: start, text: text.slice(0, -1).trim() });
    pending = undefined;
    if (text === '' || text.startsWith('#')) return;
    const here = /<<-?'?(\w+)'?/.exec(text);
    if (here) heredocEnd = here[1];
    const argv = shellParse(text, (name) => `$${name}`).flatMap((t) => {
      if (typeof t === 'string') return [t];
      if ('comment' in t) return [];
      if ('op' in t && t.op === 'glob') return [t.pattern];
      return ['op' in t ? t.op : String(t)];
    });
    out.push({ file, line: start, text, argv });
  });
  return out;
}

const files = [
  'README.md',
  ...readdirSync(join(root, 'docs'), { withFileTypes: true }).flatMap((d) =>
    d.isFile() && d.name.endsWith('.md') ? [`docs/${d.name}`] : [],
  ),
];
const shown = files.flatMap((f) => shownCommands(f, readFileSync(join(root, f), 'utf8')));
const scripts = (JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { scripts: Record<string, string> }).scripts;

/** The gpu-fleet argv of a shown command (after `npx`), or undefined. */
function gpuFleetArgv(argv: readonly string[]): string[] | undefined {
  const at = argv[0] === 'npx' ? 1 : 0;
  return argv[at] === 'gpu-fleet' ? argv.slice(at + 1) : undefined;
}

/** Parses argv with the real program, every action replaced by nothing: the error commander gives, or undefined. */
async function parseOnly(argv: string[]): Promise<string | undefined> {
  let written = '';
  const program = buildProgram({ stdout: { write: () => true } as never, stderr: { write: () => true } as never });
  const quiet = (cmd: Command): void => {
    cmd.exitOverride().configureOutput({ writeOut: () => {}, writeErr: (s) => void (written += s) });
    if (cmd !== program) cmd.action(() => {});
    cmd.commands.forEach(quiet);
  };
  quiet(program);
  try {
    await program.parseAsync(argv, { from: 'user' });
    return undefined;
  } catch (error) {
    const code = (error as { code?: string }).code;
    if (code === 'commander.helpDisplayed' || code === 'commander.version' || code === 'commander.help') return undefined;
    return `${(error as Error).message}${written ? `\n${written}` : ''}`;
  }
}

/** Whether it needs no cloud: it runs on this machine. */
function offline(argv: readonly string[]): boolean {
  return (
    argv[0] === 'simulate' ||
    argv.includes('--sim') ||
    argv.includes('--help') ||
    argv.includes('--version') ||
    (argv[0] === 'invoke' && !argv.includes('--aws')) ||
    (argv[0] === 'agent' && (argv[1] === 'inspect' || argv[1] === 'metrics'))
  );
}

describe('every command the README and the docs show', () => {
  const dir = mkdtempSync(join(tmpdir(), 'gpu-fleet-docs-'));
  // What the shown commands name, made here: a spec, an EventBridge spot warning, folders.
  const jobFile = join(dir, 'job.json');
  const eventFile = join(root, 'test/fixtures/events/awsdocs-ec2-spot-instance-interruption-warning.json');
  const substitute = (arg: string): string =>
    arg === 'job.json' ? jobFile : arg === 'e.json' ? eventFile : /^\.\/[a-z-]+$/.test(arg) ? join(dir, arg.slice(2)) : arg;
  beforeAll(() => {
    writeFileSync(
      jobFile,
      JSON.stringify({
        image: 'pytorch/pytorch:2.3.0',
        command: ['python', 'train.py'],
        gpu: { kind: 'whole', count: 1, models: ['V100'] },
      }),
    );
  });

  it('are found: the README and every page of docs/ show some', () => {
    expect(new Set(shown.map((s) => s.file))).toEqual(
      new Set(['README.md', 'docs/getting-started.md', 'docs/cli.md', 'docs/operations.md', 'docs/benchmarks.md', 'docs/concepts.md']),
    );
    expect(shown.filter((s) => gpuFleetArgv(s.argv)).length).toBeGreaterThan(25);
  });

  it('link only to files and headings that exist', () => {
    const slug = (heading: string) =>
      heading
        .toLowerCase()
        .replace(/[^\p{L}\p{N} _-]/gu, '')
        .replace(/ /g, '-');
    const broken: string[] = [];
    for (const file of [...files, ...readdirSync(join(root, 'docs/reference')).map((f) => `docs/reference/${f}`)]) {
      const text = readFileSync(join(root, file), 'utf8');
      for (const [, target] of text.matchAll(/\]\(([^)\s]+)\)/g)) {
        if (/^[a-z]+:/.test(target!)) continue;
        const [path, anchor] = target!.split('#');
        const to = path ? join(root, file, '..', path) : join(root, file);
        let body: string;
        try {
          body = path?.endsWith('/') ? '' : readFileSync(to, 'utf8');
          if (path?.endsWith('/')) readdirSync(to);
        } catch {
          broken.push(`${file}: ${target}`);
          continue;
        }
        if (anchor && !body.split('\n').some((l) => /^#+ /.test(l) && slug(l.replace(/^#+ /, '')) === anchor))
          broken.push(`${file}: ${target}`);
      }
    }
    expect(broken).toEqual([]);
  });

  it('each gpu-fleet command parses with the real CLI: its command, options and their values exist', async () => {
    // The check can fail: an option, a command or a value the CLI does not take is caught.
    expect(await parseOnly(['status', '--stak', 'GpuFleet'])).toMatch(/unknown option '--stak'/);
    expect(await parseOnly(['simulate', '--hours', 'many'])).toMatch(/--hours/);
    expect(await parseOnly(['statuz'])).toMatch(/unknown command 'statuz'/);
    const failures: string[] = [];
    for (const s of shown) {
      const argv = gpuFleetArgv(s.argv);
      if (!argv) continue;
      const problem = await parseOnly(argv);
      if (problem) failures.push(`${s.file}:${s.line}: ${s.text}\n  ${problem}`);
    }
    expect(failures).toEqual([]);
  });

  it('each npm command is one package.json has, and nothing else is shown that this test does not know', () => {
    const unknown: string[] = [];
    for (const s of shown) {
      const [first, second, third] = s.argv;
      if (gpuFleetArgv(s.argv)) continue;
      if (first === 'npm' && (second === 'ci' || second === 'test' || second === 'start')) continue;
      if (first === 'npm' && second === 'run' && third !== undefined && third in scripts) continue;
      // Need an AWS account (or change this machine): shown, parsed by no one here.
      if (first === 'aws' || first === 'export' || first === 'cp' || first === 'cat') continue;
      if (first === 'npx' && second === 'cdk' && ['bootstrap', 'deploy', 'destroy'].includes(third ?? '')) continue;
      unknown.push(`${s.file}:${s.line}: ${s.text}`);
    }
    expect(unknown).toEqual([]);
  });

  it('each one that needs no cloud runs, and exits 0', async () => {
    const failures: string[] = [];
    // In the order shown: a page's `simulate --out ./sim` comes before the commands that read ./sim.
    const runnable = shown.flatMap((s) => {
      const argv = gpuFleetArgv(s.argv);
      return argv && offline(argv) ? [{ s, argv }] : [];
    });
    const ran = new Set<string>();
    for (const { s, argv } of runnable) {
      let args = argv.map(substitute);
      if (args[0] === 'simulate' && !args.includes('--help')) {
        const h = args.indexOf('--hours');
        if (h >= 0) args[h + 1] = String(Math.min(4, Number(args[h + 1])));
        else args = [...args, '--hours', '4'];
        args.push('--no-progress');
      }
      const key = args.join(' ');
      if (ran.has(key)) continue;
      ran.add(key);
      try {
        await run(process.execPath, [bin, ...args], { cwd: root, timeout: 180_000, maxBuffer: 64 * 1024 * 1024 });
      } catch (error) {
        const e = error as { code?: number; stderr?: string };
        failures.push(`${s.file}:${s.line}: ${s.text}\n  exit ${e.code}: ${(e.stderr ?? '').trim().split('\n').slice(-3).join('\n  ')}`);
      }
    }
    expect(ran.size).toBeGreaterThanOrEqual(12);
    expect(failures).toEqual([]);
  }, 600_000);
});
