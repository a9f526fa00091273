import { describe, expect, it } from 'vitest';
import { isCloudError } from '../../core/errors.ts';
import type { NodeGroupProvider } from '../../core/ports.ts';
import { inService } from '../../core/fleet.ts';

export interface ProviderFixture {
  readonly provider: NodeGroupProvider;
  /** A group that exists, with min 0 and max at least 2. */
  readonly groupId: string;
  /** Brings launched instances to running (a tick of the simulator, or nothing for a recorded cloud). */
  settle(): Promise<void>;
  /** The group starts taking this machine away itself (a health-check replacement, say): its terminate hook, `gpu-fleet-drain`, holds it. */
  holdForTermination?(instanceId: string): Promise<void>;
}

/** The NodeGroupProvider contract. Every cloud adapter runs this suite. */
export function nodeGroupProviderContract(
  name: string,
  make: () => Promise<ProviderFixture>,
  /** The cloud has lifecycle hooks (EC2 Auto Scaling, and the simulated groups that copy it; GCP's managed instance groups have none). */
  options: { lifecycleHooks: boolean } = { lifecycleHooks: false },
): void {
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
      // Out of service at once (a group with a terminate hook holds it in terminating-wait until that is completed).
      const live = (await provider.listInstances()).filter((i) => i.groupId === groupId && inService(i.state));
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

    it.runIf(options.lifecycleHooks)(
      'reports a machine its terminate hook holds as terminating-wait, and lets it go when the action is completed',
      async () => {
        const { provider, groupId, settle, holdForTermination } = await make();
        if (!holdForTermination) throw new Error(`${name}: a cloud with lifecycle hooks must say how to hold a machine`);
        await provider.setDesiredCapacity(groupId, 1);
        await settle();
        const [inst] = (await provider.listInstances()).filter((i) => i.groupId === groupId);
        await holdForTermination(inst!.id);
        expect((await provider.listInstances()).find((i) => i.id === inst!.id)?.state).toBe('terminating-wait');
        expect((await provider.describeInstance(inst!.id))?.state).toBe('terminating-wait');
        await provider.completeLifecycleAction({ groupId, instanceId: inst!.id, hookName: 'gpu-fleet-drain' });
        await provider.completeLifecycleAction({ groupId, instanceId: inst!.id, hookName: 'gpu-fleet-drain' });
        await settle();
        const after = (await provider.listInstances()).find((i) => i.id === inst!.id);
        expect(['stopping', 'terminated', undefined]).toContain(after?.state);
      },
    );

    it('completes lifecycle actions idempotently', async () => {
      const { provider, groupId } = await make();
      const input = { groupId, instanceId: 'i-whatever', hookName: 'gpu-fleet-drain', token: 'tok' };
      await expect(provider.completeLifecycleAction(input)).resolves.toBeUndefined();
      await expect(provider.completeLifecycleAction(input)).resolves.toBeUndefined();
    });
  });
}
