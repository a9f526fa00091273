// Runs independent simulations (a bench's traces and windows, `simulate`'s baselines) on worker threads, every core used.
import { availableParallelism } from 'node:os';
import { Worker } from 'node:worker_threads';

/**
 * Runs `moduleUrl` once per input on worker threads, at most `threads` at a time, and returns the
 * answers in the inputs' order. The module reads `workerData.input` and answers with
 * `parentPort.postMessage(output)`. Each worker loads TypeScript through tsx's API (a worker does
 * not inherit the `--import tsx` the bench was started with on Node 20).
 */
export async function inWorkers<I, O>(moduleUrl: URL, inputs: readonly I[], threads = availableParallelism()): Promise<O[]> {
  const boot = `import('tsx/esm/api').then(({ register }) => { register(); return import(${JSON.stringify(moduleUrl.href)}); });`;
  const out: O[] = new Array<O>(inputs.length);
  let next = 0;
  const lane = async (): Promise<void> => {
    while (next < inputs.length) {
      const i = next++;
      out[i] = await new Promise<O>((resolveOne, reject) => {
        const w = new Worker(boot, { eval: true, workerData: { input: inputs[i] } });
        let answered = false;
        w.once('message', (m: O) => {
          answered = true;
          resolveOne(m);
          void w.terminate();
        });
        w.once('error', reject);
        w.once('exit', (code) => {
          if (!answered) reject(new Error(`${moduleUrl.pathname}: a worker ended (exit ${code}) without an answer for input ${i}`));
        });
      });
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, Math.min(threads, inputs.length)) }, lane));
  return out;
}
