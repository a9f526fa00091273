import { readFileSync } from 'node:fs';
import { Command, CommanderError, InvalidArgumentError } from 'commander';
import { collect, decimalNumber, listOf, oneOf, wholeNumber } from '../cloud/flags.ts';
import { FAULT_PROFILES, faultProfile } from '../cloud/sim/faults.ts';
import { SIM_POLICIES } from '../cloud/sim/policies.ts';
import { addAgentCommands } from '../agent/commands.ts';
import { GpuFleetError, isCloudError, messageOf, UsageError } from '../core/errors.ts';
import { S3_PATHS } from '../core/bytes.ts';
import { translateAwsError } from '../cloud/aws/errors.ts';

// Each command's code is loaded when the command runs, so a command pays only for what it uses
// (the simulator never loads an SDK client, the people commands never load the planner).

/** Builds the `gpu-fleet` command. Exported so tests can run it in-process as well as as a child process. */
export function buildProgram(
  io: { stdout: NodeJS.WritableStream; stderr: NodeJS.WritableStream } = { stdout: process.stdout, stderr: process.stderr },
): Command {
  const program = new Command('gpu-fleet')
    .description('Serverless control plane for GPU work on spot and on-demand capacity')
    .version(VERSION, '-V, --version', 'print the version of gpu-fleet')
    .configureOutput({ writeOut: (s) => io.stdout.write(s), writeErr: (s) => io.stderr.write(s) })
    .exitOverride();

  program
    .command('simulate')
    .description('Replay a GPU cluster trace through the real control loop on the simulated cloud and print a summary')
    .option(
      '--trace <file|name>',
      'trace CSV (job_id, submit_s, duration_s, gpus[, gpu_type, team, status]) or a shipped trace name (philly); default: the built-in Philly sample',
    )
    .option('--hours <n>', 'virtual hours to simulate at most (arrivals after this are left out)', decimalNumber('--hours', 0.1, 720), 72)
    .option('--policy <name>', SIM_POLICIES.join(' | '), oneOf('--policy', SIM_POLICIES), 'gpu-fleet')
    .option(
      '--seed <n>',
      'seed for the simulated cloud and spot market; the same seed gives the same run',
      wholeNumber('--seed', 0, 2 ** 31 - 1),
      1,
    )
    .option(
      '--spot <source>',
      'spot interruptions: traces (shipped availability traces) | none | rate:R (R per machine-hour)',
      spotSource,
      'traces',
    )
    .option('--max-jobs <n>', 'replay at most this many jobs (the earliest)', wholeNumber('--max-jobs', 1, 1_000_000))
    .option('--out <dir>', 'write report.html (charts), summary.json, jobs.json and decisions.json to this folder')
    .option('--no-baselines', 'run only the chosen policy, not the three baselines')
    .option(
      '--reservations',
      'add an On-Demand Capacity Reservation and a Capacity Block to the AWS groups, compared with gpu-fleet before it knew reservations and a reserved-first baseline',
    )
    .option(
      '--rightsizing <mode>',
      'the right-sizing scenario: the trace on A100 machines, its one-GPU jobs in recurring families, half of them oversized; their specs say gpu.rightsize suggest | auto',
      oneOf('--rightsizing', ['suggest', 'auto'] as const),
    )
    .option(
      '--no-services',
      'leave out the built-in services (a chat service on the Azure LLM trace, a recommendation service on an Alibaba app)',
    )
    .option(
      '--faults <profile>',
      `inject faults: ${Object.keys(FAULT_PROFILES).join(' | ')}; api-errors and cloud-outage take a cloud (api-errors:gcp) (invariants are checked every simulated minute)`,
      (value: string) => {
        try {
          faultProfile(value);
          return value;
        } catch (error) {
          throw new InvalidArgumentError(`--faults: ${messageOf(error)}`);
        }
      },
    )
    .option(
      '--clouds <list>',
      'clouds of the simulated fleet: aws (the built-in V100 groups in us-west-2), gcp (A100 zonal MIGs in us-central1/us-west1), or aws,gcp',
      listOf(oneOf('--clouds', ['aws', 'gcp'] as const)),
    )
    .option(
      '--s3-path <path>',
      `how the AWS machines reach the checkpoint bucket: ${S3_PATHS.join(' | ')} (default gateway-endpoint, what the stack's own VPC has)`,
      oneOf('--s3-path', S3_PATHS),
    )
    .option(
      '--nat-gateways <n>',
      "NAT gateways of the AWS fleet's VPC, one per zone from the first (default: one in every zone, as the stack creates)",
      wholeNumber('--nat-gateways', 1, 16),
    )
    .option(
      '--gcp-checkpoints <where>',
      "where GCP machines save: regional (a Cloud Storage bucket in each GCP region, the config's gcp.checkpointRoots; default) | s3 (the fleet's S3 bucket, internet egress both ways)",
      oneOf('--gcp-checkpoints', ['regional', 's3'] as const),
    )
    .option(
      '--upload-mibps <n>',
      "the simulated machines' checkpoint upload and download speed, MiB/s (a fault profile may lower it)",
      decimalNumber('--upload-mibps', 1, 100_000),
    )
    .option('--json', 'print the summary as JSON')
    .option('--no-progress', 'no progress bar')
    .addHelpText(
      'after',
      '\nExamples:\n  gpu-fleet simulate\n  gpu-fleet simulate --seed 7 --json\n  gpu-fleet simulate --out ./sim-report --hours 48\n  gpu-fleet simulate --trace ./my-trace.csv --policy cheapest-fit --no-baselines\n  gpu-fleet simulate --faults all --no-baselines\n  gpu-fleet simulate --clouds aws,gcp --faults cloud-outage:gcp --no-baselines',
    )
    .action(async (flags) => {
      const { simulateCommand } = await import('./commands/simulate.ts');
      await simulateCommand(flags, io);
    });

  program
    .command('reconcile')
    .description('Run one reconcile against the AWS account in the environment and print the plan with its reasons')
    .option('--once', 'one turn of the control loop: what this command always does (the loop itself runs in Lambda)')
    .option('--dry-run', 'plan without acting')
    .option('--stack <name>', 'the deployed stack whose tables and queues to use (default GPU_FLEET_STACK, else GpuFleet)')
    .option('--json', 'print the decision record as JSON')
    .addHelpText(
      'after',
      `${AWS_NOTE}\n\nExamples:\n  gpu-fleet reconcile --dry-run\n  AWS_REGION=us-west-2 gpu-fleet reconcile --stack MyFleet --json`,
    )
    .action(async (flags) => {
      const { reconcileCommand } = await import('./commands/reconcile.ts');
      await reconcileCommand(flags, io);
    });

  program
    .command('invoke')
    .description('Run one Lambda handler on this machine, against the simulated cloud or the AWS account in the environment')
    .argument('<function>', 'intake | reconcile | interruption')
    .option('--event <file>', 'the event as JSON (an SQS event for intake, an EventBridge event for interruption)')
    .option(
      '--sim <dir>',
      'load the simulated world from this folder (one `simulate --out DIR` wrote, or an earlier invoke) and save it back, so invocations build on each other',
    )
    .option('--state <dir>', 'the old name of --sim (works for one more release, with a notice)')
    .option('--aws', 'run against AWS instead of the simulated cloud')
    .option('--stack <name>', 'with --aws: the deployed stack (default GPU_FLEET_STACK, else GpuFleet)')
    .option('--json', 'print the result as JSON')
    .option('--verbose', "also print the handler's own log and metric lines (Powertools), on stderr")
    .addHelpText(
      'after',
      '\nExamples:\n  gpu-fleet invoke interruption --event test/fixtures/events/nth-ec2-spot-instance-interruption-warning.json\n  gpu-fleet invoke reconcile --sim ./world\n  gpu-fleet invoke intake --event sqs-event.json --aws',
    )
    .action(async (fn, flags) => {
      const { invokeCommand } = await import('./commands/invoke.ts');
      await invokeCommand(fn, flags, io);
    });

  const sim = (c: Command) =>
    c
      .option('--sim <dir>', 'act on a simulation saved by `gpu-fleet simulate --out DIR` instead of the AWS account in the environment')
      .option('--stack <name>', 'the deployed stack whose tables and queues to use (default GPU_FLEET_STACK, else GpuFleet)')
      .option('--json', 'print JSON for scripts');
  const awsNote = AWS_NOTE;

  sim(
    program
      .command('submit')
      .description("Validate a job spec and send it to a team's queue; prints the job id")
      .option('--team <team>', 'the team whose queue (and budget) the job goes to (required)')
      .option('--file <spec.json>', 'the job spec as JSON ("-" for standard input)')
      .option('--image <ref>', 'container image, e.g. pytorch/pytorch:2.3.0-cuda12.1')
      .argument('[argv...]', 'the program and its arguments, after "--": -- python train.py --epochs 3')
      .option('--gpus <n>', 'whole GPUs per node', undefined)
      .option('--gpu-model <model>', 'allowed GPU model (repeatable), e.g. A100-80GB', collect)
      .option('--mig <profile>', 'a MIG slice instead of whole GPUs, e.g. 1g.10gb')
      .option('--fraction <milli:MiB>', 'a time-sliced share of one GPU: thousandths and memory, e.g. 250:8000')
      .option('--nodes <n>', 'nodes of a gang (all start together)')
      .option('--priority <0-1000>', 'higher runs first (default 100)')
      .option('--no-interruptible', 'never run on spot or be preempted')
      .option('--checkpoint-interval <sec>', 'the job checkpoints every this many seconds (it can then move and resume)')
      .option('--runtime <sec>', 'expected run time, seconds')
      .option('--deadline <iso>', 'finish by, e.g. 2026-12-04T17:00:00Z')
      .option('--label <k=v>', 'label (repeatable), e.g. project=llm-eval', collect)
      .option('--env <NAME=value>', 'environment variable, kept in the job record: not for secrets (repeatable)', collect)
      .option(
        '--secret <NAME=ARN>',
        'environment variable from an SSM parameter or Secrets Manager secret under gpu-fleet/<team>/, resolved on the machine (repeatable)',
        collect,
      )
      .option('--name <name>', 'a name for people')
      .option('--token <token>', 'idempotency token: the same token makes one job however often it is sent (default: random)')
      .option('--dry-run', 'validate only; send nothing'),
  )
    .addHelpText(
      'after',
      `\nExamples:\n  gpu-fleet submit --team nlp --file job.json\n  gpu-fleet submit --team nlp --image pytorch/pytorch:2.3.0 --gpus 1 --checkpoint-interval 600 --label project=llm-eval -- python train.py --epochs 3\n  gpu-fleet submit --team vision --mig 1g.10gb --image nvcr.io/nvidia/pytorch:24.05-py3 --sim ./sim -- python infer.py\n${awsNote}`,
    )
    .action(async (argv: string[], flags) => {
      const { submitCommand } = await import('./commands/submit.ts');
      await submitCommand({ ...flags, ...(argv.length > 0 ? { command: argv } : {}) }, io);
    });

  sim(
    program
      .command('status')
      .description('Jobs by state with their waiting time, nodes by group with GPU use, and queue depth per team')
      .argument('[job-id]', 'one job in detail')
      .option('--team <team>', 'only this team')
      .option('--job <id>', 'the old spelling of [job-id] (works for one more release, with a notice)'),
  )
    .addHelpText(
      'after',
      `\nExamples:\n  gpu-fleet status\n  gpu-fleet status --team nlp --json\n  gpu-fleet status nlp.3f2a --sim ./sim\n${awsNote}`,
    )
    .action(async (jobId: string | undefined, flags) => {
      const { statusCommand } = await import('./commands/status.ts');
      await statusCommand(withJobId('status', jobId, flags, io), io);
    });

  sim(
    program
      .command('explain')
      .description('Why a job waits, or where and why it runs; why the fleet scaled (from the decision records)')
      .argument('[job-id]', 'the job to explain')
      .option('--job <id>', 'the old spelling of [job-id] (works for one more release, with a notice)')
      .option('--service <team.name>', 'a service: why it has its replicas, and where they are')
      .option(
        '--decision <latest|last-change|id>',
        'a reconcile decision: its actions and reasons (last-change: the newest that scaled or preempted)',
      ),
  )
    .addHelpText(
      'after',
      `\nExamples:\n  gpu-fleet explain nlp.3f2a\n  gpu-fleet explain --decision latest\n  gpu-fleet explain --decision last-change --sim ./sim --json\n  gpu-fleet explain --service nlp.chat --sim ./sim\n${awsNote}`,
    )
    .action(async (jobId: string | undefined, flags) => {
      const { explainCommand } = await import('./commands/explain.ts');
      await explainCommand(withJobId('explain', jobId, flags, io), io);
    });

  const budget = sim(
    program
      .command('budget')
      .description("Spend this period against budget, the forecast to the period's end, the state and any tag problems")
      .option('--team <team>', 'only this team (with set: the team whose budget to set)'),
  )
    .addHelpText(
      'after',
      `\nExamples:\n  gpu-fleet budget\n  gpu-fleet budget --team nlp --json\n  gpu-fleet budget set --team nlp --usd 30000 --action spot-only\n${awsNote}`,
    )
    .action(async (flags) => {
      const { budgetCommand } = await import('./commands/budget.ts');
      await budgetCommand(flags, io);
    });
  budget
    .command('set')
    .description(
      "Set a team's budget: gpu-fleet:* tags on its queue (the admin role may; a team's role only on its own queue, where the fleet config lets it)",
    )
    .option('--usd <amount>', 'the budget per period, in dollars (e.g. 30000 or 2500.50)')
    .option('--period <period>', 'monthly, weekly or daily')
    .option('--action <action>', 'what happens when it is spent: alert, spot-only, hold or stop')
    .option('--alert-at <pcts>', 'alert thresholds, whole percentages separated by "/" (e.g. 50/80/100)')
    .option('--max-gpus <n>', 'most GPUs the team holds at once')
    .option('--weight <n>', "the team's share under contention, relative to the others")
    .addHelpText(
      'after',
      `\nExamples:\n  gpu-fleet budget --team nlp set --usd 30000\n  gpu-fleet budget set --team vision --action hold --sim ./sim\n${awsNote}`,
    )
    .action(async (flags, cmd: Command) => {
      const { budgetSetCommand } = await import('./commands/budget.ts');
      // --team, --sim, --stack and --json are the budget command's options, given before or after "set".
      await budgetSetCommand({ ...cmd.optsWithGlobals(), ...flags }, io);
    });

  sim(
    program
      .command('report')
      .description(
        'FinOps: cost by team, project and job; paid against held; idle capacity and idle GPUs; spot savings; interruptions and rework; the trend by day',
      )
      .option('--team <team>', 'only this team')
      .option('--period <period>', 'a month (2026-11), a day (2026-11-30) or the last N days (last-7d); default: this month')
      .option('--out <dir>', 'also write finops.html (charts), finops.csv and finops.json there')
      .option('--csv', 'print CSV (one row per team, day, project and job)')
      .option(
        '--low-util <pct>',
        'GPU use under this marks a running job as wasteful (default 30)',
        decimalNumber('--low-util', 1, 100, ' percent'),
      ),
  )
    .addHelpText(
      'after',
      `\nExamples:\n  gpu-fleet report --period 2026-11\n  gpu-fleet report --team nlp --period last-7d --csv > nlp.csv\n  gpu-fleet report --sim ./sim --out ./finops\n${awsNote}`,
    )
    .action(async (flags) => {
      const { reportCommand } = await import('./commands/report.ts');
      await reportCommand(flags, io);
    });

  sim(
    program
      .command('logs')
      .description(
        "What a job's attempts wrote (stdout and stderr), attempt by attempt; kept in CloudWatch Logs whatever became of the machines",
      )
      .argument('<job-id>', 'the job')
      .option('--attempt <n>', 'only this attempt', wholeNumber('--attempt', 1, 1_000_000))
      .option('--follow', 'keep printing new lines until the job has ended')
      .option('--since <when>', 'only lines since a duration ago (30s, 10m, 2h, 1d) or a date (2026-11-30T12:00:00Z)'),
  )
    .addHelpText(
      'after',
      `\nExamples:\n  gpu-fleet logs nlp.3f2a\n  gpu-fleet logs nlp.3f2a --attempt 2 --since 10m\n  gpu-fleet logs nlp.3f2a --follow\n  gpu-fleet logs nlp.3f2a --sim ./sim --json\n${awsNote}`,
    )
    .action(async (id, flags) => {
      const { logsCommand } = await import('./commands/logs.ts');
      await logsCommand(id, flags, io);
    });

  sim(
    program
      .command('cancel')
      .description(
        'Stop a job (at once if it waits; a running job is checkpointed first if it can be, then stopped by its agent), or remove a service (its replicas drain, then stop)',
      )
      .argument('<id>', 'the job, or the service (TEAM.NAME)'),
  )
    .addHelpText(
      'after',
      `\nExamples:\n  gpu-fleet cancel nlp.3f2a\n  gpu-fleet cancel nlp.3f2a --sim ./sim --json\n  gpu-fleet cancel nlp.chat --sim ./sim\n${awsNote}`,
    )
    .action(async (id, flags) => {
      const { cancelCommand } = await import('./commands/cancel.ts');
      await cancelCommand(id, flags, io);
    });

  program
    .command('gcp-startup-script')
    .description('Print the startup script of a GCE instance template for the fleet: the walls every machine gets before its agent')
    .option(
      '--prometheus-port <port>',
      "the agents' /metrics port (the config's prometheus.port), left to the firewall's scrapers",
      wholeNumber('--prometheus-port', 1024, 65535, ''),
    )
    .option('--open-port <port...>', "a replica's port the load balancer reaches (the firewall decides who), one per service")
    .option('--agent-bundle <gs-url>', 'also install the agent: its bundle in Cloud Storage (gs://…/gpu-fleet-agent.mjs)')
    .option('--api-url <url>', "the agent API's URL for GCP machines (the stack's GceAgentApiUrl output)")
    .option('--audience <audience>', "the audience of the machines' identity tokens (the stack's GceAgentApiAudience output)")
    .option('--region <region>', "the control plane's AWS region")
    .option('--checkpoint-bucket <name>', "the fleet's S3 checkpoint bucket (GPU_FLEET_CHECKPOINT_BUCKET)")
    .option(
      '--checkpoint-store <gs-root>',
      "this region's Cloud Storage checkpoint root (gs://bucket/prefix/, the config's gcp.checkpointRoots)",
    )
    .addHelpText(
      'after',
      "\nThe script installs the same walls as an AWS machine's boot (metadata server, jobs' network, the machine's own ports), the job folders' nosuid,nodev mount and the engine's defaults, at every start. With --agent-bundle (and the five options after it), it also installs the agent, which calls the agent API with the machine's instance identity token: no AWS key goes on the disk.\n\nExamples:\n  gpu-fleet gcp-startup-script > startup.sh\n  gpu-fleet gcp-startup-script --prometheus-port 9400 --open-port 8000\n  gpu-fleet gcp-startup-script --agent-bundle gs://ml-prod-fleet/agent/gpu-fleet-agent.mjs --api-url https://abc.lambda-url.us-west-2.on.aws/ --audience gpu-fleet/GpuFleet/agent-api --region us-west-2 --checkpoint-bucket gpu-fleet-checkpoints-123 --checkpoint-store gs://ml-prod-fleet-us-central1/checkpoints/",
    )
    .action(async (flags) => {
      const { gcpStartupScriptCommand } = await import('./commands/gcp-startup-script.ts');
      await gcpStartupScriptCommand(flags, io);
    });

  addAgentCommands(program, io, () => import('../agent/cli.ts'));
  program.addHelpText('after', TOP_LEVEL_HELP);
  usageAfterErrors(program, []);
  return program;
}

/**
 * A job is named the same way in every command: its id, positional (`status ID`, `explain ID`,
 * `logs ID`, `cancel ID`). `--job ID`, the old spelling of `status` and `explain`, still works for
 * one release, with a notice.
 */
function withJobId<F extends { job?: string }>(
  command: string,
  jobId: string | undefined,
  flags: F,
  io: { stderr: NodeJS.WritableStream },
): F {
  if (flags.job !== undefined && jobId !== undefined && flags.job !== jobId)
    throw new UsageError(`give the job once: ${command} ${jobId} (--job is the old spelling)`);
  if (flags.job !== undefined)
    io.stderr.write(`gpu-fleet: ${command} --job ID is now ${command} ID, as in logs and cancel; --job goes in the next release\n`);
  const job = jobId ?? flags.job;
  return job === undefined ? flags : { ...flags, job };
}

/** After a mistake in the options, the command's usage line and where its options are listed, not the whole help. */
function usageAfterErrors(cmd: Command, path: readonly string[]): void {
  const name = [...path, cmd.name()].join(' ');
  cmd.showHelpAfterError(`usage: ${name} ${cmd.usage()}\n(${name} --help lists the options)`);
  for (const sub of cmd.commands) usageAfterErrors(sub, [...path, cmd.name()]);
}

/** After the command list: a first look, and what the exit codes mean (the same for every command). */
const TOP_LEVEL_HELP = `
Examples:
  gpu-fleet simulate                            replay the built-in trace on the simulated cloud (npm start)
  gpu-fleet simulate --hours 24 --out ./sim     ... and keep the result for the commands below
  gpu-fleet status --sim ./sim                  jobs, nodes, services and queues of that simulation
  gpu-fleet explain nlp.3f2a --sim ./sim        why a job waits, or where and why it runs
  gpu-fleet submit --team nlp --file job.json   send a job to the deployed fleet (AWS credentials in the environment)
  gpu-fleet reconcile --dry-run                 plan once against the deployed fleet, acting on nothing

Exit codes (every command):
  0  done
  1  the world refused or failed (credentials, a missing stack or table, a cloud error, no GPU driver): one line on stderr
  2  a mistake in the command (an option, an argument, a file it names): what was wrong, then the command's usage line
`;

/** gpu-fleet's version, as package.json says. */
const VERSION = (JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string }).version;

/** How the commands that act on AWS find the fleet, for their help. */
const AWS_NOTE =
  "\nAgainst AWS it reads the names of the tables, queues and bucket from the deployed stack's outputs (--stack NAME, or\nGPU_FLEET_STACK, default GpuFleet) with the standard AWS configuration (AWS_REGION, the credential chain,\nAWS_ENDPOINT_URL[_<SERVICE>]); GPU_FLEET_* variables override what the stack says (docs/operations.md).";

/** `traces`, `none` or `rate:R` (spot interruptions per machine-hour). */
function spotSource(value: string): string {
  if (value === 'traces' || value === 'none' || /^rate:\d+(?:\.\d+)?$/.test(value)) return value;
  throw new InvalidArgumentError(
    `--spot must be "traces" (the shipped availability traces), "none" (no interruptions) or "rate:R" (R interruptions per machine-hour), got "${value}"`,
  );
}

/** One line for a failure that is not a bug: what is missing or refused, and what to do. */
export function failureLine(error: unknown): string | undefined {
  const sdk = (error as { $metadata?: unknown; name?: string } | undefined) ?? {};
  const known =
    error instanceof GpuFleetError
      ? error
      : sdk.$metadata !== undefined || sdk.name === 'CredentialsProviderError'
        ? translateAwsError(error, { operation: 'the command' })
        : undefined;
  if (!known) return undefined;
  const line = known.message.replace(/\s*\n\s*-?\s*/g, ' ');
  if (isCloudError(known, 'access-denied')) {
    return `${line}; check the AWS credentials (AWS_PROFILE, aws configure, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY) and that they may use the fleet's tables and queues`;
  }
  return line;
}

export async function main(
  argv: readonly string[],
  io: { stdout: NodeJS.WritableStream; stderr: NodeJS.WritableStream } = { stdout: process.stdout, stderr: process.stderr },
): Promise<number> {
  const program = buildProgram(io);
  try {
    await program.parseAsync(argv as string[], { from: 'user' });
    return 0;
  } catch (error) {
    if (error instanceof CommanderError) {
      return error.exitCode === 0 ? 0 : 2;
    }
    if (error instanceof UsageError) {
      io.stderr.write(`gpu-fleet: ${error.message}\n`);
      return 2;
    }
    const failure = failureLine(error);
    // A failure of the world (credentials, a missing stack or table, a config) is one line; a bug keeps its stack.
    io.stderr.write(`gpu-fleet: ${failure ?? ((error instanceof Error && error.stack) || messageOf(error))}\n`);
    return 1;
  }
}

/**
 * A reader that stops early (`gpu-fleet logs … | head -1`) closes the pipe: the rest of the
 * output is not wanted, which is no failure. The command ends at once with 0, as `cat` does under
 * `head`, instead of an unhandled EPIPE and its stack.
 */
export function endQuietlyOnClosedPipe(stream: NodeJS.WritableStream, exit: (code: number) => void = (code) => process.exit(code)): void {
  stream.on('error', (error: NodeJS.ErrnoException) => {
    if (error.code === 'EPIPE') exit(0);
    else throw error;
  });
}

const invokedDirectly = process.argv[1] !== undefined && import.meta.url === new URL(`file://${process.argv[1]}`).href;
if (invokedDirectly || process.env.GPU_FLEET_CLI === '1') {
  endQuietlyOnClosedPipe(process.stdout);
  endQuietlyOnClosedPipe(process.stderr);
  process.exitCode = await main(process.argv.slice(2));
}
