import { describe, expect, it } from 'vitest';
import { ImagePrefetcher, prefetchRetrySec } from '../../agent/prefetch.ts';
import { T0 } from '../builders.ts';

describe("the agent's pulls ahead (agent/prefetch.ts)", () => {
  it('pulls one image at a time in the listed order, backs off an image that failed (1 min, doubling, at most an hour), and keeps what it has', async () => {
    let now = T0;
    const calls: string[] = [];
    let fail = true;
    const runner = {
      prefetch: async (image: string) => {
        calls.push(image);
        if (image === 'acme/a:1' && fail) throw new Error('pull access denied');
        return image === 'acme/b:1' ? ('present' as const) : ('pulled' as const);
      },
    };
    const logs: { m: string; extra?: Record<string, unknown> }[] = [];
    const log = {
      info: (m: string, extra?: Record<string, unknown>) => logs.push({ m, extra }),
      warn: (m: string, extra?: Record<string, unknown>) => logs.push({ m, extra }),
    };
    const p = new ImagePrefetcher(runner, { nowMs: () => now }, log);
    const list = ['acme/a:1', 'acme/b:1'];
    p.want(list);
    p.want(list); // a pull under way: nothing more starts
    await p.settled();
    expect(calls).toEqual(['acme/a:1']);
    expect(logs.at(-1)).toMatchObject({
      m: expect.stringMatching(/^could not pull an image ahead/),
      extra: { image: 'acme/a:1', failures: 1, retryInSec: 60 },
    });
    p.want(list);
    await p.settled();
    expect(calls).toEqual(['acme/a:1', 'acme/b:1']);
    expect(p.images).toEqual(['acme/b:1']);
    p.want(list); // a waits out its back-off; b is held
    await p.settled();
    expect(calls).toHaveLength(2);
    now += 60_000;
    fail = false;
    p.want(list);
    await p.settled();
    expect(p.images).toEqual(['acme/a:1', 'acme/b:1']);
    expect(logs.at(-1)).toMatchObject({ m: 'pulled an image ahead', extra: { image: 'acme/a:1' } });
    expect([1, 2, 3, 7, 20].map(prefetchRetrySec)).toEqual([60, 120, 240, 3600, 3600]);
    // A runner without images (plain processes) pulls nothing.
    const none = new ImagePrefetcher({}, { nowMs: () => now }, log);
    none.want(list);
    await none.settled();
    expect(none.images).toEqual([]);
  });
});
