/**
 * Load on a simulated service, from real traces: what the world sends the service, second by
 * second of the replay. Three sources (issue 28):
 * - fixed: a constant request rate (SkyServe's protocol, a fixed target);
 * - Azure LLM inference (Splitwise, ISCA'24; data/serving): requests per minute of the trace, as
 *   requests per second, the trace's hour repeated (it is 58 minutes long);
 * - an Alibaba app's live inference instances (Yang et al., NSDI'25; data/traces): the app's own
 *   autoscaler kept that many instances busy, so its count × the load one replica is scaled to
 *   hold is the app's load.
 */
import { readFileSync } from 'node:fs';
import { GpuFleetError } from '../../core/errors.ts';
import { parseCsv } from '../csv.ts';
import type { JobSpecInput } from '../../core/job-spec.ts';
import type { ReplicaStartup } from './replica-start.ts';

export interface ServiceDemand {
  /** What the load comes from, for reports. */
  readonly source: string;
  /** Requests per second at `sec` seconds into the replay. */
  rpsAt(sec: number): number;
}

export function fixedDemand(rps: number): ServiceDemand {
  return { source: `a fixed ${rps} requests per second`, rpsAt: () => rps };
}

/**
 * Requests per second per minute of an Azure LLM inference trace (TIMESTAMP, ContextTokens,
 * GeneratedTokens), starting at the trace's first request; the trace repeats after its last minute.
 */
export function azureLlmDemand(file: string | URL, scale = 1): ServiceDemand {
  const rows = parseCsv(readFileSync(file, 'utf8'));
  const times = rows.map((r, i) => {
    const t = Date.parse(`${(r.TIMESTAMP ?? '').trim().replace(' ', 'T').slice(0, 23)}Z`);
    if (!Number.isFinite(t)) throw new GpuFleetError(`${String(file)} row ${i + 2}: TIMESTAMP "${r.TIMESTAMP ?? ''}" is not a date-time`);
    return t;
  });
  if (times.length === 0) throw new GpuFleetError(`${String(file)}: no requests`);
  const first = Math.min(...times);
  const minutes = Math.floor((Math.max(...times) - first) / 60_000) + 1;
  const perMinute = new Array<number>(minutes).fill(0);
  for (const t of times) perMinute[Math.floor((t - first) / 60_000)]!++;
  const name = String(file).split('/').pop() ?? String(file);
  return {
    source: `${name}: ${times.length} requests over ${minutes} min, repeated${scale !== 1 ? `, × ${scale}` : ''}`,
    rpsAt: (sec) => (scale * perMinute[Math.floor(sec / 60) % minutes]!) / 60,
  };
}

/**
 * The live instances of one app of the Alibaba DLRM 2025 sample (instance rows with submit_s,
 * queue_s and end_s) over time, from its first instance on, × `rpsPerInstance`. Instances still
 * running at the trace's end stay live.
 */
export function alibabaAppDemand(file: string | URL, app: string, rpsPerInstance: number): ServiceDemand {
  const rows = parseCsv(readFileSync(file, 'utf8')).filter((r) => r.team === app);
  if (rows.length === 0) throw new GpuFleetError(`${String(file)}: no instances of app "${app}"`);
  const events: { sec: number; d: number }[] = [];
  for (const r of rows) {
    const start = Number(r.submit_s) + Number(r.queue_s ?? 0);
    if (!Number.isFinite(start)) continue;
    events.push({ sec: start, d: 1 });
    if (r.end_s !== undefined && r.end_s !== '' && Number.isFinite(Number(r.end_s))) events.push({ sec: Number(r.end_s), d: -1 });
  }
  events.sort((a, b) => a.sec - b.sec || a.d - b.d);
  const t0 = events[0]!.sec;
  const steps: { sec: number; live: number }[] = [];
  let live = 0;
  for (const e of events) {
    live += e.d;
    const sec = e.sec - t0;
    if (steps.length > 0 && steps[steps.length - 1]!.sec === sec) steps[steps.length - 1] = { sec, live };
    else steps.push({ sec, live });
  }
  const name = String(file).split('/').pop() ?? String(file);
  return {
    source: `${name}: live instances of ${app} (${rows.length} over the sample) × ${rpsPerInstance} requests per second`,
    rpsAt: (sec) => {
      // The last step at or before sec (binary search).
      let lo = 0;
      let hi = steps.length - 1;
      if (sec < steps[0]!.sec) return 0;
      while (lo < hi) {
        const mid = (lo + hi + 1) >> 1;
        if (steps[mid]!.sec <= sec) lo = mid;
        else hi = mid - 1;
      }
      return steps[lo]!.live * rpsPerInstance;
    },
  };
}

/** A service replayed beside the jobs: its team, its spec (with `name` and `service`), and its load. */
export interface SimService {
  readonly team: string;
  readonly spec: JobSpecInput;
  readonly demand: ServiceDemand;
  /** What a replica loads when it starts (cloud/sim/replica-start.ts); without it, a replica answers after its readiness delay. */
  readonly startup?: ReplicaStartup;
}
