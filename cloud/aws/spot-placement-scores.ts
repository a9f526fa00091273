import { DescribeAvailabilityZonesCommand, GetSpotPlacementScoresCommand, type EC2Client } from '@aws-sdk/client-ec2';
import type { Clock } from '../../core/ports.ts';
import { messageOf } from '../../core/errors.ts';

/**
 * EC2 Spot Placement Scores for the spot pool model's prior (core/spot-model.ts): per zone of one
 * region, 1 to 10, how likely a spot request for a node group's instance types is to be filled now.
 *
 * What the API reference and the user guide say, and what is done about it:
 * - A score is for a set of instance types and a target capacity; with one or two types it is
 *   "always low". A group with fewer than three types is not asked (its pools keep the band).
 * - `SingleAvailabilityZone` with the region as `RegionNames` scores that region's zones, by zone
 *   id (`usw2-az1`), not name: names differ per account, so the ids are mapped with
 *   DescribeAvailabilityZones.
 * - New request configurations may be limited within 24 hours, and scores move: one configuration
 *   (types, capacity) is asked at most once per `minIntervalMs` (an hour by default), and the last
 *   answer kept meanwhile.
 * - An account that refuses it (`UnauthorizedOperation`, AccessDenied, an opt-out) turns it off for
 *   the day: nothing is asked again until then, and `problem` says why. Any other failure keeps
 *   the last answer and is retried at the next interval.
 */
export interface SpotPlacementScoresOptions {
  readonly region: string;
  readonly clock: Clock;
  readonly minIntervalMs?: number;
}

export interface ScoreRequest {
  readonly instanceTypes: readonly string[];
  /** Machines the group may want at once (its max). */
  readonly targetCapacity: number;
}

const DAY_MS = 86_400_000;

/** The account's own refusals (a policy, an opt-out); an expired token or a throttle is not one. */
const REFUSALS = ['UnauthorizedOperation', 'AccessDenied', 'AccessDeniedException', 'OptInRequired'];

export class SpotPlacementScores {
  private readonly kept = new Map<string, { atMs: number; scores: ReadonlyMap<string, number> }>();
  private zoneNames: Map<string, string> | undefined;
  private offUntilMs = 0;
  /** Why scores are not read now, when they are not. */
  problem: string | undefined;

  constructor(
    private readonly ec2: EC2Client,
    private readonly options: SpotPlacementScoresOptions,
  ) {}

  /**
   * Zone name → score for the request's types in this region, or an empty map when it is not asked
   * (fewer than three types, turned off) or has no answer yet.
   */
  async scores(request: ScoreRequest): Promise<ReadonlyMap<string, number>> {
    const types = [...new Set(request.instanceTypes)].sort();
    if (types.length < 3) return new Map();
    const key = `${types.join(',')}|${request.targetCapacity}`;
    const now = this.options.clock.nowMs();
    const kept = this.kept.get(key);
    if (now < this.offUntilMs) return kept?.scores ?? new Map();
    if (kept && now - kept.atMs < (this.options.minIntervalMs ?? 3_600_000)) return kept.scores;
    try {
      const names = await this.zones();
      const scores = new Map<string, number>();
      let token: string | undefined;
      do {
        const out = await this.ec2.send(
          new GetSpotPlacementScoresCommand({
            InstanceTypes: types,
            TargetCapacity: Math.max(1, request.targetCapacity),
            TargetCapacityUnitType: 'units',
            SingleAvailabilityZone: true,
            RegionNames: [this.options.region],
            MaxResults: 10,
            ...(token ? { NextToken: token } : {}),
          }),
        );
        for (const s of out.SpotPlacementScores ?? []) {
          const zone = s.AvailabilityZoneId !== undefined ? names.get(s.AvailabilityZoneId) : undefined;
          if (zone !== undefined && s.Score !== undefined && s.Region === this.options.region) scores.set(zone, s.Score);
        }
        token = out.NextToken || undefined;
      } while (token);
      this.kept.set(key, { atMs: now, scores });
      this.problem = undefined;
      return scores;
    } catch (error) {
      const name = (error as { name?: string }).name ?? '';
      if (REFUSALS.includes(name)) {
        this.offUntilMs = now + DAY_MS;
        this.problem = `Spot Placement Scores are off until ${new Date(this.offUntilMs).toISOString()}: the account refused them (${messageOf(error)}); pools keep the Advisor band as prior`;
      } else this.problem = `Spot Placement Scores could not be read (${messageOf(error)}); the last answer stands`;
      // Kept the last answer; the next call after the interval asks again.
      if (kept) this.kept.set(key, { ...kept, atMs: now });
      return kept?.scores ?? new Map();
    }
  }

  /** Zone id → zone name in this account and region (read once). */
  private async zones(): Promise<Map<string, string>> {
    if (this.zoneNames) return this.zoneNames;
    const out = await this.ec2.send(
      new DescribeAvailabilityZonesCommand({ Filters: [{ Name: 'region-name', Values: [this.options.region] }] }),
    );
    this.zoneNames = new Map(
      (out.AvailabilityZones ?? []).flatMap((z) => (z.ZoneId && z.ZoneName ? [[z.ZoneId, z.ZoneName] as [string, string]] : [])),
    );
    return this.zoneNames;
  }
}
