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

/** What a machine being prepared in its group's warm pool does, through its agent API and container engine. */
export interface WarmPreparation {
  /** The images to pull: the agent API's `node/warm-images` for this machine. */
  images(): Promise<readonly string[]>;
  /** Pulls one image (the runner's `prefetch`): present already or pulled. */
  pull(image: string): Promise<'present' | 'pulled'>;
  /** Lets the machine's launch hook go (`node/launch-ready`): the group then stops it into the pool. */
  ready(): Promise<void>;
  readonly log: { info(m: string, extra?: Record<string, unknown>): void; warn(m: string, extra?: Record<string, unknown>): void };
  readonly sleep?: (ms: number) => Promise<void>;
  /** Tries of each control-plane call, 10 s apart (default 6: a minute). */
  readonly tries?: number;
}

/**
 * Prepares a machine launched into its group's warm pool: pulls the images of the services that
 * may place a replica on it, so that, started into service, a replica there starts without its
 * pull (the images stay on the machine's volume while it is stopped), then lets its launch hook go.
 * An image that cannot be pulled is said and left (the machine pulls it ahead again once in
 * service); the hook is let go whatever happened, or the group would hold the machine until the
 * hook's timeout. Returns what it pulled, found, and could not have.
 */
export async function prepareForWarmPool(p: WarmPreparation): Promise<{ pulled: string[]; present: string[]; failed: string[] }> {
  const sleep = p.sleep ?? ((ms: number) => new Promise<void>((r) => setTimeout(r, ms)));
  const tries = Math.max(1, p.tries ?? 6);
  const retried = async <T>(what: string, call: () => Promise<T>): Promise<T | undefined> => {
    for (let i = 1; ; i++) {
      try {
        return await call();
      } catch (error) {
        if (i >= tries) {
          p.log.warn(`warm pool: ${what} failed ${tries} times; going on without it`, { error: messageOf(error) });
          return undefined;
        }
        await sleep(10_000);
      }
    }
  };
  const out = { pulled: [] as string[], present: [] as string[], failed: [] as string[] };
  const images = (await retried('asking which images to pull', () => p.images())) ?? [];
  for (const image of images) {
    try {
      out[(await p.pull(image)) === 'pulled' ? 'pulled' : 'present'].push(image);
    } catch (error) {
      out.failed.push(image);
      p.log.warn('warm pool: an image could not be pulled; it is pulled ahead again once the machine is in service', {
        image,
        error: messageOf(error),
      });
    }
  }
  p.log.info('warm pool: machine prepared; letting its launch hook go', out);
  await retried('letting the launch hook go', () => p.ready());
  return out;
}
