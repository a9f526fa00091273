/**
 * The front door on AWS: one Application Load Balancer target group per service (IP targets),
 * through the Elastic Load Balancing v2 API (RegisterTargets, DeregisterTargets,
 * DescribeTargetHealth). The stack creates the groups and names them to the functions
 * (`GPU_FLEET_SERVICE_TARGET_GROUPS`, service id → target group ARN).
 */
import { SERVICE_DEREGISTRATION_DELAY_SEC } from '../../core/serving/service.ts';
import {
  DeregisterTargetsCommand,
  DescribeTargetHealthCommand,
  type ElasticLoadBalancingV2Client,
  RegisterTargetsCommand,
} from '@aws-sdk/client-elastic-load-balancing-v2';
import { CloudError } from '../../core/errors.ts';
import type { FrontDoor, FrontDoorTarget, FrontDoorTargetState } from '../../core/ports.ts';
import { translateAwsError } from './errors.ts';

const STATES: readonly FrontDoorTargetState[] = ['initial', 'healthy', 'unhealthy', 'draining', 'unused', 'unavailable'];

export class ElbFrontDoor implements FrontDoor {
  constructor(
    private readonly client: ElasticLoadBalancingV2Client,
    /** Service id (`team.name`) → target group ARN. */
    private readonly targetGroups: Readonly<Record<string, string>>,
    /** The target groups' deregistration delay, as the stack sets it. */
    readonly deregistrationDelaySec: number = SERVICE_DEREGISTRATION_DELAY_SEC,
  ) {}

  fronts(serviceId: string): boolean {
    return this.targetGroups[serviceId] !== undefined;
  }

  async register(serviceId: string, targets: readonly FrontDoorTarget[]): Promise<void> {
    if (targets.length === 0) return;
    const arn = this.arnOf(serviceId, 'RegisterTargets');
    try {
      await this.client.send(
        new RegisterTargetsCommand({ TargetGroupArn: arn, Targets: targets.map((t) => ({ Id: t.ip, Port: t.port })) }),
      );
    } catch (error) {
      throw translateAwsError(error, { operation: 'RegisterTargets', resource: arn });
    }
  }

  async deregister(serviceId: string, targets: readonly FrontDoorTarget[]): Promise<void> {
    if (targets.length === 0) return;
    const arn = this.arnOf(serviceId, 'DeregisterTargets');
    try {
      await this.client.send(
        new DeregisterTargetsCommand({ TargetGroupArn: arn, Targets: targets.map((t) => ({ Id: t.ip, Port: t.port })) }),
      );
    } catch (error) {
      // A target that is not registered (any more) is what deregistering wants.
      if ((error as { name?: string }).name === 'InvalidTargetException') return;
      throw translateAwsError(error, { operation: 'DeregisterTargets', resource: arn });
    }
  }

  async targets(serviceId: string): Promise<{ target: FrontDoorTarget; state: FrontDoorTargetState; reason?: string }[]> {
    const arn = this.arnOf(serviceId, 'DescribeTargetHealth');
    try {
      const out = await this.client.send(new DescribeTargetHealthCommand({ TargetGroupArn: arn }));
      return (out.TargetHealthDescriptions ?? []).flatMap((d) => {
        const id = d.Target?.Id;
        const port = d.Target?.Port;
        if (id === undefined || port === undefined) return [];
        const raw = d.TargetHealth?.State;
        const state = STATES.find((s) => s === raw) ?? 'unavailable';
        return [{ target: { ip: id, port }, state, ...(d.TargetHealth?.Reason ? { reason: d.TargetHealth.Reason } : {}) }];
      });
    } catch (error) {
      throw translateAwsError(error, { operation: 'DescribeTargetHealth', resource: arn });
    }
  }

  private arnOf(serviceId: string, operation: string): string {
    const arn = this.targetGroups[serviceId];
    if (!arn)
      throw new CloudError(
        'not-found',
        `${operation}: service ${serviceId} has no target group (services with one: ${Object.keys(this.targetGroups).sort().join(', ') || 'none'})`,
        {
          operation,
          resource: serviceId,
          cloud: 'aws',
        },
      );
    return arn;
  }
}
