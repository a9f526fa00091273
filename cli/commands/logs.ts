import { UsageError } from '../../core/errors.ts';
import type { FleetFlags } from '../fleet.ts';
import { withFleet, type Io } from './shared.ts';

export interface LogsFlags extends FleetFlags {
  /** Checked by the command's option parser (cloud/flags.ts wholeNumber). */
  readonly attempt?: number;
  readonly follow?: boolean;
  readonly since?: string;
  readonly json?: boolean;
  /** Seconds between looks with --follow (default 2). */
  readonly pollSec?: number;
}

/** `10m`, `2h`, `30s`, `1d` ago, or a date and time (`2026-11-30T12:00:00Z`): a time in ms. */
export function parseSince(since: string, nowMs: number): number {
  const m = /^(\d+)([smhd])$/.exec(since.trim());
  if (m) return nowMs - Number(m[1]) * { s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 }[m[2] as 's' | 'm' | 'h' | 'd'];
  const at = Date.parse(since);
  if (Number.isFinite(at) && /^\d{4}-\d{2}-\d{2}/.test(since)) return at;
  throw new UsageError(`--since "${since}" is not a time: give a duration ago (30s, 10m, 2h, 1d) or a date (2026-11-30T12:00:00Z)`);
}

/**
 * What a job's attempts wrote, attempt by attempt (each rank's lines in the order written): from
 * CloudWatch Logs for a deployed fleet, from the simulated processes with `--sim`. `--follow`
 * keeps printing new lines until the job has ended.
 */
export async function logsCommand(jobId: string, flags: LogsFlags, io: Io): Promise<void> {
  const attempt = flags.attempt;
  await withFleet(flags, io, async (fleet) => {
    if (!fleet.jobLogs)
      throw new UsageError(
        `${fleet.source} keeps no job output: deploy the stack (it creates the log group and sets GPU_FLEET_JOB_LOG_GROUP), or read the output file on the machine`,
      );
    const job = await fleet.jobs.get(jobId);
    if (!job) throw new UsageError(`no job ${jobId}; see gpu-fleet status for the jobs there are`);
    const sinceMs = flags.since !== undefined ? parseSince(flags.since, fleet.clock.nowMs()) : undefined;
    const seen = new Set<string>();
    let last: string | undefined;
    const show = async (): Promise<number> => {
      const lines = await fleet.jobLogs!.read(jobId, {
        ...(attempt !== undefined ? { attempt } : {}),
        ...(sinceMs !== undefined ? { sinceMs } : {}),
      });
      let shown = 0;
      for (const l of lines) {
        const key = `${l.attempt}/${l.rank}/${l.seq}`;
        if (seen.has(key)) continue;
        seen.add(key);
        shown++;
        if (flags.json) {
          io.stdout.write(
            `${JSON.stringify({ job: jobId, attempt: l.attempt, rank: l.rank, seq: l.seq, at: new Date(l.atMs).toISOString(), line: l.line })}\n`,
          );
          continue;
        }
        const head = `attempt ${l.attempt}${l.rank > 0 || job.spec.nodes > 1 ? `, rank ${l.rank}` : ''}`;
        if (head !== last) io.stdout.write(`── ${head} ──\n`);
        last = head;
        io.stdout.write(`${new Date(l.atMs).toISOString()}  ${l.line}\n`);
      }
      return shown;
    };
    const first = await show();
    if (first === 0 && !flags.follow && !flags.json)
      io.stdout.write(
        `(no output from ${jobId}${attempt !== undefined ? ` attempt ${attempt}` : ''}${flags.since ? ` since ${flags.since}` : ''} yet; it is ${job.state})\n`,
      );
    if (!flags.follow) return;
    if (flags.sim) {
      if (!flags.json) io.stdout.write('(a saved simulation does not move: --follow has shown what is there)\n');
      return;
    }
    // Until the job has ended, and once more after (the last lines land after its end is recorded).
    for (;;) {
      const now = await fleet.jobs.get(jobId);
      const ended = !now || ['succeeded', 'failed', 'cancelled', 'rejected'].includes(now.state);
      await sleepMs((flags.pollSec ?? 2) * 1000);
      await show();
      if (ended) return;
    }
  });
}

function sleepMs(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}
