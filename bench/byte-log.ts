// What the checkpoint index's byte log costs the control plane itself (DynamoDB), at a fleet's size.
//
//   npm run bench:byte-log -- [--gpus 10000] [--save-every 600] [--job-hours 8] [--json]
//
// One job's index item is played through its life with the production rules (the index's
// `markComplete` → `afterNewestSave` → `logSave`, the sweep's `forgetSuperseded` → `logDeleted`, on
// the memory index that passes the same contract suite as the DynamoDB one): a save every
// `--save-every` seconds, a sweep every minute. The item is measured as the DynamoDB index writes
// it (its attributes as JSON: a close stand-in for DynamoDB's item size, which counts names and
// values). From it, per day at the fleet's size (the trace's 1.5 GPUs a job):
// - writes: each save is a conditional put of the whole item (1 WRU per KB), each sweep that
//   forgets a save another;
// - reads: accrual reads every index item's log each reconcile (a strongly consistent query of
//   the "ckpt" partition: 1 RRU per 4 KB), live jobs' items and ended jobs' items alike until their
//   TTL (120 days) removes them;
// priced at the shipped DynamoDB on-demand rates (data/prices/cloud-services.json). This is a
// model over measured item sizes, not a DynamoDB bill; it says where the cost is and how big.
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { Command } from 'commander';
import { decimalNumber, wholeNumber } from '../cloud/flags.ts';
import { MemoryCheckpointStore } from '../cloud/sim/memory-stores.ts';
import { saveSizeOf } from '../core/bytes.ts';
import { checkpointFolder, type RetainedSaves } from '../core/job.ts';

const GPUS_PER_JOB = 1.5;
const RECONCILES_PER_DAY = 1440;
const ITEM_TTL_DAYS = 120;

/** The index item as DynamoCheckpointIndex writes it (cloud/aws/dynamo-store.ts). */
function itemBytes(jobId: string, held: RetainedSaves, nowMs: number): number {
  const item = {
    pk: 'ckpt',
    sk: jobId,
    ref: held.newest,
    ...(held.previous ? { previous: held.previous, replacedAtMs: held.replacedAtMs } : {}),
    ...(held.superseded.length > 0 ? { superseded: held.superseded } : {}),
    ...(held.bytes ? { bytes: held.bytes } : {}),
    rev: 1,
    recordedAtMs: nowMs,
    progressSec: held.newest?.progressSec ?? 0,
    expiresAt: Math.floor(nowMs / 1000) + ITEM_TTL_DAYS * 86_400,
  };
  return Buffer.byteLength(JSON.stringify(item));
}

function dynamoRate(item: string): number {
  const table = JSON.parse(readFileSync(resolve(import.meta.dirname, '../data/prices/cloud-services.json'), 'utf8')) as {
    prices: { service: string; item: string; region: string; usd: number }[];
  };
  const row = table.prices.find((r) => r.service === 'DynamoDB' && r.item === item && r.region === 'us-east-1');
  if (!row) throw new Error(`no DynamoDB "${item}" price in data/prices/cloud-services.json`);
  return row.usd / 1e6;
}

async function main(): Promise<void> {
  const flags = new Command()
    .option('--gpus <n>', 'GPUs in the fleet', wholeNumber('--gpus', 1, 1_000_000), 10_000)
    .option('--save-every <sec>', 'seconds between a job’s saves', wholeNumber('--save-every', 60, 86_400), 600)
    .option('--job-hours <h>', 'how long a job runs', decimalNumber('--job-hours', 0.1, 10_000), 8)
    .option('--json', 'print JSON')
    .parse()
    .opts<{ gpus: number; saveEvery: number; jobHours: number; json?: boolean }>();
  const start = Date.UTC(2026, 11, 1);
  const clock = { ms: start };
  const index = new MemoryCheckpointStore({ nowMs: () => clock.ms }, 's3://fleet/checkpoints/');
  const jobId = 'nlp.train-llm';
  const meter = {
    owner: { jobId, team: 'nlp', project: 'llm' },
    machine: { cloud: 'aws' as const, region: 'us-east-1', zone: 'us-east-1a' },
  };
  const size = saveSizeOf([24 * 2 ** 30]);
  const endMs = start + flags.jobHours * 3_600_000;
  let saves = 0;
  let forgets = 0;
  let writeUnits = 0;
  let largest = 0;
  const wru = (bytes: number) => Math.max(1, Math.ceil(bytes / 1024));
  for (let t = start + 60_000; t <= endMs; t += 60_000) {
    clock.ms = t;
    if ((t - start) % (flags.saveEvery * 1000) === 0) {
      saves++;
      const location = `${checkpointFolder('s3://fleet/checkpoints/', jobId, 1)}step-${saves}/`;
      await index.markComplete({ jobId, attempt: 1, location, completedAtMs: t, progressSec: saves * flags.saveEvery, size }, 0, meter);
      const b = itemBytes(jobId, await index.retained(jobId), t);
      writeUnits += wru(b);
      largest = Math.max(largest, b);
    }
    // The sweep (every reconcile): superseded saves go, and the index forgets them.
    const held = await index.retained(jobId);
    if (held.superseded.length > 0) {
      await index.forgetSuperseded(jobId, held.superseded);
      forgets++;
      writeUnits += wru(itemBytes(jobId, await index.retained(jobId), t));
    }
  }
  const endItem = itemBytes(jobId, await index.retained(jobId), endMs);
  const jobs = flags.gpus / GPUS_PER_JOB;
  const jobsEndingPerDay = (jobs * 24) / flags.jobHours;
  // Every item the accrual query reads each reconcile: the live jobs' (half-way through their log on average, taken as the
  // largest: the log fills in its first 48 h) and the ended jobs' still in the partition until their TTL.
  const liveReadBytes = jobs * largest;
  const endedReadBytes = jobsEndingPerDay * ITEM_TTL_DAYS * endItem;
  const rruPerQuery = (liveReadBytes + endedReadBytes) / 4096;
  const wruPerDay = (writeUnits / (endMs - start)) * 86_400_000 * jobs;
  const rruPerDay = rruPerQuery * RECONCILES_PER_DAY;
  const [wPrice, rPrice] = [dynamoRate('On-demand write request unit (WRU)'), dynamoRate('On-demand read request unit (RRU)')];
  const out = {
    fleetGpus: flags.gpus,
    jobs: Math.round(jobs),
    saveEverySec: flags.saveEvery,
    jobHours: flags.jobHours,
    savesPerJob: saves,
    sweepsThatForget: forgets,
    liveItemKiB: +(largest / 1024).toFixed(1),
    endedItemKiB: +(endItem / 1024).toFixed(1),
    writeUnitsPerDay: Math.round(wruPerDay),
    readUnitsPerQuery: Math.round(rruPerQuery),
    readUnitsPerDay: Math.round(rruPerDay),
    writesUsdPerDay: +(wruPerDay * wPrice).toFixed(2),
    readsUsdPerDay: +(rruPerDay * rPrice).toFixed(2),
    endedItemsInPartition: Math.round(jobsEndingPerDay * ITEM_TTL_DAYS),
  };
  if (flags.json) console.log(JSON.stringify(out, null, 2));
  else
    console.log(
      [
        `byte log at ${out.fleetGpus} GPUs (${out.jobs} jobs, a save every ${out.saveEverySec} s, ${out.jobHours} h a job):`,
        `  index item: ${out.liveItemKiB} KiB at its largest while the job runs, ${out.endedItemKiB} KiB once it ended`,
        `  writes: ${out.writeUnitsPerDay.toLocaleString('en-US')} WRU/day → $${out.writesUsdPerDay}/day`,
        `  accrual reads: ${out.readUnitsPerQuery.toLocaleString('en-US')} RRU a reconcile (${out.endedItemsInPartition.toLocaleString('en-US')} ended jobs' items until their TTL) → $${out.readsUsdPerDay}/day`,
      ].join('\n'),
    );
}

await main();
