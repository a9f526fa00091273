import highsModule, { type Highs } from 'highs';
import type { CapacityProblem } from './capacity-problem.ts';

export interface Bound {
  /** Lower bound on the expected hourly cost of the capacity any plan must add, µUSD/h. */
  readonly microUsdPerHour: number;
  /** 'mip' when machine counts were integer and solved to optimality; 'lp' for the relaxation. */
  readonly kind: 'lp' | 'mip';
  readonly variables: number;
  readonly solveMs: number;
  /** Machines bought per pool in the bound's solution (fractional for an LP). */
  readonly machines: ReadonlyMap<string, number>;
}

// highs is CommonJS; under NodeNext its default import is the loader function at run time.
const loadHighs = highsModule as unknown as () => Promise<Highs>;
let highs: Highs | undefined;

/**
 * The new-capacity problem as a linear program, solved with HiGHS:
 *
 *   minimise  Σ_p price_p · x_p  +  Σ_{c,p} y_{c,p} · (unit_c / cap_p) · price_p · (f_{c,p} − 1)
 *   s.t.      Σ_p y_{c,p} + Σ_b z_{c,b} = n_c                         every class c of waiting work
 *             Σ_c unit_c · y_{c,p} ≤ cap_p · x_p,   Σ_c mem_c · y_{c,p} ≤ memcap_p · x_p   every pool p to buy
 *             Σ_c unit_c · z_{c,b} ≤ free_b,        Σ_c mem_c · z_{c,b} ≤ freemem_b        every bin b of live room
 *             0 ≤ x_p ≤ room_p,  y, z ≥ 0
 *
 * x_p machines of pool p are bought; y and z assign work to new capacity and to free room on
 * live machines. A class may use a pool only if the planner's rules allow it (model, memory,
 * MIG profile, capacity type, zones, spot only when cheaper with rework); a whole-GPU class
 * may use a live bin only if its machines have that many untouched GPUs; shares use untouched
 * or partly shared GPUs; MIG work uses MIG bins. f is the spot factor (expected rework). The
 * program relaxes per-machine packing (which GPUs, MIG placements, gang zones) and, as an LP,
 * whole machines, so its optimum is a lower bound on the expected cost of any plan. With
 * `integerMachines`, x is integer (a MIP) and the bound is tighter.
 */
export async function lowerBound(
  problem: CapacityProblem,
  options: { integerMachines?: boolean; timeLimitSec?: number } = {},
): Promise<Bound> {
  highs ??= await loadHighs();
  const solver = highs;
  const t0 = performance.now();
  const pools = new Map(problem.pools.map((p, i) => [p.key, { ...p, i }]));
  const binsByPool = new Map<string, { bin: CapacityProblem['live'][number]; j: number }[]>();
  problem.live.forEach((bin, j) => binsByPool.set(bin.pool, [...(binsByPool.get(bin.pool) ?? []), { bin, j }]));
  const obj: string[] = [];
  const rows: string[] = [];
  const bounds: string[] = [];
  const generals: string[] = [];
  const capTerms = new Map<number, string[]>();
  const memTerms = new Map<number, string[]>();
  const liveTerms = new Map<number, string[]>();
  const liveMemTerms = new Map<number, string[]>();
  let vars = 0;
  const push = (m: Map<number, string[]>, k: number, t: string) => {
    const l = m.get(k);
    if (l) l.push(t);
    else m.set(k, [t]);
  };
  const num = (x: number) => (Number.isInteger(x) ? String(x) : x.toPrecision(12));
  for (const p of pools.values()) {
    if (p.room <= 0) continue;
    obj.push(`${num(p.priceMicroUsdPerHour)} x${p.i}`);
    bounds.push(`0 <= x${p.i} <= ${p.room}`);
    if (options.integerMachines) generals.push(`x${p.i}`);
    vars++;
  }
  problem.classes.forEach((c, ci) => {
    const demand: string[] = [];
    for (const [key, factor] of c.eligible) {
      const p = pools.get(key);
      if (p && p.room > 0) {
        const v = `y${ci}_${p.i}`;
        demand.push(v);
        vars++;
        const penalty = (c.unitMilli / (p.gpuCount * 1000)) * p.priceMicroUsdPerHour * (factor - 1);
        if (penalty > 1e-9) obj.push(`${num(penalty)} ${v}`);
        push(capTerms, p.i, `${c.unitMilli} ${v}`);
        if (c.memoryMiB > 0) push(memTerms, p.i, `${c.memoryMiB} ${v}`);
      }
      for (const { bin, j } of binsByPool.get(key) ?? []) {
        const usable =
          c.kind === 'mig'
            ? bin.kind === 'mig'
            : c.kind === 'fraction'
              ? bin.kind !== 'mig'
              : bin.kind === 'whole' && bin.freeWhole >= c.wholeGpus;
        if (!usable) continue;
        const v = `z${ci}_${j}`;
        demand.push(v);
        vars++;
        push(liveTerms, j, `${c.unitMilli} ${v}`);
        if (c.memoryMiB > 0) push(liveMemTerms, j, `${c.memoryMiB} ${v}`);
      }
    }
    if (demand.length > 0) rows.push(` d${ci}: ${demand.join(' + ')} = ${c.count}`);
  });
  for (const [i, terms] of capTerms) rows.push(` c${i}: ${terms.join(' + ')} - ${problem.pools[i]!.gpuCount * 1000} x${i} <= 0`);
  for (const [i, terms] of memTerms)
    rows.push(` m${i}: ${terms.join(' + ')} - ${problem.pools[i]!.gpuCount * problem.pools[i]!.gpuMemoryMiB} x${i} <= 0`);
  for (const [j, terms] of liveTerms) rows.push(` l${j}: ${terms.join(' + ')} <= ${problem.live[j]!.freeMilli}`);
  for (const [j, terms] of liveMemTerms) rows.push(` n${j}: ${terms.join(' + ')} <= ${problem.live[j]!.freeMemoryMiB}`);
  const lp = [
    'Minimize',
    ` cost: ${obj.length > 0 ? obj.join(' + ') : '0 x0'}`,
    'Subject To',
    ...rows,
    'Bounds',
    ...bounds,
    ...(generals.length > 0 ? ['Generals', ` ${generals.join(' ')}`] : []),
    'End',
  ].join('\n');
  const result = solver.solve(lp, { output_flag: false, ...(options.timeLimitSec ? { time_limit: options.timeLimitSec } : {}) });
  if (result.Status !== 'Optimal') {
    if (options.integerMachines) return lowerBound(problem, { ...options, integerMachines: false });
    throw new Error(`lower bound LP ended with status ${result.Status}`);
  }
  const machines = new Map<string, number>();
  for (const p of pools.values()) {
    const x = (result.Columns[`x${p.i}`] as { Primal?: number } | undefined)?.Primal ?? 0;
    if (x > 1e-9) machines.set(p.key, x);
  }
  return {
    microUsdPerHour: result.ObjectiveValue,
    kind: options.integerMachines ? 'mip' : 'lp',
    variables: vars,
    solveMs: performance.now() - t0,
    machines,
  };
}
