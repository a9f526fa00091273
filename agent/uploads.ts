import { setTimeout as sleep } from 'node:timers/promises';
import { messageOf } from '../core/errors.ts';
import type { Clock } from '../core/ports.ts';
import { uploadRetryDelayMs } from '../core/services/node-rules.ts';
import type { CheckpointBlobs } from './checkpoint-files.ts';

export type UploadResult =
  | { readonly ok: true; readonly tries: number; readonly fileBytes: readonly number[] }
  | { readonly ok: false; readonly tries: number; readonly error: string };

/**
 * Checkpoint uploads, in their own worker: at most `concurrency` at a time, each retried with
 * backoff (uploadRetryDelayMs) until its deadline. Nothing else of the agent waits on them: the
 * heartbeat has its own timer, and the work list is read while an upload runs.
 */
export class UploadWorker {
  private running = 0;
  private readonly waiting: (() => void)[] = [];
  private readonly inFlight = new Set<Promise<UploadResult>>();

  constructor(
    private readonly blobs: CheckpointBlobs,
    private readonly clock: Clock,
    private readonly concurrency = 2,
  ) {}

  /**
   * Copies `localDir` to `location`, retrying until `deadlineMs`; every file read must lie within
   * `within` (the job's checkpoint folder). Never rejects: a failure is a result.
   */
  upload(localDir: string, location: string, deadlineMs: number, within = localDir): Promise<UploadResult> {
    const task = this.run(localDir, location, deadlineMs, within);
    this.inFlight.add(task);
    void task.finally(() => this.inFlight.delete(task));
    return task;
  }

  /** How long the newest finished upload took, seconds (its tries included). */
  lastUploadSec: number | undefined;

  /** Uploads under way or waiting for a slot. */
  get uploading(): number {
    return this.inFlight.size;
  }

  /** Resolves when every upload started so far has ended. */
  async idle(): Promise<void> {
    await Promise.all([...this.inFlight]);
  }

  private async run(localDir: string, location: string, deadlineMs: number, within: string): Promise<UploadResult> {
    await this.slot();
    const startedMs = this.clock.nowMs();
    let tries = 0;
    let last: string;
    try {
      for (;;) {
        tries++;
        try {
          const fileBytes = await this.blobs.upload(localDir, location, within);
          return { ok: true, tries, fileBytes };
        } catch (error) {
          last = messageOf(error);
        }
        const wait = uploadRetryDelayMs(tries);
        if (this.clock.nowMs() + wait >= deadlineMs) return { ok: false, tries, error: last };
        await sleep(wait, undefined, { ref: false });
      }
    } finally {
      this.lastUploadSec = (this.clock.nowMs() - startedMs) / 1000;
      this.running--;
      this.waiting.shift()?.();
    }
  }

  private async slot(): Promise<void> {
    if (this.running < this.concurrency) {
      this.running++;
      return;
    }
    await new Promise<void>((resolve) => this.waiting.push(resolve));
    this.running++;
  }
}
