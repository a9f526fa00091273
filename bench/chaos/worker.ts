// A worker thread of bench:chaos: one fault profile's run (bench/parallel.ts starts it).
import { parentPort, workerData } from 'node:worker_threads';
import { chaosProfile } from '../chaos.ts';

const { input } = workerData as { input: { options: Parameters<typeof chaosProfile>[0]; profile: string } };
parentPort!.postMessage(await chaosProfile(input.options, input.profile));
