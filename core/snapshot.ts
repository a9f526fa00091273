import type { ByteRates, NetworkLayout, StoreSites } from './bytes.ts';
import type { InstanceTypeCatalog, PriceQuote } from './catalog.ts';
import type { FleetNode, NodeGroup } from './fleet.ts';
import type { Job } from './job.ts';
import type { MicroUsd } from './money.ts';
import type { Team } from './team.ts';
import type { Reservation } from './reservation.ts';
import type { SpotModelState } from './spot-model.ts';

/** Tunables of the control loop. Durations in seconds. */
export interface Policy {
  /**
   * A node with no work for this long is removed. By default the boot time: keeping an empty
   * machine longer costs more than bringing one back would (the ski-rental rule).
   */
  readonly idleCooldownSec: number;
  /** How long a new machine takes to boot and register, for the planner's arithmetic. */
  readonly expectedBootSec: number;
  readonly reconcileIntervalSec: number;
  /**
   * A node whose agent has not sent a heartbeat for this long is silent: it takes no new work and
   * is not counted on (reconcile's patience).
   */
  readonly heartbeatTimeoutSec: number;
  /**
   * A running machine silent this long (alone, not with most of its zone) is lost, and its work is
   * requeued. Longer than the agent's lease plus its fence (node-rules DEFAULT_AGENT_LEASE: 180 s,
   * then at most 60 s to checkpoint and 30 s to stop), so an agent that is alive but cut off from
   * the control plane has stopped its attempts before they run anywhere else.
   */
  readonly silentRequeueSec: number;
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
  /** Move checkpointable work from on-demand to spot when spot is available and the saving beats the cost of the move. */
  readonly moveToSpot: boolean;
  /** How long a job moved towards spot waits for a spot machine before it may run anywhere again. */
  readonly moveToSpotPatienceSec: number;
  /**
   * How long interruptible work without deadline pressure waits for spot capacity when none can
   * be had (all its spot pools failed or were interrupted recently) before it runs on on-demand:
   * at most this, and at most half the job's remaining work (at least a boot time). 0 buys
   * on-demand at once.
   */
  readonly spotPatienceSec: number;
  /** At most this many jobs are moved to spot by one plan, so a market that turns does not catch them all. */
  readonly moveToSpotPerPlan: number;
  /**
   * Upload speed assumed for checkpoints (MiB/s per machine) and the margin an upload gets beyond
   * size ÷ speed: the agent's allowance for saving a checkpoint it is asked for, and the control
   * plane's for giving up on one (grace + allowance + a margin).
   */
  readonly uploadMiBPerSec: number;
  readonly uploadMarginSec: number;
  /**
   * Correlated silence (core/fleet.ts correlatedSilence): a zone of at least `silenceMinMachines`
   * running machines where `silenceShare` or more fell silent within `silenceWindowSec` of each
   * other is a control-plane fault, and its silent machines are neither requeued nor let go.
   */
  readonly silenceShare: number;
  readonly silenceMinMachines: number;
  readonly silenceWindowSec: number;
  /**
   * The node groups' terminate lifecycle hook (the stack's) and its timeout: a machine found held
   * by it with no lifecycle event seen is drained as if the event had come.
   */
  readonly drainHookName: string;
  readonly drainHookTimeoutSec: number;
  /**
   * Pairs of teams whose host-network work may share a machine (the fleet config's
   * `hostNetworkSharing`). Any other two teams' host-network jobs never do: a container on the
   * machine's own network reaches what the machine reaches and listens where it listens.
   */
  readonly hostNetworkSharing?: readonly (readonly [string, string])[];
}

export const DEFAULT_POLICY: Policy = {
  idleCooldownSec: 180,
  expectedBootSec: 180,
  reconcileIntervalSec: 60,
  heartbeatTimeoutSec: 90,
  silentRequeueSec: 300,
  noticeMarginSec: 20,
  unavailableForSec: 300,
  defaultRuntimeSec: 3600,
  restoreSec: 60,
  deadlineMarginSec: 1800,
  consolidate: true,
  moveToSpot: true,
  moveToSpotPatienceSec: 600,
  spotPatienceSec: 1800,
  moveToSpotPerPlan: 20,
  uploadMiBPerSec: 500,
  uploadMarginSec: 120,
  // Kubernetes' node lifecycle controller's unhealthy-zone threshold (0.55) on zones of 3 or more; "together": within 2 minutes.
  silenceShare: 0.55,
  silenceMinMachines: 3,
  silenceWindowSec: 120,
  drainHookName: 'gpu-fleet-drain',
  drainHookTimeoutSec: 300,
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
  /**
   * The spot market as the fleet has seen it (core/spot-model.ts): what a spot choice asks "will
   * a machine launched in this pool now survive the work?". Absent: the per-pool rates above alone.
   */
  readonly spotModel?: SpotModelState;
  /** Offerings not to launch until the given time (ms), after a failed launch. */
  readonly unavailableUntilMs: ReadonlyMap<string, number>;
  readonly teams: ReadonlyMap<string, Team>;
  /** Each team's spend in its current budget period. */
  readonly spendMicroUsd: ReadonlyMap<string, MicroUsd>;
  /** What each team's running work will still cost (see committedCostMicroUsd); absent counts as none. */
  readonly committedMicroUsd?: ReadonlyMap<string, MicroUsd>;
  readonly policy: Policy;
  /** Capacity reservations the reserved offerings launch into (and the others found), by reservation id. */
  readonly reservations?: ReadonlyMap<string, Reservation>;
  /** Where checkpoints are kept, the deployment's network path and the byte price table: a save's price for the cadence (absent: stall only). */
  readonly saveBytes?: StoreSites & { readonly layout: NetworkLayout; readonly rates: ByteRates };
  /** Providers (a cloud's region or projects) or single groups left out because their calls fail: their groups are not here, so work only they could run waits. */
  readonly degraded?: readonly { readonly cloud: string; readonly scope?: string; readonly error: string }[];
}
