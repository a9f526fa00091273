import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { cliInProcess } from '../support/cli-in-process.ts';

// Issue 49: every place that shows a simulation's figures (the terminal summary, summary.json, the
// HTML report, `report` as text, JSON and CSV) shows the same figure for the same thing, for every
// policy the run compared. Replica run time is never rework; requeues of jobs and losses of
// replicas are counted apart; the batch ratios have the batch cost above the line everywhere.

/** Each command in-process (test/support/cli-in-process.ts); a command that fails fails the test with its words. */
const cli = async (args: string[]) => {
  const out = await cliInProcess(args);
  if (out.code !== 0) throw new Error(`gpu-fleet ${args.join(' ')} exited ${out.code}: ${out.stderr}`);
  return out.stdout;
};

interface Summary {
  policy: string;
  costMicroUsd: number;
  wholeBillMicroUsd: number;
  checkpointBytes: {
    bill: { totalMicroUsd: number };
    billByTeam: Record<string, { totalMicroUsd: number }>;
    chargedMicroUsd: number;
    chargedByTeam: Record<string, number>;
  };
  warmPoolMicroUsd?: number;
  onDemandCostMicroUsd: number;
  onDemandWholeBillMicroUsd: number;
  lowerBoundCostMicroUsd: number;
  spotFloorCostMicroUsd: number;
  requeues: number;
  moves: number;
  reworkGpuHours: number;
  costByTeamMicroUsd: Record<string, number>;
  services?: { id: string; costMicroUsd: number; replicaHours: number; replicasLost: number }[];
  baselines: Record<string, Summary>;
}

describe('the figures of one simulation agree wherever they are shown', () => {
  const dir = mkdtempSync(join(tmpdir(), 'gpu-fleet-agree-'));
  let terminal = '';
  let html = '';
  let summary: Summary;
  beforeAll(async () => {
    // Services, the three baselines, and a spot market busy enough to take machines (and replicas) back.
    terminal = await cli(['simulate', '--hours', '8', '--spot', 'rate:0.3', '--no-progress', '--out', dir]);
    html = readFileSync(join(dir, 'report.html'), 'utf8');
    summary = JSON.parse(readFileSync(join(dir, 'summary.json'), 'utf8')) as Summary;
  }, 180_000);

  const ratio = (a: number, b: number) => `${(a / b).toFixed(3)}×`;
  // The batch work: the GPU machines less the services' replicas and the warm pools kept for their fallback (docs/figures.md).
  const batch = (s: Summary) => s.costMicroUsd - (s.services ?? []).reduce((n, x) => n + x.costMicroUsd, 0) - (s.warmPoolMicroUsd ?? 0);

  it('the cost ratios of every policy: the terminal, the HTML report and summary.json', () => {
    const policies = [summary, ...Object.values(summary.baselines)];
    expect(policies.map((p) => p.policy)).toEqual(['gpu-fleet', 'on-demand', 'spot-greedy', 'cheapest-fit']);
    for (const p of policies) {
      // The headline on the whole bill (machines and checkpoint bytes) on both sides; the batch ratios on the machines.
      expect(p.wholeBillMicroUsd).toBe(p.costMicroUsd + p.checkpointBytes.bill.totalMicroUsd);
      const expected = [
        ratio(p.wholeBillMicroUsd, summary.onDemandWholeBillMicroUsd),
        ratio(batch(p), p.lowerBoundCostMicroUsd),
        ratio(batch(p), p.spotFloorCostMicroUsd),
      ];
      const row = new RegExp(`^${p.policy}\\s+\\$[\\d,.]+\\s+\\$[\\d,.]+\\s+([\\d.]+×)\\s+([\\d.]+×)\\s+([\\d.]+×)`, 'm').exec(terminal);
      expect({ policy: p.policy, terminal: row?.slice(1) }).toEqual({ policy: p.policy, terminal: expected });
      const cells = new RegExp(`<tr><td>${p.policy}</td><td>[^<]+</td><td>[^<]+</td><td>([^<]+)</td><td>([^<]+)</td><td>([^<]+)</td>`).exec(
        html,
      );
      expect({ policy: p.policy, html: cells?.slice(1) }).toEqual({ policy: p.policy, html: expected });
    }
  });

  it("every policy's services cost what their replica-hours held (no $0 for hours held)", () => {
    for (const p of [summary, ...Object.values(summary.baselines)])
      for (const svc of p.services ?? [])
        if (svc.replicaHours > 0)
          expect({ policy: p.policy, svc: svc.id, cost: svc.costMicroUsd > 0 }).toEqual({ policy: p.policy, svc: svc.id, cost: true });
  });

  it('requeues of jobs, replicas lost and rework: the terminal, the HTML report, summary.json and report (text, JSON, CSV)', async () => {
    const replicasLost = (summary.services ?? []).reduce((n, x) => n + x.replicasLost, 0);
    expect(summary.requeues).toBeGreaterThan(0);
    expect(replicasLost).toBeGreaterThan(0);
    const requeues = `${summary.requeues} (${summary.requeues - summary.moves} / ${summary.moves})`;
    expect(terminal).toMatch(new RegExp(`^requeues of jobs \\(interruptions / moves\\)\\s+${requeues.replace(/[()]/g, '\\$&')}$`, 'm'));
    expect(terminal).toMatch(new RegExp(`^service replicas lost \\(started again elsewhere\\)\\s+${replicasLost}$`, 'm'));
    expect(html).toContain(`<tr><th>requeues of jobs (interruptions / moves)</th><td>${requeues}</td></tr>`);
    expect(html).toContain(`<tr><th>service replicas lost (started again elsewhere)</th><td>${replicasLost}</td></tr>`);

    const report = JSON.parse(await cli(['report', '--sim', dir, '--json'])) as { totals: Record<string, number> };
    expect(report.totals).toMatchObject({
      requeues: summary.requeues,
      interruptions: summary.requeues - summary.moves,
      moves: summary.moves,
      replicaLosses: replicasLost,
    });
    expect(Math.round(report.totals.reworkGpuHours! * 100) / 100).toBe(summary.reworkGpuHours);
    const text = await cli(['report', '--sim', dir]);
    expect(text).toMatch(new RegExp(`requeues of jobs \\(interruptions / moves\\)\\s+${requeues.replace(/[()]/g, '\\$&')}`));
    expect(text).toMatch(new RegExp(`service replicas lost \\(started again elsewhere\\)\\s+${replicasLost}\\b`));

    const [header, ...lines] = (await cli(['report', '--sim', dir, '--csv'])).trim().split('\n');
    const cols = header!.split(',');
    const jobRows = lines.map((l) => l.split(',')).filter((r) => r[0] === 'job');
    const total = (name: string) => jobRows.reduce((n, r) => n + Number(r[cols.indexOf(name)] || 0), 0);
    expect({ requeues: total('requeues'), replicaLosses: total('replica_losses') }).toEqual({
      requeues: summary.requeues,
      replicaLosses: replicasLost,
    });
  });

  it("each team's spend and commitment: the terminal, summary.json, report (JSON) and budget (text and JSON)", async () => {
    const dollars = (micro: number) => `$${(micro / 1e6).toLocaleString('en-US', { minimumFractionDigits: 2, maximumFractionDigits: 2 })}`;
    const teams = Object.keys(summary.costByTeamMicroUsd).filter((t) => t !== '(idle)');
    expect(teams.length).toBeGreaterThan(1);
    const report = JSON.parse(await cli(['report', '--sim', dir, '--json'])) as {
      byTeam: { team: string; costMicroUsd: number; committedMicroUsd: number }[];
    };
    const budget = JSON.parse(await cli(['budget', '--sim', dir, '--json'])) as {
      team: string;
      spentMicroUsd: number;
      committedMicroUsd: number;
    }[];
    const budgetText = await cli(['budget', '--sim', dir]);
    for (const team of teams) {
      const spent = summary.costByTeamMicroUsd[team]!;
      expect(spent).toBeGreaterThan(0);
      const inReport = report.byTeam.find((r) => r.team === team);
      const inBudget = budget.find((b) => b.team === team);
      expect({ team, terminal: new RegExp(`^team ${team}\\s+(\\S+)$`, 'm').exec(terminal)?.[1] }).toEqual({
        team,
        terminal: dollars(spent),
      });
      // Of it, its checkpoint bytes, on a line of their own, as summary.json has them.
      const bytes = summary.checkpointBytes.chargedByTeam[team];
      if (bytes)
        expect({ team, bytes: new RegExp(`^team ${team}, of it checkpoint bytes\\s+(\\S+)$`, 'm').exec(terminal)?.[1] }).toEqual({
          team,
          bytes: dollars(bytes),
        });
      expect({ team, report: inReport?.costMicroUsd, budget: inBudget?.spentMicroUsd }).toEqual({ team, report: spent, budget: spent });
      expect({ team, committed: inBudget?.committedMicroUsd }).toEqual({ team, committed: inReport?.committedMicroUsd });
      expect(budgetText).toMatch(new RegExp(`^${team}\\s+\\S+\\s+${dollars(spent).replace('$', '\\$')}\\s`, 'm'));
    }
  });

  it('a report for a period with no activity shows none (no paid, no GPU-hours, no jobs, no projects)', async () => {
    const later = JSON.parse(await cli(['report', '--sim', dir, '--period', '2027-03', '--json'])) as {
      totals: Record<string, number>;
      jobs: unknown[];
      byProject: unknown[];
    };
    expect(Object.values(later.totals).every((v) => v === 0)).toBe(true);
    expect({ jobs: later.jobs, projects: later.byProject }).toEqual({ jobs: [], projects: [] });
  });
});
