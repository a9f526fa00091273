import { mkdirSync, mkdtempSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { AgentApiBlobs } from '../../agent/checkpoint-files.ts';
import { ProcessRunner, type JobRunner, type Launch } from '../../agent/runner.ts';
import { AgentApiClient, AgentApiServiceMetrics } from '../../cloud/aws/agent-api-client.ts';
import type { ServiceMetricSample } from '../../core/ports.ts';
import { isCloudError } from '../../core/errors.ts';
import type { Job } from '../../core/job.ts';
import { reason } from '../../core/reason.ts';
import { applyJobEvent } from '../../core/services/job-updates.ts';
import { credentialsFor, type startAgentApi } from '../support/agent-api-server.ts';
import { agentWorld, CHATTY_JOB, COUNTER_JOB, waitFor } from '../support/agent-world.ts';
import { testAttempts } from '../support/attempt-credentials.ts';
import { MemoryJobLogs } from '../../cloud/sim/memory-stores.ts';
import { GceMetadata } from '../../agent/metadata.ts';
import { gceTokenSigner } from '../support/gce-identity.ts';
import { gceInstance, startMetadataServer } from '../support/metadata-server.ts';

/**
 * The node agent on a fleet machine: no table and no bucket of its own, every read and write
 * through the agent API (SigV4-signed as its machine, checked by the real handler against the
 * stored records). The same agent code as with direct stores; these tests show the API carries
 * everything an agent does, and refuses what a machine may not do to work that is not its own.
 */

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});
function world() {
  const w = agentWorld();
  cleanups.push(() => w.shutdown());
  return w;
}
const dir = (name: string) => mkdtempSync(join(tmpdir(), `${name}-`));
const A = 'i-0aaaaaaaa1';
const B = 'i-0bbbbbbbb2';
const interrupt = reason('interrupted', 'spot interruption warning');

type Api = Awaited<ReturnType<typeof startAgentApi>>;
/**
 * What an escaped job on machine `instanceId` can send: the machine's own credentials, any request,
 * and the attempt credentials the API hands that machine with its work list (fetched first, as the
 * agent fetches them; so these tests show the rules that hold beyond the credentials).
 */
async function asMachine(api: Api, instanceId: string): Promise<AgentApiClient> {
  const client = new AgentApiClient({ url: api.url, region: api.region, credentials: credentialsFor(instanceId) });
  await client.call('node/get', { instanceId });
  return client;
}
async function refusal(p: Promise<unknown>): Promise<string> {
  try {
    await p;
  } catch (error) {
    if (isCloudError(error, 'access-denied')) return error.message;
    throw error;
  }
  throw new Error('the call was not refused');
}

describe('a GCP machine through the agent API, with its instance identity token (issue 68)', () => {
  it('registers, takes its work and reports it as the machine its token names, with no AWS credentials; another machine is not its to touch', async () => {
    const w = world();
    const google = gceTokenSigner();
    const rules = {
      audience: 'gpu-fleet/GpuFleet/agent-api',
      serviceAccounts: ['gpu-fleet-node@ml-prod.iam.gserviceaccount.com'],
      projects: ['ml-prod'],
    };
    const api = await w.startApi({ gceAgents: { rules, certs: google.certs } });
    // The machine's own metadata server issues its tokens (asked for with format=full, the instance named in them).
    const asked: string[] = [];
    const gceServer = await startMetadataServer('gce', gceInstance('gf-l4-spot-x7k2'), (audience, format) => {
      asked.push(`${audience} ${format}`);
      return format === 'full'
        ? google.token({ audience, instance: 'gf-l4-spot-x7k2' })
        : google.token({ audience, instance: 'gf-l4-spot-x7k2', full: false });
    });
    cleanups.push(() => gceServer.close());
    const metadata = new GceMetadata(gceServer.url);
    const name = (await metadata.identity()).instanceId;
    const a = w.agent(name, { workDir: dir('agent-gce'), api, gceToken: () => metadata.identityToken(rules.audience) });
    await a.heartbeat();
    expect(await w.nodes.get('gf-l4-spot-x7k2')).toMatchObject({ groupId: 'g4dn-spot', healthy: true });
    await w.submit('nlp.on-gcp', { command: ['node', COUNTER_JOB, '3', '10', '5'] });
    await w.place('nlp.on-gcp', ['gf-l4-spot-x7k2']);
    await a.heartbeat();
    await waitFor('the job to finish', async () => {
      await a.heartbeat();
      return (await w.jobs.get('nlp.on-gcp'))?.state === 'succeeded';
    });
    // Every call went to the unsigned URL as that machine; one token served them all (it lasts an hour).
    expect(new Set(api.calls.map((c) => c.status < 400))).toEqual(new Set([true]));
    expect(asked).toEqual([`${rules.audience} full`]);
    // A token of this machine does not act for another machine's record.
    const hostile = new AgentApiClient({ url: api.gceUrl, region: api.region, bearer: () => metadata.identityToken(rules.audience) });
    await w.nodes.register({
      instanceId: 'gf-l4-spot-other',
      groupId: 'g',
      registeredAtMs: 1,
      lastHeartbeatAtMs: 1,
      gpus: [],
      healthy: true,
    });
    await expect(hostile.call('node/get', { instanceId: 'gf-l4-spot-other' })).rejects.toThrow(
      /shares no job with machine gf-l4-spot-other/,
    );
    // Without a token, the unsigned URL answers nothing.
    const unsigned = new AgentApiClient({ url: api.gceUrl, region: api.region, bearer: async () => 'x.y.z' });
    await expect(unsigned.call('node/heartbeat', { health: { healthy: true } })).rejects.toThrow(/GCE identity token is not valid/);
  });
});

describe('node agent through the agent API', () => {
  it('runs a gang, saves each rank’s part of a sharded checkpoint (in parts, by presigned URLs), and resumes each rank from its own part', async () => {
    const w = world();
    // Parts of 8 bytes: every checkpoint file goes up as a multipart upload.
    const api = await w.startApi({ partBytes: 8 });
    const workA = dir('agent-a');
    const workB = dir('agent-b');
    const a = w.agent(A, { workDir: workA, api });
    const b = w.agent(B, { workDir: workB, api });
    await a.heartbeat();
    await b.heartbeat();
    expect(await w.nodes.get(A)).toMatchObject({ groupId: 'g4dn-spot', healthy: true, gpus: [{ model: 'T4' }] });
    await w.submit('nlp.fsdp', {
      command: ['node', COUNTER_JOB, '100000', '20', '10'],
      nodes: 2,
      env: { SIGNAL_CHECKPOINT_NAME: 'on-signal' },
    });
    await w.place('nlp.fsdp', [A, B]);
    await a.heartbeat();
    await b.heartbeat();
    expect((await w.jobs.get('nlp.fsdp'))!.state).toBe('running');
    const cp = await waitFor('a checkpoint with both parts', async () => {
      await a.watch();
      await b.watch();
      return (await w.jobs.get('nlp.fsdp'))!.checkpoint;
    });
    expect(cp.ranks).toBe(2);
    await applyJobEvent(w.jobs, 'nlp.fsdp', { type: 'checkpoint-requested', attempt: 1, reason: interrupt }, Date.now());
    await a.heartbeat();
    await b.heartbeat();
    await Promise.all([a.settled(), b.settled()]);
    const requeued = (await w.jobs.get('nlp.fsdp'))!;
    expect(requeued).toMatchObject({
      state: 'pending',
      attempt: 2,
      checkpoint: { ranks: 2, location: expect.stringMatching(/on-signal\/$/) },
    });
    // Each rank's part is in the store, whole (reassembled from its parts), written by that rank.
    const parts = readdirSync(w.storeRoot, { recursive: true, withFileTypes: true })
      .filter((e) => e.isFile() && e.name === 'state.json' && e.parentPath.includes('on-signal'))
      .map((e) => join(e.parentPath, e.name));
    expect(parts.map((p) => [/rank-(\d)/.exec(p)?.[1], JSON.parse(readFileSync(p, 'utf8')).rank]).sort()).toEqual([
      ['0', '0'],
      ['1', '1'],
    ]);
    expect(api.calls.some((c) => c.op === 'checkpoint/finish-upload' && c.status === 200)).toBe(true);

    // Attempt 2 with the machines swapped: each rank downloads its own part by presigned GETs.
    await w.place('nlp.fsdp', [B, A]);
    await b.heartbeat();
    await a.heartbeat();
    const startOf = (work: string) =>
      waitFor('the rank to print its start', () => {
        try {
          return w.output(work, 'nlp.fsdp', 2).find((l) => l.event === 'start');
        } catch {
          return undefined;
        }
      });
    expect(await startOf(workB)).toMatchObject({ rank: '0', resumedRank: '0' });
    expect(await startOf(workA)).toMatchObject({ rank: '1', resumedRank: '1' });
    expect((await startOf(workB))!.step).toBeGreaterThan(0);
    // The save's bytes as the agents measured them, billed to the job's team; each rank's read back of its part billed once.
    const location = requeued.checkpoint!.location;
    const files = readdirSync(fileURLToPath(location), { recursive: true, withFileTypes: true }).filter((e) => e.isFile());
    const rankBytes = (rank: number) =>
      files.filter((e) => e.parentPath.includes(`rank-${rank}`)).reduce((n, e) => n + statSync(join(e.parentPath, e.name)).size, 0);
    const log = (await w.checkpoints.byteLogs(0)).find((l) => l.owner.jobId === 'nlp.fsdp')!;
    expect(log.owner.team).toBe('nlp');
    const saved = log.saves.find((r) => r.location === location)!;
    // A gang's save is billed as its completing rank's part times its ranks (the ranks' parts may differ by a byte or two:
    // each writes its own step count).
    expect(saved.parts).toBe(2);
    expect([2 * rankBytes(0), 2 * rankBytes(1)]).toContain(saved.bytes);
    expect(saved.reads?.map((r) => [r.key, r.bytes]).sort()).toEqual([
      [`2/${A}`, saved.bytes / 2],
      [`2/${B}`, saved.bytes / 2],
    ]);
    // Nothing the agents did was refused: the API carries all of it.
    expect(api.calls.filter((c) => c.status !== 200)).toEqual([]);
  }, 30_000);

  it('sends a replica’s load figures through the API, which publishes them under the service its job names, not one the machine says', async () => {
    const w = world();
    const published: ServiceMetricSample[] = [];
    const api = await w.startApi({ serviceMetrics: { put: async (s) => void published.push(...s) } });
    const a = w.agent(A, { api });
    await a.heartbeat();
    await w.submit('nlp.chat-r1', { command: ['node', COUNTER_JOB, '100000', '20'], labels: { 'gpu-fleet/service': 'nlp.chat' } });
    await w.place('nlp.chat-r1', [A]);
    const client = await asMachine(api, A);
    const atMs = Date.now();
    await new AgentApiServiceMetrics(client).put([
      { serviceId: 'cv.other', jobId: 'nlp.chat-r1', attempt: 1, metric: 'waiting-requests', value: 4, atMs },
      { serviceId: 'cv.other', jobId: 'nlp.chat-r1', attempt: 1, metric: 'running-requests', value: 9, atMs },
    ]);
    expect(published).toEqual([
      { serviceId: 'nlp.chat', jobId: 'nlp.chat-r1', metric: 'waiting-requests', value: 4, atMs },
      { serviceId: 'nlp.chat', jobId: 'nlp.chat-r1', metric: 'running-requests', value: 9, atMs },
    ]);
  });

  it('keeps the attempt credentials in the agent: none reaches a job’s environment, its folders or its output', async () => {
    const w = world();
    const api = await w.startApi();
    const launches: Launch[] = [];
    const inner = new ProcessRunner();
    const runner: JobRunner = {
      kind: 'process',
      start: (l) => (launches.push(l), inner.start(l)),
      cleanUpLeftovers: () => inner.cleanUpLeftovers(),
    };
    const work = dir('agent-cred');
    const a = w.agent(A, { workDir: work, api, runner });
    await a.heartbeat();
    await w.submit('nlp.mine', { command: ['node', COUNTER_JOB, '100000', '20', '5'] });
    await w.place('nlp.mine', [A]);
    await a.heartbeat();
    await waitFor('the job to save', async () => {
      await a.watch();
      return (await w.jobs.get('nlp.mine'))!.checkpoint;
    });
    const credential = testAttempts().mint(A, 'nlp.mine', 1);
    // The agent used it (every job call carried it), and the job was given none of it.
    expect(api.calls.filter((c) => c.op === 'job/update' && c.status === 200).length).toBeGreaterThan(0);
    expect(launches).toHaveLength(1);
    expect(JSON.stringify(launches[0]!.env)).not.toContain(credential.split('.')[2]);
    const written = readdirSync(work, { recursive: true, withFileTypes: true })
      .filter((e) => e.isFile())
      .map((e) => readFileSync(join(e.parentPath, e.name), 'latin1'));
    expect(written.length).toBeGreaterThan(0);
    for (const text of written) expect(text).not.toContain(credential.split('.')[2]);
  });

  it('moves a checkpoint of many files and many parts a page at a time, each answer small, and reads it back byte for byte', async () => {
    const w = world();
    // Parts of 8 bytes: a 3,600-byte file is 450 parts, asked for in pages of 200 URLs.
    const api = await w.startApi({ partBytes: 8 });
    const a = w.agent(A, { api });
    await a.heartbeat();
    await w.submit('nlp.many', { command: ['node', COUNTER_JOB, '100000', '20'] });
    await w.place('nlp.many', [A]);
    const local = dir('many-files');
    const want = new Map<string, Buffer>();
    for (let i = 0; i < 450; i++) want.set(`shard-${String(i).padStart(3, '0')}.bin`, Buffer.from(`file ${i}`));
    want.set('sub/model.bin', Buffer.alloc(3_600, 7));
    mkdirSync(join(local, 'sub'), { recursive: true });
    for (const [p, b] of want) writeFileSync(join(local, p), b);
    const blobs = new AgentApiBlobs(await asMachine(api, A), w.checkpoints.root);
    const location = `${w.checkpoints.locationFor('nlp.many', 1)}step-1/`;
    await blobs.upload(local, location);
    const back = dir('many-back');
    expect(await blobs.download(location, back)).toBe(true);
    const got = readdirSync(back, { recursive: true, withFileTypes: true }).filter((e) => e.isFile());
    expect(got).toHaveLength(want.size);
    for (const [p, b] of want) expect(readFileSync(join(back, p)).equals(b), p).toBe(true);
    const count = (op: string) => api.calls.filter((c) => c.op === op && c.status === 200).length;
    expect([count('checkpoint/upload'), count('checkpoint/upload-parts'), count('checkpoint/download')]).toEqual([5, 3, 3]);
    expect(Math.max(...api.calls.map((c) => c.bytes))).toBeLessThan(200_000);
  });

  it('a machine writes the output of its own attempts only, and the API adds the job’s team and labels', async () => {
    const w = world();
    const logs = new MemoryJobLogs();
    const api = await w.startApi({ jobLogs: logs });
    const a = w.agent(A, { api, logsViaApi: true, config: { logsSec: 0.05 } });
    const b = w.agent(B, { api });
    await a.start();
    await b.heartbeat();
    await w.submit('nlp.mine', { command: ['node', CHATTY_JOB, '10'], checkpoint: undefined, labels: { project: 'ranking' } });
    await w.submit('cv.theirs', { command: ['node', COUNTER_JOB, '100000', '20'] });
    await w.place('nlp.mine', [A]);
    await w.place('cv.theirs', [B]);
    await a.heartbeat();
    await waitFor('output through the API', async () => ((await logs.read('nlp.mine')).length > 5 ? true : undefined));
    const hostile = await asMachine(api, A);
    const line = { atMs: Date.now(), seq: 0, line: 'forged' };
    // Another machine's job, another rank, another attempt: refused.
    // (It holds no credential of the other machine's job: that refusal comes first.)
    expect(await refusal(hostile.call('logs/put', { jobId: 'cv.theirs', attempt: 1, rank: 0, lines: [line] }))).toMatch(
      /logs\/put acts for job cv\.theirs: .*none was shown/,
    );
    expect(await refusal(hostile.call('logs/put', { jobId: 'nlp.mine', attempt: 1, rank: 1, lines: [line] }))).toMatch(
      /did not run rank 1/,
    );
    expect(await refusal(hostile.call('logs/put', { jobId: 'nlp.mine', attempt: 2, rank: 0, lines: [line] }))).toMatch(
      /acts for job nlp\.mine: .*none was shown/,
    );
    expect(await logs.read('cv.theirs')).toEqual([]);
    // A machine cannot say which team or labels its lines belong to: the job says.
    const batches: unknown[] = [];
    const spy = { append: async (b: unknown) => void batches.push(b) };
    const api2 = await w.startApi({ jobLogs: spy as never });
    await (await asMachine(api2, A)).call('logs/put', { jobId: 'nlp.mine', attempt: 1, rank: 0, lines: [{ ...line, seq: 999_999 }] });
    expect(batches).toEqual([expect.objectContaining({ jobId: 'nlp.mine', team: 'nlp', labels: { project: 'ranking' } })]);
  });

  it('a machine cannot touch another machine’s record, jobs or checkpoints, nor change its own jobs beyond what an agent does', async () => {
    const w = world();
    const api = await w.startApi();
    const a = w.agent(A, { api });
    const b = w.agent(B, { api });
    await a.heartbeat();
    await b.heartbeat();
    await w.submit('nlp.mine', { command: ['node', COUNTER_JOB, '100000', '20', '5'] });
    await w.submit('cv.theirs', { command: ['node', COUNTER_JOB, '100000', '20', '5'], env: { TOKEN: 'cv-secret' } });
    await w.place('nlp.mine', [A]);
    await w.place('cv.theirs', [B]);
    await a.heartbeat();
    await b.heartbeat();
    await waitFor('a checkpoint of the other team’s job', async () => {
      await b.watch();
      return (await w.jobs.get('cv.theirs'))!.checkpoint;
    });
    const hostile = await asMachine(api, A);
    const theirs = (await w.jobs.get('cv.theirs'))!;
    const mine = (await w.jobs.get('nlp.mine'))!;
    const bBefore = (await w.nodes.get(B))!;

    // Another machine's job: not readable, not writable. Its machine holds no credential of it; a credential of its own job
    // passed off as one for that job is not valid for it; and past the credentials, the machine has no part in it.
    const noCredential = /acts for job cv\.theirs: .*none was shown/;
    expect(await refusal(hostile.call('job/get', { jobId: 'cv.theirs' }))).toMatch(noCredential);
    const fail = { ...theirs, state: 'failed', exitCode: 1, version: theirs.version + 1, updatedAtMs: Date.now() } as Job;
    expect(await refusal(hostile.call('job/update', { next: fail as never, expectedVersion: theirs.version }))).toMatch(noCredential);
    // Its checkpoints: neither readable nor writable.
    expect(await refusal(hostile.call('checkpoint/latest', { jobId: 'cv.theirs' }))).toMatch(noCredential);
    expect(await refusal(hostile.call('checkpoint/download', { jobId: 'cv.theirs', location: theirs.checkpoint!.location }))).toMatch(
      noCredential,
    );
    expect(
      await refusal(
        hostile.call('checkpoint/upload', {
          jobId: 'cv.theirs',
          location: w.checkpoints.locationFor('cv.theirs', 1),
          files: [{ path: 'x', bytes: 1 }],
        }),
      ),
    ).toMatch(noCredential);
    // A checkpoint folder of its own job that is really the other job's (a path that climbs out) is not its own.
    expect(
      await refusal(
        hostile.call('checkpoint/upload', {
          jobId: 'nlp.mine',
          location: `${w.checkpoints.locationFor('nlp.mine', 1)}../../cv.theirs/attempt-1/`,
          files: [{ path: 'x', bytes: 1 }],
        }),
      ),
    ).toMatch(/not a checkpoint folder of job nlp\.mine/);
    // Another machine's record: the body cannot name it; drains and work-list changes land on the caller's own record.
    await hostile.call('node/unassign', { jobId: 'cv.theirs', attempt: 1 });
    await hostile.call('node/register', { record: { groupId: 'evil', gpus: [], healthy: false } });
    await hostile.call('node/images', { images: ['evil/miner:1'] });
    expect(await w.nodes.get(B)).toEqual(bBefore);
    expect(await refusal(hostile.call('node/get', { instanceId: B }))).toMatch(/shares no job/);

    // Its own job: only what an agent writes. Not the spec, the team, the usage, a success it did not see.
    const tampered = [
      { ...mine, spec: { ...mine.spec, image: 'evil/miner:1' } },
      { ...mine, team: 'cv-other' },
      { ...mine, usage: { attempts: 0, heldSec: 0, gpuSec: 0, spotSec: 0, costMicroUsd: 0, onDemandMicroUsd: 0, reworkSec: 0 } },
      { ...mine, checkpoint: { ...theirs.checkpoint!, jobId: 'nlp.mine' } },
    ].map((j) => ({ ...j, version: mine.version + 1, updatedAtMs: Date.now() }));
    for (const next of tampered)
      expect(await refusal(hostile.call('job/update', { next: next as never, expectedVersion: mine.version }))).toMatch(
        /not a change an agent makes|not its newest complete checkpoint/,
      );
    // A signature made with another machine's key, or none, is not the caller it claims.
    const forged = new AgentApiClient({
      url: api.url,
      region: api.region,
      credentials: { accessKeyId: credentialsFor(B).accessKeyId, secretAccessKey: 'guessed' },
    });
    expect(await refusal(forged.call('job/get', { jobId: 'cv.theirs' }))).toMatch(/signature/);
    const stillTheirs = (await w.jobs.get('cv.theirs'))!;
    expect(stillTheirs).toMatchObject({ state: 'running', attempt: 1, team: theirs.team, spec: { image: theirs.spec.image } });
    expect((await w.jobs.get('nlp.mine'))!).toMatchObject({ state: 'running', team: 'nlp', spec: { image: mine.spec.image } });
  }, 30_000);
});
