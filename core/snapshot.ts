import type { InstanceTypeCatalog, PriceQuote } from './catalog.ts';
import type { FleetNode, NodeGroup } from './fleet.ts';
import type { Job } from './job.ts';
import type { MicroUsd } from './money.ts';
import type { Team } from './team.ts';

/** Tunables of the control loop. Durations in seconds. */
export interface Policy {
  /** A node with no work for this long is removed. */
  readonly idleCooldownSec: number;
  /** How long a new machine takes to boot and register, for the planner's arithmetic. */
  readonly expectedBootSec: number;
  readonly reconcileIntervalSec: number;
  /** A node whose agent has not sent a heartbeat for this long is lost. */
  readonly heartbeatTimeoutSec: number;
  /** Seconds kept back from a spot notice, so checkpoints finish before the machine goes. */
  readonly noticeMarginSec: number;
  /** How long an offering stays unavailable after a failed launch or an interruption. */
  readonly unavailableForSec: number;
  /** Runtime assumed for a job that gives no estimate, for the cost model. */
  readonly defaultRuntimeSec: number;
  /** Seconds a resumed job spends restoring its checkpoint before it makes progress. */
  readonly restoreSec: number;
  /** Work a deadline job keeps in reserve beyond its remaining work and a changeover, before it must go on-demand. */
  readonly deadlineMarginSec: number;
  /** Move checkpointable work off an underused node when the saving beats the restart cost. */
  readonly consolidate: boolean;
}

export const DEFAULT_POLICY: Policy = {
  idleCooldownSec: 300,
  expectedBootSec: 180,
  reconcileIntervalSec: 60,
  heartbeatTimeoutSec: 90,
  noticeMarginSec: 20,
  unavailableForSec: 900,
  defaultRuntimeSec: 3600,
  restoreSec: 60,
  deadlineMarginSec: 1800,
  consolidate: true,
};

/** One consistent view of the world, read at the start of a reconcile. Everything the planner knows. */
export interface Snapshot {
  readonly nowMs: number;
  /** Jobs waiting for a place, including held ones. */
  readonly pendingJobs: readonly Job[];
  /** Jobs placed, running or checkpointing: they hold GPUs. */
  readonly activeJobs: readonly Job[];
  readonly groups: readonly NodeGroup[];
  readonly nodes: readonly FleetNode[];
  readonly instanceTypes: InstanceTypeCatalog;
  /** Price of each offering, by offering id. An offering without a price is not bought. */
  readonly prices: ReadonlyMap<string, PriceQuote>;
  /** Expected interruptions per hour of each spot offering, by offering id. */
  readonly poolRiskPerHour: ReadonlyMap<string, number>;
  /** Offerings not to launch until the given time (ms), after a failed launch. */
  readonly unavailableUntilMs: ReadonlyMap<string, number>;
  readonly teams: ReadonlyMap<string, Team>;
  /** Each team's spend in its current budget period. */
  readonly spendMicroUsd: ReadonlyMap<string, MicroUsd>;
  readonly policy: Policy;
}
