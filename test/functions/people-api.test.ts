import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dynamoStores } from '../../cloud/aws/dynamo-store.ts';
import { PeopleApiClient } from '../../cloud/aws/people-api-client.ts';
import type { TableNames } from '../../cloud/aws/tables.ts';
import { MemoryJobLogs, MemoryJobQueue } from '../../cloud/sim/memory-stores.ts';
import { CloudError, OutOfViewError } from '../../core/errors.ts';
import type { DecisionRecord } from '../../core/ports.ts';
import { aJob, T0 } from '../builders.ts';
import { startDynalite, type LocalDynamo } from '../support/dynalite.ts';
import { principal, startPeopleApi, TWO_TEAMS, twoTeamBudgets } from '../support/people-api-server.ts';

/**
 * The people API's matrix, end to end: the real client signs each call, the local function URL
 * checks the signature and passes the role session on, the real handler answers from DynamoDB
 * (dynalite) through the caller's view. A team's role: its own jobs, queries, decisions, spend,
 * budget and output are answered; another team's are refused as out of view, from the id alone.
 */
describe('the people API answers each role for its own team (signed calls, DynamoDB by dynalite)', () => {
  let db: LocalDynamo;
  let tables: TableNames;
  let api: Awaited<ReturnType<typeof startPeopleApi>>;
  let stores: ReturnType<typeof dynamoStores>;
  const nlp = principal('GpuFleet-team-nlp');
  const vision = principal('GpuFleet-team-vision');
  const admin = principal('GpuFleet-admin');
  const stranger = principal('SomeOtherRole');
  const noInvoke = principal('GpuFleet-team-nlp-copy', false);
  const client = (p: typeof nlp) => new PeopleApiClient({ url: api.url, region: 'us-east-1', credentials: p.credentials });
  const logs = new MemoryJobLogs();

  beforeAll(async () => {
    db = await startDynalite();
    tables = await db.createTables();
    stores = dynamoStores(db.doc, tables, 'bucket');
    await stores.jobs.create(aJob({ id: 'nlp.a', team: 'nlp', spec: { env: { HF_TOKEN: 'hf_secretvalue' } } }));
    await stores.jobs.create(aJob({ id: 'nlp.b', team: 'nlp' }));
    await stores.jobs.create(aJob({ id: 'vision.x', team: 'vision', spec: { env: { WANDB_API_KEY: 'wandb-secret' } } }));
    await stores.ledger.accrue({ team: 'nlp', period: '2026-11', fromMs: T0, toMs: T0 + 3_600_000, amountMicroUsd: 5_000_000 });
    await stores.ledger.accrue({ team: 'vision', period: '2026-11', fromMs: T0, toMs: T0 + 3_600_000, amountMicroUsd: 9_000_000 });
    const decision: DecisionRecord = {
      id: 'd-1',
      atMs: T0 + 60_000,
      dryRun: false,
      inputs: { pendingJobs: 3, activeJobs: 0, nodes: 0, groups: [] },
      plan: {
        actions: [
          { kind: 'hold', jobId: 'vision.x', reason: { code: 'budget-hold', message: "vision's budget is spent" } },
          {
            kind: 'scale-up',
            groupId: 'g5-spot',
            fromDesired: 0,
            toDesired: 2,
            expected: [],
            reason: { code: 'scale-up-for-pending', message: 'for nlp.a and vision.x, which wait' },
          },
        ],
        waiting: [
          { jobId: 'nlp.a', reason: { code: 'waiting-for-boot', message: 'its machine boots' } },
          { jobId: 'vision.x', reason: { code: 'budget-hold', message: 'held' } },
        ],
        addedCostMicroUsdPerHour: 0,
        addedExpectedCostMicroUsdPerHour: 0,
      },
      applied: 2,
      errors: [{ index: 0, kind: 'hold', resource: 'vision.x', code: 'refused', message: 'vision.x moved on' }],
      planMs: 3,
    };
    await stores.decisions.record(decision);
    await logs.append({ jobId: 'nlp.a', attempt: 1, rank: 0, team: 'nlp', labels: {}, lines: [{ atMs: T0, seq: 0, line: 'epoch 1' }] });
    await logs.append({
      jobId: 'vision.x',
      attempt: 1,
      rank: 0,
      team: 'vision',
      labels: {},
      lines: [{ atMs: T0, seq: 0, line: 'secret output' }],
    });
    api = await startPeopleApi(
      {
        ports: {
          jobs: stores.jobs,
          nodes: stores.nodes,
          decisions: stores.decisions,
          ledger: stores.ledger,
          queue: new MemoryJobQueue(['nlp', 'vision']),
          budgets: twoTeamBudgets(),
          jobLogs: logs,
        },
        stores: { jobs: stores.jobs },
        ...TWO_TEAMS,
        clock: { nowMs: () => T0 + 120_000 },
      },
      [nlp, vision, admin, stranger, noInvoke],
    );
  }, 60_000);

  afterAll(async () => {
    await api?.close();
    await db?.close();
  });

  it('whoami: the role, its team and whether the team sets its own budget', async () => {
    expect(await client(nlp).whoami()).toMatchObject({
      view: { kind: 'team', team: 'nlp' },
      role: 'GpuFleet-team-nlp',
      teams: ['nlp'],
      setsOwnBudget: { nlp: false },
    });
    expect(await client(vision).whoami()).toMatchObject({ teams: ['vision'], setsOwnBudget: { vision: true } });
    expect(await client(admin).whoami()).toMatchObject({ view: { kind: 'admin' }, teams: ['nlp', 'vision'] });
  });

  it("own jobs and index queries are answered, with inline env values hidden; another team's are out of view", async () => {
    const c = client(nlp);
    const ports = c.ports(await c.whoami());
    const a = await ports.jobs.get('nlp.a');
    expect(a?.id).toBe('nlp.a');
    expect(a?.spec.env).toEqual({ HF_TOKEN: '(14 characters, inline; not shown)' });
    expect(JSON.stringify(a)).not.toContain('hf_secretvalue');
    expect((await ports.jobs.listByState(['pending'])).map((j) => j.id).sort()).toEqual(['nlp.a', 'nlp.b']);
    expect((await ports.jobs.listByState(['pending'], 'nlp')).map((j) => j.id).sort()).toEqual(['nlp.a', 'nlp.b']);
    await expect(ports.jobs.get('vision.x')).rejects.toThrow(OutOfViewError);
    await expect(ports.jobs.get('vision.x')).rejects.toThrow(
      /vision\.x is out of view: it belongs to team vision, and this role sees team nlp's work only/,
    );
    // Whether the other team's job exists or not, the answer is the same.
    await expect(ports.jobs.get('vision.no-such-job')).rejects.toThrow(/vision\.no-such-job is out of view/);
    await expect(ports.jobs.listByState(['pending'], 'vision')).rejects.toThrow(OutOfViewError);
    expect((await ports.jobs.listEndedSince(T0 - 86_400_000, T0 + 86_400_000)).every((j) => j.team === 'nlp')).toBe(true);
    await expect(ports.jobs.listEndedSince(0, T0)).rejects.toThrow(/a window of at most 400 days/);
  });

  it("decisions: the team's own job actions and waits; fleet actions kept with other teams' job ids put as another team's job", async () => {
    const c = client(nlp);
    const ports = c.ports(await c.whoami());
    const [d] = await ports.decisions.recent(5);
    expect(d!.plan.actions.map((a) => a.kind)).toEqual(['scale-up']);
    expect(JSON.stringify(d)).not.toContain('vision.x');
    expect((d!.plan.actions[0] as { reason: { message: string } }).reason.message).toBe("for nlp.a and (another team's job), which wait");
    expect(d!.plan.waiting.map((w) => w.jobId)).toEqual(['nlp.a']);
    expect(d!.errors).toEqual([]);
    const all = (await client(admin)
      .ports(await client(admin).whoami())
      .decisions.get('d-1'))!;
    expect(all.plan.actions).toHaveLength(2);
    expect(all.errors).toHaveLength(1);
  });

  it('spend, budget tags, queues and output: its own; the admin sees every team', async () => {
    const c = client(nlp);
    const ports = c.ports(await c.whoami());
    expect((await ports.ledger.list()).map((r) => r.team)).toEqual(['nlp']);
    expect((await ports.ledger.read('nlp', '2026-11')).spentMicroUsd).toBe(5_000_000);
    await expect(ports.ledger.read('vision', '2026-11')).rejects.toThrow(/team vision's spend is out of view/);
    expect((await ports.budgets.readTeamTags()).map((t) => t.team)).toEqual(['nlp']);
    expect(await ports.queue.teams()).toEqual(['nlp']);
    await expect(ports.queue.depth('vision')).rejects.toThrow(OutOfViewError);
    expect((await ports.jobLogs!.read('nlp.a')).map((l) => l.line)).toEqual(['epoch 1']);
    await expect(ports.jobLogs!.read('vision.x')).rejects.toThrow(/job vision\.x is out of view/);
    const everything = client(admin).ports(await client(admin).whoami());
    expect((await everything.ledger.list()).map((r) => r.team).sort()).toEqual(['nlp', 'vision']);
    expect((await everything.jobLogs!.read('vision.x')).map((l) => l.line)).toEqual(['secret output']);
    // Hidden from the admin too: inline values are never returned.
    expect((await everything.jobs.get('vision.x'))!.spec.env).toEqual({ WANDB_API_KEY: '(12 characters, inline; not shown)' });
  });

  it("cancel: a team's role cancels its own job; another team's is refused and left as it was", async () => {
    await expect(client(nlp).cancel('vision.x')).rejects.toThrow(OutOfViewError);
    expect((await stores.jobs.get('vision.x'))!.state).toBe('pending');
    expect(await client(nlp).cancel('nlp.b')).toMatchObject({ status: 'cancelled' });
    expect((await stores.jobs.get('nlp.b'))!.state).toBe('cancelled');
    expect(await client(admin).cancel('vision.x')).toMatchObject({ status: 'cancelled' });
  });

  it('a principal that is not one of the roles, or that IAM does not let call the URL, is refused before anything is read', async () => {
    const before = api.calls.length;
    await expect(client(stranger).whoami()).rejects.toThrow(/is not one of this fleet's people roles: assume the role of your team/);
    await expect(client(noInvoke).whoami()).rejects.toThrow(CloudError);
    await expect(client(noInvoke).whoami()).rejects.toThrow(/the people API refused the call \(Forbidden/);
    expect(api.calls.slice(before).map((c) => c.status)).toEqual([403, 403, 403]);
    // A bad call is a 400 that says what the calls are.
    await expect(client(nlp).call('jobs.get' as never)).rejects.toThrow(/the arguments of jobs\.get are not valid/);
  });
});
