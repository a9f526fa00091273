// The node agent's own entry point: what the node groups' user data runs, bundled into one file
// (infra/agent-bundle.ts). It takes the same `agent …` commands as the gpu-fleet CLI.
import { Command, CommanderError } from 'commander';
import { agentInspectCommand, agentJobsSliceCommand, agentMetricsCommand, agentRunCommand, agentWatchdogCommand } from './cli.ts';
import { addAgentCommands } from './commands.ts';
import { messageOf, UsageError } from '../core/errors.ts';

const program = new Command('gpu-fleet').description('gpu-fleet node agent').showHelpAfterError().exitOverride();
addAgentCommands(program, { stdout: process.stdout, stderr: process.stderr }, async () => ({
  agentInspectCommand,
  agentRunCommand,
  agentMetricsCommand,
  agentJobsSliceCommand,
  agentWatchdogCommand,
}));
try {
  await program.parseAsync(process.argv);
} catch (error) {
  if (error instanceof CommanderError) process.exitCode = error.exitCode === 0 ? 0 : 2;
  else if (error instanceof UsageError) {
    process.stderr.write(`gpu-fleet: ${error.message}\n`);
    process.exitCode = 2;
  } else {
    process.stderr.write(`gpu-fleet: ${(error instanceof Error && error.stack) || messageOf(error)}\n`);
    process.exitCode = 1;
  }
}
