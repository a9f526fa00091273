import { environmentWithStack } from '../cloud/aws/stack-outputs.ts';
import { fleetConfigFromEnv, type Environment } from '../cloud/env.ts';
import { fleetPorts, type FleetPorts, type WiringOptions } from '../cloud/wiring.ts';

export interface StackFlags {
  /** The deployed stack to read names from (default GPU_FLEET_STACK, else GpuFleet). */
  readonly stack?: string;
}

/**
 * The ports of the fleet a command acts on: the deployed stack's outputs (found by its name),
 * with the GPU_FLEET_* variables set by hand over them, through the one wiring every entry uses.
 */
export async function openAwsPorts(
  flags: StackFlags,
  env: Environment = process.env,
  options: WiringOptions = {},
): Promise<FleetPorts & { stackName?: string }> {
  const resolved = await environmentWithStack({ env, ...(flags.stack ? { stack: flags.stack } : {}) });
  const ports = await fleetPorts(fleetConfigFromEnv(resolved.env), options);
  return resolved.stack ? { ...ports, stackName: resolved.stack.name } : ports;
}
