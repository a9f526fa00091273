import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import { createServer, type AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { checkJobSpec } from '../../core/job-spec.ts';
import { newPendingJob } from '../../core/job.ts';
import { applyJobEvent } from '../../core/services/job-updates.ts';
import { dynamoStores } from '../../cloud/aws/dynamo-store.ts';
import type { TableNames } from '../../cloud/aws/tables.ts';
import { startDynalite, type LocalDynamo } from '../support/dynalite.ts';
import { COUNTER_JOB, waitFor } from '../support/agent-world.ts';
import { FAKE_BIN, gpuFixtureDir } from '../support/gpu-fixtures.ts';
import { awsInstance, IMDS_BODIES, startMetadataServer, type MetadataServer } from '../support/metadata-server.ts';

const run = promisify(execFile);
const root = fileURLToPath(new URL('../..', import.meta.url));
const bin = fileURLToPath(new URL('../../bin/gpu-fleet.js', import.meta.url));
/** A local URL where nothing listens (a port taken and given back). */
async function closedUrl(): Promise<string> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const { port } = s.address() as AddressInfo;
  await new Promise((r) => s.close(r));
  return `http://127.0.0.1:${port}`;
}
let CLOSED = '';
beforeAll(async () => {
  CLOSED = await closedUrl();
});

describe('gpu-fleet agent inspect', () => {
  it('prints the machine and its GPUs as JSON, from IMDS and nvidia-smi', async () => {
    const imds = await startMetadataServer('aws', awsInstance('i-0feed'));
    try {
      const env = {
        ...process.env,
        PATH: `${FAKE_BIN}${delimiter}${process.env.PATH}`,
        FAKE_NVIDIA_SMI_DIR: gpuFixtureDir({ xml: 'telegraf__a100-sxm4-v12.xml' }),
        GPU_FLEET_AWS_IMDS_URL: imds.url,
        GPU_FLEET_GCE_METADATA_URL: CLOSED,
      };
      const { stdout } = await run(process.execPath, [bin, 'agent', 'inspect', '--json'], { cwd: root, env, timeout: 60_000 });
      const out = JSON.parse(stdout) as Record<string, unknown>;
      expect(out).toMatchObject({
        identity: { cloud: 'aws', instanceId: 'i-0feed', zone: 'us-west-2a', instanceType: 'p3.2xlarge', groupId: 'gpu-v100-spot' },
        gpus: { source: 'xml', driverVersion: '535.54.03', devices: [{ model: 'A100-80GB', mig: { enabled: true } }] },
        schedulable: [{ index: 0, model: 'A100-80GB', migEnabled: true }],
        healthy: true,
        problems: [],
      });
    } finally {
      await imds.close();
    }
  });

  it('off-cloud and without a driver, reports both within seconds and does not fail', async () => {
    const env = { ...process.env, PATH: '/usr/bin:/bin', GPU_FLEET_AWS_IMDS_URL: CLOSED, GPU_FLEET_GCE_METADATA_URL: CLOSED };
    const started = Date.now();
    const { stdout } = await run(process.execPath, [bin, 'agent', 'inspect'], { cwd: root, env, timeout: 60_000 });
    expect(Date.now() - started).toBeLessThan(15_000);
    expect(stdout).toContain(
      `machine   unknown: no instance metadata server answered: AWS IMDS: PUT ${CLOSED}/latest/api/token: ECONNREFUSED; GCE: GET ${CLOSED}/computeMetadata/v1/instance/`,
    );
    expect(stdout).toMatch(/^GPUs {6}none found: nvidia-smi was not found on PATH: is the NVIDIA driver installed\?$/m);
    expect(stdout).toMatch(/^health {4}UNHEALTHY: nvidia-smi was not found on PATH/m);
  });
});

describe('gpu-fleet agent metrics', () => {
  it('prints one scrape in the DCGM exporter’s names and exits; off-cloud the machine is its hostname', async () => {
    const env = {
      ...process.env,
      PATH: `${FAKE_BIN}${delimiter}${process.env.PATH}`,
      FAKE_NVIDIA_SMI_DIR: gpuFixtureDir({ xml: 'telegraf__a100-sxm4-v12.xml' }),
      GPU_FLEET_AWS_IMDS_URL: CLOSED,
      GPU_FLEET_GCE_METADATA_URL: CLOSED,
    };
    const { stdout } = await run(process.execPath, [bin, 'agent', 'metrics'], { cwd: root, env, timeout: 60_000 });
    expect(stdout).toMatch(/^# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization \(in %\)\.$/m);
    expect(stdout).toMatch(/^# TYPE DCGM_FI_DEV_GPU_UTIL gauge$/m);
    expect(stdout).toMatch(new RegExp(`^DCGM_FI_DEV_FB_USED\\{[^}]*Hostname="${hostname()}"[^}]*\\} \\d+$`, 'm'));
    expect(stdout).toMatch(/modelName="NVIDIA A100[^"]*"/);
  });
});

describe('gpu-fleet agent metrics without a driver', () => {
  it('exits 1 (the machine, not the command, is wrong) with one line naming what is missing', async () => {
    const env = { ...process.env, PATH: '/usr/bin:/bin', GPU_FLEET_AWS_IMDS_URL: CLOSED, GPU_FLEET_GCE_METADATA_URL: CLOSED };
    const out = await run(process.execPath, [bin, 'agent', 'metrics'], { cwd: root, env, timeout: 60_000 }).then(
      () => ({ code: 0, stderr: '' }),
      (error: { code: number; stderr: string }) => error,
    );
    expect(out.code).toBe(1);
    expect(out.stderr.trim().split('\n')).toEqual([expect.stringMatching(/^gpu-fleet: nvidia-smi was not found on PATH/)]);
  });
});

describe('gpu-fleet agent run (a real agent process, on DynamoDB served by dynalite)', () => {
  let db: LocalDynamo;
  let tables: TableNames;
  let imds: MetadataServer;
  let agent: ChildProcess;
  let stderr = '';
  const store = mkdtempSync(join(tmpdir(), 'ckpt-store-'));
  const storeUri = `${pathToFileURL(store).href}/`;

  beforeAll(async () => {
    db = await startDynalite();
    tables = await db.createTables();
    imds = await startMetadataServer('aws', awsInstance('i-0agent'));
    agent = spawn(
      process.execPath,
      [
        bin,
        'agent',
        'run',
        '--runner',
        'process',
        '--checkpoint-store',
        storeUri,
        '--work-dir',
        mkdtempSync(join(tmpdir(), 'agent-')),
        '--no-metrics',
        '--no-mig-create',
        '--heartbeat-sec',
        '0.3',
        '--notice-sec',
        '0.2',
      ],
      {
        cwd: root,
        env: {
          ...process.env,
          PATH: `${FAKE_BIN}${delimiter}${process.env.PATH}`,
          FAKE_NVIDIA_SMI_DIR: gpuFixtureDir({ xml: 'telegraf__tesla-t4.xml' }),
          GPU_FLEET_AWS_IMDS_URL: imds.url,
          GPU_FLEET_GCE_METADATA_URL: CLOSED,
          AWS_ENDPOINT_URL: db.endpoint,
          AWS_REGION: 'us-east-1',
          AWS_ACCESS_KEY_ID: 'test',
          AWS_SECRET_ACCESS_KEY: 'test',
          GPU_FLEET_JOBS_TABLE: tables.jobs,
          GPU_FLEET_NODES_TABLE: tables.nodes,
          GPU_FLEET_CONTROL_TABLE: tables.control,
          POWERTOOLS_LOG_LEVEL: 'WARN',
        },
        stdio: ['ignore', 'ignore', 'pipe'],
      },
    );
    agent.stderr!.on('data', (b: Buffer) => (stderr += b.toString()));
  });

  afterAll(async () => {
    if (agent.exitCode === null) agent.kill('SIGKILL');
    await imds.close();
    await db.close();
  });

  it('registers, runs what is placed on it, checkpoints on a spot notice in IMDS, and stops cleanly on SIGTERM', async () => {
    const stores = dynamoStores(db.doc, tables, storeUri);
    const node = await waitFor('the agent to register', () => stores.nodes.get('i-0agent'), 30_000);
    expect(node).toMatchObject({ groupId: 'gpu-v100-spot', address: '10.0.1.17', healthy: true, gpus: [{ model: 'T4' }] });

    const submit = async (id: string, command: string[]) => {
      const spec = checkJobSpec({
        image: 'local/counter:1',
        command,
        gpu: { kind: 'whole', count: 1 },
        checkpoint: { intervalSec: 60, gracePeriodSec: 10 },
      });
      if (!spec.ok) throw new Error(spec.errors.join('; '));
      await stores.jobs.create(newPendingJob({ id, team: 'nlp', spec: spec.spec, submittedAtMs: Date.now() }));
      await stores.nodes.assign('i-0agent', id, 1);
      await applyJobEvent(
        stores.jobs,
        id,
        { type: 'place', attempt: 1, placement: { capacityType: 'spot', nodes: [{ nodeId: 'i-0agent', gpuIndices: [0] }] } },
        Date.now(),
      );
    };

    await submit('nlp.quick', ['node', COUNTER_JOB, '10', '10']);
    await waitFor('the quick job to succeed', async () => (await stores.jobs.get('nlp.quick'))?.state === 'succeeded', 30_000);

    await submit('nlp.long', ['node', COUNTER_JOB, '100000', '20', '20']);
    await waitFor('a checkpoint of the long job', async () => (await stores.jobs.get('nlp.long'))?.checkpoint, 30_000);
    imds.values.set('meta-data/spot/instance-action', IMDS_BODIES.terminate);
    const requeued = await waitFor(
      'the long job to be requeued',
      async () => {
        const j = await stores.jobs.get('nlp.long');
        return j?.state === 'pending' ? j : undefined;
      },
      30_000,
    );
    expect(requeued).toMatchObject({ attempt: 2, interruptions: 1, requeueReason: { code: 'interrupted' } });
    expect(requeued.checkpoint!.location.startsWith(storeUri)).toBe(true);
    expect((await stores.nodes.get('i-0agent'))!.draining?.reason).toBe('terminate notice (spot/instance-action) seen by the node agent');

    agent.kill('SIGTERM');
    const code = await new Promise<number | null>((resolve) => agent.once('exit', (c) => resolve(c)));
    expect(code, stderr).toBe(0);
  });
});
