import { execFile } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';

const root = fileURLToPath(new URL('..', import.meta.url));
const depcruise = join(root, 'node_modules', '.bin', 'depcruise');

function cruise(cwd: string, folders: readonly string[]): Promise<{ code: number; output: string }> {
  return new Promise((resolve) => {
    execFile(
      depcruise,
      [...folders, '--config', join(root, '.dependency-cruiser.cjs'), '--output-type', 'err'],
      { cwd },
      (error, stdout, stderr) => {
        resolve({ code: error ? ((error as { code?: number }).code ?? 1) : 0, output: `${stdout}${stderr}` });
      },
    );
  });
}

describe('the import graph (npm run lint:imports)', () => {
  const dir = mkdtempSync(join(tmpdir(), 'gpu-fleet-graph-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  const write = (file: string, code: string) => {
    mkdirSync(dirname(join(dir, file)), { recursive: true });
    writeFileSync(join(dir, file), code);
  };

  it('names every import that goes against the folder rules, and every cycle', async () => {
    copyFileSync(join(root, 'tsconfig.json'), join(dir, 'tsconfig.json'));
    write('core/a.ts', "import { b } from '../cloud/b.ts';\nexport const a = b;\n");
    write('cloud/b.ts', 'export const b = 1;\n');
    write('cloud/c1.ts', "import { c2 } from './c2.ts';\nexport const c1 = () => c2;\n");
    write('cloud/c2.ts', "import { c1 } from './c1.ts';\nexport const c2 = () => c1;\n");
    write('agent/p.ts', "import { q } from '../cli/q.ts';\nexport const p = q;\n");
    write('cli/q.ts', "import { y } from '../bench/y.ts';\nexport const q = y;\n");
    write('bench/y.ts', 'export const y = 2;\n');
    write('functions/f.ts', "import { p } from '../agent/p.ts';\nexport const f = p;\n");
    write('cloud/sim/s.ts', "import { p } from '../../agent/p.ts';\nexport const s = p;\n");
    const { code, output } = await cruise(dir, ['core', 'cloud', 'functions', 'agent', 'cli', 'bench']);
    expect(code).not.toBe(0);
    expect(output).toMatch(/core-is-pure: core\/a\.ts → cloud\/b\.ts/);
    expect(output).toMatch(/agent-uses-core-and-cloud: agent\/p\.ts → cli\/q\.ts/);
    expect(output).toMatch(/cli-not-bench: cli\/q\.ts → bench\/y\.ts/);
    expect(output).toMatch(/functions-use-cloud-and-core: functions\/f\.ts → agent\/p\.ts/);
    expect(output).toMatch(/no-cycles: cloud\/c1\.ts/);
    // cloud/sim may run agent code.
    expect(output).not.toMatch(/cloud\/sim\/s\.ts → agent/);
  });

  it('holds for the project itself', async () => {
    const { code, output } = await cruise(root, ['core', 'cloud', 'functions', 'agent', 'infra', 'cli', 'bench']);
    expect(output).toContain('no dependency violations found');
    expect(code).toBe(0);
  });
});
