/**
 * How many replicas a service wants, with the semantics users of Kubernetes' HorizontalPodAutoscaler
 * know (and SkyServe's delays as an alternative set of defaults). Pure: the caller keeps the
 * recommendations of the recent past and passes them back.
 *
 * - Per metric: desired = ceil(current × observed ÷ target), the observed value being the average per
 *   ready replica; nothing changes while observed ÷ target is within the tolerance of 1.
 * - Over several metrics, the largest desired count wins.
 * - Scale-up delay: a rise is taken only when every recommendation of the last `scaleUpDelaySec`
 *   asked for at least that many (the lowest of them is used). Scale-down stabilisation: a fall
 *   only to the highest recommendation of the last `scaleDownWindowSec`.
 * - Bounded by min and max, and by a limit from outside (the team's budget or GPU cap), which says why.
 * - Ahead of load (with `aheadSec`): a service's total load (requests per second, waiting or running
 *   requests) that has risen over the last `trendWindowSec` is extrapolated `aheadSec` ahead (a
 *   replica's cold start), and the count that load needs is asked for now, so a rise is met when it
 *   arrives rather than a cold start later. Only up: a falling trend never removes a replica.
 */

/** What a replica reports, averaged over the ready replicas. */
export type ServiceMetric = 'requests-per-second' | 'waiting-requests' | 'running-requests' | 'gpu-utilization' | 'gpu-memory';

export interface ScalingTarget {
  readonly metric: ServiceMetric;
  /** The value per replica the service is scaled to hold. */
  readonly perReplica: number;
}

export interface ScalingBehaviour {
  readonly minReplicas: number;
  readonly maxReplicas: number;
  /** Relative band around the target inside which nothing changes (HPA: 0.1). */
  readonly tolerance: number;
  readonly scaleUpDelaySec: number;
  readonly scaleDownWindowSec: number;
  /** Seconds ahead the trend of the load is extrapolated (a replica's cold start); 0 or absent: no trend. */
  readonly aheadSec?: number;
  /** Seconds of load the trend is fitted over (default 300). */
  readonly trendWindowSec?: number;
}

/** HPA's defaults: 10% tolerance, scale up at once, scale down to the highest recommendation of the last 5 minutes. */
export const HPA_BEHAVIOUR: Omit<ScalingBehaviour, 'minReplicas' | 'maxReplicas'> = {
  tolerance: 0.1,
  scaleUpDelaySec: 0,
  scaleDownWindowSec: 300,
};

/** SkyServe's defaults: a rise must hold for 5 minutes, a fall for 20. */
export const SKYSERVE_BEHAVIOUR: Omit<ScalingBehaviour, 'minReplicas' | 'maxReplicas'> = {
  tolerance: 0.1,
  scaleUpDelaySec: 300,
  scaleDownWindowSec: 1200,
};

export interface Recommendation {
  readonly atMs: number;
  readonly replicas: number;
  /** The service's total of each load metric at that decision (average per replica × replicas), for the trend. */
  readonly totals?: Partial<Record<ServiceMetric, number>>;
}

/** Metrics that are a total over the replicas (a load), whose trend says where the load goes. */
const LOAD_METRICS: readonly ServiceMetric[] = ['requests-per-second', 'waiting-requests', 'running-requests'];

export interface ScalingInput {
  readonly nowMs: number;
  /** Replicas the service has now (ready ones carry the load the metrics report). */
  readonly current: number;
  /** Observed values, each the average per ready replica; a metric not reported is left out. */
  readonly observed: Partial<Record<ServiceMetric, number>>;
  /** The recommendations of earlier decisions (the caller keeps what `scale` returns). */
  readonly history: readonly Recommendation[];
  /** The most replicas the team may have now, and why (budget, GPU cap). */
  readonly limit?: { readonly replicas: number; readonly why: string };
}

export interface ScalingDecision {
  readonly replicas: number;
  /** This decision's own recommendation, before delays and bounds (kept for the next decisions). */
  readonly recommendation: number;
  readonly history: readonly Recommendation[];
  readonly reason: string;
}

const METRIC_WORDS: Record<ServiceMetric, string> = {
  'requests-per-second': 'requests per second per replica',
  'waiting-requests': 'waiting requests per replica',
  'running-requests': 'running requests per replica',
  'gpu-utilization': '% GPU use per replica',
  'gpu-memory': '% GPU memory per replica',
};

export function scale(targets: readonly ScalingTarget[], behaviour: ScalingBehaviour, input: ScalingInput): ScalingDecision {
  const { current, nowMs } = input;
  // Each metric's own count; the largest wins. Without a metric (or a replica to read one from), stay.
  let recommendation = current;
  let why = 'no metric reported: stays';
  let best = -1;
  for (const t of targets) {
    const value = input.observed[t.metric];
    if (value === undefined || t.perReplica <= 0) continue;
    const ratio = value / t.perReplica;
    const count = current === 0 ? (value > 0 ? 1 : 0) : Math.abs(ratio - 1) <= behaviour.tolerance ? current : Math.ceil(current * ratio);
    if (count > best) {
      best = count;
      recommendation = count;
      why = `${round(value)} ${METRIC_WORDS[t.metric]} against a target of ${round(t.perReplica)}${count === current && current > 0 ? ` (within ${Math.round(behaviour.tolerance * 100)}%)` : ''}`;
    }
  }
  // The totals now (a load metric's average per replica × the replicas it was averaged over), kept for the trend.
  const totals: Partial<Record<ServiceMetric, number>> = {};
  for (const m of LOAD_METRICS) {
    const v = input.observed[m];
    if (v !== undefined) totals[m] = v * Math.max(1, current);
  }
  const trendWindowSec = behaviour.trendWindowSec ?? 300;
  // Ahead of load: where a rising total will be a cold start from now, and the replicas that needs.
  if (behaviour.aheadSec && behaviour.aheadSec > 0) {
    for (const t of targets) {
      const now = totals[t.metric];
      if (now === undefined || t.perReplica <= 0) continue;
      const points = [
        ...input.history.flatMap((h) =>
          h.atMs >= nowMs - trendWindowSec * 1000 && h.atMs < nowMs && h.totals?.[t.metric] !== undefined
            ? [{ x: (h.atMs - nowMs) / 1000, y: h.totals[t.metric]! }]
            : [],
        ),
        { x: 0, y: now },
      ];
      const slope = slopeOf(points);
      if (points.length < 3 || slope <= 0) continue;
      const ahead = now + slope * behaviour.aheadSec;
      const count = Math.ceil(ahead / t.perReplica - 1e-9);
      if (count > best && count > current * (1 + behaviour.tolerance)) {
        best = count;
        recommendation = count;
        why = `trend of ${round(slope * 60)} ${METRIC_WORDS[t.metric].replace(' per replica', '')} per minute: ${round(ahead)} in ${Math.round(behaviour.aheadSec)} s, ${round(ahead / count)} per replica against a target of ${round(t.perReplica)}`;
      }
    }
  }
  const keepMs = Math.max(behaviour.scaleUpDelaySec, behaviour.scaleDownWindowSec, behaviour.aheadSec ? trendWindowSec : 0) * 1000;
  const history = [
    ...input.history.filter((h) => h.atMs > nowMs - keepMs && h.atMs <= nowMs),
    // The totals are kept only for the trend: a service that does not scale ahead stores none in its record.
    { atMs: nowMs, replicas: recommendation, ...(behaviour.aheadSec && Object.keys(totals).length > 0 ? { totals } : {}) },
  ];
  const within = (sec: number) => history.filter((h) => h.atMs >= nowMs - sec * 1000).map((h) => h.replicas);
  let replicas = recommendation;
  let delayed = '';
  if (recommendation > current) {
    // Up only as far as every recommendation of the delay asked for.
    replicas = Math.max(current, Math.min(...within(behaviour.scaleUpDelaySec)));
    if (replicas < recommendation) delayed = `; up to ${recommendation} once it holds for ${behaviour.scaleUpDelaySec} s`;
  } else if (recommendation < current) {
    // Down only to the highest recommendation of the stabilisation window.
    replicas = Math.min(current, Math.max(...within(behaviour.scaleDownWindowSec)));
    if (replicas > recommendation) delayed = `; down to ${recommendation} once it holds for ${behaviour.scaleDownWindowSec} s`;
  }
  let bound = '';
  if (replicas > behaviour.maxReplicas) {
    replicas = behaviour.maxReplicas;
    bound = ` (at its maximum, ${behaviour.maxReplicas})`;
  }
  if (replicas < behaviour.minReplicas) {
    replicas = behaviour.minReplicas;
    bound = ` (at its minimum, ${behaviour.minReplicas})`;
  }
  if (input.limit && replicas > input.limit.replicas && replicas > current) {
    replicas = Math.max(current, input.limit.replicas);
    bound = ` (held at ${replicas}: ${input.limit.why})`;
  }
  const reason = `${current} → ${replicas}: ${why}${delayed}${bound}`;
  return { replicas, recommendation, history, reason };
}

/** The least-squares slope of y over x (0 with fewer than two distinct x). */
function slopeOf(points: readonly { x: number; y: number }[]): number {
  const n = points.length;
  const mx = points.reduce((a, p) => a + p.x, 0) / n;
  const my = points.reduce((a, p) => a + p.y, 0) / n;
  let sxx = 0;
  let sxy = 0;
  for (const p of points) {
    sxx += (p.x - mx) ** 2;
    sxy += (p.x - mx) * (p.y - my);
  }
  return sxx > 0 ? sxy / sxx : 0;
}

function round(x: number): string {
  return Number.isInteger(x) ? String(x) : x.toFixed(1);
}
