import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { appendFileSync, linkSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { DirectoryBlobs, MARKER_MAX_BYTES, readMarker } from '../../agent/checkpoint-files.ts';
import { closeAll, openJobFile, openJobFolder, readStream } from '../../agent/job-files.ts';

// A job controls every file and folder in its checkpoint folder, and may swap any of them for a link, a FIFO or a
// device while the agent reads (issue 62: uploads raced into following links; issue 68: a FIFO or a huge marker
// stalls the agent). These tests play the job with a real child process swapping files as fast as it can.

const tmp = (name: string) => mkdtempSync(join(tmpdir(), `${name}-`));
const children: ChildProcess[] = [];
afterEach(() => {
  for (const c of children.splice(0)) c.kill('SIGKILL');
});

/** A child process that swaps, in a tight loop, each `path` between a file (or folder) of the job's and a link to `secret`. */
function swapper(swaps: { path: string; secret: string; kind: 'file' | 'dir' }[]): ChildProcess {
  const script = `
    const fs = require('node:fs');
    const swaps = ${JSON.stringify(swaps)};
    let n = 0;
    for (;;) {
      for (const s of swaps) {
        const tmpLink = s.path + '.l' + n, tmpReal = s.path + '.r' + n, away = s.path + '.x' + n;
        try {
          if (s.kind === 'file') {
            fs.symlinkSync(s.secret, tmpLink); fs.renameSync(tmpLink, s.path);
            fs.writeFileSync(tmpReal, 'MINE'); fs.renameSync(tmpReal, s.path);
          } else {
            fs.symlinkSync(s.secret, tmpLink);
            fs.renameSync(s.path, away); fs.renameSync(tmpLink, s.path);
            fs.renameSync(s.path, tmpLink); fs.renameSync(away, s.path); fs.unlinkSync(tmpLink);
          }
        } catch {}
      }
      n++;
    }`;
  const child = spawn(process.execPath, ['-e', script], { stdio: 'ignore' });
  children.push(child);
  return child;
}

describe('reading a job’s files: nothing the job swaps leads the agent out of its folder', () => {
  it('an upload raced against link swaps of a file, a folder inside the save and a folder above it copies nothing that is not the job’s', async () => {
    const host = tmp('host');
    writeFileSync(join(host, 'shadow'), 'SECRET');
    mkdirSync(join(host, 'dir'));
    writeFileSync(join(host, 'dir', 'a'), 'SECRET');
    const ck = tmp('ckpt');
    mkdirSync(join(ck, 'run', 'step', 'sub'), { recursive: true });
    writeFileSync(join(ck, 'run', 'step', 'weights.bin'), 'MINE');
    writeFileSync(join(ck, 'run', 'step', 'sub', 'a'), 'MINE');
    writeFileSync(join(ck, 'run', 'step', 'other'), 'MINE');
    mkdirSync(join(host, 'run-elsewhere', 'step'), { recursive: true });
    writeFileSync(join(host, 'run-elsewhere', 'step', 'weights.bin'), 'SECRET');
    swapper([
      { path: join(ck, 'run', 'step', 'weights.bin'), secret: join(host, 'shadow'), kind: 'file' },
      { path: join(ck, 'run', 'step', 'sub'), secret: join(host, 'dir'), kind: 'dir' },
      { path: join(ck, 'run'), secret: join(host, 'run-elsewhere'), kind: 'dir' },
    ]);
    const store = tmp('store');
    const blobs = new DirectoryBlobs(store);
    let copied = 0;
    let refused = 0;
    let seen = 0;
    for (let i = 0; i < 400; i++) {
      const location = `${pathToFileURL(join(store, `try-${i}`)).href}/`;
      try {
        await blobs.upload(join(ck, 'run', 'step'), location, ck);
        copied++;
      } catch {
        refused++;
        continue;
      }
      const out = join(store, `try-${i}`);
      const files = readdirSync(out, { recursive: true, withFileTypes: true }).filter((e) => e.isFile());
      // The job's own files (its swapper's temporary files among them, caught half-written): never the host's.
      for (const f of files) expect(readFileSync(join(f.parentPath, f.name), 'utf8')).not.toContain('SECRET');
      if (files.length > 0) seen++;
    }
    // Both outcomes happened: the race was run, not dodged.
    expect(copied).toBeGreaterThan(0);
    expect(seen).toBeGreaterThan(0);
    expect(refused).toBeGreaterThan(0);
  });

  it('a marker swapped between a file and a FIFO never blocks the read, and a marker past the cap is refused unread', async () => {
    const ck = tmp('ckpt-fifo');
    mkdirSync(join(ck, 'step'));
    const fifo = join(ck, 'fifo');
    expect(spawnSync('mkfifo', [fifo]).status).toBe(0);
    writeFileSync(join(ck, 'checkpoint.json'), JSON.stringify({ path: 'step' }));
    // The FIFO itself in the marker's place: the read answers at once, with the reason.
    const asFifo = join(ck, 'checkpoint.json');
    renameSync(fifo, asFifo);
    const watchdog = <T>(p: Promise<T>) =>
      Promise.race([p, new Promise<never>((_, reject) => setTimeout(() => reject(new Error('the read blocked')), 5000))]);
    expect(await watchdog(readMarker(ck))).toEqual({ ok: false, problem: expect.stringContaining('is not a regular file') });
    // A marker of 80 MiB: refused by its size, from its handle, without reading it.
    writeFileSync(asFifo + '.big', Buffer.alloc(80 * 2 ** 20, 32));
    renameSync(asFifo + '.big', asFifo);
    expect(await watchdog(readMarker(ck))).toEqual({
      ok: false,
      problem: `${asFifo} is ${80 * 2 ** 20} bytes; at most ${MARKER_MAX_BYTES} are read`,
    });
  });

  it('refuses a hard link, a special file in a save, and more files than a save may hold', async () => {
    const ck = tmp('ckpt-refuse');
    mkdirSync(join(ck, 'step'));
    writeFileSync(join(ck, 'step', 'weights.bin'), 'MINE');
    linkSync(join(ck, 'step', 'weights.bin'), join(ck, 'step', 'twin'));
    await expect(openJobFile(join(ck, 'step', 'twin'), ck)).rejects.toThrow(/has 2 hard links/);
    await expect(openJobFolder(join(ck, 'step'), ck)).rejects.toThrow(/has 2 hard links/);

    const ck2 = tmp('ckpt-special');
    mkdirSync(join(ck2, 'step'));
    expect(spawnSync('mkfifo', [join(ck2, 'step', 'pipe')]).status).toBe(0);
    await expect(openJobFolder(join(ck2, 'step'), ck2)).rejects.toThrow(/pipe is a special file/);

    const ck3 = tmp('ckpt-many');
    mkdirSync(join(ck3, 'step'));
    for (let i = 0; i < 6; i++) writeFileSync(join(ck3, 'step', `f${i}`), 'x');
    await expect(openJobFolder(join(ck3, 'step'), ck3, 5)).rejects.toThrow(/holds more than 5 files; a save may hold at most 5/);
    const five = await openJobFolder(join(ck3, 'step'), ck3, 6);
    expect(five.map((f) => f.path)).toEqual(['f0', 'f1', 'f2', 'f3', 'f4', 'f5']);
    await closeAll(five);
  });

  it('reads no more of a file than it held when judged, however it grows', async () => {
    const ck = tmp('ckpt-grow');
    mkdirSync(join(ck, 'step'));
    writeFileSync(join(ck, 'step', 'log'), 'abc');
    const [f] = await openJobFolder(join(ck, 'step'), ck);
    appendFileSync(join(ck, 'step', 'log'), 'defgh');
    const chunks: Buffer[] = [];
    for await (const c of readStream(f!)) chunks.push(c as Buffer);
    await closeAll([f!]);
    expect(Buffer.concat(chunks).toString()).toBe('abc');
    expect(f!.bytes).toBe(3);
  });
});
