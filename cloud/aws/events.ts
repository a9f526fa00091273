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
 * EC2. Everything else is reported as ignored with the reason; malformed events as invalid.
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
  const env = Envelope.safeParse(raw);
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
  return { kind: 'ignored', reason: `${e.source} "${type}" events need no action from gpu-fleet` };
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
