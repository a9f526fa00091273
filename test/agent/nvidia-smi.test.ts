import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { identifyMigProfile } from '../../agent/mig-profiles.ts';
import {
  GpuInventoryError,
  gpuProblems,
  parseNvidiaSmiList,
  parseNvidiaSmiText,
  parseNvidiaSmiXml,
  readGpuInventory,
  toGpuDevices,
} from '../../agent/nvidia-smi.ts';
import { fakeNvidiaSmiEnv, NVIDIA_SMI_FIXTURES } from '../support/gpu-fixtures.ts';
import type { InstanceType } from '../../core/catalog.ts';
import { planBaseline } from '../../core/planner/baseline.ts';
import { plan } from '../../core/planner/planner.ts';
import { aGroup, aJob, aNode, anOffering, aSnapshot, INSTANCE_TYPES } from '../builders.ts';

/** The stand-in nvidia-smi on PATH prints real captures; the agent reads it as it would the real one. */
const read = (fixture: Parameters<typeof fakeNvidiaSmiEnv>[0], extra: Record<string, string> = {}) =>
  readGpuInventory({ env: fakeNvidiaSmiEnv(fixture, extra), timeoutMs: 5000 });

describe('GPU inventory from nvidia-smi (real captures through a stand-in on PATH)', () => {
  it('reads an A100 80GB in MIG mode from the XML report, naming each MIG device profile', async () => {
    const r = await read({ xml: 'telegraf__a100-sxm4-v12.xml' });
    expect(r.source).toBe('xml');
    expect(r.driverVersion).toBe('535.54.03');
    const [gpu] = r.gpus;
    expect(gpu).toMatchObject({
      index: 0,
      name: 'NVIDIA A100-SXM4-80GB',
      model: 'A100-80GB',
      uuid: 'GPU-513536b6-7d19-9063-b049-1e69664bb298',
      memoryTotalMiB: 81920,
      memoryUsedMiB: 50,
      powerDrawW: 67.03,
      powerLimitW: 500,
      temperatureC: 27,
    });
    expect(gpu!.utilizationPct).toBeUndefined(); // "N/A" in MIG mode is absent, never 0
    // 14 SMs and 19968 MiB on an A100 80GB: two memory slices, one compute slice.
    expect(gpu!.mig.enabled).toBe(true);
    expect(gpu!.mig.devices.map((d) => [d.profile, d.gpuInstanceId, d.smCount, d.memoryTotalMiB])).toEqual([
      ['1g.20gb', 3, 14, 19968],
      ['1g.20gb', 4, 14, 19968],
      ['1g.20gb', 5, 14, 19968],
      ['1g.20gb', 6, 14, 19968],
    ]);
    expect(toGpuDevices(r)[0]).toMatchObject({ index: 0, model: 'A100-80GB', memoryMiB: 81920, migEnabled: true });
    expect(gpuProblems(gpu!)).toEqual([]);
  });

  it('reads A10G and T4 machines: memory, utilisation, power and temperature', async () => {
    const a10g = (await read({ xml: 'telegraf__a10g.xml' })).gpus[0]!;
    expect(a10g).toMatchObject({
      name: 'NVIDIA A10G',
      model: 'A10G',
      memoryTotalMiB: 23028,
      memoryUsedMiB: 22,
      utilizationPct: 0,
      powerDrawW: 25.58,
      powerLimitW: 300,
      temperatureC: 17,
      ecc: { volatileUncorrectable: 0 },
    });
    expect(a10g.mig.enabled).toBe(false);
    const t4 = (await read({ xml: 'telegraf__tesla-t4.xml' })).gpus[0]!;
    expect(t4).toMatchObject({
      name: 'Tesla T4',
      model: 'T4',
      uuid: 'GPU-d37e67a5-91dd-3774-a5cb-99096249601a',
      memoryTotalMiB: 15360,
      memoryUsedMiB: 1032,
      powerDrawW: 26.78,
      powerLimitW: 70,
      temperatureC: 40,
    });
  });

  it('falls back to the text report (-q) and takes MIG names and UUIDs from -L: H100 with four MIG devices', async () => {
    const r = await read({ capture: 'linux-x86_64__nvidia-h100-mig__590.48.01', phase: 'load' });
    expect(r.source).toBe('text');
    expect(r.warnings.join(' ')).toMatch(/XML report unusable/);
    const [gpu] = r.gpus;
    expect(gpu).toMatchObject({
      name: 'NVIDIA H100 80GB HBM3',
      model: 'H100',
      memoryTotalMiB: 81559,
      memoryUsedMiB: 11125,
      powerDrawW: 432.21,
      powerLimitW: 700,
      temperatureC: 53,
      ecc: { volatileUncorrectable: 0, aggregateUncorrectable: 0 },
    });
    expect(gpu!.mig.devices.map((d) => [d.index, d.profile, d.gpuInstanceId, d.uuid, d.memoryUsedMiB])).toEqual([
      [0, '3g.40gb', 2, 'MIG-00000000-0000-0000-0000-000000000000', 11091],
      [1, '2g.20gb', 3, 'MIG-00000001-0000-0000-0000-000000000001', 17],
      [2, '1g.10gb', 9, 'MIG-00000002-0000-0000-0000-000000000002', 9],
      [3, '1g.10gb', 10, 'MIG-00000003-0000-0000-0000-000000000003', 9],
    ]);
  });

  it('names MIG profiles from memory and SMs alone when -L is not there, as -L would', async () => {
    for (const capture of ['linux-x86_64__nvidia-h100-mig__590.48.01', 'linux-x86_64__nvidia-h200-mig__590.48.01']) {
      const withList = (await read({ capture, phase: 'idle' })).gpus[0]!.mig.devices.map((d) => d.profile);
      const r = await read({ capture, phase: 'idle', withList: false });
      expect(r.warnings.join(' ')).toMatch(/could not list MIG devices with -L/);
      expect(r.gpus[0]!.mig.devices.map((d) => d.profile)).toEqual(withList);
    }
  });

  it('reads an H200 whose 3g.71gb GPU instance is split into two compute instances', async () => {
    const r = await read({ capture: 'linux-x86_64__nvidia-h200-mig__590.48.01', phase: 'load' });
    const gpu = r.gpus[0]!;
    expect(gpu).toMatchObject({ name: 'NVIDIA H200', model: 'H200', memoryTotalMiB: 143771, memoryUsedMiB: 16959, powerDrawW: 294.94 });
    expect(gpu.mig.devices.map((d) => [d.profile, d.computeProfile, d.gpuInstanceId, d.computeInstanceId, d.smCount])).toEqual([
      ['3g.71gb', '1c.3g.71gb', 2, 0, 16],
      ['3g.71gb', '2c.3g.71gb', 2, 1, 32],
      ['2g.35gb', undefined, 3, 0, 32],
      ['1g.18gb', undefined, 9, 0, 16],
      ['1g.18gb', undefined, 10, 0, 16],
    ]);
  });

  it('reads whole H100 and H200 GPUs under load', async () => {
    const h100 = (await read({ capture: 'linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01', phase: 'load' })).gpus[0]!;
    expect(h100).toMatchObject({
      model: 'H100',
      utilizationPct: 100,
      memoryUsedMiB: 19818,
      powerDrawW: 629.45,
      temperatureC: 59,
      mig: { enabled: false, devices: [] },
    });
    const h200 = (await read({ capture: 'linux-x86_64__nvidia-h200__590.48.01', phase: 'load' })).gpus[0]!;
    expect(h200).toMatchObject({ model: 'H200', utilizationPct: 100, memoryUsedMiB: 32362 });
  });

  it('leaves out GPUs gpu-fleet does not schedule, and still reads them', async () => {
    const r = await read({ capture: 'linux-x86_64__nvidia-geforce-rtx-2080-super__610.57.04', phase: 'load' });
    expect(r.gpus[0]).toMatchObject({ name: 'NVIDIA GeForce RTX 2080 SUPER', memoryTotalMiB: 8192, utilizationPct: 8 });
    expect(r.gpus[0]!.model).toBeUndefined();
    expect(toGpuDevices(r)).toEqual([]);
    // An old, sparse XML report parses too.
    expect(parseNvidiaSmiXml(readFileSync(join(NVIDIA_SMI_FIXTURES, 'xml/telegraf__gtx-1070-ti.xml'), 'utf8')).gpus[0]).toMatchObject({
      name: 'GeForce GTX 1070 Ti',
      memoryTotalMiB: 4096,
      memoryUsedMiB: 42,
    });
  });

  it('reads a real H200 as gpu-fleet read it on the lent device machine (driver 580): schedulable, healthy, MIG off', () => {
    const r = parseNvidiaSmiXml(readFileSync(join(NVIDIA_SMI_FIXTURES, 'xml/gpu-fleet-device__h200-580.159.04.xml'), 'utf8'));
    expect(r.driverVersion).toBe('580.159.04');
    expect(r.gpus).toHaveLength(1);
    expect(r.gpus[0]).toMatchObject({ index: 0, name: 'NVIDIA H200', model: 'H200', memoryTotalMiB: 143_771, memoryUsedMiB: 0 });
    expect(r.gpus[0]!.mig?.enabled).toBe(false);
    expect(gpuProblems(r.gpus[0]!)).toEqual([]);
    expect(toGpuDevices(r)).toEqual([{ index: 0, model: 'H200', memoryMiB: 143_771, uuid: 'GPU-00000000-0000-0000-0000-000000000200' }]);
  });

  it('reports GPUs with uncorrectable ECC errors, pending row remaps and failed remaps as problems', () => {
    const xml = readFileSync(join(NVIDIA_SMI_FIXTURES, 'xml/telegraf__a10g.xml'), 'utf8')
      .replace(/(<volatile>[\s\S]*?<dram_uncorrectable>)0(<\/dram_uncorrectable>)/, '$12$2')
      .replace('<remapped_row_pending>No</remapped_row_pending>', '<remapped_row_pending>Yes</remapped_row_pending>')
      .replace('<remapped_row_failure>No</remapped_row_failure>', '<remapped_row_failure>Yes</remapped_row_failure>');
    const problems = gpuProblems(parseNvidiaSmiXml(xml).gpus[0]!);
    expect(problems).toEqual([
      'GPU 0 (NVIDIA A10G, GPU-9a9a6c50-2a47-2f51-a902-b82c3b127e94): 2 uncorrectable ECC error(s) since the driver loaded',
      'GPU 0 (NVIDIA A10G, GPU-9a9a6c50-2a47-2f51-a902-b82c3b127e94): a memory page retirement or row remap is waiting for a GPU reset',
      'GPU 0 (NVIDIA A10G, GPU-9a9a6c50-2a47-2f51-a902-b82c3b127e94): a memory row remap failed; the GPU needs service',
    ]);
  });

  it('names the problem when nvidia-smi is missing, fails, hangs or prints something else', async () => {
    const missing = await readGpuInventory({ env: { PATH: '/nonexistent' } }).catch((e: unknown) => e);
    expect(missing).toBeInstanceOf(GpuInventoryError);
    expect(missing).toMatchObject({ kind: 'missing', message: 'nvidia-smi was not found on PATH: is the NVIDIA driver installed?' });

    const down = await read(undefined, { FAKE_NVIDIA_SMI_MODE: 'driver-down' }).catch((e: unknown) => e);
    expect(down).toMatchObject({ kind: 'failed' });
    expect((down as Error).message).toMatch(
      /^nvidia-smi -q failed with exit code 9: NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver/,
    );

    const garbage = await read(undefined, { FAKE_NVIDIA_SMI_MODE: 'garbage' }).catch((e: unknown) => e);
    expect(garbage).toMatchObject({
      kind: 'unreadable',
      message: 'nvidia-smi -q did not print its report; it began with: "Segmentation fault\\n"',
    });

    const hung = await readGpuInventory({ env: fakeNvidiaSmiEnv(undefined, { FAKE_NVIDIA_SMI_MODE: 'hang' }), timeoutMs: 500 }).catch(
      (e: unknown) => e,
    );
    expect(hung).toMatchObject({ kind: 'timeout', message: 'nvidia-smi -q -x did not answer within 500 ms (a hung GPU or driver?)' });
  });

  it('parses -L lines for GPUs and MIG devices', () => {
    const listed = parseNvidiaSmiList(
      readFileSync(join(NVIDIA_SMI_FIXTURES, 'captures/linux-x86_64__nvidia-h200-mig__590.48.01/capabilities__list.txt'), 'utf8'),
    );
    expect(listed).toHaveLength(1);
    expect(listed[0]).toMatchObject({ index: 0, name: 'NVIDIA H200', uuid: 'GPU-00000000-0000-0000-0000-000000000000' });
    expect(listed[0]!.mig.map((m) => m.name)).toEqual(['1c.3g.71gb', '2c.3g.71gb', '2g.35gb', '1g.18gb', '1g.18gb']);
    expect(() => parseNvidiaSmiText('Unable to determine the device handle for GPU0000:00:1E.0: Unknown Error')).toThrow(
      /did not print its report/,
    );
  });

  it('identifies MIG profiles across models from the NVIDIA tables', () => {
    // A100 40GB: 4g.20gb and 3g.20gb share memory; SMs (56 vs 42) tell them apart.
    expect(identifyMigProfile('A100-40GB', 40_960, { memoryMiB: 19_968, smCount: 56 })).toBe('4g.20gb');
    expect(identifyMigProfile('A100-40GB', 40_960, { memoryMiB: 19_968, smCount: 42 })).toBe('3g.20gb');
    // H100: the +me variant carries the OFA engine.
    expect(identifyMigProfile('H100', 81_559, { memoryMiB: 9_984, smCount: 16, ofas: 1 })).toBe('1g.10gb+me');
    expect(identifyMigProfile('H100', 81_559, { memoryMiB: 9_984, smCount: 16, ofas: 0 })).toBe('1g.10gb');
    expect(identifyMigProfile('H100', 81_559, { memoryMiB: 81_000, smCount: 132 })).toBe('7g.80gb');
    expect(identifyMigProfile('T4', 15_360, { memoryMiB: 1000 })).toBeUndefined();
  });
});

describe('MIG layout: the planner plans from what the GPU reports', () => {
  it('reads GPU-instance placements (mig -lgi) into the node record, and plans a 1g.10gb into the hole an ended job left', async () => {
    const r = await read({ capture: 'linux-x86_64__nvidia-h100-mig__590.48.01', phase: 'idle', lgi: 'h100-mig-lgi.assembled.txt' });
    expect(r.warnings.filter((w) => /lgi/.test(w))).toEqual([]);
    const full = toGpuDevices(r);
    expect(full[0]!.migDevices!.map((d) => [d.profile, d.startSlice, d.slices])).toEqual([
      ['3g.40gb', 4, 4],
      ['2g.20gb', 0, 2],
      ['1g.10gb', 2, 1],
      ['1g.10gb', 3, 1],
    ]);
    // The 1g.10gb at slice 2 is destroyed (its job ended): a hole in the middle, slices 0-1, 3 and 4-7 still taken.
    const holed = full.map((g) => ({ ...g, migDevices: g.migDevices!.filter((d) => d.gpuInstanceId !== 9) }));
    const h100: InstanceType = {
      name: 'p5.4xlarge',
      cloud: 'aws',
      gpuModel: 'H100',
      gpuCount: 1,
      gpuMemoryMiB: 81_920,
      vcpus: 16,
      memoryMiB: 262_144,
    };
    const types = new Map(Object.entries({ ...INSTANCE_TYPES, 'p5.4xlarge': h100 }));
    // maxSize 1 with the one machine up: nothing more can be bought, so what does not fit there waits.
    const g = {
      ...aGroup({ instanceType: 'p4d.24xlarge', maxSize: 1, desiredCapacity: 1 }),
      id: 'h100',
      migEnabled: true,
      offerings: [anOffering('p5.4xlarge')],
    };
    const node = aNode('i-1', { group: g, instanceType: 'p4d.24xlarge', record: { gpus: holed } });
    const fixed = { ...node, instance: { ...node.instance, instanceType: 'p5.4xlarge' } };
    const jobs = ['a', 'b'].map((id) => aJob({ id: `nlp.${id}`, spec: { gpu: { kind: 'mig', profile: '1g.10gb' } } }));
    const prices = new Map([
      [
        g.offerings[0]!.id,
        { offeringId: g.offerings[0]!.id, priceMicroUsdPerHour: 6_880_000, onDemandMicroUsdPerHour: 6_880_000, source: 'test' },
      ],
    ]);
    const snapshot = aSnapshot({ groups: [g], instanceTypes: types, nodes: [fixed], pendingJobs: jobs, prices });
    // The baseline the benchmarks compare against reads the same layout (one function files live machines for both).
    for (const p of [plan(snapshot), planBaseline(snapshot)]) {
      const placed = p.actions.flatMap((a) => (a.kind === 'place' ? [a.placement.nodes[0]!] : []));
      expect(placed).toEqual([{ nodeId: 'i-1', gpuIndices: [0], mig: { profile: '1g.10gb', startSlice: 2 } }]);
      expect(p.waiting.map((w) => w.jobId)).toHaveLength(1); // no other slice is free on that GPU
    }
  });
});
