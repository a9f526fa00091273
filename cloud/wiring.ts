import { AutoScalingClient } from '@aws-sdk/client-auto-scaling';
import { CloudWatchClient } from '@aws-sdk/client-cloudwatch';
import { EC2Client } from '@aws-sdk/client-ec2';
import { LambdaClient } from '@aws-sdk/client-lambda';
import { ResourceGroupsTaggingAPIClient } from '@aws-sdk/client-resource-groups-tagging-api';
import { SQSClient } from '@aws-sdk/client-sqs';
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { ElasticLoadBalancingV2Client } from '@aws-sdk/client-elastic-load-balancing-v2';
import { CloudError, ConfigError, isCloudError, messageOf } from '../core/errors.ts';
import type { Cloud } from '../core/catalog.ts';
import type { SecretsManagerClient } from '@aws-sdk/client-secrets-manager';
import type { DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import type {
  BudgetTagSource,
  CatalogSource,
  Clock,
  DeadLetter,
  GpuMetricSink,
  GpuMetricsSource,
  JobQueue,
  NodeGroupProvider,
  PriceSource,
  ReservationSource,
  ReconcileTrigger,
  ServiceMetricSink,
  ServiceStore,
} from '../core/ports.ts';
import type { InterruptionPorts, NoticeSource } from '../core/services/interruption.ts';
import { byteMeterOf } from '../core/services/accrual.ts';
import type { ReconcilePorts } from '../core/reconcile/reconcile.ts';
import type { PeoplePorts } from '../core/services/team-view.ts';
import { AsgNodeGroups } from './aws/asg-node-groups.ts';
import { Ec2Reservations } from './aws/ec2-reservations.ts';
import { CloudWatchJobLogs } from './aws/cloudwatch-logs.ts';
import { CloudWatchLogsClient } from '@aws-sdk/client-cloudwatch-logs';
import { awsShippedCatalog, onDemandPrice } from './catalog/shipped.ts';
import { CloudWatchGpuMetrics, CloudWatchGpuMetricSink, CloudWatchServiceMetricSink, s3BucketBytes } from './aws/cloudwatch-metrics.ts';
import { documentClientFor, DynamoServiceStore, dynamoStores } from './aws/dynamo-store.ts';
import { ElbFrontDoor } from './aws/elb-front-door.ts';
import { ElbRequestLoad } from './aws/elb-load.ts';
import { AwsPriceSource, Ec2Catalog } from './aws/ec2-catalog.ts';
import { SpotPlacementScores } from './aws/spot-placement-scores.ts';
import { deadLetterFor, SqsJobQueue } from './aws/sqs-queue.ts';
import { TaggingBudgetSource } from './aws/tagging-budgets.ts';
import { reconcileTrigger } from './aws/trigger.ts';
import { fleetConfigFromEnv, gcpStoreRoots, type Environment, type FleetConfig } from './env.ts';
import type { GcpClients } from './gcp/mig-node-groups.ts';
import type * as GcpRuntime from './gcp/runtime.ts';
import { MultiCloudCatalog, MultiCloudPrices } from './multi-cloud.ts';
import { shippedByteRates } from './prices.ts';

/**
 * The one place gpu-fleet's ports are built from the environment. Every entry point uses it:
 * the three Lambda functions, `gpu-fleet reconcile`, `gpu-fleet invoke --aws`, the people
 * commands and the node agent. AWS always; GCP's managed instance groups beside the Auto Scaling
 * groups when GCP projects are configured, its module (and the Compute client) loaded only then.
 *
 * Building the ports makes no call to any cloud: SDK clients are created, not used.
 */

/** The wall clock, for adapters and functions (core never reads it directly). */
export const systemClock: Clock = { nowMs: () => Date.now() };

export interface AwsClients {
  readonly asg: AutoScalingClient;
  readonly ec2: EC2Client;
  readonly cloudwatch: CloudWatchClient;
  readonly sqs: SQSClient;
  readonly tagging: ResourceGroupsTaggingAPIClient;
  readonly lambda: LambdaClient;
  readonly dynamodb: DynamoDBClient;
  readonly elb: ElasticLoadBalancingV2Client;
  readonly logs: CloudWatchLogsClient;
}

export interface WiringOptions {
  readonly clock?: Clock;
  /** Clients to use instead of new ones (tests; a CLI that already made one). */
  readonly aws?: Partial<AwsClients>;
  /** Compute clients for GCP (tests point them at a local server); by default built from the configured secret. */
  readonly gcp?: GcpClients;
  /** The Secrets Manager client that reads the GCP credentials secret (tests give a double). */
  readonly secrets?: SecretsManagerClient;
}

export interface FleetPorts {
  readonly config: FleetConfig;
  readonly clock: Clock;
  /** The SDK clients the ports use, for what an entry builds beside them (Powertools' idempotency store). */
  readonly clients: AwsClients;
  readonly stores: ReturnType<typeof dynamoStores>;
  /** The document client the stores use (what an entry builds beside them: the checkpoint sweep's position). */
  readonly doc: DynamoDBDocumentClient;
  readonly providers: readonly NodeGroupProvider[];
  readonly catalog: CatalogSource;
  readonly prices: PriceSource;
  readonly budgets: BudgetTagSource;
  readonly queue: JobQueue;
  readonly gpuMetrics: GpuMetricsSource;
  readonly metricSink: GpuMetricSink;
  /** Where agents publish their replicas' waiting and running requests. */
  readonly serviceMetricSink: ServiceMetricSink;
  readonly deadLetter: DeadLetter;
  readonly trigger: ReconcileTrigger;
  /** Clouds whose interruptions are found by polling (GCP). */
  readonly notices: readonly NoticeSource[];
  /** The ports as the reconcile service takes them (notice sources included). */
  readonly reconcile: ReconcilePorts;
  /** The ports as the interruption service takes them. */
  readonly interruption: InterruptionPorts;
  /** Service records, when the fleet runs services. */
  readonly services?: ServiceStore;
  /** The jobs' output in CloudWatch Logs, when the stack keeps it. */
  readonly jobLogs?: CloudWatchJobLogs;
  /** What the node group providers found wrong in their last listing. */
  problems(): string[];
}

/** SDK clients with adaptive retries, one per service, built once per process (a Lambda container). */
export function awsClients(config: Pick<FleetConfig, 'region'>, env: Environment = process.env): AwsClients {
  const common = { region: config.region, retryMode: 'adaptive' as const, maxAttempts: 5 };
  return {
    asg: new AutoScalingClient(common),
    ec2: new EC2Client(common),
    cloudwatch: new CloudWatchClient(common),
    // With an SQS endpoint configured (an SQS-compatible server), queue URLs may name hosts only
    // that server knows: send to the configured endpoint, not to the queue URL's host.
    sqs: new SQSClient({ ...common, ...(env.AWS_ENDPOINT_URL_SQS || env.AWS_ENDPOINT_URL ? { useQueueUrlAsEndpoint: false } : {}) }),
    tagging: new ResourceGroupsTaggingAPIClient(common),
    lambda: new LambdaClient(common),
    dynamodb: new DynamoDBClient(common),
    elb: new ElasticLoadBalancingV2Client(common),
    logs: new CloudWatchLogsClient(common),
  };
}

/** Every port of a fleet, from its config. */
export async function fleetPorts(config: FleetConfig, options: WiringOptions = {}): Promise<FleetPorts> {
  const clock = options.clock ?? systemClock;
  const clients: AwsClients = { ...awsClients(config), ...options.aws };
  const variables = {
    [config.tables.jobs]: 'GPU_FLEET_JOBS_TABLE',
    [config.tables.nodes]: 'GPU_FLEET_NODES_TABLE',
    [config.tables.control]: 'GPU_FLEET_CONTROL_TABLE',
    [config.tables.idempotency]: 'GPU_FLEET_IDEMPOTENCY_TABLE',
  };
  const doc = documentClientFor(clients.dynamodb, variables);
  const stores = dynamoStores(doc, config.tables, config.checkpointBucket, clock);
  const asg = new AsgNodeGroups(clients.asg, clients.ec2, { region: config.region, clock });
  // Capacity reservations: read from EC2, an ODCR priced at its type's on-demand price from the shipped catalogue.
  const shipped = awsShippedCatalog();
  const reservations = new Ec2Reservations(clients.ec2, {
    region: config.region,
    ...(config.reservationSelector ? { selector: config.reservationSelector } : {}),
    onDemandPrice: (instanceType, zone) => onDemandPrice(shipped, { cloud: 'aws', region: config.region, zone, instanceType }),
  });
  let providers: NodeGroupProvider[] = [asg];
  let catalog: CatalogSource = new Ec2Catalog(clients.ec2);
  // Spot Placement Scores for the region's spot pools, as their prior: at most once an hour per set of types, and off
  // for a day when the account refuses them (the stack grants ec2:GetSpotPlacementScores to reconcile).
  const placementScores = new SpotPlacementScores(clients.ec2, { region: config.region, clock });
  let prices: PriceSource = new AwsPriceSource(clients.ec2, {
    clock,
    placementScores: (region) => (region === config.region ? placementScores : undefined),
  });
  const notices: NoticeSource[] = [];
  let gcpReservations: ReservationSource | undefined;
  let gcp: Awaited<ReturnType<typeof loadGcp>> | undefined;
  if (config.gcp) {
    try {
      gcp = await loadGcp(config, clock, options.gcp, options.secrets);
    } catch (error) {
      // One cloud's ports that cannot be built (its secret gone or refused, a bad key, a build without its adapter)
      // degrade that cloud alone: its provider fails every listing, as an unreachable cloud would, and AWS goes on.
      providers = [...providers, new UnavailableCloud('gcp', config.gcp.projects.map((p) => p.projectId).join(', '), error)];
    }
  }
  if (gcp) {
    providers = [...providers, gcp.groups];
    catalog = new MultiCloudCatalog([catalog, gcp.catalog]);
    prices = new MultiCloudPrices(
      new Map([
        ['aws', prices],
        ['gcp', gcp.prices],
      ]),
    );
    notices.push(gcp.preemptions);
    if (gcp.reservations) gcpReservations = gcp.reservations;
  }
  const budgets = new TaggingBudgetSource(clients.tagging, { teamQueuePrefix: config.teamQueuePrefix });
  // Services, when the stack declares them: their records in the control table, their target groups, their load
  // (the requests per target divided as AWS divides them: by the group's healthy targets).
  let services: { services: DynamoServiceStore; frontDoor: ElbFrontDoor; serviceLoad: ElbRequestLoad } | undefined;
  if (config.services) {
    const frontDoor = new ElbFrontDoor(clients.elb, config.services.targetGroups);
    services = {
      services: new DynamoServiceStore(doc, config.tables.control),
      frontDoor,
      serviceLoad: new ElbRequestLoad(clients.cloudwatch, clock, config.services.targetGroups, frontDoor),
    };
  }
  const reconcile: ReconcilePorts = {
    ...stores,
    clock,
    providers,
    catalog,
    prices,
    budgets,
    notices,
    reservations: [reservations, ...(gcpReservations ? [gcpReservations] : [])],
    ...(config.discounts ? { discounts: config.discounts } : {}),
    ...services,
    // Checkpoint bytes on the bill: each save's size as its agent reported it, from the checkpoint index's byte events.
    bytes: byteMeterOf(stores.checkpoints, {
      store: { cloud: 'aws', region: config.region },
      roots: gcpStoreRoots(config),
      layout: config.network,
      rates: shippedByteRates(),
    }),
  };
  const interruption: InterruptionPorts = {
    clock,
    jobs: stores.jobs,
    nodes: stores.nodes,
    checkpoints: stores.checkpoints,
    pools: stores.pools,
    providers,
  };
  return {
    config,
    clock,
    clients,
    stores,
    doc,
    providers,
    catalog,
    prices,
    budgets,
    queue: new SqsJobQueue(clients.sqs, { teamQueuePrefix: config.teamQueuePrefix, clock }),
    gpuMetrics: new CloudWatchGpuMetrics(clients.cloudwatch, clock),
    metricSink: new CloudWatchGpuMetricSink(clients.cloudwatch),
    serviceMetricSink: new CloudWatchServiceMetricSink(clients.cloudwatch),
    deadLetter: deadLetterFor(clients.sqs, config.deadLetterQueueUrl),
    trigger: reconcileTrigger(clients.lambda, config.reconcileFunction),
    notices,
    reconcile,
    interruption,
    ...(services ? { services: services.services } : {}),
    ...(config.jobLogGroup ? { jobLogs: new CloudWatchJobLogs(clients.logs, config.jobLogGroup) } : {}),
    problems: () => [
      ...providers.flatMap((p) => [...(p.problems ?? [])]),
      ...reservations.problems,
      ...((gcpReservations as { problems?: string[] } | undefined)?.problems ?? []),
    ],
  };
}

/** Where the checkpoint bytes are kept and their path's prices, as `report` charges them. */
export type ByteSites = Pick<NonNullable<ReconcilePorts['bytes']>, 'store' | 'roots' | 'layout' | 'rates'>;

/**
 * The read side people use (core/services/team-view.ts `PeoplePorts`) from the fleet's ports, with
 * the checkpoint bytes' sites and the bucket's own count where the fleet meters bytes: what the
 * people API answers from, and the CLI's direct path (an operator's credentials) reads.
 */
export function peoplePortsOf(
  ports: FleetPorts,
): PeoplePorts & { readonly bytes?: ByteSites; readonly bucketBytes?: () => ReturnType<typeof s3BucketBytes> } {
  const bytes = ports.reconcile.bytes;
  return {
    jobs: ports.stores.jobs,
    nodes: ports.stores.nodes,
    decisions: ports.stores.decisions,
    ledger: ports.stores.ledger,
    queue: ports.queue,
    budgets: ports.reconcile.budgets,
    ...(ports.reconcile.budgetMemory ? { budgetMemory: ports.reconcile.budgetMemory } : {}),
    gpuMetrics: ports.gpuMetrics,
    ...(ports.services ? { services: ports.services } : {}),
    ...(ports.jobLogs ? { jobLogs: ports.jobLogs } : {}),
    ...(bytes
      ? {
          byteLogs: (sinceMs: number) => ports.stores.checkpoints.byteLogs(sinceMs),
          bytes: { store: bytes.store, ...(bytes.roots ? { roots: bytes.roots } : {}), layout: bytes.layout, rates: bytes.rates },
          bucketBytes: () => s3BucketBytes(ports.clients.cloudwatch, ports.config.checkpointBucket, ports.clock),
        }
      : {}),
  };
}

/** The environment's config and every port built from it: what a Lambda entry does once per container. */
export async function fleetPortsFromEnv(env: Environment = process.env, options: WiringOptions = {}): Promise<FleetPorts> {
  return fleetPorts(fleetConfigFromEnv(env), options);
}

async function loadGcp(config: FleetConfig, clock: Clock, clients: GcpClients | undefined, secrets: SecretsManagerClient | undefined) {
  let gcp: typeof GcpRuntime;
  try {
    gcp = await import('./gcp/runtime.ts');
  } catch (error) {
    throw new ConfigError(
      'the environment',
      [
        `GPU_FLEET_GCP_PROJECTS is set, but this build has no GCP adapter (${messageOf(error)}); deploy with "gcp" in the stack's config, which bundles it`,
      ],
      { what: 'gpu-fleet environment', cause: error },
    );
  }
  return gcp.loadGcpPorts(config.gcp!, { region: config.region, clock, ...(clients ? { clients } : {}), ...(secrets ? { secrets } : {}) });
}

/**
 * A cloud whose ports could not be built: every call fails with why, as a cloud that cannot be
 * reached does, so reconcile degrades that cloud alone (its machines are neither planned nor
 * counted lost) and says so; `describeInstance` knows no machine, so notices about others go on.
 */
class UnavailableCloud implements NodeGroupProvider {
  private readonly error: CloudError;
  readonly problems: readonly string[];
  constructor(
    readonly cloud: Cloud,
    readonly scope: string,
    cause: unknown,
  ) {
    const message = `its ports could not be built: ${messageOf(cause)}`;
    this.error = new CloudError(
      isCloudError(cause) ? cause.code : 'unavailable',
      message,
      { operation: 'build the cloud ports', cloud },
      { cause },
    );
    this.problems = [`${cloud.toUpperCase()} (${scope}): ${message}`];
  }
  private fail(): never {
    throw this.error;
  }
  listGroups = async (): Promise<never> => this.fail();
  listInstances = async (): Promise<never> => this.fail();
  setDesiredCapacity = async (): Promise<never> => this.fail();
  terminateInstance = async (): Promise<never> => this.fail();
  setScaleInProtection = async (): Promise<never> => this.fail();
  launchFailures = async (): Promise<never> => this.fail();
  completeLifecycleAction = async (): Promise<never> => this.fail();
  describeInstance = async (): Promise<undefined> => undefined;
}
