// What the checkpoint index's byte bookkeeping costs the control plane itself (DynamoDB), at a fleet's size.
//
//   npm run bench:byte-log -- [--gpus 10000] [--save-every 600] [--job-hours 8] [--teams 20] [--json]
//
// One job's index item is played through its life with the production rules (the index's
// `markComplete` → `afterNewestSave` → `logSave`, the sweep's `forgetSuperseded` → `logDeleted`, on
// the memory index that passes the same contract suite as the DynamoDB one): a save every
// `--save-every` seconds, a sweep every minute. The item, each byte event and each team's carry are
// measured as the DynamoDB store writes them (attributes as JSON: a close stand-in for DynamoDB's
// item size, which counts names and values). From them, per day at the fleet's size (the trace's
// 1.5 GPUs a job), at the shipped DynamoDB on-demand rates (data/prices/cloud-services.json):
// - index writes: each save is a conditional put of the whole item (1 WRU per KB), each sweep that
//   forgets a save another;
// - before (reading every log): accrual read every index item's log each reconcile (a strongly
//   consistent query of the "ckpt" partition: 1 RRU per 4 KB), live and ended jobs' items alike
//   until their 120-day TTL;
// - now (byte events): each change puts its events (the events of the last 90 s, and the team's
//   mark); each reconcile reads the events since the last one, the teams' marks and each team's
//   budget row, writes each team's budget row with its carry, and deletes the events it counted.
// This is a model over measured sizes, not a DynamoDB bill; it says where the cost is and how big.
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { Command } from 'commander';
import { decimalNumber, wholeNumber } from '../cloud/flags.ts';
import { MemoryCheckpointStore } from '../cloud/sim/memory-stores.ts';
import { BYTE_EVENT_SEEN_MS, byteEventsSince, byteEventsToPut, saveSizeOf } from '../core/bytes.ts';
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
    .option('--teams <n>', 'teams sharing the fleet', wholeNumber('--teams', 1, 10_000), 20)
    .option('--json', 'print JSON')
    .parse()
    .opts<{ gpus: number; saveEvery: number; jobHours: number; teams: number; json?: boolean }>();
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
  let eventPuts = 0;
  let eventsMade = 0;
  let eventBytes = 0;
  const wru = (bytes: number) => Math.max(1, Math.ceil(bytes / 1024));
  // What the DynamoDB index puts after each write: the log's events of the last 90 s (repeats included) and the team's mark.
  const putEvents = async (t: number) => {
    const log = (await index.retained(jobId)).bytes;
    const put = byteEventsToPut(log, t);
    if (put.length === 0) return;
    eventPuts += put.length + 1;
    const made = byteEventsSince(log, t);
    eventsMade += made.length;
    for (const e of made) eventBytes = Math.max(eventBytes, JSON.stringify({ pk: 'bytes-event', sk: e.id, event: e, expiresAt: 0 }).length);
  };
  for (let t = start + 60_000; t <= endMs; t += 60_000) {
    clock.ms = t;
    if ((t - start) % (flags.saveEvery * 1000) === 0) {
      saves++;
      const location = `${checkpointFolder('s3://fleet/checkpoints/', jobId, 1)}step-${saves}/`;
      await index.markComplete({ jobId, attempt: 1, location, completedAtMs: t, progressSec: saves * flags.saveEvery, size }, 0, meter);
      const b = itemBytes(jobId, await index.retained(jobId), t);
      writeUnits += wru(b);
      largest = Math.max(largest, b);
      await putEvents(t);
    }
    // The sweep (every reconcile): superseded saves go, and the index forgets them.
    const held = await index.retained(jobId);
    if (held.superseded.length > 0) {
      await index.forgetSuperseded(jobId, held.superseded);
      forgets++;
      writeUnits += wru(itemBytes(jobId, await index.retained(jobId), t));
      await putEvents(t);
    }
  }
  const endItem = itemBytes(jobId, await index.retained(jobId), endMs);
  const jobs = flags.gpus / GPUS_PER_JOB;
  const jobsEndingPerDay = (jobs * 24) / flags.jobHours;
  const perDay = (perJobLife: number) => (perJobLife / (endMs - start)) * 86_400_000 * jobs;
  const [wPrice, rPrice] = [dynamoRate('On-demand write request unit (WRU)'), dynamoRate('On-demand read request unit (RRU)')];
  const wruPerDay = perDay(writeUnits);
  // Before: every index item's log read each reconcile: the live jobs' (taken at their largest) and the ended jobs' until their TTL.
  const rruPerQuery = (jobs * largest + jobsEndingPerDay * ITEM_TTL_DAYS * endItem) / 4096;
  const beforeRruPerDay = rruPerQuery * RECONCILES_PER_DAY;
  // Now: events put (1 WRU each, with the team's mark) and deleted once counted; a reconcile reads a minute's events, the marks and
  // each team's budget row (its carry: what it holds, and the ids of its last 4 minutes' events), and writes each budget row back.
  const eventsPerDay = perDay(eventsMade);
  const eventsPerReconcile = eventsPerDay / RECONCILES_PER_DAY;
  const idsPerTeam = (eventsPerReconcile * (BYTE_EVENT_SEEN_MS / 60_000)) / flags.teams;
  const carryBytes = 200 + idsPerTeam * 14;
  const rowBytes = 150 + carryBytes;
  const markBytes = 40;
  const readRru = Math.ceil((eventsPerReconcile * eventBytes + flags.teams * markBytes) / 4096) + flags.teams * Math.ceil(rowBytes / 4096);
  const writeWru = flags.teams * Math.ceil(rowBytes / 1024);
  const nowWruPerDay = perDay(eventPuts) + eventsPerDay + writeWru * RECONCILES_PER_DAY;
  const nowRruPerDay = readRru * RECONCILES_PER_DAY;
  const usd = (n: number, price: number) => +(n * price).toFixed(2);
  const out = {
    fleetGpus: flags.gpus,
    jobs: Math.round(jobs),
    teams: flags.teams,
    saveEverySec: flags.saveEvery,
    jobHours: flags.jobHours,
    savesPerJob: saves,
    sweepsThatForget: forgets,
    liveItemKiB: +(largest / 1024).toFixed(1),
    endedItemKiB: +(endItem / 1024).toFixed(1),
    indexWriteUnitsPerDay: Math.round(wruPerDay),
    indexWritesUsdPerDay: usd(wruPerDay, wPrice),
    before: {
      readUnitsPerReconcile: Math.round(rruPerQuery),
      endedItemsRead: Math.round(jobsEndingPerDay * ITEM_TTL_DAYS),
      readsUsdPerDay: usd(beforeRruPerDay, rPrice),
    },
    now: {
      eventsPerDay: Math.round(eventsPerDay),
      eventItemBytes: eventBytes,
      carryBytesPerTeam: Math.round(carryBytes),
      readUnitsPerReconcile: readRru,
      writeUnitsPerDay: Math.round(nowWruPerDay),
      readsUsdPerDay: usd(nowRruPerDay, rPrice),
      writesUsdPerDay: usd(nowWruPerDay, wPrice),
    },
  };
  if (flags.json) console.log(JSON.stringify(out, null, 2));
  else
    console.log(
      [
        `byte bookkeeping at ${out.fleetGpus} GPUs (${out.jobs} jobs of ${out.teams} teams, a save every ${out.saveEverySec} s, ${out.jobHours} h a job):`,
        `  index item: ${out.liveItemKiB} KiB at its largest while the job runs, ${out.endedItemKiB} KiB once it ended`,
        `  index writes: ${out.indexWriteUnitsPerDay.toLocaleString('en-US')} WRU/day → $${out.indexWritesUsdPerDay}/day (both ways)`,
        `  before, accrual reading every log: ${out.before.readUnitsPerReconcile.toLocaleString('en-US')} RRU a reconcile (${out.before.endedItemsRead.toLocaleString('en-US')} ended jobs' items until their TTL) → $${out.before.readsUsdPerDay}/day`,
        `  now, accrual reading byte events: ${out.now.eventsPerDay.toLocaleString('en-US')} events/day (${out.now.eventItemBytes} B each), ${out.now.readUnitsPerReconcile} RRU a reconcile, carry ${out.now.carryBytesPerTeam} B a team → reads $${out.now.readsUsdPerDay}/day, event and carry writes $${out.now.writesUsdPerDay}/day`,
      ].join('\n'),
    );
}

await main();
