// A worker thread of bench:spot: one trace's rows (bench/parallel.ts starts it).
import { parentPort, workerData } from 'node:worker_threads';
import { traceRows } from '../spot.ts';

const { input } = workerData as { input: { trace: Parameters<typeof traceRows>[0]; options: Parameters<typeof traceRows>[1] } };
parentPort!.postMessage(traceRows(input.trace, input.options));
