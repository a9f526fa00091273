import '../../core/schema.ts';
import * as z from 'zod/mini';
import type { NodeNotice } from '../../core/services/interruption.ts';

/**
 * EventBridge events about machines, turned into the interruption service's notices. The same
 * parser serves the interruption Lambda and the simulated cloud, which emits these very shapes.
 *
 * Handled: aws.ec2 "EC2 Spot Instance Interruption Warning" (two minutes' notice),
 * "EC2 Instance Rebalance Recommendation", "EC2 Instance State-change Notification";
 * aws.autoscaling "EC2 Instance-terminate Lifecycle Action"; aws.health scheduled changes for
 * EC2; capacity reservations: "Capacity Block Delivered", "Capacity Block Expiration Warning"
 * (AWS's documentation spells both with and without "Reservation" after "Block", and shows
 * `detail_type` and `customer_event_id` where EventBridge sends `detail-type` and `id`: all are
 * read), and "EC2 Capacity Reservation Instance Interruption Warning" (an interruptible
 * reservation taking a machine back, two minutes' notice). Everything else is reported as ignored
 * with the reason; malformed events as invalid.
 */

const INSTANCE_ID = /^i-[0-9a-f]{8}(?:[0-9a-f]{9})?$/;
export const SPOT_NOTICE_MS = 120_000;

const Envelope = z.object({
  id: z.string({ error: 'id is missing' }).check(z.minLength(1, { error: 'id is empty' })),
  'detail-type': z.string({ error: 'detail-type is missing' }),
  source: z.string({ error: 'source is missing' }),
  time: z.optional(z.string()),
  region: z.optional(z.string()),
  resources: z._default(z.array(z.string()), []),
  detail: z.record(z.string(), z.unknown(), { error: 'detail must be an object' }),
});

const instanceId = z.string().check(z.regex(INSTANCE_ID, { error: 'is not an EC2 instance id (i- followed by 8 or 17 hex digits)' }));
const nonEmpty = () => z.string().check(z.minLength(1));

const ReservationDetail = z.object({
  'capacity-reservation-id': z.string().check(z.regex(/^cr-[0-9a-f]{8,17}$/, { error: 'is not a capacity reservation id (cr-…)' })),
  'end-date': z.optional(z.string()),
});
const ReclaimWarning = z.object({ 'instance-id': instanceId, 'instance-termination-time': z.optional(z.string()) });
/** How long before its end a Capacity Block's machines go, and how long after its expiration warning that is. */
const BLOCK_LEAD_MS = 30 * 60_000;
const BLOCK_WARNING_MS = 40 * 60_000;

const SpotWarning = z.object({ 'instance-id': instanceId, 'instance-action': z.optional(z.string()) });
const Rebalance = z.object({ 'instance-id': instanceId });
const StateChange = z.object({ 'instance-id': instanceId, state: nonEmpty() });
const Lifecycle = z.object({
  EC2InstanceId: instanceId,
  AutoScalingGroupName: nonEmpty(),
  LifecycleHookName: nonEmpty(),
  LifecycleActionToken: z.optional(z.string()),
  LifecycleTransition: z.string(),
});
const Health = z.object({
  service: z.string(),
  eventTypeCategory: z.string(),
  eventTypeCode: z.optional(z.string()),
  startTime: z.optional(z.string()),
  affectedEntities: z.optional(z.array(z.object({ entityValue: z.string() }))),
});

export type ParsedEvent =
  | { readonly kind: 'notice'; readonly notice: NodeNotice; readonly warnings: readonly string[] }
  | { readonly kind: 'ignored'; readonly reason: string }
  | { readonly kind: 'invalid'; readonly error: string };

export interface ParseOptions {
  /** When the event was received: the time of an event whose own `time` cannot be read. */
  readonly receivedAtMs: number;
  /** How long gpu-fleet's terminate lifecycle hook holds a machine (its heartbeat timeout). */
  readonly lifecycleTimeoutSec?: number;
}

export function parseCloudEvent(raw: unknown, options: ParseOptions): ParsedEvent {
  const env = Envelope.safeParse(documentedSpelling(raw));
  if (!env.success) return { kind: 'invalid', error: `not an EventBridge event: ${issues(env.error)}` };
  const e = env.data;
  const warnings: string[] = [];
  let atMs = e.time !== undefined ? Date.parse(e.time) : NaN;
  if (!Number.isFinite(atMs)) {
    warnings.push(`event time ${JSON.stringify(e.time)} is not a date; using the time it was received`);
    atMs = options.receivedAtMs;
  }
  const bad = (what: string, error: z.core.$ZodError) => ({ kind: 'invalid' as const, error: `${what} event ${e.id}: ${issues(error)}` });
  const type = e['detail-type'];

  if (e.source === 'aws.ec2' && type === 'EC2 Spot Instance Interruption Warning') {
    const d = SpotWarning.safeParse(e.detail);
    if (!d.success) return bad('spot interruption warning', d.error);
    const action = d.data['instance-action'];
    if (action !== undefined && !['terminate', 'stop', 'hibernate'].includes(action)) {
      warnings.push(`instance-action ${JSON.stringify(action)} is not terminate, stop or hibernate; treated as terminate`);
    }
    return {
      kind: 'notice',
      warnings,
      notice: { kind: 'interruption-warning', eventId: e.id, instanceId: d.data['instance-id'], atMs, deadlineMs: atMs + SPOT_NOTICE_MS },
    };
  }
  if (e.source === 'aws.ec2' && type === 'EC2 Instance Rebalance Recommendation') {
    const d = Rebalance.safeParse(e.detail);
    if (!d.success) return bad('rebalance recommendation', d.error);
    return { kind: 'notice', warnings, notice: { kind: 'rebalance', eventId: e.id, instanceId: d.data['instance-id'], atMs } };
  }
  if (e.source === 'aws.ec2' && type === 'EC2 Instance State-change Notification') {
    const d = StateChange.safeParse(e.detail);
    if (!d.success) return bad('state-change', d.error);
    return {
      kind: 'notice',
      warnings,
      notice: { kind: 'state-change', eventId: e.id, instanceId: d.data['instance-id'], atMs, state: d.data.state },
    };
  }
  if (e.source === 'aws.autoscaling' && type === 'EC2 Instance-terminate Lifecycle Action') {
    const d = Lifecycle.safeParse(e.detail);
    if (!d.success) return bad('terminate lifecycle action', d.error);
    if (d.data.LifecycleTransition !== 'autoscaling:EC2_INSTANCE_TERMINATING')
      return { kind: 'ignored', reason: `lifecycle transition ${d.data.LifecycleTransition} is not a termination` };
    return {
      kind: 'notice',
      warnings,
      notice: {
        kind: 'lifecycle-terminate',
        eventId: e.id,
        instanceId: d.data.EC2InstanceId,
        atMs,
        groupName: d.data.AutoScalingGroupName,
        hookName: d.data.LifecycleHookName,
        ...(d.data.LifecycleActionToken ? { token: d.data.LifecycleActionToken } : {}),
        deadlineMs: atMs + (options.lifecycleTimeoutSec ?? 300) * 1000,
      },
    };
  }
  if (e.source === 'aws.health') {
    const d = Health.safeParse(e.detail);
    if (!d.success) return bad('AWS Health', d.error);
    if (d.data.service !== 'EC2' || d.data.eventTypeCategory !== 'scheduledChange')
      return { kind: 'ignored', reason: `AWS Health ${d.data.service} ${d.data.eventTypeCategory} events need no action` };
    const ids = [...new Set([...(d.data.affectedEntities ?? []).map((a) => a.entityValue), ...e.resources])].filter((r) =>
      INSTANCE_ID.test(r),
    );
    if (ids.length === 0) return { kind: 'ignored', reason: `AWS Health event ${e.id} names no EC2 instance` };
    const start = d.data.startTime !== undefined ? Date.parse(d.data.startTime) : NaN;
    return {
      kind: 'notice',
      warnings,
      notice: { kind: 'scheduled-change', eventId: e.id, instanceIds: ids, atMs, ...(Number.isFinite(start) ? { startMs: start } : {}) },
    };
  }
  if (e.source === 'aws.ec2' && (type === 'Capacity Block Delivered' || type === 'Capacity Block Reservation Delivered')) {
    const d = ReservationDetail.safeParse(e.detail);
    if (!d.success) return bad('Capacity Block delivered', d.error);
    return {
      kind: 'notice',
      warnings,
      notice: { kind: 'reservation-delivered', eventId: e.id, reservationId: d.data['capacity-reservation-id'], atMs },
    };
  }
  if (
    e.source === 'aws.ec2' &&
    (type === 'Capacity Block Expiration Warning' || type === 'Capacity Block Reservation Expiration Warning')
  ) {
    const d = ReservationDetail.safeParse(e.detail);
    if (!d.success) return bad('Capacity Block expiration warning', d.error);
    // The block's machines go 30 min before its end; without an end date, 10 min after the warning (sent 40 min before the end).
    const endMs = d.data['end-date'] !== undefined ? Date.parse(d.data['end-date']) : NaN;
    if (d.data['end-date'] !== undefined && !Number.isFinite(endMs))
      warnings.push(`end-date ${JSON.stringify(d.data['end-date'])} is not a date; its machines are taken to go 10 min after the warning`);
    const terminationMs = Number.isFinite(endMs) ? endMs - BLOCK_LEAD_MS : atMs + BLOCK_WARNING_MS - BLOCK_LEAD_MS;
    return {
      kind: 'notice',
      warnings,
      notice: { kind: 'reservation-ending', eventId: e.id, reservationId: d.data['capacity-reservation-id'], atMs, terminationMs },
    };
  }
  if (e.source === 'aws.ec2' && type === 'EC2 Capacity Reservation Instance Interruption Warning') {
    const d = ReclaimWarning.safeParse(e.detail);
    if (!d.success) return bad('capacity reservation interruption warning', d.error);
    const at = d.data['instance-termination-time'] !== undefined ? Date.parse(d.data['instance-termination-time']) : NaN;
    return {
      kind: 'notice',
      warnings,
      notice: {
        kind: 'interruption-warning',
        eventId: e.id,
        instanceId: d.data['instance-id'],
        atMs,
        deadlineMs: Number.isFinite(at) ? at : atMs + SPOT_NOTICE_MS,
        cause: 'interruptible capacity reservation reclaimed',
      },
    };
  }
  return { kind: 'ignored', reason: `${e.source} "${type}" events need no action from gpu-fleet` };
}

/** AWS's Capacity Block examples write `detail_type` and `customer_event_id`; EventBridge sends `detail-type` and `id`. Both are read. */
function documentedSpelling(raw: unknown): unknown {
  if (typeof raw !== 'object' || raw === null) return raw;
  const r = raw as Record<string, unknown>;
  if (r['detail-type'] !== undefined && r.id !== undefined) return raw;
  return {
    ...r,
    ...(r['detail-type'] === undefined && typeof r.detail_type === 'string' ? { 'detail-type': r.detail_type } : {}),
    ...(r.id === undefined && typeof r.customer_event_id === 'string' ? { id: r.customer_event_id } : {}),
  };
}

function issues(error: z.core.$ZodError): string {
  return error.issues.map((i) => `${i.path.map(String).join('.') || '(event)'} ${i.message}`).join('; ');
}

/** The EventBridge envelope every built event shares (used by the simulated cloud). */
function envelope(
  input: { id: string; region: string; account?: string; atMs: number },
  source: string,
  detailType: string,
  resource: (account: string) => string,
  detail: Record<string, unknown>,
): Record<string, unknown> {
  const account = input.account ?? '123456789012';
  return {
    version: '0',
    id: input.id,
    'detail-type': detailType,
    source,
    account,
    time: new Date(input.atMs).toISOString().replace(/\.\d{3}Z$/, 'Z'),
    region: input.region,
    resources: [resource(account)],
    detail,
  };
}

/** Builds a spot interruption warning exactly as EventBridge delivers it. */
export function spotInterruptionWarning(input: {
  id: string;
  instanceId: string;
  zone: string;
  region: string;
  account?: string;
  atMs: number;
}): Record<string, unknown> {
  return envelope(
    input,
    'aws.ec2',
    'EC2 Spot Instance Interruption Warning',
    () => `arn:aws:ec2:${input.zone}:instance/${input.instanceId}`,
    {
      'instance-id': input.instanceId,
      'instance-action': 'terminate',
    },
  );
}

/** Builds an EC2 state-change notification as EventBridge delivers it. */
export function instanceStateChange(input: {
  id: string;
  instanceId: string;
  region: string;
  account?: string;
  atMs: number;
  state: string;
}): Record<string, unknown> {
  return envelope(
    input,
    'aws.ec2',
    'EC2 Instance State-change Notification',
    (account) => `arn:aws:ec2:${input.region}:${account}:instance/${input.instanceId}`,
    { 'instance-id': input.instanceId, state: input.state },
  );
}

/** Builds an EC2 rebalance recommendation as EventBridge delivers it. */
export function rebalanceRecommendation(input: {
  id: string;
  instanceId: string;
  region: string;
  account?: string;
  atMs: number;
}): Record<string, unknown> {
  return envelope(
    input,
    'aws.ec2',
    'EC2 Instance Rebalance Recommendation',
    (account) => `arn:aws:ec2:${input.region}:${account}:instance/${input.instanceId}`,
    { 'instance-id': input.instanceId },
  );
}

/** Builds an EC2 Auto Scaling terminate lifecycle action as EventBridge delivers it (a hook holds the machine). */
export function terminateLifecycleAction(input: {
  id: string;
  instanceId: string;
  groupName: string;
  hookName: string;
  token: string;
  region: string;
  account?: string;
  atMs: number;
}): Record<string, unknown> {
  return envelope(
    input,
    'aws.autoscaling',
    'EC2 Instance-terminate Lifecycle Action',
    (account) => `arn:aws:autoscaling:${input.region}:${account}:autoScalingGroup:*:autoScalingGroupName/${input.groupName}`,
    {
      LifecycleActionToken: input.token,
      AutoScalingGroupName: input.groupName,
      LifecycleHookName: input.hookName,
      EC2InstanceId: input.instanceId,
      LifecycleTransition: 'autoscaling:EC2_INSTANCE_TERMINATING',
    },
  );
}
