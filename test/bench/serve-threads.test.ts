import { describe, expect, it } from 'vitest';
import { benchServe, SERVE_DEFAULTS } from '../../bench/serve.ts';

describe('bench:serve on worker threads', () => {
  it('gives the same rows as one thread: the windows are drawn in order, then replayed anywhere', async () => {
    const o = { ...SERVE_DEFAULTS, repeats: 4, windowHours: 1, optimal: false };
    const one = await benchServe({ ...o, threads: 1 });
    expect(one.length).toBeGreaterThan(2);
    expect(await benchServe({ ...o, threads: 2 })).toEqual(one);
  }, 60_000);
});
