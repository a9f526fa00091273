import type { GceAgentSetup } from '../../infra/node-setup.ts';
import { UsageError } from '../../core/errors.ts';
import type { Io } from './shared.ts';

export interface GcpStartupScriptFlags {
  readonly prometheusPort?: number;
  readonly openPort?: string[];
  readonly agentBundle?: string;
  readonly apiUrl?: string;
  readonly audience?: string;
  readonly region?: string;
  readonly checkpointBucket?: string;
  readonly checkpointStore?: string;
}

/** Prints a GCE instance template's startup script: the walls, and the agent when its six options are all given. */
export async function gcpStartupScriptCommand(flags: GcpStartupScriptFlags, io: Io): Promise<void> {
  const { gceStartupScript } = await import('../../infra/node-setup.ts');
  const openPorts = (flags.openPort ?? []).map((p) => {
    const n = Number(p);
    if (!Number.isInteger(n) || n < 1 || n > 65535) throw new UsageError(`--open-port must be a port from 1 to 65535; got "${p}"`);
    return n;
  });
  const agentFlags = {
    apiUrl: flags.apiUrl,
    audience: flags.audience,
    region: flags.region,
    checkpointBucket: flags.checkpointBucket,
    checkpointStore: flags.checkpointStore,
  };
  let agent: GceAgentSetup | undefined;
  if (flags.agentBundle !== undefined || Object.values(agentFlags).some((v) => v !== undefined)) {
    const missing = Object.entries({ agentBundle: flags.agentBundle, ...agentFlags })
      .filter(([, v]) => v === undefined)
      .map(([k]) => `--${k.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)}`);
    if (missing.length > 0) throw new UsageError(`to install the agent, also give ${missing.join(', ')}`);
    if (!/^gs:\/\/[a-z0-9][a-z0-9._-]{1,220}\/\S+$/.test(flags.agentBundle!))
      throw new UsageError(`--agent-bundle must be gs://bucket/path; got "${flags.agentBundle}"`);
    if (!/^https:\/\/\S+\/$/.test(flags.apiUrl!))
      throw new UsageError(`--api-url must be an https URL ending in "/"; got "${flags.apiUrl}"`);
    if (!/^gs:\/\/[a-z0-9][a-z0-9._-]{1,220}\/(\S*\/)?$/.test(flags.checkpointStore!))
      throw new UsageError(`--checkpoint-store must be gs://bucket/prefix/ (ending in "/"); got "${flags.checkpointStore}"`);
    for (const [name, value] of Object.entries({
      audience: flags.audience!,
      region: flags.region!,
      'checkpoint-bucket': flags.checkpointBucket!,
    }))
      if (!/^[A-Za-z0-9./:_-]{1,256}$/.test(value)) throw new UsageError(`--${name} holds characters a setting cannot: "${value}"`);
    agent = {
      bundleUrl: flags.agentBundle!,
      apiUrl: flags.apiUrl!,
      audience: flags.audience!,
      region: flags.region!,
      checkpointBucket: flags.checkpointBucket!,
      checkpointStore: flags.checkpointStore!,
    };
  }
  io.stdout.write(
    gceStartupScript({
      ...(flags.prometheusPort !== undefined ? { prometheusPort: flags.prometheusPort } : {}),
      openPorts,
      ...(agent ? { agent } : {}),
    }),
  );
}
