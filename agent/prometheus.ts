/**
 * A service replica's own metrics, as its Prometheus endpoint reports them (vLLM's
 * `vllm:num_requests_waiting` and `vllm:num_requests_running` by default, or the names its spec
 * gives), read by the agent on the replica's machine and published beside the GPU metrics. The
 * text format is parsed by parse-prometheus-text-format (a port of the Prometheus Python client's
 * parser); a series with several label sets (one per model) is summed.
 */
import parsePrometheusTextFormat from 'parse-prometheus-text-format';
import { DEFAULT_PROMETHEUS_METRIC, type JobSpec } from '../core/job-spec.ts';
import type { ServiceMetric } from '../core/serving/autoscale.ts';

interface ParsedFamily {
  readonly name: string;
  readonly type: string;
  readonly metrics: readonly { readonly value?: string; readonly labels?: Record<string, string> }[];
}

/** The value of each named series in a Prometheus text exposition (summed over label sets); names not exposed are left out. */
export function seriesValues(text: string, names: readonly string[]): Record<string, number> {
  const families = parsePrometheusTextFormat(text) as ParsedFamily[];
  const out: Record<string, number> = {};
  for (const f of families) {
    if (!names.includes(f.name) || (f.type !== 'GAUGE' && f.type !== 'COUNTER' && f.type !== 'UNTYPED')) continue;
    let sum = 0;
    let seen = false;
    for (const m of f.metrics) {
      const v = Number(m.value);
      if (Number.isFinite(v)) {
        sum += v;
        seen = true;
      }
    }
    if (seen) out[f.name] = sum;
  }
  return out;
}

/** The Prometheus series a service scales on, by the metric they stand for (waiting and running requests). */
export function scrapedSeries(spec: JobSpec): { metric: ServiceMetric; series: string }[] {
  return (spec.service?.targets ?? []).flatMap((t) => {
    const series = t.prometheusMetric ?? DEFAULT_PROMETHEUS_METRIC[t.metric];
    return series && (t.metric === 'waiting-requests' || t.metric === 'running-requests') ? [{ metric: t.metric, series }] : [];
  });
}

/**
 * Reads a replica's metrics from `http://127.0.0.1:<port>/metrics` within `timeoutMs`. Returns
 * what it found, by metric; an endpoint that does not answer (the replica is starting) gives {}.
 */
export async function scrapeReplica(
  spec: JobSpec,
  options: { readonly host?: string; readonly timeoutMs?: number } = {},
): Promise<Partial<Record<ServiceMetric, number>>> {
  const wanted = scrapedSeries(spec);
  if (wanted.length === 0 || !spec.service) return {};
  let text: string;
  try {
    const res = await fetch(`http://${options.host ?? '127.0.0.1'}:${spec.service.port}/metrics`, {
      signal: AbortSignal.timeout(options.timeoutMs ?? 2000),
    });
    if (!res.ok) return {};
    text = await res.text();
  } catch {
    return {};
  }
  const values = seriesValues(
    text,
    wanted.map((w) => w.series),
  );
  const out: Partial<Record<ServiceMetric, number>> = {};
  for (const w of wanted) if (values[w.series] !== undefined) out[w.metric] = values[w.series];
  return out;
}

/**
 * Whether a replica's readiness path answers now, from its machine: `GET http://127.0.0.1:<port><path>`
 * within `timeoutMs`, answered with a status from 200 to 399 (a redirect is not followed), as a
 * kubelet's HTTP probe judges it. A refused or timed-out request is not an answer.
 */
export async function probeReadiness(
  spec: JobSpec,
  options: { readonly host?: string; readonly timeoutMs?: number } = {},
): Promise<boolean> {
  if (!spec.service) return false;
  try {
    const res = await fetch(`http://${options.host ?? '127.0.0.1'}:${spec.service.port}${spec.service.readiness.path}`, {
      signal: AbortSignal.timeout(options.timeoutMs ?? 2000),
      redirect: 'manual',
    });
    await res.body?.cancel();
    return res.status >= 200 && res.status < 400;
  } catch {
    return false;
  }
}
