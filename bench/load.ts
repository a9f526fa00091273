// bench:load — reconcile at scale: 100,000 pending jobs (a share of them held by their budgets),
// 2,000 nodes, 50 teams, through the real reconcile service and planner, on the simulated
// cloud's in-memory stores or on a DynamoDB-compatible server (dynalite, started here in a child
// process, as the tests start it in theirs). Two reconciles a minute apart; for each: the time to
// read the world and build the snapshot, to plan, to apply; on dynalite also the items read and
// written and the capacity units consumed (ReturnConsumedCapacity), priced per month at one
// reconcile a minute; and the peak memory, against the reconcile function's Lambda limits.
//
//   npm run bench:load -- [--store memory|dynalite|both] [--jobs N] [--nodes N] [--teams N] [--json]
import { Command } from 'commander';
import { oneOf, wholeNumber } from '../cloud/flags.ts';
import type { DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import { dynamoStores } from '../cloud/aws/dynamo-store.ts';
import { newPendingJob } from '../core/job.ts';
import { JobSpecSchema } from '../core/job-spec.ts';
import { plan } from '../core/planner/planner.ts';
import { reconcile, type ReconcilePorts } from '../core/reconcile/reconcile.ts';
import { DEFAULT_POLICY, type Snapshot } from '../core/snapshot.ts';
import { SimAgents } from '../cloud/sim/sim-agent.ts';
import { defaultTeamTags } from '../cloud/sim/defaults.ts';
import { createSimEnvironment } from '../cloud/sim/environment.ts';
import type { SimGroupConfig } from '../cloud/sim/sim-cloud.ts';
import { startDynaliteProcess } from './support/dynalite.ts';
import { rowsFromChild } from './support/child-server.ts';

const LAMBDA_MB = 1769;
const LAMBDA_TIMEOUT_SEC = 60;

/** DynamoDB on-demand prices, us-east-1, since the November 2024 cut: µUSD per request unit. */
const USD_PER_MILLION_READ_UNITS = 0.125;
const USD_PER_MILLION_WRITE_UNITS = 0.625;
/** One reconcile a minute over a 30-day month. */
const RECONCILES_PER_MONTH = 60 * 24 * 30;

export type LoadStore = 'memory' | 'dynalite';

export interface LoadRow {
  readonly store: LoadStore;
  readonly reconcile: number;
  readonly jobs: number;
  readonly heldTeams: number;
  readonly nodes: number;
  readonly teams: number;
  readonly readSec: number;
  readonly planSec: number;
  readonly applySec: number;
  readonly totalSec: number;
  readonly actions: number;
  readonly placed: number;
  /** On dynalite: the writes by command, table and control-record kind. */
  readonly writesByKind?: Readonly<Record<string, number>>;
  readonly holdsWritten: number;
  readonly waiting: number;
  /** Items read and written, and capacity units consumed (reads + writes): dynalite only (null in memory). */
  readonly itemsRead: number | null;
  readonly itemsWritten: number | null;
  readonly capacityUnits: number | null;
  readonly readUnits: number | null;
  readonly writeUnits: number | null;
  readonly usdPerMonth: number | null;
  readonly seedSec: number;
  readonly peakRssMiB: number;
  readonly lambdaMemoryMb: number;
  readonly lambdaTimeoutSec: number;
}

// The middleware sees the low-level client's command names (GetItemCommand), not the document client's (GetCommand).
const READS = new Set(['GetItemCommand', 'QueryCommand', 'ScanCommand', 'BatchGetItemCommand', 'TransactGetItemsCommand']);

/** Counts what every DynamoDB call read, wrote and consumed (asking each for its consumed capacity). */
function meter(doc: DynamoDBDocumentClient) {
  const m = { itemsRead: 0, itemsWritten: 0, readUnits: 0, writeUnits: 0, writesByKind: {} as Record<string, number> };
  doc.middlewareStack.add(
    (next, context) => async (args) => {
      const input = args.input as Record<string, unknown>;
      const command = String(context.commandName ?? '');
      input.ReturnConsumedCapacity = 'TOTAL';
      const out = await next(args);
      const o = out.output as Record<string, unknown>;
      const cc = o.ConsumedCapacity as { CapacityUnits?: number } | { CapacityUnits?: number }[] | undefined;
      const units = (Array.isArray(cc) ? cc : cc ? [cc] : []).reduce((a, c) => a + (c.CapacityUnits ?? 0), 0);
      if (READS.has(command)) {
        m.readUnits += units;
        if (Array.isArray(o.Items)) m.itemsRead += o.Items.length;
        else if (o.Item) m.itemsRead += 1;
        else if (o.Responses && typeof o.Responses === 'object')
          m.itemsRead += Object.values(o.Responses as Record<string, unknown[]>).reduce((a, r) => a + r.length, 0);
      } else {
        m.writeUnits += units;
        if (command === 'BatchWriteCommand')
          m.itemsWritten += Object.values((input.RequestItems ?? {}) as Record<string, unknown[]>).reduce((a, r) => a + r.length, 0);
        else if (command === 'TransactWriteCommand') m.itemsWritten += ((input.TransactItems ?? []) as unknown[]).length;
        else m.itemsWritten += 1;
        // What was written, by table and (in the control table) record kind: "UpdateCommand load-control/spend".
        const key = (input.Key ?? input.Item) as Record<string, unknown> | undefined;
        const kind = `${command} ${String(input.TableName ?? 'batch')}${typeof key?.pk === 'string' ? `/${key.pk.split('#')[0]}` : ''}`;
        m.writesByKind[kind] = (m.writesByKind[kind] ?? 0) + 1;
      }
      return out;
    },
    { step: 'initialize', name: 'gpuFleetLoadMeter' },
  );
  return m;
}

/** Runs `f` over `items`, `limit` at a time. */
async function pool<T>(items: readonly T[], limit: number, f: (item: T) => Promise<unknown>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(limit, items.length) }, async () => {
      while (next < items.length) await f(items[next++]!);
    }),
  );
}

export async function benchLoad(o: { jobs: number; nodes: number; teams: number; store?: LoadStore }): Promise<LoadRow[]> {
  const store = o.store ?? 'memory';
  const startMs = Date.UTC(2026, 10, 2);
  const teams = Array.from({ length: o.teams }, (_, i) => `team-${String(i).padStart(2, '0')}`);
  // The groups are at their limit: the fleet stays the N machines (none launched, so none booting by the
  // second reconcile), and what that reconcile writes is what changed in the minute between.
  const perGroup = Math.ceil(o.nodes / 4);
  const groups: SimGroupConfig[] = [
    {
      id: 'p3-8xl-spot',
      instanceTypes: ['p3.8xlarge'],
      zones: ['us-west-2a', 'us-west-2b'],
      capacityType: 'spot',
      minSize: 0,
      maxSize: perGroup,
    },
    {
      id: 'p3-8xl-od',
      instanceTypes: ['p3.8xlarge'],
      zones: ['us-west-2a', 'us-west-2b'],
      capacityType: 'on-demand',
      minSize: 0,
      maxSize: perGroup,
    },
    {
      id: 'p3-16xl-spot',
      instanceTypes: ['p3.16xlarge'],
      zones: ['us-west-2a', 'us-west-2b'],
      capacityType: 'spot',
      minSize: 0,
      maxSize: perGroup,
    },
    {
      id: 'p3-16xl-od',
      instanceTypes: ['p3.16xlarge'],
      zones: ['us-west-2a', 'us-west-2b'],
      capacityType: 'on-demand',
      minSize: 0,
      maxSize: perGroup,
    },
  ];
  // A tenth of the teams have spent their budget (action hold, $0): their jobs are held.
  const heldTeams = teams.filter((_, i) => i % 10 === 0);
  const teamTags = defaultTeamTags(teams, (t) => (heldTeams.includes(t) ? 0 : 1_000_000)).map((t) =>
    heldTeams.includes(t.team) ? { ...t, tags: { ...t.tags, 'gpu-fleet:budget-action': 'hold' } } : t,
  );
  const env = createSimEnvironment({ startMs, seed: 1, groups, teams, teamTags, bootSec: 60 });
  const dynamo = store === 'dynalite' ? await startDynaliteProcess() : undefined;
  let ports: ReconcilePorts = env.ports;
  let metered: ReturnType<typeof meter> | undefined;
  if (dynamo) {
    const names = await dynamo.createTables('load');
    metered = meter(dynamo.doc);
    ports = { ...env.ports, ...dynamoStores(dynamo.doc, names, 'file:///tmp/gpu-fleet-load/') };
  }
  for (const g of groups) await env.cloud.setDesiredCapacity(g.id, perGroup);
  env.clock.advanceBy(120_000);
  env.cloud.tick();
  const agents = new SimAgents({
    clock: env.clock,
    jobs: ports.jobs,
    nodes: ports.nodes,
    checkpoints: ports.checkpoints,
    instanceTypes: env.catalog.instanceTypes,
    workSecOf: () => 3600,
  });
  await agents.tick(await env.cloud.listInstances());
  // A mixed queue: whole GPUs (1, 2, 4, 8), gangs, MIG-less fractions, checkpointing, priorities, deadlines.
  const shapes = [
    { kind: 'whole', count: 1 },
    { kind: 'whole', count: 2 },
    { kind: 'whole', count: 4 },
    { kind: 'whole', count: 8 },
    { kind: 'fraction', milliGpu: 250, memoryMiB: 4000 },
  ] as const;
  const seedFrom = performance.now();
  await pool(
    Array.from({ length: o.jobs }, (_, i) => i),
    64,
    async (i) => {
      const team = teams[i % teams.length]!;
      const spec = JobSpecSchema.parse({
        image: 'pytorch/pytorch:2.3.0',
        command: ['python', 'train.py'],
        gpu: shapes[i % shapes.length],
        priority: 50 + (i % 7) * 10,
        ...(i % 3 === 0 ? { checkpoint: { intervalSec: 600 } } : {}),
        ...(i % 11 === 0 ? { nodes: 2, gpu: { kind: 'whole', count: 8 } } : {}),
        expectedRuntimeSec: 600 + (i % 24) * 900,
        labels: { project: `p${i % 40}` },
      });
      await ports.jobs.create(newPendingJob({ id: `${team}.j${i}`, team, spec, submittedAtMs: startMs + (i % 3600) * 1000 }));
    },
  );
  const seedSec = (performance.now() - seedFrom) / 1000;
  const nodes = (await ports.nodes.list()).length;
  const rows: LoadRow[] = [];
  const r2 = (x: number) => Math.round(x * 100) / 100;
  for (const n of [1, 2]) {
    if (n === 2) {
      // A minute later: the machines' agents have started what was placed.
      env.clock.advanceBy(60_000);
      env.cloud.tick();
      await agents.tick(await env.cloud.listInstances());
    }
    global.gc?.();
    if (metered) Object.assign(metered, { itemsRead: 0, itemsWritten: 0, readUnits: 0, writeUnits: 0, writesByKind: {} });
    const t: { planFrom?: number; planTo?: number } = {};
    const t0 = performance.now();
    const out = await reconcile(ports, {
      planner: (s: Snapshot) => {
        t.planFrom = performance.now();
        const p = plan(s);
        t.planTo = performance.now();
        return p;
      },
      policy: DEFAULT_POLICY,
      holder: `load-${n}`,
    });
    const t1 = performance.now();
    if (out.status !== 'done') throw new Error(`reconcile ${n} skipped: ${out.reason}`);
    const m = metered ? { ...metered, writesByKind: { ...metered.writesByKind } } : undefined;
    const units = m ? m.readUnits + m.writeUnits : null;
    rows.push({
      store,
      reconcile: n,
      jobs: o.jobs,
      heldTeams: heldTeams.length,
      nodes,
      teams: o.teams,
      readSec: r2((t.planFrom! - t0) / 1000),
      planSec: r2((t.planTo! - t.planFrom!) / 1000),
      applySec: r2((t1 - t.planTo!) / 1000),
      totalSec: r2((t1 - t0) / 1000),
      actions: out.decision.plan.actions.length,
      placed: out.decision.plan.actions.filter((a) => a.kind === 'place').length,
      holdsWritten: out.decision.plan.actions.filter((a) => a.kind === 'hold' || a.kind === 'release-hold').length,
      waiting: out.decision.plan.waiting.length,
      itemsRead: m ? m.itemsRead : null,
      itemsWritten: m ? m.itemsWritten : null,
      ...(m ? { writesByKind: m.writesByKind } : {}),
      capacityUnits: units === null ? null : r2(units),
      readUnits: m ? r2(m.readUnits) : null,
      writeUnits: m ? r2(m.writeUnits) : null,
      usdPerMonth: m
        ? r2(((m.readUnits * USD_PER_MILLION_READ_UNITS + m.writeUnits * USD_PER_MILLION_WRITE_UNITS) / 1e6) * RECONCILES_PER_MONTH)
        : null,
      seedSec: r2(seedSec),
      peakRssMiB: Math.round(process.resourceUsage().maxRSS / 1024),
      lambdaMemoryMb: LAMBDA_MB,
      lambdaTimeoutSec: LAMBDA_TIMEOUT_SEC,
    });
  }
  await dynamo?.close();
  return rows;
}

const invokedDirectly = process.argv[1] !== undefined && import.meta.url === new URL(`file://${process.argv[1]}`).href;
if (invokedDirectly) {
  const program = new Command('bench:load')
    .option(
      '--store <store>',
      'memory | dynalite | both (each in its own process, so each peak memory is its own)',
      oneOf('--store', ['memory', 'dynalite', 'both'] as const),
      'memory',
    )
    .option('--jobs <n>', 'pending jobs', wholeNumber('--jobs', 1, 10_000_000), 100_000)
    .option('--nodes <n>', 'nodes', wholeNumber('--nodes', 0, 1_000_000), 2000)
    .option('--teams <n>', 'teams', wholeNumber('--teams', 1, 10_000), 50)
    .option('--json', 'print JSON rows')
    .parse();
  const f = program.opts<{ store: LoadStore | 'both'; jobs: number; nodes: number; teams: number; json?: boolean }>();
  const rows: LoadRow[] = [];
  if (f.store === 'both') {
    for (const store of ['memory', 'dynalite'] as const)
      rows.push(
        ...(await rowsFromChild<LoadRow>(import.meta.url, [
          '--store',
          store,
          '--jobs',
          String(f.jobs),
          '--nodes',
          String(f.nodes),
          '--teams',
          String(f.teams),
        ])),
      );
  } else rows.push(...(await benchLoad({ jobs: f.jobs, nodes: f.nodes, teams: f.teams, store: f.store })));
  if (f.json) process.stdout.write(`${JSON.stringify(rows, null, 2)}\n`);
  else {
    const r0 = rows[0]!;
    const lines = rows.map(
      (r) =>
        `${r.store.padEnd(8)} ${String(r.reconcile).padStart(3)} ${r.readSec.toFixed(2).padStart(7)} ${r.planSec.toFixed(2).padStart(6)} ${r.applySec.toFixed(2).padStart(6)} ${r.totalSec.toFixed(2).padStart(6)} ${String(r.placed).padStart(6)} ${String(r.holdsWritten).padStart(6)} ${String(r.itemsRead ?? '-').padStart(8)} ${String(r.itemsWritten ?? '-').padStart(8)} ${String(r.capacityUnits ?? '-').padStart(9)} ${(r.usdPerMonth === null ? '-' : `$${r.usdPerMonth.toFixed(2)}`).padStart(10)} ${String(r.peakRssMiB).padStart(8)}`,
    );
    process.stdout.write(
      `reconcile at scale: ${r0.jobs.toLocaleString('en-US')} pending jobs (${r0.heldTeams} of ${r0.teams} teams held by their budget), ${r0.nodes.toLocaleString('en-US')} nodes\n` +
        `store    run   read s  plan s apply s total s placed  holds    items    items  cap units  $/month   peak RSS\n` +
        `                                                                   read  written  (r + w)   (1/min)      MiB\n` +
        `${lines.join('\n')}\n` +
        `$/month: DynamoDB on-demand in us-east-1 ($${USD_PER_MILLION_READ_UNITS} per million read, $${USD_PER_MILLION_WRITE_UNITS} per million write request units) at one reconcile a minute for 30 days; times on dynalite are for information (dynalite is not DynamoDB)\n` +
        `Lambda limits of the reconcile function: ${LAMBDA_MB} MB, ${LAMBDA_TIMEOUT_SEC} s → ${rows.every((r) => r.peakRssMiB < LAMBDA_MB && r.totalSec < LAMBDA_TIMEOUT_SEC) ? 'fits' : 'DOES NOT FIT'}\n`,
    );
  }
}
