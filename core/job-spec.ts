import { parseSecretRef, SECRET_REF_FORMS } from './secrets.ts';
import { parseTree, type Node as JsonNode } from 'jsonc-parser';
import * as z from 'zod/mini';
import { GPU_MODELS, modelsNamedBy } from './gpu.ts';
import { migProfileProblem } from './mig.ts';
import { textDigest } from './digest.ts';
// schema.ts first sets zod's English messages (see there).
import { describeFields, didYouMean, fieldsAt, trueOrFalse, unknownFieldsMessage, wholeNumber } from './schema.ts';

/**
 * The job spec: what a person submits to a team queue. One schema, used by intake, by
 * `gpu-fleet submit` and by the simulator, so that a spec accepted in one is accepted in all.
 *
 * The team is never part of the spec: it comes from the queue the message arrived on.
 * The command is an argv array, never a shell string: no shell ever stands between a spec and a process.
 */

/** The longest checkpoint grace a spec may ask for, seconds. */
export const MAX_CHECKPOINT_GRACE_SEC = 900;

const ACCEPTED_MODELS: readonly string[] = GPU_MODELS;
const NAME_RE = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;
// registry/repository[:tag][@sha256:digest] — no spaces, no shell metacharacters.
const IMAGE_RE =
  /^[a-z0-9]+(?:[._-][a-z0-9]+)*(?::\d+)?(?:\/[a-z0-9]+(?:[._-]{1,2}[a-z0-9]+)*)*(?::[A-Za-z0-9_][A-Za-z0-9._-]{0,127})?(?:@sha256:[a-f0-9]{64})?$/;
const ENV_NAME_RE = /^[A-Za-z_][A-Za-z0-9_]{0,127}$/;
const LABEL_KEY_RE = /^[a-z0-9]([a-z0-9._/-]{0,61}[a-z0-9])?$/;
const LABEL_VALUE_RE = /^[A-Za-z0-9._:/@ -]{0,128}$/;
const MIG_PROFILE_RE = /^[1-8]g\.\d{1,3}gb(\+me|\+gfx)?$/;
const ZONE_RE = /^[a-z]{2,}-[a-z0-9-]+$/;

const modelList = z.optional(
  z
    .array(
      z.string().check(
        z.superRefine((m, ctx) => {
          if (ACCEPTED_MODELS.includes(m)) return;
          ctx.addIssue({ code: 'custom', message: modelProblem(m), input: m });
        }),
      ),
    )
    .check(
      z.minLength(1, { error: 'give at least one GPU model, or leave the field out to accept any' }),
      z.maxLength(ACCEPTED_MODELS.length),
    ),
);

/** Why a GPU model name is refused: two GPUs go by it (with the choices), or none (with the known ones). */
function modelProblem(name: string): string {
  const named = modelsNamedBy(name);
  if (named.length > 1)
    return `"${name}" names ${named.length} GPUs: ${named.map((m) => JSON.stringify(m)).join(' or ')}; name the one the job needs, or list them all to accept any`;
  return `unknown GPU model${didYouMean(name, ACCEPTED_MODELS)}; allowed: ${ACCEPTED_MODELS.join(', ')}`;
}

const int = wholeNumber;

const rightsize = z.optional(
  z.enum(['suggest', 'auto'], {
    error: 'must be "suggest" (report what a smaller shape would save) or "auto" (take the shape measured use calls for)',
  }),
);

export const GpuRequestSchema = z.discriminatedUnion(
  'kind',
  [
    z.strictObject({
      kind: z.literal('whole'),
      count: int(1, 16),
      models: modelList,
      minMemoryMiB: z.optional(int(1, 1_048_576)),
      rightsize,
    }),
    z.strictObject({
      kind: z.literal('fraction'),
      milliGpu: int(1, 999, ' thousandths of one GPU'),
      memoryMiB: int(1, 1_048_576),
      models: modelList,
      rightsize,
    }),
    z
      .strictObject({
        kind: z.literal('mig'),
        profile: z.string().check(z.regex(MIG_PROFILE_RE, { error: 'must be a MIG profile such as "1g.10gb", "3g.40gb" or "1g.10gb+me"' })),
        models: modelList,
        rightsize,
      })
      .check(
        // NVIDIA's table, not only the shape of a name: "1g.99gb" exists on no GPU.
        z.superRefine((g, ctx) => {
          const problem = MIG_PROFILE_RE.test(g.profile) ? migProfileProblem(g.profile, g.models) : undefined;
          if (problem) ctx.addIssue({ code: 'custom', path: ['profile'], message: problem, input: g.profile });
        }),
      ),
  ],
  { error: 'must be "whole", "fraction" or "mig"' },
);

export const CheckpointSpecSchema = z.strictObject({
  intervalSec: int(60, 86_400),
  signal: z._default(
    z.enum(['SIGUSR1', 'SIGUSR2', 'SIGTERM', 'SIGINT'], { error: 'must be SIGUSR1, SIGUSR2, SIGTERM or SIGINT' }),
    'SIGUSR1',
  ),
  gracePeriodSec: z._default(int(5, MAX_CHECKPOINT_GRACE_SEC), 90),
  /**
   * How large one node's checkpoint is, GiB (for the upload's time allowance). Default: the GPU
   * memory the job holds on the node, as a checkpoint of a model and optimiser that fill it is.
   */
  sizeGiB: z.optional(
    z
      .number({ error: 'must be a number of GiB from 0.001 to 65536' })
      .check(z.gte(0.001, { error: 'must be at least 0.001 GiB' }), z.lte(65_536, { error: 'must be at most 65536 GiB' })),
  ),
});

/** The metrics a service scales on, and the Prometheus series read for them by default (vLLM's names). */
export const SERVICE_METRICS = ['requests-per-second', 'waiting-requests', 'running-requests', 'gpu-utilization', 'gpu-memory'] as const;
export const DEFAULT_PROMETHEUS_METRIC: Partial<Record<(typeof SERVICE_METRICS)[number], string>> = {
  'waiting-requests': 'vllm:num_requests_waiting',
  'running-requests': 'vllm:num_requests_running',
};
const PROMETHEUS_NAME_RE = /^[a-zA-Z_:][a-zA-Z0-9_:]{0,199}$/;

/** A port of every fleet machine's own: the dcgm-exporter's, and the agent's /metrics by default. */
export const RESERVED_NODE_PORT = 9400;

/** How long a replica may go without answering its readiness path before it is replaced, by default. */
export const DEFAULT_UNHEALTHY_LIMIT_SEC = 300;

const positive = (max: number, unit = '') =>
  z
    .number({ error: `must be a number above 0 and at most ${max}${unit}` })
    .check(z.gt(0, { error: `must be above 0${unit}` }), z.lte(max, { error: `must be at most ${max}${unit}` }));

/**
 * A service: replicas of the same container behind a port, each a job of its own (no checkpoints),
 * scaled on load (core/serving/autoscale.ts) between `replicas.min` and `replicas.max`.
 */
const ServiceSpecSchema = z.strictObject({
  /**
   * The port the replica listens on, on its machine's own network (the load balancer and the agent
   * reach it there): 1024 or above (lower ones are the machine's, sshd's 22 among them), and not
   * 9400, where the node's dcgm-exporter and the agent's /metrics listen by default.
   */
  port: z.number({ error: 'must be a port number from 1024 to 65535' }).check(
    z.int({ error: 'must be a whole port number from 1024 to 65535' }),
    z.gte(1024, { error: "must be 1024 or above: lower ports are the machine's own (sshd's 22 among them)" }),
    z.lte(65_535, { error: 'must be at most 65535' }),
    z.refine((p) => p !== RESERVED_NODE_PORT, {
      error: `port ${RESERVED_NODE_PORT} is the machine's own (the dcgm-exporter's and the agent's /metrics); choose another from 1024 to 65535`,
    }),
  ),
  readiness: z._default(
    z.strictObject({
      path: z._default(
        z.string().check(z.regex(/^\/[!-~]{0,255}$/, { error: 'an HTTP path starting with "/", without spaces, e.g. "/health"' })),
        '/health',
      ),
      initialDelaySec: z._default(int(0, 3600, ' s'), 30),
      periodSec: z._default(int(1, 300, ' s'), 10),
      /**
       * A replica whose readiness path has not answered for this long (counted from the end of its
       * initial delay, or from when it last answered) is replaced: a model load that hangs, a port
       * never opened, a server that stopped answering.
       */
      unhealthyLimitSec: z._default(int(10, 86_400, ' s'), DEFAULT_UNHEALTHY_LIMIT_SEC),
    }),
    { path: '/health', initialDelaySec: 30, periodSec: 10, unhealthyLimitSec: DEFAULT_UNHEALTHY_LIMIT_SEC },
  ),
  replicas: z
    .strictObject({ min: int(0, 1000), max: int(1, 1000) })
    .check(z.refine((r) => r.max >= r.min, { error: 'max must be at least min' })),
  targets: z
    .array(
      z.strictObject({
        metric: z.enum(SERVICE_METRICS, { error: `must be one of ${SERVICE_METRICS.join(', ')}` }),
        perReplica: positive(1_000_000),
        prometheusMetric: z.optional(
          z.string().check(z.regex(PROMETHEUS_NAME_RE, { error: 'a Prometheus metric name, e.g. "vllm:num_requests_waiting"' })),
        ),
      }),
      { error: 'must be a list of scaling targets, e.g. [{"metric": "waiting-requests", "perReplica": 6}]' },
    )
    .check(z.minLength(1, { error: 'give at least one scaling target' }), z.maxLength(5)),
  /** Spot replicas beyond the target (SpotHedge's N_extra); gpu-fleet chooses when absent. */
  spareSpot: z.optional(int(0, 100)),
  /** Replicas kept on on-demand whatever spot does. */
  onDemandBase: z._default(int(0, 1000), 0),
  scaleUpDelaySec: z._default(int(0, 3600, ' s'), 0),
  scaleDownWindowSec: z._default(int(0, 86_400, ' s'), 300),
  /**
   * Scale ahead of a rising load: the trend of the last 5 minutes' load is extrapolated a cold start
   * ahead and the replicas it needs are asked for now (core/serving/autoscale.ts). Off by default:
   * on npm start's noisy per-minute chat load it held 10-18% more replica-hours for a point of tick
   * availability (docs/benchmarks.md).
   */
  scaleAhead: z._default(trueOrFalse(), false),
  /**
   * What a request may expect: to wait at most `waitSec` for a free slot of a ready replica (a
   * time-to-first-token objective is this plus the prefill). With what one replica serves, it
   * gives the share of requests within the objective (core/serving/latency.ts), beside the share
   * of time the service had the replicas its load asked for.
   */
  objective: z.optional(
    z.strictObject({
      waitSec: positive(3600, ' s'),
      replicaRps: positive(1_000_000),
      concurrency: z._default(int(1, 4096), 1),
    }),
  ),
});

/**
 * How the job's container runs (agent/runner.ts): its shared memory and its locked-memory limit.
 * The defaults are what NVIDIA runs its PyTorch containers with, /dev/shm sized by the GPUs held.
 */
const ContainerSpecSchema = z.strictObject({
  /** Size of /dev/shm, MiB (default {@link DEFAULT_SHM_MIB_PER_GPU} per GPU the job holds on a machine). */
  shmSizeMiB: z.optional(int(64, 1_048_576, ' MiB')),
  /** The locked-memory limit, MiB (default unlimited, as NCCL and RDMA need). */
  lockedMemoryMiB: z.optional(int(1, 1_048_576, ' MiB')),
  /**
   * Run as the image's root user when the image names no other (default false: such an image runs
   * as {@link JOB_UID}). Only for teams the fleet config lets (`images.rootTeams`), on docker's
   * bridge; the container still holds no capability and gains no privilege.
   */
  runAsRoot: z.optional(trueOrFalse()),
});

/** /dev/shm per GPU a job holds on a machine, by default: a DataLoader's workers pass their batches through it. */
export const DEFAULT_SHM_MIB_PER_GPU = 1024;

const JobSpecObject = z.strictObject({
  name: z.optional(
    z.string().check(z.regex(NAME_RE, { error: 'must be 1-128 letters, digits, ".", "_" or "-", starting with a letter or digit' })),
  ),
  image: z.string({ error: 'must be a container image reference such as "pytorch/pytorch:2.3.0-cuda12.1"' }).check(
    z.maxLength(512),
    z.regex(IMAGE_RE, {
      error: 'must be a container image reference ([registry/]repository[:tag][@sha256:digest]) without spaces or shell characters',
    }),
  ),
  command: z
    .array(z.string().check(z.maxLength(8192, { error: 'each command argument is at most 8192 characters' })), {
      error: 'must be an array of arguments (argv), e.g. ["python", "train.py"]; a shell string is not accepted',
    })
    .check(
      z.minLength(1, { error: 'command needs at least the program to run' }),
      z.maxLength(256, { error: 'command has at most 256 arguments' }),
      z.refine((argv) => argv.every((a) => !a.includes('\u0000')), { error: 'command arguments may not contain NUL characters' }),
    ),
  env: z._default(
    z
      .record(
        z.string().check(
          z.regex(ENV_NAME_RE, { error: 'environment variable names are letters, digits and "_", not starting with a digit' }),
          z.refine((k) => !k.startsWith('GPU_FLEET_'), { error: 'GPU_FLEET_* variables are set by gpu-fleet and cannot be given' }),
          // The NVIDIA container runtime reads these to choose the GPUs, driver libraries and capabilities a container gets.
          z.refine((k) => !k.startsWith('NVIDIA_'), {
            error:
              'NVIDIA_* variables choose what the NVIDIA runtime gives a container (its GPUs, driver capabilities); gpu-fleet sets them from the placement',
          }),
        ),
        z.string().check(
          z.maxLength(32_768),
          z.refine((v) => !v.includes('\u0000'), { error: 'environment values may not contain NUL characters' }),
          // They reach the container through docker's env file, one NAME=value per line.
          z.refine((v) => !/[\r\n]/.test(v), { error: 'environment values may not contain line breaks (\\n or \\r)' }),
        ),
      )
      .check(z.refine((e) => Object.keys(e).length <= 128, { error: 'at most 128 environment variables' })),
    {},
  ),
  // Secrets by reference (core/secrets.ts): the record keeps the ARN; the agent resolves it into the container's env file.
  secrets: z._default(
    z
      .array(
        z.strictObject({
          name: z.string().check(
            z.regex(ENV_NAME_RE, { error: 'environment variable names are letters, digits and "_", not starting with a digit' }),
            z.refine((k) => !k.startsWith('GPU_FLEET_') && !k.startsWith('NVIDIA_'), {
              error: 'GPU_FLEET_* and NVIDIA_* variables are set by gpu-fleet and cannot be given',
            }),
          ),
          valueFrom: z.string().check(z.refine((v) => parseSecretRef(v) !== undefined, { error: `must be ${SECRET_REF_FORMS}` })),
        }),
      )
      .check(
        z.maxLength(64, { error: 'at most 64 secrets' }),
        z.refine((list) => new Set(list.map((s) => s.name)).size === list.length, { error: 'each secret name at most once' }),
      ),
    [],
  ),
  gpu: GpuRequestSchema,
  nodes: z._default(int(1, 64), 1),
  priority: z._default(int(0, 1000), 100),
  interruptible: z._default(trueOrFalse(), true),
  checkpoint: z.optional(CheckpointSpecSchema),
  expectedRuntimeSec: z.optional(int(1, 90 * 86_400)),
  deadline: z.optional(z.iso.datetime({ error: 'must be an ISO 8601 date-time with a zone, e.g. "2026-12-04T17:00:00Z"', offset: true })),
  labels: z._default(
    z
      .record(
        z
          .string()
          .check(
            z.regex(LABEL_KEY_RE, { error: 'label keys are lower-case letters, digits, ".", "_", "/" or "-", at most 63 characters' }),
          ),
        z.string().check(z.regex(LABEL_VALUE_RE, { error: 'label values are at most 128 letters, digits, spaces or ._:/@-' })),
      )
      .check(z.refine((l) => Object.keys(l).length <= 32, { error: 'at most 32 labels' })),
    {},
  ),
  service: z.optional(ServiceSpecSchema),
  container: z.optional(ContainerSpecSchema),
  placement: z.optional(
    z.strictObject({
      clouds: z.optional(z.array(z.enum(['aws', 'gcp'], { error: 'entries must be "aws" or "gcp"' })).check(z.minLength(1))),
      regions: z.optional(
        z
          .array(z.string().check(z.regex(ZONE_RE, { error: 'entries look like "us-east-1" or "europe-west4"' })))
          .check(z.minLength(1), z.maxLength(32)),
      ),
      zones: z.optional(
        z
          .array(z.string().check(z.regex(ZONE_RE, { error: 'entries look like "us-east-1a" or "europe-west4-a"' })))
          .check(z.minLength(1), z.maxLength(64)),
      ),
    }),
  ),
});

export const JobSpecSchema = JobSpecObject.check(
  z.superRefine((spec, ctx) => {
    if (spec.service) {
      const problem = (path: PropertyKey[], message: string, input: unknown) => ctx.addIssue({ code: 'custom', path, message, input });
      if (!spec.name) problem(['name'], 'a service needs a name: it is known as team.name', spec.name);
      if (spec.nodes > 1) problem(['nodes'], 'a service replica runs on one machine', spec.nodes);
      if (spec.checkpoint) problem(['checkpoint'], 'a service replica has no checkpoints: a new one starts in its place', spec.checkpoint);
      if (spec.deadline) problem(['deadline'], 'a service has no deadline: it runs until it is cancelled', spec.deadline);
      const rps = spec.service.targets.find((t) => t.metric === 'requests-per-second')?.perReplica;
      if (spec.service.objective && rps !== undefined && rps >= spec.service.objective.replicaRps)
        problem(
          ['service', 'objective', 'replicaRps'],
          `a replica scaled to carry ${rps} requests per second (the requests-per-second target) must serve more than that at full load, or every request queues; give the replica's measured throughput, above ${rps}`,
          spec.service.objective.replicaRps,
        );
      if (spec.service.onDemandBase > spec.service.replicas.max)
        problem(['service', 'onDemandBase'], `must be at most replicas.max (${spec.service.replicas.max})`, spec.service.onDemandBase);
    }
    if (spec.container?.runAsRoot && (spec.service !== undefined || spec.nodes > 1))
      ctx.addIssue({
        code: 'custom',
        path: ['container', 'runAsRoot'],
        message: `a service or a multi-node gang runs on the machine's network as uid ${JOB_UID}, never as root: the node's metadata wall tells containers from the host by that uid`,
        input: true,
      });
    for (const [i, s] of spec.secrets.entries())
      if (Object.hasOwn(spec.env, s.name))
        ctx.addIssue({
          code: 'custom',
          path: ['secrets', i, 'name'],
          message: `${s.name} is also in env: give a variable once, inline or by reference`,
          input: s.name,
        });
    if (spec.nodes > 1 && spec.gpu.kind !== 'whole') {
      ctx.addIssue({
        code: 'custom',
        path: ['nodes'],
        message: 'a multi-node gang needs whole GPUs (gpu.kind "whole")',
        input: spec.nodes,
      });
    }
  }),
);

export type JobSpecInput = z.input<typeof JobSpecSchema>;
export type JobSpec = z.output<typeof JobSpecSchema>;
export type CheckpointSpec = z.output<typeof CheckpointSpecSchema>;
export type ServiceSpec = z.output<typeof ServiceSpecSchema>;

/** How a job's container is run on its machine. */
export interface ContainerSettings {
  /**
   * `host`: the machine's own network, for a service (the load balancer and the agent reach its port
   * at the machine's address) and a multi-node gang (the ranks meet at the leader's address, and
   * NCCL opens ports of its own). `bridge`: docker's network, nothing published, for the rest.
   */
  readonly network: 'host' | 'bridge';
  readonly shmSizeMiB: number;
  readonly lockedMemoryMiB: number | 'unlimited';
  /**
   * The uid the container runs as, whatever its image says: {@link HOST_NETWORK_JOB_UID} for a
   * host-network container (it shares the host's network stack, where the node's wall lets only
   * root and the agent reach a metadata server: infra/node-setup.ts `metadataWallScript`).
   * Absent: the image's own user unless that is root ({@link containerUser}).
   */
  readonly runAsUid?: number;
  /** The spec asked for the image's root user (admitted by intake for the teams the config names): docker's bridge only. */
  readonly runAsRoot?: true;
}

/** The uid a job runs as where its image would run it as root: "nobody", neither root nor the agent's user. */
export const JOB_UID = 65534;

/** The uid of a host-network container: {@link JOB_UID}, whatever the image says. */
export const HOST_NETWORK_JOB_UID = JOB_UID;

/** Whether an image's `USER` (docker's `Config.User`: `name|uid[:group|gid]`, empty for none) runs as root. */
export function isRootUser(imageUser: string): boolean {
  const user = imageUser.trim().split(':')[0]!;
  return user === '' || user === 'root' || /^0+$/.test(user);
}

/**
 * Who a container runs as, as Kubernetes' "restricted" pod security has it (non-root): the uid its
 * settings fix (a host-network container), else the image's own user when that is not root (a
 * name is the image's to resolve; the container holds no capability whoever it is), else
 * {@link JOB_UID} unless the spec was let run as root. It reaches its folder through the folder's
 * group: the primary group of a uid the product gives, an added one for the image's own user.
 */
export function containerUser(
  settings: Pick<ContainerSettings, 'runAsUid' | 'runAsRoot'>,
  imageUser: string,
  folderGid?: number,
): { readonly user?: string; readonly groupAdd?: number } {
  const uid = settings.runAsUid ?? (isRootUser(imageUser) && !settings.runAsRoot ? JOB_UID : undefined);
  if (uid !== undefined) return { user: `${uid}:${folderGid ?? uid}` };
  return folderGid !== undefined ? { groupAdd: folderGid } : {};
}

/** The container settings of a spec: its own `container` section over the defaults. */
export function containerSettings(spec: JobSpec): ContainerSettings {
  const gpus = spec.gpu.kind === 'whole' ? spec.gpu.count : 1;
  const host = spec.service !== undefined || spec.nodes > 1;
  return {
    network: host ? 'host' : 'bridge',
    ...(host ? { runAsUid: HOST_NETWORK_JOB_UID } : spec.container?.runAsRoot ? { runAsRoot: true as const } : {}),
    shmSizeMiB: spec.container?.shmSizeMiB ?? DEFAULT_SHM_MIB_PER_GPU * gpus,
    lockedMemoryMiB: spec.container?.lockedMemoryMiB ?? 'unlimited',
  };
}

/**
 * The ports of the machine a job's container listens on with the host's network, known from its
 * spec: a service's port. Two jobs holding one port never share a machine (the planner takes it
 * as room of the machine); a gang leader's rendezvous port is chosen by the planner at placement.
 */
export function hostPortsOf(spec: Pick<JobSpec, 'service'>): readonly number[] {
  return spec.service ? [spec.service.port] : NO_PORTS;
}

const NO_PORTS: readonly number[] = [];

export type SpecCheck = { ok: true; spec: JobSpec } | { ok: false; errors: string[] };

/**
 * Validates an untrusted value as a job spec. Never throws: a bad spec gives a list of
 * messages, each naming the field, what was wrong and what is allowed.
 */
export function checkJobSpec(input: unknown): SpecCheck {
  if (typeof input !== 'object' || input === null || Array.isArray(input)) {
    return { ok: false, errors: [`(spec): must be a JSON object with at least image, command and gpu; got ${shortJson(input)}`] };
  }
  if ('team' in input) {
    return { ok: false, errors: ['team: a job spec cannot name its team; the team is the queue the job is sent to'] };
  }
  const result = JobSpecSchema.safeParse(input, { reportInput: true });
  if (result.success) return { ok: true, spec: result.data };
  return { ok: false, errors: result.error.issues.map((issue) => describeIssue(issue, input)) };
}

function describeIssue(issue: z.core.$ZodIssue, input: unknown): string {
  // A path names keys the body chose (a label key of 10,000 characters): cut, so every problem stays "where: what".
  const path = issue.path.length > 0 ? issue.path.map(String).join('.') : '(spec)';
  const where = path.length > 200 ? `${path.slice(0, 199)}…` : path;
  let message = issue.message;
  if (issue.code === 'unrecognized_keys') {
    message = unknownFieldsMessage(issue.keys, fieldsAt(JobSpecObject, issue.path, input));
  } else if (issue.code === 'invalid_key' && issue.issues[0]) {
    message = issue.issues[0].message;
  } else if (issue.code === 'invalid_type' && issue.input === undefined) {
    message = `is required; ${issue.message}`;
  }
  // An environment value may be a secret: an error names where it is wrong, never what it holds (names are not secret).
  const secret = issue.path[0] === 'env' && issue.code !== 'invalid_key';
  const got =
    'input' in issue && issue.input !== undefined && issue.code !== 'unrecognized_keys' && !secret ? `; got ${shortJson(issue.input)}` : '';
  return `${where}: ${message}${got}`;
}

/** The most of a rejected submission's body its record keeps. */
export const REJECTED_BODY_KEPT = 16_384;

/**
 * A submitted body as a rejected job's record keeps it: every value under a top-level `env`
 * replaced by how long it was (the names stay), found by a tolerant parse so a body that is not
 * quite JSON is redacted too, then cut at {@link REJECTED_BODY_KEPT} characters. The same body
 * always gives the same text, so a repeated submission is recognised by it.
 */
export function rejectedBody(body: string): string {
  const out = redactedBody(body);
  return out.length > REJECTED_BODY_KEPT ? `${out.slice(0, REJECTED_BODY_KEPT)}…` : out;
}

/** A body with every value under a top-level `env` replaced by how long it was. */
function redactedBody(body: string): string {
  const root = parseTree(body, [], { allowTrailingComma: true, disallowComments: false });
  const env = root?.type === 'object' ? root.children?.find((p) => p.children?.[0]?.value === 'env')?.children?.[1] : undefined;
  const spans: JsonNode[] = [];
  if (env?.type === 'object') for (const p of env.children ?? []) if (p.children?.[1]) spans.push(p.children[1]);
  if (env && env.type !== 'object') spans.push(env);
  let out = body;
  for (const v of spans.sort((a, b) => b.offset - a.offset)) {
    const n = typeof v.value === 'string' ? v.value.length : v.length;
    out = `${out.slice(0, v.offset)}"(${n} character${n === 1 ? '' : 's'}, not kept)"${out.slice(v.offset + v.length)}`;
  }
  return out;
}

/**
 * The digest of a whole submitted body, its `env` values redacted as {@link rejectedBody} does but
 * not cut: a rejected record keeps it, so that a body sent again under the same token is told from
 * another that only shares its first {@link REJECTED_BODY_KEPT} characters.
 */
export function rejectedBodyDigest(body: string): string {
  return textDigest(redactedBody(body));
}

function shortJson(value: unknown): string {
  let text: string;
  try {
    text = JSON.stringify(value) ?? String(value);
  } catch {
    text = String(value);
  }
  return text.length > 80 ? `${text.slice(0, 77)}...` : text;
}

describeFields(JobSpecObject, {
  name: "the job's name: the service's name for a service (known as team.name); for a job, a label for people",
  image: 'the container image the job runs, as docker pulls it: [registry/]repository[:tag][@sha256:digest]',
  command: 'the program and its arguments (argv; no shell stands between the spec and the process)',
  env: 'environment variables of the process (GPU_FLEET_* and NVIDIA_* are set by gpu-fleet and cannot be given); values here are stored in the job record: pass secrets by reference (secrets)',
  secrets:
    "variables whose values are secrets, by reference as ECS takes them: [{name, valueFrom}], valueFrom an SSM parameter or Secrets Manager secret ARN under gpu-fleet/<team>/; the record keeps the reference, the machine's agent resolves it for the attempt into the container's environment",
  'secrets[].name': 'the environment variable the value is given as',
  'secrets[].valueFrom':
    "the ARN of an SSM SecureString parameter (/gpu-fleet/<team>/…) or a Secrets Manager secret (gpu-fleet/<team>/…) of the job's own team",
  gpu: 'the GPUs the job needs on each of its machines: whole GPUs, a share of one, or a MIG slice',
  'gpu.kind': '"whole": whole GPUs; "fraction": a share of one GPU; "mig": a MIG slice',
  'gpu.count': 'whole GPUs on one machine',
  'gpu.models': 'GPU models the job may run on (any when left out); listing several accepts any of them',
  'gpu.minMemoryMiB': 'the least memory each GPU must have',
  'gpu.milliGpu': 'the share of one GPU, in thousandths (250 is a quarter); shares of one GPU are not isolated',
  'gpu.memoryMiB': 'the GPU memory the share needs',
  'gpu.profile': "a MIG profile in NVIDIA's table for a GPU it may run on, e.g. 1g.10gb on an A100-80GB",
  'gpu.rightsize':
    '"suggest": report what a smaller shape measured use calls for would save; "auto": take that shape (see concepts: right-sizing)',
  nodes: 'machines the job runs on at once (a gang: all start together or none; whole GPUs only)',
  priority: 'higher goes first; a job of higher priority may move interruptible work of lower priority',
  interruptible: 'false keeps the job off spot and reclaimable capacity (on-demand or reserved only)',
  checkpoint: 'how the job checkpoints; without it, an interrupted job starts again from the beginning',
  'checkpoint.intervalSec': 'how often the job writes a checkpoint of its own accord',
  'checkpoint.signal': 'the signal that asks the job to checkpoint now (before an interruption or a move)',
  'checkpoint.gracePeriodSec': 'how long the job may take to write a checkpoint when asked',
  'checkpoint.sizeGiB': "one machine's checkpoint size, for the upload's time allowance (default: the GPU memory the job holds)",
  expectedRuntimeSec: 'how long the job runs when not interrupted: the planner prices spot risk and budgets commit cost from it',
  deadline: 'when the job must be done: it moves from spot to on-demand when waiting longer would miss it',
  labels: 'labels for reports and Logs Insights (project is the one report groups by)',
  service: 'makes the spec a service: replicas of the container behind a port, scaled on load',
  'service.port': 'the port each replica listens on (1024 or above, not 9400)',
  'service.readiness': 'how a replica is known to be ready: an HTTP path answered with 2xx',
  'service.readiness.path': 'the HTTP path the load balancer and the agent ask',
  'service.readiness.initialDelaySec': 'how long a replica is given to start before it is asked',
  'service.readiness.periodSec': 'how often it is asked',
  'service.readiness.unhealthyLimitSec': 'a replica that has not answered for this long is replaced',
  'service.replicas': 'the fewest and the most replicas',
  'service.replicas.min': 'the fewest replicas, whatever the load',
  'service.replicas.max': 'the most replicas, whatever the load',
  'service.targets': 'what one replica should carry; the most replicas any target asks for is taken',
  'service.targets[].metric': 'the load figure the target is on',
  'service.targets[].perReplica': 'how much of it one replica carries',
  'service.targets[].prometheusMetric': "the replica's own Prometheus series for the metric (default: vLLM's names)",
  'service.spareSpot': 'spot replicas beyond the target, against losses (gpu-fleet chooses when left out)',
  'service.onDemandBase': 'replicas kept on on-demand whatever spot does',
  'service.scaleUpDelaySec': 'how long a higher load must last before replicas are added',
  'service.scaleDownWindowSec': 'replicas are removed only to the most the load asked for over this window',
  'service.scaleAhead': 'also scale on the trend of the load, a cold start ahead (up only; off by default)',
  'service.objective': 'what a request may expect; gpu-fleet counts the share of requests within it',
  'service.objective.waitSec': 'how long a request may wait for a free slot of a ready replica',
  'service.objective.replicaRps': "requests per second one replica serves at full load (measure it, e.g. with the engine's benchmark)",
  'service.objective.concurrency': "requests one replica serves at once (an LLM engine's batch slots, e.g. vLLM's max_num_seqs)",
  container: 'how the container runs (Docker): shared memory, the locked-memory limit, and whether a root image keeps its root user',
  'container.shmSizeMiB': 'the size of /dev/shm (default 1024 MiB per GPU the job holds on a machine)',
  'container.lockedMemoryMiB': 'the locked-memory limit (default unlimited, as NCCL and RDMA need)',
  'container.runAsRoot': 'run an image whose user is root as root (teams the config lets only; default: as uid 65534)',
  placement: 'where the job may run (any cloud, region and zone of the fleet when left out)',
  'placement.clouds': 'the clouds it may run on',
  'placement.regions': 'the regions it may run in',
  'placement.zones': 'the zones it may run in',
});
