import { describeAction, describeFailure } from '../../core/plan.ts';
import { plan } from '../../core/planner/planner.ts';
import { reconcile, type ReconcilePorts } from '../../core/reconcile/reconcile.ts';
import type { Policy, Snapshot } from '../../core/snapshot.ts';
import { openAwsPorts, type StackFlags } from '../aws.ts';
import { degradedName } from '../../core/ports.ts';

/** What one reconcile needs: the ports, the policy, and the problems the wiring found. */
export interface ReconcileTarget {
  readonly reconcile: ReconcilePorts;
  readonly config: { readonly policy: Policy };
  problems(): string[];
}

/** One node group as reconcile discovered it. */
export interface DiscoveredGroup {
  readonly cloud: string;
  readonly id: string;
  readonly capacityTypes: readonly string[];
  readonly instanceTypes: readonly string[];
  readonly zones: readonly string[];
  readonly min: number;
  readonly desired: number;
  readonly max: number;
  readonly mig: boolean;
  /** Its machines by state (pending, running, terminating-wait, …). */
  readonly machines: Readonly<Record<string, number>>;
}

/** Every group the snapshot holds, with its machines by state: what a dry run shows an operator checking discovery. */
export function discovered(snapshot: Snapshot): DiscoveredGroup[] {
  const uniq = (xs: readonly string[]) => [...new Set(xs)].sort();
  return [...snapshot.groups]
    .sort((a, b) => (a.id < b.id ? -1 : 1))
    .map((g) => {
      const machines: Record<string, number> = {};
      for (const n of snapshot.nodes) if (n.instance.groupId === g.id) machines[n.instance.state] = (machines[n.instance.state] ?? 0) + 1;
      return {
        cloud: g.cloud,
        id: g.id,
        capacityTypes: uniq(g.offerings.map((o) => o.capacityType)),
        instanceTypes: uniq(g.offerings.map((o) => o.instanceType)),
        zones: uniq(g.offerings.map((o) => o.zone)),
        min: g.minSize,
        desired: g.desiredCapacity,
        max: g.maxSize,
        mig: g.migEnabled === true,
        machines,
      };
    });
}

function groupLine(g: DiscoveredGroup): string {
  const machines = Object.entries(g.machines).map(([state, n]) => `${n} ${state}`);
  return `  ${g.cloud} ${g.id}: ${g.capacityTypes.join('/')}${g.mig ? ' MIG' : ''}, ${g.instanceTypes.join(', ') || 'no instance types'} in ${g.zones.join(', ') || 'no zones'}; min ${g.min}, desired ${g.desired}, max ${g.max}; machines: ${machines.join(', ') || 'none'}`;
}

export interface ReconcileFlags extends StackFlags {
  /** One turn: what the command always does (kept so `reconcile --once` goes on working). */
  readonly once?: boolean;
  readonly dryRun?: boolean;
  readonly json?: boolean;
}

/**
 * One reconcile against the AWS account (or AWS-compatible endpoint) in the environment: the
 * same code the reconcile Lambda runs. Prints the plan with every reason.
 */
export async function reconcileCommand(
  flags: ReconcileFlags,
  io: { stdout: NodeJS.WritableStream },
  open: (flags: StackFlags) => Promise<ReconcileTarget> = openAwsPorts,
): Promise<void> {
  // One turn, always (the loop itself runs in Lambda); --once says so and is kept.
  const ports = await open(flags);
  const out = await reconcile(ports.reconcile, {
    planner: plan,
    policy: ports.config.policy,
    dryRun: flags.dryRun ?? false,
    holder: `cli-${process.pid}`,
    stopwatch: () => performance.now(),
  });
  if (out.status === 'skipped') {
    io.stdout.write(flags.json ? `${JSON.stringify(out)}\n` : `skipped: ${out.reason}\n`);
    return;
  }
  const d = out.decision;
  if (flags.json) {
    io.stdout.write(
      `${JSON.stringify(
        {
          decision: d,
          lostJobsRequeued: out.lostJobsRequeued,
          resumed: out.resumed,
          problems: ports.problems(),
          discovered: discovered(out.snapshot),
          degraded: d.degraded ?? [],
        },
        null,
        2,
      )}\n`,
    );
    return;
  }
  const lines = [
    `${flags.dryRun ? 'dry run' : 'reconciled'} ${d.id}: ${d.inputs.pendingJobs} jobs waiting, ${d.inputs.activeJobs} running, ${d.inputs.nodes} machines in ${d.inputs.groups.length} groups (planned in ${Math.round(d.planMs)} ms)`,
    ...ports.problems().map((p) => `problem: ${p}`),
    ...(d.controlPlaneSilence ?? []).map(
      (z) =>
        `control-plane fault: ${z.silent} of ${z.running} machines in ${z.cloud} ${z.zone} fell silent together; nothing requeued for silence, none let go`,
    ),
    ...(d.degraded ?? []).map(
      (x) =>
        `degraded: ${degradedName(x)} is left out (not scaled; work only it could run waits) since ${new Date(x.sinceMs).toISOString()}; last error${x.code ? ` [${x.code}]` : ''}: ${x.error}`,
    ),
    '',
    `groups (${d.inputs.groups.length}):`,
    ...discovered(out.snapshot).map(groupLine),
    '',
    `actions (${d.plan.actions.length}${flags.dryRun ? ', none applied' : `, ${d.applied} applied`}):`,
    ...d.plan.actions.map((a) => `  ${describeAction(a)}`),
    '',
    `waiting (${d.plan.waiting.length}):`,
    ...d.plan.waiting.slice(0, 50).map((w) => `  ${w.jobId}: [${w.reason.code}] ${w.reason.message}`),
    ...(d.plan.waiting.length > 50 ? [`  … and ${d.plan.waiting.length - 50} more`] : []),
    ...(d.errors.length > 0 ? ['', 'errors:', ...d.errors.map((e) => `  ${describeFailure(e)}`)] : []),
  ];
  io.stdout.write(`${lines.join('\n')}\n`);
}
