import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { CloudWatchLogsClient } from '@aws-sdk/client-cloudwatch-logs';
import parsePrometheusTextFormat from 'parse-prometheus-text-format';
import { serveMetrics } from '../../agent/cli.ts';
import { AwsImds } from '../../agent/metadata.ts';
import { CloudWatchJobLogs } from '../../cloud/aws/cloudwatch-logs.ts';
import { FakeCloudWatchLogs } from '../../bench/support/fake-logs.ts';
import { DEFAULT_POLICY } from '../../core/snapshot.ts';
import { handleNotice } from '../../core/services/interruption.ts';
import { applyJobEvent } from '../../core/services/job-updates.ts';
import { MemoryJobLogs, MemoryPoolHistory } from '../../cloud/sim/memory-stores.ts';
import { reason } from '../../core/reason.ts';
import { agentWorld, CHATTY_JOB, COUNTER_JOB, RecordingServiceSink, RecordingSink, REPLICA_JOB, waitFor } from '../support/agent-world.ts';
import { createServer } from 'node:net';
import { awsInstance, IMDS_BODIES, startMetadataServer, type MetadataServer } from '../support/metadata-server.ts';

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});
function world() {
  const w = agentWorld();
  cleanups.push(() => w.shutdown());
  return w;
}
async function imds(instanceId: string): Promise<MetadataServer> {
  const s = await startMetadataServer('aws', awsInstance(instanceId));
  cleanups.push(() => s.close());
  return s;
}
function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer().listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as { port: number };
      srv.close(() => resolve(port));
    });
    srv.on('error', reject);
  });
}
const dir = (name: string) => mkdtempSync(join(tmpdir(), `${name}-`));

describe('node agent: running placed jobs as real processes', () => {
  it('registers its GPUs, starts the job placed on it with its GPU, and reports success', async () => {
    const w = world();
    const work = dir('agent-a');
    const a = w.agent('i-a', { workDir: work });
    await a.heartbeat();
    expect(await w.nodes.get('i-a')).toMatchObject({
      groupId: 'g4dn-spot',
      healthy: true,
      gpus: [{ index: 0, model: 'T4', memoryMiB: 15360, uuid: 'GPU-d37e67a5-91dd-3774-a5cb-99096249601a' }],
    });

    await w.submit('nlp.j1', { command: ['node', COUNTER_JOB, '10', '10'] });
    await w.place('nlp.j1', ['i-a']);
    await a.heartbeat();
    expect((await w.jobs.get('nlp.j1'))!.state).toBe('running');
    expect(a.running()).toEqual([expect.objectContaining({ jobId: 'nlp.j1', attempt: 1, rank: 0 })]);

    const done = await waitFor('the job to succeed', async () =>
      (await w.jobs.get('nlp.j1'))!.state === 'succeeded' ? (await w.jobs.get('nlp.j1'))! : undefined,
    );
    expect(done.exitCode).toBe(0);
    const out = w.output(work, 'nlp.j1', 1);
    expect(out[0]).toMatchObject({
      event: 'start',
      job: 'nlp.j1',
      attempt: '1',
      step: 0,
      devices: 'GPU-d37e67a5-91dd-3774-a5cb-99096249601a',
      rank: '0',
    });
    expect(out.at(-1)).toMatchObject({ event: 'done', step: 10 });
    expect((await w.nodes.get('i-a'))!.assigned).toEqual({}); // the work list is cleaned
    expect(a.running()).toEqual([]);
  });

  it('sends what an attempt writes as it writes it, up to the lines written just before its process is killed', async () => {
    const w = world();
    const logs = new MemoryJobLogs();
    const work = dir('agent-logs');
    const a = w.agent('i-a', { workDir: work, jobLogs: logs, config: { logsSec: 0.05, stopGraceSec: 1 } });
    await a.start();
    await w.submit('nlp.chatty', { command: ['node', CHATTY_JOB, '5'], checkpoint: undefined, labels: { project: 'ranking' } });
    await w.place('nlp.chatty', ['i-a']);
    await a.heartbeat();
    // Lines arrive while it runs.
    await waitFor('lines while it runs', async () => ((await logs.read('nlp.chatty')).length > 20 ? true : undefined));
    // Cancelled: SIGTERM (which it ignores, and says so), then SIGKILL after the grace.
    await applyJobEvent(w.jobs, 'nlp.chatty', { type: 'cancel' }, Date.now());
    await a.heartbeat();
    await a.settled();
    await waitFor('the last lines', async () =>
      (await logs.read('nlp.chatty')).some((l) => l.line.startsWith('got SIGTERM')) ? true : undefined,
    );
    await a.stop();
    const shipped = await logs.read('nlp.chatty');
    const written = readFileSync(join(work, 'jobs', 'nlp.chatty', 'attempt-1', 'output.log'), 'utf8')
      .split('\n')
      .filter(Boolean);
    // Every line the process wrote, in order, stderr's too, the last one written before the kill included.
    expect(shipped.map((l) => l.line)).toEqual(written);
    expect(shipped[0]).toMatchObject({ attempt: 1, rank: 0, seq: 0, line: 'starting (this line is on stderr)' });
    expect(shipped.at(-1)!.line).toBe(written.at(-1));
    expect(shipped.map((l) => l.seq)).toEqual(shipped.map((_, i) => i));
  });

  it('the output of a killed process is readable afterwards in CloudWatch Logs (the real client, a local server)', async () => {
    const w = world();
    const fake = await new FakeCloudWatchLogs(['/gpu-fleet/GpuFleet/jobs']).start();
    cleanups.push(() => fake.stop());
    const client = new CloudWatchLogsClient({
      region: 'us-west-2',
      endpoint: fake.endpoint,
      credentials: { accessKeyId: 'x', secretAccessKey: 'x' },
    });
    const logs = new CloudWatchJobLogs(client, '/gpu-fleet/GpuFleet/jobs');
    const work = dir('agent-cwl');
    const a = w.agent('i-a', { workDir: work, jobLogs: logs, config: { logsSec: 0.05, stopGraceSec: 1 } });
    await a.start();
    await w.submit('nlp.killed', { command: ['node', CHATTY_JOB, '5'], checkpoint: undefined, labels: { project: 'ranking' } });
    await w.place('nlp.killed', ['i-a']);
    await a.heartbeat();
    await waitFor('lines in CloudWatch Logs', async () => ((await logs.read('nlp.killed')).length > 10 ? true : undefined));
    await applyJobEvent(w.jobs, 'nlp.killed', { type: 'cancel' }, Date.now());
    await a.heartbeat();
    await a.settled();
    await waitFor('the last lines', async () =>
      (await logs.read('nlp.killed')).some((l) => l.line.startsWith('got SIGTERM')) ? true : undefined,
    );
    await a.stop();
    const written = readFileSync(join(work, 'jobs', 'nlp.killed', 'attempt-1', 'output.log'), 'utf8')
      .split('\n')
      .filter(Boolean);
    expect((await logs.read('nlp.killed')).map((l) => l.line)).toEqual(written);
    // Its team and labels are fields of every event.
    const stream = fake.groups.get('/gpu-fleet/GpuFleet/jobs')!.get('nlp.killed/1/0')!;
    expect(JSON.parse(stream[0]!.message)).toMatchObject({
      job: 'nlp.killed',
      attempt: 1,
      rank: 0,
      team: 'nlp',
      labels: { project: 'ranking' },
    });
  });

  it('reports a failing job with its exit code', async () => {
    const w = world();
    const a = w.agent('i-a');
    await a.heartbeat();
    await w.submit('nlp.bad', { command: ['node', COUNTER_JOB, '3', '10'], env: { EXIT_CODE: '3' } });
    await w.place('nlp.bad', ['i-a']);
    await a.heartbeat();
    const job = await waitFor('the job to fail', async () =>
      (await w.jobs.get('nlp.bad'))!.state === 'failed' ? (await w.jobs.get('nlp.bad'))! : undefined,
    );
    expect(job.exitCode).toBe(3);
  });

  it('a program that cannot be started fails with 127, as a shell would say', async () => {
    const w = world();
    const a = w.agent('i-a');
    await a.heartbeat();
    await w.submit('nlp.nope', { command: ['/nonexistent/train', '--epochs', '3; rm -rf /'] });
    await w.place('nlp.nope', ['i-a']);
    await a.heartbeat();
    const job = await waitFor('the job to fail', async () =>
      (await w.jobs.get('nlp.nope'))!.state === 'failed' ? (await w.jobs.get('nlp.nope'))! : undefined,
    );
    expect(job.exitCode).toBe(127);
  });

  it('stops a job that is cancelled (one without checkpoints at once) and records it cancelled', async () => {
    const w = world();
    const a = w.agent('i-a');
    await a.heartbeat();
    await w.submit('nlp.long', { command: ['node', COUNTER_JOB, '100000', '20'], checkpoint: undefined });
    await w.place('nlp.long', ['i-a']);
    await a.heartbeat();
    const pid = a.running()[0]!.pid!;
    await applyJobEvent(w.jobs, 'nlp.long', { type: 'cancel' }, Date.now());
    await a.heartbeat();
    expect((await w.jobs.get('nlp.long'))!.state).toBe('cancelled');
    expect(() => process.kill(pid, 0)).toThrow(); // the process is gone
  });

  it('checkpoints a cancelled job that can, then stops it and records it cancelled (not requeued)', async () => {
    const w = world();
    const a = w.agent('i-a');
    await a.heartbeat();
    // No periodic checkpoint: the one found is the one taken on cancel.
    await w.submit('nlp.cancel-me', { command: ['node', COUNTER_JOB, '100000', '20', '0'] });
    await w.place('nlp.cancel-me', ['i-a']);
    await a.heartbeat();
    const pid = a.running()[0]!.pid!;
    await new Promise((r) => setTimeout(r, 300));
    await applyJobEvent(w.jobs, 'nlp.cancel-me', { type: 'cancel' }, Date.now());
    await a.heartbeat();
    await a.settled();
    const job = (await w.jobs.get('nlp.cancel-me'))!;
    expect(job).toMatchObject({ state: 'cancelled', attempt: 1 });
    expect(job.checkpoint).toMatchObject({ attempt: 1 });
    expect(job.checkpoint!.progressSec).toBeGreaterThan(0);
    expect(() => process.kill(pid, 0)).toThrow();
  });

  it('stops its process when the control plane has moved the attempt on (no two attempts run at once)', async () => {
    const w = world();
    const a = w.agent('i-a');
    await a.heartbeat();
    await w.submit('nlp.moved', { command: ['node', COUNTER_JOB, '100000', '20'] });
    await w.place('nlp.moved', ['i-a']);
    await a.heartbeat();
    const pid = a.running()[0]!.pid!;
    // Reconcile thought the node lost and requeued the attempt.
    await applyJobEvent(w.jobs, 'nlp.moved', { type: 'requeue', attempt: 1, reason: reason('node-lost', 'missed heartbeats') }, Date.now());
    await a.heartbeat();
    expect(a.running()).toEqual([]);
    expect(() => process.kill(pid, 0)).toThrow();
    expect(await w.jobs.get('nlp.moved')).toMatchObject({ state: 'pending', attempt: 2 });
    expect((await w.nodes.get('i-a'))!.assigned).toEqual({});
  });

  it("publishes each GPU's readings with its instance and node group", async () => {
    const w = world();
    const sink = new RecordingSink();
    const a = w.agent('i-h200', { fixture: { capture: 'linux-x86_64__nvidia-h200__590.48.01', phase: 'load' }, metrics: sink });
    await a.publishMetrics();
    expect(sink.samples).toEqual([
      {
        instanceId: 'i-h200',
        groupId: 'g4dn-spot',
        gpuIndex: 0,
        utilizationPct: 100,
        memoryUsedMiB: 32362,
        powerDrawW: 627.32,
        temperatureC: expect.any(Number),
        uncorrectableEccErrors: 0,
        atMs: expect.any(Number),
      },
    ]);
  });

  it('reads a running replica’s own metrics endpoint and publishes its load figures by service, beside the GPU readings', async () => {
    const w = world();
    const gpu = new RecordingSink();
    const load = new RecordingServiceSink();
    const a = w.agent('i-a', { metrics: gpu, serviceMetrics: load });
    await a.heartbeat();
    const port = await freePort();
    await w.submit('nlp.chat-r1', {
      name: 'chat',
      command: ['node', REPLICA_JOB, String(port), '7', '3'],
      checkpoint: undefined,
      labels: { 'gpu-fleet/service': 'nlp.chat' },
      service: {
        port,
        replicas: { min: 1, max: 4 },
        targets: [
          { metric: 'waiting-requests', perReplica: 6 },
          { metric: 'running-requests', perReplica: 8 },
        ],
      },
    });
    await w.place('nlp.chat-r1', ['i-a']);
    await a.heartbeat();
    // Wait until the replica answers, as the load balancer's health check would.
    await waitFor('the replica to listen', async () => (await fetch(`http://127.0.0.1:${port}/health`).catch(() => undefined))?.ok);
    await a.publishMetrics();
    expect(gpu.samples).toHaveLength(1);
    expect(load.samples).toEqual([
      { serviceId: 'nlp.chat', jobId: 'nlp.chat-r1', attempt: 1, metric: 'waiting-requests', value: 7, atMs: expect.any(Number) },
      { serviceId: 'nlp.chat', jobId: 'nlp.chat-r1', attempt: 1, metric: 'running-requests', value: 3, atMs: expect.any(Number) },
    ]);
  });

  it('on a warned machine, takes its replica out of its target group at its last look before the drain mark less the deregistration delay, once', async () => {
    const w = world();
    const left: string[] = [];
    let failOnce = true;
    const frontDoor = {
      leave: async (jobId: string, attempt: number) => {
        if (failOnce) {
          failOnce = false;
          throw new Error('503 from the agent API');
        }
        left.push(`${jobId}#${attempt}`);
      },
    };
    const a = w.agent('i-a', { frontDoor, config: { heartbeatSec: 15 } });
    await a.heartbeat();
    const port = await freePort();
    await w.submit('nlp.chat-r1', {
      name: 'chat',
      command: ['node', REPLICA_JOB, String(port), '0', '0'],
      checkpoint: undefined,
      labels: { 'gpu-fleet/service': 'nlp.chat' },
      service: { port, replicas: { min: 1, max: 4 }, targets: [{ metric: 'requests-per-second', perReplica: 2 }] },
    });
    await w.place('nlp.chat-r1', ['i-a']);
    await a.heartbeat();
    await waitFor('the replica to listen', async () => (await fetch(`http://127.0.0.1:${port}/health`).catch(() => undefined))?.ok);
    // Warned: its drain mark 100 s away. Leaving at 70 s is more than a look (15 s) away: it stays.
    const since = Date.now();
    await w.nodes.markDraining('i-a', { sinceMs: since, reason: 'spot interruption warning', deadlineMs: since + 100_000 });
    await a.heartbeat();
    expect(left).toEqual([]);
    // 40 s from the drain mark: the next look would be past the drain mark less 30 s. It leaves now; a failed call is tried again.
    await w.nodes.markDraining('i-a', { sinceMs: since, reason: 'spot interruption warning', deadlineMs: Date.now() + 40_000 });
    await a.heartbeat();
    expect(left).toEqual([]);
    await a.heartbeat();
    await a.heartbeat();
    expect(left).toEqual(['nlp.chat-r1#1']);
    expect(w.logs.some((l) => l.level === 'warn' && /could not leave its target group/.test(l.message))).toBe(true);
  });

  it('serves a scrape in the DCGM exporter’s names over HTTP, each GPU with the job on it, and the agent’s own figures', async () => {
    const w = world();
    const a = w.agent('i-a');
    await a.heartbeat();
    await w.submit('nlp.busy', { command: ['node', COUNTER_JOB, '100000', '20'] });
    await w.place('nlp.busy', ['i-a']);
    await a.heartbeat();
    const port = await freePort();
    const server = serveMetrics(port, () => a.prometheusScrape('i-a'), { warn: () => undefined });
    cleanups.push(() => new Promise<void>((r) => server.close(() => r())));
    await waitFor('the server', async () => (await fetch(`http://127.0.0.1:${port}/metrics`).catch(() => undefined))?.ok);
    const res = await fetch(`http://127.0.0.1:${port}/metrics`);
    expect(res.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
    const families = parsePrometheusTextFormat(await res.text()) as {
      name: string;
      metrics: { value: string; labels?: Record<string, string> }[];
    }[];
    const util = families.find((f) => f.name === 'DCGM_FI_DEV_GPU_UTIL')!.metrics[0]!;
    expect(util.labels).toMatchObject({ gpu: '0', device: 'nvidia0', Hostname: 'i-a', job: 'nlp.busy', team: 'nlp', attempt: '1' });
    const own = new Map(families.filter((f) => f.name.startsWith('gpu_fleet_agent_')).map((f) => [f.name, Number(f.metrics[0]!.value)]));
    expect(own.get('gpu_fleet_agent_attempts_running')).toBe(1);
    expect(own.get('gpu_fleet_agent_heartbeat_age_seconds')).toBeGreaterThanOrEqual(0);
    expect((await fetch(`http://127.0.0.1:${port}/other`)).status).toBe(404);
  });

  it('reports an unhealthy node when nvidia-smi fails, and keeps running', async () => {
    const w = world();
    const a = w.agent('i-sick', { nvidiaSmiMode: 'driver-down' });
    await a.heartbeat();
    const rec = (await w.nodes.get('i-sick'))!;
    expect(rec.healthy).toBe(false);
    expect(rec.healthProblem).toMatch(/NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver/);
    await a.heartbeat(); // still alive
    expect((await w.nodes.get('i-sick'))!.lastHeartbeatAtMs).toBeGreaterThanOrEqual(rec.lastHeartbeatAtMs);
  });

  it('says a node whose GPUs gpu-fleet does not schedule is unhealthy, naming them', async () => {
    const w = world();
    const a = w.agent('i-gamer', { fixture: { capture: 'linux-x86_64__nvidia-geforce-rtx-2080-super__610.57.04', phase: 'idle' } });
    await a.heartbeat();
    expect(await w.nodes.get('i-gamer')).toMatchObject({
      healthy: false,
      healthProblem: 'no GPU here is a model gpu-fleet schedules (NVIDIA GeForce RTX 2080 SUPER)',
      gpus: [],
    });
  });
});

describe('node agent: checkpoints and interruptions', () => {
  it('saves the checkpoints a job marks, and progress survives a spot interruption seen in IMDS', async () => {
    const w = world();
    const server = await imds('i-a');
    const workA = dir('agent-a');
    const workB = dir('agent-b');
    const a = w.agent('i-a', { workDir: workA, metadata: new AwsImds(server.url) });
    const b = w.agent('i-b', { workDir: workB });
    await a.heartbeat();
    await b.heartbeat();
    // 200 steps of 20 ms, a checkpoint every 20 steps.
    await w.submit('nlp.train', { command: ['node', COUNTER_JOB, '200', '20', '20'] });
    await w.place('nlp.train', ['i-a']);
    await a.heartbeat();

    // Periodic checkpoints reach the store as the job marks them.
    await waitFor('a periodic checkpoint', async () => {
      await a.watch();
      return (await w.jobs.get('nlp.train'))!.checkpoint;
    });

    // The spot interruption notice appears in IMDS (the real body): the agent acts on its own.
    server.values.set('meta-data/spot/instance-action', IMDS_BODIES.terminate);
    await a.watch();
    await a.settled();
    const requeued = (await w.jobs.get('nlp.train'))!;
    expect(requeued).toMatchObject({ state: 'pending', attempt: 2, interruptions: 1, requeueReason: { code: 'interrupted' } });
    const saved = requeued.checkpoint!;
    expect(saved.attempt).toBe(1);
    expect(saved.progressSec).toBeGreaterThan(0);
    expect(saved.location).toMatch(/^file:\/\/.*\/nlp.train\/attempt-1\/step-\d{6}\/$/);
    const firstRun = w.output(workA, 'nlp.train', 1);
    expect(firstRun.at(-1)).toMatchObject({ event: 'checkpointed-on-signal', step: saved.progressSec });
    expect((await w.nodes.get('i-a'))!.draining).toMatchObject({
      reason: 'terminate notice (spot/instance-action) seen by the node agent',
    });

    // Placed again on another machine, it resumes from the checkpoint and finishes the rest only.
    await w.place('nlp.train', ['i-b']);
    await b.heartbeat();
    await waitFor('the job to succeed', async () => (await w.jobs.get('nlp.train'))!.state === 'succeeded');
    const secondRun = w.output(workB, 'nlp.train', 2);
    expect(secondRun[0]).toMatchObject({ event: 'start', attempt: '2', step: saved.progressSec });
    expect(secondRun.at(-1)).toMatchObject({ event: 'done', step: 200, ranSteps: 200 - saved.progressSec });
  });

  it('requeues once when the control plane and the agent both act on the same interruption', async () => {
    const w = world();
    const server = await imds('i-a');
    const a = w.agent('i-a', { metadata: new AwsImds(server.url) });
    await a.heartbeat();
    await w.submit('nlp.both', { command: ['node', COUNTER_JOB, '100000', '20', '20'] });
    await w.place('nlp.both', ['i-a']);
    await a.heartbeat();
    await waitFor('a periodic checkpoint', async () => {
      await a.watch();
      return (await w.jobs.get('nlp.both'))!.checkpoint;
    });
    const ports = {
      clock: w.clock,
      jobs: w.jobs,
      nodes: w.nodes,
      checkpoints: w.checkpoints,
      pools: new MemoryPoolHistory(),
      providers: [],
    };
    const warning = {
      kind: 'interruption-warning' as const,
      eventId: 'evt-1',
      instanceId: 'i-a',
      atMs: Date.now(),
      deadlineMs: Date.now() + 120_000,
    };
    // EventBridge's warning and the local IMDS notice, in both orders and twice over.
    await handleNotice(ports, warning, DEFAULT_POLICY);
    server.values.set('meta-data/spot/instance-action', IMDS_BODIES.terminate);
    await a.watch();
    await a.heartbeat();
    await handleNotice(ports, warning, DEFAULT_POLICY);
    await a.settled();
    await a.watch();
    await handleNotice(ports, warning, DEFAULT_POLICY);
    const job = (await w.jobs.get('nlp.both'))!;
    expect(job).toMatchObject({ state: 'pending', attempt: 2, interruptions: 1 });
    expect(a.running()).toEqual([]);
  });

  it('a job without checkpoint support is stopped and requeued to restart from scratch', async () => {
    const w = world();
    const a = w.agent('i-a');
    await a.heartbeat();
    await w.submit('nlp.plain', { command: ['node', COUNTER_JOB, '100000', '20', '0', '--ignore-signal'], checkpoint: undefined });
    await w.place('nlp.plain', ['i-a']);
    await a.heartbeat();
    // The planner preempts it for higher-priority work.
    await applyJobEvent(
      w.jobs,
      'nlp.plain',
      { type: 'checkpoint-requested', attempt: 1, reason: reason('preempt-for-priority', 'preempted for nlp.urgent') },
      Date.now(),
    );
    await a.heartbeat();
    await a.settled();
    const job = (await w.jobs.get('nlp.plain'))!;
    expect(job).toMatchObject({
      state: 'pending',
      attempt: 2,
      requeueReason: {
        code: 'preempt-for-priority',
        message: 'preempted for nlp.urgent; it declares no checkpoint support, so it restarts from scratch',
      },
    });
    expect(job.checkpoint).toBeUndefined();
  });

  it('a job that does not answer its checkpoint signal is stopped after its grace period and requeued from what it had', async () => {
    const w = world();
    const a = w.agent('i-a');
    await a.heartbeat();
    await w.submit('nlp.deaf', {
      command: ['node', COUNTER_JOB, '100000', '20', '0', '--ignore-signal'],
      checkpoint: { intervalSec: 60, gracePeriodSec: 5 },
    });
    await w.place('nlp.deaf', ['i-a']);
    await a.heartbeat();
    const pid = a.running()[0]!.pid!;
    const asked = Date.now();
    await applyJobEvent(
      w.jobs,
      'nlp.deaf',
      { type: 'checkpoint-requested', attempt: 1, reason: reason('preempt-for-priority', 'preempted') },
      asked,
    );
    await a.heartbeat();
    await a.settled();
    expect(Date.now() - asked).toBeGreaterThanOrEqual(4500);
    const job = (await w.jobs.get('nlp.deaf'))!;
    expect(job).toMatchObject({ state: 'pending', attempt: 2, requeueReason: { code: 'preempt-for-priority' } });
    expect(job.checkpoint).toBeUndefined();
    expect(() => process.kill(pid, 0)).toThrow();
  });

  it('ends the wait at the first checkpoint marked after the request, even one the job made on its own schedule', async () => {
    const w = world();
    const a = w.agent('i-a');
    await a.heartbeat();
    await w.submit('nlp.periodic', {
      command: ['node', COUNTER_JOB, '100000', '20', '10', '--ignore-signal'],
      checkpoint: { intervalSec: 60, gracePeriodSec: 30 },
    });
    await w.place('nlp.periodic', ['i-a']);
    await a.heartbeat();
    const asked = Date.now();
    await applyJobEvent(
      w.jobs,
      'nlp.periodic',
      { type: 'checkpoint-requested', attempt: 1, reason: reason('preempt-for-priority', 'preempted') },
      asked,
    );
    await a.heartbeat();
    await a.settled();
    const job = (await w.jobs.get('nlp.periodic'))!;
    expect(job).toMatchObject({ state: 'pending', attempt: 2 });
    expect(job.checkpoint!.completedAtMs).toBeGreaterThanOrEqual(asked);
    expect(Date.now() - asked).toBeLessThan(10_000);
  });

  it('after an agent restart, the running attempt starts again from its newest checkpoint', async () => {
    const w = world();
    const workA = dir('agent-a');
    const a = w.agent('i-a', { workDir: workA });
    await a.heartbeat();
    await w.submit('nlp.restart', { command: ['node', COUNTER_JOB, '120', '20', '20'] });
    await w.place('nlp.restart', ['i-a']);
    await a.heartbeat();
    const cp = await waitFor('a periodic checkpoint', async () => {
      await a.watch();
      return (await w.jobs.get('nlp.restart'))!.checkpoint;
    });
    await a.stop(); // the agent is restarted (its jobs' processes stop with it)
    expect((await w.jobs.get('nlp.restart'))!.state).toBe('running');
    const again = w.agent('i-a', { workDir: workA });
    await again.heartbeat();
    expect(again.running()).toEqual([expect.objectContaining({ jobId: 'nlp.restart', attempt: 1 })]);
    await waitFor('the job to succeed', async () => (await w.jobs.get('nlp.restart'))!.state === 'succeeded');
    const runs = w.output(workA, 'nlp.restart', 1).filter((l) => l.event === 'start');
    expect(runs).toHaveLength(2);
    expect(runs[1]!.step).toBeGreaterThanOrEqual(cp.progressSec);
  });

  it('runs a two-node gang: the first node leads and reports, each node gets its rank', async () => {
    const w = world();
    const workA = dir('agent-a');
    const workB = dir('agent-b');
    const a = w.agent('i-a', { workDir: workA, identity: { privateIp: '10.0.1.5' } });
    const b = w.agent('i-b', { workDir: workB, identity: { privateIp: '10.0.1.6' } });
    await a.heartbeat();
    await b.heartbeat();
    await w.submit('nlp.gang', { command: ['node', COUNTER_JOB, '15', '10'], nodes: 2 });
    await w.place('nlp.gang', ['i-a', 'i-b']);
    await b.heartbeat();
    expect((await w.jobs.get('nlp.gang'))!.state).toBe('placed'); // a follower does not start the job
    await a.heartbeat();
    expect((await w.jobs.get('nlp.gang'))!.state).toBe('running');
    await waitFor('the job to succeed', async () => (await w.jobs.get('nlp.gang'))!.state === 'succeeded');
    await waitFor('the follower to finish', async () => {
      await b.heartbeat();
      return b.running().length === 0;
    });
    expect(w.output(workA, 'nlp.gang', 1)[0]).toMatchObject({ rank: '0' });
    expect(w.output(workB, 'nlp.gang', 1)[0]).toMatchObject({ rank: '1' });
  });
});

describe('node agent: the GPU use of each attempt, from nvidia-smi, reported at its end', () => {
  it('an H100 under load (a real capture): peak memory and utilisation reach the job through the agent API', async () => {
    const w = world();
    const api = await w.startApi();
    const a = w.agent('i-0aaaa0100', { api, fixture: { capture: 'linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01', phase: 'load' } });
    await a.heartbeat();
    // 4 s of work: long enough to be running at both looks below on a loaded machine (2 s once ended before the second).
    await w.submit('nlp.measured', { command: ['node', COUNTER_JOB, '40', '100'], checkpoint: undefined });
    await w.place('nlp.measured', ['i-0aaaa0100']);
    await a.heartbeat(); // starts it
    await a.beat(); // two looks while it runs
    await a.beat();
    const done = await waitFor('the job to succeed', async () => {
      const j = (await w.jobs.get('nlp.measured'))!;
      return j.state === 'succeeded' ? j : undefined;
    });
    // What the capture shows: 19818 MiB used of 81559 MiB, "GPU : 100 %".
    expect(done.usage!.gpuUse).toEqual([
      {
        attempt: 1,
        rank: 0,
        looks: 2,
        devices: 1,
        busyDevices: 1,
        model: 'H100',
        deviceMemoryMiB: 81_559,
        peakMemoryMiB: 19_818,
        meanSmPct: 100,
        p95SmPct: 100,
      },
    ]);
  });

  it('a MIG device (a real H100 MIG capture under load): its own memory, and no utilisation, as nvidia-smi reports it', async () => {
    const w = world();
    const a = w.agent('i-mig', { fixture: { capture: 'linux-x86_64__nvidia-h100-mig__590.48.01', phase: 'load' } });
    const use = await runOnSlice(w, a, 'nlp.slice');
    expect(use.p95SmPct).toBeUndefined();
  });

  it("with the node's dcgm-exporter: a MIG slice's utilisation from DCGM's engine-active field of its GPU instance", async () => {
    const w = world();
    // What the node's dcgm-exporter serves for the GPU instances nvidia-smi lists, in the exporter's template of labels
    // (parent GPU's UUID, GPU_I_PROFILE, GPU_I_ID): 37% engine-active on every instance, and a whole-GPU series beside.
    const exposition = async () => {
      const gpu = a.lastInventory!.gpus[0]!;
      const labels = `gpu="0",UUID="${gpu.uuid!}",pci_bus_id="00000000:00:09.0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3"`;
      return [
        '# HELP DCGM_FI_PROF_GR_ENGINE_ACTIVE Ratio of time the graphics engine is active.',
        '# TYPE DCGM_FI_PROF_GR_ENGINE_ACTIVE gauge',
        `DCGM_FI_PROF_GR_ENGINE_ACTIVE{${labels},Hostname="i-mig"} 0.910000`,
        ...gpu.mig.devices.map(
          (d) =>
            `DCGM_FI_PROF_GR_ENGINE_ACTIVE{${labels},GPU_I_PROFILE="${d.profile!}",GPU_I_ID="${d.gpuInstanceId}",Hostname="i-mig"} 0.370000`,
        ),
        '',
      ].join('\n');
    };
    const a = w.agent('i-mig', { fixture: { capture: 'linux-x86_64__nvidia-h100-mig__590.48.01', phase: 'load' }, dcgm: exposition });
    const use = await runOnSlice(w, a, 'nlp.slice-dcgm');
    expect(use).toMatchObject({ meanSmPct: 37, p95SmPct: 37 });
  });
});

/** Places a short job on the first MIG device the agent's machine reports, and gives back its attempt's measured use. */
async function runOnSlice(w: ReturnType<typeof world>, a: ReturnType<ReturnType<typeof world>['agent']>, jobId: string) {
  await a.heartbeat();
  const gpu = (await w.nodes.get('i-mig'))!.gpus[0]!;
  const device = gpu.migDevices![0]!;
  await w.submit(jobId, {
    command: ['node', COUNTER_JOB, '40', '50'],
    checkpoint: undefined,
    gpu: { kind: 'mig', profile: device.profile!, models: ['H100'] },
  });
  const job = (await w.jobs.get(jobId))!;
  await w.nodes.assign('i-mig', job.id, 1);
  await applyJobEvent(
    w.jobs,
    job.id,
    {
      type: 'place',
      attempt: 1,
      placement: {
        capacityType: 'spot',
        nodes: [{ nodeId: 'i-mig', gpuIndices: [0], mig: { profile: device.profile!, startSlice: device.startSlice ?? 0 } }],
      },
    },
    Date.now(),
  );
  await a.heartbeat();
  await a.beat();
  const done = await waitFor('the job to succeed', async () => {
    const j = (await w.jobs.get(jobId))!;
    return j.state === 'succeeded' ? j : undefined;
  });
  const use = done.usage!.gpuUse![0]!;
  expect(use).toMatchObject({ attempt: 1, model: 'H100', deviceMemoryMiB: device.memoryMiB, busyDevices: 1 });
  // The memory used of the slice it held, as the capture shows it (the allocator picks one of that profile).
  const slices = a.lastInventory!.gpus[0]!.mig.devices.filter((d) => d.profile === device.profile);
  expect(slices.map((d) => d.memoryUsedMiB)).toContain(use.peakMemoryMiB);
  return use;
}
