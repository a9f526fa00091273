import { readFileSync, writeFileSync } from 'node:fs';
import * as z from 'zod/mini';
import { DEFAULT_AGENT_LEASE, DEFAULT_STOP_GRACE_SEC, watchdogStops, type AgentLease } from '../core/services/node-rules.ts';
import { messageOf } from '../core/errors.ts';

/** What the agent writes at each renewal of its lease: when, and the lease's terms (the watchdog judges by the agent's own). */
export interface LeaseMark {
  readonly renewedAtMs: number;
  readonly leaseSec: number;
  readonly fenceGraceSec: number;
}

export function leaseMark(renewedAtMs: number, lease: AgentLease): LeaseMark {
  return { renewedAtMs, leaseSec: lease.leaseSec, fenceGraceSec: lease.fenceGraceSec };
}

const LeaseMarkSchema = z.object({
  renewedAtMs: z.int().check(z.nonnegative()),
  leaseSec: z.int().check(z.positive()),
  fenceGraceSec: z.int().check(z.nonnegative()),
});

/** The lease file as written, or undefined (with why) when there is none or it cannot be read as one. */
export function readLeaseMark(file: string): { mark?: LeaseMark; problem?: string } {
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(file, 'utf8'));
  } catch (error) {
    return { problem: `no lease file readable at ${file}: ${messageOf(error)}` };
  }
  const parsed = LeaseMarkSchema.safeParse(raw);
  if (!parsed.success) return { problem: `the lease file ${file} is not {renewedAtMs, leaseSec, fenceGraceSec} as whole numbers` };
  return { mark: parsed.data };
}

export interface WatchdogLook {
  readonly verdict: 'keep' | 'stop';
  /** Why, in words, for the journal. */
  readonly why: string;
  /** The containers it stopped. */
  readonly stopped: readonly string[];
}

/**
 * One look of the machine's watchdog (a root timer, every 15 s: infra/node-setup.ts): reads the
 * agent's lease file and, once it is past the lease and the fence (core node-rules
 * `watchdogStops`), stops every running job container, whatever became of the agent: dead, hung,
 * or unable to write. A lease renewed in time keeps everything as it is.
 */
export async function watchdogLook(o: {
  readonly leaseFile: string;
  readonly nowMs: number;
  readonly stopGraceSec?: number;
  /** Stops every running job container (by gpu-fleet's label, never another), within the grace; returns their names. */
  readonly stopJobContainers: (graceSec: number) => Promise<string[]>;
}): Promise<WatchdogLook> {
  const { mark, problem } = readLeaseMark(o.leaseFile);
  const lease: AgentLease = mark ?? DEFAULT_AGENT_LEASE;
  if (!watchdogStops(mark?.renewedAtMs, o.nowMs, lease))
    return {
      verdict: 'keep',
      why: `the agent renewed its lease ${Math.round((o.nowMs - mark!.renewedAtMs) / 1000)} s ago (lease ${lease.leaseSec} s, fence ${lease.fenceGraceSec} s)`,
      stopped: [],
    };
  const why =
    problem ??
    `the agent last renewed its lease ${Math.round((o.nowMs - mark!.renewedAtMs) / 1000)} s ago, past its lease (${lease.leaseSec} s) and fence (${lease.fenceGraceSec} s)`;
  const stopped = await o.stopJobContainers(o.stopGraceSec ?? DEFAULT_STOP_GRACE_SEC);
  // Named for the agent that starts after: a container the watchdog stopped is not one whose job ended (agent adoption).
  if (stopped.length > 0)
    writeFileSync(stoppedFileOf(o.leaseFile), JSON.stringify([...new Set([...stoppedByWatchdog(o.leaseFile), ...stopped])]));
  return { verdict: 'stop', why, stopped };
}

/** Where the watchdog names the containers it stopped: beside the lease file. */
export function stoppedFileOf(leaseFile: string): string {
  return `${leaseFile}.stopped`;
}

/** The containers the watchdog stopped since the agent last started (none when it stopped none, or the file is unreadable). */
export function stoppedByWatchdog(leaseFile: string): string[] {
  try {
    const names: unknown = JSON.parse(readFileSync(stoppedFileOf(leaseFile), 'utf8'));
    return Array.isArray(names) ? names.filter((n): n is string => typeof n === 'string') : [];
  } catch {
    return [];
  }
}
