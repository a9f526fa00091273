import { AutoScalingClient, CompleteLifecycleActionCommand } from '@aws-sdk/client-auto-scaling';
import { EC2Client } from '@aws-sdk/client-ec2';
import { DeregisterTargetsCommand, ElasticLoadBalancingV2Client } from '@aws-sdk/client-elastic-load-balancing-v2';
import { S3Client, CreateMultipartUploadCommand, CompleteMultipartUploadCommand, ListObjectsV2Command } from '@aws-sdk/client-s3';
import type { LambdaFunctionURLEventWithIAMAuthorizer } from 'aws-lambda';
import { mockClient } from 'aws-sdk-client-mock';
import { describe, expect, it } from 'vitest';
import { ATTEMPT_HEADER, callerMachine, partBytesFor } from '../../cloud/aws/agent-api-protocol.ts';
import { S3CheckpointUrls, type CheckpointUrls } from '../../cloud/aws/checkpoint-urls.ts';
import { ElbFrontDoor } from '../../cloud/aws/elb-front-door.ts';
import { AsgNodeGroups } from '../../cloud/aws/asg-node-groups.ts';
import { MemoryCheckpointStore, MemoryJobStore, MemoryNodeStore, MemoryServiceStore } from '../../cloud/sim/memory-stores.ts';
import { newServiceRecord } from '../../core/serving/service.ts';
import { CloudError } from '../../core/errors.ts';
import type { JobStore, ServiceMetricSample } from '../../core/ports.ts';
import { createAgentApiHandler } from '../../functions/agent-api.ts';
import { AttemptCredentials } from '../../cloud/aws/attempt-credentials.ts';
import type { Job } from '../../core/job.ts';
import { lambdaContext } from '../../functions/context.ts';
import { observability } from '../../functions/observability.ts';
import { aJob, aSpec, INSTANCE_TYPES } from '../builders.ts';
import { credentialHeaders, testAttempts } from '../support/attempt-credentials.ts';
import { gceTokenSigner } from '../support/gce-identity.ts';

const ROLE = 'GpuFleet-AgentRole-1A2B3C';
const defaultUrls = () =>
  new S3CheckpointUrls(new S3Client({ region: 'us-west-2', credentials: { accessKeyId: 'AKID', secretAccessKey: 's' } }));
const ARN = (session: string, role = ROLE) => `arn:aws:sts::123456789012:assumed-role/${role}/${session}`;

function setup(
  jobs: JobStore = new MemoryJobStore(),
  urls: CheckpointUrls = defaultUrls(),
  more: Partial<Parameters<typeof createAgentApiHandler>[0]> = {},
) {
  const nodes = new MemoryNodeStore();
  const handler = createAgentApiHandler({
    ...more,
    jobs,
    nodes,
    checkpoints: new MemoryCheckpointStore({ nowMs: () => 1_800_000_000_000 }, 's3://ckpt/checkpoints/'),
    urls,
    clock: { nowMs: () => 1_800_000_000_000 },
    agentRoleName: ROLE,
    attempts: testAttempts(),
    obs: observability('agent-api-test'),
  });
  /** A raw call; one that acts for a job carries the credential of its attempt (or `attempt`), unless `credential` says otherwise. */
  const call = async (o: {
    path: string;
    body?: string;
    userArn?: string;
    /** The Authorization header (a GCE machine's identity token). */
    authorization?: string;
    method?: string;
    attempt?: number;
    credential?: string | false;
  }) => {
    const session = /\/(i-[0-9a-f]+)$/.exec(o.userArn ?? '')?.[1] ?? '';
    const headers =
      o.credential === false
        ? {}
        : o.credential !== undefined
          ? { [ATTEMPT_HEADER]: o.credential }
          : credentialHeaders(session, o.path, o.body ?? '{}', o.attempt);
    const event = {
      rawPath: o.path,
      body: o.body ?? '{}',
      headers: { ...headers, ...(o.authorization ? { authorization: o.authorization } : {}) },
      isBase64Encoded: false,
      requestContext: {
        http: { method: o.method ?? 'POST' },
        ...(o.userArn ? { authorizer: { iam: { userArn: o.userArn } } } : {}),
      },
    } as unknown as LambdaFunctionURLEventWithIAMAuthorizer;
    const out = (await handler(event, lambdaContext('agent-api'))) as { statusCode: number; body: string };
    return { status: out.statusCode, body: JSON.parse(out.body) as Record<string, unknown> };
  };
  return { call, nodes, jobs };
}

describe('agent API: each attempt’s own credential (issue 62)', () => {
  const NOW = 1_800_000_000_000;
  const me = 'i-0aaaaaaaa1';
  /** Two teams' jobs on one machine: nlp.x at its attempt 2 (it ran attempt 1 there too), cv.y at attempt 1. */
  async function twoTenants() {
    const jobs = new MemoryJobStore();
    const placed = { capacityType: 'spot' as const, nodes: [{ nodeId: me, gpuIndices: [0] }] };
    await jobs.create({
      ...aJob({ id: 'nlp.x', team: 'nlp', attempt: 2 }),
      state: 'running',
      placement: placed,
      heldAttempts: [{ attempt: 1, nodes: [{ nodeId: me, milliGpu: 1000 }], fromMs: NOW - 7_200_000, toMs: NOW - 3_600_000 }],
      placedAtMs: NOW - 600_000,
      startedAtMs: NOW - 590_000,
      updatedAtMs: NOW - 590_000,
    });
    await jobs.create({
      ...aJob({ id: 'cv.y', team: 'cv', attempt: 1 }),
      state: 'running',
      placement: { ...placed, nodes: [{ nodeId: me, gpuIndices: [1] }] },
      placedAtMs: NOW - 600_000,
      startedAtMs: NOW - 590_000,
      updatedAtMs: NOW - 590_000,
    });
    const t = setup(jobs);
    await t.nodes.register({ instanceId: me, groupId: 'g', gpus: [], healthy: true, registeredAtMs: NOW, lastHeartbeatAtMs: NOW });
    await t.nodes.assign(me, 'nlp.x', 2);
    await t.nodes.assign(me, 'cv.y', 1);
    return t;
  }

  it('hands a machine the credentials of the attempts on its work list with its own record, and no other machine any', async () => {
    const { call, nodes, jobs } = await twoTenants();
    // A gang of two machines: this one reads its leader's record (for its address).
    const leader = 'i-0bbbbbbbb2';
    await jobs.create({
      ...aJob({ id: 'nlp.gang', team: 'nlp', attempt: 1 }),
      state: 'placed',
      placement: {
        capacityType: 'on-demand',
        nodes: [
          { nodeId: leader, gpuIndices: [0] },
          { nodeId: me, gpuIndices: [2] },
        ],
      },
    });
    await nodes.assign(me, 'nlp.gang', 1);
    const own = await call({ path: '/v1/node/get', userArn: ARN(me), body: JSON.stringify({ instanceId: me }) });
    expect(own.status).toBe(200);
    expect(own.body.credentials).toEqual([
      { jobId: 'nlp.x', attempt: 2, credential: testAttempts().mint(me, 'nlp.x', 2) },
      { jobId: 'cv.y', attempt: 1, credential: testAttempts().mint(me, 'cv.y', 1) },
      { jobId: 'nlp.gang', attempt: 1, credential: testAttempts().mint(me, 'nlp.gang', 1) },
    ]);
    await nodes.register({ instanceId: leader, groupId: 'g', gpus: [], healthy: true, registeredAtMs: NOW, lastHeartbeatAtMs: NOW });
    await nodes.assign(leader, 'nlp.gang', 1);
    const other = await call({ path: '/v1/node/get', userArn: ARN(me), body: JSON.stringify({ instanceId: leader }) });
    expect(other.body.record).toMatchObject({ instanceId: leader });
    expect(other.status).toBe(200);
    expect(other.body.credentials).toBeUndefined();
  });

  it('lets the holder of attempt 2 of nlp.x act for it alone: not for cv.y on the same machine, not for attempt 1 of its own job', async () => {
    const { call } = await twoTenants();
    const x2 = testAttempts().mint(me, 'nlp.x', 2);
    const as = (path: string, body: unknown, credential: string | false = x2) =>
      call({ path, userArn: ARN(me), body: JSON.stringify(body), credential });
    const refused = { status: 403, body: { code: 'access-denied' } };
    // Its own job, its own attempt: read, save, log.
    expect(await as('/v1/job/get', { jobId: 'nlp.x' })).toMatchObject({ status: 200, body: { job: { id: 'nlp.x' } } });
    const x2Folder = 's3://ckpt/checkpoints/nlp.x/attempt-2/step-1/';
    expect((await as('/v1/checkpoint/upload', { jobId: 'nlp.x', location: x2Folder, files: [{ path: 'm.pt', bytes: 10 }] })).status).toBe(
      200,
    );
    expect((await as('/v1/logs/put', { jobId: 'nlp.x', attempt: 2, rank: 0, lines: [{ atMs: NOW, seq: 0, line: 'hi' }] })).status).toBe(
      400,
    ); // no log group here: past the credential
    // The other team's job on the same machine: no read (its HF_TOKEN), no finish, no checkpoint, no log.
    const cv = await as('/v1/job/get', { jobId: 'cv.y' });
    expect(cv).toMatchObject(refused);
    expect(cv.body.error).toMatch(/job\/get acts for job cv\.y: .*the one shown is not valid for this machine and job/);
    const y = (await as('/v1/job/get', { jobId: 'cv.y' }, testAttempts().mint(me, 'cv.y', 1))).body.job as Job;
    expect(await as('/v1/job/update', { next: { ...y, state: 'succeeded', updatedAtMs: NOW }, expectedVersion: y.version })).toMatchObject(
      refused,
    );
    // An attempt's writes: its checkpoint files, its save's completion, its output.
    const writesFor = (jobId: string, attempt: number) => {
      const location = `s3://ckpt/checkpoints/${jobId}/attempt-${attempt}/s/`;
      return Promise.all([
        as('/v1/checkpoint/upload', { jobId, location, files: [{ path: 'm.pt', bytes: 10 }] }),
        as('/v1/checkpoint/complete', { ref: { jobId, attempt, location, completedAtMs: NOW, progressSec: 60 }, rank: 0 }),
        as('/v1/logs/put', { jobId, attempt, rank: 0, lines: [{ atMs: NOW, seq: 0, line: 'x' }] }),
      ]);
    };
    for (const out of await writesFor('cv.y', 1)) expect(out).toMatchObject(refused);
    // Attempt 1 of its own job, which this machine ran: the credential of attempt 2 does not act for it.
    const older = await writesFor('nlp.x', 1);
    for (const out of older) expect(out).toMatchObject(refused);
    expect(older[1].body.error).toMatch(/acts for attempt 1 of job nlp\.x, but its credential is attempt 2's/);
    // A job write with attempt 1's credential while the job is at attempt 2 (the API checks it against the record).
    const x = (await as('/v1/job/get', { jobId: 'nlp.x' })).body.job as Job;
    const stale = await as(
      '/v1/job/update',
      { next: { ...x, state: 'succeeded', updatedAtMs: NOW }, expectedVersion: x.version },
      testAttempts().mint(me, 'nlp.x', 1),
    );
    expect(stale).toMatchObject(refused);
    expect(stale.body.error).toMatch(/job nlp\.x \(at attempt 2\) carries the credential of attempt 1/);
  });

  it('refuses a call for a job with no credential, one minted for another machine, or one made up, whatever the machine may do', async () => {
    const { call } = await twoTenants();
    const get = (credential: string | false) => call({ path: '/v1/job/get', userArn: ARN(me), body: '{"jobId":"nlp.x"}', credential });
    expect(await get(false)).toMatchObject({ status: 403, body: { error: expect.stringMatching(/none was shown/) } });
    expect(await get(testAttempts().mint('i-0bbbbbbbb2', 'nlp.x', 2))).toMatchObject({ status: 403 });
    expect(await get(new AttemptCredentials('another-key-another-key-another-key-!').mint(me, 'nlp.x', 2))).toMatchObject({ status: 403 });
    expect(await get('v1.2.not-a-mac')).toMatchObject({ status: 403 });
    // A body that names no job is malformed, and said to be so (no credential could name its job).
    expect(
      await call({ path: '/v1/job/update', userArn: ARN(me), body: JSON.stringify({ next: {}, expectedVersion: 1 }), credential: false }),
    ).toMatchObject({ status: 400, body: { error: expect.stringMatching(/next\.id: the job id is missing/) } });
    // The machine's own calls need none.
    expect((await call({ path: '/v1/node/heartbeat', userArn: ARN(me), body: '{}', credential: false })).status).toBe(200);
  });
});

describe('agent API: who may call, and what a malformed call gets back', () => {
  it('takes the caller’s machine from its instance role session, and refuses any other caller', async () => {
    expect(callerMachine(ARN('i-0123456789abcdef0'), ROLE)).toBe('i-0123456789abcdef0');
    expect(callerMachine('arn:aws-us-gov:sts::123456789012:assumed-role/R/i-0123456789abcdef0', 'R')).toBe('i-0123456789abcdef0');
    expect(callerMachine(ARN('i-0123456789abcdef0', 'AdminRole'), ROLE)).toMatchObject({
      error: expect.stringMatching(/not the node agent's role/),
    });
    expect(callerMachine(ARN('alice'), ROLE)).toMatchObject({ error: expect.stringMatching(/not a machine's instance role session/) });
    expect(callerMachine('arn:aws:iam::123456789012:user/alice', ROLE)).toMatchObject({ error: expect.any(String) });
    const { call } = setup();
    expect(await call({ path: '/v1/job/get', body: '{"jobId":"j"}' })).toMatchObject({ status: 403, body: { code: 'access-denied' } });
    expect(await call({ path: '/v1/job/get', body: '{"jobId":"j"}', userArn: ARN('i-0aaaaaaaa1', 'Other') })).toMatchObject({
      status: 403,
    });
  });

  it('answers a malformed call with what was wrong and what is allowed, and writes nothing', async () => {
    const { call, nodes } = setup();
    const me = ARN('i-0aaaaaaaa1');
    expect(await call({ path: '/v1/node/teleport', userArn: me })).toMatchObject({
      status: 404,
      body: { error: expect.stringMatching(/not an agent API call; the calls are .*\/v1\/node\/register/) },
    });
    expect(await call({ path: '/v1/node/register', userArn: me, method: 'GET' })).toMatchObject({ status: 400, body: { error: /POST/ } });
    expect(await call({ path: '/v1/node/register', userArn: me, body: '{not json' })).toMatchObject({
      status: 400,
      body: { error: /not JSON/ },
    });
    const bad = await call({
      path: '/v1/node/register',
      userArn: me,
      body: JSON.stringify({ record: { groupId: '', gpus: 'many', healthy: 'yes' } }),
    });
    expect(bad.status).toBe(400);
    expect(bad.body.error).toMatch(/record\.groupId: .*record\.gpus: .*record\.healthy: /);
    expect(
      (
        await call({
          path: '/v1/checkpoint/upload',
          userArn: me,
          body: JSON.stringify({ jobId: 'j', location: 's3://b/x/', files: [{ path: '../../etc/passwd', bytes: 1 }] }),
        })
      ).body.error,
    ).toMatch(/files\.0\.path: a relative path with no empty, "\." or "\.\." part/);
    expect(await nodes.list()).toEqual([]);
  });

  it('refuses a GPU report the planner could not read, naming each field, and stores nothing (issue 63: one such register stopped planning)', async () => {
    const { call, nodes } = setup();
    const me = ARN('i-0aaaaaaaa1');
    const register = (gpus: unknown) =>
      call({ path: '/v1/node/register', userArn: me, body: JSON.stringify({ record: { groupId: 'g', gpus, healthy: true } }) });
    const gpu = { index: 0, model: 'A100-80GB', memoryMiB: 81_920, migEnabled: true };
    for (const [gpus, named] of [
      [[{ ...gpu, migDevices: 7 }], /record\.gpus\.0\.migDevices: /],
      [[{ ...gpu, model: 'X100' }], /record\.gpus\.0\.model: /],
      [[{ ...gpu, index: '0' }], /record\.gpus\.0\.index: /],
      [[{ ...gpu, memoryMiB: -1 }], /record\.gpus\.0\.memoryMiB: /],
      [[{ ...gpu, cores: 5 }], /record\.gpus\.0: .*cores/],
      [[gpu, gpu], /record\.gpus: each GPU index is reported once/],
      [[{ ...gpu, migEnabled: undefined, migDevices: [] }], /migDevices are reported only with migEnabled: true/],
    ] as const) {
      const out = await register(gpus);
      expect(out.status).toBe(400);
      expect(out.body.error).toMatch(named);
    }
    expect(await nodes.list()).toEqual([]);
    const good = await register([
      {
        ...gpu,
        migDevices: [{ index: 0, gpuInstanceId: 1, computeInstanceId: 0, memoryMiB: 9728, profile: '1g.10gb', startSlice: 0, slices: 1 }],
      },
    ]);
    expect(good.status).toBe(200);
    expect((await nodes.list())[0]!.gpus[0]!.migDevices).toHaveLength(1);
  });

  it('takes a GCP machine from its instance identity token (the unsigned URL), and refuses an unsigned call without a good one', async () => {
    const google = gceTokenSigner();
    const rules = {
      audience: 'gpu-fleet/GpuFleet/agent-api',
      serviceAccounts: ['gpu-fleet-node@ml-prod.iam.gserviceaccount.com'],
      projects: ['ml-prod'],
    };
    const { call, nodes } = setup(undefined, undefined, { gceAgents: { rules, certs: google.certs } });
    const bearer = (instance: string, o: Partial<Parameters<typeof google.token>[0]> = {}) =>
      `Bearer ${google.token({ audience: rules.audience, instance, ...o })}`;
    const record = { groupId: 'gf-l4-spot', gpus: [], healthy: true };
    const register = (authorization?: string) =>
      call({ path: '/v1/node/register', body: JSON.stringify({ record }), ...(authorization ? { authorization } : {}) });
    expect(await register(bearer('gf-l4-spot-x7k2'))).toMatchObject({ status: 200 });
    expect((await nodes.list()).map((n) => n.instanceId)).toEqual(['gf-l4-spot-x7k2']);
    // It acts as that machine alone: another machine's record is not its to read.
    expect(
      await call({
        path: '/v1/node/get',
        body: JSON.stringify({ instanceId: 'gf-l4-spot-other' }),
        authorization: bearer('gf-l4-spot-x7k2'),
      }),
    ).toMatchObject({ status: 403, body: { error: 'machine gf-l4-spot-x7k2 shares no job with machine gf-l4-spot-other' } });
    // Unsigned and without a token, a token for another audience, of another account, or one passing for an EC2 machine.
    const refused = [
      await register(),
      await register(bearer('gf-l4-spot-x7k2', { audience: 'https://elsewhere.example' })),
      await register(bearer('gf-l4-spot-x7k2', { email: 'someone@other-proj.iam.gserviceaccount.com' })),
      await register(bearer('i-0123456789abcdef0')),
      await register('Bearer not-a-token'),
    ];
    expect(refused.map((r) => r.status)).toEqual([403, 403, 403, 403, 403]);
    expect(refused[0]!.body.error).toMatch(/an unsigned call must carry a GCE machine's identity token/);
    expect((await nodes.list()).map((n) => n.instanceId)).toEqual(['gf-l4-spot-x7k2']);
    // An instance role session still calls as before, and a token beside it changes nothing.
    expect(
      await call({
        path: '/v1/node/register',
        body: JSON.stringify({ record }),
        userArn: ARN('i-0aaaaaaaa1'),
        authorization: bearer('gf-l4-spot-y'),
      }),
    ).toMatchObject({ status: 200 });
    expect((await nodes.list()).map((n) => n.instanceId).sort()).toEqual(['gf-l4-spot-x7k2', 'i-0aaaaaaaa1']);
  });

  it('registers the caller under its own id and the API’s clock; a body that names an id, a time or a drain is refused, naming them', async () => {
    const { call, nodes } = setup();
    const claimed = await call({
      path: '/v1/node/register',
      userArn: ARN('i-0aaaaaaaa1'),
      body: JSON.stringify({
        record: { instanceId: 'i-0bbbbbbbb2', groupId: 'g', gpus: [], healthy: true, registeredAtMs: 9e15, draining: { reason: 'x' } },
      }),
    });
    expect(claimed).toMatchObject({ status: 400, body: { code: 'invalid-request' } });
    for (const key of ['instanceId', 'registeredAtMs', 'draining']) expect(claimed.body.error).toContain(`"${key}"`);
    expect(await nodes.list()).toEqual([]);
    const out = await call({
      path: '/v1/node/register',
      userArn: ARN('i-0aaaaaaaa1'),
      body: JSON.stringify({ record: { groupId: 'g', gpus: [], healthy: true } }),
    });
    expect(out.status).toBe(200);
    expect((await nodes.list()).map((n) => [n.instanceId, n.registeredAtMs, n.lastHeartbeatAtMs, n.draining])).toEqual([
      ['i-0aaaaaaaa1', 1_800_000_000_000, 1_800_000_000_000, undefined],
    ]);
  });

  it('answers a checkpoint the index refuses (progress going backwards) with 409 and keeps the newer one', async () => {
    const jobs = new MemoryJobStore();
    const me = 'i-0aaaaaaaa1';
    const now = 1_800_000_000_000;
    const job = aJob({ id: 'nlp.j1', team: 'nlp', attempt: 1 });
    await jobs.create({
      ...job,
      state: 'running',
      placement: { capacityType: 'spot', nodes: [{ nodeId: me, gpuIndices: [0] }] },
      // Placed ten minutes ago: 600 s of progress is believable.
      placedAtMs: now - 600_000,
      startedAtMs: now - 590_000,
      updatedAtMs: now - 590_000,
    });
    const { call } = setup(jobs);
    const ref = (dir: string, progressSec: number) => ({
      jobId: 'nlp.j1',
      attempt: 1,
      location: `s3://ckpt/checkpoints/nlp.j1/attempt-1/${dir}/`,
      completedAtMs: now - 1_000,
      progressSec,
    });
    const complete = (r: ReturnType<typeof ref>) =>
      call({ path: '/v1/checkpoint/complete', userArn: ARN(me), body: JSON.stringify({ ref: r, rank: 0 }) });
    expect(await complete(ref('s2', 600))).toMatchObject({ status: 200, body: { complete: true } });
    expect(await complete(ref('s1', 300))).toMatchObject({
      status: 409,
      body: { code: 'conflict', error: expect.stringMatching(/300 s of progress, behind the newest complete one/) },
    });
    expect(await call({ path: '/v1/checkpoint/latest', userArn: ARN(me), body: '{"jobId":"nlp.j1"}' })).toMatchObject({
      body: { ref: { location: 's3://ckpt/checkpoints/nlp.j1/attempt-1/s2/' } },
    });
  });

  it('refuses to send an answer over the function URL’s 6 MB limit, saying so, rather than have Lambda fail it', async () => {
    const jobs = new MemoryJobStore();
    const me = 'i-0aaaaaaaa1';
    await jobs.create({
      ...aJob({ id: 'nlp.j1', team: 'nlp', attempt: 1 }),
      state: 'running',
      placement: { capacityType: 'spot', nodes: [{ nodeId: me, gpuIndices: [0] }] },
    });
    // A signer that answers far more than a page (the handler asks for 200): 4,000 URLs of 2 KB.
    const signer = defaultUrls();
    const urls: CheckpointUrls = {
      uploadTargets: (l, f) => signer.uploadTargets(l, f),
      partUrls: (l, p, u, first, n) => signer.partUrls(l, p, u, first, n),
      finishUpload: (l, p, u, parts) => signer.finishUpload(l, p, u, parts),
      downloadUrls: async () => ({
        files: Array.from({ length: 4000 }, (_, i) => ({ path: `f${i}`, url: `https://x/${'a'.repeat(2000)}` })),
      }),
    };
    const { call } = setup(jobs, urls);
    const out = await call({
      path: '/v1/checkpoint/download',
      userArn: ARN(me),
      body: JSON.stringify({ jobId: 'nlp.j1', location: 's3://ckpt/checkpoints/nlp.j1/attempt-1/s/' }),
    });
    expect(out).toMatchObject({
      status: 500,
      body: { error: expect.stringMatching(/checkpoint\/download is \d+ bytes, over the 6000000-byte limit/) },
    });
  });

  it('says a store failure is worth retrying (503) when it is', async () => {
    const failing = new MemoryJobStore();
    failing.get = () => Promise.reject(new CloudError('throttled', 'slow down', { operation: 'get job' }));
    const { call } = setup(failing);
    expect(await call({ path: '/v1/job/get', userArn: ARN('i-0aaaaaaaa1'), body: '{"jobId":"j"}' })).toMatchObject({
      status: 503,
      body: { code: 'throttled' },
    });
  });
});

describe('presigned checkpoint URLs', () => {
  const s3 = new S3Client({ region: 'us-west-2', credentials: { accessKeyId: 'AKIDEXAMPLE', secretAccessKey: 'secret' } });

  it('signs one PUT per small file and one PUT per part of a large one, each for its own key, and completes the parts', async () => {
    const mock = mockClient(s3);
    mock.on(CreateMultipartUploadCommand).resolves({ UploadId: 'up-1' });
    mock.on(CompleteMultipartUploadCommand).resolves({});
    const urls = new S3CheckpointUrls(s3, 900);
    const big = 200 * 1024 * 1024;
    const targets = await urls.uploadTargets('s3://ckpt-bucket/checkpoints/nlp.j1/attempt-2/step-9/', [
      { path: 'meta.json', bytes: 120 },
      { path: 'shards/model.pt', bytes: big },
    ]);
    const small = targets[0] as { url: string };
    const u = new URL(small.url);
    expect(u.pathname).toMatch(/\/checkpoints\/nlp\.j1\/attempt-2\/step-9\/meta\.json$/);
    expect(u.searchParams.get('X-Amz-Expires')).toBe('900');
    expect(u.searchParams.get('X-Amz-Signature')).toMatch(/^[0-9a-f]{64}$/);
    const multi = targets[1] as { uploadId: string; partBytes: number; parts: number };
    expect(multi.uploadId).toBe('up-1');
    expect(multi.partBytes).toBe(partBytesFor(big));
    expect(multi.parts).toBe(Math.ceil(big / multi.partBytes));
    // The part URLs come a page at a time, as the upload goes.
    const page = await urls.partUrls('s3://ckpt-bucket/checkpoints/nlp.j1/attempt-2/step-9/', 'shards/model.pt', 'up-1', 2, 3);
    expect(page).toHaveLength(3);
    page.forEach((p, i) => {
      const q = new URL(p);
      expect(q.pathname).toMatch(/step-9\/shards\/model\.pt$/);
      expect([q.searchParams.get('partNumber'), q.searchParams.get('uploadId')]).toEqual([String(i + 2), 'up-1']);
    });
    await expect(
      urls.partUrls('s3://ckpt-bucket/checkpoints/nlp.j1/attempt-2/step-9/', 'shards/model.pt', 'up-1', 9_999, 3),
    ).rejects.toThrow(/parts 1 to 10,000/);
    expect(mock.commandCalls(CreateMultipartUploadCommand)[0]!.args[0].input).toMatchObject({
      Bucket: 'ckpt-bucket',
      Key: 'checkpoints/nlp.j1/attempt-2/step-9/shards/model.pt',
    });
    await urls.finishUpload('s3://ckpt-bucket/checkpoints/nlp.j1/attempt-2/step-9/', 'shards/model.pt', 'up-1', [
      { partNumber: 2, etag: '"b"' },
      { partNumber: 1, etag: '"a"' },
    ]);
    expect(mock.commandCalls(CompleteMultipartUploadCommand)[0]!.args[0].input).toMatchObject({
      UploadId: 'up-1',
      MultipartUpload: {
        Parts: [
          { PartNumber: 1, ETag: '"a"' },
          { PartNumber: 2, ETag: '"b"' },
        ],
      },
    });
    mock.restore();
  });

  it('signs one GET per object under the folder, a page at a time in key order, named by its path below it', async () => {
    const mock = mockClient(s3);
    mock
      .on(ListObjectsV2Command)
      .resolvesOnce({
        Contents: [{ Key: 'checkpoints/j/attempt-1/s/a.pt' }, { Key: 'checkpoints/j/attempt-1/s/sub/' }],
        IsTruncated: true,
        NextContinuationToken: 't',
      })
      .resolvesOnce({ Contents: [{ Key: 'checkpoints/j/attempt-1/s/sub/b.pt' }] });
    const urls = new S3CheckpointUrls(s3);
    const first = await urls.downloadUrls('s3://ckpt-bucket/checkpoints/j/attempt-1/s/', undefined, 2);
    expect(first.files.map((g) => g.path)).toEqual(['a.pt']);
    expect(first.next).toBe('sub/'); // the folder marker moves the page on, though it is no file
    const second = await urls.downloadUrls('s3://ckpt-bucket/checkpoints/j/attempt-1/s/', first.next, 2);
    expect(second).toMatchObject({ files: [{ path: 'sub/b.pt' }] });
    expect(second.next).toBeUndefined();
    expect(new URL(second.files[0]!.url).pathname).toMatch(/checkpoints\/j\/attempt-1\/s\/sub\/b\.pt$/);
    expect(mock.commandCalls(ListObjectsV2Command).map((c) => [c.args[0].input.MaxKeys, c.args[0].input.StartAfter])).toEqual([
      [2, undefined],
      [2, 'checkpoints/j/attempt-1/s/sub/'],
    ]);
    mock.restore();
  });
});

describe('agent API: a machine being prepared in its group’s warm pool', () => {
  const types = new Map(Object.entries(INSTANCE_TYPES));
  const chat = newServiceRecord(
    'nlp',
    aSpec({
      name: 'chat',
      image: 'vllm/vllm-openai:v0.6.3',
      gpu: { kind: 'whole', count: 1, models: ['A10G'] },
      interruptible: false,
      service: { port: 8000, replicas: { min: 1, max: 4 }, targets: [{ metric: 'requests-per-second', perReplica: 2 }] },
    }),
    1_800_000_000_000,
  );
  const machine = {
    cloud: 'aws',
    region: 'us-west-2',
    zone: 'us-west-2a',
    instanceType: 'g5.xlarge',
    capacityType: 'on-demand',
    migMode: false,
  };

  function prepared(o: { services?: boolean; hook?: boolean } = {}) {
    const services = new MemoryServiceStore();
    const asg = mockClient(AutoScalingClient);
    const groups = new AsgNodeGroups(asg as unknown as AutoScalingClient, new EC2Client({ region: 'us-west-2' }), {
      region: 'us-west-2',
      clock: { nowMs: () => 1_800_000_000_000 },
    });
    const handler = createAgentApiHandler({
      jobs: new MemoryJobStore(),
      nodes: new MemoryNodeStore(),
      checkpoints: new MemoryCheckpointStore({ nowMs: () => 1_800_000_000_000 }, 's3://ckpt/checkpoints/'),
      urls: defaultUrls(),
      clock: { nowMs: () => 1_800_000_000_000 },
      ...(o.services !== false ? { sources: { services, types } } : {}),
      ...(o.hook !== false ? { launchHook: { hookName: 'gpu-fleet-prepare', groups } } : {}),
      agentRoleName: ROLE,
      attempts: testAttempts(),
      obs: observability('agent-api-test'),
    });
    const call = async (path: string, body: unknown, session = 'i-0aaaaaaaa1') => {
      const event = {
        rawPath: path,
        body: JSON.stringify(body),
        isBase64Encoded: false,
        requestContext: { http: { method: 'POST' }, authorizer: { iam: { userArn: ARN(session) } } },
      } as unknown as LambdaFunctionURLEventWithIAMAuthorizer;
      const out = (await handler(event, lambdaContext('agent-api'))) as { statusCode: number; body: string };
      return { status: out.statusCode, body: JSON.parse(out.body) as Record<string, unknown> };
    };
    return { call, services, asg };
  }

  it('answers which images to pull by the rule for machines in service: the services that may place a replica on it', async () => {
    const { call, services } = prepared();
    expect(await call('/v1/node/warm-images', { machine })).toEqual({ status: 200, body: { images: [] } });
    await services.create(chat);
    expect(await call('/v1/node/warm-images', { machine })).toEqual({ status: 200, body: { images: ['vllm/vllm-openai:v0.6.3'] } });
    // A machine whose GPUs are not the spec's (a V100) pulls nothing; nor a spot one for a service that may not be interrupted.
    expect((await call('/v1/node/warm-images', { machine: { ...machine, instanceType: 'p3.2xlarge' } })).body).toEqual({ images: [] });
    expect((await call('/v1/node/warm-images', { machine: { ...machine, capacityType: 'spot' } })).body).toEqual({ images: [] });
  });

  it('refuses a malformed machine with what was wrong, and a fleet set up without its services as not configured', async () => {
    const bad = await prepared().call('/v1/node/warm-images', { machine: { ...machine, capacityType: 'cheap', migMode: 'no' } });
    expect(bad.status).toBe(400);
    expect(bad.body.error).toMatch(/machine\.capacityType: .*machine\.migMode: /);
    const none = await prepared({ services: false }).call('/v1/node/warm-images', { machine });
    expect(none).toMatchObject({ status: 403, body: { error: expect.stringMatching(/answers no machine being prepared/) } });
  });

  it('lets the caller’s own launch go (CONTINUE, its instance id from the signature); an action already ended is no error', async () => {
    const { call, asg } = prepared();
    asg
      .on(CompleteLifecycleActionCommand)
      .resolvesOnce({})
      .rejectsOnce(
        Object.assign(new Error('No active Lifecycle Action found with instance ID i-0aaaaaaaa1'), {
          name: 'ValidationError',
          $metadata: { httpStatusCode: 400 },
        }),
      );
    // The body cannot name another machine: a field the call does not take is refused, naming it (issue 63).
    expect(await call('/v1/node/launch-ready', { groupName: 'gpu-fleet-a10g-od', instanceId: 'i-0bbbbbbbb2' })).toEqual({
      status: 400,
      body: { code: 'invalid-request', error: 'the body of node/launch-ready is not valid: (body): Unrecognized key: "instanceId"' },
    });
    expect(await call('/v1/node/launch-ready', { groupName: 'gpu-fleet-a10g-od' })).toEqual({ status: 200, body: {} });
    expect(await call('/v1/node/launch-ready', { groupName: 'gpu-fleet-a10g-od' })).toEqual({ status: 200, body: {} });
    const sent = asg.commandCalls(CompleteLifecycleActionCommand).map((c) => c.args[0].input);
    expect(sent).toEqual([
      {
        AutoScalingGroupName: 'gpu-fleet-a10g-od',
        LifecycleHookName: 'gpu-fleet-prepare',
        InstanceId: 'i-0aaaaaaaa1',
        LifecycleActionResult: 'CONTINUE',
      },
      {
        AutoScalingGroupName: 'gpu-fleet-a10g-od',
        LifecycleHookName: 'gpu-fleet-prepare',
        InstanceId: 'i-0aaaaaaaa1',
        LifecycleActionResult: 'CONTINUE',
      },
    ]);
    const off = await prepared({ hook: false }).call('/v1/node/launch-ready', { groupName: 'gpu-fleet-a10g-od' });
    expect(off).toMatchObject({ status: 400, body: { error: expect.stringMatching(/no launch hook/) } });
  });
});

describe('agent API: a warned machine’s replica leaving its service’s target group', () => {
  const NOW = 1_800_000_000_000;
  const TG = 'arn:aws:elasticloadbalancing:us-west-2:123456789012:targetgroup/gpu-fleet-nlp-chat/50dc6c495c0c9188';
  const me = 'i-0aaaaaaaa1';
  const replica = aJob({
    id: 'nlp.chat-r1',
    team: 'nlp',
    attempt: 2,
    spec: {
      name: 'chat-r1',
      labels: { 'gpu-fleet/service': 'nlp.chat' },
      service: { port: 8000, replicas: { min: 1, max: 4 }, targets: [{ metric: 'requests-per-second', perReplica: 2 }] },
    },
  });

  async function world(o: { draining?: boolean; onMachine?: string } = {}) {
    const jobs = new MemoryJobStore();
    const nodes = new MemoryNodeStore();
    const elb = mockClient(ElasticLoadBalancingV2Client);
    elb.on(DeregisterTargetsCommand).resolves({});
    await jobs.create({
      ...replica,
      state: 'running',
      placement: { capacityType: 'spot', nodes: [{ nodeId: o.onMachine ?? me, gpuIndices: [0] }] },
      placedAtMs: NOW - 600_000,
      startedAtMs: NOW - 590_000,
      updatedAtMs: NOW - 590_000,
    });
    await jobs.create({
      ...aJob({ id: 'nlp.batch', team: 'nlp' }),
      state: 'running',
      placement: { capacityType: 'spot', nodes: [{ nodeId: me, gpuIndices: [1] }] },
    });
    await nodes.register({
      instanceId: me,
      groupId: 'g',
      registeredAtMs: NOW - 700_000,
      lastHeartbeatAtMs: NOW,
      gpus: [],
      healthy: true,
      address: '10.0.3.17',
    });
    if (o.draining !== false)
      await nodes.markDraining(me, { sinceMs: NOW - 60_000, reason: 'spot interruption warning', deadlineMs: NOW + 40_000 });
    const handler = createAgentApiHandler({
      jobs,
      nodes,
      checkpoints: new MemoryCheckpointStore({ nowMs: () => NOW }, 's3://ckpt/checkpoints/'),
      urls: defaultUrls(),
      clock: { nowMs: () => NOW },
      sources: { frontDoor: new ElbFrontDoor(elb as unknown as ElasticLoadBalancingV2Client, { 'nlp.chat': TG }) },
      serviceMetrics: { put: async (s) => void published.push(...s) },
      agentRoleName: ROLE,
      attempts: testAttempts(),
      obs: observability('agent-api-test'),
    });
    const published: ServiceMetricSample[] = [];
    const post = async (path: string, body: unknown) => {
      const event = {
        rawPath: path,
        body: JSON.stringify(body),
        headers: credentialHeaders(me, path, JSON.stringify(body)),
        isBase64Encoded: false,
        requestContext: { http: { method: 'POST' }, authorizer: { iam: { userArn: ARN(me) } } },
      } as unknown as LambdaFunctionURLEventWithIAMAuthorizer;
      const out = (await handler(event, lambdaContext('agent-api'))) as { statusCode: number; body: string };
      return { status: out.statusCode, body: JSON.parse(out.body) as Record<string, unknown> };
    };
    const leave = (body: unknown) => post('/v1/service/leave', body);
    const metrics = (body: unknown) => post('/v1/service/metrics', body);
    return { leave, metrics, published, elb };
  }

  it('publishes a replica’s load figures for the machine that serves it, under the service its job names; none for another job or attempt', async () => {
    const { metrics, published } = await world({ draining: false });
    const sample = { metric: 'waiting-requests', value: 7, atMs: NOW - 1_000 };
    expect(await metrics({ jobId: 'nlp.chat-r1', attempt: 2, samples: [sample] })).toEqual({ status: 200, body: {} });
    expect(published).toEqual([{ serviceId: 'nlp.chat', jobId: 'nlp.chat-r1', ...sample }]);
    // Not a replica, not the attempt it runs, not a machine that serves it, not a figure of another kind.
    expect((await metrics({ jobId: 'nlp.batch', attempt: 1, samples: [sample] })).body.error).toMatch(
      /nlp\.batch is not a service replica/,
    );
    expect((await metrics({ jobId: 'nlp.chat-r1', attempt: 1, samples: [sample] })).status).toBe(403);
    const elsewhere = await world({ onMachine: 'i-0bbbbbbbb2' });
    expect((await elsewhere.metrics({ jobId: 'nlp.chat-r1', attempt: 2, samples: [sample] })).status).toBe(403);
    expect((await metrics({ jobId: 'nlp.chat-r1', attempt: 2, samples: [{ ...sample, metric: 'gpu-utilization' }] })).status).toBe(400);
    expect(published).toHaveLength(1);
    expect(elsewhere.published).toEqual([]);
  });

  it('deregisters the replica’s address and port from its service’s target group, and again without harm', async () => {
    const { leave, elb } = await world();
    expect(await leave({ jobId: 'nlp.chat-r1', attempt: 2 })).toEqual({ status: 200, body: {} });
    expect(await leave({ jobId: 'nlp.chat-r1', attempt: 2 })).toEqual({ status: 200, body: {} });
    expect(elb.commandCalls(DeregisterTargetsCommand).map((c) => c.args[0].input)).toEqual([
      { TargetGroupArn: TG, Targets: [{ Id: '10.0.3.17', Port: 8000 }] },
      { TargetGroupArn: TG, Targets: [{ Id: '10.0.3.17', Port: 8000 }] },
    ]);
  });

  it('refuses, saying why, a machine that is not going, a job that is not a replica, an attempt not running there', async () => {
    const calm = await world({ draining: false });
    expect(await calm.leave({ jobId: 'nlp.chat-r1', attempt: 2 })).toMatchObject({
      status: 403,
      body: { error: expect.stringMatching(/is not draining: a replica leaves its target group only from a machine that goes/) },
    });
    const { leave, elb } = await world();
    expect((await leave({ jobId: 'nlp.batch', attempt: 1 })).body.error).toMatch(/job nlp\.batch is not a service replica/);
    expect((await leave({ jobId: 'nlp.chat-r1', attempt: 1 })).body.error).toMatch(
      /attempt 1 of job nlp\.chat-r1 is not the one running on machine/,
    );
    const elsewhere = await world({ onMachine: 'i-0bbbbbbbb2' });
    expect((await elsewhere.leave({ jobId: 'nlp.chat-r1', attempt: 2 })).status).toBe(403);
    expect(calm.elb.commandCalls(DeregisterTargetsCommand)).toHaveLength(0);
    expect(elb.commandCalls(DeregisterTargetsCommand)).toHaveLength(0);
    expect(elsewhere.elb.commandCalls(DeregisterTargetsCommand)).toHaveLength(0);
  });
});
