// One baseline's replay on a worker thread (cli/commands/simulate.ts): the options rebuilt from the same flags, the world left here.
import { parentPort, workerData } from 'node:worker_threads';
import { runSimulation, type SimPolicyName } from '../../cloud/sim/simulation.ts';
import type { PolicyRun } from '../report-html.ts';
import { simulateSetup, type SimulateFlags } from './simulate.ts';

const { flags, policy } = (workerData as { input: { flags: SimulateFlags; policy: SimPolicyName } }).input;
const setup = simulateSetup(flags);
const r = await runSimulation({ ...setup.options, policy });
const answer: PolicyRun = { summary: r.summary, timeline: r.timeline, budgetEvents: r.budgetEvents, budgets: r.budgets, jobs: r.jobs };
parentPort!.postMessage(answer);
