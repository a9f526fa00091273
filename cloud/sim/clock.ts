import type { Clock } from '../../core/ports.ts';
import { GpuFleetError } from '../../core/errors.ts';

/** A clock that only moves when told to: the simulated cloud's time. */
export class VirtualClock implements Clock {
  constructor(private currentMs: number) {}
  nowMs(): number {
    return this.currentMs;
  }
  /** Moves time forward; never backwards. */
  advanceTo(ms: number): void {
    if (ms < this.currentMs) throw new GpuFleetError(`virtual time cannot go back from ${this.currentMs} to ${ms}`);
    this.currentMs = ms;
  }
  advanceBy(ms: number): void {
    this.advanceTo(this.currentMs + ms);
  }
}

/** Deterministic pseudo-random numbers (mulberry32) for the simulator; same seed, same run. */
export class SeededRandom {
  private state: number;
  constructor(seed: number) {
    this.state = (seed >>> 0) ^ 0x9e3779b9;
  }
  /** A float in [0, 1). */
  next(): number {
    this.state = (this.state + 0x6d2b79f5) >>> 0;
    let t = this.state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }
  /** An integer in [min, max]. */
  int(min: number, max: number): number {
    return min + Math.floor(this.next() * (max - min + 1));
  }
  /** Shuffles in place (Fisher–Yates). */
  shuffle<T>(list: T[]): T[] {
    for (let i = list.length - 1; i > 0; i--) {
      const j = this.int(0, i);
      [list[i], list[j]] = [list[j]!, list[i]!];
    }
    return list;
  }
}
