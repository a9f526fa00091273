// Lambda entry: the agent API (a function URL with IAM auth, called by the node agents).
import { AutoScalingClient } from '@aws-sdk/client-auto-scaling';
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { EC2Client } from '@aws-sdk/client-ec2';
import { S3Client } from '@aws-sdk/client-s3';
import { SecretsManagerClient } from '@aws-sdk/client-secrets-manager';
import { SSMClient } from '@aws-sdk/client-ssm';
import { AwsSecretReader } from '../../cloud/aws/secret-reader.ts';
import { CloudWatchClient } from '@aws-sdk/client-cloudwatch';
import { CloudWatchLogsClient } from '@aws-sdk/client-cloudwatch-logs';
import { ElasticLoadBalancingV2Client } from '@aws-sdk/client-elastic-load-balancing-v2';
import { AsgNodeGroups } from '../../cloud/aws/asg-node-groups.ts';
import { ElbFrontDoor } from '../../cloud/aws/elb-front-door.ts';
import { CloudWatchJobLogs } from '../../cloud/aws/cloudwatch-logs.ts';
import { CloudWatchServiceMetricSink } from '../../cloud/aws/cloudwatch-metrics.ts';
import { awsShippedCatalog } from '../../cloud/catalog/shipped.ts';
import { documentClientFor, DynamoServiceStore, dynamoStores } from '../../cloud/aws/dynamo-store.ts';
import { S3CheckpointUrls } from '../../cloud/aws/checkpoint-urls.ts';
import { AttemptCredentials, attemptKeyFromSecret } from '../../cloud/aws/attempt-credentials.ts';
import { systemClock } from '../../cloud/wiring.ts';
import { fleetConfigFromEnv } from '../../cloud/env.ts';
import { ConfigError } from '../../core/errors.ts';
import { createAgentApiHandler } from '../agent-api.ts';
import { observability } from '../observability.ts';

const config = fleetConfigFromEnv();
const agentRoleName = process.env.GPU_FLEET_AGENT_ROLE_NAME;
if (!agentRoleName)
  throw new ConfigError('the environment', ['GPU_FLEET_AGENT_ROLE_NAME is not set: it names the node agent role whose sessions may call'], {
    what: 'gpu-fleet environment',
  });
const attemptKeySecret = process.env.GPU_FLEET_ATTEMPT_KEY_SECRET;
if (!attemptKeySecret)
  throw new ConfigError(
    'the environment',
    ["GPU_FLEET_ATTEMPT_KEY_SECRET is not set: it names the secret holding the key of the attempts' credentials"],
    { what: 'gpu-fleet environment' },
  );
const common = { region: config.region, retryMode: 'adaptive' as const, maxAttempts: 5 };
const attempts = new AttemptCredentials(await attemptKeyFromSecret(new SecretsManagerClient(common), attemptKeySecret));
const doc = documentClientFor(new DynamoDBClient(common));
const stores = dynamoStores(doc, config.tables, config.checkpointBucket, systemClock);
// Groups with a warm pool: their machines ask, while being prepared, which images to pull, then let their launch hook go.
const launchHookName = process.env.GPU_FLEET_LAUNCH_HOOK;
// GCP regions' Cloud Storage buckets: a machine resuming a job moved from GCP reads its save there, through URLs signed with
// the control plane's service account (the Cloud Storage client is loaded only then).
const otherRoots = Object.values(config.gcp?.checkpointRoots ?? {});
const gcsUrls =
  otherRoots.length > 0
    ? await (async () => {
        const [{ GcsCheckpointUrls }, { controlPlaneStorage }] = await Promise.all([
          import('../../cloud/gcp/checkpoint-store.ts'),
          import('../../cloud/gcp/control-plane-storage.ts'),
        ]);
        return new GcsCheckpointUrls(await controlPlaneStorage(config.gcp!, config.region), 3600, systemClock);
      })()
    : undefined;
// The fleet's GCP machines call the API's unsigned URL with their instance identity tokens (infra/stack.ts).
const gceAgents = process.env.GPU_FLEET_GCE_AGENTS
  ? await (async () => {
      const { GceAgentsSchema } = await import('../../cloud/gcp/identity-token.ts');
      const parsed = GceAgentsSchema.safeParse(JSON.parse(process.env.GPU_FLEET_GCE_AGENTS!));
      if (!parsed.success)
        throw new ConfigError('the environment', [`GPU_FLEET_GCE_AGENTS is not valid: ${parsed.error.message}`], {
          what: 'gpu-fleet environment',
        });
      return { rules: parsed.data };
    })()
  : undefined;
export const handler = createAgentApiHandler({
  ...(gceAgents ? { gceAgents } : {}),
  jobs: stores.jobs,
  nodes: stores.nodes,
  checkpoints: stores.checkpoints,
  history: stores.checkpoints,
  urls: new S3CheckpointUrls(new S3Client(common)),
  ...(gcsUrls ? { gcsUrls, otherRoots } : {}),
  ...(config.jobLogGroup ? { jobLogs: new CloudWatchJobLogs(new CloudWatchLogsClient(common), config.jobLogGroup) } : {}),
  clock: systemClock,
  // The secrets jobs name by reference: SSM parameters and Secrets Manager secrets under gpu-fleet/<team>/.
  secrets: new AwsSecretReader(new SSMClient(common), new SecretsManagerClient(common)),
  // With services: their records and the catalogue (a machine being prepared asks its images), their target groups (a warned
  // machine's replicas leave them).
  ...(config.services
    ? {
        serviceMetrics: new CloudWatchServiceMetricSink(new CloudWatchClient(common)),
        sources: {
          services: new DynamoServiceStore(doc, config.tables.control),
          types: awsShippedCatalog().instanceTypes,
          frontDoor: new ElbFrontDoor(new ElasticLoadBalancingV2Client(common), config.services.targetGroups),
        },
      }
    : {}),
  ...(launchHookName
    ? {
        launchHook: {
          hookName: launchHookName,
          groups: new AsgNodeGroups(new AutoScalingClient(common), new EC2Client(common), { region: config.region, clock: systemClock }),
        },
      }
    : {}),
  agentRoleName,
  attempts,
  obs: observability('gpu-fleet-agent-api'),
});
