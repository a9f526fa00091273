import { describe, expect, it } from 'vitest';
import type { FrontDoor, FrontDoorTarget } from '../../core/ports.ts';

/**
 * What every FrontDoor must do: idempotent registration, health checks that pass only for a target
 * that answers, draining on deregistration, states as the load balancer reports them. `answers`
 * sets whether the replica behind a target answers its readiness path; `settle` lets the health
 * checks and the deregistration delay run.
 */
export function frontDoorContract(
  name: string,
  make: () => Promise<{
    door: FrontDoor;
    service: string;
    settle: () => Promise<void> | void;
    answers: (target: FrontDoorTarget, ok: boolean) => void;
  }>,
): void {
  describe(`FrontDoor contract: ${name}`, () => {
    const a = { ip: '10.0.1.17', port: 8000 };
    const b = { ip: '10.0.2.41', port: 8000 };

    it('registers a target once however often asked; it passes its health checks, then takes traffic', async () => {
      const { door, service, settle, answers } = await make();
      expect(door.fronts(service)).toBe(true);
      answers(a, true);
      await door.register(service, [a]);
      await door.register(service, [a]);
      const first = await door.targets(service);
      expect(first).toHaveLength(1);
      expect(first[0]).toMatchObject({ target: a, state: 'initial' });
      await settle();
      expect(await door.targets(service)).toEqual([expect.objectContaining({ target: a, state: 'healthy' })]);
    });

    it('a target that does not answer fails its health checks; it turns healthy once it answers, and unhealthy when it stops', async () => {
      const { door, service, settle, answers } = await make();
      answers(a, false);
      await door.register(service, [a]);
      await settle();
      expect(await door.targets(service)).toEqual([expect.objectContaining({ target: a, state: 'unhealthy' })]);
      answers(a, true);
      await settle();
      expect((await door.targets(service))[0]?.state).toBe('healthy');
      answers(a, false);
      await settle();
      expect((await door.targets(service))[0]?.state).toBe('unhealthy');
    });

    it('deregistering drains the target, then it is gone; deregistering one not there is no error', async () => {
      const { door, service, settle, answers } = await make();
      answers(a, true);
      answers(b, true);
      await door.register(service, [a, b]);
      await settle();
      await door.deregister(service, [a]);
      const draining = await door.targets(service);
      expect(draining.find((t) => t.target.ip === a.ip)?.state).toBe('draining');
      expect(draining.find((t) => t.target.ip === b.ip)?.state).toBe('healthy');
      await door.deregister(service, [a]);
      await settle();
      expect((await door.targets(service)).map((t) => t.target)).toEqual([b]);
      await door.deregister(service, [a]);
      await door.register(service, []);
      await door.deregister(service, []);
    });
  });
}
