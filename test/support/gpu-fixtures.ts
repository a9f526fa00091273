import { copyFileSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { delimiter, join, resolve } from 'node:path';

/** The stand-in nvidia-smi (test/support/bin) and the real captures it prints (test/fixtures/nvidia-smi). */
export const FAKE_BIN = resolve(import.meta.dirname, 'bin');
export const NVIDIA_SMI_FIXTURES = resolve(import.meta.dirname, '../fixtures/nvidia-smi');

export type GpuFixture =
  | { readonly xml: string }
  | {
      readonly capture: string;
      readonly phase: 'idle' | 'load';
      readonly withList?: boolean;
      /** A `nvidia-smi mig -lgi` answer (a file under test/fixtures/nvidia-smi); without it the stand-in refuses -lgi. */
      readonly lgi?: string;
    };

/** A folder the stand-in reads: smi-q.xml, or smi-q.txt and list.txt, copied from one real capture. */
export function gpuFixtureDir(fixture: GpuFixture): string {
  const dir = mkdtempSync(join(tmpdir(), 'nvidia-smi-'));
  if ('xml' in fixture) {
    copyFileSync(join(NVIDIA_SMI_FIXTURES, 'xml', fixture.xml), join(dir, 'smi-q.xml'));
  } else {
    const base = join(NVIDIA_SMI_FIXTURES, 'captures', fixture.capture);
    copyFileSync(join(base, `${fixture.phase}__smi-q.txt`), join(dir, 'smi-q.txt'));
    if (fixture.withList !== false) copyFileSync(join(base, 'capabilities__list.txt'), join(dir, 'list.txt'));
    if (fixture.lgi) copyFileSync(join(NVIDIA_SMI_FIXTURES, fixture.lgi), join(dir, 'mig-lgi.txt'));
  }
  return dir;
}

/** An environment in which `nvidia-smi` is the stand-in, printing the given capture. */
export function fakeNvidiaSmiEnv(fixture: GpuFixture | undefined, extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  return {
    ...process.env,
    PATH: `${FAKE_BIN}${delimiter}${process.env.PATH ?? ''}`,
    ...(fixture ? { FAKE_NVIDIA_SMI_DIR: gpuFixtureDir(fixture) } : {}),
    ...extra,
  };
}
