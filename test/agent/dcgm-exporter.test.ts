import { readFileSync } from 'node:fs';
import parsePrometheusTextFormat from 'parse-prometheus-text-format';
import { describe, expect, it } from 'vitest';
import { dcgmExposition } from '../../agent/dcgm-exporter.ts';
import { deviceReadings, mergeList, parseNvidiaSmiList, parseNvidiaSmiText, parseNvidiaSmiXml } from '../../agent/nvidia-smi.ts';
import { dcgmKey, parseDcgmReadings } from '../../agent/dcgm-readings.ts';

const fixture = (path: string) => readFileSync(new URL(`../fixtures/nvidia-smi/${path}`, import.meta.url), 'utf8');
type Family = { name: string; type: string; metrics: { value: string; labels?: Record<string, string> }[] };
const families = (text: string) => parsePrometheusTextFormat(text) as Family[];

// dcgm-exporter's own output (a real scrape of an L4, shared data) and its counter list.
const SAMPLE = families(fixture('dcgm/dcgm-exporter__cncf-k8s-ai-conformance__kops-l4.prom'));
const COUNTERS = new Map(
  fixture('dcgm/dcgm-exporter__default-counters.csv')
    .split('\n')
    .map((l) => /^#?\s*(DCGM_FI_[A-Z0-9_]+)\s*,\s*(\w+)/.exec(l.trim()))
    .filter((m): m is RegExpExecArray => m !== null)
    .map((m) => [m[1]!, m[2]!] as const),
);

describe('the DCGM exporter’s names, from nvidia-smi', () => {
  it('writes dcgm-exporter’s metric names, types and label set for each GPU, with the job holding it', async () => {
    const report = parseNvidiaSmiXml(fixture('xml/telegraf__a10g.xml'));
    const text = await dcgmExposition(report, {
      hostname: 'i-0abc',
      holders: new Map([[report.gpus[0]!.uuid!, { job: 'nlp.j1', team: 'nlp', attempt: 2 }]]),
    });
    const ours = families(text).filter((f) => f.name.startsWith('DCGM_'));
    expect(ours.map((f) => f.name).sort()).toEqual(
      expect.arrayContaining([
        'DCGM_FI_DEV_FB_FREE',
        'DCGM_FI_DEV_FB_USED',
        'DCGM_FI_DEV_GPU_TEMP',
        'DCGM_FI_DEV_GPU_UTIL',
        'DCGM_FI_DEV_MEM_COPY_UTIL',
        'DCGM_FI_DEV_POWER_USAGE',
        'DCGM_FI_DEV_SM_CLOCK',
      ]),
    );
    // Every name is one of dcgm-exporter's counters, with its type.
    for (const f of ours) expect([f.name, COUNTERS.get(f.name)]).toEqual([f.name, f.type.toLowerCase()]);
    // The label set of the real scrape (without its driver-specific extras), plus gpu-fleet's.
    const sampleLabels = Object.keys(SAMPLE.find((f) => f.name === 'DCGM_FI_DEV_GPU_UTIL')!.metrics[0]!.labels!).sort();
    const util = ours.find((f) => f.name === 'DCGM_FI_DEV_GPU_UTIL')!.metrics[0]!;
    expect(Object.keys(util.labels!).sort()).toEqual([...sampleLabels, 'attempt', 'job', 'team'].sort());
    expect(util.labels).toMatchObject({ gpu: '0', device: 'nvidia0', Hostname: 'i-0abc', job: 'nlp.j1', team: 'nlp', attempt: '2' });
    expect(util.labels!.modelName).toBe(report.gpus[0]!.name);
    expect(util.labels!.UUID).toBe(report.gpus[0]!.uuid);
    expect(Number(util.value)).toBe(report.gpus[0]!.utilizationPct);
    const fbUsed = Number(ours.find((f) => f.name === 'DCGM_FI_DEV_FB_USED')!.metrics[0]!.value);
    const fbFree = Number(ours.find((f) => f.name === 'DCGM_FI_DEV_FB_FREE')!.metrics[0]!.value);
    expect(fbUsed + fbFree).toBe(report.gpus[0]!.memoryTotalMiB);
  });

  it('writes a MIG instance’s framebuffer with GPU_I_PROFILE and GPU_I_ID, and the agent’s own figures', async () => {
    // What the agent reads: `nvidia-smi -q`, with the MIG devices' UUIDs from `nvidia-smi -L` (the devices it hands to jobs).
    const capture = 'captures/linux-x86_64__nvidia-h100-mig__590.48.01';
    const report = mergeList(
      parseNvidiaSmiText(fixture(`${capture}/load__smi-q.txt`)),
      parseNvidiaSmiList(fixture(`${capture}/capabilities__list.txt`)),
    );
    const g = report.gpus.find((x) => x.mig.enabled && x.mig.devices.length > 0)!;
    expect(g).toBeDefined();
    const d = g.mig.devices[0]!;
    const text = await dcgmExposition(report, {
      hostname: 'i-0mig',
      holders: new Map([[d.uuid!, { job: 'cv.slice', team: 'cv', attempt: 1 }]]),
      agent: {
        heartbeatAgeSec: 4,
        uploadsInFlight: 1,
        attemptsRunning: 2,
        lastCheckpointUploadSec: 12.5,
        logLinesDropped: 9_949_811,
        logBytesDropped: 1_000_000_000,
      },
    });
    const used = families(text).find((f) => f.name === 'DCGM_FI_DEV_FB_USED')!;
    const slice = used.metrics.find((m) => m.labels!.GPU_I_ID === String(d.gpuInstanceId) && m.labels!.gpu === String(g.index))!;
    expect(slice.labels).toMatchObject({ GPU_I_PROFILE: d.profile, job: 'cv.slice', team: 'cv', attempt: '1' });
    const own = new Map(
      families(text)
        .filter((f) => f.name.startsWith('gpu_fleet_agent_'))
        .map((f) => [f.name, Number(f.metrics[0]!.value)]),
    );
    expect(Object.fromEntries(own)).toMatchObject({
      gpu_fleet_agent_heartbeat_age_seconds: 4,
      gpu_fleet_agent_uploads_in_flight: 1,
      gpu_fleet_agent_attempts_running: 2,
      gpu_fleet_agent_checkpoint_upload_seconds: 12.5,
      // The shipper's drops, as counters: an operator alarms on their rate.
      gpu_fleet_agent_log_lines_dropped_total: 9_949_811,
      gpu_fleet_agent_log_bytes_dropped_total: 1_000_000_000,
    });
    expect(families(text).find((f) => f.name === 'gpu_fleet_agent_log_lines_dropped_total')!.type).toBe('COUNTER');
  });
});

describe('reading GPU use from a dcgm-exporter scrape', () => {
  it('the real L4 scrape: its GPU by UUID, engine-active as a percentage, framebuffer used', () => {
    const readings = parseDcgmReadings(fixture('dcgm/dcgm-exporter__cncf-k8s-ai-conformance__kops-l4.prom'));
    const uuids = [...new Set(SAMPLE.flatMap((f) => f.metrics.map((m) => m.labels?.UUID)).filter((u): u is string => u !== undefined))];
    expect([...readings.keys()].sort()).toEqual(uuids.sort());
    const first = SAMPLE.find((f) => f.name === 'DCGM_FI_DEV_FB_USED')!.metrics[0]!;
    const engine = SAMPLE.find((f) => f.name === 'DCGM_FI_PROF_GR_ENGINE_ACTIVE')!.metrics.find(
      (m) => m.labels?.UUID === first.labels!.UUID,
    )!;
    expect(readings.get(first.labels!.UUID!)).toEqual({ smPct: Number(engine.value) * 100, memoryUsedMiB: Number(first.value) });
  });

  it('reads back what our own exporter writes from nvidia-smi (an H100 under load): the same utilisation and memory', async () => {
    const report = parseNvidiaSmiText(fixture('captures/linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01/load__smi-q.txt'));
    const readings = parseDcgmReadings(await dcgmExposition(report, { hostname: 'i-0abc', holders: new Map() }));
    const gpu = report.gpus[0]!;
    expect(readings.get(dcgmKey(gpu.uuid!))).toEqual({ smPct: gpu.utilizationPct, memoryUsedMiB: gpu.memoryUsedMiB });
    // And the attempt's reading of that GPU is nvidia-smi's, with or without DCGM beside it.
    expect(deviceReadings(report, [gpu.uuid!], readings)).toEqual(deviceReadings(report, [gpu.uuid!]));
  });

  it("a MIG instance's series (the parent's UUID, GPU_I_ID) give that slice's utilisation; a series without a number is left out", () => {
    const text = [
      'DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="0",UUID="GPU-1",GPU_I_PROFILE="1g.10gb",GPU_I_ID="9"} 0.125',
      'DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-1",GPU_I_PROFILE="1g.10gb",GPU_I_ID="9"} 2048',
      'DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-2"} 40',
      'DCGM_FI_DEV_GPU_UTIL{gpu="2",UUID="GPU-3"} NaN',
      '',
    ].join('\n');
    const readings = parseDcgmReadings(text);
    expect(readings.get(dcgmKey('GPU-1', 9))).toEqual({ smPct: 12.5, memoryUsedMiB: 2048 });
    expect(readings.get('GPU-2')).toEqual({ smPct: 40 });
    expect(readings.has('GPU-3')).toBe(false);
  });
});
