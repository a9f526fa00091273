// bench:serve's windows, replayed: every policy, and the optimum, on each window (in this thread or a worker's).
import { SERVING_POLICIES } from '../../core/serving/spot-placement.ts';
import { optimalServing } from './optimal.ts';
import { replayServing, type ServingResult, type ServingRun } from './world.ts';

export type WindowResult = { readonly policy: string; readonly res: Omit<ServingResult, 'policy'> & { readonly ready: readonly number[] } };

export async function replayWindows(input: {
  runs: readonly ServingRun[];
  target: number;
  optimal: boolean;
  /** With one: gpu-fleet's policy again as 'gpu-fleet-warm', its on-demand fallback started from a warm pool. */
  warmPool?: ServingRun['warmPool'];
}): Promise<WindowResult[][]> {
  const out: WindowResult[][] = [];
  for (const run of input.runs)
    out.push([
      ...SERVING_POLICIES.map((policy) => ({ policy, res: replayServing(policy, run) })),
      ...(input.warmPool ? [{ policy: 'gpu-fleet-warm', res: replayServing('gpu-fleet', { ...run, warmPool: input.warmPool }) }] : []),
      // The optimum keeps at least the target ready at every tick; its latency is taken at exactly the target.
      ...(input.optimal
        ? [
            {
              policy: 'optimal',
              res: {
                ...(await optimalServing(run)),
                shortReplicaMinutes: 0,
                ready: new Array<number>(run.ticks - run.coldStartTicks).fill(input.target),
              },
            },
          ]
        : []),
    ]);
  return out;
}
