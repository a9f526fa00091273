import { constants } from 'node:fs';
import { open, opendir, readlink, realpath, type FileHandle } from 'node:fs/promises';
import { join, relative, sep } from 'node:path';
import { Readable } from 'node:stream';
import { GpuFleetError } from '../core/errors.ts';

/**
 * Reading files a job controls, from the agent (which may read more of the host than the job).
 *
 * A job can swap any file or folder of its own for a link, a FIFO or a device at any moment, also
 * between the agent's look and its read. So the agent never decides by path and then reads by path:
 * it opens without following a link in the last step (`O_NOFOLLOW`) and without blocking
 * (`O_NONBLOCK`: a FIFO opens at once instead of waiting for a writer), then judges the handle
 * itself: a regular file, one link only (a hard link could name a file it did not write), and the
 * path the kernel actually opened (`/proc/self/fd/N`) inside the folder the job owns, so a folder
 * above that was swapped for a link is caught too. What it reads, it reads from that handle.
 * Folders are listed the same way, through a handle opened with `O_DIRECTORY | O_NOFOLLOW`.
 */

/** The most files one rank's save may hold; more is refused, with the count, before anything is read. */
export const MAX_SAVE_FILES = 10_000;

/** A file of a job's folder, opened and judged: its handle (the caller closes it), its size when opened, its path relative to the folder. */
export interface JobFile {
  readonly handle: FileHandle;
  readonly bytes: number;
  /** Its modification time when judged. */
  readonly modifiedAtMs: number;
  readonly path: string;
}

const READ_FLAGS = constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK;
const DIR_FLAGS = constants.O_RDONLY | constants.O_DIRECTORY | constants.O_NOFOLLOW | constants.O_NONBLOCK;

/** The path the kernel opened for a handle (Linux: the agent's machines). */
async function openedPath(handle: FileHandle): Promise<string> {
  return readlink(`/proc/self/fd/${handle.fd}`);
}

function inside(path: string, root: string): boolean {
  return path === root || path.startsWith(root.endsWith(sep) ? root : root + sep);
}

/** Why an open failed, in a job owner's words. */
function openProblem(path: string, error: unknown): GpuFleetError {
  const code = (error as NodeJS.ErrnoException).code;
  if (code === 'ELOOP') return new GpuFleetError(`${path} is a link; the agent reads only the job's own files and folders`);
  if (code === 'ENOTDIR') return new GpuFleetError(`${path} is not a folder (or a folder above it is a link)`);
  if (code === 'ENXIO') return new GpuFleetError(`${path} is a special file (a socket or a device); the agent reads only regular files`);
  // The agent reads as a member of the job folder's group, with no capability over file modes.
  if (code === 'EACCES')
    return new GpuFleetError(
      `${path} is not readable by the folder's group (its mode shuts the agent out); a save's files and folders must be group-readable (a umask of 022 or 027)`,
    );
  return new GpuFleetError(`cannot open ${path}: ${(error as Error).message}`);
}

/**
 * Opens `path`, a file the job wrote under `within` (resolved by the agent, not the job), for
 * reading: refused when it is a link, not a regular file, hard-linked, larger than `maxBytes`, or
 * opened through a link to somewhere outside `within`.
 */
export async function openJobFile(path: string, within: string, maxBytes = Number.POSITIVE_INFINITY): Promise<JobFile> {
  let handle: FileHandle;
  try {
    handle = await open(path, READ_FLAGS);
  } catch (error) {
    // Not there is not a refusal: the caller decides what an absent file means.
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') throw error;
    throw openProblem(path, error);
  }
  try {
    const info = await handle.stat();
    if (!info.isFile())
      throw new GpuFleetError(`${path} is not a regular file (a FIFO, device or folder); the agent reads only regular files`);
    if (info.nlink > 1) throw new GpuFleetError(`${path} has ${info.nlink} hard links; the agent reads only files with one`);
    const real = await openedPath(handle);
    if (!inside(real, within)) throw new GpuFleetError(`${path} leads outside the job's folder (to ${real}); it is not read`);
    if (info.size > maxBytes) throw new GpuFleetError(`${path} is ${info.size} bytes; at most ${maxBytes} are read`);
    return { handle, bytes: info.size, modifiedAtMs: Math.floor(info.mtimeMs), path: relative(within, real) };
  } catch (error) {
    await handle.close();
    throw error;
  }
}

/**
 * The regular files under `dir` (a folder of the job's under `within`), each opened and judged as
 * {@link openJobFile} does, with paths relative to `dir`, in path order. Links are left out (a link
 * is not part of a save); a FIFO, device or socket, a hard link, a folder that leads outside
 * `within`, or more than `maxFiles` files refuse the whole listing. On a refusal every handle opened
 * so far is closed.
 */
export async function openJobFolder(dir: string, within: string, maxFiles = MAX_SAVE_FILES): Promise<JobFile[]> {
  // The folder the job owns is the agent's (a mount point the job cannot swap): its real path is taken once.
  const root = await realpath(within);
  const out: JobFile[] = [];
  const walk = async (folder: string, rel: string): Promise<void> => {
    let handle: FileHandle;
    try {
      handle = await open(folder, DIR_FLAGS);
    } catch (error) {
      throw openProblem(folder, error);
    }
    try {
      const real = await openedPath(handle);
      if (!inside(real, root)) throw new GpuFleetError(`${folder} leads outside the job's folder (to ${real}); it is not read`);
      // Listed through the handle: a swap of the folder after it was opened changes nothing.
      const entries = await opendir(`/proc/self/fd/${handle.fd}`);
      const names: { name: string; kind: 'file' | 'dir' | 'link' | 'special' }[] = [];
      for await (const e of entries) {
        const kind = e.isFile() ? 'file' : e.isDirectory() ? 'dir' : e.isSymbolicLink() ? 'link' : 'special';
        names.push({ name: e.name, kind });
        if (names.length + out.length > maxFiles)
          throw new GpuFleetError(`${dir} holds more than ${maxFiles} files; a save may hold at most ${maxFiles}`);
      }
      names.sort((a, b) => (a.name < b.name ? -1 : 1));
      for (const { name, kind } of names) {
        const path = join(real, name);
        const relPath = rel === '' ? name : `${rel}/${name}`;
        if (kind === 'link') continue;
        if (kind === 'special')
          throw new GpuFleetError(`${join(folder, name)} is a special file (a FIFO, socket or device); a save holds regular files only`);
        if (kind === 'dir') await walk(path, relPath);
        else {
          const f = await openJobFile(path, root);
          out.push({ ...f, path: relPath });
          if (out.length > maxFiles)
            throw new GpuFleetError(`${dir} holds more than ${maxFiles} files; a save may hold at most ${maxFiles}`);
        }
      }
    } finally {
      await handle.close();
    }
  };
  try {
    await walk(dir, '');
  } catch (error) {
    await closeAll(out);
    throw error;
  }
  return out;
}

/** Up to `maxBytes` of an opened file as text, read from its handle: a file that grew past the cap since it was judged is refused. */
export async function readSmall(file: JobFile, maxBytes: number): Promise<string> {
  const buffer = Buffer.alloc(maxBytes + 1);
  let filled = 0;
  for (;;) {
    const { bytesRead } = await file.handle.read(buffer, filled, buffer.length - filled, filled);
    if (bytesRead === 0) break;
    filled += bytesRead;
    if (filled > maxBytes) throw new GpuFleetError(`${file.path} grew past ${maxBytes} bytes while it was read; it is not read`);
  }
  return buffer.subarray(0, filled).toString('utf8');
}

/**
 * `bytes` of an opened file from `start`, streamed from its handle (left open): no more than it held
 * when judged, however it grows meanwhile.
 */
export function readStream(file: JobFile, start = 0, bytes = file.bytes - start): Readable {
  if (bytes <= 0) return Readable.from([]);
  return file.handle.createReadStream({ start, end: start + bytes - 1, autoClose: false });
}

/** Closes the handles of a listing. */
export async function closeAll(files: readonly JobFile[]): Promise<void> {
  await Promise.all(files.map((f) => f.handle.close().catch(() => undefined)));
}
