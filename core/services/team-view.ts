import type { ByteLog } from '../bytes.ts';
import { OutOfViewError } from '../errors.ts';
import type { NodeRecord } from '../fleet.ts';
import type { JobSpec } from '../job-spec.ts';
import type { Job, JobState } from '../job.ts';
import type { PlanAction } from '../plan.ts';
import type {
  BudgetMemory,
  BudgetTagSource,
  DecisionLog,
  DecisionRecord,
  GpuMetricsSource,
  JobLogSource,
  JobQueue,
  JobStore,
  NodeStore,
  ServiceStore,
  SpendLedger,
} from '../ports.ts';
import type { ServiceRecord } from '../serving/service.ts';
import { IDLE_TEAM } from './accrual.ts';

/**
 * What a person sees of the fleet. People reach the control plane as a team (a role per team)
 * or as the platform's admin; a team's view holds its own jobs, services, decisions, spend,
 * budget and output, and nothing of another team's. The view is decided from the ids asked for
 * (a job id begins with its team: core/job.ts `jobIdFor`), never from what is stored, so asking
 * for another team's job says nothing of whether it exists.
 *
 * Whoever looks, an inline environment value is never shown: a spec's `env` values are replaced by
 * how long they were (secrets go by reference, `secrets[].valueFrom`, which is shown).
 */
export type Viewer = { readonly kind: 'admin' } | { readonly kind: 'team'; readonly team: string };

export const ADMIN: Viewer = { kind: 'admin' };

/** The team a job or service id belongs to (`team.rest`). */
export function teamOfId(id: string): string {
  const dot = id.indexOf('.');
  return dot > 0 ? id.slice(0, dot) : '';
}

export function sees(viewer: Viewer, team: string): boolean {
  return viewer.kind === 'admin' || viewer.team === team;
}

/** What a team's person is told when they ask for another team's job, service or spend. */
export function outOfView(viewer: Viewer, what: string, team: string): OutOfViewError {
  const mine = viewer.kind === 'team' ? viewer.team : '';
  return new OutOfViewError(
    mine,
    `${what} is out of view: it belongs to ${team ? `team ${team}` : 'no team'}, and this role sees team ${mine}'s work only (the platform's admin role sees every team)`,
  );
}

function checkId(viewer: Viewer, id: string, what: string): void {
  const team = teamOfId(id);
  if (!sees(viewer, team)) throw outOfView(viewer, `${what} ${id}`, team);
}

/** A spec as people are shown it: inline `env` values replaced by how long they were; secret references kept. */
export function shownSpec(spec: JobSpec): JobSpec {
  const env = spec.env as Readonly<Record<string, string>> | undefined;
  if (!env || Object.keys(env).length === 0) return spec;
  const hidden: Record<string, string> = {};
  for (const [k, v] of Object.entries(env)) hidden[k] = `(${v.length} character${v.length === 1 ? '' : 's'}, inline; not shown)`;
  return { ...spec, env: hidden };
}

export function shownJob(job: Job): Job {
  return job.spec ? { ...job, spec: shownSpec(job.spec) } : job;
}

function shownService(record: ServiceRecord): ServiceRecord {
  return { ...record, spec: shownSpec(record.spec) };
}

const JOB_ID_RE = /\b([A-Za-z0-9][A-Za-z0-9_-]*)\.[A-Za-z0-9_~-]+/gu;

/** A sentence with the ids of other teams' jobs and services (`team.rest`, for the fleet's teams) put as "another team's job". */
function scrubbed(text: string, viewer: Viewer, teams: ReadonlySet<string>): string {
  if (viewer.kind === 'admin') return text;
  return text.replace(JOB_ID_RE, (whole, team: string) => (teams.has(team) && team !== viewer.team ? "(another team's job)" : whole));
}

function jobAction(a: PlanAction): string | undefined {
  return a.kind === 'place' || a.kind === 'preempt' || a.kind === 'hold' || a.kind === 'release-hold' ? a.jobId : undefined;
}

/**
 * A decision as a team sees it: the actions on its own jobs and every fleet action (scaling,
 * removing machines), with other teams' job ids in their reasons put as "another team's job";
 * its own jobs' waits; its own budget in force, services and right-sizing. Errors about another
 * team's job are left out.
 */
export function decisionInView(d: DecisionRecord, viewer: Viewer, teams: ReadonlySet<string>): DecisionRecord {
  if (viewer.kind === 'admin') return d;
  const mine = (id: string) => teamOfId(id) === viewer.team;
  const keep = d.plan.actions.map((a) => {
    const job = jobAction(a);
    return job === undefined || mine(job);
  });
  const actions = d.plan.actions.filter((_, i) => keep[i]);
  const kept = new Map<number, number>();
  let n = 0;
  keep.forEach((k, i) => {
    if (k) kept.set(i, n++);
  });
  const scrub = <T extends { reason: { code: string; message: string } }>(x: T): T =>
    ({ ...x, reason: { ...x.reason, message: scrubbed(x.reason.message, viewer, teams) } }) as T;
  return {
    ...d,
    plan: {
      ...d.plan,
      actions: actions.map((a) => ('reason' in a && a.reason ? scrub(a as PlanAction & { reason: { code: string; message: string } }) : a)),
      waiting: d.plan.waiting.filter((w) => mine(w.jobId)).map(scrub),
    },
    errors: d.errors
      .filter((e) => kept.has(e.index) && (teamOfId(e.resource) === '' || !teams.has(teamOfId(e.resource)) || mine(e.resource)))
      .map((e) => ({ ...e, index: kept.get(e.index)!, message: scrubbed(e.message, viewer, teams) })),
    ...(d.teams ? { teams: d.teams.filter((t) => t.id === viewer.team) } : {}),
    ...(d.services ? { services: d.services.filter((s) => mine(s.service)) } : {}),
    ...(d.rightsized ? { rightsized: d.rightsized.filter((r) => mine(r.jobId)) } : {}),
  };
}

/**
 * A machine as a team sees it: the machine itself (the platform's, which every team's work may
 * use) with only the team's own work on it and the images it pulls ahead left out (they name
 * other teams' services).
 */
export function nodeInView(node: NodeRecord, viewer: Viewer): NodeRecord {
  if (viewer.kind === 'admin') return node;
  const assigned = Object.fromEntries(Object.entries(node.assigned ?? {}).filter(([id]) => teamOfId(id) === viewer.team));
  const { prefetchImages: _images, ...rest } = node;
  return { ...rest, assigned };
}

/** The read side of the fleet people use: what `status`, `explain`, `logs`, `budget` and `report` call. */
export interface PeoplePorts {
  readonly jobs: Pick<JobStore, 'get' | 'listByState' | 'listEndedSince'>;
  readonly nodes: Pick<NodeStore, 'list'>;
  readonly decisions: Pick<DecisionLog, 'get' | 'recent'>;
  readonly ledger: Pick<SpendLedger, 'read' | 'list'>;
  readonly queue: Pick<JobQueue, 'depth' | 'teams'>;
  readonly budgets: BudgetTagSource;
  readonly budgetMemory?: Pick<BudgetMemory, 'load'>;
  readonly services?: Pick<ServiceStore, 'get' | 'list'>;
  readonly jobLogs?: JobLogSource;
  readonly gpuMetrics?: GpuMetricsSource;
  /** Every job's checkpoint byte log from a time on. */
  readonly byteLogs?: (sinceMs: number) => Promise<readonly ByteLog[]>;
}

const ACTIVE: readonly JobState[] = ['placed', 'running', 'checkpointing'];

/**
 * The ports as `viewer` may see them. A team's view answers only for the team: lists are cut to
 * it, and a read of another team's job, service, spend or queue throws {@link OutOfViewError}.
 * `teams` are the fleet's teams (for putting other teams' ids in decision reasons). Every view,
 * the admin's too, hides inline environment values.
 */
export function viewOf<P extends PeoplePorts>(ports: P, viewer: Viewer, teams: readonly string[]): P {
  const known = new Set(teams);
  const team = viewer.kind === 'team' ? viewer.team : undefined;
  const mine = (t: string) => team === undefined || t === team;
  const jobs: PeoplePorts['jobs'] = {
    async get(id) {
      checkId(viewer, id, 'job');
      const job = await ports.jobs.get(id);
      return job && mine(job.team) ? shownJob(job) : undefined;
    },
    async listByState(states, t) {
      if (t !== undefined && !mine(t)) throw outOfView(viewer, `team ${t}'s jobs`, t);
      return (await ports.jobs.listByState(states, t ?? team)).filter((j) => mine(j.team)).map(shownJob);
    },
    async listEndedSince(sinceMs, untilMs) {
      return (await ports.jobs.listEndedSince(sinceMs, untilMs)).filter((j) => mine(j.team)).map(shownJob);
    },
  };
  const view: PeoplePorts = {
    jobs,
    nodes: { list: async () => (await ports.nodes.list()).map((n) => nodeInView(n, viewer)) },
    decisions: {
      get: async (id) => {
        const d = await ports.decisions.get(id);
        return d && decisionInView(d, viewer, known);
      },
      recent: async (limit) => (await ports.decisions.recent(limit)).map((d) => decisionInView(d, viewer, known)),
    },
    ledger: {
      async read(t, period) {
        if (!mine(t)) throw outOfView(viewer, `team ${t}'s spend`, t);
        return ports.ledger.read(t, period);
      },
      async list() {
        return (await ports.ledger.list()).filter((c) => mine(c.team) && (team === undefined || c.team !== IDLE_TEAM));
      },
    },
    queue: {
      async depth(t) {
        if (!mine(t)) throw outOfView(viewer, `team ${t}'s queue`, t);
        return ports.queue.depth(t);
      },
      async teams() {
        return (await ports.queue.teams()).filter(mine);
      },
    },
    budgets: { readTeamTags: async () => (await ports.budgets.readTeamTags()).filter((s) => mine(s.team)) },
    ...(ports.budgetMemory
      ? {
          budgetMemory: {
            load: async () => new Map([...(await ports.budgetMemory!.load())].filter(([t]) => mine(t))),
          },
        }
      : {}),
    ...(ports.services
      ? {
          services: {
            async get(id) {
              checkId(viewer, id, 'service');
              const s = await ports.services!.get(id);
              return s && mine(s.team) ? shownService(s) : undefined;
            },
            list: async () => (await ports.services!.list()).filter((s) => mine(s.team)).map(shownService),
          },
        }
      : {}),
    ...(ports.jobLogs
      ? {
          jobLogs: {
            async read(jobId, options) {
              checkId(viewer, jobId, 'job');
              return ports.jobLogs!.read(jobId, options);
            },
          },
        }
      : {}),
    ...(ports.gpuMetrics
      ? {
          gpuMetrics: {
            async gpuSamples(instanceIds, windowSec) {
              const samples = await ports.gpuMetrics!.gpuSamples(instanceIds, windowSec);
              if (team === undefined) return samples;
              // A team reads the GPUs its own running work holds, not what another team's job does with its own.
              const held = new Set<string>();
              for (const j of await ports.jobs.listByState(ACTIVE, team))
                for (const n of j.placement?.nodes ?? []) for (const g of n.gpuIndices) held.add(`${n.nodeId}/${g}`);
              return samples.filter((s) => held.has(`${s.instanceId}/${s.gpuIndex}`));
            },
          },
        }
      : {}),
    ...(ports.byteLogs ? { byteLogs: async (sinceMs: number) => (await ports.byteLogs!(sinceMs)).filter((l) => mine(l.owner.team)) } : {}),
  };
  return { ...ports, ...view };
}
