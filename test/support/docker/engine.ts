import { execFileSync, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { chmodSync, copyFileSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';

/**
 * The real Docker engine for the container tests: whether one answers here, and the local test
 * image, built with no registry. The image is a root file system assembled from this machine's
 * own Node.js (its binary and the libraries it links), the test jobs (test/support/jobs) and a
 * static C probe (wall-probe.c, built with gcc), made
 * an image with `docker import`; its tag is a hash of both, so a changed job script builds anew.
 * `.ci/run` builds it before the tests (build-test-image.ts); a test builds it too when it is missing.
 */

export const JOBS_DIR = resolve(import.meta.dirname, '../jobs');
/** The C source of the probe of a container's powers, built into the image as `/jobs/wall-probe`. */
export const WALL_PROBE_SOURCE = resolve(import.meta.dirname, 'wall-probe.c');
/** Where the test jobs are inside the image. */
export const IMAGE_JOBS_DIR = '/jobs';

/** Whether the tests must run (CI) rather than be skipped when no engine answers. */
export const dockerRequired = process.env.GPU_FLEET_DOCKER_TESTS === 'required';

/** Why no Docker engine can be used here, or undefined when one answers. */
export function dockerProblem(docker = 'docker'): string | undefined {
  const out = spawnSync(docker, ['info', '--format', '{{.ServerVersion}}'], { encoding: 'utf8', timeout: 15_000 });
  if (out.error) return `the docker CLI could not be run: ${out.error.message}`;
  if (out.status !== 0) return `no Docker engine answers: ${(out.stderr || out.stdout).trim().split('\n')[0]}`;
  return undefined;
}

/** The test image's name: the tag is a hash of the Node.js binary's path and version and of the job scripts. */
export function testImageName(): string {
  const hash = createHash('sha256');
  hash.update(`${realpathSync(process.execPath)} ${process.version}\n`);
  for (const f of readdirSync(JOBS_DIR).sort()) hash.update(`${f}\n`).update(readFileSync(join(JOBS_DIR, f)));
  hash.update(readFileSync(WALL_PROBE_SOURCE));
  return `local/gpu-fleet-test-jobs:${hash.digest('hex').slice(0, 12)}`;
}

/** Builds the test image unless the engine has it already; returns its name. */
export function ensureTestImage(docker = 'docker'): string {
  const image = testImageName();
  if (spawnSync(docker, ['image', 'inspect', image], { stdio: 'ignore' }).status === 0) return image;
  const root = mkdtempSync(join(tmpdir(), 'gpu-fleet-image-'));
  try {
    const node = realpathSync(process.execPath);
    put(root, node, '/usr/local/bin/node');
    // The shared libraries the binary links, as the dynamic loader finds them here.
    const ldd = execFileSync('ldd', [node], { encoding: 'utf8' });
    for (const m of ldd.matchAll(/(?:=>\s*)?(\/\S+)\s+\(0x/g)) put(root, realpathSync(m[1]!), m[1]!);
    mkdirSync(join(root, 'tmp'), { recursive: true });
    chmodSync(join(root, 'tmp'), 0o1777);
    mkdirSync(join(root, 'etc'), { recursive: true });
    writeFileSync(
      join(root, 'etc', 'passwd'),
      'root:x:0:0:root:/root:/usr/local/bin/node\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n',
    );
    writeFileSync(join(root, 'etc', 'group'), 'root:x:0:\nnogroup:x:65534:\n');
    for (const f of readdirSync(JOBS_DIR)) put(root, join(JOBS_DIR, f), `${IMAGE_JOBS_DIR}/${f}`);
    // The probe of a container's powers: C, built static (raw sockets and mknod have no Node.js API).
    const probe = join(root, IMAGE_JOBS_DIR.slice(1), 'wall-probe');
    const built = spawnSync('gcc', ['-static', '-O2', '-o', probe, WALL_PROBE_SOURCE], { encoding: 'utf8' });
    if (built.error || built.status !== 0)
      throw new Error(`could not build the wall probe (apt-get install gcc libc6-dev): ${built.error?.message ?? built.stderr.trim()}`);
    const tar = spawnSync('tar', ['-C', root, '-c', '.'], { maxBuffer: 1 << 30 });
    if (tar.status !== 0) throw new Error(`tar of the image's root failed: ${tar.stderr.toString()}`);
    const imported = spawnSync(
      docker,
      ['import', '--change', 'ENV PATH=/usr/local/bin:/usr/bin:/bin', '--change', 'WORKDIR /', '-', image],
      { input: tar.stdout, maxBuffer: 1 << 20 },
    );
    if (imported.status !== 0) throw new Error(`docker import of ${image} failed: ${imported.stderr.toString().trim()}`);
    return image;
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
}

function put(root: string, from: string, to: string): void {
  const target = join(root, to);
  mkdirSync(dirname(target), { recursive: true });
  copyFileSync(from, target);
  chmodSync(target, 0o755);
}
