import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { SimEnvironment } from './environment.ts';
import type { SimGroupConfig } from './sim-cloud.ts';
import { GpuFleetError } from '../../core/errors.ts';

/**
 * A simulated world saved to a folder (`state.json`), so that a sequence of commands — a
 * simulation, then `gpu-fleet invoke`, `status`, `explain` — act on the same world.
 */
export interface SavedSimState {
  readonly version: 1;
  readonly nowMs: number;
  readonly jobs: ReturnType<SimEnvironment['jobs']['dump']>;
  readonly nodes: ReturnType<SimEnvironment['nodes']['dump']>;
  readonly decisions: ReturnType<SimEnvironment['decisions']['dump']>;
  readonly ledger: ReturnType<SimEnvironment['ledger']['dump']>;
  readonly checkpoints: ReturnType<SimEnvironment['checkpoints']['dump']>;
  readonly pools: ReturnType<SimEnvironment['pools']['dump']>;
  readonly cloud: ReturnType<SimEnvironment['cloud']['dump']>;
  /** The simulated fleet's groups (absent in states written before two-cloud runs: the built-in AWS fleet). */
  readonly groups?: readonly SimGroupConfig[];
  /** Service records (absent in states written before services ran). */
  readonly services?: ReturnType<SimEnvironment['services']['dump']>;
  /** What the simulated processes wrote (absent in states written before it was kept). */
  readonly jobLogs?: ReturnType<SimEnvironment['jobLogs']['dump']>;
  /** Right-sizing's runs per family (absent in states written before they were kept). */
  readonly families?: ReturnType<SimEnvironment['families']['dump']>;
  /** The checkpoint index's byte events not counted yet (absent in states written before accrual read events). */
  readonly byteEvents?: ReturnType<SimEnvironment['checkpoints']['dumpEvents']>;
  readonly teamTags?: ReturnType<SimEnvironment['budgets']['dump']>;
}

export const STATE_FILE = 'state.json';

export function saveSimState(env: SimEnvironment, dir: string): void {
  mkdirSync(dir, { recursive: true });
  const state: SavedSimState = {
    version: 1,
    nowMs: env.clock.nowMs(),
    jobs: env.jobs.dump(),
    nodes: env.nodes.dump(),
    decisions: env.decisions.dump(),
    ledger: env.ledger.dump(),
    checkpoints: env.checkpoints.dump(),
    pools: env.pools.dump(),
    cloud: env.cloud.dump(),
    groups: env.cloud.groupConfigs(),
    services: env.services.dump(),
    jobLogs: env.jobLogs.dump(),
    families: env.families.dump(),
    byteEvents: env.checkpoints.dumpEvents(),
    teamTags: env.budgets.dump(),
  };
  writeFileSync(join(dir, STATE_FILE), JSON.stringify(state));
}

/** The groups of the fleet saved in a folder, when the state names them. */
export function savedSimGroups(dir: string): readonly SimGroupConfig[] | undefined {
  const file = join(dir, STATE_FILE);
  if (!existsSync(file)) return undefined;
  return (JSON.parse(readFileSync(file, 'utf8')) as SavedSimState).groups;
}

/** Loads a saved world into an environment built with the same fleet; false when the folder has none. */
export function loadSimState(env: SimEnvironment, dir: string): boolean {
  const file = join(dir, STATE_FILE);
  if (!existsSync(file)) return false;
  const state = JSON.parse(readFileSync(file, 'utf8')) as SavedSimState;
  if (state.version !== 1) throw new GpuFleetError(`${file}: unknown state version ${String(state.version)}`);
  if (state.nowMs > env.clock.nowMs()) env.clock.advanceTo(state.nowMs);
  env.jobs.restore(state.jobs);
  env.nodes.restore(state.nodes);
  env.decisions.restore(state.decisions);
  env.ledger.restore(state.ledger);
  env.checkpoints.restore(state.checkpoints);
  env.pools.restore(state.pools);
  env.cloud.restore(state.cloud);
  env.services.restore(state.services ?? []);
  env.jobLogs.restore(state.jobLogs ?? []);
  env.families.restore(state.families ?? []);
  env.checkpoints.restoreEvents(state.byteEvents ?? []);
  // Tags set with \`budget set --sim\` (absent in a state saved before: the fleet's defaults stand).
  if (state.teamTags) env.budgets.restore(state.teamTags);
  return true;
}
