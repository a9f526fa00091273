// The CDK app (cdk.json runs it): one GpuFleetStack from a config file, checked by cdk-nag's
// AWS Solutions rules. Config: `-c config=path/to/config.json`, or GPU_FLEET_CONFIG; one must be given.
import { resolve } from 'node:path';
import { App, Validations } from 'aws-cdk-lib';
import { AwsSolutionsChecks } from 'cdk-nag';
import { ConfigError, loadConfig } from './config.ts';
import { bundleAgent } from './agent-bundle.ts';
import { bundleFunctions } from './bundling.ts';
import { GpuFleetStack } from './stack.ts';

export async function buildApp(app: App, configPath: string): Promise<GpuFleetStack> {
  const config = loadConfig(configPath);
  // The functions are bundled first (esbuild's plugins run only in its asynchronous API).
  const functionBundles = await bundleFunctions(resolve(import.meta.dirname, '../cdk.out-functions'), {
    gcp: config.gcp !== undefined,
    gcs: config.gcp?.checkpointRoots !== undefined || config.gcp?.agentServiceAccounts !== undefined,
  });
  const agent = await bundleAgent(resolve(import.meta.dirname, '../cdk.out-agent'));
  const stack = new GpuFleetStack(app, config.stackName, {
    config,
    functionBundles,
    agentBundleFile: agent.file,
    // Region (and account when given) are fixed by the config: synth never looks anything up.
    env: { region: config.region, ...(config.account ? { account: config.account } : {}) },
    description: 'gpu-fleet: serverless autoscaling control plane for GPU work on spot and on-demand capacity',
  });
  Validations.of(app).addPlugins(new AwsSolutionsChecks(app));
  return stack;
}

const app = new App();
const given = (app.node.tryGetContext('config') as string | undefined) ?? process.env.GPU_FLEET_CONFIG;
// A deploy of the example by accident would create its groups in its region: the config is always named.
if (given === undefined) {
  process.stderr.write(
    'no config given: name it with -c config=path/to/config.json (or GPU_FLEET_CONFIG=path); to build the example: -c config=infra/config.example.json\n',
  );
  process.exit(2);
}
try {
  await buildApp(app, resolve(given));
} catch (error) {
  if (error instanceof ConfigError) {
    process.stderr.write(`${error.message}\n`);
    process.exit(2);
  }
  throw error;
}
app.synth();
