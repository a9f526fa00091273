import { readFileSync } from 'node:fs';
import { checkJobSpec, type JobSpec, type JobSpecInput } from '../../core/job-spec.ts';
import { whyNoGroupHolds } from '../../core/planner/capacity.ts';
import { shippedCatalog } from '../../cloud/catalog/all-shipped.ts';
import { degradedName } from '../../core/ports.ts';
import { messageOf, parseJson, UsageError } from '../../core/errors.ts';
import { openFleet, type Fleet, type FleetFlags } from '../fleet.ts';
import { print, teamFlag, withFleet, type Io } from './shared.ts';

export interface SubmitFlags extends FleetFlags {
  readonly team?: string;
  readonly file?: string;
  readonly image?: string;
  readonly command?: string[];
  readonly gpus?: string;
  readonly gpuModel?: string[];
  readonly mig?: string;
  readonly fraction?: string;
  readonly nodes?: string;
  readonly priority?: string;
  readonly interruptible?: boolean;
  readonly checkpointInterval?: string;
  readonly runtime?: string;
  readonly deadline?: string;
  readonly label?: string[];
  readonly env?: string[];
  /** NAME=ARN: secrets by reference. */
  readonly secret?: string[];
  readonly name?: string;
  readonly token?: string;
  readonly dryRun?: boolean;
  readonly json?: boolean;
}

/** The spec from --file, or from flags. Numbers stay as given when they are not numbers, so the schema names the problem. */
export function specFromFlags(flags: SubmitFlags): unknown {
  if (flags.file) {
    if (flags.image || flags.command || flags.gpus || flags.mig || flags.fraction)
      throw new UsageError('give the spec either with --file or with flags (--image, --gpus … -- program args), not both');
    try {
      return parseJson(readFileSync(flags.file === '-' ? 0 : flags.file, 'utf8'));
    } catch (error) {
      throw new UsageError(`--file ${flags.file}: ${messageOf(error)} (a job spec is a JSON object: docs/reference/job-spec.md)`);
    }
  }
  if (!flags.image)
    throw new UsageError(
      'give the job with --file spec.json, or with --image, --gpus (or --mig / --fraction) and the program after "--", e.g. -- python train.py',
    );
  const num = (v: string | undefined) => (v === undefined ? undefined : Number.isFinite(Number(v)) && v.trim() !== '' ? Number(v) : v);
  const models = flags.gpuModel && flags.gpuModel.length > 0 ? { models: flags.gpuModel } : {};
  let gpu: Record<string, unknown>;
  if (flags.mig) gpu = { kind: 'mig', profile: flags.mig, ...models };
  else if (flags.fraction) {
    const [milli, mem] = flags.fraction.split(':');
    gpu = { kind: 'fraction', milliGpu: num(milli), memoryMiB: num(mem), ...models };
  } else gpu = { kind: 'whole', count: num(flags.gpus ?? '1'), ...models };
  const pairs = (list: string[] | undefined, what: string) =>
    Object.fromEntries(
      (list ?? []).map((kv) => {
        const i = kv.indexOf('=');
        if (i <= 0) throw new UsageError(`${what} "${kv}" must be KEY=VALUE`);
        return [kv.slice(0, i), kv.slice(i + 1)];
      }),
    );
  const spec: Record<string, unknown> = { image: flags.image, command: flags.command ?? [], gpu };
  if (flags.name) spec.name = flags.name;
  if (flags.nodes) spec.nodes = num(flags.nodes);
  if (flags.priority) spec.priority = num(flags.priority);
  if (flags.interruptible === false) spec.interruptible = false;
  if (flags.checkpointInterval) spec.checkpoint = { intervalSec: num(flags.checkpointInterval) };
  if (flags.runtime) spec.expectedRuntimeSec = num(flags.runtime);
  if (flags.deadline) spec.deadline = flags.deadline;
  if (flags.label?.length) spec.labels = pairs(flags.label, '--label');
  if (flags.env?.length) spec.env = pairs(flags.env, '--env');
  if (flags.secret?.length)
    spec.secrets = Object.entries(pairs(flags.secret, '--secret')).map(([name, valueFrom]) => ({ name, valueFrom }));
  return spec satisfies Partial<Record<keyof JobSpecInput, unknown>>;
}

export async function submitCommand(flags: SubmitFlags, io: Io): Promise<void> {
  const team = teamFlag(flags.team, true)!;
  const spec = specFromFlags(flags);
  const check = checkJobSpec(spec);
  if (!check.ok) throw new UsageError(`the job spec is not valid:\n${check.errors.map((e) => `  - ${e}`).join('\n')}`);
  if (flags.token !== undefined && (flags.token.length === 0 || flags.token.length > 128))
    throw new UsageError('--token must be 1 to 128 characters (the same token always makes the same job)');
  // Inline values are kept in the job record (hidden from status, explain and logs, but stored): secrets go by reference.
  const inline = Object.keys(check.spec.env);
  if (inline.length > 0)
    io.stderr.write(
      `gpu-fleet: warning: ${inline.join(', ')} ${inline.length === 1 ? 'is' : 'are'} given inline (env): the job record keeps the value. If it is a secret, pass it by reference instead: --secret NAME=arn:aws:ssm:REGION:ACCOUNT:parameter/gpu-fleet/${team}/NAME (or "secrets": [{"name", "valueFrom"}] in the spec)\n`,
    );
  if (flags.dryRun) {
    // A dry run needs no fleet, but checks the spec against the node groups when it can reach them.
    const fit = await openFleet(flags)
      .then(async (fleet) => {
        try {
          return await holdable(fleet, check.spec);
        } finally {
          await fleet.close();
        }
      })
      .catch((error: unknown): GroupFit => ({ checked: false, why: `not checked against the node groups: ${messageOf(error)}` }));
    if (fit.checked && !fit.canHold) throw new UsageError(`the job cannot run on this fleet: ${fit.why}`);
    print(
      io,
      flags.json,
      { valid: true, team, spec: check.spec, nodeGroups: fit },
      () => `valid; not sent (--dry-run)${fit.checked ? '; a node group can hold it' : `\n# ${fit.why}`}`,
    );
    return;
  }
  const { out, fit } = await withFleet(flags, io, async (fleet) => {
    const fit = await holdable(fleet, check.spec);
    // Intake would reject it: said here, and nothing is sent.
    if (fit.checked && !fit.canHold) throw new UsageError(`the job cannot run on this fleet: ${fit.why}; nothing was sent`);
    return { out: await fleet.submit(team, JSON.stringify(spec), flags.token), fit };
  });
  print(
    io,
    flags.json,
    { jobId: out.jobId, team, token: out.token, note: out.note, nodeGroups: fit },
    () => `${out.jobId}\n# ${out.note}; resubmitting with --token ${out.token} makes no second job${fit.checked ? '' : `\n# ${fit.why}`}`,
  );
}

/** Whether the spec was checked against the fleet's node groups, whether one could ever hold it, and why not. */
interface GroupFit {
  readonly checked: boolean;
  readonly canHold?: boolean;
  readonly why?: string;
}

/** Whether some node group of the fleet could ever hold the spec, and what the groups offer when none can. */
async function holdable(fleet: Fleet, spec: JobSpec): Promise<GroupFit> {
  const listed = await Promise.all(
    fleet.providers.map((p) => p.listGroups().catch((error: unknown) => `${degradedName(p)}: ${messageOf(error)}`)),
  );
  const failed = listed.filter((l): l is string => typeof l === 'string');
  const groups = listed.flatMap((l) => (typeof l === 'string' ? [] : l));
  if (groups.length === 0)
    return {
      checked: false,
      why: `not checked against the node groups: none was listed${failed.length > 0 ? ` (${failed.join('; ')})` : ''}`,
    };
  const why = whyNoGroupHolds(spec, groups, shippedCatalog().instanceTypes);
  if (why && failed.length > 0) return { checked: false, why: `not checked against every node group (${failed.join('; ')})` };
  return why ? { checked: true, canHold: false, why } : { checked: true, canHold: true };
}
