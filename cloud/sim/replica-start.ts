/**
 * How long a simulated service replica takes from its process starting to its readiness path
 * answering (the machine's boot comes before, in sim-cloud.ts): its image pulled (skipped when the
 * machine already holds it), its weights fetched, its engine warmed up. A world fact, per service;
 * the control plane only sees the replica answer or not.
 */

/** What one replica of a service loads when it starts. */
export interface ReplicaStartup {
  /** The image's compressed size, GiB: what a pull downloads and unpacks. */
  readonly imageGiB: number;
  /** The model's weights, GiB, fetched from the model store at every start. */
  readonly weightsGiB: number;
  /** Seconds from weights loaded to the first answer (an engine's profiling, compilation, CUDA graph capture). */
  readonly warmupSec: number;
  /** Where the figures come from. */
  readonly source: string;
}

/** How fast a machine pulls and fetches. */
export interface StartBandwidth {
  /**
   * Compressed image MiB per second a pull gets through. Assumption: 100. A pull is bound by
   * unpacking gzip layers one at a time on the machine's CPU, not by its network (a p3's 10 Gbps
   * would give 1,190); 100 MiB/s is a typical rate for large CUDA images.
   */
  readonly pullMiBPerSec: number;
  /**
   * Weights MiB per second from the model store (S3, over the machine's network). Assumption: 400,
   * what parallel ranged GETs get on an instance of up to 10 Gbps; a single stream gets about 90.
   */
  readonly weightsMiBPerSec: number;
}

export const DEFAULT_START_BANDWIDTH: StartBandwidth = { pullMiBPerSec: 100, weightsMiBPerSec: 400 };

export interface ReplicaStartTime {
  readonly pullSec: number;
  readonly weightsSec: number;
  readonly warmupSec: number;
  readonly totalSec: number;
}

/** The replica's start, part by part: no pull when the machine holds the image already. */
export function replicaStartTime(
  startup: ReplicaStartup,
  imageCached: boolean,
  bandwidth: StartBandwidth = DEFAULT_START_BANDWIDTH,
): ReplicaStartTime {
  const pullSec = imageCached ? 0 : (startup.imageGiB * 1024) / bandwidth.pullMiBPerSec;
  const weightsSec = (startup.weightsGiB * 1024) / bandwidth.weightsMiBPerSec;
  return { pullSec, weightsSec, warmupSec: startup.warmupSec, totalSec: pullSec + weightsSec + startup.warmupSec };
}
