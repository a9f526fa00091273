import { GpuFleetError, UsageError } from '../errors.ts';
import type { JobStore, ServiceStore } from '../ports.ts';
import { cancelledService, type ServiceRecord } from '../serving/service.ts';
import { applyJobEvent } from './job-updates.ts';
import { outOfView, sees, teamOfId, type Viewer } from './team-view.ts';

export interface CancelOutcome {
  readonly status: string;
  readonly message: string;
}

/**
 * Cancels a job for a person: a pending one at once; a running one is checkpointed (if it can) and
 * stopped by its node's agent. A service is cancelled by its id too (TEAM.NAME): its replicas are
 * drained and stopped by the next reconciles. A team's role cancels its own team's work only.
 */
export async function cancelForPerson(
  stores: { readonly jobs: JobStore; readonly services?: ServiceStore },
  viewer: Viewer,
  jobId: string,
  nowMs: number,
): Promise<CancelOutcome> {
  const team = teamOfId(jobId);
  if (!sees(viewer, team)) throw outOfView(viewer, `job ${jobId}`, team);
  const job = await stores.jobs.get(jobId);
  if (!job && stores.services) {
    const service = await stores.services.get(jobId);
    if (service) return cancelService(stores.services, service, nowMs);
  }
  if (!job) throw new UsageError(`no job or service ${jobId}; see gpu-fleet status for the jobs and services there are`);
  if (job.state === 'cancelled') return { status: 'cancelled', message: `${jobId} was already cancelled` };
  if (['succeeded', 'failed', 'rejected'].includes(job.state))
    return { status: job.state, message: `${jobId} already ended (${job.state}); nothing to cancel` };
  const out = await applyJobEvent(stores.jobs, jobId, { type: 'cancel' }, nowMs);
  if (out.status === 'refused') throw new GpuFleetError(out.error);
  const now = await stores.jobs.get(jobId);
  if (now?.state === 'cancelled') return { status: 'cancelled', message: `${jobId} cancelled (it had not started)` };
  return {
    status: 'cancel-requested',
    message: `${jobId}: ${job.spec?.checkpoint ? 'asked to checkpoint, then ' : ''}its node's agent stops it and reports it cancelled`,
  };
}

async function cancelService(services: ServiceStore, record: ServiceRecord, nowMs: number): Promise<CancelOutcome> {
  for (let current: ServiceRecord | undefined = record, tries = 0; current && tries < 5; tries++) {
    const next = cancelledService(current, nowMs);
    if (!next) return { status: 'cancelled', message: `service ${record.id} was already cancelled` };
    const out = await services.update(next, current.version);
    if (out.ok)
      return {
        status: 'cancel-requested',
        message: `service ${record.id} cancelled: each replica leaves the load balancer, drains (its deregistration delay) and stops at the next reconciles`,
      };
    current = out.current;
  }
  throw new GpuFleetError(`service ${record.id}: its record kept changing; try again`);
}
