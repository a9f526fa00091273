/**
 * A simulated load balancer in front of each service: a target group per service that takes IP
 * targets, health-checks each one on its readiness path (`probe`: what the replica behind the
 * address answers, never assumed), and drains a deregistered one for `deregistrationDelaySec`
 * before it leaves, as an Application Load Balancer target group does. A new target is `initial`
 * for `healthyAfterSec`, then `healthy` while its check passes and `unhealthy` while it fails
 * (`Target.FailedHealthChecks`); only a healthy target gets traffic. It only plays the world: which
 * replica is registered when is the services step's decision.
 */
import type { Clock, FrontDoor, FrontDoorTarget, FrontDoorTargetState } from '../../core/ports.ts';

interface Held {
  state: 'initial' | 'draining' | 'healthy' | 'unhealthy';
  sinceMs: number;
}

export class SimFrontDoor implements FrontDoor {
  private readonly groups = new Map<string, Map<string, Held>>();
  /** Every register and deregister, in order (for tests and reports). */
  readonly log: { atMs: number; serviceId: string; action: 'register' | 'deregister'; target: FrontDoorTarget }[] = [];

  constructor(
    private readonly clock: Clock,
    private readonly options: {
      readonly healthyAfterSec: number;
      readonly deregistrationDelaySec: number;
      /** The health check: whether the target answers on its readiness path now. */
      readonly probe: (serviceId: string, target: FrontDoorTarget, nowMs: number) => boolean;
    },
  ) {}

  get deregistrationDelaySec(): number {
    return this.options.deregistrationDelaySec;
  }

  fronts(): boolean {
    return true;
  }

  async register(serviceId: string, targets: readonly FrontDoorTarget[]): Promise<void> {
    const g = this.group(serviceId);
    const now = this.clock.nowMs();
    for (const t of targets) {
      const key = `${t.ip}:${t.port}`;
      const held = g.get(key);
      if (held && held.state !== 'draining') continue;
      g.set(key, { state: 'initial', sinceMs: now });
      this.log.push({ atMs: now, serviceId, action: 'register', target: t });
    }
  }

  async deregister(serviceId: string, targets: readonly FrontDoorTarget[]): Promise<void> {
    const g = this.group(serviceId);
    const now = this.clock.nowMs();
    for (const t of targets) {
      const key = `${t.ip}:${t.port}`;
      const held = g.get(key);
      if (!held || held.state === 'draining') continue;
      g.set(key, { state: 'draining', sinceMs: now });
      this.log.push({ atMs: now, serviceId, action: 'deregister', target: t });
    }
  }

  async targets(serviceId: string): Promise<{ target: FrontDoorTarget; state: FrontDoorTargetState; reason?: string }[]> {
    return [...this.current(serviceId).entries()].map(([key, h]) => {
      const [ip, port] = key.split(':');
      return {
        target: { ip: ip!, port: Number(port) },
        state: h.state,
        ...(h.state === 'unhealthy' ? { reason: 'Target.FailedHealthChecks' } : {}),
      };
    });
  }

  /** Targets taking traffic now. */
  healthy(serviceId: string): FrontDoorTarget[] {
    return [...this.current(serviceId).entries()]
      .filter(([, h]) => h.state === 'healthy')
      .map(([key]) => {
        const [ip, port] = key.split(':');
        return { ip: ip!, port: Number(port) };
      });
  }

  /** The group with health checks passed and drained targets gone, as of now. */
  private current(serviceId: string): Map<string, Held> {
    const g = this.group(serviceId);
    const now = this.clock.nowMs();
    for (const [key, h] of [...g.entries()]) {
      if (h.state === 'draining') {
        if (now - h.sinceMs >= this.options.deregistrationDelaySec * 1000) g.delete(key);
        continue;
      }
      if (h.state === 'initial' && now - h.sinceMs < this.options.healthyAfterSec * 1000) continue;
      const [ip, port] = key.split(':');
      const state = this.options.probe(serviceId, { ip: ip!, port: Number(port) }, now) ? 'healthy' : 'unhealthy';
      if (state !== h.state) g.set(key, { state, sinceMs: now });
    }
    return g;
  }

  private group(serviceId: string): Map<string, Held> {
    let g = this.groups.get(serviceId);
    if (!g) {
      g = new Map();
      this.groups.set(serviceId, g);
    }
    return g;
  }
}
