import type { GpuRequest } from '../gpu.ts';
import type { JobSpec } from '../job-spec.ts';
import { whyNoGroupHolds } from '../planner/capacity.ts';
import type { FamilyRunStore, FleetShape } from '../ports.ts';
import { rightsizeAtIntake, rightsizeFamily, runOf, type GpuOffers } from '../rightsizing.ts';
import type { Job, RightsizeDecision } from '../job.ts';

/**
 * Right-sizing's two writes and reads of the family runs: reconcile notes the measured runs of the
 * jobs that ended, and intake gives a submission with `gpu.rightsize` its family's shape.
 */

/** What intake needs to right-size: the family runs, and the catalogue's GPU models (memory, price per GPU-hour). */
export interface RightsizePorts {
  readonly families: FamilyRunStore;
  readonly offers: GpuOffers;
}

/** Notes each ended job's measured run in its family (jobs without a measurement, or that did not finish, add nothing). */
export async function noteFinishedRuns(families: FamilyRunStore, ended: readonly Job[]): Promise<number> {
  const runs = ended.flatMap((j) => {
    const run = runOf(j);
    return run ? [{ family: rightsizeFamily(j.team, j.spec), run }] : [];
  });
  if (runs.length > 0) await families.note(runs);
  return runs.length;
}

/** A submission's spec as right-sizing leaves it, and the decision to keep on the job (none for a spec without `gpu.rightsize`). */
export async function rightsizeSubmission(
  /** With the node groups a job could run on; absent or unknown, no shape is changed. */
  ports: RightsizePorts & { readonly fleetShape?: FleetShape },
  team: string,
  spec: JobSpec,
  nowMs: number,
): Promise<{ spec: JobSpec; decision?: RightsizeDecision }> {
  if (!spec.gpu.rightsize || spec.service) return { spec };
  const runs = await ports.families.runs(rightsizeFamily(team, spec));
  let shape: Awaited<ReturnType<FleetShape>>;
  try {
    shape = await ports.fleetShape?.();
  } catch {
    shape = undefined;
  }
  const runnable = shape
    ? (gpu: GpuRequest) => whyNoGroupHolds({ ...spec, gpu: gpu as JobSpec['gpu'] }, shape.groups, shape.types) === undefined
    : undefined;
  const out = rightsizeAtIntake(team, spec, runs, ports.offers, nowMs, runnable);
  return out ?? { spec };
}
