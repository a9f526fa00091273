import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  containerLimits,
  cpuReserveMilli,
  diskFull,
  diskIsFull,
  jobDiskMiB,
  jobsRoom,
  memoryReserveMiB,
  MIN_CONTAINER_LIMITS,
  MIN_JOB_DISK_MIB,
  outOfMemory,
} from '../../core/container-limits.ts';

describe("a container's share of its machine", () => {
  it("keeps GKE's reserve for the agent, dockerd and the system, and gives jobs the rest", () => {
    // 16 GiB: 25% of 4 GiB, 20% of 4 GiB, 10% of 8 GiB, plus the 100 MiB eviction threshold.
    expect(memoryReserveMiB(16 * 1024)).toBe(Math.ceil(1024 + 819.2 + 819.2) + 100);
    // A p4d.24xlarge (1152 GiB): + 6% of 112 GiB + 2% of the 1024 GiB above 128.
    expect(memoryReserveMiB(1152 * 1024)).toBe(Math.ceil(1024 + 819.2 + 819.2 + 0.06 * 112 * 1024 + 0.02 * 1024 * 1024) + 100);
    expect(cpuReserveMilli(96)).toBe(500); // GKE's figure is 315m; at least half a core stays
    expect(cpuReserveMilli(1000)).toBe(Math.ceil(60 + 10 + 10 + 996 * 2.5));
    expect(jobsRoom({ memoryMiB: 16 * 1024, cpus: 4, gpus: 1 })).toEqual({ memoryMiB: 16 * 1024 - 2763, milliCpus: 3500, pids: 4096 });
  });

  it('gives each holder its share of the GPUs: whole GPUs, a MIG slice, a time-slice share', () => {
    const p4d = { memoryMiB: 1152 * 1024, cpus: 96, gpus: 8 };
    const room = jobsRoom(p4d);
    expect(containerLimits(8000, p4d, 8192)).toEqual({
      memoryMiB: room.memoryMiB,
      milliCpus: room.milliCpus,
      pids: room.pids,
      shmMiB: 8192,
    });
    expect(containerLimits(1000, p4d, 1024)).toMatchObject({ memoryMiB: Math.floor(room.memoryMiB / 8), pids: 4096 });
    const slice = containerLimits(143, p4d, 1024);
    expect(slice.memoryMiB).toBe(Math.floor((room.memoryMiB * 143) / 8000));
    // A share of a small machine still gets the least a runtime needs.
    expect(containerLimits(100, { memoryMiB: 2048, cpus: 4, gpus: 1 }, 1024)).toMatchObject({ memoryMiB: 256, milliCpus: 350, pids: 409 });
    expect(containerLimits(0, { memoryMiB: 4096, cpus: 4, gpus: 0 }, 64)).toEqual({ ...MIN_CONTAINER_LIMITS, shmMiB: 64 });
  });

  it('bounds /dev/shm by the memory limit it counts within', () => {
    const small = containerLimits(1000, { memoryMiB: 8192, cpus: 8, gpus: 4 }, 1_048_576);
    expect(small.shmMiB).toBe(small.memoryMiB);
  });

  it('never gives the holders of one machine together more than the jobs’ room (property over random machines and shares)', () => {
    fc.assert(
      fc.property(
        fc.record({
          memoryMiB: fc.integer({ min: 2048, max: 4 * 1024 * 1024 }),
          cpus: fc.integer({ min: 2, max: 448 }),
          gpus: fc.integer({ min: 1, max: 16 }),
        }),
        fc.array(fc.integer({ min: 1, max: 8000 }), { minLength: 1, maxLength: 56 }),
        (machine, wanted) => {
          // The shares the planner could give: taken in turn while the machine's GPUs last.
          let left = machine.gpus * 1000;
          const shares = wanted.filter((m) => (m <= left ? ((left -= m), true) : false));
          const room = jobsRoom(machine);
          const limits = shares.map((m) => containerLimits(m, machine, 1024));
          // Above the least each one gets, the sum stays within the room.
          const above = (k: 'memoryMiB' | 'milliCpus' | 'pids') =>
            limits.reduce((sum, l) => sum + Math.max(0, l[k] - MIN_CONTAINER_LIMITS[k]), 0);
          expect(above('memoryMiB')).toBeLessThanOrEqual(room.memoryMiB);
          expect(above('milliCpus')).toBeLessThanOrEqual(room.milliCpus);
          expect(above('pids')).toBeLessThanOrEqual(room.pids);
          for (const l of limits) expect(l.shmMiB).toBeLessThanOrEqual(l.memoryMiB);
        },
      ),
    );
  });

  it("gives a job's folder its share of the jobs' volume, less kubelet's 10% reserve, and knows a full one", () => {
    const volume = 3_500 * 1024; // a 3.5 TiB NVMe of a p4d
    expect(jobDiskMiB(8000, { gpus: 8 }, volume)).toBe(Math.floor(volume * 0.9));
    expect(jobDiskMiB(1000, { gpus: 8 }, volume)).toBe(Math.floor((Math.floor(volume * 0.9) * 1000) / 8000));
    expect(jobDiskMiB(1000, { gpus: 1 }, 400)).toBe(MIN_JOB_DISK_MIB);
    expect(diskIsFull(2 ** 19, 2 ** 30)).toBe(true);
    expect(diskIsFull(2 ** 30 * 0.005, 2 ** 30)).toBe(true);
    expect(diskIsFull(2 ** 30 * 0.2, 2 ** 30)).toBe(false);
    expect(diskFull(512)).toMatchObject({ code: 'disk-full', message: expect.stringContaining('512 MiB') as string });
  });

  it('says why a job the kernel stopped for its memory failed', () => {
    expect(outOfMemory(668)).toMatchObject({ code: 'out-of-memory', message: expect.stringContaining('668 MiB') as string });
  });
});
