import type { NodeAssignment } from '../../../core/job.ts';
import type { PlanAction } from '../../../core/plan.ts';
import { classify } from '../../../core/planner/classification.ts';
import { indexSnapshot } from '../../../core/planner/planner.ts';
import type { PlanningState } from '../../../core/planner/state.ts';
import { aJob, aSnapshot, T0 } from '../../builders.ts';

/** The planning state of a snapshot after indexing and launch cancellation (phases 1 and 2). */
export const indexed = (over: Parameters<typeof aSnapshot>[0] = {}): PlanningState => indexSnapshot(aSnapshot(over));

/** The state after classification too, with the entries in planning order. */
export function classified(over: Parameters<typeof aSnapshot>[0] = {}) {
  const st = indexed(over);
  return { st, entries: classify(st) };
}

/** A running attempt holding the given room on one machine, started an hour ago. */
export const running = (id: string, nodeId: string, a: Omit<NodeAssignment, 'nodeId'>, extra: Parameters<typeof aJob>[0] = {}) =>
  aJob({
    id,
    state: 'running',
    startedAtMs: T0 - 3_600_000,
    placement: { nodes: [{ nodeId, ...a }], capacityType: 'on-demand' },
    ...extra,
  });

export const kinds = (actions: readonly PlanAction[]) => actions.map((a) => a.kind);

/** What a node still has free, as the fit search sees it: free whole GPUs per node id of an index. */
export const freeWhole = (nodes: readonly { id: string; freeWhole: number }[]) => Object.fromEntries(nodes.map((n) => [n.id, n.freeWhole]));
