import { Command, CommanderError } from 'commander';
import { addAgentCommands } from './agent-commands.ts';
import { UsageError } from './errors.ts';

// Each command's code is loaded when the command runs. Beyond start-up time this matters for
// the simulator: the Lambda tracer (X-Ray SDK) turns on async-hook tracking for every promise
// in the process when it is imported, which slowed `npm start` by about a third.

/** Builds the `gpu-fleet` command. Exported so tests can run it in-process as well as as a child process. */
export function buildProgram(io = { stdout: process.stdout, stderr: process.stderr }): Command {
  const program = new Command('gpu-fleet')
    .description('Serverless control plane for GPU work on spot and on-demand capacity')
    .showHelpAfterError()
    .configureOutput({ writeOut: (s) => io.stdout.write(s), writeErr: (s) => io.stderr.write(s) })
    .exitOverride();

  program
    .command('simulate')
    .description('Replay a GPU cluster trace through the real control loop on the simulated cloud and print a summary')
    .option('--trace <file|name>', 'trace CSV (job_id, submit_s, duration_s, gpus[, gpu_type, team, status]) or a shipped trace name (philly); default: the built-in Philly sample')
    .option('--hours <n>', 'virtual hours to simulate at most (arrivals after this are left out)', '72')
    .option('--policy <name>', 'gpu-fleet | on-demand | spot-greedy | cheapest-fit', 'gpu-fleet')
    .option('--seed <n>', 'seed for the simulated cloud and spot market; the same seed gives the same run', '1')
    .option('--spot <source>', 'spot interruptions: traces (shipped availability traces) | none | rate:R (R per machine-hour)', 'traces')
    .option('--max-jobs <n>', 'replay at most this many jobs (the earliest)')
    .option('--out <dir>', 'write report.html (charts), summary.json, jobs.json and decisions.json to this folder')
    .option('--no-baselines', 'run only the chosen policy, not the three baselines')
    .option('--json', 'print the summary as JSON')
    .option('--no-progress', 'no progress bar')
    .addHelpText('after', '\nExamples:\n  gpu-fleet simulate\n  gpu-fleet simulate --seed 7 --json\n  gpu-fleet simulate --out ./sim-report --hours 48\n  gpu-fleet simulate --trace ./my-trace.csv --policy cheapest-fit --no-baselines')
    .action(async (flags) => {
      const { simulateCommand } = await import('./simulate.ts');
      await simulateCommand(flags, io);
    });

  program
    .command('reconcile')
    .description('Run one reconcile against the AWS account in the environment and print the plan with its reasons')
    .option('--once', 'run one turn of the control loop (required)')
    .option('--dry-run', 'plan without acting')
    .option('--json', 'print the decision record as JSON')
    .addHelpText('after', '\nUses the standard AWS configuration (AWS_REGION, the credential chain, AWS_ENDPOINT_URL[_<SERVICE>]) and\nGPU_FLEET_* variables for the tables and queues (see README).\n\nExamples:\n  gpu-fleet reconcile --once --dry-run\n  AWS_REGION=us-west-2 gpu-fleet reconcile --once --json')
    .action(async (flags) => {
      const { reconcileCommand } = await import('./reconcile.ts');
      await reconcileCommand(flags, io);
    });

  program
    .command('invoke')
    .description('Run one Lambda handler on this machine, against the simulated cloud or the AWS account in the environment')
    .argument('<function>', 'intake | reconcile | interruption')
    .option('--event <file>', 'the event as JSON (an SQS event for intake, an EventBridge event for interruption)')
    .option('--state <dir>', 'load the simulated world from this folder and save it back (so invocations build on each other)')
    .option('--aws', 'run against AWS instead of the simulated cloud')
    .option('--json', 'print the result as JSON')
    .addHelpText('after', '\nExamples:\n  gpu-fleet invoke interruption --event test/fixtures/events/nth-ec2-spot-instance-interruption-warning.json\n  gpu-fleet invoke reconcile --state ./world\n  gpu-fleet invoke intake --event sqs-event.json --aws')
    .action(async (fn, flags) => {
      const { invokeCommand } = await import('./invoke.ts');
      await invokeCommand(fn, flags, io);
    });

  addAgentCommands(program, io);

  return program;
}

export async function main(argv: readonly string[]): Promise<number> {
  const program = buildProgram();
  try {
    await program.parseAsync(argv as string[], { from: 'user' });
    return 0;
  } catch (error) {
    if (error instanceof CommanderError) {
      return error.exitCode === 0 ? 0 : 2;
    }
    if (error instanceof UsageError) {
      process.stderr.write(`gpu-fleet: ${error.message}\n`);
      return 2;
    }
    process.stderr.write(`gpu-fleet: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
    return 1;
  }
}

const invokedDirectly = process.argv[1] !== undefined && import.meta.url === new URL(`file://${process.argv[1]}`).href;
if (invokedDirectly || process.env.GPU_FLEET_CLI === '1') {
  process.exitCode = await main(process.argv.slice(2));
}
