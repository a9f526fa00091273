// A worker thread of bench:serve: its share of the windows (bench/parallel.ts starts it).
import { parentPort, workerData } from 'node:worker_threads';
import { replayWindows } from './windows.ts';

const { input } = workerData as { input: Parameters<typeof replayWindows>[0] };
parentPort!.postMessage(await replayWindows(input));
