import { execFileSync, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import {
  chmodSync,
  chownSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readdirSync,
  readFileSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { request as httpRequest } from 'node:http';
import { createServer } from 'node:net';
import { networkInterfaces, tmpdir } from 'node:os';
import { join } from 'node:path';
import { CreateBucketCommand, ListObjectsV2Command, S3Client } from '@aws-sdk/client-s3';
import S3rver from 's3rver';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { S3Blobs } from '../../agent/checkpoint-files.ts';
import { wallKey, type AttemptPorts } from '../../agent/agent.ts';
import { AwsImds } from '../../agent/metadata.ts';
import { CONTAINER_CHECKPOINT_DIR, DockerRunner, safeJobName, type JobRunner } from '../../agent/runner.ts';
import { jobIdFor, newPendingJob } from '../../core/job.ts';
import type { WorldView } from '../../core/services/snapshot-reader.ts';
import { applyJobEvent } from '../../core/services/job-updates.ts';
import type { Reason } from '../../core/reason.ts';
import {
  checkJobSpec,
  containerSettings,
  HOST_NETWORK_JOB_UID,
  JOB_UID,
  type ContainerSettings,
  type JobSpecInput,
} from '../../core/job-spec.ts';
import {
  BRIDGE_WALL_CHAIN,
  dataVolumeScript,
  GANG_PEERS_CHAIN,
  jobDiskScript,
  jobFoldersMountScript,
  metadataWallScript,
  peersHelperScript,
  PORT_WALL_CHAIN,
  portWallScript,
  WALL_CHAIN,
} from '../../infra/node-setup.ts';
import { agentWatchdogCommand, sudoJobDisks, sudoPeers } from '../../agent/cli.ts';
import { containerLimits, JOBS_NETWORK, type ContainerLimits } from '../../core/container-limits.ts';
import { ElasticLoadBalancingV2Client } from '@aws-sdk/client-elastic-load-balancing-v2';
import { ElbFrontDoor } from '../../cloud/aws/elb-front-door.ts';
import { MemoryServiceStore } from '../../cloud/sim/memory-stores.ts';
import { newServiceRecord, replicaSpec } from '../../core/serving/service.ts';
import { reconcileServices } from '../../core/services/serving.ts';
import { agentWorld, RecordingServiceSink, RecordingSink, waitFor } from '../support/agent-world.ts';
import { startFakeElb } from '../support/fake-elb.ts';
import { dockerProblem, dockerRequired, ensureTestImage, IMAGE_JOBS_DIR, JOBS_DIR } from '../support/docker/engine.ts';
import { awsInstance, IMDS_BODIES, startMetadataServer } from '../support/metadata-server.ts';

/**
 * The node agent against a real Docker engine: real containers from a local image (built here
 * with no registry: test/support/docker/engine.ts), real signals through `docker kill`, real bind
 * mounts written by root inside the container, checkpoints uploaded to a local S3-compatible
 * server (s3rver). The GPUs are the stand-in nvidia-smi's: this machine has none for docker to
 * hand over, so the runner is given no device (and passes no `--gpus`).
 *
 * Without an engine the suite is skipped with a notice, unless GPU_FLEET_DOCKER_TESTS=required
 * (as .ci/run sets, after it starts dockerd), when a missing engine fails it.
 */
const problem = dockerProblem();
if (problem && !dockerRequired)
  console.warn(`container tests skipped: ${problem} (apt-get install docker.io, start dockerd; CI sets GPU_FLEET_DOCKER_TESTS=required)`);

/** The locked memory the jobs ask: this sandbox's engine may not raise the limit (no CAP_SYS_RESOURCE), so they ask its own. */
const LOCKED_MIB = 8;
const LABEL = 'io.gpu-fleet.job';

/** The real docker runner, given no GPU device (this machine has none for docker to hand over). */
function noGpuRunner(envDir: string): JobRunner {
  // The test image is built here and no registry has it: the engine's cache serves it.
  const inner = new DockerRunner('docker', process.env, [], envDir, 'missing');
  return {
    kind: 'docker',
    start: (launch) => inner.start({ ...launch, devices: [] }),
    cleanUpLeftovers: (keep) => inner.cleanUpLeftovers(keep),
    findLeftovers: () => inner.findLeftovers(),
    adopt: (left, launch) => inner.adopt(left, launch),
    detach: () => inner.detach(),
    prefetch: (image) => inner.prefetch(image),
    writtenOutside: (launches) => inner.writtenOutside(launches),
  };
}

function docker(...args: string[]): string {
  return execFileSync('docker', args, { encoding: 'utf8' }).trim();
}

/** The containers of the given jobs the engine has now, running or not. */
function containersOf(jobIds: readonly string[]): string[] {
  const out = docker('ps', '--all', '--filter', `label=${LABEL}`, '--format', `{{.Names}} {{.Label "${LABEL}"}}`);
  return out
    .split('\n')
    .filter((l) => l.trim() !== '')
    .filter((l) => jobIds.includes(l.slice(l.indexOf(' ') + 1)))
    .map((l) => l.slice(0, l.indexOf(' ')));
}

function inspect(name: string): {
  NetworkMode: string;
  ShmSize: number;
  Ulimits: { Name: string; Soft: number; Hard: number }[];
  CapDrop: string[];
  SecurityOpt: string[];
  CgroupParent: string;
  Memory: number;
  MemorySwap: number;
  PidsLimit: number;
  NanoCpus: number;
} {
  return JSON.parse(docker('container', 'inspect', '--format', '{{json .HostConfig}}', name)) as ReturnType<typeof inspect>;
}

/** This machine's first non-loopback IPv4 address (what a fleet machine registers as its address), else loopback. */
function hostAddress(): string {
  for (const list of Object.values(networkInterfaces()))
    for (const a of list ?? []) if (a.family === 'IPv4' && !a.internal) return a.address;
  return '127.0.0.1';
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '0.0.0.0', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

const preempted: Reason = { code: 'preempt-for-priority', message: 'a higher-priority job needs its GPU' };
const tmp = (name: string) => mkdtempSync(join(tmpdir(), `${name}-`));
const BUCKET = 'gpu-fleet-checkpoints';

describe.runIf(!problem || dockerRequired)('the agent on a real Docker engine', () => {
  let image: string;
  let s3rver: S3rver;
  let s3: S3Client;
  const run = `t${Date.now().toString(36)}`;

  beforeAll(async () => {
    if (problem) throw new Error(`GPU_FLEET_DOCKER_TESTS=required, but ${problem}`);
    image = ensureTestImage();
    s3rver = new S3rver({ port: 0, address: '127.0.0.1', silent: true, directory: tmp('s3rver') });
    const { port } = await s3rver.run();
    s3 = new S3Client({
      region: 'us-east-1',
      endpoint: `http://127.0.0.1:${port}`,
      forcePathStyle: true,
      credentials: { accessKeyId: 'S3RVER', secretAccessKey: 'S3RVER' },
    });
    await s3.send(new CreateBucketCommand({ Bucket: BUCKET }));
  }, 120_000);

  afterAll(async () => {
    s3?.destroy();
    await s3rver?.close();
  });

  const spec = (command: string[], over: Partial<JobSpecInput> = {}): Partial<JobSpecInput> => ({
    image,
    command: ['node', ...command],
    container: { lockedMemoryMiB: LOCKED_MIB },
    ...over,
  });

  it('runs a job in a container that checkpoints (as uid 65534: the image names root) to S3 and on its signal, stops, and resumes in a second container', async () => {
    const w = agentWorld({ checkpointRoot: `s3://${BUCKET}/checkpoints/` });
    const imds = await startMetadataServer('aws', awsInstance('i-c1'));
    const work = tmp('agent-c1');
    const a = w.agent('i-c1', {
      workDir: work,
      runner: noGpuRunner(join(work, 'env')),
      blobs: new S3Blobs(s3),
      metadata: new AwsImds(imds.url),
    });
    const id = jobIdFor('nlp', `counter-${run}`);
    try {
      await a.heartbeat();
      await w.submit(id, spec([`${IMAGE_JOBS_DIR}/counter-job.mjs`, '600', '20', '25']));
      await w.place(id, ['i-c1']);
      await a.heartbeat();
      const [name] = await waitFor('the container to run', () => containersOf([id]).at(0) && containersOf([id]));
      expect(name).toBe(`gpu-fleet-${safeJobName(id)}-a1-r0`);
      // What the engine was told: the jobs' bridge network for a one-machine job, no capability and no privilege gain,
      // 1 GiB of /dev/shm per GPU, the ulimits asked, and its share of the machine under the jobs' parent cgroup.
      const host = inspect(name!);
      expect(host).toMatchObject({ NetworkMode: JOBS_NETWORK.name, CapDrop: ['ALL'], SecurityOpt: ['no-new-privileges'] });
      expect(host.CgroupParent).toMatch(/gpu-fleet-jobs/);
      expect(host.Memory).toBeGreaterThan(0);
      expect(host.MemorySwap).toBe(host.Memory);
      expect(host.PidsLimit).toBeGreaterThan(0);
      expect(host.NanoCpus).toBeGreaterThan(0);
      expect(host.ShmSize).toBe(1024 * 1024 * 1024);
      expect(host.Ulimits).toEqual(
        expect.arrayContaining([
          { Name: 'memlock', Soft: LOCKED_MIB * 1024 * 1024, Hard: LOCKED_MIB * 1024 * 1024 },
          { Name: 'stack', Soft: 64 * 1024 * 1024, Hard: 64 * 1024 * 1024 },
        ]),
      );
      const periodic = await waitFor(
        'a periodic checkpoint in S3',
        async () => {
          await a.watch();
          return (await w.jobs.get(id))!.checkpoint;
        },
        20_000,
      );
      expect(periodic.location).toMatch(new RegExp(`^s3://${BUCKET}/checkpoints/`));
      // The container wrote its folder as uid 65534, not root (the agent read it through the group and uploaded it).
      const folder = join(work, 'jobs', safeJobName(id), 'attempt-1', 'checkpoint');
      expect(statSync(join(folder, 'checkpoint.json')).uid).toBe(JOB_UID);

      // A spot interruption notice: the agent signals the container, it saves and exits, the save goes to S3, the attempt is requeued.
      imds.values.set('meta-data/spot/instance-action', IMDS_BODIES.terminate);
      await a.watch();
      await a.settled();
      const requeued = (await w.jobs.get(id))!;
      expect(requeued).toMatchObject({ state: 'pending', attempt: 2 });
      const saved = requeued.checkpoint!;
      expect(saved.progressSec).toBeGreaterThan(periodic.progressSec);
      const listed = await s3.send(new ListObjectsV2Command({ Bucket: BUCKET, Prefix: saved.location.slice(`s3://${BUCKET}/`.length) }));
      expect((listed.Contents ?? []).map((o) => o.Key!.split('/').at(-1))).toContain('state.json');
      const first = w.output(work, id, 1);
      expect(first.find((l) => l.event === 'checkpointed-on-signal')).toMatchObject({ step: saved.progressSec });
      await waitFor('the first container to be gone', () => containersOf([id]).length === 0);

      // The second attempt, on another machine: a new container, resumed from the files in S3, runs to the end.
      const b = w.agent('i-c2', { runner: noGpuRunner(join(tmp('agent-c2'), 'env')), blobs: new S3Blobs(s3) });
      const workB = (b as unknown as { config: { workDir: string } }).config.workDir;
      await b.heartbeat();
      await w.place(id, ['i-c2']);
      await b.heartbeat();
      const done = await waitFor(
        'the job to succeed',
        async () => ((await w.jobs.get(id))!.state === 'succeeded' ? true : undefined),
        30_000,
      );
      expect(done).toBe(true);
      const second = w.output(workB, id, 2);
      expect(second[0]).toMatchObject({ event: 'start', step: saved.progressSec, attempt: '2' });
      expect(second.find((l) => l.event === 'done')).toMatchObject({ step: 600, ranSteps: 600 - saved.progressSec });
      await waitFor('no container left', () => containersOf([id]).length === 0);
    } finally {
      await w.shutdown();
      await imds.close();
    }
  }, 90_000);

  it('runs two jobs whose ids the old name mapping merged side by side, each in its own container and folder', async () => {
    const w = agentWorld();
    const work = tmp('agent-n');
    const a = w.agent('i-n', { workDir: work, runner: noGpuRunner(join(work, 'env')) });
    // "nlp.x~20y" (a space escaped by jobIdFor) and "nlp.x_20y": both were "gpu-fleet-nlp.x_20y-a1" and jobs/nlp.x_20y.
    const ids = [jobIdFor('nlp', `${run} x y`), jobIdFor('nlp', `${run}_20x_20y`)];
    expect(ids[0]!.replace(/[^A-Za-z0-9_.-]/g, '_')).toBe(ids[1]);
    try {
      await a.heartbeat();
      for (const id of ids) {
        await w.submit(id, spec([`${IMAGE_JOBS_DIR}/counter-job.mjs`, '150', '20', '50']));
        await w.place(id, ['i-n'], [0]);
      }
      await a.heartbeat();
      await waitFor('both containers to run', () => containersOf(ids).length === 2);
      const states = await waitFor(
        'both jobs to succeed',
        async () => {
          const both = await Promise.all(ids.map((id) => w.jobs.get(id)));
          return both.every((j) => j!.state === 'succeeded' || j!.state === 'failed') ? both.map((j) => j!.state) : undefined;
        },
        30_000,
      );
      expect(states).toEqual(['succeeded', 'succeeded']);
      expect(readdirSync(join(work, 'jobs')).sort()).toEqual(ids.map(safeJobName).sort());
      for (const id of ids) expect(w.output(work, id, 1).find((l) => l.event === 'done')).toMatchObject({ step: 150, ranSteps: 150 });
    } finally {
      await w.shutdown();
    }
  }, 60_000);

  it("gives a container the secrets its job names by reference through its env file alone: gone once it starts, never in the record or the agent's log", async () => {
    const w = agentWorld();
    const work = tmp('agent-secret');
    const envDir = join(work, 'env');
    const value = `hf_${run}_value`;
    // The SSM side is test/agent/secrets.test.ts's; here the reader answers as it would for the team's own parameter.
    const api = await w.startApi({
      secrets: { read: async (ref) => (ref.id === '/gpu-fleet/nlp/hf-token' ? value : Promise.reject(new Error(`no ${ref.id}`))) },
    });
    const a = w.agent('i-0dec0de5ec', { workDir: work, runner: noGpuRunner(envDir), api });
    const id = jobIdFor('nlp', `${run}-secret`);
    try {
      await a.heartbeat();
      await w.submit(
        id,
        spec(['-e', 'console.log(JSON.stringify({ event: "env", hf: process.env.HF_TOKEN }))'], {
          secrets: [{ name: 'HF_TOKEN', valueFrom: 'arn:aws:ssm:us-west-2:123456789012:parameter/gpu-fleet/nlp/hf-token' }],
        }),
      );
      await w.place(id, ['i-0dec0de5ec'], [0]);
      await a.heartbeat();
      const line = await waitFor('the container to print its environment', () => {
        try {
          return w.output(work, id, 1).find((l) => l.event === 'env');
        } catch {
          return undefined;
        }
      });
      expect(line).toEqual({ event: 'env', hf: value });
      await a.settled();
      // The env file (0600) is removed once the container has started.
      expect(readdirSync(envDir)).toEqual([]);
      expect(JSON.stringify(await w.jobs.get(id))).not.toContain(value);
      expect(JSON.stringify(w.logs)).not.toContain(value);
    } finally {
      await w.shutdown();
    }
  }, 60_000);

  it('kills a container that ignores its checkpoint signal and SIGTERM at its grace, and leaves nothing running when the agent stops', async () => {
    const w = agentWorld();
    const work = tmp('agent-k');
    const a = w.agent('i-k', { workDir: work, runner: noGpuRunner(join(work, 'env')) });
    const stubborn = jobIdFor('nlp', `stubborn-${run}`);
    const other = jobIdFor('nlp', `long-${run}`);
    try {
      await a.heartbeat();
      await w.submit(stubborn, {
        ...spec([`${IMAGE_JOBS_DIR}/counter-job.mjs`, '100000', '20', '0', '--ignore-signal', '--ignore-term']),
        checkpoint: { intervalSec: 60, gracePeriodSec: 5 },
      });
      await w.submit(other, spec([`${IMAGE_JOBS_DIR}/counter-job.mjs`, '100000', '20', '0']));
      await w.place(stubborn, ['i-k'], [0]);
      await w.place(other, ['i-k'], [0]);
      await a.heartbeat();
      await waitFor('both containers to run', () => containersOf([stubborn, other]).length === 2);
      await waitFor('the stubborn job to start counting', () => w.output(work, stubborn, 1).length > 0);
      // Preempted: the checkpoint is asked for; the job ignores its signal, then SIGTERM, and is killed.
      const asked = Date.now();
      await applyJobEvent(w.jobs, stubborn, { type: 'checkpoint-requested', attempt: 1, reason: preempted }, asked);
      await a.heartbeat();
      await a.settled();
      const tookMs = Date.now() - asked;
      expect(await w.jobs.get(stubborn)).toMatchObject({ state: 'pending', attempt: 2 });
      // Not before its 5 s grace to write one and the agent's 2 s stop grace (docker stop's, then SIGKILL) have passed.
      expect(tookMs).toBeGreaterThanOrEqual(7_000);
      expect(w.output(work, stubborn, 1).some((l) => l.event === 'ignored-sigterm')).toBe(true);
      await waitFor('the stubborn container to be gone', () => !containersOf([stubborn, other]).some((n) => n.includes('stubborn')));
      expect(containersOf([other])).toHaveLength(1);

      await a.stop();
      await waitFor('no container of the agent left', () => containersOf([stubborn, other]).length === 0, 20_000);
    } finally {
      await w.shutdown();
    }
  }, 60_000);

  it('adopts on restart: an agent that starts again follows the containers still its node’s, stops the one whose attempt moved on, and never touches a stranger', async () => {
    const w = agentWorld();
    const work = tmp('agent-r');
    const a = w.agent('i-r', { workDir: work, runner: noGpuRunner(join(work, 'env')) });
    const kept = jobIdFor('nlp', `kept-${run}`);
    const moved = jobIdFor('nlp', `moved-${run}`);
    const quick = jobIdFor('nlp', `quick-${run}`);
    // A container that is not gpu-fleet's (no label): whatever the agents do, it runs on.
    const stranger = `stranger-${run}`;
    docker('run', '--detach', '--name', stranger, image, 'node', '-e', 'setTimeout(() => {}, 600000)');
    const keptName = () => containersOf([kept])[0]!;
    try {
      await a.heartbeat();
      await w.submit(kept, spec([`${IMAGE_JOBS_DIR}/counter-job.mjs`, '120', '100', '0']));
      await w.submit(moved, spec([`${IMAGE_JOBS_DIR}/counter-job.mjs`, '100000', '20', '0']));
      await w.submit(quick, spec([`${IMAGE_JOBS_DIR}/counter-job.mjs`, '60', '50', '0']));
      await w.place(kept, ['i-r'], [0]);
      await w.place(moved, ['i-r'], [0]);
      await w.place(quick, ['i-r'], [0]);
      await a.heartbeat();
      await waitFor('the three containers to run', () => containersOf([kept, moved, quick]).length === 3);
      await waitFor('the kept job to start counting', () => w.output(work, kept, 1).length > 0);
      const before = docker('container', 'inspect', '--format', '{{.Id}} {{.State.StartedAt}}', keptName());

      // The agent goes (a crash, an upgrade): its containers run on. While it is away, one attempt stops being this node's.
      await a.leave();
      await w.nodes.unassign('i-r', moved, 1);
      // One ends on its own while no agent follows it: it must be reported, not run again.
      await waitFor('the quick job to end while the agent is away', () => {
        const name = containersOf([quick])[0];
        return name !== undefined && docker('container', 'inspect', '--format', '{{.State.Running}}', name) === 'false';
      });
      const b = w.agent('i-r', { workDir: work, runner: noGpuRunner(join(work, 'env')) });
      await b.start();
      expect(containersOf([kept, moved])).toEqual([keptName()]);
      await waitFor('the quick job’s end to be reported', async () => (await w.jobs.get(quick))?.state === 'succeeded');
      expect(w.output(work, quick, 1).filter((l) => l.event === 'start')).toHaveLength(1);
      // The very container, never restarted; the stranger untouched.
      expect(docker('container', 'inspect', '--format', '{{.Id}} {{.State.StartedAt}}', keptName())).toBe(before);
      expect(docker('container', 'inspect', '--format', '{{.State.Running}}', stranger)).toBe('true');
      expect(w.logs.some((l) => l.message === 'adopted the job containers an earlier agent left running')).toBe(true);

      // Its end is the new agent's to see and report; its output goes on in the same log, from where the first agent's copy ended.
      await waitFor('the adopted job to finish', async () => (await w.jobs.get(kept))?.state === 'succeeded', 30_000);
      // (The line the first agent wrote last may come twice: the file's time is the kernel's coarse clock, and a line
      // is better twice than lost.)
      const out = w.output(work, kept, 1);
      expect(out[0]).toMatchObject({ event: 'start', step: 0 });
      expect(out.filter((l) => l.event === 'done')).toEqual([{ event: 'done', step: 120, ranSteps: 120 }]);
      expect(out.at(-1)).toMatchObject({ event: 'done' });
      await waitFor('the adopted container to be removed', () => containersOf([kept]).length === 0);
      await b.stop();
    } finally {
      spawnSync('docker', ['rm', '--force', stranger]);
      await w.shutdown();
    }
  }, 90_000);

  it("has the machine's watchdog stop the job containers once the dead agent's lease is past its lease and fence, and no other container", async () => {
    const w = agentWorld();
    const work = tmp('agent-wd');
    const leaseFile = join(work, 'lease.json');
    const a = w.agent('i-wd', { workDir: work, runner: noGpuRunner(join(work, 'env')), config: { leaseFile } });
    const id = jobIdFor('nlp', `watched-${run}`);
    const stranger = `stranger-wd-${run}`;
    docker('run', '--detach', '--name', stranger, image, 'node', '-e', 'setTimeout(() => {}, 600000)');
    const io = { stdout: { write: () => true } as unknown as NodeJS.WritableStream };
    try {
      const before = Date.now();
      await a.heartbeat();
      // Each renewal is written for the watchdog, with the lease's terms.
      const mark = JSON.parse(readFileSync(leaseFile, 'utf8')) as { renewedAtMs: number; leaseSec: number; fenceGraceSec: number };
      expect(mark).toMatchObject({ leaseSec: 180, fenceGraceSec: 60 });
      expect(mark.renewedAtMs).toBeGreaterThanOrEqual(before);
      await w.submit(id, spec([`${IMAGE_JOBS_DIR}/counter-job.mjs`, '100000', '20', '0']));
      await w.place(id, ['i-wd'], [0]);
      await a.heartbeat();
      await waitFor('the container to run', () => containersOf([id]).length === 1);
      const first = docker('container', 'inspect', '--format', '{{.Id}}', containersOf([id])[0]!);

      // The agent dies: nothing renews its lease, nothing of it stops the container.
      await a.leave();
      expect(await agentWatchdogCommand({ leaseFile }, io)).toMatchObject({ verdict: 'keep', stopped: [] });
      expect(docker('container', 'inspect', '--format', '{{.State.Running}}', first)).toBe('true');
      // Past the lease and the fence (the file as the dead agent left it, 241 s on): the watchdog stops it, and only it.
      writeFileSync(leaseFile, JSON.stringify({ ...mark, renewedAtMs: Date.now() - 241_000 }));
      const late = await agentWatchdogCommand({ leaseFile, stopGraceSec: 2 }, io);
      expect(late).toMatchObject({ verdict: 'stop', stopped: containersOf([id]) });
      expect(late.why).toMatch(/past its lease \(180 s\) and fence \(60 s\)/);
      expect(docker('container', 'inspect', '--format', '{{.State.Running}}', first)).toBe('false');
      expect(docker('container', 'inspect', '--format', '{{.State.Running}}', stranger)).toBe('true');
      // A lease file that is not one stops them too: nothing vouches for them.
      writeFileSync(leaseFile, '{"renewedAtMs": "soon"}');
      expect((await agentWatchdogCommand({ leaseFile }, io)).verdict).toBe('stop');

      // The agent back before reconcile gave the attempt up: the stopped container is not adopted but removed, and the
      // attempt, still this node's, starts again in a new container (from its newest checkpoint).
      const b = w.agent('i-wd', { workDir: work, runner: noGpuRunner(join(work, 'env')), config: { leaseFile } });
      await b.start();
      await waitFor('the attempt to run again', () => {
        const now = containersOf([id]);
        return now.length === 1 && docker('container', 'inspect', '--format', '{{.State.Running}} {{.Id}}', now[0]!).startsWith('true ');
      });
      expect(docker('container', 'inspect', '--format', '{{.Id}}', containersOf([id])[0]!)).not.toBe(first);
      // The watchdog acting while an agent follows the container (it adopted it just then, or it hangs): its end is no
      // end of the job's; the attempt goes back to the queue from its newest checkpoint, never failed.
      writeFileSync(leaseFile, JSON.stringify({ ...mark, renewedAtMs: Date.now() - 241_000 }));
      expect((await agentWatchdogCommand({ leaseFile, stopGraceSec: 2 }, io)).stopped).toHaveLength(1);
      await waitFor('the attempt to be requeued', async () => (await w.jobs.get(id))?.attempt === 2);
      expect(await w.jobs.get(id)).toMatchObject({ state: 'pending', requeueReason: { code: 'fenced' } });
      expect((await w.jobs.get(id))?.requeueReason?.message).toMatch(/watchdog stopped it/);
      await b.stop();
    } finally {
      spawnSync('docker', ['rm', '--force', stranger]);
      await w.shutdown();
    }
  }, 90_000);

  it('lets a two-machine gang meet: the follower reaches the leader at GPU_FLEET_LEADER_ADDRESS and its rendezvous port', async () => {
    const w = agentWorld();
    const address = hostAddress();
    // What each machine's agent asks of its port wall (the wall itself: "the machine's port wall…" below).
    const walls = { g0: [] as string[], g1: [] as string[] };
    const recording = (calls: string[]): AttemptPorts => ({
      open: async (key, addresses) => void calls.push(`open ${key} ${addresses.join(' ')}`),
      openPort: async (key, p) => void calls.push(`open-port ${key} ${p}`),
      close: async (key) => void calls.push(`close ${key}`),
      reset: async () => void calls.push('reset'),
    });
    const leader = w.agent('i-g0', {
      runner: noGpuRunner(join(tmp('agent-g0'), 'env')),
      identity: { privateIp: address },
      peers: recording(walls.g0),
    });
    const follower = w.agent('i-g1', {
      runner: noGpuRunner(join(tmp('agent-g1'), 'env')),
      identity: { privateIp: address },
      peers: recording(walls.g1),
    });
    const dirs = [leader, follower].map((x) => (x as unknown as { config: { workDir: string } }).config.workDir);
    const id = jobIdFor('nlp', `gang-${run}`);
    const port = await freePort();
    try {
      await leader.heartbeat();
      await follower.heartbeat();
      await w.submit(id, spec([`${IMAGE_JOBS_DIR}/gang-rendezvous.mjs`], { nodes: 2, checkpoint: undefined }));
      // The planner gives the leader's machine the rendezvous port (core/planner: a port is room of the machine).
      await w.place(id, ['i-g0', 'i-g1'], [0], [[port]]);
      await follower.heartbeat();
      await leader.heartbeat();
      await waitFor('the gang to finish', async () => ((await w.jobs.get(id))!.state === 'succeeded' ? true : undefined), 45_000);
      const heard = w.output(dirs[0]!, id, 1);
      const met = w.output(dirs[1]!, id, 1);
      expect(met[0]).toMatchObject({ event: 'start', rank: 1, address, port, size: 2 });
      expect(heard.find((l) => l.event === 'heard')).toMatchObject({ line: 'rank 1' });
      expect(met.find((l) => l.event === 'met')).toMatchObject({ reply: 'welcome rank 1, from the leader' });
      // Each machine let the other in for the attempt before its rank started, and shut it out once it ended.
      const key = wallKey(id, 1);
      await waitFor('both walls to close', () => walls.g0.includes(`close ${key}`) && walls.g1.includes(`close ${key}`));
      expect(walls.g0).toEqual([`open ${key} ${address}`, `close ${key}`]);
      expect(walls.g1).toEqual([`open ${key} ${address}`, `close ${key}`]);
    } finally {
      await w.shutdown();
    }
  }, 60_000);

  it('pulls ahead the images its record lists: the local image is found present, one no registry here has is logged and tried again later, and the work list goes on', async () => {
    const w = agentWorld();
    const work = tmp('agent-p');
    const a = w.agent('i-p', { workDir: work, runner: noGpuRunner(join(work, 'env')) });
    const id = jobIdFor('nlp', `after-prefetch-${run}`);
    await a.heartbeat();
    // Nothing listens on port 1 here: the engine's pull is refused at once (no wait on the internet).
    const absent = '127.0.0.1:1/gpu-fleet/absent:never';
    expect(await w.nodes.setPrefetch('i-p', [absent, image].sort())).toBe(true);
    await a.heartbeat();
    await a.prefetcher.settled();
    await a.heartbeat();
    await a.prefetcher.settled();
    // One pull at a time, in the record's order; the one that failed waits its back-off, the next is found present.
    expect(a.prefetcher.images).toEqual([image]);
    const failed = w.logs.filter((l) => l.message.startsWith('could not pull an image ahead'));
    expect(failed).toHaveLength(1);
    expect(failed[0]!.extra).toMatchObject({ image: absent, failures: 1, retryInSec: 60 });
    expect(String(failed[0]!.extra!.error)).toMatch(/^docker pull 127\.0\.0\.1:1\/gpu-fleet\/absent:never failed \(exit 1\): /);
    // Present already: nothing pulled, nothing said.
    expect(w.logs.some((l) => l.message === 'pulled an image ahead')).toBe(false);
    // It says what it holds on its record, where the planner reads it.
    await a.heartbeat();
    expect((await w.nodes.get('i-p'))!.images).toEqual([image]);
    // Its look at the work list still runs the jobs placed here.
    try {
      await w.submit(id, spec(['-e', 'process.exit(0)']));
      await w.place(id, ['i-p']);
      await waitFor('the job to finish', async () => {
        await a.heartbeat();
        return (await w.jobs.get(id))?.state === 'succeeded';
      });
    } finally {
      await w.shutdown();
    }
  }, 120_000);

  it('serves a replica on the host network: the front door reaches it where it registered it, the agent scrapes it, and it leaves the load balancer before its container stops', async () => {
    const w = agentWorld();
    const address = hostAddress();
    const port = await freePort();
    const ARN = 'arn:aws:elasticloadbalancing:us-west-2:123456789012:targetgroup/gf-nlp-chat/0123456789abcdef';
    // A local ELB v2 endpoint whose health checks are real HTTP requests to each target's /health.
    const elb = await startFakeElb([ARN]);
    const frontDoor = new ElbFrontDoor(
      new ElasticLoadBalancingV2Client({
        region: 'us-west-2',
        endpoint: elb.endpoint,
        credentials: { accessKeyId: 'x', secretAccessKey: 'x' },
      }),
      { [`nlp.chat-${run}`]: ARN },
    );
    const sink = new RecordingServiceSink();
    const work = tmp('agent-s');
    const a = w.agent('i-s', {
      workDir: work,
      runner: noGpuRunner(join(work, 'env')),
      identity: { privateIp: address },
      serviceMetrics: sink,
      metrics: new RecordingSink(),
    });
    const checked = checkJobSpec({
      name: `chat-${run}`,
      image,
      command: ['node', `${IMAGE_JOBS_DIR}/replica.mjs`, String(port), '7', '2'],
      gpu: { kind: 'whole', count: 1 },
      interruptible: false,
      container: { lockedMemoryMiB: LOCKED_MIB },
      service: {
        port,
        readiness: { path: '/health', initialDelaySec: 0, periodSec: 5 },
        replicas: { min: 1, max: 1 },
        targets: [{ metric: 'waiting-requests', perReplica: 8 }],
      },
    });
    if (!checked.ok) throw new Error(checked.errors.join('; '));
    const services = new MemoryServiceStore();
    const record = newServiceRecord('nlp', checked.spec, Date.now());
    await services.create({ ...record, nextReplica: 2 });
    const replicaId = jobIdFor('nlp', `chat-${run}-r1`);
    const step = async () => {
      const world: WorldView = {
        groups: [],
        instances: [],
        records: await w.nodes.list(),
        pendingJobs: await w.jobs.listByState(['pending']),
        activeJobs: await w.jobs.listByState(['placed', 'running', 'checkpointing']),
        degraded: [],
      };
      return reconcileServices(
        { services, frontDoor, jobs: w.jobs, catalog: { instanceTypes: async () => new Map() } },
        world,
        Date.now(),
        {
          intervalSec: 60,
          bootSec: 0,
        },
      );
    };
    const containerUp = () => containersOf([replicaId]).length === 1;
    try {
      await a.heartbeat();
      await w.jobs.create(
        newPendingJob({
          id: replicaId,
          team: 'nlp',
          spec: replicaSpec({ ...record, nextReplica: 1 }, { capacity: 'on-demand' }),
          submittedAtMs: Date.now(),
        }),
      );
      // The planner gives the replica its port on the machine.
      await w.place(replicaId, ['i-s'], [0], [[port]]);
      await a.heartbeat();
      await waitFor('the replica container to run', containerUp);
      expect(inspect(containersOf([replicaId])[0]!).NetworkMode).toBe('host');

      // Registered at the machine's address and the service's port; the health check reaches it there, over HTTP.
      expect((await step()).registered).toBe(1);
      expect((await frontDoor.targets(record.id)).map((t) => t.target)).toEqual([{ ip: address, port }]);
      await waitFor('the target to pass its health check', async () => {
        await elb.settle();
        return (await frontDoor.targets(record.id))[0]?.state === 'healthy';
      });
      const answer = await fetch(`http://${address}:${port}/health`);
      expect(answer.status).toBe(200);
      // Ready because its target is healthy; its agent found it answering too.
      expect((await step()).decisions[0]).toMatchObject({ service: record.id, ready: 1 });
      await a.heartbeat();
      expect((await w.jobs.get(replicaId))!.replicaHealth).toMatchObject({ attempt: 1, answering: true });
      // The agent's scrape of its metrics, from the machine.
      await a.publishMetrics();
      expect(sink.samples.filter((x) => x.jobId === replicaId).map((x) => [x.metric, x.value])).toEqual([['waiting-requests', 7]]);

      // The service is cancelled: its replica leaves the load balancer first, while its container still serves.
      const current = (await services.get(record.id))!;
      expect(await services.update({ ...current, state: 'cancelled', version: current.version + 1 }, current.version)).toMatchObject({
        ok: true,
      });
      const leaving = await step();
      expect(leaving).toMatchObject({ deregistered: 1, cancelled: 0 });
      expect((await frontDoor.targets(record.id))[0]?.state).toBe('draining');
      await a.heartbeat();
      expect(containerUp()).toBe(true);
      expect((await fetch(`http://${address}:${port}/health`)).status).toBe(200);
      // Drained: now it is cancelled, and its agent stops the container.
      await elb.settle();
      expect((await step()).cancelled).toBe(1);
      await a.heartbeat();
      await waitFor(
        'the replica to end cancelled',
        async () => ((await w.jobs.get(replicaId))!.state === 'cancelled' ? true : undefined),
        20_000,
      );
      await waitFor('its container to be gone', () => !containerUp(), 20_000);
    } finally {
      await w.shutdown();
      await elb.close();
    }
  }, 60_000);
});

/**
 * The walls' second layer (issue 68), from inside containers the agent's runner starts with its
 * own arguments: no capability and no privilege gain in any launch kind, job folders mounted
 * nosuid,nodev as the node's setup mounts them, memory and process limits that stop a job alone,
 * and the jobs' bridge that reaches neither the host's listeners nor another job. The C probe
 * (test/support/docker/wall-probe.c) tries what Node.js cannot: raw sockets, mknod, a fork bomb.
 */
describe.runIf(!problem || dockerRequired)('the second wall layer on a real Docker engine', () => {
  let image: string;
  const asRoot = (cmd: string, args: string[]) =>
    process.getuid?.() === 0
      ? execFileSync(cmd, args, { encoding: 'utf8' })
      : execFileSync('sudo', ['-n', cmd, ...args], { encoding: 'utf8' });
  const quiet = (cmd: string, args: string[]) => {
    try {
      asRoot(cmd, args);
    } catch {
      // already gone
    }
  };
  /** Job folders under a root mounted as the node's setup mounts /var/lib/gpu-fleet/jobs. */
  let jobsRoot: string;

  beforeAll(() => {
    if (problem) throw new Error(`GPU_FLEET_DOCKER_TESTS=required, but ${problem}`);
    image = ensureTestImage();
    jobsRoot = tmp('jobs-root');
    asRoot('bash', ['-c', jobFoldersMountScript(jobsRoot)]);
  }, 120_000);

  afterAll(() => {
    if (jobsRoot) quiet('umount', [jobsRoot]);
    quiet('iptables', ['-w', '-D', 'INPUT', '-i', JOBS_NETWORK.bridge, '-j', BRIDGE_WALL_CHAIN]);
    quiet('iptables', ['-w', '-F', BRIDGE_WALL_CHAIN]);
    quiet('iptables', ['-w', '-X', BRIDGE_WALL_CHAIN]);
  });

  type Kind = 'bridge job' | 'service replica' | 'gang rank';
  const KINDS: readonly Kind[] = ['bridge job', 'service replica', 'gang rank'];

  function settingsOf(kind: Kind) {
    const spec = checkJobSpec({
      image,
      command: ['/jobs/wall-probe'],
      gpu: { kind: 'whole', count: 1 },
      container: { lockedMemoryMiB: LOCKED_MIB },
      ...(kind === 'gang rank' ? { nodes: 2 } : {}),
      ...(kind === 'service replica'
        ? {
            name: 'probe',
            service: { port: 18_081, replicas: { min: 1, max: 1 }, targets: [{ metric: 'waiting-requests', perReplica: 8 }] },
          }
        : {}),
    });
    if (!spec.ok) throw new Error(spec.errors.join('; '));
    return containerSettings(spec.spec);
  }

  /** Runs `command` as the agent's runner runs a job of this kind (its settings and its limits), in a folder under the jobs root. */
  async function runAs(
    kind: Kind,
    command: string[],
    limits = containerLimits(1000, { memoryMiB: 8192, cpus: 2, gpus: 1 }, 64),
    over: { readonly image?: string; readonly container?: ContainerSettings } = {},
  ) {
    const dir = mkdtempSync(join(jobsRoot, 'job-'));
    const checkpointDir = join(dir, 'checkpoint');
    mkdirSync(checkpointDir);
    const logFile = join(dir, 'output.log');
    const runner = new DockerRunner('docker', process.env, [], join(dir, 'env'), 'missing');
    const proc = await runner.start({
      jobId: `nlp.layer2-${kind.replace(/ /g, '-')}-${Date.now().toString(36)}`,
      attempt: 1,
      rank: 0,
      image: over.image ?? image,
      command,
      env: {},
      devices: [],
      checkpointDir,
      logFile,
      container: over.container ?? settingsOf(kind),
      limits,
    });
    return { proc, dir, checkpointDir, logFile, runner };
  }

  async function lastLine<T>(
    kind: Kind,
    command: string[],
    limits?: ContainerLimits,
    over?: Parameters<typeof runAs>[3],
  ): Promise<T & { exitCode: number | null }> {
    const { proc, logFile } = await runAs(kind, command, limits, over);
    const exit = await proc.exited;
    const out = readFileSync(logFile, 'utf8');
    return { ...(JSON.parse(out.trim().split('\n').pop()!) as T), exitCode: exit.exitCode };
  }

  it('gives no launch kind any capability or privilege gain: a raw socket and mknod are refused, and the folder is nosuid,nodev', async () => {
    // The host side: the jobs root is a mount of its own with nosuid,nodev (what the node's setup does at boot).
    const hostMount = readFileSync('/proc/self/mountinfo', 'utf8')
      .split('\n')
      .find((l) => l.split(' ')[4] === jobsRoot);
    expect(hostMount?.split(' ')[5]).toMatch(/(^|,)nosuid(,|$)/);
    expect(hostMount?.split(' ')[5]).toMatch(/(^|,)nodev(,|$)/);
    type Powers = {
      uid: number;
      capEff: string;
      noNewPrivs: string;
      packetSocket: string;
      rawSocket: string;
      mknod: string;
      setuidFile: string;
      mountOptions: string;
    };
    for (const kind of KINDS) {
      const p = await lastLine<Powers>(kind, ['/jobs/wall-probe', 'powers', CONTAINER_CHECKPOINT_DIR]);
      expect({ kind, ...p }).toMatchObject({
        kind,
        exitCode: 0,
        capEff: '0000000000000000',
        noNewPrivs: '1',
        packetSocket: 'EPERM',
        rawSocket: 'EPERM',
        mknod: 'EPERM',
      });
      // A setuid file of its own it may make, but on this mount it gives nothing: nosuid (and no device opens: nodev).
      expect(p.mountOptions.split(','), kind).toEqual(expect.arrayContaining(['nosuid', 'nodev']));
      // The test image names no user (root): no launch kind runs it as root.
      expect(p.uid, kind).toBe(JOB_UID);
      expect(p.setuidFile, kind).toBe('ok'); // it wrote its folder, through the folder's group
    }
  }, 120_000);

  it("runs an image's own user as that user, a root image as uid 65534, and as root only a spec let do so: never with power", async () => {
    // An image that names a user of its own (USER 1000:1000), made from the test image.
    const ownUser = `${image}-user1000`;
    if (spawnSync('docker', ['image', 'inspect', ownUser], { stdio: 'ignore' }).status !== 0) {
      const made = docker('create', image, 'true').trim();
      docker('commit', '--change', 'USER 1000:1000', made, ownUser);
      docker('rm', made);
    }
    type Who = { uid: number; capEff: string; noNewPrivs: string; mknod: string; setuidFile: string };
    const probe = ['/jobs/wall-probe', 'powers', CONTAINER_CHECKPOINT_DIR];
    const theirs = await lastLine<Who>('bridge job', probe, undefined, { image: ownUser });
    expect(theirs).toMatchObject({ exitCode: 0, uid: 1000, capEff: '0000000000000000', noNewPrivs: '1', setuidFile: 'ok' });
    const rooted = await lastLine<Who>('bridge job', probe, undefined, { container: { ...settingsOf('bridge job'), runAsRoot: true } });
    expect(rooted).toMatchObject({ exitCode: 0, uid: 0, capEff: '0000000000000000', noNewPrivs: '1', mknod: 'EPERM', setuidFile: 'ok' });
    // Let run as root, an image's own user still counts: root is what the image names, never more.
    const stillTheirs = await lastLine<Who>('bridge job', probe, undefined, {
      image: ownUser,
      container: { ...settingsOf('bridge job'), runAsRoot: true },
    });
    expect(stillTheirs.uid).toBe(1000);
  }, 120_000);

  it('kills a container past its memory alone and reports it out of memory; the agent answers and its neighbour runs on', async () => {
    const w = agentWorld();
    const work = mkdtempSync(join(jobsRoot, 'agent-oom-'));
    // A machine of 1 GiB with one GPU: a whole-GPU job may have 668 MiB (1 GiB less the reserve).
    const a = w.agent('i-oom', {
      workDir: work,
      runner: noGpuRunner(join(work, 'env')),
      config: { machine: { memoryMiB: 1024, cpus: 2 } },
    });
    const run = `t${Date.now().toString(36)}`;
    const hog = jobIdFor('nlp', `hog-${run}`);
    const neighbour = jobIdFor('cv', `neighbour-${run}`);
    try {
      await a.heartbeat();
      await w.submit(neighbour, {
        image,
        command: ['node', `${IMAGE_JOBS_DIR}/counter-job.mjs`, '100000', '20', '25'],
        container: { lockedMemoryMiB: LOCKED_MIB },
      });
      await w.place(neighbour, ['i-oom'], [0]);
      const neighbourSteps = () => {
        try {
          const marker = join(work, 'jobs', safeJobName(neighbour), 'attempt-1', 'checkpoint', 'checkpoint.json');
          return (JSON.parse(readFileSync(marker, 'utf8')) as { progressSec: number }).progressSec;
        } catch {
          return 0;
        }
      };
      await a.heartbeat();
      await waitFor('the neighbour to count', () => neighbourSteps() > 0);
      await w.submit(hog, {
        image,
        // 1.5 GiB, touched a page at a time (Buffer.alloc fills it), past its 668 MiB.
        command: [
          'node',
          '-e',
          'const held = []; for (let i = 0; i < 96; i++) held.push(Buffer.alloc(16 << 20, 1)); console.log("survived")',
        ],
        container: { lockedMemoryMiB: LOCKED_MIB },
      });
      await w.place(hog, ['i-oom'], [0]);
      await a.heartbeat();
      await waitFor('the hog to be reported', async () => (await w.jobs.get(hog))?.state === 'failed', 30_000);
      const failed = await w.jobs.get(hog);
      expect(failed).toMatchObject({ state: 'failed', exitCode: 137, failure: { code: 'out-of-memory' } });
      expect(failed?.failure?.message).toContain('668 MiB');
      // The agent answers (its heartbeat goes through), and the neighbour's container runs on.
      await a.heartbeat();
      expect((await w.nodes.get('i-oom'))?.healthy).toBe(true);
      expect(containersOf([neighbour])).toHaveLength(1);
      expect(await w.jobs.get(neighbour)).toMatchObject({ state: 'running' });
      const counted = neighbourSteps();
      await waitFor('the neighbour to count on', () => neighbourSteps() > counted);
    } finally {
      await w.shutdown();
    }
  }, 90_000);

  it("puts Docker's data and the job folders' disks on the machine's data volume, formatted once, and tells the agent whether the engine can hold a container's own files to a size", () => {
    const top = tmp('data-volume');
    const file = join(top, 'volume.img');
    asRoot('truncate', ['-s', '512M', file]);
    const dev = asRoot('losetup', ['--find', '--show', file]).trim();
    const o = {
      device: dev,
      dir: join(top, 'data'),
      disksDir: join(top, 'disks'),
      envFile: join(top, 'etc', 'data-volume.env'),
      fstab: join(top, 'fstab'),
    };
    writeFileSync(o.fstab, '');
    const script = join(top, 'gpu-fleet-data-volume');
    writeFileSync(script, dataVolumeScript(o), { mode: 0o755 });
    const runIt = () =>
      spawnSync(process.getuid?.() === 0 ? 'bash' : 'sudo', process.getuid?.() === 0 ? [script] : ['-n', 'bash', script], {
        encoding: 'utf8',
      });
    try {
      const first = runIt();
      expect(first.status, first.stderr).toBe(0);
      expect(asRoot('findmnt', ['-no', 'FSTYPE', '--mountpoint', o.dir]).trim()).toBe('xfs');
      expect(existsSync(join(o.dir, 'docker'))).toBe(true);
      // The job folders' disks are the data volume's: what goes in the one is in the other.
      asRoot('bash', ['-c', `echo kept > ${o.disksDir}/marker`]);
      expect(readFileSync(join(o.dir, 'disks', 'marker'), 'utf8')).toBe('kept\n');
      // Whether the engine can hold each container to a size is what the kernel mounted: project quotas or not.
      const quotas = /(^|,)(prjquota|pquota)(,|$)/.test(asRoot('findmnt', ['-no', 'OPTIONS', '--mountpoint', o.dir]));
      expect(readFileSync(o.envFile, 'utf8')).toBe(`GPU_FLEET_LAYER_QUOTA=${quotas ? 1 : 0}\n`);
      if (!quotas) expect(first.stderr).toContain('has no project quotas here; the agent stops a container past its share instead');
      // At every boot: mounted by its UUID, and its disks folder bound again.
      const fstab = readFileSync(o.fstab, 'utf8').trim().split('\n');
      expect(fstab).toEqual([
        expect.stringMatching(new RegExp(`^UUID=[0-9a-f-]+ ${o.dir} xfs defaults,nofail,prjquota 0 2$`)),
        `${o.dir}/disks ${o.disksDir} none bind,nofail 0 0`,
      ]);
      // Run again (the next boot): the volume is not formatted again, and nothing is added twice.
      const second = runIt();
      expect(second.status, second.stderr).toBe(0);
      expect(readFileSync(join(o.dir, 'disks', 'marker'), 'utf8')).toBe('kept\n');
      expect(readFileSync(o.fstab, 'utf8').trim().split('\n')).toHaveLength(2);
      // A machine without the volume: nothing changes, and the agent is told there is no quota.
      const none = join(top, 'none');
      writeFileSync(none, dataVolumeScript({ ...o, device: join(top, 'no-such-device'), envFile: join(top, 'none.env') }), { mode: 0o755 });
      const without = spawnSync('bash', [none], { encoding: 'utf8' });
      expect(without.status).toBe(0);
      expect(without.stderr).toContain('no data volume at');
      expect(readFileSync(join(top, 'none.env'), 'utf8')).toBe('GPU_FLEET_LAYER_QUOTA=0\n');
    } finally {
      quiet('umount', [o.disksDir]);
      quiet('umount', [o.dir]);
      quiet('losetup', ['-d', dev]);
    }
  }, 60_000);

  it('stops a container that writes past its limit outside its folders, and records it disk-full; its neighbour runs on', async () => {
    const w = agentWorld();
    const work = mkdtempSync(join(jobsRoot, 'agent-layer-'));
    // Its jobs may write 100 MiB outside their folders together; a whole-GPU job on a one-GPU machine gets all of it.
    const a = w.agent('i-layer', { workDir: work, runner: noGpuRunner(join(work, 'env')), config: { machine: { writableLayerMiB: 100 } } });
    const run = `t${Date.now().toString(36)}`;
    const writer = jobIdFor('nlp', `writer-${run}`);
    const neighbour = jobIdFor('cv', `quiet-${run}`);
    try {
      await a.heartbeat();
      await w.submit(neighbour, {
        image,
        // 40 MiB in its /tmp (within its 100 MiB), then it sleeps.
        command: ['node', '-e', 'require("fs").writeFileSync("/tmp/small", Buffer.alloc(40 << 20, 1)); setInterval(() => {}, 1000)'],
        container: { lockedMemoryMiB: LOCKED_MIB },
      });
      await w.place(neighbour, ['i-layer'], [0]);
      await a.heartbeat();
      await w.submit(writer, {
        image,
        // 16 MiB a second into /tmp (the container's own layer, not its folder), up to 2 GiB.
        command: [
          'node',
          '-e',
          'const fs = require("fs"); let n = 0; setInterval(() => { if (n++ < 128) fs.writeFileSync("/tmp/big-" + n, Buffer.alloc(16 << 20, 1)); }, 1000)',
        ],
        container: { lockedMemoryMiB: LOCKED_MIB },
      });
      await w.place(writer, ['i-layer'], [0]);
      await a.heartbeat();
      await waitFor(
        'the writer to be stopped',
        async () => {
          await a.heartbeat();
          return (await w.jobs.get(writer))?.state === 'failed';
        },
        60_000,
      );
      const failed = await w.jobs.get(writer);
      expect(failed).toMatchObject({ state: 'failed', failure: { code: 'disk-full' } });
      expect(failed?.failure?.message).toMatch(/wrote \d+ MiB outside its folders .*past its 100 MiB/);
      expect(containersOf([writer])).toHaveLength(0);
      // The neighbour wrote within its limit: it runs on.
      await a.heartbeat();
      expect(await w.jobs.get(neighbour)).toMatchObject({ state: 'running' });
      expect(containersOf([neighbour])).toHaveLength(1);
    } finally {
      await w.shutdown();
    }
  }, 120_000);

  it("gives each job's folder a disk of its own: a job that fills it fails alone, recorded disk-full, and its neighbour writes on", async () => {
    const w = agentWorld();
    const work = mkdtempSync(join(jobsRoot, 'agent-disk-'));
    mkdirSync(join(work, 'jobs'));
    const disks = join(work, 'disks');
    const helper = join(work, 'gpu-fleet-job-disk');
    writeFileSync(helper, jobDiskScript(join(work, 'jobs'), disks), { mode: 0o755 });
    // The agent runs the helper through `sudo -n`; this test is root already, so its stand-in for sudo just runs it.
    const sudo = join(work, 'sudo');
    writeFileSync(sudo, '#!/bin/sh\n[ "$1" = "-n" ] && shift\nexec "$@"\n', { mode: 0o755 });
    // A volume of 400 MiB with one GPU: each job's folder gets the least a folder gets, 512 MiB.
    const a = w.agent('i-disk', {
      workDir: work,
      runner: noGpuRunner(join(work, 'env')),
      jobDisks: sudoJobDisks(helper, process.env, sudo),
      config: { machine: { diskMiB: 400 } },
    });
    const run = `t${Date.now().toString(36)}`;
    const filler = jobIdFor('nlp', `filler-${run}`);
    const neighbour = jobIdFor('cv', `writer-${run}`);
    const folderOf = (id: string) => join(work, 'jobs', safeJobName(id), 'attempt-1', 'checkpoint');
    const steps = () => {
      try {
        return (JSON.parse(readFileSync(join(folderOf(neighbour), 'checkpoint.json'), 'utf8')) as { progressSec: number }).progressSec;
      } catch {
        return 0;
      }
    };
    try {
      await a.heartbeat();
      await w.submit(neighbour, {
        image,
        command: ['node', `${IMAGE_JOBS_DIR}/counter-job.mjs`, '100000', '20', '25'],
        container: { lockedMemoryMiB: LOCKED_MIB },
      });
      await w.place(neighbour, ['i-disk'], [0]);
      await a.heartbeat();
      await waitFor('the neighbour to save', () => steps() > 0);
      await w.submit(filler, {
        image,
        // Writes a MiB at a time into its folder until the disk says no, then fails.
        command: [
          'node',
          '-e',
          'const fs = require("node:fs"); const f = fs.openSync(process.env.GPU_FLEET_CHECKPOINT_DIR + "/fill.bin", "w"); const mib = Buffer.alloc(1 << 20, 7); let n = 0; try { for (;;) { fs.writeSync(f, mib); n++; } } catch (e) { console.log(JSON.stringify({ wroteMiB: n, error: e.code })); process.exit(1); }',
        ],
        container: { lockedMemoryMiB: LOCKED_MIB },
      });
      await w.place(filler, ['i-disk'], [0]);
      await a.heartbeat();
      await waitFor('the filler to be reported', async () => (await w.jobs.get(filler))?.state === 'failed', 60_000);
      const failed = await w.jobs.get(filler);
      expect(failed).toMatchObject({ state: 'failed', exitCode: 1, failure: { code: 'disk-full' } });
      expect(failed?.failure?.message).toContain('512 MiB');
      const wrote = w.output(work, filler, 1).find((l) => 'wroteMiB' in l) as { wroteMiB: number; error: string };
      expect(wrote.error).toBe('ENOSPC');
      expect(wrote.wroteMiB).toBeGreaterThan(400);
      expect(wrote.wroteMiB).toBeLessThan(512);
      // The neighbour's own disk kept its room: it saves on.
      const saved = steps();
      await waitFor('the neighbour to save on', () => steps() > saved);
      expect(await w.jobs.get(neighbour)).toMatchObject({ state: 'running' });
      // The filler's disk is taken back once its attempt is over (the neighbour's stays while it runs).
      await waitFor("the filler's disk to be taken back", () => readdirSync(disks).length === 1, 20_000);
      expect(spawnSync('mountpoint', ['-q', folderOf(neighbour)]).status).toBe(0);
      await waitFor("the filler's folder to go after its disk", () => !existsSync(folderOf(filler)), 20_000);
    } finally {
      await w.shutdown();
      spawnSync('bash', [helper, 'drop', folderOf(neighbour)]);
      spawnSync('bash', [helper, 'drop', folderOf(filler)]);
    }
  }, 120_000);

  it("stops a fork bomb at its container's process limit, and the engine runs the runner's next container", async () => {
    const limits = { ...containerLimits(1000, { memoryMiB: 8192, cpus: 2, gpus: 1 }, 64), pids: 64 };
    const found = await lastLine<{ children: number; refused: string }>('bridge job', ['/jobs/wall-probe', 'forks', '100000'], limits);
    expect(found.exitCode).toBe(0);
    expect(found.refused).toBe('EAGAIN');
    expect(found.children).toBeLessThan(64);
    expect(found.children).toBeGreaterThan(10);
    // The engine and its next container work: the bomb took only its own processes.
    const after = await lastLine<Record<string, string>>('bridge job', ['node', `${IMAGE_JOBS_DIR}/probe-connect.mjs`]);
    expect(after.exitCode).toBe(0);
  }, 90_000);

  it("lets the agent read what every launch kind writes through the folder's group, without any capability", async () => {
    // The agent's user and group as the node's setup makes them (not root: no capability over file modes).
    const AGENT_UID = 4243;
    const AGENT_GID = 4242;
    chmodSync(jobsRoot, 0o711);
    /** What a process of the agent's uid, in the given group, reads of the folder through the agent's own reader. */
    const readAs = (folder: string, uid: number, gid: number) => {
      const script = `
        const { openJobFolder, readSmall, closeAll } = await import(${JSON.stringify(join(import.meta.dirname, '../../agent/job-files.ts'))});
        const capEff = (await import('node:fs')).readFileSync('/proc/self/status', 'utf8').match(/^CapEff:\\s*(\\S+)/m)[1];
        try {
          const files = await openJobFolder(process.argv[1], process.argv[1]);
          const read = {};
          for (const f of files) read[f.path] = await readSmall(f, 1024);
          await closeAll(files);
          console.log(JSON.stringify({ capEff, read }));
        } catch (e) { console.log(JSON.stringify({ capEff, error: e.message })); }`;
      const out = spawnSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script, folder], {
        uid,
        gid,
        encoding: 'utf8',
        cwd: process.cwd(), // where tsx is found
        env: { PATH: process.env.PATH, HOME: '/tmp' },
      });
      if (out.status !== 0) throw new Error(out.stderr);
      return JSON.parse(out.stdout.trim().split('\n').pop()!) as { capEff: string; read?: Record<string, string>; error?: string };
    };
    for (const kind of KINDS) {
      const dir = mkdtempSync(join(jobsRoot, 'group-'));
      chownSync(dir, AGENT_UID, AGENT_GID);
      const checkpointDir = join(dir, 'checkpoint');
      mkdirSync(checkpointDir);
      chownSync(checkpointDir, AGENT_UID, AGENT_GID); // the agent makes the folder: it is the agent's
      const logFile = join(dir, 'output.log');
      const write = `const fs = require('node:fs'); const d = process.env.GPU_FLEET_CHECKPOINT_DIR;
        fs.mkdirSync(d + '/step-1/shard', { recursive: true }); fs.writeFileSync(d + '/step-1/shard/weights.bin', 'weights of ${kind}');
        fs.writeFileSync(d + '/checkpoint.json', JSON.stringify({ path: 'step-1', progressSec: 1 }));`;
      const proc = await new DockerRunner('docker', process.env, [], join(dir, 'env'), 'missing').start({
        jobId: `nlp.group-${kind.replace(/ /g, '-')}-${Date.now().toString(36)}`,
        attempt: 1,
        rank: 0,
        image,
        command: ['node', '-e', write],
        env: {},
        devices: [],
        checkpointDir,
        logFile,
        container: settingsOf(kind),
        limits: containerLimits(1000, { memoryMiB: 8192, cpus: 2, gpus: 1 }, 64),
      });
      expect((await proc.exited).exitCode, readFileSync(logFile, 'utf8')).toBe(0);
      // Written as the container's user (the test image names root, so 65534 for every kind), in the folder's group.
      const written = statSync(join(checkpointDir, 'step-1', 'shard', 'weights.bin'));
      expect({ kind, uid: written.uid, gid: written.gid }).toEqual({
        kind,
        uid: JOB_UID,
        gid: AGENT_GID,
      });
      // The agent's own folder (it made it), but every file and folder in it the container's.
      const found = readAs(checkpointDir, AGENT_UID, AGENT_GID);
      expect(found).toEqual({
        capEff: '0000000000000000',
        read: { 'checkpoint.json': '{"path":"step-1","progressSec":1}', 'step-1/shard/weights.bin': `weights of ${kind}` },
      });
      // Another uid out of the group reads nothing: the group is what lets a reader in, not a capability.
      expect(readAs(checkpointDir, AGENT_UID + 1, AGENT_GID + 1).error).toMatch(/not readable by the folder's group|EACCES/);
    }
  }, 120_000);

  it("asks the registry for each attempt's image: one only the engine's cache holds (another team's job left it) does not run", async () => {
    const dir = mkdtempSync(join(jobsRoot, 'pull-'));
    const checkpointDir = join(dir, 'checkpoint');
    mkdirSync(checkpointDir);
    const logFile = join(dir, 'output.log');
    // The runner as the agent makes it on a fleet machine (its default pull), given the cached test image no registry has.
    expect(docker('image', 'inspect', '--format', '{{.Id}}', image)).toMatch(/^sha256:/);
    const proc = await new DockerRunner('docker', process.env, [], join(dir, 'env')).start({
      jobId: `nlp.cached-${Date.now().toString(36)}`,
      attempt: 1,
      rank: 0,
      image,
      command: ['node', '-e', 'console.log("ran from the cache")'],
      env: {},
      devices: [],
      checkpointDir,
      logFile,
      container: settingsOf('bridge job'),
      limits: containerLimits(1000, { memoryMiB: 8192, cpus: 2, gpus: 1 }, 64),
    });
    const exit = await proc.exited;
    const out = readFileSync(logFile, 'utf8');
    expect(exit.exitCode, out).toBe(125); // docker's own failure: the container never started
    expect(out).not.toContain('ran from the cache');
  }, 60_000);

  it("keeps a bridge job from the host's listeners and from another job's container on the jobs' network", async () => {
    // A listener of the host on every address (as a gang's rendezvous port on the host's network is), and a second job serving.
    const hostServer = createServer((socket) => {
      socket.on('error', () => {}); // the probe closes as soon as it has connected
      socket.end('host');
    });
    await new Promise<void>((resolve) => hostServer.listen(0, '0.0.0.0', resolve));
    const hostPort = (hostServer.address() as { port: number }).port;
    const served = await runAs('bridge job', ['node', `${IMAGE_JOBS_DIR}/serve-tcp.mjs`, '8080']);
    try {
      await waitFor('the other job to listen', () => readFileSync(served.logFile, 'utf8').includes('listening'));
      const name = docker('ps', '--filter', 'label=io.gpu-fleet.job', '--format', '{{.Names}}')
        .split('\n')
        .find((n) => n.includes('layer2-bridge-job'));
      const neighbourIp = docker(
        'container',
        'inspect',
        '--format',
        `{{(index .NetworkSettings.Networks "${JOBS_NETWORK.name}").IPAddress}}`,
        name!,
      );
      const gateway = docker('network', 'inspect', '--format', '{{(index .IPAM.Config 0).Gateway}}', JOBS_NETWORK.name);
      const targets = [`${gateway}:${hostPort}`, `${hostAddress()}:${hostPort}`, `${neighbourIp}:8080`];
      // Before the wall the host's listener answers at both its addresses (so the wall is what stops it); the other job never does (no traffic between containers).
      const open = await lastLine<Record<string, string>>('bridge job', ['node', `${IMAGE_JOBS_DIR}/probe-connect.mjs`, ...targets]);
      expect(open[targets[0]!]).toBe('open');
      expect(open[targets[1]!]).toBe('open');
      expect(open[targets[2]!]).toBe('ETIMEDOUT');
      asRoot('bash', [
        '-c',
        metadataWallScript({ allowUids: [String(process.getuid?.() ?? 0)], v4: [], v6: [], jobsBridge: JOBS_NETWORK.bridge }),
      ]);
      const walled = await lastLine<Record<string, string>>('bridge job', ['node', `${IMAGE_JOBS_DIR}/probe-connect.mjs`, ...targets]);
      expect(walled[targets[0]!]).toBe('ECONNREFUSED');
      expect(walled[targets[1]!]).toBe('ECONNREFUSED');
      expect(walled[targets[2]!]).toBe('ETIMEDOUT');
    } finally {
      await served.proc.stop(1000);
      hostServer.close();
    }
  }, 90_000);
});

/**
 * The node's metadata wall (infra/node-setup.ts `metadataWallScript`), installed on this machine
 * and proven from inside containers the agent's runner starts with its own arguments. The stand-in
 * metadata server: a network namespace holding a link-local address (169.254.123.254, not the real
 * one, which a cloud machine running this test may need) behind a veth pair, with a host route to
 * it. So it is reached as the real one is, by routing off the host: a bridge container's packets
 * are forwarded (FORWARD, where DOCKER-USER is), a host-network container's and the host's own
 * leave through OUTPUT. Before the wall every kind of container reaches it, which shows the wall
 * is what stops them. The last step restarts dockerd, so this runs after the engine tests above.
 */
describe.runIf(!problem || dockerRequired)('the metadata wall on a real Docker engine', () => {
  const STAND_IN = '169.254.123.254';
  const NS = `gfmeta${process.pid}`;
  const VETH = `gfm${process.pid % 100_000}`;
  const asRoot = (cmd: string, args: string[]) =>
    process.getuid?.() === 0
      ? execFileSync(cmd, args, { encoding: 'utf8' })
      : execFileSync('sudo', ['-n', cmd, ...args], { encoding: 'utf8' });
  const ip = (...args: string[]) => asRoot('ip', args);
  const inNs = (...args: string[]) => ip('netns', 'exec', NS, ...args);
  let image: string;
  let server: ChildProcess | undefined;
  const script = metadataWallScript({ allowUids: [String(process.getuid?.() ?? 0)], v4: [STAND_IN], v6: [] });

  beforeAll(async () => {
    if (problem) throw new Error(`GPU_FLEET_DOCKER_TESTS=required, but ${problem}`);
    image = ensureTestImage();
    ip('netns', 'add', NS);
    ip('link', 'add', VETH, 'type', 'veth', 'peer', 'name', `${VETH}p`);
    ip('link', 'set', `${VETH}p`, 'netns', NS);
    ip('addr', 'add', '10.254.254.1/30', 'dev', VETH);
    ip('link', 'set', VETH, 'up');
    inNs('ip', 'addr', 'add', '10.254.254.2/30', 'dev', `${VETH}p`);
    inNs('ip', 'addr', 'add', `${STAND_IN}/32`, 'dev', `${VETH}p`);
    inNs('ip', 'link', 'set', `${VETH}p`, 'up');
    inNs('ip', 'link', 'set', 'lo', 'up');
    inNs('ip', 'route', 'add', 'default', 'via', '10.254.254.1');
    ip('route', 'add', `${STAND_IN}/32`, 'via', '10.254.254.2');
    const serve = `require('node:http').createServer((q, s) => s.end('stand-in-role')).listen(80, '${STAND_IN}')`;
    const args = ['netns', 'exec', NS, process.execPath, '-e', serve];
    server = process.getuid?.() === 0 ? spawn('ip', args, { stdio: 'ignore' }) : spawn('sudo', ['-n', 'ip', ...args], { stdio: 'ignore' });
    await waitFor('the stand-in metadata server', async () => (await hostReaches()).reached);
  }, 120_000);

  afterAll(() => {
    server?.kill();
    const quiet = (cmd: string, args: string[]) => {
      try {
        asRoot(cmd, args);
      } catch {
        // already gone
      }
    };
    quiet('iptables', ['-w', '-D', 'OUTPUT', '-d', STAND_IN, '-j', WALL_CHAIN]);
    quiet('iptables', ['-w', '-D', 'DOCKER-USER', '-d', STAND_IN, '-j', 'REJECT']);
    quiet('iptables', ['-w', '-F', WALL_CHAIN]);
    quiet('iptables', ['-w', '-X', WALL_CHAIN]);
    quiet('iptables', ['-w', '-D', 'INPUT', '-i', JOBS_NETWORK.bridge, '-j', BRIDGE_WALL_CHAIN]);
    quiet('iptables', ['-w', '-F', BRIDGE_WALL_CHAIN]);
    quiet('iptables', ['-w', '-X', BRIDGE_WALL_CHAIN]);
    quiet('ip', ['route', 'del', `${STAND_IN}/32`]);
    quiet('ip', ['link', 'del', VETH]);
    quiet('ip', ['netns', 'del', NS]);
  });

  /** The host's own request to the stand-in (this process: root, or the user the wall lets through). */
  function hostReaches(): Promise<{ reached: boolean }> {
    return new Promise((resolve) => {
      const req = httpRequest({ host: STAND_IN, port: 80, path: '/', timeout: 2000 }, (res) => {
        res.resume();
        res.on('end', () => resolve({ reached: true }));
      });
      req.on('timeout', () => req.destroy());
      req.on('error', () => resolve({ reached: false }));
      req.end();
    });
  }

  type Probe = { uid: number; capEff: string; noNewPrivs: string; wrote: boolean; reached: boolean; body?: string; error?: string };

  /** Starts the probe as the agent's runner starts a job of this spec (its container settings), and reads what it found. */
  async function probe(kind: 'bridge job' | 'service replica' | 'gang rank'): Promise<Probe> {
    const spec = checkJobSpec({
      image,
      command: ['node', `${IMAGE_JOBS_DIR}/probe-metadata.mjs`, STAND_IN],
      gpu: { kind: 'whole', count: 1 },
      container: { lockedMemoryMiB: LOCKED_MIB },
      ...(kind === 'gang rank' ? { nodes: 2 } : {}),
      ...(kind === 'service replica'
        ? {
            name: 'probe',
            service: { port: 18_080, replicas: { min: 1, max: 1 }, targets: [{ metric: 'waiting-requests', perReplica: 8 }] },
          }
        : {}),
    });
    if (!spec.ok) throw new Error(spec.errors.join('; '));
    const dir = tmp('wall');
    const checkpointDir = join(dir, 'checkpoint');
    mkdirSync(checkpointDir);
    const logFile = join(dir, 'output.log');
    const runner = noGpuRunner(join(dir, 'env'));
    const proc = await runner.start({
      jobId: `nlp.wall-${kind.replace(/ /g, '-')}-${Date.now().toString(36)}`,
      attempt: 1,
      rank: kind === 'gang rank' ? 1 : 0,
      image,
      command: spec.spec.command,
      env: {},
      devices: [],
      checkpointDir,
      logFile,
      container: containerSettings(spec.spec),
    });
    const exit = await proc.exited;
    const out = readFileSync(logFile, 'utf8');
    expect(exit.exitCode, out).toBe(0);
    const found = JSON.parse(out.trim().split('\n').pop()!) as Probe;
    // What the job wrote is in its folder, where the agent uploads it from.
    if (found.wrote) expect(readFileSync(join(checkpointDir, 'probe.txt'), 'utf8')).toBe('written by the job');
    return found;
  }

  it('keeps bridge jobs, service replicas and gang ranks from the metadata server the host reaches, and the rules outlive a restart of docker', async () => {
    // Without the wall, every kind reaches the stand-in (so it is the wall that stops them below).
    const open = await Promise.all((['bridge job', 'service replica', 'gang rank'] as const).map((k) => probe(k)));
    expect(open.map((p) => [p.reached, p.body])).toEqual([
      [true, 'stand-in-role'],
      [true, 'stand-in-role'],
      [true, 'stand-in-role'],
    ]);
    // Host-network containers run as a uid of their own with no capabilities and no privilege gain, and still write their folder.
    for (const p of open.slice(1))
      expect(p).toMatchObject({ uid: HOST_NETWORK_JOB_UID, capEff: '0000000000000000', noNewPrivs: '1', wrote: true });
    expect(open[0]!.wrote).toBe(true);

    const walled = async () => {
      const found = await Promise.all((['bridge job', 'service replica', 'gang rank'] as const).map((k) => probe(k)));
      for (const p of found) expect(p).toMatchObject({ reached: false, error: 'ECONNREFUSED' });
      expect(await hostReaches()).toEqual({ reached: true });
    };
    asRoot('bash', ['-c', script]);
    await walled();
    asRoot('bash', ['-c', script]); // idempotent: a second run adds nothing
    const rules = (chain: string) =>
      asRoot('iptables', ['-w', '-S', chain])
        .split('\n')
        .filter((l) => l.includes(STAND_IN));
    expect(rules('OUTPUT')).toHaveLength(1);
    expect(rules('DOCKER-USER')).toHaveLength(1);

    // dockerd restarts (an upgrade, a crash): its own chains are rebuilt; the wall stays.
    restartDockerd();
    await walled();
  }, 240_000);
});

/**
 * The machine's own port wall (infra/node-setup.ts `portWallScript` and the peers helper the agent
 * runs through sudo), installed on this machine for two stand-in machines of the fleet: network
 * namespaces behind veth pairs, one a machine of the gang ("peer"), one any other machine of the
 * fleet ("stranger"). The wall judges only what arrives on those two links, so nothing else this
 * machine serves is touched. A gang rank runs as the agent's runner starts one (the host's network),
 * listening on its rendezvous port.
 */
describe.runIf(!problem || dockerRequired)("the machine's port wall on a real Docker engine", () => {
  const tag = process.pid % 100_000;
  const links = {
    peer: { ns: `gfpeer${process.pid}`, veth: `gfp${tag}`, host: '10.254.251.1', addr: '10.254.251.2' },
    stranger: { ns: `gfstr${process.pid}`, veth: `gfs${tag}`, host: '10.254.250.1', addr: '10.254.250.2' },
  } as const;
  const asRoot = (cmd: string, args: string[]) =>
    process.getuid?.() === 0
      ? execFileSync(cmd, args, { encoding: 'utf8' })
      : execFileSync('sudo', ['-n', cmd, ...args], { encoding: 'utf8' });
  const quiet = (cmd: string, args: string[]) => {
    try {
      asRoot(cmd, args);
    } catch {
      // already gone
    }
  };
  let image: string;
  let helper: string;
  let ports: AttemptPorts;
  const dir = tmp('port-wall');

  beforeAll(() => {
    if (problem) throw new Error(`GPU_FLEET_DOCKER_TESTS=required, but ${problem}`);
    image = ensureTestImage();
    for (const l of Object.values(links)) {
      asRoot('ip', ['netns', 'add', l.ns]);
      asRoot('ip', ['link', 'add', l.veth, 'type', 'veth', 'peer', 'name', `${l.veth}p`]);
      asRoot('ip', ['link', 'set', `${l.veth}p`, 'netns', l.ns]);
      asRoot('ip', ['addr', 'add', `${l.host}/30`, 'dev', l.veth]);
      asRoot('ip', ['link', 'set', l.veth, 'up']);
      asRoot('ip', ['netns', 'exec', l.ns, 'ip', 'addr', 'add', `${l.addr}/30`, 'dev', `${l.veth}p`]);
      asRoot('ip', ['netns', 'exec', l.ns, 'ip', 'link', 'set', `${l.veth}p`, 'up']);
    }
    helper = join(dir, 'gpu-fleet-peers');
    writeFileSync(helper, peersHelperScript(), { mode: 0o755 });
    // The agent runs the helper through `sudo -n`; this test is root already, so its stand-in for sudo just runs it.
    const sudo = join(dir, 'sudo');
    writeFileSync(sudo, '#!/bin/sh\n[ "$1" = "-n" ] && shift\nexec "$@"\n', { mode: 0o755 });
    ports = sudoPeers(helper, process.env, sudo);
  }, 120_000);

  afterAll(() => {
    for (const ipt of ['iptables', 'ip6tables']) {
      for (const l of Object.values(links)) quiet(ipt, ['-w', '-D', 'INPUT', '-i', l.veth, '-j', PORT_WALL_CHAIN]);
      quiet('bash', [helper, 'reset']);
      for (const chain of [PORT_WALL_CHAIN, GANG_PEERS_CHAIN]) {
        quiet(ipt, ['-w', '-F', chain]);
        quiet(ipt, ['-w', '-X', chain]);
      }
    }
    for (const l of Object.values(links)) {
      quiet('ip', ['link', 'del', l.veth]);
      quiet('ip', ['netns', 'del', l.ns]);
    }
  });

  /** What a stand-in machine reaches of this one: each port's answer (open, or the error's code). */
  function reach(from: keyof typeof links, ...targets: number[]): Record<number, string> {
    const l = links[from];
    const out = asRoot('ip', [
      'netns',
      'exec',
      l.ns,
      process.execPath,
      join(JOBS_DIR, 'probe-connect.mjs'),
      ...targets.map((p) => `${l.host}:${p}`),
    ]);
    const found = JSON.parse(out.trim()) as Record<string, string>;
    return Object.fromEntries(targets.map((p) => [p, found[`${l.host}:${p}`]!]));
  }

  it("lets a gang's machines reach its rank's ports while the attempt runs, and no other machine of the fleet; the scrape port stays the security group's", async () => {
    const rendezvous = await freePort();
    const scrape = createServer((socket) => {
      socket.on('error', () => {});
      socket.end('metrics');
    });
    await new Promise<void>((resolve) => scrape.listen(0, '0.0.0.0', resolve));
    const scrapePort = (scrape.address() as { port: number }).port;
    // A gang rank as the runner starts one: the host's network, uid 65534, listening on its rendezvous port.
    const spec = checkJobSpec({
      image,
      command: ['node', `${IMAGE_JOBS_DIR}/serve-tcp.mjs`, String(rendezvous)],
      gpu: { kind: 'whole', count: 1 },
      nodes: 2,
      container: { lockedMemoryMiB: LOCKED_MIB },
    });
    if (!spec.ok) throw new Error(spec.errors.join('; '));
    const checkpointDir = join(dir, 'checkpoint');
    mkdirSync(checkpointDir);
    const logFile = join(dir, 'output.log');
    const jobId = `nlp.port-wall-${Date.now().toString(36)}`;
    const rank = await new DockerRunner('docker', process.env, [], join(dir, 'env'), 'missing').start({
      jobId,
      attempt: 1,
      rank: 0,
      image,
      command: spec.spec.command,
      env: {},
      devices: [],
      checkpointDir,
      logFile,
      container: containerSettings(spec.spec),
      limits: containerLimits(1000, { memoryMiB: 8192, cpus: 2, gpus: 1 }, 64),
    });
    try {
      await waitFor('the rank to listen', () => readFileSync(logFile, 'utf8').includes('listening'));
      // Without the wall, every machine of the fleet reaches the rank (what the flat security group allows).
      expect(reach('stranger', rendezvous, scrapePort)).toEqual({ [rendezvous]: 'open', [scrapePort]: 'open' });
      asRoot('bash', ['-c', portWallScript({ openPorts: [scrapePort], interfaces: [links.peer.veth, links.stranger.veth] })]);
      asRoot('bash', ['-c', portWallScript({ openPorts: [scrapePort], interfaces: [links.peer.veth, links.stranger.veth] })]); // idempotent
      expect(
        asRoot('iptables', ['-w', '-S', 'INPUT'])
          .split('\n')
          .filter((r) => r.includes(PORT_WALL_CHAIN)),
      ).toHaveLength(2);
      // The wall up, no attempt open: nobody reaches the rank; the scrape port is left to the security group.
      expect(reach('peer', rendezvous, scrapePort)).toEqual({ [rendezvous]: 'ECONNREFUSED', [scrapePort]: 'open' });
      // The agent opens the attempt to the gang's other machine: that one reaches it, the stranger still does not.
      const key = wallKey(jobId, 1);
      await ports.open(key, [links.peer.addr]);
      expect(reach('peer', rendezvous)).toEqual({ [rendezvous]: 'open' });
      expect(reach('stranger', rendezvous)).toEqual({ [rendezvous]: 'ECONNREFUSED' });
      // A replica's port is opened to whoever the security group lets through (the load balancer).
      const other = wallKey(jobId, 2);
      await ports.openPort(other, rendezvous);
      expect(reach('stranger', rendezvous)).toEqual({ [rendezvous]: 'open' });
      await ports.close(other);
      expect(reach('stranger', rendezvous)).toEqual({ [rendezvous]: 'ECONNREFUSED' });
      // The attempt ends: its peers are shut out again; a restarted agent drops whatever an earlier one left.
      await ports.close(key);
      expect(reach('peer', rendezvous)).toEqual({ [rendezvous]: 'ECONNREFUSED' });
      await ports.open(key, [links.peer.addr]);
      await ports.reset();
      expect(reach('peer', rendezvous)).toEqual({ [rendezvous]: 'ECONNREFUSED' });
      expect(asRoot('iptables', ['-w', '-S']).includes('GF-P-')).toBe(false);
      // The helper refuses what is not a key or an address.
      await expect(ports.open('../x', ['10.0.0.1'])).rejects.toThrow(/refused: the key must be 1 to 16 hex digits/);
      await expect(ports.open(key, ['10.0.0.1; reboot'])).rejects.toThrow(/is not an address/);
    } finally {
      await rank.stop(1000);
      scrape.close();
    }
  }, 120_000);
});

/** Restarts the Docker engine: through systemd where it runs docker, else dockerd again with the arguments it had. */
function restartDockerd(): void {
  const systemd = spawnSync('systemctl', ['is-active', '--quiet', 'docker'], { stdio: 'ignore' });
  if (systemd.status === 0) execFileSync('systemctl', ['restart', 'docker']);
  else {
    // The engine's process, found in /proc (no pidof or pgrep needed).
    const pid = Number(
      readdirSync('/proc').find(
        (p) => /^\d+$/.test(p) && existsSync(`/proc/${p}/comm`) && readFileSync(`/proc/${p}/comm`, 'utf8').trim() === 'dockerd',
      ),
    );
    if (!pid) throw new Error('no dockerd process to restart');
    const cmdline = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').filter(Boolean);
    process.kill(pid, 'SIGTERM');
    for (let i = 0; i < 300 && existsSync(`/proc/${pid}`); i++) sleepMs(100);
    const log = openSync(join(tmpdir(), 'gpu-fleet-dockerd-restarted.log'), 'a');
    spawn(cmdline[0]!, cmdline.slice(1), { detached: true, stdio: ['ignore', log, log] }).unref();
  }
  for (let i = 0; i < 600; i++) {
    if (spawnSync('docker', ['info'], { stdio: 'ignore' }).status === 0) return;
    sleepMs(100);
  }
  throw new Error('dockerd did not answer within 60 s of its restart');
}

function sleepMs(ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}
