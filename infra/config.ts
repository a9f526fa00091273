import { readFileSync } from 'node:fs';
import awsRegionsJson from 'aws-regions/regions.json' with { type: 'json' };
import { z } from 'zod';
import { ConfigError, messageOf, parseJson } from '../core/errors.ts';
import { GCS_ROOT_RE, S3_PATHS, type NetworkLayout } from '../core/bytes.ts';
import { regionOfZone } from '../core/catalog.ts';
import { MIG_GPUS } from '../core/mig.ts';
import { ImagePolicySchema } from '../core/images.ts';
import { describeFields, didYouMean, fieldsAt, trueOrFalse, unknownFieldsMessage, wholeNumber } from '../core/schema.ts';
import { awsShippedCatalog } from '../cloud/catalog/shipped.ts';
import awsCatalogJson from '../data/catalog/aws-gpu-instances.json' with { type: 'json' };
import exampleConfigJson from './config.example.json' with { type: 'json' };

/**
 * The deployment's config: what `cdk deploy` creates. One JSON file (infra/config.example.json is
 * a complete example), validated here; every error names the field, the value and what is allowed.
 */

/** The shipped AWS catalogue's instance types, with their GPUs (for MIG: which types have a GPU that can be partitioned). */
const AWS_TYPES = awsShippedCatalog().instanceTypes;
const AWS_GPU_TYPES: readonly string[] =
  (awsCatalogJson as unknown as { instances?: { instance_type?: string; instanceType?: string }[] }).instances
    ?.map((i) => i.instance_type ?? i.instanceType ?? '')
    .filter(Boolean) ?? [];

/** The shipped catalogue's types by family, sizes smallest first: "g5 (xlarge, 2xlarge, …, 48xlarge)". */
const SIZE_ORDER = (size: string) => (size === 'metal' ? 1e6 : size === 'xlarge' ? 1 : Number.parseInt(size, 10) || 0);
const TYPES_BY_FAMILY = (() => {
  const families = new Map<string, string[]>();
  for (const t of AWS_GPU_TYPES) {
    const [family, size] = t.split('.') as [string, string];
    families.set(family, [...(families.get(family) ?? []), size]);
  }
  return [...families.entries()]
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([family, sizes]) => `${family} (${sizes.sort((a, b) => SIZE_ORDER(a) - SIZE_ORDER(b)).join(', ')})`)
    .join('; ');
})();

/**
 * Availability Zones per region, from the aws-regions package (jsonmaur/aws-regions). Zone letters
 * map to different zones in each account and not every account has every zone (`aws ec2
 * describe-availability-zones` says which yours has); a letter the region does not have at all is
 * a mistake. Regions the package does not list are not checked.
 */
const ZONES_BY_REGION = new Map<string, readonly string[]>(
  (awsRegionsJson as readonly { code: string; zones: readonly string[] }[]).map((r) => [r.code, r.zones]),
);

/** The zone problem of `zone` in `region`, if any. */
function zoneProblem(zone: string, region: string): string | undefined {
  if (!zone.startsWith(region) || !/^[a-z]$/.test(zone.slice(region.length))) return `zone is not in region ${region}`;
  const known = ZONES_BY_REGION.get(region);
  if (!known || known.includes(zone)) return undefined;
  return `${region} has no zone ${zone}; its zones are ${known.join(', ')} (which of them your account has: aws ec2 describe-availability-zones --region ${region})`;
}

const NAME_RE = /^[a-z][a-z0-9-]{1,38}[a-z0-9]$/;
const ZONE_RE = /^[a-z]{2}(-gov)?-[a-z]+-\d[a-z]$/;
/** Interface endpoints a created VPC may have for what its machines call besides S3 (the agent API is a function URL, reached through NAT). */
export const INTERFACE_ENDPOINTS = ['ecr', 'monitoring'] as const;
const REGION_RE = /^[a-z]{2}(-gov)?-[a-z]+-\d$/;

const int = wholeNumber;

/** The retentions CloudWatch Logs takes, in days. */
const LOG_RETENTION_DAYS = [1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653];

export const DLAMI_AL2023_PARAMETER = '/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-amazon-linux-2023/latest/ami-id';

const NodeGroupSchema = z
  .strictObject({
    name: z.string().regex(NAME_RE, { error: 'node group names are 3-40 lower-case letters, digits or "-", starting with a letter' }),
    instanceTypes: z
      .array(
        z.string().refine((t) => AWS_GPU_TYPES.length === 0 || AWS_GPU_TYPES.includes(t), {
          error: (issue) =>
            `not a GPU instance type in the shipped catalogue (data/catalog/aws-gpu-instances.json)${didYouMean(String(issue.input), AWS_GPU_TYPES)}; allowed: ${TYPES_BY_FAMILY}`,
        }),
      )
      .min(1, { error: 'give at least one instance type' })
      .max(20, { error: 'an Auto Scaling group takes at most 20 instance types' }),
    capacityType: z.enum(['spot', 'on-demand', 'reserved'], { error: 'must be "spot", "on-demand" or "reserved"' }),
    /**
     * With capacity type "reserved": the capacity reservation the group's launch template targets, and
     * its kind (an On-Demand Capacity Reservation, or a Capacity Block for ML, launched with the
     * capacity-block market type). The group takes the reservation's one instance type and zone.
     */
    reservation: z
      .strictObject({
        id: z.string().regex(/^cr-[0-9a-f]{8,17}$/, { error: 'capacity reservation ids look like "cr-0123456789abcdef0"' }),
        kind: z.enum(['odcr', 'capacity-block'], { error: 'must be "odcr" or "capacity-block"' }).default('odcr'),
      })
      .optional(),
    zones: z
      .array(z.string().regex(ZONE_RE, { error: 'zones look like "us-east-1a"' }))
      .min(1)
      .optional(),
    subnetIds: z
      .array(z.string().regex(/^subnet-[0-9a-f]{8,17}$/, { error: 'subnet ids look like "subnet-0123456789abcdef0"' }))
      .min(1)
      .optional(),
    minSize: z._default(int(0, 1000), 0),
    maxSize: int(1, 1000),
    ami: z
      .union(
        [
          z.strictObject({ ssmParameter: z.string().startsWith('/', { error: 'an SSM parameter name starts with "/"' }) }),
          z.strictObject({ amiId: z.string().regex(/^ami-[0-9a-f]{8,17}$/, { error: 'AMI ids look like "ami-0123456789abcdef0"' }) }),
        ],
        {
          error: 'must be {"ssmParameter": "/aws/service/..."} or {"amiId": "ami-..."}',
        },
      )
      .default({ ssmParameter: DLAMI_AL2023_PARAMETER }),
    diskGiB: z._default(int(50, 16_384, ' GiB'), 200),
    /**
     * A second volume for Docker's data (images and every container's own files) and the job
     * folders' disks, XFS with project quotas: what jobs write never fills the root volume the agent
     * and the system live on, and the engine holds each container's own files to its share
     * (infra/node-setup.ts `dataVolumeScript`). Absent: all on the root volume, and the agent stops a
     * container that writes past its share.
     */
    dataDiskGiB: z.optional(int(50, 16_384, ' GiB')),
    migEnabled: z._default(trueOrFalse(), false),
    /**
     * An EC2 Auto Scaling warm pool beside the group: `size` machines launched ahead, booted once
     * and kept Stopped (or Hibernated), so a scale-out starts one of them instead of a new machine;
     * while stopped, only their volumes are billed. On-demand groups of one instance type only: per
     * the PutWarmPool API reference, a group with a mixed instances policy, or whose launch template
     * requests Spot Instances, cannot have one.
     */
    warmPool: z
      .strictObject({
        size: int(1, 100),
        state: z.enum(['Stopped', 'Hibernated'], { error: 'must be "Stopped" or "Hibernated"' }).default('Stopped'),
      })
      .optional(),
  })
  .superRefine((g, ctx) => {
    if (g.warmPool) {
      const why =
        g.capacityType === 'spot'
          ? 'it requests Spot Instances'
          : g.capacityType === 'reserved'
            ? 'its machines are its reservation’s'
            : g.instanceTypes.length > 1
              ? `its ${g.instanceTypes.length} instance types make it a mixed instances group`
              : undefined;
      if (why)
        ctx.addIssue({
          code: 'custom',
          path: ['warmPool'],
          message: `a warm pool is for an on-demand group of one instance type, and this group cannot have one: ${why} (the PutWarmPool API refuses a group with a mixed instances policy or one that requests Spot Instances). Give the warm pool to an on-demand group of one type`,
          input: g.warmPool,
        });
      else if (g.warmPool.size > g.maxSize)
        ctx.addIssue({
          code: 'custom',
          path: ['warmPool', 'size'],
          message: `must be at most maxSize (${g.maxSize}): a warm machine is one the group may start`,
          input: g.warmPool.size,
        });
    }
    if (g.capacityType === 'reserved') {
      if (!g.reservation)
        ctx.addIssue({
          code: 'custom',
          path: ['reservation'],
          message: 'a reserved group names the reservation it launches into: {"id": "cr-…", "kind": "odcr" | "capacity-block"}',
          input: g.reservation,
        });
      if (g.instanceTypes.length !== 1)
        ctx.addIssue({
          code: 'custom',
          path: ['instanceTypes'],
          message: 'a reserved group has one instance type: its reservation’s',
          input: g.instanceTypes,
        });
      if ((g.zones ?? g.subnetIds ?? []).length !== 1)
        ctx.addIssue({
          code: 'custom',
          path: [g.zones ? 'zones' : 'subnetIds'],
          message: 'a reserved group is in one zone: its reservation’s (one zone, or one subnet)',
          input: g.zones ?? g.subnetIds,
        });
    } else if (g.reservation)
      ctx.addIssue({
        code: 'custom',
        path: ['reservation'],
        message: 'only a group with capacityType "reserved" launches into a reservation',
        input: g.reservation,
      });
    if (g.maxSize < g.minSize)
      ctx.addIssue({ code: 'custom', path: ['maxSize'], message: `must be at least minSize (${g.minSize})`, input: g.maxSize });
    // MIG only where the GPU has it (core/mig.ts, from NVIDIA's MIG user guide), by each type's GPU in the shipped catalogue.
    if (g.migEnabled) {
      const without = g.instanceTypes.flatMap((t) => {
        const model = AWS_TYPES.get(t)?.gpuModel;
        return model !== undefined && MIG_GPUS[model] === undefined ? [`${t} has ${model}`] : [];
      });
      if (without.length > 0)
        ctx.addIssue({
          code: 'custom',
          path: ['migEnabled'],
          message: `MIG needs GPUs that have it (${Object.keys(MIG_GPUS).join(', ')}): ${without.join('; ')}. Set migEnabled to false, or use types with those GPUs (such as p4d.24xlarge, p5.48xlarge)`,
          input: g.migEnabled,
        });
    }
    if (!g.zones === !g.subnetIds)
      ctx.addIssue({
        code: 'custom',
        path: ['zones'],
        message: 'give either zones (in the VPC the stack creates) or subnetIds (in an existing VPC), not both and not neither',
        input: g.zones,
      });
  });

const TeamSchema = z.strictObject({
  name: z
    .string()
    .regex(/^[a-z][a-z0-9-]{0,30}[a-z0-9]$/, { error: 'team names are 2-32 lower-case letters, digits or "-", starting with a letter' }),
  budgetUsd: z
    .number({ error: 'must be a number of dollars' })
    .positive({ error: 'must be more than 0' })
    .max(100_000_000, { error: 'must be at most 100000000' }),
  period: z.enum(['monthly', 'weekly', 'daily'], { error: 'must be "monthly", "weekly" or "daily"' }).default('monthly'),
  action: z.enum(['alert', 'spot-only', 'hold', 'stop'], { error: 'must be "alert", "spot-only", "hold" or "stop"' }).default('hold'),
  alertAtPct: z
    .array(int(1, 100, '%'))
    .min(1)
    .max(10)
    .default([80, 100]),
  maxGpus: z.optional(int(1, 100_000)),
  weight: z
    .number({ error: 'must be a number above 0 and at most 1000 (a share relative to the other teams, e.g. 2)' })
    .positive({ error: 'must be more than 0' })
    .max(1000, { error: 'must be at most 1000' })
    .default(1),
  /**
   * Whether the team's own role may tag its queue, i.e. set its own budget, GPU cap and weight.
   * Default false: the platform keeps the purse, and only the admin role tags the team's queue.
   */
  setsOwnBudget: z.boolean({ error: 'must be true (the team sets its own budget) or false (only the admin role does)' }).default(false),
});

const ExistingVpcSchema = z.strictObject({
  existing: z.strictObject({
    vpcId: z.string().regex(/^vpc-[0-9a-f]{8,17}$/, { error: 'VPC ids look like "vpc-0123456789abcdef0"' }),
    privateSubnetIds: z
      .array(z.string().regex(/^subnet-[0-9a-f]{8,17}$/, { error: 'subnet ids look like "subnet-0123456789abcdef0"' }))
      .min(1, { error: 'give at least one private subnet, e.g. ["subnet-0123456789abcdef0"]' }),
    zones: z
      .array(z.string().regex(ZONE_RE, { error: 'zones look like "us-east-1a"' }))
      .min(1, { error: 'give the zones of the subnets, e.g. ["us-east-1a"]' }),
    s3Path: z.enum(S3_PATHS, {
      error: `say how the machines reach S3 (every checkpoint byte takes this path): "gateway-endpoint" with the endpoint's "s3EndpointId" (free), "interface-endpoint" with its "s3EndpointId" ($0.01/GB), or "nat" (NAT data processing, $0.045/GB; docs/getting-started.md prices each)`,
    }),
    s3EndpointId: z
      .string()
      .regex(/^vpce-[0-9a-f]{8,17}$/, { error: 'VPC endpoint ids look like "vpce-0123456789abcdef0"' })
      .optional(),
  }),
});

/** Who may reach a port of the machines: a CIDR block, or a security group. */
function allowFromSchema(who: string) {
  return z.union(
    [
      z.strictObject({
        cidr: z
          .string()
          .regex(/^\d{1,3}(\.\d{1,3}){3}\/(8|9|[12]\d|3[0-2])$/, { error: 'a CIDR block no wider than /8, e.g. "10.0.0.0/16"' }),
      }),
      z.strictObject({
        securityGroupId: z.string().regex(/^sg-[0-9a-f]{8,17}$/, { error: 'security group ids look like "sg-0123456789abcdef0"' }),
      }),
    ],
    { error: `must be {"cidr": "10.0.0.0/16"} or {"securityGroupId": "sg-…"}: ${who}` },
  );
}

export const ConfigSchema = z
  .strictObject({
    $schema: z.string().optional(),
    stackName: z
      .string()
      .regex(/^[A-Za-z][A-Za-z0-9-]{0,127}$/, { error: 'CloudFormation stack names are letters, digits and "-", starting with a letter' })
      .default('GpuFleet'),
    region: z.string().regex(REGION_RE, { error: 'regions look like "us-east-1"' }),
    account: z
      .string()
      .regex(/^\d{12}$/, { error: 'an AWS account id is 12 digits' })
      .optional(),
    vpc: z.union(
      [
        z.strictObject({
          create: z.strictObject({
            cidr: z
              .string()
              .regex(/^\d{1,3}(\.\d{1,3}){3}\/(1[6-9]|2[0-4])$/, { error: 'a CIDR block from /16 to /24, e.g. "10.40.0.0/16"' }),
            zones: z
              .array(z.string().regex(ZONE_RE, { error: 'zones look like "us-east-1a"' }))
              .min(1)
              .max(6),
            natGateways: z.optional(int(1, 6, ' NAT gateways')),
            interfaceEndpoints: z.array(z.enum(INTERFACE_ENDPOINTS)).max(INTERFACE_ENDPOINTS.length).optional(),
          }),
        }),
        ExistingVpcSchema,
      ],
      {
        // An existing VPC's own problem (its S3 path, above all) is named as such; anything else gets the two forms.
        error: (iss) => {
          const input = iss.input as { existing?: unknown } | undefined;
          const own =
            input && typeof input === 'object' && 'existing' in input ? ExistingVpcSchema.safeParse(input).error?.issues[0] : undefined;
          return own
            ? `${own.path.map(String).join('.')}: ${own.message}`
            : 'must be {"create": {"cidr", "zones"}} or {"existing": {"vpcId", "privateSubnetIds", "zones", "s3Path"}}';
        },
      },
    ),
    nodeGroups: z.array(NodeGroupSchema).min(1, { error: 'give at least one node group' }).max(50),
    teams: z.array(TeamSchema).min(1, { error: 'give at least one team' }).max(200),
    /**
     * People and their roles: who may assume the team roles and the admin role the stack makes.
     * Default: the stack's own account, whose IAM policies (or SSO permission sets) then say which
     * person assumes which role.
     */
    people: z
      .strictObject({
        assumeRoleFrom: z
          .array(
            z.string().regex(/^(\d{12}|arn:aws[a-z-]*:(iam|sts)::\d{12}:[\w+=,.@/-]+)$/, {
              error: 'must be an AWS account id (12 digits) or an IAM principal ARN',
            }),
          )
          .max(20)
          .default([]),
      })
      .default({ assumeRoleFrom: [] }),
    policy: z
      .strictObject({
        reconcileIntervalSec: z._default(
          int(60, 3600, ' s').check(
            z.refine((s) => s % 60 === 0, {
              error: 'must be a whole number of minutes (a multiple of 60): the schedule runs by the minute',
            }),
          ),
          60,
        ),
        idleCooldownSec: z._default(int(0, 86_400, ' s'), 180),
        noticeMarginSec: z._default(int(0, 110, ' s'), 20),
      })
      .default({ reconcileIntervalSec: 60, idleCooldownSec: 180, noticeMarginSec: 20 }),
    checkpoints: z
      .strictObject({
        bucketName: z
          .string()
          .regex(/^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/, { error: 'S3 bucket names are 3-63 lower-case letters, digits, "." or "-"' })
          .optional(),
        expireAfterDays: z._default(int(1, 3650, ' days'), 30),
      })
      .default({ expireAfterDays: 30 }),
    alarmEmail: z.email({ error: 'must be an e-mail address' }).optional(),
    /**
     * Prometheus: the agents serve /metrics (the DCGM exporter's names) on `port`, reachable from
     * `allowFrom` only (a CIDR, or the security group of the Prometheus servers). Off unless given.
     */
    prometheus: z
      .strictObject({
        port: z._default(int(1024, 65_535), 9400),
        allowFrom: allowFromSchema('who may scrape'),
      })
      .optional(),
    /**
     * The nodes' own dcgm-exporter (e.g. "http://localhost:9400/metrics"), when the machine image
     * runs one: the agents read it for the utilisation of MIG slices, which nvidia-smi does not give.
     */
    dcgmExporterUrl: z
      .string()
      .regex(/^http:\/\/(localhost|127\.0\.0\.1)(:\d{1,5})?\/[A-Za-z0-9._~/-]*$/, {
        error: 'must be an http URL on the machine itself, e.g. "http://localhost:9400/metrics"',
      })
      .optional(),
    /** The jobs' output in CloudWatch Logs: how long it is kept. */
    jobLogs: z
      .strictObject({
        retentionDays: z
          .number()
          .refine((d) => LOG_RETENTION_DAYS.includes(d), {
            error: `must be one of CloudWatch Logs' retentions: ${LOG_RETENTION_DAYS.join(', ')} days`,
          })
          .default(30),
      })
      .default({ retentionDays: 30 }),
    /**
     * Savings Plans and Reserved Instances, declared per instance family (gpu-fleet does not read
     * them from the account): on-demand usage of the family inside the hourly commitment costs the
     * discounted rate, usage beyond it the list price.
     */
    discounts: z
      .array(
        z.strictObject({
          family: z
            .string()
            .regex(/^[a-z][a-z0-9-]{0,15}$/, { error: 'an instance family, the part of the type before the dot, e.g. "p4d"' }),
          discountPct: z
            .number({ error: 'must be a percentage' })
            .gt(0, { error: 'must be above 0' })
            .lt(100, { error: 'must be under 100' }),
          commitmentUsdPerHour: z
            .number({ error: 'must be dollars per hour at the discounted rate' })
            .positive({ error: 'must be more than 0' })
            .max(1_000_000),
          name: z.string().max(128).optional(),
        }),
      )
      .max(50)
      .refine((ds) => new Set(ds.map((d) => d.family)).size === ds.length, { error: 'give one plan per instance family' })
      .optional(),
    /**
     * Pairs of teams whose host-network work (gang ranks, service replicas) may share a machine.
     * Any other two teams' host-network jobs never do: a container on the machine's own network
     * reaches what the machine reaches. Default: none.
     */
    hostNetworkSharing: z
      .array(z.tuple([z.string(), z.string()]), { error: 'must be a list of team pairs, e.g. [["nlp", "speech"]]' })
      .max(200)
      .optional(),
    /**
     * Which images specs may name: the registries (`host[:port]`, `docker.io` for Docker Hub) and the
     * repositories only some teams may run. A registry named by an address, loopback or the
     * machine itself is refused whatever this says. Default: any registry named by a DNS name.
     */
    images: z.optional(ImagePolicySchema),
    /**
     * The ECR repositories of the account the machines may pull job images from, by name or by a
     * prefix ending in `*` (`ml/*`). The node role names exactly these; without the field it pulls
     * from none (images from other registries are pulled as before). Default: none.
     */
    ecrRepositories: z
      .array(
        z.string().regex(/^(?:[a-z0-9]+(?:[._-][a-z0-9]+)*\/)*(?:[a-z0-9]+(?:[._-][a-z0-9]+)*|\*)$/, {
          error:
            'must be an ECR repository name (lowercase letters, digits, ".", "_", "-", "/"-separated) or every repository under a path, ending in "*": "ml/trainer", "ml/*"',
        }),
        { error: 'must be a list of ECR repository names or prefixes, e.g. ["ml/*"]' },
      )
      .max(100)
      .optional(),
    /**
     * Which capacity reservations gpu-fleet reads (beside those its reserved groups launch into), as
     * Karpenter's capacityReservationSelectorTerms: any term matches, a reservation id or every tag
     * of a term. Default: those tagged gpu-fleet:managed=true.
     */
    reservations: z
      .strictObject({
        selector: z
          .array(
            z.union(
              [
                z.strictObject({
                  id: z.string().regex(/^cr-[0-9a-f]{8,17}$/, { error: 'capacity reservation ids look like "cr-0123456789abcdef0"' }),
                }),
                z.strictObject({
                  tags: z
                    .record(z.string().min(1).max(128), z.string().max(256))
                    .refine((t) => Object.keys(t).length > 0, { error: 'give at least one tag' }),
                }),
              ],
              { error: 'each term is {"id": "cr-…"} or {"tags": {"key": "value"}}' },
            ),
          )
          .min(1)
          .max(50),
      })
      .optional(),
    /**
     * Services run by the fleet, each fronted by a load balancer target group the platform team
     * already has (IP targets, the service's port): service id (team.name) → target group ARN.
     */
    services: z
      .strictObject({
        targetGroups: z
          .record(
            z.string(),
            z.string().regex(/^arn:aws[a-z-]*:elasticloadbalancing:[a-z0-9-]+:\d{12}:targetgroup\/[A-Za-z0-9-]{1,32}\/[0-9a-f]{16}$/, {
              error:
                'must be a target group ARN, e.g. "arn:aws:elasticloadbalancing:us-west-2:123456789012:targetgroup/gf-nlp-chat/50dc6c495c0c9188"',
            }),
          )
          .superRefine((groups, ctx) => {
            for (const id of Object.keys(groups))
              if (!/^[a-z0-9][a-z0-9-]{0,31}\.[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/.test(id))
                ctx.addIssue({
                  code: 'custom',
                  path: [id],
                  message: `"${id}" is not a service id: services are known as team.name, e.g. "nlp.chat"`,
                  input: id,
                });
          })
          .default({}),
        /**
         * The ports replicas behind `targetGroups` listen on, each with who reaches it (the load
         * balancer's security group, or its subnets): the machines let only those in on that port,
         * never the fleet's other machines. Without it, such a port is open to every machine of
         * the fleet (the security group's rule between machines cannot leave out a port it does not know).
         */
        replicaPorts: z
          .array(z.strictObject({ port: int(1024, 65_535), allowFrom: allowFromSchema('who reaches the replicas (the load balancer)') }))
          .max(20)
          .optional(),
        /**
         * A load balancer the stack creates (internal unless `internetFacing`), with a listener per
         * service on its own port (HTTPS with `certificateArn`) forwarding to the service's target
         * group of IP targets, health-checked on its readiness path.
         */
        loadBalancer: z
          .strictObject({
            internetFacing: z.boolean().default(false),
            /** Who may reach the listeners (default: the VPC). */
            allowFrom: z
              .string()
              .regex(/^\d{1,3}(\.\d{1,3}){3}\/\d{1,2}$/, { error: 'a CIDR block, e.g. "10.0.0.0/16"' })
              .optional(),
            certificateArn: z
              .string()
              .regex(/^arn:aws[a-z-]*:acm:[a-z0-9-]+:\d{12}:certificate\/[0-9a-f-]{36}$/, { error: 'an ACM certificate ARN' })
              .optional(),
            services: z
              .array(
                z.strictObject({
                  id: z.string().regex(/^[a-z0-9][a-z0-9-]{0,31}\.[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/, {
                    error: 'services are known as team.name, e.g. "nlp.chat"',
                  }),
                  port: z.number().int().min(1).max(65_535),
                  listenerPort: z.number().int().min(1).max(65_535),
                  healthCheckPath: z
                    .string()
                    .regex(/^\/[!-~]{0,255}$/, { error: 'an HTTP path starting with "/"' })
                    .default('/health'),
                }),
              )
              .min(1)
              .max(20),
          })
          .optional(),
      })
      .superRefine((svc, ctx) => {
        if (Object.keys(svc.targetGroups).length > 0 && !svc.replicaPorts?.length)
          ctx.addIssue({
            code: 'custom',
            path: ['replicaPorts'],
            message:
              'give the ports the replicas behind targetGroups listen on, each with who reaches it (your load balancer\'s security group or subnets), e.g. [{"port": 8000, "allowFrom": {"securityGroupId": "sg-…"}}]: the machines let only those in, and never the fleet\'s other machines',
            input: svc.replicaPorts,
          });
        const ports = new Set<number>();
        (svc.loadBalancer?.services ?? []).forEach((x, i) => {
          if (svc.targetGroups[x.id])
            ctx.addIssue({
              code: 'custom',
              path: ['loadBalancer', 'services', i, 'id'],
              message: `${x.id} already has a target group in targetGroups`,
              input: x.id,
            });
          if (ports.has(x.listenerPort))
            ctx.addIssue({
              code: 'custom',
              path: ['loadBalancer', 'services', i, 'listenerPort'],
              message: 'each service needs its own listener port',
              input: x.listenerPort,
            });
          ports.add(x.listenerPort);
        });
      })
      .optional(),
    gcp: z
      .strictObject({
        projects: z
          .array(
            z.strictObject({
              projectId: z
                .string()
                .regex(/^[a-z][a-z0-9-]{4,28}[a-z0-9]$/, { error: 'GCP project ids are 6-30 lower-case letters, digits or "-"' }),
              zones: z.array(z.string().regex(/^[a-z]+-[a-z]+\d-[a-z]$/, { error: 'GCP zones look like "us-central1-a"' })).min(1),
            }),
          )
          .min(1),
        credentialsSecretName: z.string().regex(/^[A-Za-z0-9/_+=.@-]{1,512}$/, { error: 'a Secrets Manager secret name' }),
        /**
         * The service accounts the fleet's GCP machines run as (e-mail addresses). With them, the
         * agent API takes calls from GCP machines on a second URL, each identified by its instance
         * identity token (cloud/gcp/identity-token.ts): no AWS key on a GCP machine's disk.
         */
        agentServiceAccounts: z
          .array(
            z.string().regex(/^[a-z0-9-]+@[a-z0-9-]+\.iam\.gserviceaccount\.com$/, {
              error: 'a service account e-mail address, e.g. "gpu-fleet-node@my-project.iam.gserviceaccount.com"',
            }),
          )
          .min(1)
          .max(20)
          .optional(),
        checkpointRoots: z
          .record(
            z.string().regex(/^[a-z]+-[a-z]+\d$/, { error: 'GCP regions look like "us-central1"' }),
            z.string().regex(GCS_ROOT_RE, {
              error: 'a Cloud Storage checkpoint root is gs://bucket/prefix/ (ending in "/")',
            }),
          )
          .optional(),
      })
      .superRefine((g, ctx) => {
        const regions = new Set(g.projects.flatMap((p) => p.zones.map((z) => regionOfZone('gcp', z))));
        for (const region of Object.keys(g.checkpointRoots ?? {}))
          if (!regions.has(region))
            ctx.addIssue({
              code: 'custom',
              path: ['checkpointRoots', region],
              message: `no project has a zone in ${region} (${[...regions].join(', ')}): a root is for the machines of a region the fleet uses`,
              input: region,
            });
      })
      .optional(),
  })
  .superRefine((c, ctx) => {
    const names = new Set<string>();
    c.nodeGroups.forEach((g, i) => {
      if (names.has(g.name))
        ctx.addIssue({ code: 'custom', path: ['nodeGroups', i, 'name'], message: 'node group names must be unique', input: g.name });
      names.add(g.name);
      const vpcZones = 'create' in c.vpc ? c.vpc.create.zones : c.vpc.existing.zones;
      for (const z of g.zones ?? []) {
        if (!vpcZones.includes(z))
          ctx.addIssue({
            code: 'custom',
            path: ['nodeGroups', i, 'zones'],
            message: `zone is not one of the VPC's zones (${vpcZones.join(', ')})`,
            input: z,
          });
      }
      if ('create' in c.vpc && g.subnetIds)
        ctx.addIssue({
          code: 'custom',
          path: ['nodeGroups', i, 'subnetIds'],
          message: 'subnetIds need an existing VPC; with "vpc.create" give zones',
          input: g.subnetIds,
        });
    });
    if ('existing' in c.vpc) {
      const e = c.vpc.existing;
      if (e.s3Path !== 'nat' && !e.s3EndpointId)
        ctx.addIssue({
          code: 'custom',
          path: ['vpc', 'existing', 's3EndpointId'],
          message: `name the S3 ${e.s3Path} the subnets' route tables use, e.g. "vpce-0123456789abcdef0" (or say "s3Path": "nat")`,
          input: e.s3EndpointId,
        });
      if (e.s3Path === 'nat' && e.s3EndpointId)
        ctx.addIssue({
          code: 'custom',
          path: ['vpc', 'existing', 's3EndpointId'],
          message: 'an endpoint id goes with "s3Path": "gateway-endpoint" or "interface-endpoint", not "nat"',
          input: e.s3EndpointId,
        });
    } else if (c.vpc.create.natGateways !== undefined && c.vpc.create.natGateways > c.vpc.create.zones.length)
      ctx.addIssue({
        code: 'custom',
        path: ['vpc', 'create', 'natGateways'],
        message: `at most one NAT gateway per zone (${c.vpc.create.zones.length} zones)`,
        input: c.vpc.create.natGateways,
      });
    const vpcZones = 'create' in c.vpc ? c.vpc.create.zones : c.vpc.existing.zones;
    vpcZones.forEach((z, i) => {
      const problem = zoneProblem(z, c.region);
      if (problem)
        ctx.addIssue({ code: 'custom', path: ['vpc', 'create' in c.vpc ? 'create' : 'existing', 'zones', i], message: problem, input: z });
    });
    const teams = new Set<string>();
    c.teams.forEach((t, i) => {
      if (teams.has(t.name))
        ctx.addIssue({ code: 'custom', path: ['teams', i, 'name'], message: 'team names must be unique', input: t.name });
      teams.add(t.name);
    });
    // A pair of teams sharing host-network machines names two different teams the config has.
    (c.hostNetworkSharing ?? []).forEach(([a, b], i) => {
      for (const [k, team] of [a, b].entries())
        if (!teams.has(team))
          ctx.addIssue({
            code: 'custom',
            path: ['hostNetworkSharing', i, k],
            message: `team "${team}" is not in teams (${[...teams].join(', ')})`,
            input: team,
          });
      if (a === b)
        ctx.addIssue({ code: 'custom', path: ['hostNetworkSharing', i], message: 'a pair names two different teams', input: [a, b] });
    });
    // A service belongs to a team (team.name): one the config does not have has no queue to take its spec, and no budget.
    const known = [...teams].join(', ');
    const teamOf = (id: string) => id.split('.')[0]!;
    for (const id of Object.keys(c.services?.targetGroups ?? {}))
      if (!teams.has(teamOf(id)))
        ctx.addIssue({
          code: 'custom',
          path: ['services', 'targetGroups', id],
          message: `service ${id} belongs to team "${teamOf(id)}", which is not in teams (${known})`,
          input: id,
        });
    (c.services?.loadBalancer?.services ?? []).forEach((x, i) => {
      if (!teams.has(teamOf(x.id)))
        ctx.addIssue({
          code: 'custom',
          path: ['services', 'loadBalancer', 'services', i, 'id'],
          message: `service ${x.id} belongs to team "${teamOf(x.id)}", which is not in teams (${known})`,
          input: x.id,
        });
    });
  });

describeFields(ConfigSchema, {
  $schema: 'a JSON Schema reference for editors; ignored',
  stackName: "the CloudFormation stack's name; queues are named after it (gpufleet-team-<team> for GpuFleet)",
  region: 'the AWS region the stack is deployed to',
  account: 'the AWS account id (when the CDK environment should be pinned)',
  vpc: 'the network: a VPC the stack creates, or an existing one',
  'vpc.create': 'a VPC the stack creates, with private subnets in the zones given',
  'vpc.create.cidr': "the VPC's address range",
  'vpc.create.zones': 'the zones it has subnets in',
  'vpc.create.natGateways':
    "NAT gateways, one per zone from the first (default: every zone's own, so a zone's failure cuts off only its machines; each is $0.045 an hour)",
  'vpc.create.interfaceEndpoints':
    'interface endpoints for the services the machines call besides S3 (ecr: ECR API and registry; monitoring: CloudWatch metrics), $0.01 an hour per zone each and $0.01/GB, instead of NAT at $0.045/GB',
  'vpc.existing': 'an existing VPC, by id and private subnets',
  'vpc.existing.vpcId': "the VPC's id",
  'vpc.existing.privateSubnetIds': 'the private subnets the machines and functions go in',
  'vpc.existing.zones': 'the zones of those subnets',
  'vpc.existing.s3Path':
    'how the machines reach S3, where every checkpoint byte goes: gateway-endpoint (free), interface-endpoint ($0.01/GB) or nat ($0.045/GB)',
  'vpc.existing.s3EndpointId': "the S3 endpoint on the subnets' route tables (with gateway-endpoint or interface-endpoint)",
  nodeGroups: 'the GPU node groups: one EC2 Auto Scaling group each, sized by reconcile only',
  'nodeGroups[].name': "the group's name (unique)",
  'nodeGroups[].instanceTypes': 'the GPU instance types it may launch (from the shipped catalogue); several make a mixed-instances group',
  'nodeGroups[].capacityType': '"spot", "on-demand", or "reserved" (launches into one capacity reservation)',
  'nodeGroups[].reservation': 'for "reserved": the reservation the launch template targets',
  'nodeGroups[].reservation.id': "the reservation's id",
  'nodeGroups[].reservation.kind': '"odcr" (On-Demand Capacity Reservation) or "capacity-block" (Capacity Block for ML)',
  'nodeGroups[].zones': 'the zones it launches in (in a VPC the stack creates); give zones or subnetIds',
  'nodeGroups[].subnetIds': 'the subnets it launches in (in an existing VPC)',
  'nodeGroups[].minSize': 'machines kept however idle',
  'nodeGroups[].maxSize': 'the most machines it may have',
  'nodeGroups[].ami': 'the machine image: an SSM parameter (the Deep Learning Base AMI by default) or an AMI id',
  'nodeGroups[].ami.ssmParameter': 'an SSM parameter holding the AMI id, read at deploy',
  'nodeGroups[].ami.amiId': 'an AMI id',
  'nodeGroups[].diskGiB': "each machine's root volume (encrypted)",
  'nodeGroups[].dataDiskGiB':
    "a second volume (encrypted) for Docker's data and the jobs' folders, with a size limit on each container's own files (none by default)",
  'nodeGroups[].migEnabled': 'runs the GPUs in MIG mode (only GPUs that have MIG: A100, H100, H200, B200)',
  'nodeGroups[].warmPool':
    "machines prepared ahead (booted once, the services' images pulled) and kept stopped beside the group (on-demand groups of one type only)",
  'nodeGroups[].warmPool.size': 'how many warm machines it keeps',
  'nodeGroups[].warmPool.state':
    '"Stopped" (only the volumes are billed) or "Hibernated" (memory kept on the volume; the type must support hibernation)',
  teams: "the teams: a queue each, tagged with the team's initial budget (the tags are read live afterwards)",
  'teams[].name': "the team's id, in its queue's name",
  'teams[].budgetUsd': 'the budget for one period, dollars',
  'teams[].period': 'the budget period, in UTC',
  'teams[].action': 'when the budget is spent: alert (carry on), spot-only, hold (no new work), stop (checkpoint and hold running work)',
  'teams[].alertAtPct': 'alert at these percentages of the budget',
  'teams[].maxGpus': 'the most GPUs the team may hold at once',
  'teams[].weight': "the team's share of GPUs when teams compete",
  'teams[].setsOwnBudget':
    "whether the team's own role may tag its queue, i.e. set its own budget, GPU cap and weight (default false: only the stack's admin role does)",
  people: "who may assume the stack's team roles and its admin role (docs/concepts.md, People and roles)",
  'people.assumeRoleFrom':
    "AWS account ids or IAM principal ARNs trusted to assume the roles (default: the stack's own account, whose IAM policies or SSO permission sets then grant it)",
  policy: "the control loop's timing",
  'policy.reconcileIntervalSec': 'how often reconcile runs (it also runs soon after new work or lost capacity)',
  'policy.idleCooldownSec': 'how long an empty machine is kept before it is let go',
  'policy.noticeMarginSec': 'how much of a spot notice is kept back for the checkpoint upload',
  checkpoints: "the checkpoint bucket's settings",
  'checkpoints.bucketName': "the bucket's name (one is generated when left out)",
  'checkpoints.expireAfterDays': 'checkpoints of finished jobs are deleted after this many days (a live job keeps its own)',
  alarmEmail: "where the stack's alarms are sent",
  prometheus: 'serve /metrics (dcgm-exporter names) on every machine to the scrapers allowed',
  'prometheus.port': 'the port /metrics listens on',
  'prometheus.allowFrom': 'who may scrape: a CIDR or the security group of the Prometheus servers',
  'prometheus.allowFrom.cidr': 'the addresses the scrapers come from',
  'prometheus.allowFrom.securityGroupId': "the Prometheus servers' security group",
  dcgmExporterUrl: "the machines' own dcgm-exporter, read for the utilisation of MIG slices",
  jobLogs: "the jobs' output in CloudWatch Logs",
  'jobLogs.retentionDays': 'how long it is kept',
  hostNetworkSharing:
    "pairs of teams whose host-network work (gang ranks, service replicas) may share a machine (default: none; each team's alone)",
  images: 'which images specs may name (default: any registry named by a DNS name; never an address or the machine itself)',
  'images.registries': 'the registries specs may name: host[:port], "docker.io" for Docker Hub',
  'images.teamRepositories': 'repositories only the named teams may run',
  'images.teamRepositories[].repositories': 'registry/path, a trailing "*" for every repository under a prefix',
  'images.teamRepositories[].teams': 'the teams that may run them',
  'images.rootTeams':
    'teams whose specs may run an image whose user is root as root (container.runAsRoot); others run such images as uid 65534',
  ecrRepositories:
    'the ECR repositories of the account the machines may pull job images from, names or prefixes ending in "*" (default: none)',
  discounts: 'Savings Plans and Reserved Instances, declared per instance family (not read from the account)',
  'discounts[].family': 'the instance family (the part of the type before the dot)',
  'discounts[].discountPct': 'the discount on the on-demand price',
  'discounts[].commitmentUsdPerHour': 'the hourly commitment, at the discounted rate',
  'discounts[].name': 'a name for reports',
  reservations: 'which capacity reservations reconcile reads beside those its reserved groups launch into',
  'reservations.selector': 'terms, any of which matches: a reservation id, or tags it has all of',
  'reservations.selector[]': 'one term',
  'reservations.selector[].id': 'a reservation, by id',
  'reservations.selector[].tags': 'every reservation with all these tags',
  services: "the services' front door: a load balancer the stack creates, or target groups you have",
  'services.targetGroups': 'service id (team.name) → the ARN of its target group (IP targets on its port)',
  'services.replicaPorts': 'the ports replicas behind targetGroups listen on, each with who reaches it: no other machine of the fleet does',
  'services.replicaPorts[].port': "a replica's port (its spec's service.port)",
  'services.replicaPorts[].allowFrom': "who reaches it: the load balancer's security group, or its subnets",
  'services.replicaPorts[].allowFrom.cidr': 'the addresses the load balancer comes from',
  'services.replicaPorts[].allowFrom.securityGroupId': "the load balancer's security group",
  'services.loadBalancer': 'an Application Load Balancer the stack creates, a listener per service',
  'services.loadBalancer.internetFacing': 'internet-facing rather than internal (needs a VPC the stack creates)',
  'services.loadBalancer.allowFrom': 'who may reach the listeners (default: the VPC)',
  'services.loadBalancer.certificateArn': 'an ACM certificate: the listeners speak HTTPS',
  'services.loadBalancer.services': 'the services it fronts',
  'services.loadBalancer.services[].id': 'the service (team.name)',
  'services.loadBalancer.services[].port': "the service's port on the machines",
  'services.loadBalancer.services[].listenerPort': 'the port its listener takes on the load balancer',
  'services.loadBalancer.services[].healthCheckPath': "the service's readiness path",
  gcp: 'GCP capacity in the same fleet: managed instance groups of these projects',
  'gcp.projects': 'the projects, each with its zones',
  'gcp.projects[].projectId': "the project's id",
  'gcp.projects[].zones': 'the zones its groups are in',
  'gcp.credentialsSecretName': "the Secrets Manager secret holding the service account's JSON key",
  'gcp.agentServiceAccounts':
    'the service accounts the GCP machines run as: their agents call the agent API with their instance identity tokens (none: GCP agents need AWS credentials of their own)',
  'gcp.checkpointRoots':
    'a Cloud Storage checkpoint root per GCP region (`{"us-central1": "gs://bucket/checkpoints/"}`): that region\'s machines save there, so their bytes stay in the region; without it they save into the S3 bucket and pay internet egress both ways',
});

export type GpuFleetConfig = z.output<typeof ConfigSchema>;
export type NodeGroupConfig = GpuFleetConfig['nodeGroups'][number];
export type TeamConfig = GpuFleetConfig['teams'][number];

export { ConfigError };

/** Validates a config value; throws ConfigError listing every problem (field: what is wrong; got value). */
export function parseConfig(input: unknown, source = 'config'): GpuFleetConfig {
  const result = ConfigSchema.safeParse(input, { reportInput: true });
  if (result.success) return result.data;
  throw new ConfigError(
    source,
    result.error.issues.map((issue) => describe(issue, input)),
  );
}

export function loadConfig(path: string): GpuFleetConfig {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (error) {
    throw new ConfigError(path, [`cannot read the file: ${messageOf(error)}`]);
  }
  let value: unknown;
  try {
    value = parseJson(text);
  } catch (error) {
    throw new ConfigError(path, [`not valid JSON: ${messageOf(error)}`]);
  }
  return parseConfig(value, path);
}

function describe(issue: z.core.$ZodIssue, input: unknown): string {
  const where = issue.path.length > 0 ? pathOf(issue.path, input) : '(config)';
  let message = LIBRARY_MESSAGE.test(issue.message) ? plainMessage(issue) : issue.message;
  if (issue.code === 'unrecognized_keys') {
    message = unknownFieldsMessage(issue.keys, fieldsAt(ConfigSchema, issue.path, input));
  } else if (issue.code === 'invalid_type' && issue.input === undefined) message = `is required; ${issue.message}`;
  const got = 'input' in issue && issue.input !== undefined && issue.code !== 'unrecognized_keys' ? `; got ${short(issue.input)}` : '';
  return `${where}: ${message}${got}`;
}

/** zod's own English messages ("Invalid input: expected array, received string"), said again in gpu-fleet's words. */
const LIBRARY_MESSAGE = /^(Invalid|Too small|Too big)\b/;

/**
 * A library message said as the schema's own are: what the field must be, and an example, the
 * value the shipped example config (infra/config.example.json) gives a field of that name.
 */
function plainMessage(issue: z.core.$ZodIssue): string {
  const field = [...issue.path].reverse().find((k): k is string => typeof k === 'string');
  const example = field !== undefined ? EXAMPLES.get(field) : undefined;
  const eg = example !== undefined ? `, e.g. ${example}` : '';
  const entries = (n: number | bigint) => `${n} entr${Number(n) === 1 ? 'y' : 'ies'}`;
  switch (issue.code) {
    case 'invalid_type':
      return `must be ${TYPE_WORDS[issue.expected] ?? issue.expected}${eg}`;
    case 'too_small':
      if (issue.origin === 'array' || issue.origin === 'set') return `give at least ${entries(issue.minimum)}${eg}`;
      if (issue.origin === 'string') return `must be at least ${issue.minimum} characters${eg}`;
      return `must be ${issue.inclusive ? 'at least' : 'above'} ${issue.minimum}${eg}`;
    case 'too_big':
      if (issue.origin === 'array' || issue.origin === 'set') return `give at most ${entries(issue.maximum)}`;
      if (issue.origin === 'string') return `must be at most ${issue.maximum} characters`;
      return `must be ${issue.inclusive ? 'at most' : 'below'} ${issue.maximum}`;
    case 'invalid_format':
      return `is not in the form this field takes${issue.format === 'regex' && issue.pattern ? ` (${issue.pattern})` : ''}${eg}`;
    case 'invalid_value':
      return `must be ${issue.values.map((v) => JSON.stringify(v)).join(' or ')}`;
    default:
      return `is not what this field takes${eg}`;
  }
}

const TYPE_WORDS: Readonly<Record<string, string>> = {
  array: 'a list (a JSON array)',
  object: 'an object (a JSON object)',
  string: 'text (a JSON string)',
  number: 'a number',
  int: 'a whole number',
  boolean: 'true or false',
  record: 'an object of names to values',
};

/** Each field name's first value in the shipped example config, as JSON (at most 80 characters). */
const EXAMPLES: ReadonlyMap<string, string> = (() => {
  const out = new Map<string, string>();
  const walk = (value: unknown): void => {
    if (Array.isArray(value)) return value.forEach(walk);
    if (value === null || typeof value !== 'object') return;
    for (const [k, v] of Object.entries(value)) {
      const text = JSON.stringify(v).replace(/,(?=\S)/g, ', ');
      if (!out.has(k) && k !== '$schema' && text.length <= 80) out.set(k, text);
      walk(v);
    }
  };
  walk(exampleConfigJson);
  return out;
})();

/**
 * Where in the config, by name where the config has one: `nodeGroups["a100-spot"].instanceTypes[1]`
 * rather than `nodeGroups.2.instanceTypes.1` (an index is hard to count in a long file).
 */
function pathOf(path: readonly PropertyKey[], input: unknown): string {
  let out = '';
  let at: unknown = input;
  for (const key of path) {
    const here = at;
    at = here !== null && typeof here === 'object' ? (here as Record<PropertyKey, unknown>)[key] : undefined;
    if (typeof key !== 'number') {
      out += out ? `.${String(key)}` : String(key);
      continue;
    }
    const named =
      at !== null && typeof at === 'object'
        ? ((at as { name?: unknown; projectId?: unknown }).name ?? (at as { projectId?: unknown }).projectId)
        : undefined;
    out += typeof named === 'string' && named !== '' ? `[${JSON.stringify(named)}]` : `[${key}]`;
  }
  return out;
}

function short(value: unknown): string {
  const t = JSON.stringify(value) ?? String(value);
  return t.length > 80 ? `${t.slice(0, 77)}...` : t;
}

/**
 * The network a config's deployment has, as the bill prices its bytes (core/bytes.ts): a created
 * VPC reaches S3 through its gateway endpoint and has a NAT gateway in each of its first
 * `natGateways` zones (where CDK puts them); an existing VPC takes the path its config names, its
 * NAT gateways' zones unknown (no zone crossing is counted).
 */
export function networkLayoutOf(config: Pick<GpuFleetConfig, 'vpc'>): NetworkLayout {
  if ('existing' in config.vpc) return { s3Path: config.vpc.existing.s3Path, natZones: [] };
  const { zones, natGateways } = config.vpc.create;
  return { s3Path: 'gateway-endpoint', natZones: zones.slice(0, natGateways ?? zones.length) };
}
