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
}

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
  const keepMs = Math.max(behaviour.scaleUpDelaySec, behaviour.scaleDownWindowSec) * 1000;
  const history = [...input.history.filter((h) => h.atMs > nowMs - keepMs && h.atMs <= nowMs), { atMs: nowMs, replicas: recommendation }];
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

function round(x: number): string {
  return Number.isInteger(x) ? String(x) : x.toFixed(1);
}
