import { spawn, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { accessSync, chmodSync, constants, mkdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { delimiter, isAbsolute, join } from 'node:path';
import { GpuFleetError } from '../core/errors.ts';
import { containerUser, type ContainerSettings } from '../core/job-spec.ts';
import { JOBS_CGROUP, JOBS_NETWORK, type ContainerLimits } from '../core/container-limits.ts';
import { setTimeout as delay } from 'node:timers/promises';
import { JobOutput } from './job-output.ts';

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
  /** The job's stdout and stderr go to this file, line by line, rotated ({@link JobOutput}). */
  readonly logFile: string;
  /** Told of each line the job prints (the log shipper), as it is written to {@link logFile}. */
  readonly onLine?: (line: Buffer) => void;
  /** How a container meets the network, its shared memory and its locked-memory limit (core/job-spec.ts `containerSettings`). */
  readonly container: ContainerSettings;
  /**
   * Its memory, processes, CPUs and /dev/shm, by its share of the machine (core/container-limits.ts
   * `containerLimits`). A container runner applies them; a plain process runs without.
   */
  readonly limits?: ContainerLimits;
  /** What it may write outside its folders, MiB (core/container-limits.ts `writableLayerMiB`): held by the engine where it can. */
  readonly layerMiB?: number;
}

export interface Exit {
  readonly exitCode: number | null;
  readonly signal: NodeJS.Signals | null;
  /** The kernel killed it for passing its memory limit (of this many MiB). */
  readonly outOfMemoryMiB?: number;
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
  /**
   * Stops what a previous run of the agent left behind (after a crash or restart), but the
   * launches named in `keep` (adopted: {@link adopt}). Returns what it stopped.
   */
  cleanUpLeftovers(keep?: ReadonlySet<string>): Promise<string[]>;
  /**
   * The launches a previous run of the agent left running, each by the attempt it is (its
   * labels); absent for a runner whose launches do not outlive the agent (plain processes).
   */
  findLeftovers?(): Promise<LeftLaunch[]>;
  /**
   * Follows a launch a previous run of the agent started, as {@link start} follows its own: its
   * output into the job's log from where that agent's copy ends, its end, its stop.
   */
  adopt?(left: LeftLaunch, launch: Pick<Launch, 'logFile' | 'onLine' | 'limits'>): JobProcess;
  /**
   * Lets go of every launch without stopping it (the agent leaves, for one that starts after it to
   * adopt): the runner stops following them, and their handles never report an end.
   */
  detach?(): void;
  /**
   * Puts a container image on this machine ahead of any job that runs it: 'present' when it was
   * there already, 'pulled' once pulled; throws (with the engine's words) when it cannot be had.
   * Absent for a runner without images (plain processes).
   */
  prefetch?(image: string): Promise<'present' | 'pulled'>;
  /**
   * What each running launch has written outside its folders (its container's writable layer),
   * bytes, by `jobId/attempt/rank`. Absent for a runner without containers; a launch the engine does
   * not answer for (not yet created, or gone) is left out.
   */
  writtenOutside?(launches: readonly Pick<Launch, 'jobId' | 'attempt' | 'rank'>[]): Promise<Map<string, number>>;
}

/** A launch found running when the agent starts, as its labels name it. */
export interface LeftLaunch {
  /** What the runner knows it by (a container's name). */
  readonly name: string;
  readonly jobId: string;
  readonly attempt: number;
  readonly rank: number;
  /** It runs still (one that ended while no agent followed it is adopted to have its end reported, unless the watchdog stopped it). */
  readonly running: boolean;
}

/** The key of a launch in {@link JobRunner.writtenOutside}'s answer. */
export function launchKey(l: Pick<Launch, 'jobId' | 'attempt' | 'rank'>): string {
  return `${l.jobId}/${l.attempt}/${l.rank}`;
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
    // The agent reads the job's output from its pipes and writes the job's log (rotated); a job that prints faster than
    // the agent reads waits on its pipe, and never on the agent's memory.
    const output = new JobOutput(launch.logFile, launch.onLine);
    const child = spawn(program, args, { env, stdio: ['ignore', 'pipe', 'pipe'], detached: true, shell: false });
    const read = Promise.all([output.follow(child.stdout, 'out'), output.follow(child.stderr, 'err')]);
    const exited = childExit(child).then(async (exit) => {
      // What it printed up to its end; a process it left behind that holds the pipes open is not waited for long.
      if (!(await Promise.race([read.then(() => true), delay(2000, false, { ref: false })]))) {
        child.stdout?.destroy();
        child.stderr?.destroy();
      }
      output.end();
      return exit;
    });
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
 * The engine's own copy of a container's output (what `docker logs` reads, and what the agent
 * follows): at most three files of 10 MiB, the oldest dropped first. The agent's copy is the job's
 * `output.log`, rotated on its own.
 */
export const CONTAINER_LOG = { maxSizeMiB: 10, maxFiles: 3 } as const;

/** `docker stop --time`: whole seconds, at least one. */
function stopTimeArg(graceMs: number): string {
  return String(Math.max(1, Math.ceil(graceMs / 1000)));
}

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
    /** The group of the job's checkpoint folder: the container gets it, to write there (it holds no capability that would pass the folder's mode). */
    folderGid?: number;
    /** The parent cgroup of jobs' containers on this engine (a systemd slice or a cgroupfs path: {@link JOBS_CGROUP}). */
    cgroupParent?: string;
    /**
     * The image as the runner pulled and inspected it for this attempt: its id (what runs, so that
     * the image inspected is the one started) and its user. Absent: the engine pulls the named image
     * itself (`--pull always`) and runs it as its user, unless that is root.
     */
    resolved?: ResolvedImage;
    /** Hold the container's writable layer to the launch's `layerMiB` (the engine's data root has project quotas). */
    layerQuota?: boolean;
  },
): { args: string[]; envFileText: string } {
  const env: Record<string, string> = {
    ...launch.env,
    ...directoryEnv({ checkpointDir: CONTAINER_CHECKPOINT_DIR, ...(launch.resumeDir ? { resumeDir: CONTAINER_RESUME_DIR } : {}) }),
  };
  for (const [name, value] of Object.entries(env))
    if (/[\r\n]/.test(value))
      throw new GpuFleetError(`variable ${name} of job ${launch.jobId} holds a line break, which an env file cannot carry`);
  // Not --rm: the runner reads how the container ended (the kernel's OOM kill) before it removes it. Detached: the
  // container lives apart from the agent (an agent that restarts finds it and follows it again), and the agent reads
  // its output from the engine's log, so a job that prints faster than the agent reads never waits on the agent.
  const args = [
    'run',
    '--detach',
    '--init',
    '--name',
    containerName(launch.jobId, launch.attempt, launch.rank),
    '--label',
    `${LABEL}=${launch.jobId}`,
    '--label',
    `${LABEL}.attempt=${launch.attempt}`,
    '--label',
    `${LABEL}.rank=${launch.rank}`,
    // The engine's copy of the output, which the agent follows, is bounded whatever the engine's defaults.
    '--log-driver',
    'json-file',
    '--log-opt',
    `max-size=${CONTAINER_LOG.maxSizeMiB}m`,
    '--log-opt',
    `max-file=${CONTAINER_LOG.maxFiles}`,
    // The registry decides, for each attempt, whether this machine may have the image: an image another team's job
    // left in the engine's cache never runs on the strength of the cache alone (Kubernetes' AlwaysPullImages).
    '--pull',
    options.resolved ? 'never' : 'always',
  ];
  // --gpus takes a CSV value; a list must be quoted inside the value. Docker hands the capabilities to the NVIDIA
  // runtime as NVIDIA_DRIVER_CAPABILITIES, over what the image says: compute and nvidia-smi, no graphics or video.
  if (launch.devices.length > 0) args.push('--gpus', `"device=${launch.devices.join(',')}","capabilities=${GPU_CAPABILITIES}"`);
  args.push(
    ...containerSettingArgs(launch.container, {
      ...(options.folderGid !== undefined ? { folderGid: options.folderGid } : {}),
      ...(launch.limits ? { limits: launch.limits } : {}),
      ...(options.resolved ? { imageUser: options.resolved.user } : {}),
    }),
  );
  if (launch.limits) args.push(...limitArgs(launch.limits, options.cgroupParent));
  if (options.layerQuota && launch.layerMiB !== undefined) args.push('--storage-opt', `size=${launch.layerMiB}m`);
  args.push('--mount', `type=bind,source=${launch.checkpointDir},target=${CONTAINER_CHECKPOINT_DIR}`);
  if (launch.resumeDir) args.push('--mount', `type=bind,source=${launch.resumeDir},target=${CONTAINER_RESUME_DIR},readonly`);
  args.push('--env-file', options.envFile);
  args.push(...(options.extraArgs ?? []));
  args.push('--', options.resolved?.id ?? launch.image, ...launch.command);
  const envFileText = Object.keys(env)
    .sort()
    .map((name) => `${name}=${env[name]}\n`)
    .join('');
  return { args, envFileText };
}

/**
 * The docker flags of a job's settings. Every container drops every capability and may not gain
 * privileges (setuid binaries and file capabilities are ignored), as Kubernetes' "restricted" pod
 * security asks: no raw sockets (no sniffing or spoofing of a neighbour's traffic), no device
 * nodes, no mounts, no passing a file's mode. It reaches its folder through the folder's group.
 * - Network: the host's for a service (its port is the machine's, where the load balancer and the
 *   agent reach it) and for a multi-node gang (the leader's rendezvous port and NCCL's own ports
 *   are reached at the machine's address; NCCL also wants the host's interfaces), run as a uid of
 *   its own ({@link HOST_NETWORK_JOB_UID}) that the node's metadata wall does not let through; the
 *   jobs' own bridge ({@link JOBS_NETWORK}: no container reaches another, nor the host) for the rest,
 *   as the image's user, or as {@link JOB_UID} where that is root and the spec was not let run as
 *   root (core/job-spec.ts `containerUser`).
 * - /dev/shm of the given size (docker's default, 64 MiB, makes a PyTorch DataLoader with workers
 *   die with a bus error), bounded by the memory limit when there is one; the locked-memory limit
 *   NCCL and RDMA need; and the 64 MiB stack NVIDIA's framework containers are run with.
 */
export function containerSettingArgs(
  settings: ContainerSettings,
  options: {
    readonly folderGid?: number;
    readonly limits?: ContainerLimits;
    /** The image's own user (`Config.User`), as inspected; absent: not known, taken as root. */
    readonly imageUser?: string;
  } = {},
): string[] {
  const memlock = settings.lockedMemoryMiB === 'unlimited' ? '-1' : String(settings.lockedMemoryMiB * 1024 * 1024);
  const shm = options.limits ? Math.min(settings.shmSizeMiB, options.limits.shmMiB) : settings.shmSizeMiB;
  const who = containerUser(settings, options.imageUser ?? '', options.folderGid);
  return [
    ...(settings.network === 'host' ? ['--network', 'host'] : ['--network', JOBS_NETWORK.name]),
    '--cap-drop',
    'ALL',
    '--security-opt',
    'no-new-privileges',
    // Never root unless the spec was let: a fixed uid for the host's network or a root image; else the image's user.
    ...(who.user !== undefined ? ['--user', who.user] : []),
    ...(who.groupAdd !== undefined ? ['--group-add', String(who.groupAdd)] : []),
    '--shm-size',
    `${shm}m`,
    '--ulimit',
    `memlock=${memlock}:${memlock}`,
    '--ulimit',
    `stack=${CONTAINER_STACK_BYTES}`,
  ];
}

/**
 * The docker flags of a container's limits: memory with no swap beyond it (/dev/shm counts within
 * it), processes, CPUs, and the parent cgroup all jobs share.
 */
export function limitArgs(limits: ContainerLimits, cgroupParent?: string): string[] {
  return [
    '--memory',
    `${limits.memoryMiB}m`,
    '--memory-swap',
    `${limits.memoryMiB}m`,
    '--pids-limit',
    String(limits.pids),
    '--cpus',
    (limits.milliCpus / 1000).toFixed(3),
    ...(cgroupParent ? ['--cgroup-parent', cgroupParent] : []),
  ];
}

/** `always`: each run asks the registry (a fleet machine); `missing`: the engine's cache serves (images built on the machine, as in tests). */
export type ImagePull = 'always' | 'missing';

/** An image as the engine holds it once pulled: its id and its own user (`Config.User`, empty for none). */
export interface ResolvedImage {
  readonly id: string;
  readonly user: string;
}

/** Docker's exit for a run that never started a container (the image could not be had, a bad flag). */
export const DOCKER_OWN_FAILURE = 125;

/** The driver capabilities a job's container gets (what CUDA and nvidia-smi need): never graphics, video or display. */
export const GPU_CAPABILITIES = 'compute,utility';

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
    private readonly pull: ImagePull = 'always',
    /** The engine's data root is on XFS with project quotas: each container's own files are held to its `layerMiB`. */
    private readonly layerQuota = false,
  ) {
    this.env = hostEnv(agentEnv);
  }

  private cli(args: readonly string[]): Promise<{ code: number | null; output: string }> {
    return new Promise((resolve) => {
      const child = spawn(this.docker, args, { stdio: ['ignore', 'pipe', 'pipe'], env: this.env, shell: false });
      if (args[0] === 'wait') {
        this.followers.add(child);
        child.once('close', () => this.followers.delete(child));
      }
      let output = '';
      child.stdout.on('data', (b: Buffer) => (output += b.toString()));
      child.stderr.on('data', (b: Buffer) => (output += b.toString()));
      child.once('error', (e) => resolve({ code: 127, output: e.message }));
      // 'close', not 'exit': the output's last bytes may still be in the pipes when the process exits.
      child.once('close', (code) => resolve({ code, output }));
    });
  }

  async prefetch(image: string): Promise<'present' | 'pulled'> {
    if (await this.inspectImage(image)) return 'present';
    const pull = await this.cli(['pull', '--quiet', image]);
    if (pull.code !== 0) throw new Error(`docker pull ${image} failed (exit ${pull.code}): ${pull.output.trim().slice(-500)}`);
    return 'pulled';
  }

  private envFileOf(name: string): string {
    return join(this.envDir, `${name}.env`);
  }

  /** The engine's cgroup driver decides how the jobs' parent cgroup is named; asked once. */
  private cgroupParent?: Promise<string>;
  /** The jobs' network, made once per agent (idempotent: one already there is used). */
  private network?: Promise<void>;

  private parentCgroup(): Promise<string> {
    this.cgroupParent ??= this.cli(['info', '--format', '{{.CgroupDriver}}']).then(({ code, output }) => {
      if (code !== 0) throw new GpuFleetError(`docker info failed: ${output.trim()}`);
      return output.trim() === 'systemd' ? JOBS_CGROUP.slice : JOBS_CGROUP.path;
    });
    return this.cgroupParent.catch((error: unknown) => {
      this.cgroupParent = undefined;
      throw error;
    });
  }

  /** Makes the jobs' bridge network ({@link JOBS_NETWORK}) unless the engine has it. */
  private jobsNetwork(): Promise<void> {
    this.network ??= (async () => {
      const inspect = () => this.cli(['network', 'inspect', '--format', '{{.Name}}', JOBS_NETWORK.name]);
      if ((await inspect()).code === 0) return;
      const made = await this.cli([
        'network',
        'create',
        '--driver',
        'bridge',
        '--opt',
        `com.docker.network.bridge.name=${JOBS_NETWORK.bridge}`,
        '--opt',
        'com.docker.network.bridge.enable_icc=false',
        '--label',
        `${LABEL}.network=jobs`,
        JOBS_NETWORK.name,
      ]);
      // Another agent (or an earlier start of this one) made it in between: that one serves.
      if (made.code !== 0 && (await inspect()).code !== 0)
        throw new GpuFleetError(`could not make the jobs' network ${JOBS_NETWORK.name}: ${made.output.trim()}`);
    })();
    return this.network.catch((error: unknown) => {
      this.network = undefined;
      throw error;
    });
  }

  async writtenOutside(launches: readonly Pick<Launch, 'jobId' | 'attempt' | 'rank'>[]): Promise<Map<string, number>> {
    const found = new Map<string, number>();
    if (launches.length === 0) return found;
    const byName = new Map(launches.map((l) => [containerName(l.jobId, l.attempt, l.rank), launchKey(l)]));
    // One call for all (the engine walks each container's upper layer, as `docker ps --size` does); a name it does not
    // know makes it exit 1, but it still answers for the rest.
    const got = await this.cli(['container', 'inspect', '--size', '--format', '{{.Name}}|{{.SizeRw}}', ...byName.keys()]);
    for (const line of got.output.split('\n')) {
      const m = /^\/?([a-zA-Z0-9][a-zA-Z0-9_.-]*)\|(\d+)$/.exec(line.trim());
      const key = m && byName.get(m[1]!);
      if (key) found.set(key, Number(m[2]));
    }
    return found;
  }

  /** The image's id and user as the engine holds it, or undefined when it has none of that name. */
  private async inspectImage(image: string): Promise<ResolvedImage | undefined> {
    const got = await this.cli(['image', 'inspect', '--format', '{{.Id}}|{{.Config.User}}', image]);
    if (got.code !== 0) return undefined;
    const line = got.output.trim();
    const bar = line.indexOf('|');
    const id = line.slice(0, bar);
    return bar > 0 && /^sha256:[0-9a-f]{64}$/.test(id) ? { id, user: line.slice(bar + 1) } : undefined;
  }

  /**
   * Starts a launch: the image is pulled for this attempt (on a fleet machine the registry decides,
   * each time, whether this machine may have it; the pull's progress goes to the job's log), then
   * inspected for its user, and the container runs the very image inspected, by its id. A stop that
   * comes during the pull ends the pull, and nothing starts.
   */
  async start(launch: Launch): Promise<JobProcess> {
    const name = containerName(launch.jobId, launch.attempt, launch.rank);
    const envFile = this.envFileOf(name);
    // The container holds no capability that passes a file's mode: it writes its folder through the folder's group
    // (setgid: what it writes keeps that group, so the agent reads it back).
    const folderGid = statSync(launch.checkpointDir).gid;
    chmodSync(launch.checkpointDir, 0o2770);
    if (launch.container.network !== 'host') await this.jobsNetwork();
    const cgroupParent = launch.limits ? await this.parentCgroup() : undefined;
    const options = {
      extraArgs: this.extraArgs,
      envFile,
      folderGid,
      layerQuota: this.layerQuota,
      ...(cgroupParent ? { cgroupParent } : {}),
    };
    const { envFileText } = dockerRunArgs(launch, options); // checks the variables before anything is pulled
    await this.cli(['rm', '--force', name]); // a container of this attempt left by an earlier agent
    mkdirSync(this.envDir, { recursive: true, mode: 0o700 });
    chmodSync(this.envDir, 0o700);
    rmSync(envFile, { force: true });
    writeFileSync(envFile, envFileText, { mode: 0o600, flag: 'wx' });
    const output = new JobOutput(launch.logFile, launch.onLine); // the job's log exists from its start (the pull's lines come first)
    const forget = () => rmSync(envFile, { force: true });

    let pull: ChildProcess | undefined;
    let stopping = false;
    const stopped: Exit = { exitCode: null, signal: 'SIGTERM' };
    let graceMs = 10_000;
    const exited = (async (): Promise<Exit> => {
      let image = this.pull === 'always' ? undefined : await this.inspectImage(launch.image);
      if (!image) {
        pull = spawn(this.docker, ['pull', launch.image], { env: this.env, stdio: ['ignore', 'pipe', 'pipe'], shell: false });
        const read = Promise.all([output.follow(pull.stdout, 'out'), output.follow(pull.stderr, 'err')]);
        const pulled = await childExit(pull);
        await read;
        pull = undefined;
        if (stopping) return stopped;
        if (pulled.exitCode !== 0) return { exitCode: DOCKER_OWN_FAILURE, signal: null };
        image = await this.inspectImage(launch.image);
        if (!image) return { exitCode: DOCKER_OWN_FAILURE, signal: null };
      }
      if (stopping) return stopped;
      const made = await this.cli(dockerRunArgs(launch, { ...options, resolved: image }).args);
      forget(); // the CLI has read it: the container exists, or never will
      if (made.code !== 0) {
        // The engine could not make or start it (125), or its program cannot run (126, 127): the job's log says why.
        output.write(Buffer.from(made.output.replace(/^[0-9a-f]{64}\n/m, ''))); // the id of a container that never ran says nothing
        await this.cli(['rm', '--force', name]);
        return { exitCode: made.code, signal: null };
      }
      if (stopping) await this.cli(['stop', '--time', stopTimeArg(graceMs), name]);
      return this.followContainer(name, output, launch.limits?.memoryMiB);
    })().finally(() => output.end());
    void exited.then(forget);
    return this.handle(name, exited, {
      beforeStop: (ms) => {
        stopping = true;
        graceMs = ms;
        if (pull) {
          pull.kill('SIGTERM');
          return true;
        }
        return false;
      },
    });
  }

  /**
   * Follows a started container to its end: its output from the engine's log into the job's log
   * (from `sinceSec` on, for a container an earlier agent started), its exit code from `docker
   * wait`, whether the kernel killed it for its memory; then the container goes.
   */
  private async followContainer(name: string, output: JobOutput, memoryMiB: number | undefined, sinceSec?: number): Promise<Exit> {
    const logs = spawn(this.docker, ['logs', '--follow', ...(sinceSec !== undefined ? ['--since', sinceSec.toFixed(3)] : []), name], {
      env: this.env,
      stdio: ['ignore', 'pipe', 'pipe'],
      shell: false,
    });
    this.followers.add(logs);
    void childExit(logs).then(() => this.followers.delete(logs));
    const read = Promise.all([output.follow(logs.stdout, 'out'), output.follow(logs.stderr, 'err')]);
    const waited = await this.cli(['wait', name]);
    // Let go of (the agent left): the container runs on for the next agent, and this handle never ends.
    if (this.detached) return new Promise<Exit>(() => undefined);
    // The engine's log ends with the container: what follows it ends soon after (it is stopped if it does not).
    if (!(await Promise.race([read.then(() => true), delay(5000, false, { ref: false })]))) logs.kill('SIGKILL');
    await read;
    const code = waited.code === 0 ? Number.parseInt(waited.output.trim(), 10) : Number.NaN;
    const exit: Exit = Number.isInteger(code) ? { exitCode: code, signal: null } : { exitCode: DOCKER_OWN_FAILURE, signal: null };
    const state = await this.cli(['container', 'inspect', '--format', '{{.State.OOMKilled}}', name]);
    await this.cli(['rm', '--force', name]);
    return state.code === 0 && state.output.trim() === 'true' && memoryMiB !== undefined ? { ...exit, outOfMemoryMiB: memoryMiB } : exit;
  }

  /** The handle on a container: signals and stops go to the engine by the container's name. */
  private handle(name: string, exited: Promise<Exit>, hooks: { beforeStop?: (graceMs: number) => boolean } = {}): JobProcess {
    return {
      pid: undefined,
      exited,
      signal: async (sig) => {
        await this.cli(['kill', '--signal', sig, name]);
      },
      stop: async (graceMs) => {
        if (!hooks.beforeStop?.(graceMs)) await this.cli(['stop', '--time', stopTimeArg(graceMs), name]);
        const done = await Promise.race([exited, delay(5000, undefined, { ref: false })]);
        if (done) return done;
        await this.cli(['kill', '--signal', 'SIGKILL', name]);
        return exited;
      },
    };
  }

  /**
   * Stops every running container of gpu-fleet's jobs on this engine (by their label: no other is
   * touched), each within `graceSec` (SIGTERM, then SIGKILL); returns their names. For the machine's
   * watchdog: the agent that would have stopped them is gone.
   */
  async stopJobContainers(graceSec: number): Promise<string[]> {
    const names = (await this.findLeftovers()).filter((l) => l.running).map((l) => l.name);
    if (names.length === 0) return [];
    const stopped = await this.cli(['stop', '--time', String(graceSec), ...names]);
    if (stopped.code !== 0) throw new GpuFleetError(`docker stop failed: ${stopped.output.trim()}`);
    return names;
  }

  detach(): void {
    this.detached = true;
    for (const child of this.followers) child.kill('SIGKILL');
  }

  /** The CLI processes following containers (`docker logs --follow`, `docker wait`), stopped when the agent lets go. */
  private readonly followers = new Set<ChildProcess>();
  private detached = false;

  /** The containers of gpu-fleet's jobs on this engine (by their label: no other container is ever listed), running or not. */
  async findLeftovers(): Promise<LeftLaunch[]> {
    const format = ['{{.Names}}', ...['', '.attempt', '.rank'].map((k) => `{{.Label "${LABEL}${k}"}}`), '{{.State}}'].join('\t');
    const listed = await this.cli(['ps', '--all', '--filter', `label=${LABEL}`, '--format', format]);
    if (listed.code !== 0) throw new GpuFleetError(`docker ps failed: ${listed.output.trim()}`);
    const found: LeftLaunch[] = [];
    for (const line of listed.output.split('\n')) {
      const [name, jobId, attempt, rank, state] = line.split('\t');
      if (!name || !/^[a-zA-Z0-9][a-zA-Z0-9_.-]+$/.test(name)) continue;
      // A container an older agent labelled without its rank is its rank 0 (it ran one rank a machine).
      const a = Number(attempt);
      const r = rank === undefined || rank === '' ? 0 : Number(rank);
      found.push({
        name,
        jobId: jobId ?? '',
        attempt: Number.isSafeInteger(a) ? a : -1,
        rank: Number.isSafeInteger(r) ? r : -1,
        running: state === 'running',
      });
    }
    return found;
  }

  adopt(left: LeftLaunch, launch: Pick<Launch, 'logFile' | 'onLine' | 'limits'>): JobProcess {
    // The earlier agent's copy of the output ends when it last wrote the file: the engine's log gives what came after.
    // (The file's time is the kernel's coarse clock, up to a tick early: the last line written may come again, never
    // one be lost.)
    let sinceSec: number | undefined;
    try {
      sinceSec = statSync(launch.logFile).mtimeMs / 1000;
    } catch {
      sinceSec = undefined; // no copy at all: the engine's log from the start
    }
    const output = new JobOutput(launch.logFile, launch.onLine);
    const exited = this.followContainer(left.name, output, launch.limits?.memoryMiB, sinceSec).finally(() => output.end());
    return this.handle(left.name, exited);
  }

  async cleanUpLeftovers(keep: ReadonlySet<string> = new Set()): Promise<string[]> {
    const names = (await this.findLeftovers()).map((l) => l.name).filter((n) => !keep.has(n));
    if (names.length > 0) await this.cli(['rm', '--force', ...names]);
    // Env files an earlier agent left (it crashed before its containers were created).
    rmSync(this.envDir, { recursive: true, force: true });
    return names;
  }
}
