import {
  chmodSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { CreateBucketCommand, S3Client } from '@aws-sdk/client-s3';
import S3rver from 's3rver';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AwsImds } from '../../agent/metadata.ts';
import { DirectoryBlobs, readMarker, S3Blobs } from '../../agent/checkpoint-files.ts';
import { DeviceAllocator, DeviceError, nvidiaSmiMig, type MigControl } from '../../agent/devices.ts';
import {
  mergeGpuInstances,
  mergeList,
  parseGpuInstances,
  parseNvidiaSmiList,
  parseNvidiaSmiText,
  type NvidiaSmiReport,
} from '../../agent/nvidia-smi.ts';
import fc from 'fast-check';
import {
  containerName,
  containerSettingArgs,
  dockerRunArgs,
  DockerRunner,
  MAX_SAFE_NAME,
  ProcessRunner,
  safeJobName,
} from '../../agent/runner.ts';
import { checkJobSpec, containerSettings, HOST_NETWORK_JOB_UID, type JobSpecInput } from '../../core/job-spec.ts';
import { jobIdFor } from '../../core/job.ts';
import { agentWorld, COUNTER_JOB, waitFor } from '../support/agent-world.ts';
import { FAKE_BIN, NVIDIA_SMI_FIXTURES } from '../support/gpu-fixtures.ts';
import { awsInstance, IMDS_BODIES, startMetadataServer } from '../support/metadata-server.ts';

const tmp = (name: string) => mkdtempSync(join(tmpdir(), `${name}-`));
const launch = (over: Partial<Parameters<typeof dockerRunArgs>[0]> = {}) => ({
  jobId: 'nlp.train-7',
  attempt: 2,
  rank: 0,
  image: 'pytorch/pytorch:2.3.0-cuda12.1',
  command: ['python', 'train.py', '--lr', '3e-4; rm -rf /', '$HOME'],
  env: { WANDB_API_KEY: 'secret-value', ODD: ' spaces, "quotes", = and #hash ', GPU_FLEET_JOB_ID: 'nlp.train-7' },
  devices: ['GPU-aaaa', 'GPU-bbbb'],
  checkpointDir: '/var/lib/gpu-fleet/jobs/nlp.train-7/attempt-2/checkpoint',
  resumeDir: '/var/lib/gpu-fleet/jobs/nlp.train-7/attempt-2/resume',
  logFile: '/dev/null',
  container: { network: 'bridge' as const, shmSizeMiB: 2048, lockedMemoryMiB: 'unlimited' as const },
  limits: { memoryMiB: 61_440, milliCpus: 23_500, pids: 8192, shmMiB: 2048 },
  ...over,
});

describe('docker runner', () => {
  it('builds docker run with exactly the given GPUs, both folders, its limits, no power, variables in an env file only, and the argv untouched', () => {
    const imageId = `sha256:${'ab'.repeat(32)}`;
    const { args, envFileText } = dockerRunArgs(launch(), {
      envFile: '/var/lib/gpu-fleet/env/x.env',
      folderGid: 990,
      cgroupParent: 'gpu-fleet-jobs.slice',
      // The image as pulled for this attempt: its user is root (the image names none).
      resolved: { id: imageId, user: '' },
    });
    expect(args).toEqual([
      'run',
      '--detach', // the container lives apart from the agent; the agent follows its output and its end
      '--init',
      '--name',
      'gpu-fleet-nlp.train-7-a2-r0',
      '--label',
      'io.gpu-fleet.job=nlp.train-7',
      '--label',
      'io.gpu-fleet.job.attempt=2',
      '--label',
      'io.gpu-fleet.job.rank=0',
      '--log-driver', // the engine's copy of the output is bounded whatever its defaults
      'json-file',
      '--log-opt',
      'max-size=10m',
      '--log-opt',
      'max-file=3',
      '--pull',
      'never', // the runner pulled it for this attempt, and runs the very image it inspected
      '--gpus',
      '"device=GPU-aaaa,GPU-bbbb","capabilities=compute,utility"',
      '--network',
      'gpu-fleet-jobs',
      '--cap-drop',
      'ALL',
      '--security-opt',
      'no-new-privileges',
      '--user', // not root: the image names none, and the spec was not let run as root
      '65534:990',
      '--shm-size',
      '2048m',
      '--ulimit',
      'memlock=-1:-1',
      '--ulimit',
      'stack=67108864',
      '--memory',
      '61440m',
      '--memory-swap',
      '61440m',
      '--pids-limit',
      '8192',
      '--cpus',
      '23.500',
      '--cgroup-parent',
      'gpu-fleet-jobs.slice',
      '--mount',
      'type=bind,source=/var/lib/gpu-fleet/jobs/nlp.train-7/attempt-2/checkpoint,target=/gpu-fleet/checkpoint',
      '--mount',
      'type=bind,source=/var/lib/gpu-fleet/jobs/nlp.train-7/attempt-2/resume,target=/gpu-fleet/resume,readonly',
      '--env-file',
      '/var/lib/gpu-fleet/env/x.env',
      '--',
      imageId,
      'python',
      'train.py',
      '--lr',
      '3e-4; rm -rf /',
      '$HOME',
    ]);
    expect(args.join(' ')).not.toContain('secret-value');
    // Docker takes each value as written after the first "=": spaces, quotes and "#" included.
    expect(envFileText).toBe(
      [
        'GPU_FLEET_CHECKPOINT_DIR=/gpu-fleet/checkpoint',
        'GPU_FLEET_JOB_ID=nlp.train-7',
        'GPU_FLEET_RESUME_DIR=/gpu-fleet/resume',
        'ODD= spaces, "quotes", = and #hash ',
        'WANDB_API_KEY=secret-value',
        '',
      ].join('\n'),
    );
    expect(() => dockerRunArgs(launch({ env: { MULTI: 'line one\nline two' } }), { envFile: '/x.env' })).toThrow(/MULTI .* line break/);
    expect(dockerRunArgs(launch({ devices: [] }), { envFile: '/x.env' }).args).not.toContain('--gpus');
    // On a data root with project quotas, the engine holds its own files to its share.
    expect(dockerRunArgs(launch({ layerMiB: 10240 }), { envFile: '/x.env', layerQuota: true }).args.join(' ')).toContain(
      '--cpus 23.500 --storage-opt size=10240m --mount',
    );
    expect(dockerRunArgs(launch({ layerMiB: 10240 }), { envFile: '/x.env' }).args).not.toContain('--storage-opt');
    // Not resolved first: the engine pulls the named image itself.
    expect(dockerRunArgs(launch(), { envFile: '/x.env' }).args.join(' ')).toContain('--pull always');
    expect(dockerRunArgs(launch(), { envFile: '/x.env' }).args).toContain('pytorch/pytorch:2.3.0-cuda12.1');
    expect(containerName('nlp.odd/id~7e', 3, 1)).toBe('gpu-fleet-nlp.odd_2fid_7e7e-a3-r1');
  });

  it("runs a service or a gang on the host network, the rest on docker's bridge, with the shared and locked memory asked", () => {
    const args = (container: Parameters<typeof containerSettingArgs>[0]) => containerSettingArgs(container).join(' ');
    const powerless = '--cap-drop ALL --security-opt no-new-privileges';
    // An image whose user is not known is taken as root, and runs as uid 65534.
    expect(args({ network: 'host', shmSizeMiB: 8192, lockedMemoryMiB: 'unlimited' })).toBe(
      `--network host ${powerless} --user 65534:65534 --shm-size 8192m --ulimit memlock=-1:-1 --ulimit stack=67108864`,
    );
    expect(args({ network: 'bridge', shmSizeMiB: 1024, lockedMemoryMiB: 64 })).toBe(
      `--network gpu-fleet-jobs ${powerless} --user 65534:65534 --shm-size 1024m --ulimit memlock=67108864:67108864 --ulimit stack=67108864`,
    );
    // A host-network container runs as a uid of its own (in its folder's group), with no capabilities and no privilege gain.
    expect(
      containerSettingArgs({ network: 'host', runAsUid: 65534, shmSizeMiB: 64, lockedMemoryMiB: 'unlimited' }, { folderGid: 990 }).join(
        ' ',
      ),
    ).toBe(`--network host ${powerless} --user 65534:990 --shm-size 64m --ulimit memlock=-1:-1 --ulimit stack=67108864`);
    // /dev/shm counts within the memory limit, so it is never more.
    expect(
      containerSettingArgs(
        { network: 'bridge', shmSizeMiB: 1_048_576, lockedMemoryMiB: 'unlimited' },
        { folderGid: 990, limits: { memoryMiB: 3000, milliCpus: 2000, pids: 512, shmMiB: 3000 } },
      ).join(' '),
    ).toContain('--user 65534:990 --shm-size 3000m');
    // The image's own user, when it is not root, is kept, and gets the folder's group.
    const bridge = { network: 'bridge', shmSizeMiB: 64, lockedMemoryMiB: 'unlimited' } as const;
    expect(containerSettingArgs(bridge, { folderGid: 990, imageUser: 'appuser' }).join(' ')).toContain(
      `${powerless} --group-add 990 --shm-size`,
    );
    expect(containerSettingArgs(bridge, { folderGid: 990, imageUser: '1000:1000' }).join(' ')).toContain(
      `${powerless} --group-add 990 --shm-size`,
    );
    for (const root of ['', 'root', '0', '0:0', 'root:wheel', '000'])
      expect(containerSettingArgs(bridge, { folderGid: 990, imageUser: root }).join(' ')).toContain(
        `${powerless} --user 65534:990 --shm-size`,
      );
    // Let run as root (intake admits it for the teams the config names): the image's root, still without power.
    expect(containerSettingArgs({ ...bridge, runAsRoot: true }, { folderGid: 990, imageUser: '' }).join(' ')).toContain(
      `${powerless} --group-add 990 --shm-size`,
    );
    // The host's network is never the image's user: the metadata wall tells containers from the host by uid 65534.
    expect(
      containerSettingArgs({ ...bridge, network: 'host', runAsUid: 65534, runAsRoot: true }, { folderGid: 990, imageUser: 'appuser' }).join(
        ' ',
      ),
    ).toContain('--user 65534:990');
    const spec = (over: Partial<JobSpecInput>) => {
      const checked = checkJobSpec({ image: 'x/y:1', command: ['serve'], gpu: { kind: 'whole', count: 4 }, ...over });
      if (!checked.ok) throw new Error(checked.errors.join('; '));
      return containerSettings(checked.spec);
    };
    expect(spec({})).toEqual({ network: 'bridge', shmSizeMiB: 4096, lockedMemoryMiB: 'unlimited' });
    expect(spec({ nodes: 2 })).toMatchObject({ network: 'host', runAsUid: HOST_NETWORK_JOB_UID });
    expect(spec({ container: { runAsRoot: true } })).toMatchObject({ network: 'bridge', runAsRoot: true });
    // Never on the host's network.
    expect(
      checkJobSpec({ image: 'x/y:1', command: ['a'], gpu: { kind: 'whole', count: 1 }, nodes: 2, container: { runAsRoot: true } }),
    ).toEqual({
      ok: false,
      errors: [
        "container.runAsRoot: a service or a multi-node gang runs on the machine's network as uid 65534, never as root: the node's metadata wall tells containers from the host by that uid; got true",
      ],
    });
    expect(
      spec({
        name: 'chat',
        service: { port: 8000, replicas: { min: 1, max: 2 }, targets: [{ metric: 'waiting-requests', perReplica: 4 }] },
      }).network,
    ).toBe('host');
    expect(spec({ gpu: { kind: 'mig', profile: '1g.10gb' }, container: { shmSizeMiB: 256, lockedMemoryMiB: 128 } })).toEqual({
      network: 'bridge',
      shmSizeMiB: 256,
      lockedMemoryMiB: 128,
    });
    expect(checkJobSpec({ image: 'x/y:1', command: ['a'], gpu: { kind: 'whole', count: 1 }, container: { shmSizeMiB: 16 } })).toEqual({
      ok: false,
      errors: ['container.shmSizeMiB: must be at least 64 MiB; got 16'],
    });
  });

  it('gives two jobs distinct containers and folders whatever their ids hold', () => {
    // jobIdFor('nlp', 'a b') and jobIdFor('nlp', 'a_20b'): the old mapping (every other character to "_") gave both "nlp.a_20b".
    const ids = [
      jobIdFor('nlp', 'a b'),
      jobIdFor('nlp', 'a_20b'),
      'nlp.a/20b',
      '.hidden',
      '_2ehidden',
      'nlp.Ā',
      'x'.repeat(400),
      `${'x'.repeat(399)}y`,
    ];
    const names = ids.map(safeJobName);
    expect(new Set(names).size).toBe(ids.length);
    for (const n of names) {
      expect(n).toMatch(/^[A-Za-z0-9_-][A-Za-z0-9_.-]*$/);
      expect(n.length).toBeLessThanOrEqual(MAX_SAFE_NAME);
    }
    expect(containerName(jobIdFor('nlp', 'a b'), 1, 0)).not.toBe(containerName(jobIdFor('nlp', 'a_20b'), 1, 0));
    fc.assert(
      fc.property(fc.string({ unit: 'binary', maxLength: 300 }), fc.string({ unit: 'binary', maxLength: 300 }), (a, b) => {
        fc.pre(a !== b);
        expect(safeJobName(a)).not.toBe(safeJobName(b));
        expect(safeJobName(a).length).toBeLessThanOrEqual(MAX_SAFE_NAME);
      }),
    );
  });

  it('runs a containerised job through the docker CLI: checkpoint signal by docker kill, exit code from docker run', async () => {
    const w = agentWorld();
    const state = tmp('docker-state');
    const dockerLog = join(tmp('docker-log'), 'calls.jsonl');
    const env = { ...process.env, PATH: `${FAKE_BIN}:${process.env.PATH}`, FAKE_DOCKER_STATE: state, FAKE_DOCKER_LOG: dockerLog };
    const server = await startMetadataServer('aws', awsInstance('i-d'));
    const work = tmp('agent-d');
    const a = w.agent('i-d', {
      workDir: work,
      runner: new DockerRunner('docker', env, [], join(work, 'env')),
      metadata: new AwsImds(server.url),
    });
    try {
      await a.heartbeat();
      await w.submit('nlp.boxed', { command: ['node', COUNTER_JOB, '100000', '20', '20'], env: { SECRET: 'hunter2' } });
      await w.place('nlp.boxed', ['i-d']);
      await a.heartbeat();
      await waitFor('a periodic checkpoint', async () => {
        await a.watch();
        return (await w.jobs.get('nlp.boxed'))!.checkpoint;
      });
      server.values.set('meta-data/spot/instance-action', IMDS_BODIES.terminate);
      await a.watch();
      await a.settled();
      expect(await w.jobs.get('nlp.boxed')).toMatchObject({ state: 'pending', attempt: 2 });
      const calls = readFileSync(dockerLog, 'utf8')
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l) as { args: string[]; envNames?: string[]; gpus?: string });
      const run = calls.find((c) => c.args[0] === 'run')! as (typeof calls)[number] & { envFileMode?: string };
      expect(run.envFileMode).toBe('600');
      expect(readdirSync(join(work, 'env'))).toEqual([]); // each env file is gone once its container exists
      expect(run.gpus).toBe('"device=GPU-d37e67a5-91dd-3774-a5cb-99096249601a","capabilities=compute,utility"');
      expect(run.envNames).toEqual(
        expect.arrayContaining([
          'GPU_FLEET_JOB_ID',
          'GPU_FLEET_ATTEMPT',
          'GPU_FLEET_CHECKPOINT_DIR',
          'GPU_FLEET_CHECKPOINT_SIGNAL',
          'SECRET',
        ]),
      );
      expect(JSON.stringify(calls)).not.toContain('hunter2');
      expect(calls.some((c) => c.args.join(' ') === 'kill --signal SIGUSR1 gpu-fleet-nlp.boxed-a1-r0')).toBe(true);

      // The container's exit code is the job's.
      await w.submit('nlp.boxed-fails', { command: ['node', COUNTER_JOB, '3', '10'], env: { EXIT_CODE: '4' } });
      await w.place('nlp.boxed-fails', ['i-d']);
      await a.heartbeat();
      const failed = await waitFor('the job to fail', async () =>
        (await w.jobs.get('nlp.boxed-fails'))!.state === 'failed' ? (await w.jobs.get('nlp.boxed-fails'))! : undefined,
      );
      expect(failed.exitCode).toBe(4);
    } finally {
      await w.shutdown();
      await server.close();
    }
  });

  it('after a crash, removes the containers an earlier agent left', async () => {
    const state = tmp('docker-state');
    const env = { ...process.env, PATH: `${FAKE_BIN}:${process.env.PATH}`, FAKE_DOCKER_STATE: state };
    const envDir = join(tmp('docker-env'), 'env');
    const first = new DockerRunner('docker', env, [], envDir);
    const dir = tmp('job');
    const { resumeDir: _none, ...noResume } = launch({
      command: ['node', COUNTER_JOB, '100000', '20'],
      checkpointDir: dir,
      logFile: join(dir, 'out.log'),
      devices: [],
    });
    const proc = await first.start(noResume);
    // The container's record (its pid, labels), not the spec the CLI writes before the supervisor starts it: waiting on
    // any `.json` let `ps` run in the moment between the two, and find nothing.
    await waitFor('the container to be recorded', () => existsSync(join(state, 'gpu-fleet-nlp.train-7-a2-r0.json')));
    const second = new DockerRunner('docker', env, [], envDir);
    expect(await second.cleanUpLeftovers()).toEqual(['gpu-fleet-nlp.train-7-a2-r0']);
    expect((await proc.exited).exitCode).not.toBe(0);
  });
});

describe('process runner', () => {
  it('after a crash, kills the process groups an earlier agent started, and only those', async () => {
    const stateFile = join(tmp('runner'), 'processes.json');
    const dir = tmp('job');
    const first = new ProcessRunner({ stateFile });
    const proc = await first.start({
      ...launch({ command: ['node', COUNTER_JOB, '100000', '20'], checkpointDir: dir, logFile: join(dir, 'out.log'), devices: [] }),
    });
    const second = new ProcessRunner({ stateFile });
    expect(await second.cleanUpLeftovers()).toEqual([String(proc.pid)]);
    expect((await proc.exited).signal).toBe('SIGKILL');
    expect(await second.cleanUpLeftovers()).toEqual([]); // nothing twice, and never a stranger
  });

  it("passes a small environment: the job's variables, CUDA_VISIBLE_DEVICES, not the agent's secrets", async () => {
    const dir = tmp('job');
    const runner = new ProcessRunner({ baseEnv: { PATH: process.env.PATH, AWS_SECRET_ACCESS_KEY: 'agent-secret' } });
    const proc = await runner.start(
      launch({
        command: ['node', '-e', 'console.log(JSON.stringify(process.env))'],
        checkpointDir: dir,
        logFile: join(dir, 'out.log'),
        devices: ['0', '1'],
      }),
    );
    expect((await proc.exited).exitCode).toBe(0);
    const env = JSON.parse(readFileSync(join(dir, 'out.log'), 'utf8')) as Record<string, string>;
    expect(env).toMatchObject({
      CUDA_VISIBLE_DEVICES: '0,1',
      WANDB_API_KEY: 'secret-value',
      GPU_FLEET_CHECKPOINT_DIR: dir,
      GPU_FLEET_JOB_ID: 'nlp.train-7',
    });
    expect(env.AWS_SECRET_ACCESS_KEY).toBeUndefined();
  });
});

describe("a job's variables reach the job only, never the host programs the agent runs", () => {
  /** A folder a hostile spec points PATH at: its `docker` and `node` only leave a trace that they ran. */
  const hostileBin = () => {
    const dir = tmp('hostile-bin');
    const trace = join(dir, 'ran.txt');
    for (const name of ['docker', 'node']) {
      writeFileSync(join(dir, name), `#!/bin/sh\necho "$0 $*" >> ${trace}\nexit 0\n`);
      chmodSync(join(dir, name), 0o755);
    }
    return { dir, trace };
  };
  const hostile = (dir: string) => ({ PATH: dir, LD_PRELOAD: join(dir, 'evil.so'), DOCKER_HOST: 'tcp://203.0.113.9:2375', HOME: dir });
  const printEnv = (out: string) => [
    process.execPath,
    '-e',
    `require('fs').writeFileSync(${JSON.stringify(out)}, JSON.stringify(process.env))`,
  ];

  it('docker: the CLI runs as the agent set it up (its PATH, no LD_PRELOAD, its daemon), the container sees the variables', async () => {
    const { dir, trace } = hostileBin();
    const state = tmp('docker-state');
    const dockerLog = join(tmp('docker-log'), 'calls.jsonl');
    const agentPath = `${FAKE_BIN}:${process.env.PATH}`;
    const runner = new DockerRunner(
      'docker',
      { PATH: agentPath, FAKE_DOCKER_STATE: state, FAKE_DOCKER_LOG: dockerLog },
      [],
      join(tmp('env'), 'env'),
    );
    const job = tmp('job');
    const out = join(job, 'env.json');
    const { resumeDir: _none, ...noResume } = launch({
      command: printEnv(out),
      env: hostile(dir),
      checkpointDir: job,
      logFile: join(job, 'out.log'),
      devices: [],
    });
    const proc = await runner.start(noResume);
    expect((await proc.exited).exitCode).toBe(0);
    expect(existsSync(trace)).toBe(false); // the spec's "docker" never ran
    const run = readFileSync(dockerLog, 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { args: string[]; cliEnv?: Record<string, string | null> })
      .find((c) => c.args[0] === 'run')!;
    expect(run.cliEnv).toEqual({ PATH: agentPath, LD_PRELOAD: null, HOME: null, DOCKER_HOST: null });
    const seen = JSON.parse(readFileSync(out, 'utf8')) as Record<string, string>;
    expect(seen).toMatchObject(hostile(dir));
  });

  it("process runner: the program is found on the agent's PATH; the job gets its own variables", async () => {
    const { dir, trace } = hostileBin();
    const job = tmp('job');
    const out = join(job, 'env.json');
    const runner = new ProcessRunner({ baseEnv: { PATH: process.env.PATH } });
    const { LD_PRELOAD: _preload, ...env } = hostile(dir); // a preload would be the job's own process's business here
    const proc = await runner.start(
      launch({
        command: ['node', '-e', `require('fs').writeFileSync(${JSON.stringify(out)}, JSON.stringify(process.env))`],
        env,
        checkpointDir: job,
        logFile: join(job, 'out.log'),
        devices: [],
      }),
    );
    expect((await proc.exited).exitCode).toBe(0);
    expect(existsSync(trace)).toBe(false); // the spec's "node" never ran: the agent's did
    expect(JSON.parse(readFileSync(out, 'utf8'))).toMatchObject(env);
  });
});

describe('MIG devices for placements', () => {
  const h100 = (): NvidiaSmiReport => {
    const base = join(NVIDIA_SMI_FIXTURES, 'captures/linux-x86_64__nvidia-h100-mig__590.48.01');
    return mergeList(
      parseNvidiaSmiText(readFileSync(join(base, 'idle__smi-q.txt'), 'utf8')),
      parseNvidiaSmiList(readFileSync(join(base, 'capabilities__list.txt'), 'utf8')),
    );
  };

  it('gives each MIG placement a free instance of its profile, and creates one when none is free', async () => {
    let report = h100();
    const calls: string[] = [];
    const mig: MigControl = {
      async createInstance(gpu, profile, start) {
        calls.push(`create ${gpu} ${profile}:${start}`);
        const gpu0 = report.gpus[0]!;
        report = {
          ...report,
          gpus: [
            {
              ...gpu0,
              mig: {
                ...gpu0.mig,
                devices: [
                  ...gpu0.mig.devices,
                  { index: 4, gpuInstanceId: 11, computeInstanceId: 0, profile, memoryTotalMiB: 9984, uuid: 'MIG-new' },
                ],
              },
            },
          ],
        };
        return 11;
      },
      async destroyInstance(gpu, gi) {
        calls.push(`destroy ${gpu} ${gi}`);
      },
    };
    const alloc = new DeviceAllocator(async () => report, mig);
    const one = await alloc.acquire({ nodeId: 'i', gpuIndices: [0], mig: { profile: '1g.10gb', startSlice: 6 } }, 'a#1');
    const two = await alloc.acquire({ nodeId: 'i', gpuIndices: [0], mig: { profile: '1g.10gb', startSlice: 5 } }, 'b#1');
    expect([one.devices, two.devices]).toEqual([
      ['MIG-00000002-0000-0000-0000-000000000002'],
      ['MIG-00000003-0000-0000-0000-000000000003'],
    ]);
    const three = await alloc.acquire({ nodeId: 'i', gpuIndices: [0], mig: { profile: '1g.10gb', startSlice: 4 } }, 'c#1');
    expect(three.devices).toEqual(['MIG-new']);
    expect(calls).toEqual(['create 0 1g.10gb:4']);
    await three.release();
    await one.release();
    expect(calls).toEqual(['create 0 1g.10gb:4', 'destroy 0 11']); // only what the agent created is destroyed
    expect((await alloc.acquire({ nodeId: 'i', gpuIndices: [0], mig: { profile: '1g.10gb', startSlice: 6 } }, 'd#1')).devices).toEqual([
      'MIG-00000002-0000-0000-0000-000000000002',
    ]);
  });

  it('refuses placements the machine cannot hold, saying why', async () => {
    const alloc = new DeviceAllocator(async () => h100());
    await expect(alloc.acquire({ nodeId: 'i', gpuIndices: [3] }, 'x')).rejects.toThrow(
      'the placement names GPU 3, but nvidia-smi lists GPUs 0',
    );
    await expect(alloc.acquire({ nodeId: 'i', gpuIndices: [0], mig: { profile: '7g.80gb', startSlice: 0 } }, 'x')).rejects.toThrow(
      new DeviceError('GPU 0 has no free 7g.80gb instance and the agent may not create MIG instances here'),
    );
  });

  it('drives nvidia-smi mig to create and destroy instances', async () => {
    const seen: string[][] = [];
    const control = nvidiaSmiMig(async (args) => {
      seen.push([...args]);
      return args.includes('-cgi')
        ? 'Successfully created GPU instance ID 13 on GPU  0 using profile MIG 1g.10gb (ID 19)\nSuccessfully created compute instance ID  0 on GPU  0 GPU instance ID 13 using profile MIG 1g.10gb (ID  0)\n'
        : '';
    });
    expect(await control.createInstance(0, '1g.10gb', 4)).toBe(13);
    await control.destroyInstance(0, 13);
    expect(seen).toEqual([
      ['mig', '-i', '0', '-cgi', '1g.10gb:4', '-C'],
      ['mig', '-i', '0', '-gi', '13', '-dci'],
      ['mig', '-i', '0', '-gi', '13', '-dgi'],
    ]);
    const broken = nvidiaSmiMig(async () => 'Unable to create a GPU instance on GPU 0 using profile 1g.10gb: Insufficient Resources');
    await expect(broken.createInstance(0, '1g.10gb', 4)).rejects.toThrow(
      /did not report a new GPU instance: Unable to create a GPU instance/,
    );
    const refusing = nvidiaSmiMig(async () => {
      throw new Error(
        'nvidia-smi mig -i 0 -cgi 1g.10gb:5 -C failed with exit code 2: Unable to create a GPU instance: Insufficient Resources',
      );
    });
    await expect(refusing.createInstance(0, '1g.10gb', 5)).rejects.toThrow(
      new DeviceError(
        'nvidia-smi mig -cgi 1g.10gb:5 on GPU 0 was refused: nvidia-smi mig -i 0 -cgi 1g.10gb:5 -C failed with exit code 2: Unable to create a GPU instance: Insufficient Resources',
      ),
    );
  });

  it('uses an instance only at the planned placement, and creates one there when the free one sits elsewhere', async () => {
    // The shared H100 MIG capture with the placements `nvidia-smi mig -lgi` reports (assembled: the capture has no -lgi).
    const report = mergeGpuInstances(
      h100(),
      parseGpuInstances(readFileSync(join(import.meta.dirname, '../fixtures/nvidia-smi/h100-mig-lgi.assembled.txt'), 'utf8')),
    );
    expect(report.gpus[0]!.mig.devices.map((d) => [d.profile, d.gpuInstanceId, d.placement])).toEqual([
      ['3g.40gb', 2, { start: 4, size: 4 }],
      ['2g.20gb', 3, { start: 0, size: 2 }],
      ['1g.10gb', 9, { start: 2, size: 1 }],
      ['1g.10gb', 10, { start: 3, size: 1 }],
    ]);
    const calls: string[] = [];
    const mig: MigControl = {
      async createInstance(gpu, profile, start) {
        calls.push(`create ${gpu} ${profile}:${start}`);
        throw new DeviceError(`nvidia-smi mig -cgi ${profile}:${start} on GPU ${gpu} was refused: Insufficient Resources`);
      },
      async destroyInstance() {},
    };
    const alloc = new DeviceAllocator(async () => report, mig);
    const at3 = await alloc.acquire({ nodeId: 'i', gpuIndices: [0], mig: { profile: '1g.10gb', startSlice: 3 } }, 'a#1');
    expect(at3.devices).toEqual(['MIG-00000003-0000-0000-0000-000000000003']);
    await expect(alloc.acquire({ nodeId: 'i', gpuIndices: [0], mig: { profile: '1g.10gb', startSlice: 6 } }, 'b#1')).rejects.toThrow(
      'nvidia-smi mig -cgi 1g.10gb:6 on GPU 0 was refused: Insufficient Resources',
    );
    expect(calls).toEqual(['create 0 1g.10gb:6']); // the free 1g.10gb at slice 2 is not the planned one
  });
});

describe('checkpoint files', () => {
  function writeCheckpoint(dir: string, name: string, marker: unknown): void {
    mkdirSync(join(dir, name), { recursive: true });
    writeFileSync(join(dir, name, 'weights.bin'), Buffer.alloc(1024, 7));
    writeFileSync(join(dir, 'checkpoint.json.tmp'), typeof marker === 'string' ? marker : JSON.stringify(marker));
    renameSync(join(dir, 'checkpoint.json.tmp'), join(dir, 'checkpoint.json'));
  }

  it('reads the marker a job wrote, and explains a bad one', async () => {
    const dir = tmp('ckpt');
    expect(await readMarker(dir)).toBeUndefined();
    writeCheckpoint(dir, 'step-10', { path: 'step-10', progressSec: 42.7 });
    expect(await readMarker(dir)).toMatchObject({ ok: true, marker: { path: 'step-10', progressSec: 42 } });
    writeCheckpoint(dir, 'step-11', { path: '../../etc' });
    expect(await readMarker(dir)).toEqual({
      ok: false,
      problem: `${join(dir, 'checkpoint.json')}: "path" must be a folder inside the checkpoint directory; got "../../etc"`,
    });
    writeCheckpoint(dir, 'step-12', '{not json');
    expect(await readMarker(dir)).toMatchObject({ ok: false, problem: expect.stringContaining('is not JSON') });
    writeCheckpoint(dir, 'step-13', { path: 'step-99' });
    expect(await readMarker(dir)).toMatchObject({ ok: false, problem: expect.stringContaining('the folder step-99 does not exist') });
  });

  it('follows no link the job leaves in its folder: not as the marker, not as the checkpoint folder, not inside it', async () => {
    const dir = tmp('ckpt');
    const host = tmp('host-secrets');
    writeFileSync(join(host, 'id_rsa'), 'PRIVATE');
    // The checkpoint folder is a link to a host folder: the agent (which may read more than the job) must not copy it.
    symlinkSync(host, join(dir, 'step-1'));
    writeFileSync(join(dir, 'checkpoint.json'), JSON.stringify({ path: 'step-1' }));
    expect(await readMarker(dir)).toEqual({
      ok: false,
      problem: `${join(dir, 'checkpoint.json')}: "path" must be a folder inside the checkpoint directory; step-1 links outside it`,
    });
    // The marker itself a link to a host file.
    rmSync(join(dir, 'checkpoint.json'));
    writeFileSync(join(host, 'marker.json'), JSON.stringify({ path: 'step-2' }));
    mkdirSync(join(dir, 'step-2'));
    symlinkSync(join(host, 'marker.json'), join(dir, 'checkpoint.json'));
    expect(await readMarker(dir)).toMatchObject({ ok: false, problem: expect.stringContaining('checkpoint.json is a link') });
    // A link inside a real checkpoint folder is neither followed nor copied.
    writeFileSync(join(dir, 'step-2', 'weights.bin'), 'w');
    symlinkSync(join(host, 'id_rsa'), join(dir, 'step-2', 'key'));
    const root = tmp('store');
    const location = `${pathToFileURL(join(root, 'nlp.a', 'attempt-1')).href}/`;
    await new DirectoryBlobs(root).upload(join(dir, 'step-2'), location);
    expect(readdirSync(join(root, 'nlp.a', 'attempt-1'))).toEqual(['weights.bin']);
  });

  it('copies checkpoints to and from a directory store, and never outside it', async () => {
    const root = tmp('store');
    const blobs = new DirectoryBlobs(root);
    const dir = tmp('ckpt');
    writeCheckpoint(dir, 'step-10', { path: 'step-10' });
    const location = `${pathToFileURL(join(root, 'nlp.a', 'attempt-1', 'step-10')).href}/`;
    await blobs.upload(join(dir, 'step-10'), location);
    const back = tmp('resume');
    expect(await blobs.download(location, back)).toBe(true);
    expect(readFileSync(join(back, 'weights.bin'))).toEqual(Buffer.alloc(1024, 7));
    expect(await blobs.download(`${pathToFileURL(join(root, 'nothing')).href}/`, back)).toBe(false);
    await expect(blobs.upload(dir, 'file:///etc/')).rejects.toThrow(/outside the checkpoint store/);
    await expect(blobs.upload(dir, 's3://bucket/x/')).rejects.toThrow(/keeps file:\/\/ locations/);
  });
});

describe('checkpoint files on S3 (s3rver, a local S3-compatible server)', () => {
  let server: S3rver;
  let s3: S3Client;
  beforeAll(async () => {
    server = new S3rver({ port: 0, address: '127.0.0.1', silent: true, directory: tmp('s3rver') });
    const { port } = await server.run();
    s3 = new S3Client({
      region: 'us-east-1',
      endpoint: `http://127.0.0.1:${port}`,
      forcePathStyle: true,
      credentials: { accessKeyId: 'S3RVER', secretAccessKey: 'S3RVER' },
    });
    await s3.send(new CreateBucketCommand({ Bucket: 'gpu-fleet-checkpoints' }));
  });
  afterAll(async () => {
    s3.destroy();
    await server.close();
  });

  it('uploads a checkpoint folder, nested files included, and downloads it elsewhere', async () => {
    const blobs = new S3Blobs(s3);
    const dir = tmp('ckpt');
    mkdirSync(join(dir, 'step-20', 'optimizer'), { recursive: true });
    writeFileSync(join(dir, 'step-20', 'weights.bin'), Buffer.alloc(64 * 1024, 3));
    writeFileSync(join(dir, 'step-20', 'optimizer', 'state.json'), '{"lr":0.0003}');
    await blobs.upload(join(dir, 'step-20'), 's3://gpu-fleet-checkpoints/checkpoints/nlp.a/attempt-1/step-20/');
    const back = tmp('resume');
    expect(await blobs.download('s3://gpu-fleet-checkpoints/checkpoints/nlp.a/attempt-1/step-20/', back)).toBe(true);
    expect(readFileSync(join(back, 'weights.bin'))).toEqual(Buffer.alloc(64 * 1024, 3));
    expect(readFileSync(join(back, 'optimizer', 'state.json'), 'utf8')).toBe('{"lr":0.0003}');
    expect(await blobs.download('s3://gpu-fleet-checkpoints/checkpoints/nlp.none/', back)).toBe(false);
    await expect(blobs.upload(dir, 'gs://bucket/x/')).rejects.toThrow('not an S3 location (s3://bucket/prefix/): gs://bucket/x/');
  });
});
