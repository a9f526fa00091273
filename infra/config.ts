import { readFileSync } from 'node:fs';
import { z } from 'zod';
import { ConfigError, messageOf } from '../core/errors.ts';
import awsCatalogJson from '../data/catalog/aws-gpu-instances.json' with { type: 'json' };

/**
 * The deployment's config: what `cdk deploy` creates. One JSON file (infra/config.example.json is
 * a complete example), validated here; every error names the field, the value and what is allowed.
 */

const AWS_GPU_TYPES: readonly string[] =
  (awsCatalogJson as unknown as { instances?: { instance_type?: string; instanceType?: string }[] }).instances
    ?.map((i) => i.instance_type ?? i.instanceType ?? '')
    .filter(Boolean) ?? [];

const NAME_RE = /^[a-z][a-z0-9-]{1,38}[a-z0-9]$/;
const ZONE_RE = /^[a-z]{2}(-gov)?-[a-z]+-\d[a-z]$/;
const REGION_RE = /^[a-z]{2}(-gov)?-[a-z]+-\d$/;

const int = (min: number, max: number, unit = '') =>
  z
    .number({ error: `must be a number from ${min} to ${max}${unit}` })
    .int({ error: `must be a whole number from ${min} to ${max}${unit}` })
    .min(min, { error: `must be at least ${min}${unit}` })
    .max(max, { error: `must be at most ${max}${unit}` });

export const DLAMI_AL2023_PARAMETER = '/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-amazon-linux-2023/latest/ami-id';

const NodeGroupSchema = z
  .strictObject({
    name: z.string().regex(NAME_RE, { error: 'node group names are 3-40 lower-case letters, digits or "-", starting with a letter' }),
    instanceTypes: z
      .array(
        z.string().refine((t) => AWS_GPU_TYPES.length === 0 || AWS_GPU_TYPES.includes(t), {
          error: `not a GPU instance type in the shipped catalogue (data/catalog/aws-gpu-instances.json); allowed: ${AWS_GPU_TYPES.slice(0, 12).join(', ')}, …`,
        }),
      )
      .min(1, { error: 'give at least one instance type' })
      .max(20, { error: 'an Auto Scaling group takes at most 20 instance types' }),
    capacityType: z.enum(['spot', 'on-demand'], { error: 'must be "spot" or "on-demand"' }),
    zones: z
      .array(z.string().regex(ZONE_RE, { error: 'zones look like "us-east-1a"' }))
      .min(1)
      .optional(),
    subnetIds: z
      .array(z.string().regex(/^subnet-[0-9a-f]{8,17}$/, { error: 'subnet ids look like "subnet-0123456789abcdef0"' }))
      .min(1)
      .optional(),
    minSize: int(0, 1000).default(0),
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
    diskGiB: int(50, 16_384, ' GiB').default(200),
    migEnabled: z.boolean({ error: 'must be true or false' }).default(false),
  })
  .superRefine((g, ctx) => {
    if (g.maxSize < g.minSize)
      ctx.addIssue({ code: 'custom', path: ['maxSize'], message: `must be at least minSize (${g.minSize})`, input: g.maxSize });
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
  maxGpus: int(1, 100_000).optional(),
  weight: z.number({ error: 'must be a number' }).positive({ error: 'must be more than 0' }).max(1000).default(1),
});

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
          }),
        }),
        z.strictObject({
          existing: z.strictObject({
            vpcId: z.string().regex(/^vpc-[0-9a-f]{8,17}$/, { error: 'VPC ids look like "vpc-0123456789abcdef0"' }),
            privateSubnetIds: z.array(z.string().regex(/^subnet-[0-9a-f]{8,17}$/)).min(1),
            zones: z.array(z.string().regex(ZONE_RE)).min(1),
          }),
        }),
      ],
      { error: 'must be {"create": {"cidr", "zones"}} or {"existing": {"vpcId", "privateSubnetIds", "zones"}}' },
    ),
    nodeGroups: z.array(NodeGroupSchema).min(1, { error: 'give at least one node group' }).max(50),
    teams: z.array(TeamSchema).min(1, { error: 'give at least one team' }).max(200),
    policy: z
      .strictObject({
        reconcileIntervalSec: int(60, 3600, ' s')
          .refine((s) => s % 60 === 0, { error: 'must be a whole number of minutes (a multiple of 60): the schedule runs by the minute' })
          .default(60),
        idleCooldownSec: int(0, 86_400, ' s').default(180),
        noticeMarginSec: int(0, 110, ' s').default(20),
      })
      .default({ reconcileIntervalSec: 60, idleCooldownSec: 180, noticeMarginSec: 20 }),
    checkpoints: z
      .strictObject({
        bucketName: z
          .string()
          .regex(/^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/, { error: 'S3 bucket names are 3-63 lower-case letters, digits, "." or "-"' })
          .optional(),
        expireAfterDays: int(1, 3650, ' days').default(30),
      })
      .default({ expireAfterDays: 30 }),
    alarmEmail: z.email({ error: 'must be an e-mail address' }).optional(),
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
      for (const z of vpcZones)
        if (!z.startsWith(c.region))
          ctx.addIssue({ code: 'custom', path: ['vpc'], message: `zone is not in region ${c.region}`, input: z });
    });
    const teams = new Set<string>();
    c.teams.forEach((t, i) => {
      if (teams.has(t.name))
        ctx.addIssue({ code: 'custom', path: ['teams', i, 'name'], message: 'team names must be unique', input: t.name });
      teams.add(t.name);
    });
  });

export type GpuFleetConfig = z.output<typeof ConfigSchema>;
export type NodeGroupConfig = GpuFleetConfig['nodeGroups'][number];
export type TeamConfig = GpuFleetConfig['teams'][number];

export { ConfigError };

/** Validates a config value; throws ConfigError listing every problem (field: what is wrong; got value). */
export function parseConfig(input: unknown, source = 'config'): GpuFleetConfig {
  const result = ConfigSchema.safeParse(input, { reportInput: true });
  if (result.success) return result.data;
  throw new ConfigError(source, result.error.issues.map(describe));
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
    value = JSON.parse(text);
  } catch (error) {
    throw new ConfigError(path, [`not valid JSON: ${messageOf(error)}`]);
  }
  return parseConfig(value, path);
}

function describe(issue: z.core.$ZodIssue): string {
  const where = issue.path.length > 0 ? issue.path.map(String).join('.') : '(config)';
  let message = issue.message;
  if (issue.code === 'unrecognized_keys') message = `unknown field(s) ${issue.keys.map((k) => JSON.stringify(k)).join(', ')}`;
  else if (issue.code === 'invalid_type' && issue.input === undefined) message = `is required; ${issue.message}`;
  const got = 'input' in issue && issue.input !== undefined && issue.code !== 'unrecognized_keys' ? `; got ${short(issue.input)}` : '';
  return `${where}: ${message}${got}`;
}

function short(value: unknown): string {
  const t = JSON.stringify(value) ?? String(value);
  return t.length > 80 ? `${t.slice(0, 77)}...` : t;
}
