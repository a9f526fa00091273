/**
 * How much of its machine a job's container may use: memory, processes and CPU in proportion to
 * the share of the machine's GPUs it holds (whole GPUs, a MIG slice, a time-slice share), out of
 * what the machine keeps for jobs once the agent, dockerd and the system have their reserve. A
 * container that passes its memory is killed alone (the kernel's OOM killer, inside its own
 * cgroup), one that forks past its processes gets EAGAIN, one that spins past its CPUs is
 * throttled: none can take the machine from its neighbours or from the agent.
 *
 * The reserve follows GKE's node allocatable formula (kubelet's `system-reserved` plus its
 * hard eviction threshold of 100 MiB), which platform teams know; CPU keeps at least half a core,
 * as the agent's uploads and dockerd's log handling need one under load.
 */

import { reason, type Reason } from './reason.ts';

const MIB_PER_GIB = 1024;

/** The machine as the agent finds it: all its memory and CPUs, and its GPUs. */
export interface MachineSize {
  readonly memoryMiB: number;
  /** Logical CPUs. */
  readonly cpus: number;
  readonly gpus: number;
}

/** What every job's container on a machine may use, together (the parent cgroup's limits). */
export interface JobsRoom {
  readonly memoryMiB: number;
  readonly milliCpus: number;
  readonly pids: number;
}

/** One container's limits (docker's `--memory`, `--cpus`, `--pids-limit`, `--shm-size`). */
export interface ContainerLimits {
  readonly memoryMiB: number;
  readonly milliCpus: number;
  readonly pids: number;
  /** /dev/shm: what the spec asks (or its default), never more than the memory limit, within which it counts. */
  readonly shmMiB: number;
}

/** Processes a whole GPU's share of a machine may have (a DataLoader with many workers, NCCL's threads are not processes). */
export const PIDS_PER_GPU = 4096;
/** The least any container gets, however small its share: a runtime and a few workers fit. */
export const MIN_CONTAINER_LIMITS = { memoryMiB: 256, milliCpus: 100, pids: 256 } as const;
/** The memory the kernel's eviction keeps free beyond the reserve (kubelet's `memory.available<100Mi`). */
export const EVICTION_THRESHOLD_MIB = 100;
/** The least CPU the agent, dockerd and the system keep. */
export const MIN_CPU_RESERVE_MILLI = 500;

/** Memory kept from jobs (GKE: 25% of the first 4 GiB, 20% of the next 4, 10% of the next 8, 6% of the next 112, 2% above 128). */
export function memoryReserveMiB(memoryMiB: number): number {
  const tiers: readonly [number, number][] = [
    [4, 0.25],
    [4, 0.2],
    [8, 0.1],
    [112, 0.06],
    [Infinity, 0.02],
  ];
  let left = Math.max(0, memoryMiB);
  let reserve = 0;
  for (const [gib, rate] of tiers) {
    const part = Math.min(left, gib * MIB_PER_GIB);
    reserve += part * rate;
    left -= part;
  }
  return Math.ceil(reserve) + EVICTION_THRESHOLD_MIB;
}

/** CPU kept from jobs, thousandths of a CPU (GKE: 6% of the first core, 1% of the next, 0.5% of the next 2, 0.25% above 4; at least half a core). */
export function cpuReserveMilli(cpus: number): number {
  const tiers: readonly [number, number][] = [
    [1, 60],
    [1, 10],
    [2, 5],
    [Infinity, 2.5],
  ];
  let left = Math.max(0, cpus);
  let reserve = 0;
  for (const [n, milli] of tiers) {
    const part = Math.min(left, n);
    reserve += part * milli;
    left -= part;
  }
  return Math.max(MIN_CPU_RESERVE_MILLI, Math.ceil(reserve));
}

/** What the machine's jobs may use together: all of it less the reserve. */
export function jobsRoom(machine: MachineSize): JobsRoom {
  return {
    memoryMiB: Math.max(0, Math.floor(machine.memoryMiB - memoryReserveMiB(machine.memoryMiB))),
    milliCpus: Math.max(0, machine.cpus * 1000 - cpuReserveMilli(machine.cpus)),
    pids: PIDS_PER_GPU * Math.max(1, machine.gpus),
  };
}

/**
 * One container's limits: its share of the jobs' room, where the share is the thousandths of a GPU
 * it holds over the machine's GPUs (a job with no GPU, or a machine that lists none, gets the
 * least). `requestedShmMiB` is the spec's /dev/shm (or its default): shared memory is charged to
 * the container's memory, so it is bounded by the memory limit.
 */
export function containerLimits(milliGpu: number, machine: MachineSize, requestedShmMiB: number): ContainerLimits {
  const room = jobsRoom(machine);
  const share = machine.gpus > 0 ? Math.min(1, Math.max(0, milliGpu) / (machine.gpus * 1000)) : 0;
  const memoryMiB = Math.max(MIN_CONTAINER_LIMITS.memoryMiB, Math.floor(room.memoryMiB * share));
  return {
    memoryMiB,
    milliCpus: Math.max(MIN_CONTAINER_LIMITS.milliCpus, Math.floor(room.milliCpus * share)),
    pids: Math.max(MIN_CONTAINER_LIMITS.pids, Math.floor(room.pids * share)),
    shmMiB: Math.max(1, Math.min(requestedShmMiB, memoryMiB)),
  };
}

/**
 * The docker network of jobs that need no host network: a bridge of its own with a fixed interface
 * name (the node's wall refuses what comes in through it to the host) and inter-container traffic
 * off, so two jobs on one machine cannot reach each other. A job has one container per machine,
 * so none needs a network shared with another of its own.
 */
export const JOBS_NETWORK = { name: 'gpu-fleet-jobs', bridge: 'gpufleet0' } as const;

/**
 * The parent cgroup of every job's container, under which the node's setup caps them all
 * together (what is left once the agent, dockerd and the system have their reserve): a systemd
 * slice where docker runs its cgroups through systemd, a cgroupfs path otherwise.
 */
export const JOBS_CGROUP = { slice: 'gpu-fleet-jobs.slice', path: '/gpu-fleet-jobs' } as const;

/** Why a job failed when the kernel killed its container for its memory. */
export function outOfMemory(limitMiB: number): Reason {
  return reason(
    'out-of-memory',
    `its container passed its memory limit of ${limitMiB} MiB (its share of the machine, /dev/shm included) and the kernel stopped it; its neighbours ran on`,
  );
}

/** The part of the jobs' volume kept free of every job's disk (kubelet's `nodefs.available<10%`). */
export const DISK_RESERVE_FRACTION = 0.1;
/** The least disk a job's folder gets. */
export const MIN_JOB_DISK_MIB = 512;

/**
 * The disk of a job's folder: its share of the jobs' volume (less the reserve), by the share of
 * the machine's GPUs it holds, as its memory is.
 */
export function jobDiskMiB(milliGpu: number, machine: Pick<MachineSize, 'gpus'>, volumeMiB: number): number {
  const room = Math.max(0, Math.floor(volumeMiB * (1 - DISK_RESERVE_FRACTION)));
  const share = machine.gpus > 0 ? Math.min(1, Math.max(0, milliGpu) / (machine.gpus * 1000)) : 0;
  return Math.max(MIN_JOB_DISK_MIB, Math.floor(room * share));
}

/** Whether a disk with this much left is full: under 1% of it, or under 1 MiB. */
export function diskIsFull(freeBytes: number, sizeBytes: number): boolean {
  return freeBytes < Math.max(2 ** 20, sizeBytes * 0.01);
}

/** Why a job failed when it had filled its folder's disk. */
export function diskFull(limitMiB: number): Reason {
  return reason(
    'disk-full',
    `it filled its folder's disk of ${limitMiB} MiB (its share of the machine's) and ended failing; its neighbours' disks kept their room`,
  );
}

/**
 * What all jobs of a machine may write outside their folders (their containers' writable layers),
 * by default: 10 GiB a GPU, as Fargate gives a task 20 GiB of ephemeral storage by default. It sits
 * on Docker's data volume beside the images, which the machine's disk must hold too.
 */
export const WRITABLE_LAYER_MIB_PER_GPU = 10 * MIB_PER_GIB;
/** The least a container may write outside its folders. */
export const MIN_WRITABLE_LAYER_MIB = 64;

/**
 * What one container may write outside its folders (kubelet's ephemeral-storage limit): its share
 * of `totalMiB` (default {@link WRITABLE_LAYER_MIB_PER_GPU} per GPU of the machine) by the share of
 * the machine's GPUs it holds. Past it the agent stops the container, as kubelet evicts a pod.
 */
export function writableLayerMiB(milliGpu: number, machine: Pick<MachineSize, 'gpus'>, totalMiB?: number): number {
  const total = totalMiB ?? WRITABLE_LAYER_MIB_PER_GPU * Math.max(1, machine.gpus);
  const share = machine.gpus > 0 ? Math.min(1, Math.max(0, milliGpu) / (machine.gpus * 1000)) : 0;
  return Math.max(MIN_WRITABLE_LAYER_MIB, Math.floor(total * share));
}

/** Whether a container that wrote `writtenBytes` outside its folders is past its limit. */
export function layerIsOver(writtenBytes: number, limitMiB: number): boolean {
  return writtenBytes > limitMiB * 2 ** 20;
}

/** Why a job failed when the agent stopped it for what it wrote outside its folders. */
export function layerFull(writtenMiB: number, limitMiB: number): Reason {
  return reason(
    'disk-full',
    `it wrote ${writtenMiB} MiB outside its folders (its container's own files, /tmp included), past its ${limitMiB} MiB, and was stopped, as kubelet evicts a pod past its ephemeral storage; write big files to its checkpoint folder`,
  );
}
