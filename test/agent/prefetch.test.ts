import { describe, expect, it } from 'vitest';
import { ImagePrefetcher, prefetchRetrySec, prepareForWarmPool } from '../../agent/prefetch.ts';
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

describe('a machine prepared in its group’s warm pool (agent/prefetch.ts prepareForWarmPool)', () => {
  const quiet = () => {
    const lines: string[] = [];
    return { lines, log: { info: (m: string) => lines.push(`info ${m}`), warn: (m: string) => lines.push(`warn ${m}`) } };
  };

  it('pulls each image it is told, then lets its launch hook go, in that order', async () => {
    const steps: string[] = [];
    const { log } = quiet();
    const out = await prepareForWarmPool({
      images: async () => ['acme/a:1', 'vllm/vllm-openai:v0.6.3'],
      pull: async (image) => {
        steps.push(`pull ${image}`);
        return image === 'acme/a:1' ? 'present' : 'pulled';
      },
      ready: async () => {
        steps.push('ready');
      },
      log,
      sleep: async () => {},
    });
    expect(steps).toEqual(['pull acme/a:1', 'pull vllm/vllm-openai:v0.6.3', 'ready']);
    expect(out).toEqual({ pulled: ['vllm/vllm-openai:v0.6.3'], present: ['acme/a:1'], failed: [] });
  });

  it('says an image it cannot pull and goes on; with the control plane unreachable it pulls nothing; the hook is let go whatever happened', async () => {
    const { lines, log } = quiet();
    let readyCalls = 0;
    const sleeps: number[] = [];
    const out = await prepareForWarmPool({
      images: async () => ['acme/gone:1', 'acme/b:1'],
      pull: async (image) => {
        if (image === 'acme/gone:1') throw new Error('manifest unknown');
        return 'pulled';
      },
      ready: async () => {
        readyCalls++;
        if (readyCalls < 3) throw new Error('503 from the agent API');
      },
      log,
      sleep: async (ms) => {
        sleeps.push(ms);
      },
    });
    expect(out).toEqual({ pulled: ['acme/b:1'], present: [], failed: ['acme/gone:1'] });
    expect(readyCalls).toBe(3);
    expect(sleeps).toEqual([10_000, 10_000]);
    expect(lines.some((l) => l.startsWith('warn') && l.includes('could not be pulled'))).toBe(true);

    let asked = 0;
    let letGo = 0;
    const down = quiet();
    const none = await prepareForWarmPool({
      images: async () => {
        asked++;
        throw new Error('connect ETIMEDOUT');
      },
      pull: async () => {
        throw new Error('never asked');
      },
      ready: async () => {
        letGo++;
      },
      log: down.log,
      sleep: async () => {},
      tries: 3,
    });
    expect([asked, letGo, none]).toEqual([3, 1, { pulled: [], present: [], failed: [] }]);
    expect(down.lines).toContain('warn warm pool: asking which images to pull failed 3 times; going on without it');
  });
});
