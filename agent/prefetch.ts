/**
 * Pulls ahead the container images the machine's record lists (reconcile writes them: the images
 * of services that may place a replica here, core/serving/prefetch.ts), so a replica placed here
 * starts without its pull. One pull at a time, in the background: the work list is never held
 * up by it. An image that cannot be had is tried again after a back-off that doubles to an hour,
 * and said in the agent's log each time.
 */
import { messageOf } from '../core/errors.ts';
import type { Clock } from '../core/ports.ts';
import type { JobRunner } from './runner.ts';

/** Seconds before the n-th retry of an image that could not be pulled: 1 min, doubling, at most an hour. */
export function prefetchRetrySec(failures: number): number {
  return Math.min(3600, 60 * 2 ** Math.max(0, failures - 1));
}

export class ImagePrefetcher {
  private inFlight?: Promise<void>;
  private readonly held = new Set<string>();
  private readonly failures = new Map<string, { count: number; retryAtMs: number }>();

  constructor(
    private readonly runner: Pick<JobRunner, 'prefetch'>,
    private readonly clock: Clock,
    private readonly log: {
      info(m: string, extra?: Record<string, unknown>): void;
      warn(m: string, extra?: Record<string, unknown>): void;
    },
  ) {}

  /** Images this agent has found or put on the machine. */
  get images(): readonly string[] {
    return [...this.held].sort();
  }

  /** The record's list, at each look at the work list: starts the next image it lacks, unless a pull is under way. */
  want(images: readonly string[]): void {
    const prefetch = this.runner.prefetch?.bind(this.runner);
    if (!prefetch || this.inFlight) return;
    const now = this.clock.nowMs();
    const next = images.find((i) => !this.held.has(i) && (this.failures.get(i)?.retryAtMs ?? 0) <= now);
    if (next === undefined) return;
    const startedMs = now;
    this.inFlight = prefetch(next)
      .then(
        (how) => {
          this.held.add(next);
          this.failures.delete(next);
          if (how === 'pulled')
            this.log.info('pulled an image ahead', { image: next, seconds: Math.round((this.clock.nowMs() - startedMs) / 1000) });
        },
        (error: unknown) => {
          const count = (this.failures.get(next)?.count ?? 0) + 1;
          const retrySec = prefetchRetrySec(count);
          this.failures.set(next, { count, retryAtMs: this.clock.nowMs() + retrySec * 1000 });
          this.log.warn('could not pull an image ahead; a replica placed here will pull it itself', {
            image: next,
            error: messageOf(error),
            failures: count,
            retryInSec: retrySec,
          });
        },
      )
      .finally(() => {
        this.inFlight = undefined;
      });
  }

  /** Resolves once no pull is under way (for stopping, and for tests). */
  async settled(): Promise<void> {
    while (this.inFlight) await this.inFlight;
  }
}
