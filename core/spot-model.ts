/**
 * One model of the spot market: for any pool (a zone × an instance type, spot), the probability
 * that a machine launched now survives the next T minutes. Learned online from what the fleet
 * sees of each pool, over a prior:
 *
 * - **Up and down.** A pool is seen up when it gives a machine (a launch succeeds, a machine runs)
 *   and down when it refuses one or takes one back (a launch refused for capacity, an interruption
 *   notice). A recovery is the first "up" after a "down"; the pool's age is the time since then.
 * - **Age.** Interruptions are not memoryless: on the SkyPilot traces, a V100 pool that has just come
 *   back drops again within ten minutes 40% of the time, one up for five hours 2% (per 10 minutes).
 *   The hazard is learned per age bucket ({@link AGE_BUCKETS_SEC}), per pool, shrunk towards the same
 *   bucket over all pools, which is shrunk towards the prior rate.
 * - **Peers.** Pools that fail together are learned, not assumed: for each pair, how often one went
 *   down within {@link SpotModelOptions.peerWindowSec} after the other did. While a peer's drop is
 *   that recent and this pool still stands, its chance of dropping is raised by what the pair's
 *   history says beyond the pool's own.
 * - **Prior.** The Spot Instance Advisor's band (core/risk.ts), and a Spot Placement Score (1–10)
 *   where the account gives one: a score of 10 halves the band's rate, 1 doubles it.
 *
 * Pure and deterministic: time is passed in, state is plain data ({@link SpotModelState}) a store
 * keeps between reconciles.
 */
import { priorRatePerHour, type MachineHistory } from './risk.ts';

/** Upper edges of the age buckets, seconds since the pool's last recovery; the last bucket is open. */
export const AGE_BUCKETS_SEC: readonly number[] = [600, 1_800, 3_600, 2 * 3_600, 4 * 3_600, 8 * 3_600, 16 * 3_600];

export interface SpotModelOptions {
  /** Evidence, in pool-hours, the all-pools rate of a bucket counts for against the prior. */
  readonly globalPriorHours: number;
  /** Evidence, in pool-hours, the all-pools rate of a bucket counts for against one pool's own. */
  readonly poolPriorHours: number;
  /** How soon after a peer's drop a drop of this pool counts as "together". */
  readonly peerWindowSec: number;
  /** Drops of a peer (while this pool stood) before the pair's history is believed fully. */
  readonly peerPriorDrops: number;
  /** Prior recoveries per hour of a pool that is down (the rate at which it gives machines again). */
  readonly recoveryPriorPerHour: number;
}

/**
 * The defaults: the prior counts for a few pool-hours (a pool's own hours soon outweigh it), and
 * "together" is within 15 minutes (interruptions of one type in one zone come within 3 minutes of
 * each other in over 92% of cases, per Spot-and-Scoot; the SkyPilot traces tick every 10 minutes).
 */
export const DEFAULT_SPOT_MODEL_OPTIONS: SpotModelOptions = {
  globalPriorHours: 8,
  poolPriorHours: 12,
  peerWindowSec: 900,
  peerPriorDrops: 4,
  recoveryPriorPerHour: 2,
};

/** What is known of one pool. */
export interface PoolState {
  /** The Advisor band ("<5%" … ">20%"), for the prior. */
  band?: string;
  /** A Spot Placement Score, 1 to 10, when the account gives one. */
  placementScore?: number;
  up: boolean;
  /** False once its last machine went (not taken back): the time until it is seen again is not counted. */
  watching?: boolean;
  /** When it last recovered (or was first seen up, when no drop was ever seen). */
  upSinceMs?: number;
  /** When it was last seen, up or down. */
  lastSeenMs?: number;
  /** Per age bucket: pool-hours up, and drops. */
  exposureHours: number[];
  drops: number[];
  /** When it last went down (a drop seen while watched). */
  downSinceMs?: number;
  /** Per bucket of time since it went down: pool-hours seen down, and recoveries seen. */
  downHours?: number[];
  recoveries?: number[];
}

const zeros = () => AGE_BUCKETS_SEC.map(() => 0).concat(0);

/** Per ordered pair "a|b": drops of b while a stood, and of those, drops of a within the peer window. */
export interface PeerCounts {
  peerDrops: number;
  together: number;
}

export interface SpotModelState {
  readonly pools: Record<string, PoolState>;
  readonly peers: Record<string, PeerCounts>;
  /** Drops of a peer awaiting their outcome: pool a stood when b dropped at atMs. */
  open: { a: string; b: string; atMs: number }[];
}

export function emptySpotModel(): SpotModelState {
  return { pools: {}, peers: {}, open: [] };
}

function bucketOf(ageSec: number): number {
  const i = AGE_BUCKETS_SEC.findIndex((edge) => ageSec < edge);
  return i < 0 ? AGE_BUCKETS_SEC.length : i;
}

function poolOf(state: SpotModelState, pool: string): PoolState {
  const existing = state.pools[pool];
  if (existing) return existing;
  const fresh: PoolState = { up: false, exposureHours: zeros(), drops: zeros() };
  state.pools[pool] = fresh;
  return fresh;
}

/** Sets what the prior of a pool is read from (its Advisor band, its placement score). */
export function setPoolPrior(state: SpotModelState, pool: string, prior: { band?: string; placementScore?: number }): void {
  const p = poolOf(state, pool);
  if (prior.band !== undefined) p.band = prior.band;
  if (prior.placementScore !== undefined) p.placementScore = prior.placementScore;
}

/** Adds the time between the pool's last sighting and `atMs` to the age buckets it spans (the pool stood throughout). */
function accrue(p: PoolState, atMs: number, downBothEnds = false): void {
  if ((p.watching === false && !downBothEnds) || p.lastSeenMs === undefined || atMs <= p.lastSeenMs) return;
  const since = p.up ? p.upSinceMs : p.downSinceMs;
  if (since === undefined) return;
  const hours = p.up ? p.exposureHours : (p.downHours ??= zeros());
  let from = (p.lastSeenMs - since) / 1000;
  const to = (atMs - since) / 1000;
  while (from < to) {
    const b = bucketOf(from);
    const edge = b < AGE_BUCKETS_SEC.length ? AGE_BUCKETS_SEC[b]! : Infinity;
    const until = Math.min(edge, to);
    hours[b]! += (until - from) / 3600;
    from = until;
  }
}

/**
 * Records a sighting of a pool: up (it gave or kept a machine) or down (it refused or took one).
 * Sightings of one pool must come in time order; a repeat changes nothing.
 */
export function observe(state: SpotModelState, pool: string, up: boolean, atMs: number, options = DEFAULT_SPOT_MODEL_OPTIONS): void {
  const p = poolOf(state, pool);
  if (p.lastSeenMs !== undefined && atMs < p.lastSeenMs) return;
  // A pool seen down, unwatched, then seen down again is counted as down throughout.
  accrue(p, atMs, !up && !p.up);
  if (up && !p.up) {
    // A recovery seen while watched: counted at the middle of the time since it was last seen down.
    if (p.watching !== false && p.downSinceMs !== undefined && p.lastSeenMs !== undefined)
      (p.recoveries ??= zeros())[bucketOf(((p.lastSeenMs + atMs) / 2 - p.downSinceMs) / 1000)]!++;
    p.upSinceMs = atMs;
  }
  // A drop seen after a time unwatched is not counted: when it came, and how long the pool stood before, are unknown.
  if (!up && p.up && p.watching !== false) {
    // It went down somewhere between the last sighting and this one: counted at the middle.
    const age = p.upSinceMs !== undefined ? ((p.lastSeenMs ?? atMs) + atMs) / 2000 - p.upSinceMs / 1000 : Infinity;
    p.drops[bucketOf(age)]!++;
    // Peers: this drop settles every open question "does `pool` follow b?", and opens "does a follow `pool`?" for every pool standing.
    for (const o of state.open) if (o.a === pool && atMs - o.atMs <= options.peerWindowSec * 1000) peer(state, o.a, o.b).together++;
    state.open = state.open.filter((o) => o.a !== pool);
    for (const [other, q] of Object.entries(state.pools)) {
      if (other === pool || !q.up || q.watching === false) continue;
      peer(state, other, pool).peerDrops++;
      state.open.push({ a: other, b: pool, atMs });
    }
  }
  if (!up && (p.up || p.downSinceMs === undefined)) p.downSinceMs = atMs;
  p.up = up;
  p.watching = true;
  p.lastSeenMs = atMs;
  // Questions older than the window are settled: the pool did not follow.
  state.open = state.open.filter((o) => atMs - o.atMs <= options.peerWindowSec * 1000);
}

function peer(state: SpotModelState, a: string, b: string): PeerCounts {
  const key = `${a}|${b}`;
  return (state.peers[key] ??= { peerDrops: 0, together: 0 });
}

/** The pool's prior rate, per hour: its Advisor band, moved by its placement score (10 halves it, 1 doubles it). */
export function priorRate(p: Pick<PoolState, 'band' | 'placementScore'>): number {
  const base = priorRatePerHour(p.band);
  if (p.placementScore === undefined) return base;
  const score = Math.min(10, Math.max(1, p.placementScore));
  return base * 2 ** (1 - (2 * (score - 1)) / 9);
}

/** Drops per pool-hour in each age bucket, for one pool: its own evidence, over all pools', over the prior. */
export function hazardPerHour(state: SpotModelState, pool: string, options = DEFAULT_SPOT_MODEL_OPTIONS): number[] {
  const p = state.pools[pool] ?? poolOf(emptySpotModel(), pool);
  const prior = priorRate(p);
  const all = Object.values(state.pools);
  return zeros().map((_, b) => {
    const e = all.reduce((n, q) => n + q.exposureHours[b]!, 0);
    const k = all.reduce((n, q) => n + q.drops[b]!, 0);
    const global = (k + options.globalPriorHours * prior) / (e + options.globalPriorHours);
    return (p.drops[b]! + options.poolPriorHours * global) / (p.exposureHours[b]! + options.poolPriorHours);
  });
}

/**
 * The probability that the pool gives a machine now: 1 unless it was last seen down; then the
 * chance it has come back since, from the recoveries seen per time down (all pools', shrunk
 * towards the prior rate), given that it was still down when last seen.
 */
export function upProbability(state: SpotModelState, pool: string, nowMs: number, options = DEFAULT_SPOT_MODEL_OPTIONS): number {
  const p = state.pools[pool];
  // Never seen, or last seen up: a launch there is expected to be given (the survival answers whether it lasts).
  if (!p || p.up || p.downSinceMs === undefined || p.lastSeenMs === undefined) return 1;
  const all = Object.values(state.pools);
  const hazard = zeros().map((_, b) => {
    const e = all.reduce((n, q) => n + (q.downHours?.[b] ?? 0), 0);
    const k = all.reduce((n, q) => n + (q.recoveries?.[b] ?? 0), 0);
    const global = (k + options.globalPriorHours * options.recoveryPriorPerHour) / (e + options.globalPriorHours);
    return ((p.recoveries?.[b] ?? 0) + options.poolPriorHours * global) / ((p.downHours?.[b] ?? 0) + options.poolPriorHours);
  });
  const seenDownFor = Math.max(0, (p.lastSeenMs - p.downSinceMs) / 1000);
  return 1 - survivalOver(hazard, seenDownFor, Math.max(0, (nowMs - p.lastSeenMs) / 1000));
}

/** Probability of surviving from age `ageSec` to `ageSec + horizonSec` under a hazard piecewise constant by bucket. */
function survivalOver(hazard: readonly number[], ageSec: number, horizonSec: number): number {
  let integral = 0;
  let from = ageSec;
  const to = ageSec + horizonSec;
  while (from < to) {
    const b = bucketOf(from);
    const edge = b < AGE_BUCKETS_SEC.length ? AGE_BUCKETS_SEC[b]! : Infinity;
    const until = Math.min(edge, to);
    integral += (hazard[b]! * (until - from)) / 3600;
    from = until;
  }
  return Math.exp(-integral);
}

/** The pool's age for a launch now: its time since recovery when up; when last seen down, half the time since (read as back since then). */
function ageOf(p: PoolState | undefined, nowMs: number): number {
  return p?.up && p.upSinceMs !== undefined
    ? Math.max(0, (nowMs - p.upSinceMs) / 1000)
    : p?.lastSeenMs !== undefined
      ? Math.max(0, (nowMs - p.lastSeenMs) / 2000)
      : 0;
}

export interface SurvivalAnswer {
  /** Probability that a machine launched in the pool now is still running `horizonSec` from now. */
  readonly survival: number;
  /** The pool's age (time since its last recovery), seconds; undefined when it was never seen up. */
  readonly ageSec?: number;
  /** Without the peers' recent drops. */
  readonly ownSurvival: number;
  /** The peer whose recent drop weighs most, when one does. */
  readonly peer?: { readonly pool: string; readonly droppedAtMs: number; readonly togetherShare: number };
  /** In words, for the decision record. */
  readonly why: string;
}

/**
 * The probability that a machine launched in `pool` at `nowMs` survives `horizonSec`. A pool seen
 * down (or never seen) is answered as if it had just recovered: a launch that succeeds there is the
 * recovery.
 */
export function survival(
  state: SpotModelState,
  pool: string,
  nowMs: number,
  horizonSec: number,
  options = DEFAULT_SPOT_MODEL_OPTIONS,
): SurvivalAnswer {
  const p = state.pools[pool];
  // A pool last seen down: a launch that succeeds finds it back since some time in between, taken as the middle.
  const ageSec = ageOf(p, nowMs);
  const hazard = hazardPerHour(state, pool, options);
  const own = survivalOver(hazard, ageSec, horizonSec);
  // Peers that dropped within the window while this pool stood, and have not been followed yet.
  let best: SurvivalAnswer['peer'];
  let extra = 0;
  const ownShare = 1 - survivalOver(hazard, ageSec, options.peerWindowSec);
  for (const o of state.open) {
    if (o.a !== pool || nowMs - o.atMs > options.peerWindowSec * 1000) continue;
    const c = state.peers[`${o.a}|${o.b}`] ?? { peerDrops: 0, together: 0 };
    const share = (c.together + options.peerPriorDrops * ownShare) / (c.peerDrops + options.peerPriorDrops);
    const lift = Math.max(0, (share - ownShare) / (1 - ownShare));
    if (lift > extra) {
      extra = lift;
      best = { pool: o.b, droppedAtMs: o.atMs, togetherShare: share };
    }
  }
  const s = own * (1 - extra);
  const ageText =
    p?.up && p.upSinceMs !== undefined
      ? `up ${Math.round(ageSec / 60)} min since its last recovery`
      : p?.lastSeenMs !== undefined
        ? `seen down ${Math.round((nowMs - p.lastSeenMs) / 60_000)} min ago: read as back for half that`
        : 'not seen up: read as just recovered';
  const why = `P(survives ${Math.round(horizonSec / 60)} min) ${s.toFixed(3)}: ${ageText}${best ? `; ${best.pool} dropped ${Math.round((nowMs - best.droppedAtMs) / 60_000)} min ago and this pool followed it ${(best.togetherShare * 100).toFixed(0)}% of the time` : ''}`;
  return { survival: s, ...(p?.up ? { ageSec } : {}), ownSurvival: own, ...(best ? { peer: best } : {}), why };
}

/**
 * Stops watching a pool at `atMs` (its last machine went, not taken back): the time until it is
 * seen again is not counted as up, and nothing is known of drops meanwhile.
 */
export function unseen(state: SpotModelState, pool: string, atMs: number): void {
  const p = state.pools[pool];
  if (!p || (p.lastSeenMs !== undefined && atMs < p.lastSeenMs)) return;
  // A pool last seen down stays last seen then: whether it has come back since is what upProbability answers.
  if (!p.up) {
    p.watching = false;
    return;
  }
  accrue(p, atMs);
  p.watching = false;
  p.lastSeenMs = atMs;
}

/**
 * The model as the fleet's own history says: each machine a sighting of its pool up from its
 * first note to its last, a taken-back machine and a refused launch a sighting of it down, and a
 * pool left unwatched when its last machine went without being taken back (and that was more than
 * `staleMs` ago, so it is not a machine still running). Pools' priors come from `priors`.
 */
export function spotModelFromHistory(
  machines: readonly MachineHistory[],
  refusals: readonly { readonly offeringId: string; readonly atMs: number }[],
  priors: ReadonlyMap<string, { band?: string; placementScore?: number }>,
  nowMs: number,
  staleMs: number,
  options = DEFAULT_SPOT_MODEL_OPTIONS,
): SpotModelState {
  const state = emptySpotModel();
  for (const [pool, prior] of priors) setPoolPrior(state, pool, prior);
  type Sighting = { pool: string; atMs: number; kind: 0 | 1 | 2 };
  const UP = 0;
  const DOWN = 1;
  const UNSEEN = 2;
  const sightings: Sighting[] = [];
  const spans = new Map<string, { from: number; to: number; interrupted: boolean }[]>();
  for (const m of machines) {
    // A machine taken back before it was ever noted alive still says the pool went down then.
    if (m.firstMs === undefined) {
      if (m.interruptedAtMs !== undefined) sightings.push({ pool: m.offeringId, atMs: m.interruptedAtMs, kind: DOWN });
      continue;
    }
    const last = Math.max(m.lastMs ?? m.firstMs, m.interruptedAtMs ?? 0);
    sightings.push({ pool: m.offeringId, atMs: m.firstMs, kind: UP });
    if (m.lastMs !== undefined) sightings.push({ pool: m.offeringId, atMs: m.lastMs, kind: UP });
    if (m.interruptedAtMs !== undefined) sightings.push({ pool: m.offeringId, atMs: m.interruptedAtMs, kind: DOWN });
    const list = spans.get(m.offeringId) ?? [];
    list.push({ from: m.firstMs, to: last, interrupted: m.interruptedAtMs !== undefined });
    spans.set(m.offeringId, list);
  }
  for (const r of refusals) sightings.push({ pool: r.offeringId, atMs: r.atMs, kind: DOWN });
  // Where no machine of a pool covered the time, and the last one was not taken back: unwatched.
  for (const [pool, list] of spans) {
    list.sort((a, b) => a.from - b.from);
    let end: { to: number; interrupted: boolean } | undefined;
    for (const s of list) {
      if (end && s.from > end.to && !end.interrupted) sightings.push({ pool, atMs: end.to, kind: UNSEEN });
      if (!end || s.to > end.to) end = { to: s.to, interrupted: s.interrupted };
      else if (s.to === end.to) end = { to: end.to, interrupted: end.interrupted || s.interrupted };
    }
    if (end && !end.interrupted && nowMs - end.to > staleMs) sightings.push({ pool, atMs: end.to, kind: UNSEEN });
  }
  sightings.sort((a, b) => a.atMs - b.atMs || a.kind - b.kind);
  for (const s of sightings) {
    if (s.kind === UNSEEN) unseen(state, s.pool, s.atMs);
    else observe(state, s.pool, s.kind === UP, s.atMs, options);
  }
  return state;
}
