import type { protos } from '@google-cloud/compute';
import type { Instance } from '../../core/fleet.ts';
import type { Clock } from '../../core/ports.ts';
import type { NodeNotice, NoticeSource } from '../../core/services/interruption.ts';
import { translateGcpError } from './errors.ts';
import type { GcpScope } from './mig-node-groups.ts';

/** GCE gives a preempted (spot) VM about 30 s; the agent assumes that from the moment it sees it. */
export const GCE_PREEMPTION_NOTICE_MS = 30_000;

type Operation = protos.google.cloud.compute.v1.IOperation;

/** The one call of the zone operations API this needs (`ZoneOperationsClient` has it; the simulator's GCP has it too). */
export interface ZoneOperationsApi {
  listAsync(request: { project: string; zone: string; filter: string; maxResults: number }): AsyncIterable<Operation>;
}

/** The node groups' last listing of their machines (`MigNodeGroups` keeps it). */
export interface RecentInstances {
  recentInstances(maxAgeMs: number): Promise<Instance[]>;
}

export interface PreemptionOptions {
  readonly projects: readonly GcpScope[];
  readonly clock: Clock;
  /** On the first look, how far back to read preemptions, seconds (default 900). */
  readonly firstLookbackSec?: number;
  /** Each later look re-reads this much before the previous one, seconds (default 120): operations can appear late. */
  readonly overlapSec?: number;
  /** Spot machines found stopped are read from the node groups' last listing when it is at most this old, seconds (default 120). */
  readonly instancesMaxAgeSec?: number;
}

const last = (url: string | null | undefined) => (url ?? '').split('/').pop() ?? '';

/**
 * GCP preemptions, found by looking (GCP pushes nothing to AWS): every reconcile reads each
 * configured zone's operations of type `compute.instances.preempted` since the last look, and
 * the managed spot machines found TERMINATED or STOPPED (a preemption whose operation was missed,
 * or a machine stopped by its termination action). Both become `preempted` notices for the same
 * interruption service as AWS events; their ids are stable, so a repeat changes nothing. GCP gives
 * about 30 s of notice before a preemption: the node agent's local watch of the metadata server
 * checkpoints in that window, and this source catches what the agent could not report.
 */
export class GcpPreemptions implements NoticeSource {
  readonly cloud = 'gcp' as const;
  private lastLookMs: number | undefined;

  constructor(
    private readonly operations: ZoneOperationsApi,
    private readonly groups: RecentInstances,
    private readonly options: PreemptionOptions,
  ) {}

  async poll(): Promise<NodeNotice[]> {
    const now = this.options.clock.nowMs();
    const sinceMs =
      this.lastLookMs === undefined
        ? now - (this.options.firstLookbackSec ?? 900) * 1000
        : this.lastLookMs - (this.options.overlapSec ?? 120) * 1000;
    const out: NodeNotice[] = [];
    const seen = new Set<string>();
    for (const scope of this.options.projects) {
      for (const zone of scope.zones) {
        for (const op of await this.preemptedOps(scope.projectId, zone, sinceMs)) {
          const instanceId = last(op.targetLink);
          const atMs = Date.parse(op.insertTime ?? op.startTime ?? '') || now;
          seen.add(instanceId);
          out.push({ kind: 'preempted', eventId: `gcp/${scope.projectId}/${zone}/${op.name ?? instanceId}`, instanceId, atMs });
        }
      }
    }
    for (const i of await this.groups.recentInstances((this.options.instancesMaxAgeSec ?? 120) * 1000)) {
      if (i.capacityType !== 'spot' || i.state !== 'terminated' || seen.has(i.id)) continue;
      // No operation seen for it (too old, or missed): the machine itself says it was taken.
      out.push({ kind: 'preempted', eventId: `gcp/${i.groupId}/${i.id}/found-terminated/${i.launchedAtMs}`, instanceId: i.id, atMs: now });
    }
    this.lastLookMs = now;
    return out;
  }

  private async preemptedOps(project: string, zone: string, sinceMs: number): Promise<Operation[]> {
    const filter = `(operationType = "compute.instances.preempted") AND (insertTime > "${new Date(sinceMs).toISOString()}")`;
    const out: Operation[] = [];
    try {
      for await (const op of this.operations.listAsync({ project, zone, filter, maxResults: 500 })) {
        // Filter again here: the server's filter is trusted for volume, not for correctness.
        if (op.operationType !== 'compute.instances.preempted') continue;
        const at = Date.parse(op.insertTime ?? '');
        if (Number.isFinite(at) && at < sinceMs) continue;
        out.push(op);
      }
    } catch (error) {
      throw translateGcpError(error, { operation: 'list preemption operations', resource: `${project}/${zone}` });
    }
    return out;
  }
}
