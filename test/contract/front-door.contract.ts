import { describe, expect, it } from 'vitest';
import type { FrontDoor } from '../../core/ports.ts';

/** What every FrontDoor must do: idempotent registration, draining on deregistration, states as the load balancer reports them. */
export function frontDoorContract(name: string, make: () => Promise<{ door: FrontDoor; service: string; settle: () => void }>): void {
  describe(`FrontDoor contract: ${name}`, () => {
    const a = { ip: '10.0.1.17', port: 8000 };
    const b = { ip: '10.0.2.41', port: 8000 };

    it('registers a target once however often asked; it passes its health checks, then takes traffic', async () => {
      const { door, service, settle } = await make();
      expect(door.fronts(service)).toBe(true);
      await door.register(service, [a]);
      await door.register(service, [a]);
      const first = await door.targets(service);
      expect(first).toHaveLength(1);
      expect(first[0]).toMatchObject({ target: a, state: 'initial' });
      settle();
      expect(await door.targets(service)).toEqual([expect.objectContaining({ target: a, state: 'healthy' })]);
    });

    it('deregistering drains the target, then it is gone; deregistering one not there is no error', async () => {
      const { door, service, settle } = await make();
      await door.register(service, [a, b]);
      settle();
      await door.deregister(service, [a]);
      const draining = await door.targets(service);
      expect(draining.find((t) => t.target.ip === a.ip)?.state).toBe('draining');
      expect(draining.find((t) => t.target.ip === b.ip)?.state).toBe('healthy');
      await door.deregister(service, [a]);
      settle();
      expect((await door.targets(service)).map((t) => t.target)).toEqual([b]);
      await door.deregister(service, [a]);
      await door.register(service, []);
      await door.deregister(service, []);
    });
  });
}
