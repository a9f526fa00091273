import { GpuFleetError } from '../core/errors.ts';
import type { NodeAssignment } from '../core/job.ts';
import type { NvidiaSmiReport } from './nvidia-smi.ts';

/**
 * Turns a placement on this node into the devices a job may use: GPU UUIDs (or indices) for
 * whole GPUs and time-sliced shares, and one MIG device for a MIG request.
 *
 * MIG: the planner decides a GPU instance's profile and its slot on a GPU. The agent uses a free
 * GPU instance of that profile on that GPU when one exists (a layout set at boot, or one left by
 * an earlier job) and otherwise creates one (`nvidia-smi mig -cgi <profile> -C`); instances it
 * created are destroyed when their job ends, so the GPU returns to what the planner counts as free.
 * The driver chooses the slot of a new instance, which may differ from the planned one (the
 * report the agent reads does not show slots); the planner's view of that GPU can then be off
 * until the job ends, and a later MIG placement there may fail to start and be requeued.
 */

export interface HeldDevices {
  /** For `--gpus device=…` and CUDA_VISIBLE_DEVICES. */
  readonly devices: readonly string[];
  /** Gives the devices back; destroys a MIG instance the agent created for the job. */
  release(): Promise<void>;
}

/** A GPU or MIG device the job was given cannot be had (gone, in use, refused by the driver). */
export class DeviceError extends GpuFleetError {
  override name = 'DeviceError';
}

export interface MigControl {
  /** Creates a GPU instance (with its default compute instance); returns the new GPU-instance id. */
  createInstance(gpuIndex: number, profile: string): Promise<number>;
  destroyInstance(gpuIndex: number, gpuInstanceId: number): Promise<void>;
}

/** `nvidia-smi mig` as the MIG control: create with -cgi … -C, destroy with -dci then -dgi. */
export function nvidiaSmiMig(run: (args: readonly string[]) => Promise<string>): MigControl {
  return {
    async createInstance(gpuIndex, profile) {
      const out = await run(['mig', '-i', String(gpuIndex), '-cgi', profile, '-C']);
      const m = /created GPU instance ID\s+(\d+)/.exec(out);
      if (!m)
        throw new DeviceError(
          `nvidia-smi mig -cgi ${profile} on GPU ${gpuIndex} did not report a new GPU instance: ${out.trim().slice(0, 200)}`,
        );
      return Number(m[1]);
    },
    async destroyInstance(gpuIndex, gpuInstanceId) {
      await run(['mig', '-i', String(gpuIndex), '-gi', String(gpuInstanceId), '-dci']);
      await run(['mig', '-i', String(gpuIndex), '-gi', String(gpuInstanceId), '-dgi']);
    },
  };
}

export class DeviceAllocator {
  /** MIG instances in use, by "gpu/gi", with whether the agent created them. */
  private readonly migInUse = new Map<string, { jobKey: string; created: boolean }>();

  constructor(
    private readonly inventory: () => Promise<NvidiaSmiReport>,
    private readonly mig?: MigControl,
    private readonly log: (message: string) => void = () => {},
  ) {}

  async acquire(assignment: NodeAssignment, jobKey: string): Promise<HeldDevices> {
    const report = await this.inventory();
    if (!assignment.mig) {
      const devices = assignment.gpuIndices.map((i) => {
        const gpu = report.gpus.find((g) => g.index === i);
        if (!gpu)
          throw new DeviceError(
            `the placement names GPU ${i}, but nvidia-smi lists GPUs ${report.gpus.map((g) => g.index).join(', ') || '(none)'}`,
          );
        return gpu.uuid ?? String(i);
      });
      return { devices, release: async () => {} };
    }
    const gpuIndex = assignment.gpuIndices[0]!;
    const profile = assignment.mig.profile;
    const gpu = report.gpus.find((g) => g.index === gpuIndex);
    if (!gpu) throw new DeviceError(`the placement names GPU ${gpuIndex}, which nvidia-smi does not list`);
    if (!gpu.mig.enabled) throw new DeviceError(`GPU ${gpuIndex} (${gpu.name}) is not in MIG mode; it cannot hold a ${profile} instance`);
    const free = gpu.mig.devices.filter(
      (d) => d.profile === profile && d.computeInstanceId === 0 && !this.migInUse.has(`${gpuIndex}/${d.gpuInstanceId}`),
    );
    let chosen = free[0];
    let created = false;
    if (!chosen) {
      if (!this.mig)
        throw new DeviceError(`GPU ${gpuIndex} has no free ${profile} instance and the agent may not create MIG instances here`);
      const gi = await this.mig.createInstance(gpuIndex, profile);
      created = true;
      const after = (await this.inventory()).gpus.find((g) => g.index === gpuIndex);
      chosen = after?.mig.devices.find((d) => d.gpuInstanceId === gi);
      if (!chosen) throw new DeviceError(`created GPU instance ${gi} (${profile}) on GPU ${gpuIndex}, but nvidia-smi does not show it`);
      this.log(`created MIG instance ${profile} (GPU instance ${gi}) on GPU ${gpuIndex} for ${jobKey}`);
    }
    const key = `${gpuIndex}/${chosen.gpuInstanceId}`;
    this.migInUse.set(key, { jobKey, created });
    const device = chosen.uuid ?? `${gpuIndex}:${chosen.index}`;
    return {
      devices: [device],
      release: async () => {
        const held = this.migInUse.get(key);
        if (held?.jobKey !== jobKey) return;
        this.migInUse.delete(key);
        if (held.created && this.mig) await this.mig.destroyInstance(gpuIndex, chosen.gpuInstanceId);
      },
    };
  }
}
