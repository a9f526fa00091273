import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  MemoryDecisionLog,
  MemoryJobQueue,
  MemoryJobStore,
  MemoryNodeStore,
  MemorySpendLedger,
  StaticBudgetTags,
} from '../../cloud/sim/memory-stores.ts';
import { OutOfViewError } from '../../core/errors.ts';
import { ADMIN, viewOf, type Viewer } from '../../core/services/team-view.ts';
import { aJob, T0 } from '../builders.ts';

const TEAMS = ['nlp', 'vision', 'speech'];

/** The view of a store holding the given jobs, for a viewer. */
async function viewWith(jobs: readonly { id: string; team: string; secret: string }[], viewer: Viewer) {
  const store = new MemoryJobStore();
  for (const j of jobs) await store.create(aJob({ id: j.id, team: j.team, spec: { env: { TOKEN: j.secret } } }));
  return viewOf(
    {
      jobs: store,
      nodes: new MemoryNodeStore(),
      decisions: new MemoryDecisionLog(),
      ledger: new MemorySpendLedger(),
      queue: new MemoryJobQueue(TEAMS),
      budgets: new StaticBudgetTags([]),
    },
    viewer,
    TEAMS,
  );
}

describe("a team's view of the fleet (core/services/team-view.ts)", () => {
  it('lists only its own jobs, answers its own by id, refuses any other id as out of view, and never shows an inline value', async () => {
    const job = fc.record({
      team: fc.constantFrom(...TEAMS),
      token: fc.stringMatching(/^[a-z0-9-]{1,12}$/),
      secret: fc.stringMatching(/^[A-Za-z0-9]{8,20}$/),
    });
    await fc.assert(
      fc.asyncProperty(
        fc.uniqueArray(job, { selector: (j) => `${j.team}.${j.token}`, maxLength: 12 }),
        fc.constantFrom(...TEAMS),
        async (list, me) => {
          const jobs = list.map((j) => ({ id: `${j.team}.${j.token}`, team: j.team, secret: j.secret }));
          const view = await viewWith(jobs, { kind: 'team', team: me });
          const listed = await view.jobs.listByState(['pending']);
          expect(listed.map((j) => j.id).sort()).toEqual(
            jobs
              .filter((j) => j.team === me)
              .map((j) => j.id)
              .sort(),
          );
          for (const j of jobs) {
            if (j.team === me) {
              const got = await view.jobs.get(j.id);
              expect(got?.id).toBe(j.id);
              expect(JSON.stringify(got)).not.toContain(j.secret);
            } else await expect(view.jobs.get(j.id)).rejects.toThrow(OutOfViewError);
          }
          // The admin sees every job, and no inline value either.
          const all = await viewWith(jobs, ADMIN);
          const everything = await all.jobs.listByState(['pending']);
          expect(everything).toHaveLength(jobs.length);
          for (const j of jobs) expect(JSON.stringify(everything)).not.toContain(j.secret);
        },
      ),
      { numRuns: 60 },
    );
  });

  it("answers another team's id the same whether or not the job exists", async () => {
    const view = await viewWith([{ id: 'vision.real', team: 'vision', secret: 'x'.repeat(10) }], { kind: 'team', team: 'nlp' });
    const said = async (id: string) => view.jobs.get(id).then(String, (e: Error) => e.message.replace(id, 'ID'));
    expect(await said('vision.real')).toBe(await said('vision.imaginary'));
  });

  it('its spend, queues and budget tags are its own; asking for another team is out of view', async () => {
    const ledger = new MemorySpendLedger();
    await ledger.accrue({ team: 'nlp', period: '2026-11', fromMs: T0, toMs: T0 + 1, amountMicroUsd: 1 });
    await ledger.accrue({ team: 'vision', period: '2026-11', fromMs: T0, toMs: T0 + 1, amountMicroUsd: 2 });
    await ledger.accrue({ team: '(idle)', period: '2026-11', fromMs: T0, toMs: T0 + 1, amountMicroUsd: 3 });
    const view = viewOf(
      {
        jobs: new MemoryJobStore(),
        nodes: new MemoryNodeStore(),
        decisions: new MemoryDecisionLog(),
        ledger,
        queue: new MemoryJobQueue(TEAMS),
        budgets: new StaticBudgetTags(TEAMS.map((t) => ({ team: t, resource: `q/${t}`, tags: {} }))),
      },
      { kind: 'team', team: 'nlp' },
      TEAMS,
    );
    expect((await view.ledger.list()).map((c) => c.team)).toEqual(['nlp']);
    await expect(view.ledger.read('vision', '2026-11')).rejects.toThrow(OutOfViewError);
    expect(await view.queue.teams()).toEqual(['nlp']);
    await expect(view.queue.depth('speech')).rejects.toThrow(OutOfViewError);
    expect((await view.budgets.readTeamTags()).map((t) => t.team)).toEqual(['nlp']);
  });
});
