import { describe, expect, it } from 'vitest';
import { isCloudError } from '../../core/errors.ts';
import type { NodeGroupProvider } from '../../core/ports.ts';

export interface ProviderFixture {
  readonly provider: NodeGroupProvider;
  /** A group that exists, with min 0 and max at least 2. */
  readonly groupId: string;
  /** Brings launched instances to running (a tick of the simulator, or nothing for a recorded cloud). */
  settle(): Promise<void>;
}

/** The NodeGroupProvider contract. Every cloud adapter runs this suite. */
export function nodeGroupProviderContract(name: string, make: () => Promise<ProviderFixture>): void {
  describe(`NodeGroupProvider contract: ${name}`, () => {
    it('lists its groups with offerings and limits', async () => {
      const { provider, groupId } = await make();
      const group = (await provider.listGroups()).find((g) => g.id === groupId);
      expect(group).toBeDefined();
      expect(group!.offerings.length).toBeGreaterThan(0);
      expect(group!.maxSize).toBeGreaterThanOrEqual(group!.minSize);
    });

    it('sets the desired size idempotently and launches that many instances', async () => {
      const { provider, groupId, settle } = await make();
      await provider.setDesiredCapacity(groupId, 2);
      await provider.setDesiredCapacity(groupId, 2);
      await settle();
      expect((await provider.listGroups()).find((g) => g.id === groupId)!.desiredCapacity).toBe(2);
      const live = (await provider.listInstances()).filter((i) => i.groupId === groupId && i.state !== 'terminated');
      expect(live).toHaveLength(2);
    });

    it('refuses a size outside the limits with invalid-request, and an unknown group with not-found', async () => {
      const { provider, groupId } = await make();
      const max = (await provider.listGroups()).find((g) => g.id === groupId)!.maxSize;
      await expect(provider.setDesiredCapacity(groupId, max + 1)).rejects.toSatisfy((e) => isCloudError(e, 'invalid-request'));
      await expect(provider.setDesiredCapacity('no-such-group', 1)).rejects.toSatisfy((e) => isCloudError(e, 'not-found'));
    });

    it('terminates a specific instance, lowers the desired size, and is idempotent', async () => {
      const { provider, groupId, settle } = await make();
      await provider.setDesiredCapacity(groupId, 2);
      await settle();
      const [victim] = (await provider.listInstances()).filter((i) => i.groupId === groupId);
      expect(await provider.terminateInstance(groupId, victim!.id)).toEqual({ alreadyGone: false });
      expect(await provider.terminateInstance(groupId, victim!.id)).toEqual({ alreadyGone: true });
      expect(await provider.terminateInstance(groupId, 'i-does-not-exist')).toEqual({ alreadyGone: true });
      await settle();
      expect((await provider.listGroups()).find((g) => g.id === groupId)!.desiredCapacity).toBe(1);
      const live = (await provider.listInstances()).filter((i) => i.groupId === groupId && i.state !== 'terminated');
      expect(live.map((i) => i.id)).not.toContain(victim!.id);
    });

    it('protects instances from scale-in, skipping ones that do not exist', async () => {
      const { provider, groupId, settle } = await make();
      await provider.setDesiredCapacity(groupId, 1);
      await settle();
      const [inst] = (await provider.listInstances()).filter((i) => i.groupId === groupId);
      await provider.setScaleInProtection(groupId, [inst!.id, 'i-gone'], true);
      expect((await provider.listInstances()).find((i) => i.id === inst!.id)!.scaleInProtected).toBe(true);
      await provider.setScaleInProtection(groupId, [inst!.id], false);
      expect((await provider.listInstances()).find((i) => i.id === inst!.id)!.scaleInProtected).toBe(false);
    });

    it('completes lifecycle actions idempotently', async () => {
      const { provider, groupId } = await make();
      const input = { groupId, instanceId: 'i-whatever', hookName: 'gpu-fleet-drain', token: 'tok' };
      await expect(provider.completeLifecycleAction(input)).resolves.toBeUndefined();
      await expect(provider.completeLifecycleAction(input)).resolves.toBeUndefined();
    });
  });
}
