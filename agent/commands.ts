import type { Command } from 'commander';
import type * as AgentCliModule from './cli.ts';
import { decimalNumber, oneOf, wholeNumber } from '../cloud/flags.ts';

/**
 * The `agent` commands, shared by the gpu-fleet CLI and the agent's own bundle (agent/main.ts,
 * which the node groups' user data runs). The code runs only when a command does.
 */
export type AgentCli = Pick<
  typeof AgentCliModule,
  'agentInspectCommand' | 'agentRunCommand' | 'agentMetricsCommand' | 'agentJobsSliceCommand' | 'agentWatchdogCommand'
>;

/**
 * `load` gives the commands' code: the gpu-fleet CLI imports it when an agent command runs (so
 * other commands never load it); the agent's own entry passes it in statically, because a module
 * a bundle imports lazily cannot be tree-shaken (that kept 850 KiB of unused EC2 shapes in the
 * agent bundle).
 */
export function addAgentCommands(
  program: Command,
  io: { stdout: NodeJS.WritableStream; stderr: NodeJS.WritableStream },
  load: () => Promise<AgentCli>,
): void {
  const agent = program
    .command('agent')
    .description("The node agent that runs on every GPU machine (started by the node group's user data)");
  const metadataOptions = (c: Command) =>
    c
      .option('--nvidia-smi <path>', 'the nvidia-smi program', 'nvidia-smi')
      .option('--imds-url <url>', 'EC2 instance metadata base URL (or GPU_FLEET_AWS_IMDS_URL)')
      .option('--gce-metadata-url <url>', 'GCE metadata server base URL (or GPU_FLEET_GCE_METADATA_URL)')
      .option(
        '--metadata-timeout-ms <ms>',
        'how long to wait for a metadata server',
        wholeNumber('--metadata-timeout-ms', 100, 60_000, ' ms'),
        2000,
      );
  metadataOptions(agent.command('inspect').description('Print what the agent finds on this machine: identity, GPUs, MIG devices, health'))
    .option('--json', 'print as JSON')
    .addHelpText(
      'after',
      '\nWorks off-cloud too: a missing metadata server or nvidia-smi is reported, not fatal.\n\nExamples:\n  gpu-fleet agent inspect\n  gpu-fleet agent inspect --json',
    )
    .action(async (flags) => {
      const { agentInspectCommand } = await load();
      await agentInspectCommand(flags, io);
    });
  metadataOptions(
    agent
      .command('metrics')
      .description("Print one scrape of this machine's GPUs in the DCGM exporter's names (Prometheus text format) and exit"),
  )
    .addHelpText(
      'after',
      "\nWorks off-cloud too (the machine is then named by its hostname). The running agent serves the same at /metrics with --prometheus-port, with each GPU's job, team and attempt.\n\nExamples:\n  gpu-fleet agent metrics\n  gpu-fleet agent metrics | grep DCGM_FI_DEV_GPU_UTIL",
    )
    .action(async (flags) => {
      const { agentMetricsCommand } = await load();
      await agentMetricsCommand(flags, io);
    });
  agent
    .command('jobs-slice')
    .description("Print the systemd slice every job's container runs under: this machine less the agent's reserve")
    .option('--nvidia-smi <path>', 'the nvidia-smi program (its GPUs set the processes jobs may have)', 'nvidia-smi')
    .option('--memory-mib <n>', "the machine's memory (default what the system reports)", wholeNumber('--memory-mib', 256, 1 << 30, ' MiB'))
    .option('--cpus <n>', "the machine's CPUs (default what the system reports)", wholeNumber('--cpus', 1, 4096, ''))
    .addHelpText(
      'after',
      "\nThe node's setup writes it to /etc/systemd/system/gpu-fleet-jobs.slice; each container gets its share of it by the GPUs it holds.\n\nExamples:\n  gpu-fleet agent jobs-slice\n  gpu-fleet agent jobs-slice --memory-mib 1966080 --cpus 192",
    )
    .action(async (flags) => {
      const { agentJobsSliceCommand } = await load();
      await agentJobsSliceCommand(flags, io);
    });
  agent
    .command('watchdog')
    .description("One look of the machine's watchdog: stop every job container once the agent's lease is past its lease and fence")
    .option('--lease-file <path>', 'the lease file the agent writes at each renewal', '/var/lib/gpu-fleet/lease.json')
    .option(
      '--stop-grace-sec <n>',
      'seconds each container gets between SIGTERM and SIGKILL',
      wholeNumber('--stop-grace-sec', 1, 3600, ' s'),
      30,
    )
    .option('--docker <path>', 'the docker CLI', 'docker')
    .addHelpText(
      'after',
      "\nRun by root every 15 s (gpu-fleet-watchdog.timer). A dead, hung or cut-off agent cannot stop its jobs; this does, by gpu-fleet's container label only, before the control plane may run their attempts elsewhere. Prints what it decided and what it stopped.\n\nExamples:\n  gpu-fleet agent watchdog\n  gpu-fleet agent watchdog --lease-file /var/lib/gpu-fleet/lease.json --stop-grace-sec 30",
    )
    .action(async (flags) => {
      const { agentWatchdogCommand } = await load();
      await agentWatchdogCommand(flags, io);
    });
  metadataOptions(
    agent.command('run').description('Run the agent: heartbeats, placed jobs, checkpoints, local interruption notices, GPU metrics'),
  )
    .option('--group <name>', 'the node group, when the instance metadata does not carry it')
    .option('--work-dir <dir>', 'where job folders and logs live (or GPU_FLEET_AGENT_DIR)', undefined)
    .option(
      '--runner <kind>',
      'docker (containers, docker run --gpus) | process (plain processes)',
      oneOf('--runner', ['docker', 'process'] as const),
      'docker',
    )
    .option(
      '--checkpoint-store <uri>',
      "s3://bucket/ (default: GPU_FLEET_CHECKPOINT_BUCKET), gs://bucket/prefix/ (a GCP machine: its region's bucket) or file:///path/",
    )
    .option('--api-url <url>', 'the agent API (default: GPU_FLEET_AGENT_API_URL); without one, the tables are written directly')
    .option(
      '--sudo-helper <path>',
      'not running as root: run nvidia-smi mig through sudo, and remove job folders with this root-owned helper (through sudo)',
    )
    .option(
      '--peers-helper <path>',
      "let each gang's other machines (and each replica's clients) reach this one, attempt by attempt, with this root-owned helper (through sudo)",
    )
    .option(
      '--disk-helper <path>',
      "give each job's folder a disk of its own, its share of the machine's, with this root-owned helper (through sudo)",
    )
    .option('--instance-id <id>', 'off-cloud only: the id to register under')
    .option('--no-metrics', 'do not publish GPU metrics to CloudWatch')
    .option(
      '--prometheus-port <port>',
      "serve /metrics on this port in the DCGM exporter's names (or GPU_FLEET_PROMETHEUS_PORT); off by default",
      wholeNumber('--prometheus-port', 1024, 65_535),
    )
    .option(
      '--dcgm-exporter-url <url>',
      "the node's own dcgm-exporter (e.g. http://localhost:9400/metrics; or GPU_FLEET_DCGM_EXPORTER_URL), read at each heartbeat for the utilisation of MIG slices, which nvidia-smi does not report",
    )
    .option('--no-mig-create', 'use only existing MIG instances; never create or destroy them')
    .option('--heartbeat-sec <s>', 'seconds between heartbeats (and work-list reads)', decimalNumber('--heartbeat-sec', 0.1, 300, ' s'), 15)
    .option(
      '--notice-sec <s>',
      'seconds between looks at the interruption notices and checkpoint markers',
      decimalNumber('--notice-sec', 0.1, 60, ' s'),
      5,
    )
    .addHelpText(
      'after',
      '\nUses the standard AWS configuration; on a fleet machine, the agent API (GPU_FLEET_AGENT_API_URL), elsewhere the GPU_FLEET_* table variables (docs/operations.md).\n\nExamples:\n  gpu-fleet agent run\n  gpu-fleet agent run --runner process --work-dir /tmp/agent --instance-id dev-box --group dev',
    )
    .action(async (flags) => {
      const { agentRunCommand } = await load();
      await agentRunCommand(flags);
    });
}
