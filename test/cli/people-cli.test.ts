import { spawn } from 'node:child_process';
import { cpSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { CreateQueueCommand, GetQueueUrlCommand, ReceiveMessageCommand } from '@aws-sdk/client-sqs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { intake } from '../../core/services/intake.ts';
import { dynamoStores } from '../../cloud/aws/dynamo-store.ts';
import type { TableNames } from '../../cloud/aws/tables.ts';
import { startDynalite, type LocalDynamo } from '../support/dynalite.ts';
import { startSqs } from '../support/fauxqs.ts';
import { money } from '../../cli/format.ts';
import { cliInProcess } from '../support/cli-in-process.ts';

const root = fileURLToPath(new URL('../..', import.meta.url));
const bin = fileURLToPath(new URL('../../bin/gpu-fleet.js', import.meta.url));

/** Each command in-process (test/support/cli-in-process.ts): 85 child processes cost this file two minutes of starting. */
const cli = (args: string[], env?: NodeJS.ProcessEnv) => cliInProcess(args, env);
const json = <T = Record<string, unknown>>(out: { stdout: string }) => JSON.parse(out.stdout) as T;

describe('gpu-fleet status on a two-cloud simulation saved while GCP is out', () => {
  const dir = mkdtempSync(join(tmpdir(), 'gpu-fleet-sim2-'));
  beforeAll(async () => {
    // cloud-outage:gcp runs from 16 h to 17 h: the simulation stops half-way through it.
    const out = await cli([
      'simulate',
      '--hours',
      '16.5',
      '--clouds',
      'aws,gcp',
      '--faults',
      'cloud-outage:gcp',
      '--no-baselines',
      '--no-progress',
      '--out',
      dir,
    ]);
    expect(out.code).toBe(0);
  }, 180_000);

  it('says which provider the newest reconcile left out, since when and the last error; the saved fleet has both clouds', async () => {
    const s = json<{
      degraded: { cloud: string; sinceMs: number; error: string; code: string; forSec: number }[];
      groups: { group: string; cloud: string }[];
    }>(await cli(['status', '--sim', dir, '--json']));
    expect(s.degraded).toEqual([
      expect.objectContaining({
        cloud: 'gcp',
        sinceMs: Date.UTC(2026, 10, 2, 16),
        code: 'unavailable',
        error: expect.stringMatching(/gcp is not answering/),
      }),
    ]);
    expect(s.degraded[0]!.forSec).toBeGreaterThanOrEqual(1700);
    expect(new Set(s.groups.map((g) => g.cloud))).toEqual(new Set(['aws', 'gcp']));
    const human = await cli(['status', '--sim', dir]);
    expect(human.stdout).toMatch(
      /Degraded \(left out of the newest reconcile, decision-\d+: not scaled, and work only it could run waits\)\n {2}gcp: since 2026-11-02T16:00:00.000Z \([\d.]+ min\), last error \[unavailable\]: gcp is not answering/,
    );
  });

  it('refuses a fault profile aimed at an unknown cloud, saying what is allowed', async () => {
    const out = await cli(['simulate', '--faults', 'api-errors:azure', '--no-baselines']);
    expect(out.code).toBe(2);
    expect(out.stderr).toMatch(/--faults: fault profile "api-errors:azure": only api-errors and cloud-outage take a cloud/);
  });
});

describe('reserved capacity, against a simulation with an ODCR and a Capacity Block (simulate --reservations)', () => {
  const dir = mkdtempSync(join(tmpdir(), 'gpu-fleet-res-'));
  beforeAll(async () => {
    const out = await cli(['simulate', '--hours', '8', '--reservations', '--no-services', '--no-baselines', '--no-progress', '--out', dir]);
    expect(out.code).toBe(0);
    expect(out.stdout).toMatch(/reservation cr-0a0d0c0000000a001 \(odcr, 4 machines\)\s+paid \$[\d,.]+, unused \$[\d,.]+; [\d.]+% used/);
  }, 180_000);

  it('report: the reservations paid in full, the part each team ran in, the unused part by reservation; budget and explain say so too', async () => {
    const r = json<{
      totals: { paidMicroUsd: number; heldByJobsMicroUsd: number; idleMicroUsd: number; checkpointBytesMicroUsd: number };
      reserved: {
        paidMicroUsd: number;
        usedMicroUsd: number;
        unusedMicroUsd: number;
        utilizationPct: number;
        usedByTeam: { team: string; costMicroUsd: number }[];
        unusedByReservation: { reservation: string; costMicroUsd: number }[];
      };
      jobs: { job: string; reservedMicroUsd: number }[];
    }>(await cli(['report', '--sim', dir, '--json']));
    const x = r.reserved;
    expect(x.paidMicroUsd).toBe(x.usedMicroUsd + x.unusedMicroUsd);
    expect(x.usedByTeam.length).toBeGreaterThan(0);
    expect(x.usedByTeam.reduce((a, t) => a + t.costMicroUsd, 0)).toBe(x.usedMicroUsd);
    // The ODCR is held from the start; the block is delivered at 4 h: both are paid, used or not.
    expect(x.unusedByReservation.map((u) => u.reservation).sort()).toEqual(
      expect.arrayContaining([expect.stringMatching(/^cr-0(a0d0c0000000a001|b10c0000000b0001)$/)]),
    );
    // Unused reserved capacity is idle capacity, paid all the same.
    expect(r.totals.paidMicroUsd).toBe(r.totals.heldByJobsMicroUsd + r.totals.idleMicroUsd + r.totals.checkpointBytesMicroUsd);
    expect(r.totals.idleMicroUsd).toBeGreaterThanOrEqual(x.unusedMicroUsd);
    const human = await cli(['report', '--sim', dir]);
    expect(human.stdout).toMatch(/Reserved capacity: paid \$[\d,.]+, used [\d.]+%/);
    expect(human.stdout).toMatch(/unused cr-0\w+ \(waste\)/);
    const csv = await cli(['report', '--sim', dir, '--csv']);
    expect(csv.stdout).toMatch(/\nreserved-used,\w+,\w+,/);
    expect(csv.stdout).toMatch(/\nreserved-unused,cr-0\w+,/);
    const out = mkdtempSync(join(tmpdir(), 'gpu-fleet-res-out-'));
    await cli(['report', '--sim', dir, '--out', out]);
    expect(readFileSync(join(out, 'finops.html'), 'utf8')).toMatch(/data-chart="reservations"/);

    const budget = json<{ team: string; reservedMicroUsd: number }[]>(await cli(['budget', '--sim', dir, '--json']));
    expect(budget.some((b) => b.reservedMicroUsd > 0)).toBe(true);
    expect((await cli(['budget', '--sim', dir])).stdout).toMatch(/on reserved/);

    // A job running on a reservation at the end: explain and status name the reservation, prepaid.
    const saved = JSON.parse(readFileSync(join(dir, 'jobs.json'), 'utf8')) as {
      id: string;
      state: string;
      placement?: { capacityType: string; reservationId?: string };
    }[];
    const onReservation = saved.find((j) => j.state === 'running' && j.placement?.capacityType === 'reserved')!;
    expect(onReservation).toBeDefined();
    const why = await cli(['explain', '--sim', dir, onReservation.id]);
    expect(why.stdout).toContain(`reservation ${onReservation.placement!.reservationId} (prepaid)`);
    const status = await cli(['status', '--sim', dir, onReservation.id]);
    expect(status.stdout).toContain(`reservation ${onReservation.placement!.reservationId} (prepaid)`);
  });
});

describe('gpu-fleet for people, against a simulation (--sim DIR)', () => {
  const dir = mkdtempSync(join(tmpdir(), 'gpu-fleet-sim-'));
  beforeAll(async () => {
    const out = await cli(['simulate', '--hours', '8', '--no-baselines', '--no-progress', '--out', dir]);
    expect(out.code).toBe(0);
  }, 120_000);

  it('simulate --out: the report reads cost against the lower bound (spot only while it could be had) and the spot floor', () => {
    const html = readFileSync(join(dir, 'report.html'), 'utf8');
    expect(html).toMatch(
      /[\d.]+× the lower bound \(\$[\d,.]+: useful work, spot only while it could be had\), [\d.]+× the spot floor \(\$[\d,.]+: all at spot\)/,
    );
    expect(html).toMatch(/<th>÷ lower bound<\/th><th>÷ spot floor<\/th>/);
  });

  it('what each command prints for people fits 120 columns: tables wrap their last column, sentences wrap with an indent', async () => {
    for (const args of [['status'], ['budget'], ['explain', '--decision', 'latest'], ['report']]) {
      const out = await cli([...args, '--sim', dir]);
      expect(out.code).toBe(0);
      expect({ args, wide: out.stdout.split('\n').filter((l) => l.length > 120) }).toEqual({ args, wide: [] });
    }
  });

  it('cancel TEAM.NAME removes a service: its replicas are drained and stopped by the next reconciles; a second cancel says so', async () => {
    const copy = mkdtempSync(join(tmpdir(), 'gpu-fleet-sim-cancel-'));
    cpSync(dir, copy, { recursive: true });
    const first = await cli(['cancel', 'nlp.chat', '--sim', copy, '--json']);
    expect(first.code).toBe(0);
    expect(json(first)).toMatchObject({ jobId: 'nlp.chat', status: 'cancel-requested' });
    expect((await cli(['invoke', 'reconcile', '--sim', copy])).code).toBe(0);
    const view = json<{ state: string; target: number; replicas: { state: string }[] }>(
      await cli(['explain', '--service', 'nlp.chat', '--sim', copy, '--json']),
    );
    expect(view).toMatchObject({ state: 'cancelled', target: 0 });
    expect(json(await cli(['cancel', 'nlp.chat', '--sim', copy, '--json']))).toMatchObject({ status: 'cancelled' });
    const unknown = await cli(['cancel', 'nlp.nothing', '--sim', copy]);
    expect(unknown).toMatchObject({ code: 2, stderr: expect.stringMatching(/no job or service nlp\.nothing/) });
  });

  it('a job is named by its id, positional, in every command; status/explain --job ID still work, with a notice', async () => {
    const jobs = JSON.parse(readFileSync(join(dir, 'jobs.json'), 'utf8')) as { id: string }[] | { jobs: { id: string }[] };
    const id = (Array.isArray(jobs) ? jobs : jobs.jobs)[0]!.id;
    for (const command of ['status', 'explain']) {
      const now = await cli([command, id, '--sim', dir]);
      const old = await cli([command, '--job', id, '--sim', dir]);
      expect(now).toMatchObject({ code: 0, stderr: '' });
      expect(old).toEqual({
        code: 0,
        stdout: now.stdout,
        stderr: `gpu-fleet: ${command} --job ID is now ${command} ID, as in logs and cancel; --job goes in the next release\n`,
      });
    }
  });

  it('every command that prints can be piped into a reader that stops early (| head): exit 0, no EPIPE stack', async () => {
    const job = JSON.parse(readFileSync(join(dir, 'jobs.json'), 'utf8')) as { id: string }[] | { jobs: { id: string }[] };
    const first = (Array.isArray(job) ? job : job.jobs)[0]!.id;
    const commands = [
      ['--help'],
      ['logs', first, '--sim', dir],
      ['report', '--sim', dir, '--csv'],
      ['report', '--sim', dir],
      ['status', '--sim', dir],
      ['budget', '--sim', dir],
      ['explain', '--decision', 'latest', '--sim', dir],
      ['simulate', '--hours', '1', '--max-jobs', '10', '--no-baselines', '--no-progress'],
    ];
    for (const args of commands) {
      // The reader is gone before the command writes its first byte: every write meets a closed pipe.
      const child = spawn(process.execPath, [bin, ...args], { cwd: root, stdio: ['ignore', 'pipe', 'pipe'] });
      child.stdout.destroy();
      let stderr = '';
      child.stderr.on('data', (c: Buffer) => (stderr += c.toString('utf8')));
      const code = await new Promise<number | null>((r) => child.on('close', r));
      expect({ args, code, stderr }).toEqual({ args, code: 0, stderr: expect.not.stringMatching(/EPIPE|Unhandled/) });
    }
  }, 120_000);

  it('status: jobs by state with their waits, nodes by group with GPU use, queue depth per team', async () => {
    const s = json<{
      jobs: { state: string; jobs: number }[];
      groups: { group: string; usedGpus: number; gpus: number; warm?: { ready: number; preparing: number } }[];
      queues: { team: string }[];
    }>(await cli(['status', '--sim', dir, '--json']));
    expect(s.jobs.find((r) => r.state === 'succeeded')!.jobs).toBeGreaterThan(0);
    expect(s.groups.length).toBe(6);
    expect(s.groups.some((g) => g.usedGpus > 0 && g.usedGpus <= g.gpus)).toBe(true);
    // The simulated fleet's 1-GPU on-demand group keeps a warm pool of two, apart from its capacity.
    expect(s.groups.find((g) => g.group === 'p3-2xl-od')).toMatchObject({
      warm: { ready: expect.any(Number), preparing: expect.any(Number) },
    });
    expect(s.groups.filter((g) => g.warm !== undefined).map((g) => g.group)).toEqual(['p3-2xl-od']);
    expect(s.queues.map((q) => q.team)).toEqual(['nlp', 'recsys', 'speech', 'vision']);
    const human = await cli(['status', '--sim', dir, '--team', 'nlp']);
    expect(human.stdout).toMatch(/Jobs\nstate\s+jobs\s+GPUs\s+median first wait\s+median total wait\s+longest total wait/);
    expect(human.stdout).toMatch(
      /Nodes by group \(the whole fleet's; "nlp holds" is what the team's jobs hold\)\ngroup\s+cloud\s+capacity.*warm \(preparing\).*nlp holds/,
    );
    expect(human.stdout).toMatch(/\np3-2xl-od\s+aws\s+on-demand\s+\d+\s+\d+\s+\d+\s+\d \(\d\)\s/);
    // With --team, each group also says what that team holds there: never more than the group's use, and in all what its jobs
    // and its service's replicas (listed apart) hold.
    const mine = json<{
      groups: { usedGpus: number; teamGpus: number }[];
      jobs: { state: string; gpus: number }[];
      serviceReplicas?: { state: string; replicas: number; gpus: number }[];
    }>(await cli(['status', '--sim', dir, '--team', 'nlp', '--json']));
    for (const g of mine.groups) expect(g.teamGpus).toBeLessThanOrEqual(g.usedGpus);
    const holding = (r: { state: string }) => ['placed', 'running', 'checkpointing'].includes(r.state);
    const replicas = (mine.serviceReplicas ?? []).filter(holding).reduce((a, r) => a + r.gpus, 0);
    expect(replicas).toBeGreaterThan(0);
    const held = mine.jobs.filter(holding).reduce((a, r) => a + r.gpus, 0);
    expect(mine.groups.reduce((a, g) => a + g.teamGpus, 0)).toBeCloseTo(held + replicas, 6);
    expect(held).toBeGreaterThan(0);
  });

  it('services: status lists them (wanted, ready, starting, spot / on-demand, why); explain --service says where the replicas are; submit takes one', async () => {
    const s = json<{ services: { id: string; target: number; ready: number; spot: number; onDemand: number; reason: string }[] }>(
      await cli(['status', '--sim', dir, '--json']),
    );
    expect(s.services.map((v) => v.id)).toEqual(['nlp.chat', 'recsys.recommend']);
    const chat = s.services[0]!;
    expect(chat.target).toBeGreaterThanOrEqual(1);
    expect(chat.reason).toMatch(/requests per second per replica against a target of 2/);
    const human = await cli(['status', '--sim', dir]);
    expect(human.stdout).toMatch(
      /Services\nservice\s+wanted\s+ready\s+starting\s+spot \/ on-demand\s+in objective\s+last decision\nnlp\.chat\s+(\d+\s+){3}\d+ \/ \d+\s+\d+(\.\d+)?%/,
    );
    // The share within the objective at the last decision, as its reason says it.
    expect(chat.reason).toMatch(/% of [\d.]+ requests\/s within a 2 s wait/);
    const why = await cli(['explain', '--sim', dir, '--service', 'nlp.chat']);
    expect(why.code).toBe(0);
    expect(why.stdout).toMatch(
      new RegExp(
        `^nlp\\.chat: ${chat.target} wanted, \\d+ ready, \\d+ starting \\(\\d+ spot, \\d+ on-demand\\)\n  scales on: requests-per-second 2 per replica\n  objective: a wait of at most 2 s, a replica serving 2\\.8 requests/s \\(32 at once\\)\n  why: `,
      ),
    );
    expect(why.stdout).toMatch(/ {2}nlp\.chat-r\d+: running( \(ready\))?, (spot|on-demand)/);
    const none = await cli(['explain', '--sim', dir, '--service', 'nlp.nope']);
    expect(none).toMatchObject({
      code: 2,
      stderr: expect.stringMatching(/no service nlp\.nope; the services are nlp\.chat, recsys\.recommend/),
    });
    const body = JSON.stringify({
      name: 'embed',
      image: 'ghcr.io/huggingface/text-embeddings-inference:1.5',
      command: ['--port', '8080'],
      gpu: { kind: 'whole', count: 1, models: ['V100'] },
      service: { port: 8080, replicas: { min: 1, max: 2 }, targets: [{ metric: 'requests-per-second', perReplica: 20 }] },
    });
    const specFile = join(dir, 'embed.json');
    writeFileSync(specFile, body);
    const sent = await cli(['submit', '--sim', dir, '--team', 'nlp', '--file', specFile]);
    expect(sent.code).toBe(0);
    expect(sent.stdout).toMatch(/service nlp\.embed created \(version 1\); reconcile starts its replicas/);
  }, 60_000);

  it('submit refuses a job no node group could ever hold, naming the requirement and what the groups offer, with --dry-run too', async () => {
    const l4 = [
      'submit',
      '--sim',
      dir,
      '--team',
      'nlp',
      '--image',
      'pytorch/pytorch:2.3.0',
      '--gpus',
      '1',
      '--gpu-model',
      'L4',
      '--gpu-model',
      'A10G',
    ];
    // The dry run and the submission both refuse it, naming the requirement, and nothing is sent.
    const dry = await cli([...l4, '--dry-run', '--', 'python', 'x.py']);
    expect(dry.code).toBe(2);
    expect(dry.stderr).toMatch(
      /the job cannot run on this fleet: no node group can hold it: no group has a GPU it names \(L4, A10G\); the groups offer p3\.16xlarge\s+\(8 V100\), p3\.2xlarge\s+\(1 V100\)/,
    );
    const anyModel = await cli([...l4.slice(0, l4.indexOf('--gpu-model')), '--dry-run', '--', 'python', 'x.py']);
    expect(anyModel.stdout).toMatch(/valid; not sent \(--dry-run\); a node group can hold it/);
    const sent = await cli([...l4, '--token', 'l4-1', '--', 'python', 'x.py']);
    expect(sent.code).toBe(2);
    expect(sent.stderr).toMatch(/the job cannot run on this fleet: no node group can hold it: .*; nothing was sent/);
    expect((await cli(['status', '--sim', dir, 'nlp.l4-1'])).code).not.toBe(0);
  });

  it('submit validates with the intake schema, prints the job id, and the same token makes one job; cancel stops it', async () => {
    const args = [
      'submit',
      '--sim',
      dir,
      '--team',
      'nlp',
      '--image',
      'pytorch/pytorch:2.3.0',
      '--gpus',
      '2',
      '--checkpoint-interval',
      '600',
      '--label',
      'project=llm-eval',
      '--token',
      'paper-1',
      '--json',
      '--',
      'python',
      'train.py',
      '--epochs',
      '3',
    ];
    const first = json<{ jobId: string; note: string }>(await cli(args));
    expect(first.jobId).toBe('nlp.paper-1');
    // A saved simulation is a snapshot: the job waits there, and the note says so.
    expect(first.note).toMatch(/a saved simulation is a snapshot whose clock does not move, so the job waits there/);
    expect(json<{ jobId: string; note: string }>(await cli(args)).note).toMatch(/already submitted with this token/);
    // The same token with another spec is refused, and the first job stands.
    const other = await cli(args.map((a) => (a === '2' ? '4' : a)));
    expect(other.code).toBe(2);
    expect(other.stderr).toContain('token "paper-1" was already used for nlp.paper-1 with a different spec');
    const job = json<{ state: string; spec: { command: string[]; labels: Record<string, string> } }>(
      await cli(['status', '--sim', dir, 'nlp.paper-1', '--json']),
    );
    expect(job).toMatchObject({
      state: 'pending',
      spec: { command: ['python', 'train.py', '--epochs', '3'], labels: { project: 'llm-eval' } },
    });
    const why = await cli(['explain', '--sim', dir, 'nlp.paper-1']);
    expect(why.stdout).toMatch(/nlp.paper-1 waits .*no reconcile has planned since it was queued/);
    expect(json<{ status: string }>(await cli(['cancel', 'nlp.paper-1', '--sim', dir, '--json'])).status).toBe('cancelled');
    expect((await cli(['cancel', 'nlp.paper-1', '--sim', dir])).stdout).toMatch(/already cancelled/);
  }, 60_000);

  it('submit from a file, and bad input exits 2 with a message that names the problem', async () => {
    const spec = join(dir, 'job.json');
    writeFileSync(spec, JSON.stringify({ image: 'pytorch/pytorch:2.3.0', command: ['python', 'x.py'], gpu: { kind: 'whole', count: 40 } }));
    const bad = await cli(['submit', '--sim', dir, '--team', 'nlp', '--file', spec]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/the job spec is not valid:\n\s+- gpu.count: must be at most 16; got 40/);
    const noTeam = await cli(['submit', '--sim', dir, '--file', spec]);
    expect(noTeam).toMatchObject({ code: 2, stderr: expect.stringMatching(/--team is required/) });
    const flag = await cli(['status', '--sim', dir, '--colour']);
    expect(flag).toMatchObject({ code: 2, stderr: expect.stringMatching(/unknown option '--colour'/) });
    const nowhere = await cli(['status', '--sim', join(dir, 'nope')]);
    expect(nowhere).toMatchObject({
      code: 2,
      stderr: expect.stringMatching(/no simulation there \(state.json is missing\); write one with: gpu-fleet simulate --out/),
    });
  }, 60_000);

  it('simulate, report, budget and status agree on every figure they share, to the micro-dollar and the second', async () => {
    const sim = JSON.parse(readFileSync(join(dir, 'summary.json'), 'utf8')) as {
      costMicroUsd: number;
      warmPoolMicroUsd?: number;
      costByTeamMicroUsd: Record<string, number>;
      checkpointBytes: { chargedMicroUsd: number; chargedByTeam: Record<string, number> };
      completed: number;
      jobTimes: { totalWaitSec: { max: number } };
    };
    const report = json<{
      totals: { paidMicroUsd: number; heldByJobsMicroUsd: number; idleMicroUsd: number; checkpointBytesMicroUsd: number };
      byTeam: { team: string; costMicroUsd: number; bytesMicroUsd: number }[];
      byProject: { costMicroUsd: number }[];
      jobs: { costMicroUsd: number }[];
    }>(await cli(['report', '--sim', dir, '--json']));
    const budget = json<{ team: string; spentMicroUsd: number }[]>(await cli(['budget', '--sim', dir, '--json']));
    const status = json<{ jobs: { state: string; jobs: number; longestTotalWaitSec: number }[] }>(
      await cli(['status', '--sim', dir, '--json']),
    );
    const sum = (xs: readonly { costMicroUsd: number }[]) => xs.reduce((a, x) => a + x.costMicroUsd, 0);
    // What was paid: the simulation's bill, the report's ledger, each team's budget spend. The ledger counts the machines
    // reconcile lists; a warm pool's machines are not listed until started, so their cost before that is the bill's alone.
    expect(sim.warmPoolMicroUsd).toBeGreaterThan(0);
    // The ledger charges the teams their checkpoint bytes too (from the agents' reports), counted apart.
    expect(sim.checkpointBytes.chargedMicroUsd).toBeGreaterThan(0);
    expect(report.totals.checkpointBytesMicroUsd).toBe(sim.checkpointBytes.chargedMicroUsd);
    expect(report.totals.paidMicroUsd + sim.warmPoolMicroUsd!).toBe(sim.costMicroUsd + sim.checkpointBytes.chargedMicroUsd);
    expect(Object.fromEntries(report.byTeam.map((t) => [t.team, t.costMicroUsd]))).toEqual(sim.costByTeamMicroUsd);
    expect(Object.fromEntries(report.byTeam.filter((t) => t.bytesMicroUsd > 0).map((t) => [t.team, t.bytesMicroUsd]))).toEqual(
      sim.checkpointBytes.chargedByTeam,
    );
    expect(budget.length).toBeGreaterThan(0);
    for (const b of budget) expect(b.spentMicroUsd).toBe(sim.costByTeamMicroUsd[b.team]);
    // What jobs held: projects and jobs add up to it, and with idle capacity to what was paid.
    expect(sum(report.byProject)).toBe(report.totals.heldByJobsMicroUsd);
    expect(sum(report.jobs)).toBe(report.totals.heldByJobsMicroUsd);
    expect(report.totals.heldByJobsMicroUsd + report.totals.idleMicroUsd + report.totals.checkpointBytesMicroUsd).toBe(
      report.totals.paidMicroUsd,
    );
    // Jobs and waits: status counts the jobs simulate finished, and the longest total wait is the same one.
    expect(status.jobs.find((j) => j.state === 'succeeded')?.jobs).toBe(sim.completed);
    expect(Math.max(...status.jobs.map((j) => j.longestTotalWaitSec))).toBe(Math.round(sim.jobTimes.totalWaitSec.max));
  }, 60_000);

  it('explain: where and why a job runs, and why the fleet changed in a decision', async () => {
    const report = json<{ jobs: { job: string; state: string; costMicroUsd: number }[] }>(await cli(['report', '--sim', dir, '--json']));
    const running = report.jobs.find((j) => j.state === 'running')!;
    // Cost so far is one figure: status --job counts the running attempt up to now, as report does.
    const status = await cli(['status', '--sim', dir, running.job]);
    expect(status.stdout).toMatch(new RegExp(`cost so far\\s+${money(running.costMicroUsd).replace(/[$.]/g, '\\$&')} for`));
    expect(status.stdout).toMatch(/(the running one up to now)/);
    const why = json<{ summary: string; details: string[]; decisionId?: string }>(
      await cli(['explain', '--sim', dir, running.job, '--json']),
    );
    expect(why.summary).toMatch(new RegExp(`^${running.job.replace('.', '\\.')} runs on i-\\w+ \\((spot|on-demand)\\)`));
    expect(why.details.join('\n')).toMatch(/its share costs \$[\d.]+\/h \(on-demand would be \$[\d.]+\/h\)/);
    const latest = json<{ id: string; plan: { actions: unknown[] } }>(
      await cli(['explain', '--sim', dir, '--decision', 'latest', '--json']),
    );
    expect(latest.id).toMatch(/^decision-/);
    const again = json<{ id: string }>(await cli(['explain', '--sim', dir, '--decision', latest.id, '--json']));
    expect(again.id).toBe(latest.id);
    const change = json<{ plan: { actions: { kind: string }[] } }>(
      await cli(['explain', '--sim', dir, '--decision', 'last-change', '--json']),
    );
    expect(change.plan.actions.some((a) => ['scale-up', 'scale-in', 'preempt', 'cancel-launches'].includes(a.kind))).toBe(true);
    const human = await cli(['explain', '--sim', dir, '--decision', 'last-change']);
    expect(human.stdout).toMatch(/Fleet changes\n {2}(scale up|remove|preempt|cancel-launches)/);
    const both = await cli(['explain', '--sim', dir]);
    expect(both).toMatchObject({
      code: 2,
      stderr: expect.stringMatching(/give one of --job ID .*, --decision latest\|last-change\|ID .* or --service TEAM\.NAME/),
    });
  }, 60_000);

  it('budget: spend this period against budget, forecast and state per team', async () => {
    const rows = json<{ team: string; spentMicroUsd: number; budgetMicroUsd: number; forecastMicroUsd: number; state: string }[]>(
      await cli(['budget', '--sim', dir, '--json']),
    );
    expect(rows.map((r) => r.team)).toEqual(['nlp', 'recsys', 'speech', 'vision']);
    for (const r of rows) {
      expect(r.spentMicroUsd).toBeGreaterThan(0);
      expect((r as unknown as { committedMicroUsd: number }).committedMicroUsd).toBeGreaterThanOrEqual(0);
      expect(r.forecastMicroUsd).toBeGreaterThanOrEqual(r.spentMicroUsd);
      expect(r.state).toBe('ok');
    }
    const one = await cli(['budget', '--sim', dir, '--team', 'nope']);
    expect(one).toMatchObject({ code: 2, stderr: expect.stringMatching(/no team nope/) });
  }, 60_000);

  it('logs: what the simulated processes wrote, attempt by attempt; --attempt, --since and --json narrow and shape it', async () => {
    const saved = JSON.parse(readFileSync(join(dir, 'jobs.json'), 'utf8')) as { id: string; attempt: number }[];
    const moved = saved.find((j) => j.attempt > 1)!;
    expect(moved).toBeDefined();
    const out = await cli(['logs', moved.id, '--sim', dir]);
    expect(out.code).toBe(0);
    const heads = out.stdout.split('\n').filter((l) => l.startsWith('── attempt'));
    expect(heads.slice(0, 2)).toEqual(['── attempt 1 ──', '── attempt 2 ──']);
    expect(out.stdout).toMatch(/\n\S+Z {2}started attempt 1 on i-[0-9a-f]+ \(p3\.\w+, (spot|on-demand)\), rank 0 of 1\n/);
    expect(out.stdout).toMatch(/started attempt 2 on .*; resuming at \d+ s of work from sim:\/\/checkpoints\//);
    const two = (await cli(['logs', moved.id, '--sim', dir, '--attempt', '2', '--json'])).stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { attempt: number; seq: number; line: string });
    expect(two.every((l) => l.attempt === 2)).toBe(true);
    expect(two.map((l) => l.seq)).toEqual(two.map((_, i) => i));
    // Since a date after the run: nothing, and it says so.
    expect((await cli(['logs', moved.id, '--sim', dir, '--since', '2030-01-01T00:00:00Z'])).stdout).toMatch(/\(no output from .* since/);
    expect(await cli(['logs', moved.id, '--sim', dir, '--since', 'yesterday'])).toMatchObject({
      code: 2,
      stderr: expect.stringMatching(/--since "yesterday" is not a time: give a duration ago \(30s, 10m, 2h, 1d\) or a date/),
    });
    expect(await cli(['logs', 'nlp.nope', '--sim', dir])).toMatchObject({ code: 2, stderr: expect.stringMatching(/no job nlp\.nope/) });
    expect(await cli(['logs', moved.id, '--sim', dir, '--attempt', '0'])).toMatchObject({
      code: 2,
      stderr: expect.stringMatching(/--attempt must be a whole number from 1 to 1000000, got "0"/),
    });
    expect((await cli(['--help'])).stdout).toMatch(/logs \[options\] <job-id>/);
  });

  it('report: cost by team, project and job, paid against held, spot savings, the trend by day; as a table, CSV and HTML', async () => {
    const r = json<{
      totals: {
        requeues: number;
        interruptions: number;
        moves: number;
        reworkGpuHours: number;
        paidMicroUsd: number;
        heldByJobsMicroUsd: number;
        idleMicroUsd: number;
        checkpointBytesMicroUsd: number;
        spotSavingsMicroUsd: number;
      };
      byTeam: { team: string; costMicroUsd: number; committedMicroUsd: number }[];
      byProject: { project: string; costMicroUsd: number }[];
      byDay: { day: string }[];
      jobs: { costMicroUsd: number; onDemandMicroUsd: number }[];
    }>(await cli(['report', '--sim', dir, '--period', '2026-11', '--json']));
    const paid = r.byTeam.reduce((a, t) => a + t.costMicroUsd, 0);
    expect(r.totals.paidMicroUsd).toBe(paid);
    expect(r.totals.paidMicroUsd).toBe(r.totals.heldByJobsMicroUsd + r.totals.idleMicroUsd + r.totals.checkpointBytesMicroUsd);
    expect(r.byTeam.map((t) => t.team)).toContain('(idle)');
    expect(r.byDay.length).toBeGreaterThan(0);
    expect(r.byProject.length).toBeGreaterThan(3);
    // Jobs' own accounts (price at placement × time held) agree with the ledger's within 5%.
    const jobsCost = r.jobs.reduce((a, j) => a + j.costMicroUsd, 0);
    expect(Math.abs(jobsCost - r.totals.heldByJobsMicroUsd) / r.totals.heldByJobsMicroUsd).toBeLessThan(0.05);
    expect(r.totals.spotSavingsMicroUsd).toBeGreaterThan(0);
    const csv = await cli(['report', '--sim', dir, '--csv']);
    expect(csv.stdout.split('\n')[0]).toBe(
      'kind,name,team,project,state,cost_usd,committed_usd,on_demand_usd,gpu_hours,spot_share,requeues,interruptions,moves,rework_gpu_hours,rework_usd,replica_losses,utilization_pct,reserved_usd,runs,rightsize_from,rightsize_to,saving_usd,peak_memory_mib,p95_utilization_pct,confidence,bytes_usd,storage_usd,requests_usd,network_usd,held_gib',
    );
    // Requeues (interruptions and moves) and rework mean what the simulation's summary means by them.
    const sim = JSON.parse(readFileSync(join(dir, 'summary.json'), 'utf8')) as { requeues: number; moves: number; reworkGpuHours: number };
    expect(r.totals).toMatchObject({ requeues: sim.requeues, moves: sim.moves, interruptions: sim.requeues - sim.moves });
    expect(r.totals.reworkGpuHours).toBeCloseTo(sim.reworkGpuHours, 2);
    expect(csv.stdout).toMatch(/\nteam,nlp,nlp,/);
    // Team rows carry the committed cost beside the spend, as `budget` and the text report do.
    const nlpRow = csv.stdout
      .split('\n')
      .find((l) => l.startsWith('team,nlp,'))!
      .split(',');
    expect(nlpRow[6]).toBe((r.byTeam.find((t) => t.team === 'nlp')!.committedMicroUsd / 1e6).toFixed(2));
    // Written into the simulation's own folder, it leaves the simulation's report.html as it was.
    const out = dir;
    const simReport = readFileSync(join(dir, 'report.html'), 'utf8');
    const human = await cli(['report', '--sim', dir, '--out', out]);
    expect(human.stdout).toMatch(/paid \(machines and checkpoint bytes\)\s+\$[\d,]+\.\d\d/);
    // Checkpoint bytes charged to the projects and jobs that saved them, and the index's count of what is held.
    expect(human.stdout).toMatch(/Checkpoint bytes: \$[\d,.]+ charged, \$[\d,.]+ of it to the jobs below/);
    expect(human.stdout).toMatch(/held: [\d.]+ GiB by the index \(the agents' reports\)/);
    expect(csv.stdout).toMatch(/\nbytes-job,[^,]+,\w+,/);
    expect(human.stdout).toMatch(/written: .*finops\.html, finops\.csv, finops\.json/);
    expect(readFileSync(join(dir, 'report.html'), 'utf8')).toBe(simReport);
    const html = readFileSync(join(out, 'finops.html'), 'utf8');
    expect(html).toMatch(/data-chart="daily"/);
    expect(html).toMatch(/data-chart="teams"/);
    expect(html).not.toMatch(/<script|https?:\/\/(?!www\.w3)/);
    expect(existsSync(join(out, 'finops.csv'))).toBe(true);
    expect(await cli(['report', '--sim', dir, '--period', '2026-13'])).toMatchObject({
      code: 2,
      stderr: expect.stringMatching(
        /--period "2026-13" is not a period: give a month \(2026-11\), a day \(2026-11-30\) or the last N days \(last-7d\)/,
      ),
    });
  }, 60_000);

  it('--help lists every command, and each command lists its flags with examples', async () => {
    const top = await cli(['--help']);
    for (const c of ['simulate', 'submit', 'status', 'explain', 'budget', 'report', 'cancel', 'reconcile', 'invoke', 'agent'])
      expect(top.stdout).toMatch(new RegExp(`\\n  ${c}\\b`));
    for (const c of ['submit', 'status', 'explain', 'budget', 'report', 'cancel']) {
      const h = await cli([c, '--help']);
      expect(h.stdout).toMatch(/--json/);
      expect(h.stdout).toMatch(/Examples:\n {2}gpu-fleet /);
    }
  }, 60_000);
});

describe('gpu-fleet for people, against AWS (DynamoDB by dynalite, SQS by fauxqs)', () => {
  let db: LocalDynamo;
  let tables: TableNames;
  let sqs: Awaited<ReturnType<typeof startSqs>>;
  let autoscaling: Server;
  let tagging: Server;
  let env: NodeJS.ProcessEnv;

  beforeAll(async () => {
    db = await startDynalite();
    tables = await db.createTables();
    sqs = await startSqs();
    for (const t of ['nlp', 'vision']) await sqs.sqs.send(new CreateQueueCommand({ QueueName: `gpu-fleet-team-${t}` }));
    // Auto Scaling answers (Query protocol): no managed groups, as recorded.
    const empty = readFileSync(join(root, 'test/fixtures/api/aws/autoscaling-DescribeAutoScalingGroups-empty.xml'), 'utf8');
    autoscaling = createServer((req, res) => {
      req.resume();
      req.on('end', () => res.writeHead(200, { 'content-type': 'text/xml' }).end(empty));
    });
    await new Promise<void>((r) => autoscaling.listen(0, '127.0.0.1', r));
    // Resource Groups Tagging API (JSON 1.1): the team queues' tags, in the recorded response's shape.
    const recorded = JSON.parse(readFileSync(join(root, 'test/fixtures/api/aws/tagging-GetResources-recorded.json'), 'utf8')) as {
      ResourceTagMappingList: unknown[];
    };
    tagging = createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        const body = {
          ...recorded,
          ResourceTagMappingList: [
            {
              ResourceARN: 'arn:aws:sqs:us-east-1:123456789012:gpu-fleet-team-nlp',
              Tags: [
                { Key: 'gpu-fleet:team', Value: 'nlp' },
                { Key: 'gpu-fleet:budget-usd', Value: '2500' },
                { Key: 'gpu-fleet:budget-action', Value: 'spot-only' },
              ],
            },
            {
              ResourceARN: 'arn:aws:sqs:us-east-1:123456789012:gpu-fleet-team-vision',
              Tags: [
                { Key: 'gpu-fleet:team', Value: 'vision' },
                { Key: 'gpu-fleet:budget-usd', Value: 'lots' },
              ],
            },
          ],
        };
        res.writeHead(200, { 'content-type': 'application/x-amz-json-1.1' }).end(JSON.stringify(body));
      });
    });
    await new Promise<void>((r) => tagging.listen(0, '127.0.0.1', r));
    env = {
      ...process.env,
      AWS_REGION: 'us-east-1',
      AWS_ACCESS_KEY_ID: 'test',
      AWS_SECRET_ACCESS_KEY: 'test',
      AWS_ENDPOINT_URL_DYNAMODB: db.endpoint,
      AWS_ENDPOINT_URL_SQS: sqs.server.address,
      AWS_ENDPOINT_URL_AUTO_SCALING: `http://127.0.0.1:${(autoscaling.address() as AddressInfo).port}`,
      AWS_ENDPOINT_URL_RESOURCE_GROUPS_TAGGING_API: `http://127.0.0.1:${(tagging.address() as AddressInfo).port}`,
      GPU_FLEET_JOBS_TABLE: tables.jobs,
      GPU_FLEET_NODES_TABLE: tables.nodes,
      GPU_FLEET_CONTROL_TABLE: tables.control,
      GPU_FLEET_TEAM_QUEUE_PREFIX: 'gpu-fleet-team-',
      AWS_MAX_ATTEMPTS: '1',
    };
  }, 60_000);

  afterAll(async () => {
    await sqs?.close();
    await db?.close();
    await new Promise((r) => autoscaling?.close(r));
    await new Promise((r) => tagging?.close(r));
  });

  it('submit sends the spec to the team queue with its idempotency token, and prints the job id intake will use', async () => {
    const out = await cli(
      ['submit', '--team', 'nlp', '--image', 'pytorch/pytorch:2.3.0', '--gpus', '1', '--token', 'run-7', '--', 'python', 'train.py'],
      env,
    );
    expect(out.code).toBe(0);
    expect(out.stdout.split('\n')[0]).toBe('nlp.run-7');
    const { QueueUrl } = await sqs.sqs.send(new GetQueueUrlCommand({ QueueName: 'gpu-fleet-team-nlp' }));
    const got = await sqs.sqs.send(new ReceiveMessageCommand({ QueueUrl, MessageAttributeNames: ['All'], WaitTimeSeconds: 1 }));
    expect(got.Messages).toHaveLength(1);
    expect(got.Messages![0]!.MessageAttributes!['gpu-fleet-token']!.StringValue).toBe('run-7');
    expect(JSON.parse(got.Messages![0]!.Body!)).toMatchObject({
      image: 'pytorch/pytorch:2.3.0',
      command: ['python', 'train.py'],
      gpu: { kind: 'whole', count: 1 },
    });
    const noQueue = await cli(['submit', '--team', 'speech', '--image', 'pytorch/pytorch:2.3.0', '--', 'python', 'x.py'], env);
    expect(noQueue.code).not.toBe(0);
    expect(noQueue.stderr).toMatch(/speech/);
  }, 60_000);

  it("budget reads the teams' tags through the tagging API: a bad amount holds the team and is reported", async () => {
    const rows = json<{ team: string; state: string; budgetMicroUsd?: number; action?: string; tagProblems: string[] }[]>(
      await cli(['budget', '--json'], env),
    );
    expect(rows.map((r) => [r.team, r.state, r.budgetMicroUsd, r.action])).toEqual([
      ['nlp', 'ok', 2_500_000_000, 'spot-only'],
      ['vision', 'hold', undefined, undefined],
    ]);
    expect(rows[1]!.tagProblems.join(' ')).toMatch(/gpu-fleet:budget-usd="lots" is not a dollar amount/);
    const human = await cli(['budget'], env);
    expect(human.stdout).toMatch(/Tag problems .*\n\s+vision: gpu-fleet:budget-usd="lots"/);
  }, 60_000);

  it('status, explain and cancel read and change the jobs in DynamoDB', async () => {
    const stores = dynamoStores(db.doc, tables, 'bucket');
    await intake(
      { jobs: stores.jobs, clock: { nowMs: () => Date.now() - 120_000 } },
      {
        team: 'vision',
        token: 'big',
        body: JSON.stringify({ image: 'pytorch/pytorch:2.3.0', command: ['python', 'train.py'], gpu: { kind: 'whole', count: 8 } }),
      },
    );
    const s = json<{
      jobs: { state: string; jobs: number }[];
      pending: { id: string; waitingSec: number }[];
      groups: unknown[];
      queues: { team: string }[];
    }>(await cli(['status', '--json'], env));
    expect(s.jobs).toEqual([expect.objectContaining({ state: 'pending', jobs: 1 })]);
    expect(s.pending[0]).toMatchObject({ id: 'vision.big' });
    expect(s.pending[0]!.waitingSec).toBeGreaterThanOrEqual(110);
    expect(s.groups).toEqual([]);
    expect(s.queues.map((q) => q.team)).toEqual(['nlp', 'vision']);
    expect((await cli(['explain', 'vision.big'], env)).stdout).toMatch(/vision.big waits \(2\.\d min\); no reconcile has planned/);
    expect((await cli(['cancel', 'vision.big'], env)).stdout).toMatch(/vision.big cancelled \(it had not started\)/);
    expect((await stores.jobs.get('vision.big'))!.state).toBe('cancelled');
    const report = json<{ notes: string[]; totals: { paidMicroUsd: number } }>(await cli(['report', '--period', 'last-7d', '--json'], env));
    expect(report.totals.paidMicroUsd).toBe(0);
    expect(report.notes.join(' ')).toMatch(/no spend counted in this period/);
  }, 60_000);
});

describe('gpu-fleet report: right-sizing, on a simulation whose processes use a scripted share of their GPUs', () => {
  const dir = mkdtempSync(join(tmpdir(), 'gpu-fleet-sim-rs-'));
  beforeAll(async () => {
    const out = await cli(['simulate', '--rightsizing', 'suggest', '--hours', '8', '--no-baselines', '--no-progress', '--out', dir]);
    expect(out.code).toBe(0);
  }, 120_000);
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('families whose measured use fits a slice: the shape, the saving at the prices they ran at and the confidence, in JSON, CSV, table and HTML', async () => {
    const r = json<{
      rightsizing: {
        scope: string;
        family: string;
        runs: number;
        from: string;
        to: string;
        kind: string;
        peakMemoryMiB: number;
        needMemoryMiB: number;
        costMicroUsd: number;
        savingMicroUsd: number;
        confidence: string;
        jobs: string[];
      }[];
    }>(await cli(['report', '--sim', dir, '--period', '2026-11', '--json']));
    expect(r.rightsizing.length).toBeGreaterThan(3);
    for (const x of r.rightsizing) {
      // Only the oversized families (3–7 GiB of an A100 40GB) are found, each with a MIG slice that holds its peak and margin.
      expect(x).toMatchObject({ from: '1 × A100-40GB', kind: 'mig' });
      expect(x.peakMemoryMiB).toBeLessThanOrEqual(7 * 1024);
      expect(x.needMemoryMiB).toBeGreaterThanOrEqual(x.peakMemoryMiB + 1024);
      expect(x.savingMicroUsd).toBeGreaterThan(0);
      expect(x.savingMicroUsd).toBeLessThan(x.costMicroUsd);
      expect(x.scope).toBe(x.runs > 1 ? 'family' : 'job');
      expect(x.jobs).toHaveLength(x.runs);
    }
    expect(r.rightsizing.some((x) => x.confidence === 'high')).toBe(true);
    const csv = (await cli(['report', '--sim', dir, '--period', '2026-11', '--csv'])).stdout.split('\n');
    const rows = csv.filter((l) => l.startsWith('rightsizing,'));
    expect(rows).toHaveLength(r.rightsizing.length);
    const first = r.rightsizing[0]!;
    expect(rows[0]).toContain(
      `,${first.runs},1 × A100-40GB,${first.to},${(first.savingMicroUsd / 1e6).toFixed(2)},${first.peakMemoryMiB},`,
    );
    const text = (await cli(['report', '--sim', dir, '--period', '2026-11'])).stdout;
    expect(text).toMatch(/Right-sizing: \$[\d,.]+ of \$[\d,.]+ saved had these run in the shape their measured use needs/);
    const out = mkdtempSync(join(tmpdir(), 'gpu-fleet-rs-html-'));
    await cli(['report', '--sim', dir, '--period', '2026-11', '--out', out]);
    const html = readFileSync(join(out, 'finops.html'), 'utf8');
    expect(html).toContain('<h2>Right-sizing</h2>');
    expect((html.match(/<tr title=/g) ?? []).length).toBe(Math.min(50, r.rightsizing.length));
    // A job's own record says what it could have run in, and what its agent measured.
    const shown = (await cli(['status', '--sim', dir, first.jobs[0]!])).stdout;
    expect(shown).toMatch(/right-sizing \(suggest\)\s+(suggested|kept)/);
    expect(shown).toMatch(/GPU use measured\s+attempt \d+: peak [\d.]+ of 40\.0 GiB, utilisation [\d.]+% mean, \d+% p95/);
  }, 120_000);
});
