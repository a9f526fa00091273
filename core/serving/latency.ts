/**
 * The share of a service's requests served within its objective, from the replicas ready and the
 * load, with an M/M/c queue (Erlang C): requests arrive as a Poisson process at `arrivalPerSec`;
 * each ready replica holds `concurrency` requests at once (an LLM engine's batch slots), one slot
 * serving a request in an exponential time of mean `concurrency ÷ replicaRps`, so a full replica
 * serves `replicaRps`; a request that finds every slot busy waits in one queue for the first that
 * frees. It is within the objective when it waits at most `waitSec`.
 *
 * What it leaves out, and which way each errs:
 * - the queue is in steady state within a tick: the backlog a short tick leaves to the next is not
 *   carried (optimistic just after a shortfall);
 * - a tick whose ready replicas cannot keep up (load ≥ what they serve), or that has none, counts
 *   every request as missed, although the first of them would be served (pessimistic);
 * - one queue for all replicas: a load balancer routing to the least busy target comes close,
 *   round robin waits more (optimistic);
 * - exponential service times; real requests vary more (long prompts, long answers), and a
 *   continuous-batching engine slows every request as its batch fills, so a replica's throughput
 *   is not split evenly over its slots (both optimistic);
 * - arrivals within a tick are Poisson at the tick's mean rate: bursts within the minute are not
 *   seen (optimistic).
 */

export interface ServiceObjective {
  /** Seconds a request may wait for a free slot of a ready replica. */
  readonly waitSec: number;
  /** Requests per second one replica serves at full load. */
  readonly replicaRps: number;
  /** Requests one replica serves at once. */
  readonly concurrency: number;
}

/**
 * Erlang C: the probability that an arriving request waits, with `c` servers and offered load
 * `a` = λ/μ < c. Computed through Erlang B's recursion, which stays finite for thousands of
 * servers (the sum of a^k/k! overflows near a = 700).
 */
export function erlangC(c: number, a: number): number {
  if (c <= 0 || a >= c) return 1;
  if (a <= 0) return 0;
  let b = 1;
  for (let k = 1; k <= c; k++) b = (a * b) / (k + a * b);
  return (c * b) / (c - a * (1 - b));
}

/**
 * P(a request waits at most `objective.waitSec`) with `ready` replicas ready and `arrivalPerSec`
 * requests arriving: 1 − C·e^(−(cμ − λ)t) while the replicas keep up, else 0 (see above). With no
 * load there is nothing to miss: 1.
 */
export function shareWithinObjective(ready: number, arrivalPerSec: number, objective: ServiceObjective): number {
  if (!(arrivalPerSec > 0)) return 1;
  const c = Math.max(0, Math.floor(ready)) * objective.concurrency;
  const mu = objective.replicaRps / objective.concurrency;
  const capacity = c * mu;
  if (c === 0 || capacity <= arrivalPerSec) return 0;
  const pWait = erlangC(c, arrivalPerSec / mu);
  return 1 - pWait * Math.exp(-(capacity - arrivalPerSec) * objective.waitSec);
}
