import { mkdtempSync, readdirSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { GetSecretValueCommand, ResourceNotFoundException, SecretsManagerClient } from '@aws-sdk/client-secrets-manager';
import { GetParameterCommand, ParameterNotFound, SSMClient } from '@aws-sdk/client-ssm';
import { mockClient } from 'aws-sdk-client-mock';
import { afterEach, describe, expect, it } from 'vitest';
import { AgentApiClient } from '../../cloud/aws/agent-api-client.ts';
import { AwsSecretReader } from '../../cloud/aws/secret-reader.ts';
import { MemoryJobStore } from '../../cloud/sim/memory-stores.ts';
import { isCloudError } from '../../core/errors.ts';
import { checkJobSpec } from '../../core/job-spec.ts';
import { intake } from '../../core/services/intake.ts';
import { shownSpec } from '../../core/services/team-view.ts';
import { credentialsFor } from '../support/agent-api-server.ts';
import { agentWorld, waitFor } from '../support/agent-world.ts';

/**
 * Secrets by reference: a spec names an SSM parameter or a Secrets Manager secret of its own team;
 * the record keeps the reference; the agent resolves it for the attempt through the agent API
 * (under the attempt's credential) into the process's environment only. The AWS side is the real
 * reader over the SDK clients, answered by aws-sdk-client-mock (no local SSM or Secrets Manager
 * server exists), with their documented errors.
 */

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});
const A = 'i-0aaaaaaaa1';
const B = 'i-0bbbbbbbb2';
const HF = 'arn:aws:ssm:us-west-2:123456789012:parameter/gpu-fleet/nlp/hf-token';
const WANDB = 'arn:aws:secretsmanager:us-west-2:123456789012:secret:gpu-fleet/nlp/wandb-AbCdEf';
const VISIONS = 'arn:aws:ssm:us-west-2:123456789012:parameter/gpu-fleet/vision/hf-token';
const PRINT_ENV = [
  'node',
  '-e',
  'console.log(JSON.stringify({ event: "env", hf: process.env.HF_TOKEN, wandb: process.env.WANDB_API_KEY }))',
];

function reader() {
  const ssm = new SSMClient({ region: 'us-west-2' });
  const sm = new SecretsManagerClient({ region: 'us-west-2' });
  const ssmMock = mockClient(ssm);
  const smMock = mockClient(sm);
  ssmMock.on(GetParameterCommand).rejects(new ParameterNotFound({ message: 'Parameter not found', $metadata: {} }));
  ssmMock.on(GetParameterCommand, { Name: '/gpu-fleet/nlp/hf-token', WithDecryption: true }).resolves({
    Parameter: { Name: '/gpu-fleet/nlp/hf-token', Type: 'SecureString', Value: 'hf_real_secret_value', Version: 1 },
  });
  smMock
    .on(GetSecretValueCommand)
    .rejects(new ResourceNotFoundException({ message: "Secrets Manager can't find the specified secret.", $metadata: {} }));
  smMock
    .on(GetSecretValueCommand, { SecretId: WANDB })
    .resolves({ ARN: WANDB, Name: 'gpu-fleet/nlp/wandb', SecretString: 'wandb_real_secret' });
  return { reader: new AwsSecretReader(ssm, sm), ssmMock, smMock };
}

function world() {
  const w = agentWorld();
  cleanups.push(() => w.shutdown());
  return w;
}

function filesUnder(dir: string): string[] {
  return readdirSync(dir, { recursive: true, withFileTypes: true })
    .filter((e) => e.isFile())
    .map((e) => join(e.parentPath, e.name));
}

describe('secrets by reference', () => {
  it('the spec takes references to SSM parameters and Secrets Manager secrets only, each name once and not also inline', () => {
    expect(
      checkJobSpec({ image: 'x', command: ['y'], gpu: { kind: 'whole', count: 1 }, secrets: [{ name: 'HF_TOKEN', valueFrom: HF }] }).ok,
    ).toBe(true);
    const bad = checkJobSpec({
      image: 'x',
      command: ['y'],
      gpu: { kind: 'whole', count: 1 },
      env: { HF_TOKEN: 'inline' },
      secrets: [
        { name: 'HF_TOKEN', valueFrom: HF },
        { name: 'OTHER', valueFrom: 's3://bucket/key' },
      ],
    });
    expect(bad.ok).toBe(false);
    const errors = bad.ok ? [] : bad.errors.join('\n');
    expect(errors).toMatch(
      /secrets\.1\.valueFrom: must be an SSM parameter ARN \(arn:aws:ssm:REGION:ACCOUNT:parameter\/gpu-fleet\/TEAM\/NAME\) or a Secrets Manager secret ARN/,
    );
    expect(errors).toMatch(/secrets\.0\.name: HF_TOKEN is also in env: give a variable once/);
  });

  it("intake refuses a job that names another team's secret, saying whose it is and where its own go; the record keeps no value", async () => {
    const jobs = new MemoryJobStore();
    const clock = { nowMs: () => 1_000 };
    const body = (valueFrom: string) =>
      JSON.stringify({ image: 'x', command: ['y'], gpu: { kind: 'whole', count: 1 }, secrets: [{ name: 'HF_TOKEN', valueFrom }] });
    const theirs = await intake({ jobs, clock }, { team: 'nlp', token: 't1', body: body(VISIONS) });
    expect(theirs.outcome).toBe('rejected');
    expect((await jobs.get('nlp.t1'))!.rejection!.errors.join(' ')).toMatch(
      /secrets\[0\] \(HF_TOKEN\): names team vision's secret; a job of team nlp may use only its own team's secrets, under \/gpu-fleet\/nlp\//,
    );
    const outside = await intake(
      { jobs, clock },
      { team: 'nlp', token: 't2', body: body('arn:aws:ssm:us-west-2:123456789012:parameter/prod/db-password') },
    );
    expect((outside.outcome === 'rejected' && outside.errors.join(' ')) || '').toMatch(/is not under gpu-fleet\/<team>\//);
    expect((await intake({ jobs, clock }, { team: 'nlp', token: 't3', body: body(HF) })).outcome).toBe('accepted');
    expect((await jobs.get('nlp.t3'))!.spec.secrets).toEqual([{ name: 'HF_TOKEN', valueFrom: HF }]);
    // People are shown the reference, never a value (there is none to show).
    expect(shownSpec((await jobs.get('nlp.t3'))!.spec).secrets).toEqual([{ name: 'HF_TOKEN', valueFrom: HF }]);
  });

  it('the agent resolves them for the attempt through the agent API: the process gets the values; the record, the logs and the folder do not', async () => {
    const w = world();
    const { reader: secrets, ssmMock } = reader();
    const api = await w.startApi({ secrets });
    const work = mkdtempSync(join(tmpdir(), 'agent-secrets-'));
    const a = w.agent(A, { workDir: work, api });
    await a.heartbeat();
    await w.submit('nlp.sec', {
      command: PRINT_ENV,
      secrets: [
        { name: 'HF_TOKEN', valueFrom: HF },
        { name: 'WANDB_API_KEY', valueFrom: WANDB },
      ],
    });
    await w.place('nlp.sec', [A]);
    await a.heartbeat();
    const line = await waitFor('the process to print its environment', () => {
      try {
        return w.output(work, 'nlp.sec', 1).find((l) => l.event === 'env');
      } catch {
        return undefined;
      }
    });
    expect(line).toEqual({ event: 'env', hf: 'hf_real_secret_value', wandb: 'wandb_real_secret' });
    expect(ssmMock.commandCalls(GetParameterCommand).map((c) => c.args[0].input)).toEqual([
      { Name: '/gpu-fleet/nlp/hf-token', WithDecryption: true },
    ]);
    await a.settled();
    const record = JSON.stringify(await w.jobs.get('nlp.sec'));
    expect(record).not.toContain('hf_real_secret_value');
    expect(record).toContain(HF);
    expect(JSON.stringify(w.logs)).not.toContain('hf_real_secret_value');
    expect(JSON.stringify(api.calls)).not.toContain('hf_real_secret_value');
    // On the machine, only what the process itself printed holds it (its output, which is the job's own).
    const holding = filesUnder(work).filter((f) => readFileSync(f, 'utf8').includes('hf_real_secret_value'));
    expect(holding.map((f) => f.slice(work.length))).toEqual(['/jobs/nlp.sec/attempt-1/output.log']);
  });

  it("another machine, or a record naming another team's secret, gets nothing; a missing secret fails the start with why, not the agent", async () => {
    const w = world();
    const { reader: secrets, ssmMock } = reader();
    const api = await w.startApi({ secrets });
    const a = w.agent(A, { api });
    const b = w.agent(B, { api });
    await a.heartbeat();
    await b.heartbeat();
    await w.submit('nlp.sec', { command: ['node', '-e', 'setTimeout(() => {}, 60000)'], secrets: [{ name: 'HF_TOKEN', valueFrom: HF }] });
    await w.place('nlp.sec', [A]);
    await a.heartbeat();
    // Machine B, with its own credentials and work list, asks for A's attempt: refused.
    const asB = new AgentApiClient({ url: api.url, region: api.region, credentials: credentialsFor(B) });
    await asB.call('node/get', { instanceId: B });
    const refused = await asB.call('attempt/secrets', { jobId: 'nlp.sec', attempt: 1 }).then(
      () => 'answered',
      (error: unknown) => (isCloudError(error, 'access-denied') ? error.message : String(error)),
    );
    expect(refused).toMatch(/needs the credential .* of an attempt of it on this machine/);

    // A record that names vision's secret (written past intake): the API refuses it, the attempt goes back with why.
    const spec = { ...(await w.jobs.get('nlp.sec'))!.spec };
    const tampered = await w.submit('nlp.tampered', { command: ['node', '-e', '0'] });
    await w.jobs.update(
      { ...tampered, spec: { ...spec, secrets: [{ name: 'HF_TOKEN', valueFrom: VISIONS }] } as never, version: tampered.version + 1 },
      tampered.version,
    );
    await w.place('nlp.tampered', [B]);
    await b.heartbeat();
    const back = await waitFor('the tampered attempt to go back', async () => {
      const j = (await w.jobs.get('nlp.tampered'))!;
      return j.state === 'pending' && j.requeueReason ? j : undefined;
    });
    expect(back.requeueReason!.message).toMatch(/could not resolve its secrets: .*names team vision's secret/);
    expect(ssmMock.commandCalls(GetParameterCommand).some((c) => c.args[0].input.Name === '/gpu-fleet/vision/hf-token')).toBe(false);

    // A secret that does not exist: the start fails, saying which and why.
    const missing = await w.submit('nlp.missing', {
      command: ['node', '-e', '0'],
      secrets: [{ name: 'HF_TOKEN', valueFrom: 'arn:aws:ssm:us-west-2:123456789012:parameter/gpu-fleet/nlp/gone' }],
    });
    await w.place(missing.id, [B]);
    await b.heartbeat();
    const failed = await waitFor('the missing secret to send the attempt back', async () => {
      const j = (await w.jobs.get(missing.id))!;
      return j.state === 'pending' && j.requeueReason ? j : undefined;
    });
    expect(failed.requeueReason!.message).toMatch(/could not resolve its secrets: .*\/gpu-fleet\/nlp\/gone/);
  });
});
