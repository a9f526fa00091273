import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { cliInProcess } from '../support/cli-in-process.ts';

const run = promisify(execFile);
const root = fileURLToPath(new URL('../..', import.meta.url));
const bin = fileURLToPath(new URL('../../bin/gpu-fleet.js', import.meta.url));

/** The installed command, a child process: what a person runs (bin/gpu-fleet.js), for the tests about the process itself. */
async function binCli(args: string[], env: NodeJS.ProcessEnv = process.env): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const { stdout, stderr } = await run(process.execPath, [bin, ...args], { cwd: root, timeout: 60_000, env });
    return { code: 0, stdout, stderr };
  } catch (error) {
    const e = error as { code: number; stdout: string; stderr: string };
    return { code: e.code, stdout: e.stdout, stderr: e.stderr };
  }
}

/** The rest in-process (test/support/cli-in-process.ts): each child process spends seconds starting. */
const cli = (args: string[], env?: NodeJS.ProcessEnv) => cliInProcess(args, env);

describe('gpu-fleet command', () => {
  it('simulates the built-in trace and prints a JSON summary', async () => {
    const { code, stdout } = await cli(['simulate', '--hours', '2', '--max-jobs', '40', '--seed', '3', '--json']);
    expect(code).toBe(0);
    const summary = JSON.parse(stdout);
    expect(summary).toMatchObject({ policy: 'gpu-fleet', seed: 3, jobs: 40, lost: 0 });
    for (const key of ['completed', 'gpuHoursUsed', 'gpuHoursPaid', 'costMicroUsd', 'onDemandCostMicroUsd', 'p50WaitSec', 'p95WaitSec'])
      expect(summary).toHaveProperty(key);
    // Cost beside its two yardsticks: the spot floor ≤ the lower bound that respects spot availability ≤ the cost.
    expect(summary.spotFloorCostMicroUsd).toBeLessThanOrEqual(summary.lowerBoundCostMicroUsd);
    expect(summary.lowerBoundCostMicroUsd).toBeLessThanOrEqual(summary.costMicroUsd);
    expect(summary).not.toHaveProperty('idealCostMicroUsd');
    // First wait, total wait over all attempts and attempts per job; the slowdown against the same jobs all on-demand.
    expect(summary.jobTimes.totalWaitSec.max).toBeGreaterThanOrEqual(summary.jobTimes.totalWaitSec.p99);
    expect(summary.jobTimes.attempts.max).toBeGreaterThanOrEqual(1);
    expect(summary.slowdownVsOnDemand.jobs).toBeGreaterThan(0);
    expect(summary.baselines['on-demand']).not.toHaveProperty('slowdownVsOnDemand');
  });

  it('replays the baselines on worker threads with the same figures as one after another', async () => {
    const args = ['simulate', '--hours', '2', '--max-jobs', '30', '--seed', '2', '--json'];
    const apart = await cli(args, { ...process.env, GPU_FLEET_SIM_THREADS: '4' });
    const inTurn = await cli(args, { ...process.env, GPU_FLEET_SIM_THREADS: '1' });
    expect([apart.code, inTurn.code]).toEqual([0, 0]);
    // Everything but the wall times.
    const figures = (out: string) => JSON.stringify(JSON.parse(out), (key, v: unknown) => (key === 'wallMs' ? undefined : v));
    const a = JSON.parse(apart.stdout) as { baselines: Record<string, unknown> };
    expect(Object.keys(a.baselines).sort()).toEqual(['cheapest-fit', 'on-demand', 'spot-greedy']);
    expect(figures(apart.stdout)).toBe(figures(inTurn.stdout));
  }, 60_000);

  it('prints a table for people', async () => {
    const { code, stdout } = await cli(['simulate', '--hours', '1', '--max-jobs', '10']);
    expect(code).toBe(0);
    expect(stdout).toMatch(/GPU-hours paid\s+[\d,.]+ GPU-h/);
    // The wall time of the whole command, not only the main policy's replay.
    expect(stdout).toMatch(
      /^simulated time {2}1 h, jobs arriving over the first [\d.]+ (s|min|h); wall [\d.]+ s \([\d.]+ s for all 4 policies\)$/m,
    );
    expect(stdout).toMatch(/all on-demand \(baseline run, whole bill\)\s+\$[\d,]+\.\d\d/);
    // The whole bill, in its parts, with the headline ratio on it beside the machines-only one.
    expect(stdout).toMatch(/^total\s+\$[\d,]+\.\d\d$/m);
    for (const part of ['GPU machines', 'checkpoint storage', 'checkpoint network', 'checkpoint requests'])
      expect(stdout).toMatch(new RegExp(`^  ${part}.*\\$[\\d,]+\\.\\d\\d$`, 'm'));
    expect(stdout).toMatch(/whole bill ÷ all on-demand\s+[\d.]+×/);
    expect(stdout).toMatch(/GPU machines ÷ all on-demand machines\s+[\d.]+×/);
    expect(stdout).toMatch(/first wait \(submit to first start\) p50 \/ p95/);
    expect(stdout).toMatch(/total wait \(all attempts\) p50 \/ p95 \/ p99 \/ max/);
    expect(stdout).toMatch(/attempts per job p50 \/ p99 \/ max\s+\d+ \/ \d+ \/ \d+/);
    expect(stdout).toMatch(/completion ÷ all on-demand \(mean \/ p95 \/ p99\)\s+[\d.]+×/);
    expect(stdout).toMatch(/cost ÷ lower bound\s+[\d.]+×/);
    expect(stdout).toMatch(/cost ÷ spot floor\s+[\d.]+×/);
    // The three baselines ran on the same trace and seed.
    for (const policy of ['gpu-fleet', 'on-demand', 'spot-greedy', 'cheapest-fit'])
      expect(stdout).toMatch(new RegExp(`^${policy}\\s+\\$`, 'm'));
    // Every line fits a 120-column terminal (the services' loads are wrapped on purpose).
    expect(stdout.split('\n').filter((l) => l.length > 120)).toEqual([]);
  });

  it('exits 2 with a message that names the problem for bad flags', async () => {
    const bad = await cli(['simulate', '--seed', 'abc']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('--seed must be a whole number from 0 to 2147483647, got "abc"');
    const missing = await cli(['simulate', '--trace', '/no/such.csv']);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toContain('--trace: no such file /no/such.csv');
    const unknown = await cli(['simulate', '--frobnicate']);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain("unknown option '--frobnicate'");
    // The error, the command's usage line and where its options are: not the whole help.
    expect(unknown.stderr.trim().split('\n')).toEqual([
      "error: unknown option '--frobnicate'",
      'usage: gpu-fleet simulate [options]',
      '(gpu-fleet simulate --help lists the options)',
    ]);
    const faults = await cli(['simulate', '--faults', 'meteor']);
    expect(faults.code).toBe(2);
    expect(faults.stderr).toContain(
      '--faults: unknown fault profile "meteor"; profiles: none, api-errors, cloud-outage, spot-stockout, crash-mid-apply, duplicate-reorder, interruption-storm, dead-agents, agent-dies, checkpoint-failures, store-conflicts, slow-uploads, upload-failures, agent-api-outage, agent-api-throttling, eventual-consistency, redelivery, asg-terminations, gang-rank-failure, hung-replicas, all',
    );
  });

  it('runs under a fault profile and says what it injected', async () => {
    const { code, stdout } = await cli([
      'simulate',
      '--hours',
      '3',
      '--max-jobs',
      '60',
      '--no-baselines',
      '--faults',
      'store-conflicts',
      '--json',
    ]);
    expect(code).toBe(0);
    const s = JSON.parse(stdout);
    expect(s).toMatchObject({ lost: 0, duplicated: 0, violations: 0, faults: { profile: 'store-conflicts' } });
    expect(s.faults.storeConflicts).toBeGreaterThan(0);
  });

  it('prints a GCE startup script that installs the agent only when given all it needs, saying what is missing', async () => {
    const agent = [
      '--agent-bundle',
      'gs://ml-prod-fleet/agent/gpu-fleet-agent.mjs',
      '--api-url',
      'https://abc123.lambda-url.us-west-2.on.aws/',
      '--audience',
      'gpu-fleet/GpuFleet/agent-api',
      '--region',
      'us-west-2',
      '--checkpoint-bucket',
      'gpu-fleet-checkpoints-123',
      '--checkpoint-store',
      'gs://ml-prod-fleet-us-central1/checkpoints/',
    ];
    const full = await cli(['gcp-startup-script', ...agent]);
    expect(full.code, full.stderr).toBe(0);
    expect(full.stdout).toContain('GPU_FLEET_AGENT_API_AUDIENCE=gpu-fleet/GpuFleet/agent-api');
    expect(full.stdout).toContain('--checkpoint-store gs://ml-prod-fleet-us-central1/checkpoints/');
    const walls = await cli(['gcp-startup-script']);
    expect(walls.code).toBe(0);
    expect(walls.stdout).not.toContain('systemctl restart gpu-fleet-agent.service');
    const partial = await cli(['gcp-startup-script', ...agent.slice(0, 4)]);
    expect(partial.code).not.toBe(0);
    expect(partial.stderr).toContain('to install the agent, also give --audience, --region, --checkpoint-bucket, --checkpoint-store');
    const bad = await cli(['gcp-startup-script', ...agent.slice(0, -1), 'gs://no-slash']);
    expect(bad.stderr).toContain('--checkpoint-store must be gs://bucket/prefix/ (ending in "/"); got "gs://no-slash"');
  });

  it('prints its version with --version (and -V)', async () => {
    const version = (JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }).version;
    for (const flag of ['--version', '-V']) expect(await binCli([flag])).toEqual({ code: 0, stdout: `${version}\n`, stderr: '' });
  });

  it('lists every command with --help', async () => {
    const { code, stdout } = await cli(['--help']);
    expect(code).toBe(0);
    expect(stdout).toContain('simulate');
    // A first look and the exit codes every command keeps to.
    expect(stdout).toMatch(/^Examples:\n {2}gpu-fleet simulate /m);
    expect(stdout).toMatch(
      /^Exit codes \(every command\):\n {2}0 {2}done\n {2}1 {2}the world refused or failed.*\n {2}2 {2}a mistake in the command/m,
    );
  });

  it('an AWS command that fails says one line, without the SDK notice about its future Node versions', async () => {
    const env: NodeJS.ProcessEnv = {
      ...process.env,
      AWS_ENDPOINT_URL: 'http://127.0.0.1:9',
      AWS_ACCESS_KEY_ID: 'x',
      AWS_SECRET_ACCESS_KEY: 'x',
      AWS_REGION: 'us-west-2',
      AWS_MAX_ATTEMPTS: '1',
    };
    // The child sees the environment a user has: without the test runner's switch.
    delete env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED;
    const out = await binCli(['status'], env);
    expect(out.code).toBe(1);
    expect(out.stderr).not.toMatch(/NodeVersionSupportWarning/);
    expect(out.stderr.trim().split('\n')).toEqual([expect.stringMatching(/^gpu-fleet: describe stack on GpuFleet failed: .*ECONNREFUSED/)]);
  });

  // A child process: the handler's log and metric lines are Powertools', written to the process's own stdout and stderr.
  it("invoke prints only the result; the handler's own log and metric lines only with --verbose (on stderr); --state still works, with a notice", async () => {
    const dir = mkdtempSync(join(tmpdir(), 'gpu-fleet-invoke-'));
    // The child as a user runs it: Powertools' metrics on, as in a deployment.
    const env: NodeJS.ProcessEnv = { ...process.env };
    delete env.POWERTOOLS_METRICS_DISABLED;
    delete env.POWERTOOLS_LOG_LEVEL;
    const quiet = await binCli(['invoke', 'reconcile', '--sim', dir, '--json'], env);
    expect(quiet.code).toBe(0);
    expect(quiet.stderr).toBe('');
    expect(JSON.parse(quiet.stdout)).toMatchObject({ result: { status: 'done' }, notes: [`simulated world saved to ${dir}`] });
    const verbose = await binCli(['invoke', 'reconcile', '--sim', dir, '--json', '--verbose'], env);
    expect(JSON.parse(verbose.stdout)).toMatchObject({ result: { status: 'done' } });
    expect(verbose.stderr).toMatch(/"CloudWatchMetrics"/);
    const old = await binCli(['invoke', 'reconcile', '--state', dir, '--json'], env);
    expect(old.code).toBe(0);
    expect(old.stderr).toBe('gpu-fleet: --state is now --sim, as in every other command; --state goes in the next release\n');
    expect(JSON.parse(old.stdout)).toMatchObject({ notes: [`simulated world loaded from ${dir}`, `simulated world saved to ${dir}`] });
  });

  it('simulates a trace of teams of its own: the built-in services run in its teams, said in one line', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'gpu-fleet-trace-'));
    const trace = join(dir, 'mine.csv');
    writeFileSync(trace, 'job_id,submit_s,duration_s,gpus,gpu_type,team,status\nj1,0,600,1,V100,alpha,Pass\nj2,60,1200,1,V100,beta,Pass\n');
    const out = await cli(['simulate', '--trace', trace, '--hours', '1', '--no-baselines', '--no-progress', '--json']);
    expect(out.code).toBe(0);
    expect(out.stderr).toBe(
      'gpu-fleet: the trace lacks the teams of some built-in services; they run in its teams: nlp.chat → alpha.chat, recsys.recommend → beta.recommend (--no-services leaves them out)\n',
    );
    const summary = JSON.parse(out.stdout) as { accepted: number; services: { id: string }[] };
    expect(summary.accepted).toBe(2);
    expect(summary.services.map((x) => x.id)).toEqual(['alpha.chat', 'beta.recommend']);
  });
});
