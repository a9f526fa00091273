import { readFileSync } from 'node:fs';
import { plan } from '../../core/planner/planner.ts';
import { DEFAULT_POLICY } from '../../core/snapshot.ts';
import { DEFAULT_SIM_GROUPS, defaultTeamTags } from '../../cloud/sim/defaults.ts';
import { createSimEnvironment } from '../../cloud/sim/environment.ts';
import { DEFAULT_SIM_START_MS } from '../../cloud/sim/simulation.ts';
import { loadSimState, saveSimState } from '../../cloud/sim/state.ts';
import { lambdaContext } from '../../functions/context.ts';
import { createIntakeHandler, teamFromQueueArn } from '../../functions/intake.ts';
import { createInterruptionHandler } from '../../functions/interruption.ts';
import { observability } from '../../functions/observability.ts';
import { createReconcileHandler } from '../../functions/reconcile.ts';
import { messageOf, parseJson, UsageError } from '../../core/errors.ts';
import { openAwsPorts, type StackFlags } from '../aws.ts';

export const FUNCTIONS = ['intake', 'reconcile', 'interruption'] as const;
export type FunctionName = (typeof FUNCTIONS)[number];

export interface InvokeFlags extends StackFlags {
  readonly event?: string;
  readonly aws?: boolean;
  readonly sim?: string;
  /** The old name of `sim`. */
  readonly state?: string;
  readonly json?: boolean;
  readonly verbose?: boolean;
}

/**
 * Runs one Lambda handler on this machine: against the simulated cloud (default; with `--sim
 * DIR` the simulated world is loaded from and saved to that folder, so invocations build on each
 * other), or against the AWS account and endpoints in the environment (`--aws`).
 */
export async function invokeCommand(
  fn: string,
  flags: InvokeFlags,
  io: { stdout: NodeJS.WritableStream; stderr?: NodeJS.WritableStream },
): Promise<unknown> {
  if (!(FUNCTIONS as readonly string[]).includes(fn)) throw new UsageError(`function must be one of ${FUNCTIONS.join(', ')}, got "${fn}"`);
  if (flags.sim && flags.state) throw new UsageError('give --sim DIR only (--state is its old name)');
  if (flags.state)
    (io.stderr ?? process.stderr).write('gpu-fleet: --state is now --sim, as in every other command; --state goes in the next release\n');
  const simDir = flags.sim ?? flags.state;
  let event: unknown = {};
  if (flags.event) {
    try {
      event = parseJson(readFileSync(flags.event, 'utf8'));
    } catch (error) {
      throw new UsageError(
        `--event ${flags.event}: ${messageOf(error)} (give a JSON file: an SQS event for intake, an EventBridge event for interruption, {} or {"dryRun":true} for reconcile)`,
      );
    }
  } else if (fn !== 'reconcile') {
    throw new UsageError(`--event FILE is required for ${fn}`);
  }
  const obs = observability(`gpu-fleet-${fn}-local`);
  const context = lambdaContext(`gpu-fleet-${fn}`);
  const notes: string[] = [];
  let result: unknown;
  if (flags.aws) {
    const ports = await openAwsPorts(flags);
    const { config } = ports;
    result = await run(fn as FunctionName, event, context, flags.verbose ?? false, {
      intake: () =>
        createIntakeHandler({
          jobs: ports.stores.jobs,
          clock: ports.clock,
          deadLetter: ports.deadLetter,
          teamOfQueue: teamFromQueueArn(config.teamQueuePrefix),
          obs,
        }),
      reconcile: () => createReconcileHandler({ ports: ports.reconcile, queue: ports.queue, planner: plan, policy: config.policy, obs }),
      interruption: () =>
        createInterruptionHandler({
          ports: ports.interruption,
          policy: config.policy,
          trigger: ports.trigger,
          obs,
          lifecycleTimeoutSec: config.lifecycleTimeoutSec,
        }),
    });
  } else {
    const teams = ['nlp', 'vision', 'speech', 'recsys'];
    const env = createSimEnvironment({
      startMs: DEFAULT_SIM_START_MS,
      seed: 1,
      groups: DEFAULT_SIM_GROUPS,
      teams,
      teamTags: defaultTeamTags(teams),
    });
    if (simDir && loadSimState(env, simDir)) notes.push(`simulated world loaded from ${simDir}`);
    result = await run(fn as FunctionName, event, context, flags.verbose ?? false, {
      intake: () =>
        createIntakeHandler({
          jobs: env.jobs,
          clock: env.clock,
          deadLetter: { send: async (m) => void notes.push(`dead-lettered ${m.messageId}: ${m.reason}`) },
          teamOfQueue: teamFromQueueArn('gpu-fleet-team-'),
          obs,
          timeoutEarlyInMillis: 0,
        }),
      reconcile: () =>
        createReconcileHandler({ ports: env.ports, queue: env.queue, planner: plan, policy: DEFAULT_POLICY, obs, timeoutEarlyInMillis: 0 }),
      interruption: () =>
        createInterruptionHandler({
          ports: env.ports,
          policy: DEFAULT_POLICY,
          trigger: { reconcileSoon: async (why) => void notes.push(`a reconcile would be triggered now (${why})`) },
          obs,
          timeoutEarlyInMillis: 0,
        }),
    });
    if (simDir) {
      saveSimState(env, simDir);
      notes.push(`simulated world saved to ${simDir}`);
    }
  }
  io.stdout.write(
    flags.json
      ? `${JSON.stringify({ result, notes }, null, 2)}\n`
      : `${JSON.stringify(result, null, 2)}\n${notes.map((n) => `# ${n}`).join('\n')}${notes.length ? '\n' : ''}`,
  );
  return result;
}

/**
 * Runs a handler with Powertools' log and metric lines (which a Lambda writes to stdout) kept off
 * stdout, so it carries only the result: on stderr with `--verbose`, else not shown.
 */
async function run(
  fn: FunctionName,
  event: unknown,
  context: ReturnType<typeof lambdaContext>,
  verbose: boolean,
  make: Record<FunctionName, () => (event: never, context: ReturnType<typeof lambdaContext>) => Promise<unknown>>,
): Promise<unknown> {
  const handler = make[fn]();
  const write = process.stdout.write;
  process.stdout.write = (verbose ? process.stderr.write.bind(process.stderr) : () => true) as typeof process.stdout.write;
  try {
    return await handler(event as never, context);
  } finally {
    process.stdout.write = write;
  }
}
