import { describe, expect, it } from 'vitest';
import { isCloudError } from '../../core/errors.ts';
import type { BudgetTagSource, CatalogSource, Clock, JobQueue, PriceSource } from '../../core/ports.ts';
import type { Offering } from '../../core/catalog.ts';

export function jobQueueContract(name: string, make: () => Promise<{ queue: JobQueue; team: string }>): void {
  describe(`JobQueue contract: ${name}`, () => {
    it('sends to a team queue and counts what waits there', async () => {
      const { queue, team } = await make();
      expect(await queue.teams()).toContain(team);
      const before = await queue.depth(team);
      await queue.send(team, '{"image":"x"}', 'tok-1');
      const after = await queue.depth(team);
      expect(after.visible + after.inFlight + after.delayed).toBe(before.visible + before.inFlight + before.delayed + 1);
    });

    it('refuses a team without a queue with not-found', async () => {
      const { queue } = await make();
      await expect(queue.send('no-such-team', '{}', 't')).rejects.toSatisfy((e) => isCloudError(e, 'not-found'));
      await expect(queue.depth('no-such-team')).rejects.toSatisfy((e) => isCloudError(e, 'not-found'));
    });
  });
}

export function catalogAndPricesContract(
  name: string,
  make: () => Promise<{ catalog: CatalogSource; prices: PriceSource; known: Offering; unknown: Offering }>,
): void {
  describe(`CatalogSource and PriceSource contract: ${name}`, () => {
    it('knows the GPU facts of a known type and leaves unknown names out', async () => {
      const { catalog, known } = await make();
      const types = await catalog.instanceTypes([known.instanceType, 'no-such-type']);
      expect(types.has('no-such-type')).toBe(false);
      const t = types.get(known.instanceType)!;
      expect(t.gpuCount).toBeGreaterThan(0);
      expect(t.gpuMemoryMiB).toBeGreaterThan(0);
    });

    it('prices known offerings in whole micro-dollars and leaves unpriced ones out', async () => {
      const { prices, known, unknown } = await make();
      const quotes = await prices.prices([known, unknown]);
      expect(quotes.has(unknown.id)).toBe(false);
      const q = quotes.get(known.id)!;
      expect(Number.isSafeInteger(q.priceMicroUsdPerHour)).toBe(true);
      expect(q.priceMicroUsdPerHour).toBeGreaterThan(0);
      expect(q.onDemandMicroUsdPerHour).toBeGreaterThanOrEqual(known.capacityType === 'on-demand' ? q.priceMicroUsdPerHour : 0);
    });
  });
}

export function budgetTagSourceContract(name: string, make: () => Promise<{ source: BudgetTagSource; team: string }>): void {
  describe(`BudgetTagSource contract: ${name}`, () => {
    it('returns the gpu-fleet tags of each team resource', async () => {
      const { source, team } = await make();
      const sets = await source.readTeamTags();
      const mine = sets.filter((s) => s.team === team);
      expect(mine.length).toBeGreaterThan(0);
      expect(mine[0]!.tags['gpu-fleet:team']).toBe(team);
    });
  });
}

export function clockContract(name: string, make: () => Promise<Clock>): void {
  describe(`Clock contract: ${name}`, () => {
    it('never goes backwards', async () => {
      const c = await make();
      const a = c.nowMs();
      const b = c.nowMs();
      expect(b).toBeGreaterThanOrEqual(a);
      expect(Number.isSafeInteger(a)).toBe(true);
    });
  });
}
