import { GpuFleetError, messageOf } from '../core/errors.ts';
import type { NodeAssignment } from '../core/job.ts';
import type { NvidiaSmiReport } from './nvidia-smi.ts';

/**
 * Turns a placement on this node into the devices a job may use: GPU UUIDs (or indices) for
 * whole GPUs and time-sliced shares, and one MIG device for a MIG request.
 *
 * MIG: the planner decides a GPU instance's profile and its placement (start slice) on a GPU. The
 * agent uses a free GPU instance of that profile at that placement when one exists (a layout set
 * at boot, or one left by an earlier job) and otherwise creates one there
 * (`nvidia-smi mig -cgi <profile>:<start> -C`: a profile tuple with a placement specifier, as
 * nvidia-smi's help describes it; no shared capture shows it, so check it on a MIG host first);
 * instances it created are destroyed when their job ends. A placement the driver refuses is a
 * DeviceError: the attempt goes back to the queue with that reason, and the planner, which plans
 * from the placements the agent reports (`nvidia-smi mig -lgi`), sees the real layout next time.
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
  /** Creates a GPU instance at a placement (with its default compute instance); returns the new GPU-instance id. */
  createInstance(gpuIndex: number, profile: string, startSlice: number): Promise<number>;
  destroyInstance(gpuIndex: number, gpuInstanceId: number): Promise<void>;
}

/** `nvidia-smi mig` as the MIG control: create with -cgi … -C, destroy with -dci then -dgi. */
export function nvidiaSmiMig(run: (args: readonly string[]) => Promise<string>): MigControl {
  return {
    async createInstance(gpuIndex, profile, startSlice) {
      const tuple = `${profile}:${startSlice}`;
      let out: string;
      try {
        out = await run(['mig', '-i', String(gpuIndex), '-cgi', tuple, '-C']);
      } catch (error) {
        throw new DeviceError(`nvidia-smi mig -cgi ${tuple} on GPU ${gpuIndex} was refused: ${messageOf(error)}`, { cause: error });
      }
      const m = /created GPU instance ID\s+(\d+)/.exec(out);
      if (!m)
        throw new DeviceError(
          `nvidia-smi mig -cgi ${tuple} on GPU ${gpuIndex} did not report a new GPU instance: ${out.trim().slice(0, 200)}`,
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
    const start = assignment.mig.startSlice;
    // A free instance of the profile at the planned placement (one whose placement the driver did not report is taken as it is).
    const free = gpu.mig.devices.filter(
      (d) =>
        d.profile === profile &&
        d.computeInstanceId === 0 &&
        (d.placement === undefined || d.placement.start === start) &&
        !this.migInUse.has(`${gpuIndex}/${d.gpuInstanceId}`),
    );
    let chosen = free[0];
    let created = false;
    if (!chosen) {
      if (!this.mig)
        throw new DeviceError(`GPU ${gpuIndex} has no free ${profile} instance and the agent may not create MIG instances here`);
      const gi = await this.mig.createInstance(gpuIndex, profile, start);
      created = true;
      const after = (await this.inventory()).gpus.find((g) => g.index === gpuIndex);
      chosen = after?.mig.devices.find((d) => d.gpuInstanceId === gi);
      if (!chosen) throw new DeviceError(`created GPU instance ${gi} (${profile}) on GPU ${gpuIndex}, but nvidia-smi does not show it`);
      this.log(`created MIG instance ${profile} at slice ${start} (GPU instance ${gi}) on GPU ${gpuIndex} for ${jobKey}`);
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
