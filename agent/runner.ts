import { spawn, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { accessSync, chmodSync, closeSync, constants, mkdirSync, openSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { delimiter, isAbsolute, join } from 'node:path';
import { GpuFleetError } from '../core/errors.ts';
import type { ContainerSettings } from '../core/job-spec.ts';
import { setTimeout as delay } from 'node:timers/promises';

/**
 * How the agent starts a job's process: a container (`docker run --gpus`) in production, or a
 * plain process (tests, and jobs that are not containers). Both take the same launch and give
 * back the same handle. A spec's command is an argv array handed to the program as it is: no
 * shell ever stands between a job spec and a process.
 */

export interface Launch {
  readonly jobId: string;
  readonly attempt: number;
  /** The machine's part of a gang (0 for a job on one machine): two ranks on one engine are two containers. */
  readonly rank: number;
  readonly image: string;
  readonly command: readonly string[];
  /** The job's own variables and gpu-fleet's GPU_FLEET_* ones, without the directory variables (the runner sets those). */
  readonly env: Readonly<Record<string, string>>;
  /**
   * The devices the job may use: GPU indices ("0", "1"), GPU UUIDs or MIG device UUIDs. Empty
   * means no GPU at all.
   */
  readonly devices: readonly string[];
  /** Host folder the job writes checkpoints to. */
  readonly checkpointDir: string;
  /** Host folder holding the checkpoint to resume from, when there is one. */
  readonly resumeDir?: string;
  /** The job's stdout and stderr go to this file. */
  readonly logFile: string;
  /** How a container meets the network, its shared memory and its locked-memory limit (core/job-spec.ts `containerSettings`). */
  readonly container: ContainerSettings;
}

export interface Exit {
  readonly exitCode: number | null;
  readonly signal: NodeJS.Signals | null;
}

export interface JobProcess {
  readonly pid: number | undefined;
  /** Sends a signal to the job (its main process). Resolves when delivered; a process already gone is not an error. */
  signal(signal: NodeJS.Signals): Promise<void>;
  /** Asks the job to stop (SIGTERM), and kills it after `graceMs`. Resolves when it is gone. */
  stop(graceMs: number): Promise<Exit>;
  readonly exited: Promise<Exit>;
}

export interface JobRunner {
  readonly kind: 'process' | 'docker';
  start(launch: Launch): Promise<JobProcess>;
  /** Stops what a previous run of the agent left behind (after a crash or restart). */
  cleanUpLeftovers(): Promise<string[]>;
  /**
   * Puts a container image on this machine ahead of any job that runs it: 'present' when it was
   * there already, 'pulled' once pulled; throws (with the engine's words) when it cannot be had.
   * Absent for a runner without images (plain processes).
   */
  prefetch?(image: string): Promise<'present' | 'pulled'>;
}

/** Where the job sees its checkpoint folders. */
export interface JobPaths {
  readonly checkpointDir: string;
  readonly resumeDir?: string;
}

function childExit(child: ChildProcess): Promise<Exit> {
  return new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) return resolve({ exitCode: child.exitCode, signal: child.signalCode });
    child.once('exit', (exitCode, signal) => resolve({ exitCode, signal }));
    // A program that cannot be started (ENOENT, EACCES) never exits: report it as exit 127 (as a shell would).
    child.once('error', () => resolve({ exitCode: 127, signal: null }));
  });
}

/** The variables every job gets for its checkpoints, pointing where the job sees its folders. */
export function directoryEnv(paths: JobPaths): Record<string, string> {
  return { GPU_FLEET_CHECKPOINT_DIR: paths.checkpointDir, ...(paths.resumeDir ? { GPU_FLEET_RESUME_DIR: paths.resumeDir } : {}) };
}

// ---- plain processes ------------------------------------------------------------------------

/**
 * Runs the command as a process of this machine, in its own process group, with a small
 * environment (PATH, HOME, LANG, TZ from the agent's; the job's variables, which may replace
 * those for the job; CUDA_VISIBLE_DEVICES for its devices). The program itself is looked up on
 * the agent's PATH, so a job's PATH changes what the job starts, never which program the agent
 * runs. This runner isolates nothing else: the process runs as the agent's user, on the host
 * (tests, and machines whose jobs are trusted); production runs jobs in containers. The image is not used.
 */
export class ProcessRunner implements JobRunner {
  readonly kind = 'process' as const;
  private readonly live = new Map<number, string | undefined>();
  private readonly baseEnv: NodeJS.ProcessEnv;

  /**
   * @param options.stateFile where the runner lists the process groups it started (with each
   *   one's start time), so that an agent started again after a crash can stop them.
   */
  constructor(options: { baseEnv?: NodeJS.ProcessEnv; stateFile?: string } = {}) {
    this.baseEnv = options.baseEnv ?? process.env;
    this.stateFile = options.stateFile;
  }

  private readonly stateFile: string | undefined;

  async start(launch: Launch): Promise<JobProcess> {
    const [name, ...args] = launch.command;
    if (!name) throw new GpuFleetError(`job ${launch.jobId} has an empty command`);
    // The program is found on the agent's PATH, not on one the job gives (that one is the job's own, for what it starts).
    const program = onPath(name, this.baseEnv.PATH ?? '');
    const inherited = Object.fromEntries(
      ['PATH', 'HOME', 'LANG', 'TZ'].flatMap((k) => (this.baseEnv[k] !== undefined ? [[k, this.baseEnv[k]!]] : [])),
    );
    const env = {
      ...inherited,
      ...launch.env,
      ...directoryEnv({ checkpointDir: launch.checkpointDir, ...(launch.resumeDir ? { resumeDir: launch.resumeDir } : {}) }),
      CUDA_VISIBLE_DEVICES: launch.devices.join(','),
    };
    const log = openSync(launch.logFile, 'a');
    let child: ChildProcess;
    try {
      child = spawn(program, args, { env, stdio: ['ignore', log, log], detached: true, shell: false });
    } finally {
      closeSync(log);
    }
    const exited = childExit(child);
    const pid = child.pid;
    if (pid !== undefined) {
      this.live.set(pid, processStartTime(pid));
      this.saveState();
      void exited.then(() => {
        this.live.delete(pid);
        this.saveState();
      });
    }
    const signalGroup = (sig: NodeJS.Signals) => {
      if (pid === undefined) return;
      try {
        process.kill(-pid, sig);
      } catch {
        // the group is gone already
      }
    };
    return {
      pid,
      exited,
      signal: async (sig) => {
        if (pid === undefined || child.exitCode !== null || child.signalCode !== null) return;
        try {
          process.kill(pid, sig);
        } catch {
          // gone between the check and the signal
        }
      },
      stop: async (graceMs) => {
        signalGroup('SIGTERM');
        const done = await Promise.race([exited, delay(graceMs, undefined, { ref: false })]);
        if (done) return done;
        signalGroup('SIGKILL');
        return exited;
      },
    };
  }

  private saveState(): void {
    if (!this.stateFile) return;
    writeFileSync(this.stateFile, JSON.stringify([...this.live].map(([pid, startTime]) => ({ pid, startTime }))));
  }

  /**
   * Kills the process groups a previous agent started and left running. A group is killed only if
   * its leader is still the same process (same start time in /proc), never a stranger that reused the pid.
   */
  async cleanUpLeftovers(): Promise<string[]> {
    if (!this.stateFile) return [];
    let listed: { pid: number; startTime?: string }[];
    try {
      listed = JSON.parse(readFileSync(this.stateFile, 'utf8')) as { pid: number; startTime?: string }[];
    } catch {
      return [];
    }
    const killed: string[] = [];
    for (const { pid, startTime } of listed) {
      if (this.live.has(pid) || startTime === undefined || processStartTime(pid) !== startTime) continue;
      try {
        process.kill(-pid, 'SIGKILL');
        killed.push(String(pid));
      } catch {
        // gone
      }
    }
    this.saveState();
    return killed;
  }
}

/**
 * Where a command's program is: itself when it names a path, else the first executable of that
 * name in the folders of `path`; the bare name when none is (the spawn then fails as a shell's would, exit 127).
 */
export function onPath(program: string, path: string): string {
  if (program.includes('/')) return program;
  for (const dir of path.split(delimiter)) {
    if (!isAbsolute(dir)) continue; // a relative entry would depend on the working folder
    const candidate = join(dir, program);
    try {
      accessSync(candidate, constants.X_OK);
      return candidate;
    } catch {
      // not here
    }
  }
  return program;
}

/** A process's start time (field 22 of /proc/<pid>/stat), to tell it from a later process with the same pid. */
function processStartTime(pid: number): string | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19];
  } catch {
    return undefined;
  }
}

// ---- containers --------------------------------------------------------------------------

export const CONTAINER_CHECKPOINT_DIR = '/gpu-fleet/checkpoint';
export const CONTAINER_RESUME_DIR = '/gpu-fleet/resume';
const LABEL = 'io.gpu-fleet.job';

/**
 * A job id as one name made of `[A-Za-z0-9_.-]` (a container name, a folder name), distinct for
 * distinct ids: letters, digits, "-" and "." (not leading) stay as they are, and every other
 * character is written as "_" and two hex digits per UTF-8 byte ("~" is `_7e`, "_" itself `_5f`),
 * so two ids never share a container or a job folder. An escaped id longer than
 * {@link MAX_SAFE_NAME} keeps its first part and adds "__" and the SHA-256 of the id: an escape
 * never holds "__", so such a name is never an escaped id.
 */
export function safeJobName(jobId: string): string {
  let out = '';
  for (const c of jobId) {
    if (/[A-Za-z0-9-]/.test(c) || (c === '.' && out !== '')) out += c;
    else for (const b of Buffer.from(c, 'utf8')) out += `_${b.toString(16).padStart(2, '0')}`;
  }
  if (out.length <= MAX_SAFE_NAME) return out;
  // Cut before an escape, never inside one.
  let cut = MAX_SAFE_NAME - 66;
  const underscore = out.lastIndexOf('_', cut);
  if (underscore >= cut - 2) cut = underscore;
  return `${out.slice(0, cut)}__${createHash('sha256').update(jobId, 'utf8').digest('hex')}`;
}

/** The longest name {@link safeJobName} gives (a folder name may have 255 bytes; docker names have no set limit). */
export const MAX_SAFE_NAME = 200;

/** The container's name for one rank of one attempt (docker names allow [a-zA-Z0-9][a-zA-Z0-9_.-]). */
export function containerName(jobId: string, attempt: number, rank: number): string {
  return `gpu-fleet-${safeJobName(jobId)}-a${attempt}-r${rank}`;
}

/**
 * The `docker run` arguments for a launch, and the env file that carries the job's variables.
 * The variables go to the container only, through `--env-file` (a file the runner writes with
 * mode 0600 in a folder only the agent can read, and deletes once the container exists): never
 * through the docker CLI's own environment, where a job's `PATH`, `LD_PRELOAD`, `DOCKER_HOST` or
 * `HOME` would change which program runs, what it loads and which daemon it talks to. No value
 * appears in a process list. Docker's env-file format is one `NAME=value` per line, the value
 * taken as written, so values may hold any character but a line break (job specs refuse those).
 */
export function dockerRunArgs(
  launch: Launch,
  options: {
    extraArgs?: readonly string[];
    envFile: string;
    /** The group of the job's checkpoint folder: a container run as a uid of its own gets it, to write there. */
    folderGid?: number;
  },
): { args: string[]; envFileText: string } {
  const env: Record<string, string> = {
    ...launch.env,
    ...directoryEnv({ checkpointDir: CONTAINER_CHECKPOINT_DIR, ...(launch.resumeDir ? { resumeDir: CONTAINER_RESUME_DIR } : {}) }),
  };
  for (const [name, value] of Object.entries(env))
    if (/[\r\n]/.test(value))
      throw new GpuFleetError(`variable ${name} of job ${launch.jobId} holds a line break, which an env file cannot carry`);
  const args = [
    'run',
    '--rm',
    '--init',
    '--name',
    containerName(launch.jobId, launch.attempt, launch.rank),
    '--label',
    `${LABEL}=${launch.jobId}`,
    '--label',
    `${LABEL}.attempt=${launch.attempt}`,
  ];
  // --gpus takes a CSV value; a list of devices must be quoted inside the value.
  if (launch.devices.length > 0) args.push('--gpus', `"device=${launch.devices.join(',')}"`);
  args.push(...containerSettingArgs(launch.container, options.folderGid));
  args.push('--mount', `type=bind,source=${launch.checkpointDir},target=${CONTAINER_CHECKPOINT_DIR}`);
  if (launch.resumeDir) args.push('--mount', `type=bind,source=${launch.resumeDir},target=${CONTAINER_RESUME_DIR},readonly`);
  args.push('--env-file', options.envFile);
  args.push(...(options.extraArgs ?? []));
  args.push('--', launch.image, ...launch.command);
  const envFileText = Object.keys(env)
    .sort()
    .map((name) => `${name}=${env[name]}\n`)
    .join('');
  return { args, envFileText };
}

/**
 * The docker flags of a job's settings: the host's network for a service (its port is the
 * machine's, where the load balancer and the agent reach it) and for a multi-node gang (the
 * leader's rendezvous port and NCCL's own ports are reached at the machine's address; NCCL also
 * wants the host's interfaces), docker's bridge for the rest; /dev/shm of the given size (docker's
 * default, 64 MiB, makes a PyTorch DataLoader with workers die with a bus error); the locked-memory
 * limit NCCL and RDMA need; and the 64 MiB stack NVIDIA's framework containers are run with.
 */
export function containerSettingArgs(settings: ContainerSettings, folderGid?: number): string[] {
  const memlock = settings.lockedMemoryMiB === 'unlimited' ? '-1' : String(settings.lockedMemoryMiB * 1024 * 1024);
  return [
    ...(settings.network === 'host' ? ['--network', 'host'] : []),
    // A fixed non-root uid that cannot gain privileges back (no capabilities, setuid bits ignored); its group is the job
    // folder's, which it writes through (the runner makes the folder group-writable).
    ...(settings.runAsUid !== undefined
      ? ['--user', `${settings.runAsUid}:${folderGid ?? settings.runAsUid}`, '--cap-drop', 'ALL', '--security-opt', 'no-new-privileges']
      : []),
    '--shm-size',
    `${settings.shmSizeMiB}m`,
    '--ulimit',
    `memlock=${memlock}:${memlock}`,
    '--ulimit',
    `stack=${CONTAINER_STACK_BYTES}`,
  ];
}

/** The stack limit of a job's container: 64 MiB, as NVIDIA runs its PyTorch containers. */
export const CONTAINER_STACK_BYTES = 64 * 1024 * 1024;

/**
 * The environment of the host programs the agent runs (the docker CLI, nvidia-smi): the agent's
 * own, as its service was started, never anything from a job spec.
 */
export function hostEnv(agentEnv: NodeJS.ProcessEnv): Record<string, string> {
  return Object.fromEntries(Object.entries(agentEnv).filter((e): e is [string, string] => e[1] !== undefined));
}

/**
 * Runs each job in a container with the docker CLI. `docker run` stays attached, so its exit code
 * is the container's; signals go through `docker kill --signal`, stops through `docker stop`.
 */
export class DockerRunner implements JobRunner {
  readonly kind = 'docker' as const;
  private readonly env: Record<string, string>;

  /**
   * @param envDir the folder for the jobs' env files (made mode 0700; default a folder of the
   *   system's temporary directory named for this user).
   */
  constructor(
    private readonly docker = 'docker',
    agentEnv: NodeJS.ProcessEnv = process.env,
    private readonly extraArgs: readonly string[] = [],
    private readonly envDir: string = join(tmpdir(), `gpu-fleet-env-${process.getuid?.() ?? 'user'}`),
  ) {
    this.env = hostEnv(agentEnv);
  }

  private cli(args: readonly string[]): Promise<{ code: number | null; output: string }> {
    return new Promise((resolve) => {
      const child = spawn(this.docker, args, { stdio: ['ignore', 'pipe', 'pipe'], env: this.env, shell: false });
      let output = '';
      child.stdout.on('data', (b: Buffer) => (output += b.toString()));
      child.stderr.on('data', (b: Buffer) => (output += b.toString()));
      child.once('error', (e) => resolve({ code: 127, output: e.message }));
      child.once('exit', (code) => resolve({ code, output }));
    });
  }

  async prefetch(image: string): Promise<'present' | 'pulled'> {
    if ((await this.cli(['image', 'inspect', '--format', '{{.Id}}', image])).code === 0) return 'present';
    const pull = await this.cli(['pull', '--quiet', image]);
    if (pull.code !== 0) throw new Error(`docker pull ${image} failed (exit ${pull.code}): ${pull.output.trim().slice(-500)}`);
    return 'pulled';
  }

  private envFileOf(name: string): string {
    return join(this.envDir, `${name}.env`);
  }

  async start(launch: Launch): Promise<JobProcess> {
    const name = containerName(launch.jobId, launch.attempt, launch.rank);
    const envFile = this.envFileOf(name);
    // A container run as a uid of its own writes its folder through the folder's group (setgid: what it writes keeps it).
    let folderGid: number | undefined;
    if (launch.container.runAsUid !== undefined) {
      folderGid = statSync(launch.checkpointDir).gid;
      chmodSync(launch.checkpointDir, 0o2770);
    }
    const { args, envFileText } = dockerRunArgs(launch, {
      extraArgs: this.extraArgs,
      envFile,
      ...(folderGid !== undefined ? { folderGid } : {}),
    });
    await this.cli(['rm', '--force', name]); // a container of this attempt left by an earlier agent
    mkdirSync(this.envDir, { recursive: true, mode: 0o700 });
    chmodSync(this.envDir, 0o700);
    rmSync(envFile, { force: true });
    writeFileSync(envFile, envFileText, { mode: 0o600, flag: 'wx' });
    const log = openSync(launch.logFile, 'a');
    let child: ChildProcess;
    try {
      child = spawn(this.docker, args, { env: this.env, stdio: ['ignore', log, log], shell: false });
    } finally {
      closeSync(log);
    }
    const exited = childExit(child);
    const forget = () => rmSync(envFile, { force: true });
    void exited.then(forget);
    // The CLI reads the file before it creates the container: once the container exists, the file goes.
    void this.whenCreated(name, exited).then(forget);
    return {
      pid: child.pid,
      exited,
      signal: async (sig) => {
        await this.cli(['kill', '--signal', sig, name]);
      },
      stop: async (graceMs) => {
        await this.cli(['stop', '--time', String(Math.max(1, Math.ceil(graceMs / 1000))), name]);
        const done = await Promise.race([exited, delay(5000, undefined, { ref: false })]);
        if (done) return done;
        child.kill('SIGKILL');
        return exited;
      },
    };
  }

  /**
   * Resolves once `docker container inspect` finds the container, looking every second (an image
   * pull comes first and may take minutes); or when its `docker run` has exited, or after 30 minutes.
   */
  private async whenCreated(name: string, exited: Promise<Exit>): Promise<void> {
    let gone = false;
    void exited.then(() => (gone = true));
    for (let waited = 0; !gone && waited < 30 * 60_000; waited += 1000) {
      if ((await this.cli(['container', 'inspect', '--format', '{{.Id}}', name])).code === 0) return;
      await delay(1000, undefined, { ref: false });
    }
  }

  async cleanUpLeftovers(): Promise<string[]> {
    const listed = await this.cli(['ps', '--all', '--filter', `label=${LABEL}`, '--format', '{{.Names}}']);
    if (listed.code !== 0) throw new GpuFleetError(`docker ps failed: ${listed.output.trim()}`);
    const names = listed.output.split(/\s+/).filter((s) => /^[a-zA-Z0-9][a-zA-Z0-9_.-]+$/.test(s));
    if (names.length > 0) await this.cli(['rm', '--force', ...names]);
    // Env files an earlier agent left (it crashed before its containers were created).
    rmSync(this.envDir, { recursive: true, force: true });
    return names;
  }
}
