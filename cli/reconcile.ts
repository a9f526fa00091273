import { describeAction, describeFailure } from '../core/plan.ts';
import { plan } from '../core/planner/planner.ts';
import { reconcile } from '../core/services/reconcile.ts';
import { openAwsPorts, type StackFlags } from './aws.ts';
import { UsageError } from '../core/errors.ts';

export interface ReconcileFlags extends StackFlags {
  readonly once?: boolean;
  readonly dryRun?: boolean;
  readonly json?: boolean;
}

/**
 * One reconcile against the AWS account (or AWS-compatible endpoint) in the environment: the
 * same code the reconcile Lambda runs. Prints the plan with every reason.
 */
export async function reconcileCommand(flags: ReconcileFlags, io: { stdout: NodeJS.WritableStream }): Promise<void> {
  if (!flags.once)
    throw new UsageError(
      'give --once: gpu-fleet runs the control loop in Lambda; this command runs one turn of it (add --dry-run to plan without acting)',
    );
  const ports = await openAwsPorts(flags);
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
      `${JSON.stringify({ decision: d, lostJobsRequeued: out.lostJobsRequeued, resumed: out.resumed, problems: ports.problems() }, null, 2)}\n`,
    );
    return;
  }
  const lines = [
    `${flags.dryRun ? 'dry run' : 'reconciled'} ${d.id}: ${d.inputs.pendingJobs} jobs waiting, ${d.inputs.activeJobs} running, ${d.inputs.nodes} machines in ${d.inputs.groups.length} groups (planned in ${Math.round(d.planMs)} ms)`,
    ...ports.problems().map((p) => `problem: ${p}`),
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
