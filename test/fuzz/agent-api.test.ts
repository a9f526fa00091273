import type { LambdaFunctionURLEventWithIAMAuthorizer } from 'aws-lambda';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { AGENT_API, type AgentApiOp } from '../../cloud/aws/agent-api-protocol.ts';
import { MemoryCheckpointStore, MemoryJobStore, MemoryNodeStore } from '../../cloud/sim/memory-stores.ts';
import { createAgentApiHandler } from '../../functions/agent-api.ts';
import { lambdaContext } from '../../functions/context.ts';
import { observability } from '../../functions/observability.ts';
import { gpuReportProblem } from '../../core/gpu.ts';
import { checkJobSpec } from '../../core/job-spec.ts';
import { plan } from '../../core/planner/planner.ts';
import { AGENT_FAILURE_CODES, JOB_STATES, transition } from '../../core/job.ts';
import { outOfMemory } from '../../core/container-limits.ts';
import { aGroup, aJob, aNode, aSnapshot, T0 } from '../builders.ts';
import { credentialHeaders, testAttempts } from '../support/attempt-credentials.ts';
import type { CheckpointUrls } from '../../cloud/aws/checkpoint-urls.ts';
import { CloudError } from '../../core/errors.ts';

/**
 * Every agent-API route under hostile bodies (issue 63: a register with `migDevices: 7` was
 * stored, and the next plan threw for the whole fleet). Each body is sent as the machine that
 * runs the job it names, with that attempt's credential, so the rules behind the schema are
 * reached too. No body makes the handler fail (a 500), and whatever it stored, a planner pass
 * over the stored records reads every one of them.
 */
const SEED = Number(process.env.FC_SEED ?? 20_261_207);
const ME = 'i-0aaaaaaaa1';
const ROLE = 'GpuFleet-AgentRole-1A2B3C';
const JOB = 'nlp.fuzzed';
const GROUP = aGroup({ instanceType: 'g5.xlarge' });
/** The job this machine runs: its own, as the store holds it (what `job/update` bodies start from). */
const RUNNING = aJob({ id: JOB, state: 'running', attempt: 1, placement: { nodes: [{ nodeId: ME, gpuIndices: [0] }] } } as never);

const failed = transition(RUNNING, { type: 'fail', attempt: 1, exitCode: 137, failure: outOfMemory(668) }, T0 + 60_000);
const FAILED = failed.ok ? failed.job : undefined;

/** A valid body of each route, for the job placed on this machine: the fuzzer mutates these. */
const VALID: { readonly [Op in AgentApiOp]: unknown } = {
  'node/register': { record: { groupId: 'g5.xlarge-on-demand', gpus: [{ index: 0, model: 'A10G', memoryMiB: 23_028 }], healthy: true } },
  'node/heartbeat': { health: { healthy: true } },
  'node/get': { instanceId: ME },
  'node/unassign': { jobId: JOB, attempt: 1 },
  'node/images': { images: ['pytorch/pytorch:2.3.0'] },
  'node/warm-images': {
    machine: {
      cloud: 'aws',
      region: 'us-east-1',
      zone: 'us-east-1a',
      instanceType: 'g5.xlarge',
      capacityType: 'on-demand',
      migMode: false,
    },
  },
  'node/launch-ready': { groupName: 'g5.xlarge-on-demand' },
  'service/leave': { jobId: JOB, attempt: 1 },
  'attempt/secrets': { jobId: JOB, attempt: 1 },
  'node/drain': { drain: { sinceMs: T0, reason: 'spot interruption notice', deadlineMs: T0 + 120_000 } },
  'job/get': { jobId: JOB },
  // The attempt failing out of memory, as the agent writes it.
  'job/update': { next: FAILED, expectedVersion: RUNNING.version },
  'checkpoint/latest': { jobId: JOB },
  'checkpoint/complete': { ref: {}, rank: 0 },
  'checkpoint/upload': { jobId: JOB, location: `s3://ckpt/checkpoints/${JOB}/attempt-1/step-1/`, files: [{ path: 'w.bin', bytes: 10 }] },
  'checkpoint/upload-parts': {
    jobId: JOB,
    location: `s3://ckpt/checkpoints/${JOB}/attempt-1/step-1/`,
    path: 'w.bin',
    uploadId: 'u',
    firstPart: 1,
    count: 1,
  },
  'checkpoint/finish-upload': {
    jobId: JOB,
    location: `s3://ckpt/checkpoints/${JOB}/attempt-1/step-1/`,
    path: 'w.bin',
    uploadId: 'u',
    parts: [{ partNumber: 1, etag: '"e"' }],
  },
  'checkpoint/download': { jobId: JOB, location: `s3://ckpt/checkpoints/${JOB}/attempt-1/step-1/` },
  'service/metrics': { jobId: JOB, attempt: 1, samples: [{ metric: 'waiting-requests', value: 3, atMs: T0 }] },
  'logs/put': { jobId: JOB, attempt: 1, rank: 0, lines: [{ atMs: T0, seq: 0, line: 'hello' }] },
};

/** A value of any JSON type, hostile ones favoured: wrong types, huge and negative numbers, long strings. */
const anyValue: fc.Arbitrary<unknown> = fc.oneof(
  fc.constantFrom(null, true, false, 0, -1, 7, 1.5, 2 ** 53, -(2 ** 53), Number.MAX_VALUE, '', 'x', '../..', [], {}, [7], { a: 1 }),
  fc.string({ maxLength: 40 }),
  fc.integer(),
  fc.double({ noNaN: true }),
  fc.jsonValue({ maxDepth: 2 }),
);

/** A body: a valid one with a field (at any depth) replaced, removed or added; or anything at all. */
function bodyOf(op: AgentApiOp): fc.Arbitrary<unknown> {
  const mutated = fc
    .tuple(fc.nat(), fc.constantFrom('replace', 'remove', 'add'), anyValue, fc.string({ minLength: 1, maxLength: 12 }))
    .map(([pick, how, value, key]) => {
      const body = structuredClone(VALID[op]) as Record<string, unknown>;
      // Every object in the body, and the one picked.
      const objects: Record<string, unknown>[] = [];
      const walk = (v: unknown) => {
        if (v && typeof v === 'object') {
          if (!Array.isArray(v)) objects.push(v as Record<string, unknown>);
          for (const c of Object.values(v)) walk(c);
        }
      };
      walk(body);
      const target = objects[pick % objects.length]!;
      const keys = Object.keys(target);
      const field = keys.length > 0 ? keys[pick % keys.length]! : key;
      if (how === 'replace') target[field] = value;
      else if (how === 'remove') delete target[field];
      else target[key] = value;
      return body;
    });
  return fc.oneof({ weight: 4, arbitrary: mutated }, { weight: 1, arbitrary: anyValue });
}

/** Presigned URLs as S3 answers them, with no network: a multipart upload it never began is NoSuchUpload. */
const urls: CheckpointUrls = {
  uploadTargets: async (location, files) => files.map((f) => ({ path: f.path, url: `https://ckpt.example/${location}${f.path}?sig` })),
  partUrls: async (_location, path, uploadId) => {
    throw new CloudError('not-found', `NoSuchUpload: ${uploadId} of ${path}`, { operation: 'sign part' });
  },
  finishUpload: async (_location, path, uploadId) => {
    throw new CloudError('not-found', `NoSuchUpload: ${uploadId} of ${path}`, { operation: 'finish upload' });
  },
  downloadUrls: async () => ({ files: [] }),
};

describe('the agent API under hostile bodies, every route (issue 63)', () => {
  it('never fails, and stores nothing a planner pass cannot read', async () => {
    const seen = new Map<number, number>();
    const ops = Object.keys(AGENT_API) as AgentApiOp[];
    await fc.assert(
      fc.asyncProperty(
        fc.array(
          fc.constantFrom(...ops).chain((op) => bodyOf(op).map((body) => ({ op, body }))),
          { minLength: 1, maxLength: 8 },
        ),
        async (calls) => {
          const group = GROUP;
          const node = aNode(ME, { group });
          const jobs = new MemoryJobStore();
          const nodes = new MemoryNodeStore();
          await nodes.register({ ...node.record!, instanceId: ME, assigned: { [JOB]: 1 } });
          await jobs.create(RUNNING);
          const handler = createAgentApiHandler({
            jobs,
            nodes,
            checkpoints: new MemoryCheckpointStore({ nowMs: () => T0 }, 's3://ckpt/checkpoints/'),
            urls,
            clock: { nowMs: () => T0 },
            agentRoleName: ROLE,
            attempts: testAttempts(),
            obs: observability('agent-api-fuzz'),
          });
          for (const { op, body } of calls) {
            const text = JSON.stringify(body) ?? 'null';
            const event = {
              rawPath: `/v1/${op}`,
              body: text,
              headers: credentialHeaders(ME, `/v1/${op}`, text),
              isBase64Encoded: false,
              requestContext: {
                http: { method: 'POST' },
                authorizer: { iam: { userArn: `arn:aws:sts::123456789012:assumed-role/${ROLE}/${ME}` } },
              },
            } as unknown as LambdaFunctionURLEventWithIAMAuthorizer;
            const out = (await handler(event, lambdaContext('agent-api'))) as { statusCode: number; body: string };
            // A refusal says why; never a failure of the handler itself.
            expect([200, 400, 403, 404, 409, 503], `${op} ${text.slice(0, 300)} → ${out.body.slice(0, 300)}`).toContain(out.statusCode);
            seen.set(out.statusCode, (seen.get(out.statusCode) ?? 0) + 1);
          }
          // What was stored, the planner reads: every machine's GPU report, and the job's spec.
          const stored = await nodes.list();
          for (const r of stored) expect(gpuReportProblem(r.gpus), JSON.stringify(r.gpus)).toBeUndefined();
          const now = (await jobs.get(JOB))!;
          expect(checkJobSpec(now.spec).ok).toBe(true);
          expect(JOB_STATES).toContain(now.state);
          // What an agent may say of a failure: an exit code, and a reason it knows, of the shape every reader expects.
          if (now.failure) {
            expect(AGENT_FAILURE_CODES).toContain(now.failure.code);
            expect(typeof now.failure.message).toBe('string');
          }
          if (now.exitCode !== undefined) expect(Number.isInteger(now.exitCode)).toBe(true);
          const p = plan(
            aSnapshot({
              groups: [group],
              nodes: stored.map((r) => ({ ...node, record: r })),
              ...(now.state === 'pending' ? { pendingJobs: [now] } : { activeJobs: [now] }),
            }),
          );
          expect(p.unreadableNodes ?? []).toEqual([]);
        },
      ),
      { numRuns: 300, seed: SEED },
    );
    // The bodies reach past the schema: some are carried out, some refused by it, some by the rules behind it.
    expect([...seen.keys()]).toEqual(expect.arrayContaining([200, 400, 403]));
  }, 120_000);
});
