// bench:agent — a job that prints a gigabyte as fast as it can, through the agent's own output path:
// the plain-process runner's pipes → JobOutput (lines, output.log rotated) → the LogShipper (flushed
// every 2 s, as the agent flushes it) → the CloudWatch Logs adapter (AWS SDK v3) → a CloudWatch
// Logs double in another process, that takes every call ("open") or refuses PutLogEvents past a
// call rate with ThrottlingException ("throttled"). Each store runs in its own process, so each RSS
// is its own. Prints, per store: what the job printed, the lines the agent read, shipped, dropped
// (and the marker lines that say so), the throttled calls, and the agent process's RSS before the
// job and at its peak (the issue's target: growth ≤ 64 MiB). On a fleet machine the shipper's sink
// is the agent API, which calls the same adapter; here the adapter is called directly.
//
//   npm run bench:agent -- [--mib 1024] [--put-per-sec 5] [--store open|throttled|both] [--json]
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { CloudWatchLogsClient } from '@aws-sdk/client-cloudwatch-logs';
import { Command } from 'commander';
import { LogShipper } from '../agent/log-shipper.ts';
import { ProcessRunner } from '../agent/runner.ts';
import { CloudWatchJobLogs } from '../cloud/aws/cloudwatch-logs.ts';
import { oneOf, wholeNumber } from '../cloud/flags.ts';
import { listenInChild, rowsFromChild } from './support/child-server.ts';

export type AgentStore = 'open' | 'throttled';

export interface AgentRow {
  readonly store: AgentStore;
  /** PutLogEvents calls a second the throttled store takes (null: every call). */
  readonly putPerSec: number | null;
  readonly jobMiB: number;
  readonly seconds: number;
  readonly linesRead: number;
  readonly shipped: number;
  readonly dropped: number;
  readonly markers: number;
  readonly stillWaiting: boolean;
  readonly storeEvents: number;
  readonly throttledCalls: number;
  readonly rssBeforeMiB: number;
  readonly rssPeakMiB: number;
  readonly rssGrowthMiB: number;
  readonly heapPeakMiB: number;
}

/** Lines of about 100 bytes, numbered, written in 1 MiB pieces as fast as the pipe takes them, to `BENCH_BYTES` in all. */
const WRITER = `
const total = Number(process.env.BENCH_BYTES);
const pad = 'x'.repeat(80);
let written = 0, n = 0;
function piece() { let s = ''; while (s.length < 1048576) s += 'line ' + (n++) + ' ' + pad + '\\n'; return s; }
function go() {
  while (written < total) {
    const s = piece();
    written += s.length;
    if (!process.stdout.write(s)) return void process.stdout.once('drain', go);
  }
}
go();
`;

const MiB = 2 ** 20;

export async function benchAgent(store: AgentStore, options: { mib: number; putPerSec: number }): Promise<AgentRow> {
  const throttle =
    store === 'throttled' ? `{ throttle: { callsPerSec: ${options.putPerSec} }, keepEvents: false }` : '{ keepEvents: false }';
  const double = await listenInChild(
    `import('tsx/esm/api').then(({ register }) => { register(); return import('./bench/support/fake-logs.ts'); })` +
      `.then(async (m) => { const f = await new m.FakeCloudWatchLogs(['/gpu-fleet/jobs'], ${throttle}).start(); console.log(f.port); });`,
  );
  const endpoint = `http://127.0.0.1:${double.port}`;
  const dir = mkdtempSync(join(tmpdir(), 'bench-agent-'));
  try {
    const client = new CloudWatchLogsClient({
      endpoint,
      region: 'us-west-2',
      credentials: { accessKeyId: 'bench', secretAccessKey: 'bench' },
    });
    const sink = new CloudWatchJobLogs(client, '/gpu-fleet/jobs');
    // The SDK's first call loads what it needs: that is the agent's at any start, not the job's output.
    await sink.append({
      jobId: 'bench.warm',
      attempt: 1,
      rank: 0,
      team: 'bench',
      labels: {},
      lines: [{ atMs: Date.now(), seq: 0, line: 'warm' }],
    });
    const shipper = new LogShipper(sink, { nowMs: () => Date.now() });
    const key = 'bench.flood/1';
    shipper.track(key, { jobId: 'bench.flood', attempt: 1, rank: 0, team: 'bench', labels: {} });
    let linesRead = 0;
    let heapPeak = 0;
    global.gc?.();
    const rssBefore = process.memoryUsage.rss();
    let rssPeak = rssBefore;
    const sampler = setInterval(() => {
      rssPeak = Math.max(rssPeak, process.memoryUsage.rss());
      heapPeak = Math.max(heapPeak, process.memoryUsage().heapUsed);
    }, 20);
    let flushing = true;
    const flusher = (async () => {
      while (flushing) {
        await new Promise((r) => setTimeout(r, 2000));
        await shipper.flushAll();
      }
    })();
    const started = performance.now();
    const proc = await new ProcessRunner().start({
      jobId: 'bench.flood',
      attempt: 1,
      rank: 0,
      image: 'none',
      command: [process.execPath, '-e', WRITER],
      env: { BENCH_BYTES: String(options.mib * MiB) },
      devices: [],
      checkpointDir: dir,
      logFile: join(dir, 'output.log'),
      onLine: (line) => {
        linesRead++;
        shipper.line(key, line);
      },
      container: { network: 'bridge', shmSizeMiB: 64, lockedMemoryMiB: 64 },
    });
    const exit = await proc.exited;
    const seconds = (performance.now() - started) / 1000;
    if (exit.exitCode !== 0) throw new Error(`the writing job exited ${String(exit.exitCode)}`);
    flushing = false;
    await flusher;
    await shipper.finish(key);
    // What waits goes as the store allows: a minute at most.
    for (let i = 0; i < 30 && shipper.waiting(key); i++) {
      await new Promise((r) => setTimeout(r, 2000));
      await shipper.flushAll();
    }
    clearInterval(sampler);
    const stats = (await (await fetch(`${endpoint}/__stats`)).json()) as { events: number; throttled: number };
    return {
      store,
      putPerSec: store === 'throttled' ? options.putPerSec : null,
      jobMiB: options.mib,
      seconds: Math.round(seconds * 10) / 10,
      linesRead,
      shipped: shipper.counts.shipped,
      dropped: shipper.counts.dropped,
      markers: shipper.counts.markers,
      stillWaiting: shipper.waiting(key),
      storeEvents: stats.events,
      throttledCalls: stats.throttled,
      rssBeforeMiB: Math.round(rssBefore / MiB),
      rssPeakMiB: Math.round(rssPeak / MiB),
      rssGrowthMiB: Math.round((rssPeak - rssBefore) / MiB),
      heapPeakMiB: Math.round(heapPeak / MiB),
    };
  } finally {
    await double.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

const invokedDirectly = process.argv[1] !== undefined && fileURLToPath(import.meta.url) === process.argv[1];
if (invokedDirectly) {
  const program = new Command('bench:agent')
    .option(
      '--store <store>',
      'open | throttled | both (each in its own process)',
      oneOf('--store', ['open', 'throttled', 'both'] as const),
      'both',
    )
    .option('--mib <n>', 'MiB the job prints', wholeNumber('--mib', 1, 1_048_576), 1024)
    .option('--put-per-sec <n>', 'PutLogEvents calls a second the throttled store takes', wholeNumber('--put-per-sec', 1, 100_000), 5)
    .option('--json', 'print JSON rows')
    .parse();
  const f = program.opts<{ store: AgentStore | 'both'; mib: number; putPerSec: number; json?: boolean }>();
  const rows: AgentRow[] = [];
  if (f.store === 'both') {
    for (const store of ['open', 'throttled'] as const)
      rows.push(
        ...(await rowsFromChild<AgentRow>(
          import.meta.url,
          ['--store', store, '--mib', String(f.mib), '--put-per-sec', String(f.putPerSec)],
          ['--expose-gc'],
        )),
      );
  } else rows.push(await benchAgent(f.store, { mib: f.mib, putPerSec: f.putPerSec }));
  if (f.json) process.stdout.write(`${JSON.stringify(rows, null, 2)}\n`);
  else {
    const n = (x: number) => x.toLocaleString('en-US');
    const lines = rows.map(
      (r) =>
        `${(r.store + (r.putPerSec !== null ? ` (${r.putPerSec}/s)` : '')).padEnd(16)} ${n(r.jobMiB).padStart(6)} ${r.seconds.toFixed(1).padStart(6)} ${n(r.linesRead).padStart(12)} ${n(r.shipped).padStart(12)} ${n(r.dropped).padStart(12)} ${String(r.markers).padStart(7)} ${n(r.throttledCalls).padStart(9)} ${String(r.rssBeforeMiB).padStart(7)} ${String(r.rssPeakMiB).padStart(7)} ${String(r.rssGrowthMiB).padStart(7)} ${String(r.heapPeakMiB).padStart(7)}${r.stillWaiting ? '  (lines still waiting at the end)' : ''}`,
    );
    process.stdout.write(
      `job output through the agent's real path (pipes → output.log → shipper → CloudWatch Logs adapter → a double)\n` +
        `store             job MiB  wall s   lines read      shipped      dropped markers throttled RSS MiB    peak  growth heap MiB\n` +
        `                                                                                  calls  before                    peak\n` +
        `${lines.join('\n')}\n` +
        `target: RSS growth ≤ 64 MiB → ${rows.every((r) => r.rssGrowthMiB <= 64) ? 'met' : 'NOT MET'} (${rows.map((r) => `${r.store} ${r.rssGrowthMiB} MiB`).join(', ')})\n`,
    );
  }
}
