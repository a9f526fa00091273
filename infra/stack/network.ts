import { CfnOutput, Duration, RemovalPolicy, Tags } from 'aws-cdk-lib';
import * as autoscaling from 'aws-cdk-lib/aws-autoscaling';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as elbv2 from 'aws-cdk-lib/aws-elasticloadbalancingv2';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as logs from 'aws-cdk-lib/aws-logs';
import type * as s3 from 'aws-cdk-lib/aws-s3';
import type * as s3assets from 'aws-cdk-lib/aws-s3-assets';
import { AGENT_METRICS } from '../../cloud/aws/cloudwatch-metrics.ts';
import { GROUP_TAGS, MIG_TAG_VALUE } from '../../cloud/aws/asg-node-groups.ts';
import { targetGroupDimension } from '../../cloud/aws/elb-load.ts';
import { SERVICE_DEREGISTRATION_DELAY_SEC } from '../../core/serving/service.ts';
import { agentUserData, DATA_VOLUME_DEVICE } from '../node-setup.ts';
import type { GpuFleetConfig, NodeGroupConfig } from '../config.ts';
import { LAUNCH_HOOK_NAME, LAUNCH_HOOK_TIMEOUT_SEC, LIFECYCLE_HOOK_NAME, LIFECYCLE_TIMEOUT_SEC, type FleetStack } from './parts.ts';
import { acknowledge, nagRegion } from './helpers.ts';

// ---- pieces ---------------------------------------------------------------------------------
/**
 * The services' front door: the target groups the config names, and, with `loadBalancer`, an
 * Application Load Balancer the stack creates (internal unless said, access logs on, invalid
 * headers dropped) with a listener per service on its own port (HTTPS with a certificate)
 * forwarding to an IP target group on the service's port, health-checked on its readiness path,
 * 30 s deregistration delay. Its security group takes the listener ports from `allowFrom` (the
 * VPC by default) and reaches the nodes on the services' ports only.
 */
export function servicesFrontDoor(
  stack: FleetStack,
  config: GpuFleetConfig,
  vpc: ec2.IVpc,
  nodeSg: ec2.SecurityGroup,
  accessLogs: s3.Bucket,
): { id: string; arn: string; dimension: string }[] {
  const out = Object.entries(config.services?.targetGroups ?? {}).map(([id, arn]) => ({ id, arn, dimension: targetGroupDimension(arn) }));
  const lb = config.services?.loadBalancer;
  if (!lb) return out;
  const from = lb.allowFrom ?? ('create' in config.vpc ? config.vpc.create.cidr : undefined);
  if (!from)
    throw new Error(
      'services.loadBalancer.allowFrom: give the CIDR that may reach the services (with an existing VPC the stack does not know its range)',
    );
  if (lb.internetFacing && !('create' in config.vpc))
    throw new Error(
      'services.loadBalancer.internetFacing: an existing VPC is described by its private subnets only; an internet-facing load balancer needs the stack to create the VPC',
    );
  const sg = new ec2.SecurityGroup(stack, 'ServicesLoadBalancerSecurityGroup', {
    vpc,
    description: 'gpu-fleet services load balancer: listener ports from allowFrom, the services ports on the nodes',
    allowAllOutbound: false,
  });
  const alb = new elbv2.ApplicationLoadBalancer(stack, 'ServicesLoadBalancer', {
    vpc,
    internetFacing: lb.internetFacing,
    securityGroup: sg,
    dropInvalidHeaderFields: true,
    vpcSubnets: { subnetType: lb.internetFacing ? ec2.SubnetType.PUBLIC : ec2.SubnetType.PRIVATE_WITH_EGRESS },
  });
  alb.logAccessLogs(accessLogs, 'services-load-balancer');
  lb.services.forEach((svc, i) => {
    const tg = new elbv2.ApplicationTargetGroup(stack, `ServiceTargetGroup${i}`, {
      vpc,
      targetType: elbv2.TargetType.IP,
      port: svc.port,
      protocol: elbv2.ApplicationProtocol.HTTP,
      healthCheck: { path: svc.healthCheckPath, interval: Duration.seconds(10), healthyThresholdCount: 2 },
      deregistrationDelay: Duration.seconds(SERVICE_DEREGISTRATION_DELAY_SEC),
    });
    alb.addListener(`ServiceListener${i}`, {
      port: svc.listenerPort,
      open: false,
      ...(lb.certificateArn
        ? { protocol: elbv2.ApplicationProtocol.HTTPS, certificates: [elbv2.ListenerCertificate.fromArn(lb.certificateArn)] }
        : { protocol: elbv2.ApplicationProtocol.HTTP }),
      defaultTargetGroups: [tg],
    });
    sg.addIngressRule(ec2.Peer.ipv4(from), ec2.Port.tcp(svc.listenerPort), `${svc.id}: clients`);
    sg.addEgressRule(nodeSg, ec2.Port.tcp(svc.port), `${svc.id}: its replicas`);
    nodeSg.addIngressRule(sg, ec2.Port.tcp(svc.port), `${svc.id}: from the services load balancer`);
    out.push({ id: svc.id, arn: tg.targetGroupArn, dimension: tg.targetGroupFullName });
  });
  new CfnOutput(stack, 'ServicesLoadBalancerDns', {
    value: alb.loadBalancerDnsName,
    description: 'the services load balancer (one listener port per service)',
  });
  return out;
}

export function network(stack: FleetStack, config: GpuFleetConfig): ec2.IVpc {
  if ('existing' in config.vpc) {
    // No lookup at synth time: the VPC is described by its ids.
    return ec2.Vpc.fromVpcAttributes(stack, 'Vpc', {
      vpcId: config.vpc.existing.vpcId,
      availabilityZones: config.vpc.existing.zones,
      privateSubnetIds: config.vpc.existing.privateSubnetIds,
    });
  }
  const create = config.vpc.create;
  // A NAT gateway in every zone by default: a zone's failure then cuts off only its own machines (docs/getting-started.md prices it).
  const vpc = new ec2.Vpc(stack, 'Vpc', {
    ipAddresses: ec2.IpAddresses.cidr(create.cidr),
    availabilityZones: create.zones,
    natGateways: create.natGateways ?? create.zones.length,
    subnetConfiguration: [
      { name: 'public', subnetType: ec2.SubnetType.PUBLIC, cidrMask: 24 },
      { name: 'nodes', subnetType: ec2.SubnetType.PRIVATE_WITH_EGRESS, cidrMask: 20 },
    ],
  });
  // Checkpoint bytes (and ECR's image layers, which S3 serves) go to S3 through a gateway endpoint on the node
  // subnets' route tables: no hourly charge and no data processing, where a NAT gateway charges $0.045 a GB.
  vpc.addGatewayEndpoint('S3Endpoint', {
    service: ec2.GatewayVpcEndpointAwsService.S3,
    subnets: [{ subnetType: ec2.SubnetType.PRIVATE_WITH_EGRESS }],
  });
  const services: Record<(typeof create.interfaceEndpoints & {})[number], ec2.InterfaceVpcEndpointAwsService[]> = {
    ecr: [ec2.InterfaceVpcEndpointAwsService.ECR, ec2.InterfaceVpcEndpointAwsService.ECR_DOCKER],
    monitoring: [ec2.InterfaceVpcEndpointAwsService.CLOUDWATCH_MONITORING],
  };
  // Each endpoint is closed but to the GPU nodes (opened once their security group exists: see nodeSecurityGroup).
  for (const name of create.interfaceEndpoints ?? [])
    services[name].forEach((service, i) =>
      stack.interfaceEndpoints.push(
        vpc.addInterfaceEndpoint(`${name === 'ecr' ? (i === 0 ? 'EcrApi' : 'EcrDocker') : 'Monitoring'}Endpoint`, {
          service,
          subnets: { subnetType: ec2.SubnetType.PRIVATE_WITH_EGRESS },
          privateDnsEnabled: true,
          open: false,
        }),
      ),
    );
  const flowLogs = new logs.LogGroup(stack, 'VpcFlowLogs', {
    retention: logs.RetentionDays.ONE_MONTH,
    encryptionKey: stack.key,
    removalPolicy: RemovalPolicy.DESTROY,
  });
  vpc.addFlowLog('FlowLog', {
    destination: ec2.FlowLogDestination.toCloudWatchLogs(flowLogs),
    trafficType: ec2.FlowLogTrafficType.REJECT,
  });
  return vpc;
}

/**
 * What the agent on a GPU node may do: call the agent API (which checks each write against the
 * node's own records), publish its GPU metrics, fetch its bundle, pull job images. No table, no
 * checkpoint object, no key: its state and its jobs' checkpoints go through the API.
 */
export function agentRoleFor(stack: FleetStack, agentAsset: s3assets.Asset, ecrRepositories: readonly string[]): iam.Role {
  const role = new iam.Role(stack, 'AgentRole', {
    assumedBy: new iam.ServicePrincipal('ec2.amazonaws.com'),
    description: 'gpu-fleet node agent',
  });
  role.addToPolicy(
    new iam.PolicyStatement({
      sid: 'GpuMetrics',
      actions: ['cloudwatch:PutMetricData'],
      resources: ['*'],
      conditions: { StringEquals: { 'cloudwatch:namespace': AGENT_METRICS.namespace } },
    }),
  );
  // Job images from ECR: only the repositories the config names (none without them).
  const repositories = ecrRepositories.map((r) => `arn:${stack.partition}:ecr:${stack.region}:${stack.account}:repository/${r}`);
  if (repositories.length > 0) {
    role.addToPolicy(new iam.PolicyStatement({ sid: 'EcrLogin', actions: ['ecr:GetAuthorizationToken'], resources: ['*'] }));
    role.addToPolicy(
      new iam.PolicyStatement({
        sid: 'EcrPull',
        actions: ['ecr:BatchGetImage', 'ecr:GetDownloadUrlForLayer', 'ecr:BatchCheckLayerAvailability'],
        resources: repositories,
      }),
    );
  }
  // Exactly the bundle object, not the whole asset bucket.
  role.addToPolicy(
    new iam.PolicyStatement({
      sid: 'AgentBundle',
      actions: ['s3:GetObject'],
      resources: [`arn:${stack.partition}:s3:::${agentAsset.s3BucketName}/${agentAsset.s3ObjectKey}`],
    }),
  );
  acknowledge(role, {
    'AwsSolutions-IAM5[Resource::*]':
      'cloudwatch:PutMetricData and ecr:GetAuthorizationToken support no resource-level permissions; PutMetricData is held to the GpuFleet namespace by a condition.',
    ...Object.fromEntries(
      ecrRepositories
        .filter((r) => r.endsWith('*'))
        .map((r) => [
          `AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:ecr:${nagRegion(stack)}:<AWS::AccountId>:repository/${r}]`,
          `The fleet config lets the machines pull (read only) from the ECR repositories under ${r}, as it names them.`,
        ]),
    ),
  });
  return role;
}

export function nodeGroup(
  stack: FleetStack,
  g: NodeGroupConfig,
  config: GpuFleetConfig,
  vpc: ec2.IVpc,
  sg: ec2.SecurityGroup,
  agentAsset: s3assets.Asset,
): autoscaling.AutoScalingGroup {
  const machineImage =
    'ssmParameter' in g.ami
      ? ec2.MachineImage.fromSsmParameter(g.ami.ssmParameter, { os: ec2.OperatingSystemType.LINUX })
      : ec2.MachineImage.genericLinux({ [config.region]: g.ami.amiId });
  const userData = ec2.UserData.forLinux();
  userData.addCommands(
    ...agentUserData({
      assetUrl: agentAsset.s3ObjectUrl,
      region: stack.region,
      agentApiUrl: stack.agentApiUrl.url,
      bucket: stack.bucket.bucketName,
      noticeMarginSec: config.policy.noticeMarginSec,
      migEnabled: g.migEnabled,
      ...(g.warmPool ? { launchHook: LAUNCH_HOOK_NAME } : {}),
      ...(config.prometheus ? { prometheusPort: config.prometheus.port } : {}),
      ...(config.dcgmExporterUrl ? { dcgmExporterUrl: config.dcgmExporterUrl } : {}),
      openPorts: [
        ...(config.services?.loadBalancer?.services.map((s) => s.port) ?? []),
        ...(config.services?.replicaPorts ?? []).map((r) => r.port),
      ],
    }),
  );
  const template = new ec2.LaunchTemplate(stack, `LaunchTemplate-${g.name}`, {
    machineImage,
    role: stack.agentRole,
    securityGroup: sg,
    userData,
    requireImdsv2: true,
    httpPutResponseHopLimit: 1, // containers on the bridge network cannot reach the node's credentials
    instanceMetadataTags: true, // the agent reads its group name from the instance's tags
    blockDevices: [
      {
        deviceName: '/dev/xvda',
        volume: ec2.BlockDeviceVolume.ebs(g.diskGiB, {
          volumeType: ec2.EbsDeviceVolumeType.GP3,
          encrypted: true,
          deleteOnTermination: true,
        }),
      },
      // Docker's data and the job folders' disks, apart from the root volume (the node's boot mounts it: dataVolumeScript).
      ...(g.dataDiskGiB !== undefined
        ? [
            {
              deviceName: DATA_VOLUME_DEVICE,
              volume: ec2.BlockDeviceVolume.ebs(g.dataDiskGiB, {
                volumeType: ec2.EbsDeviceVolumeType.GP3,
                encrypted: true,
                deleteOnTermination: true,
              }),
            },
          ]
        : []),
    ],
    detailedMonitoring: true,
    // A reserved group launches its one type into its reservation (the template names both); a group with a warm
    // pool launches its one type from the template too (a warm pool cannot go with a mixed instances policy).
    ...(g.reservation || g.warmPool ? { instanceType: new ec2.InstanceType(g.instanceTypes[0]!) } : {}),
    // Hibernated warm machines keep their memory on the (encrypted) root volume.
    ...(g.warmPool?.state === 'Hibernated' ? { hibernationConfigured: true } : {}),
  });
  if (g.reservation) {
    // The L2 template has no reservation target or capacity-block market: set them on the template's data.
    const data = template.node.defaultChild as ec2.CfnLaunchTemplate;
    data.addPropertyOverride('LaunchTemplateData.CapacityReservationSpecification', {
      CapacityReservationTarget: { CapacityReservationId: g.reservation.id },
    });
    if (g.reservation.kind === 'capacity-block')
      data.addPropertyOverride('LaunchTemplateData.InstanceMarketOptions', { MarketType: 'capacity-block' });
  }
  const spot = g.capacityType === 'spot';
  const subnets: ec2.SubnetSelection = g.subnetIds
    ? { subnets: g.subnetIds.map((id, i) => ec2.Subnet.fromSubnetAttributes(stack, `Subnet-${g.name}-${i}`, { subnetId: id })) }
    : { subnetType: ec2.SubnetType.PRIVATE_WITH_EGRESS, availabilityZones: g.zones! };
  const asg = new autoscaling.AutoScalingGroup(stack, `NodeGroup-${g.name}`, {
    vpc,
    vpcSubnets: subnets,
    autoScalingGroupName: stack.groupName(g.name),
    minCapacity: g.minSize,
    maxCapacity: g.maxSize,
    // No desired capacity: reconcile owns it, and a deploy must not reset it.
    // A reserved group launches its template as it is (one type, into its reservation), as does one with a warm pool;
    // the others mix their types.
    ...(g.reservation || g.warmPool
      ? { launchTemplate: template }
      : {
          mixedInstancesPolicy: {
            launchTemplate: template,
            launchTemplateOverrides: g.instanceTypes.map((t) => ({ instanceType: new ec2.InstanceType(t) })),
            instancesDistribution: {
              onDemandBaseCapacity: 0,
              onDemandPercentageAboveBaseCapacity: spot ? 0 : 100,
              ...(spot
                ? { spotAllocationStrategy: autoscaling.SpotAllocationStrategy.PRICE_CAPACITY_OPTIMIZED }
                : { onDemandAllocationStrategy: autoscaling.OnDemandAllocationStrategy.LOWEST_PRICE }),
            },
          },
        }),
    capacityRebalance: spot,
    healthChecks: autoscaling.HealthChecks.ec2({ gracePeriod: Duration.minutes(10) }),
    groupMetrics: [autoscaling.GroupMetrics.all()],
  });
  // Machines prepared ahead: MinSize and MaxGroupPreparedCapacity equal give the pool an absolute size (PutWarmPool).
  if (g.warmPool)
    asg.addWarmPool({
      minSize: g.warmPool.size,
      maxGroupPreparedCapacity: g.warmPool.size,
      poolState: g.warmPool.state === 'Hibernated' ? autoscaling.PoolState.HIBERNATED : autoscaling.PoolState.STOPPED,
    });
  if (g.warmPool)
    asg.addLifecycleHook('Prepare', {
      lifecycleHookName: LAUNCH_HOOK_NAME,
      lifecycleTransition: autoscaling.LifecycleTransition.INSTANCE_LAUNCHING,
      heartbeatTimeout: Duration.seconds(LAUNCH_HOOK_TIMEOUT_SEC),
      defaultResult: autoscaling.DefaultResult.CONTINUE,
    });
  asg.addLifecycleHook('Drain', {
    lifecycleHookName: LIFECYCLE_HOOK_NAME,
    lifecycleTransition: autoscaling.LifecycleTransition.INSTANCE_TERMINATING,
    heartbeatTimeout: Duration.seconds(LIFECYCLE_TIMEOUT_SEC),
    defaultResult: autoscaling.DefaultResult.CONTINUE,
  });
  Tags.of(asg).add(GROUP_TAGS.managed, 'true', { applyToLaunchedInstances: true });
  Tags.of(asg).add(GROUP_TAGS.capacityType, g.capacityType, { applyToLaunchedInstances: true });
  if (g.migEnabled) Tags.of(asg).add(GROUP_TAGS.mig, MIG_TAG_VALUE, { applyToLaunchedInstances: true });
  if (g.reservation) Tags.of(asg).add(GROUP_TAGS.reservation, g.reservation.id, { applyToLaunchedInstances: true });
  acknowledge(asg, {
    'AwsSolutions-EC26':
      'The root volume is encrypted (gp3, encrypted) in the launch template; the rule cannot read through the launch template reference.',
  });
  acknowledge(asg, {
    'AwsSolutions-AS3':
      "Scaling is gpu-fleet's own decision, recorded with its reasons in every reconcile's decision record and metrics; an SNS notification per launch would repeat it.",
  });
  return asg;
}
