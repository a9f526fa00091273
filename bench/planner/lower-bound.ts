import highsModule, { type Highs } from 'highs';
import type { CapacityProblem } from './capacity-problem.ts';

export interface Bound {
  /** Lower bound on the expected hourly cost of the capacity any plan must add, µUSD/h. */
  readonly microUsdPerHour: number;
  /**
   * 'lp' for the relaxation; 'mip' when machine counts were integer and solved to optimality;
   * 'exact' when, besides, every job count is integer and live room is taken machine by machine.
   */
  readonly kind: 'lp' | 'mip' | 'exact';
  readonly variables: number;
  readonly solveMs: number;
  /** Machines bought per pool in the bound's solution (fractional for an LP). */
  readonly machines: ReadonlyMap<string, number>;
  /** Jobs of each class (by index in the problem) the solution puts on live room (fractional for an LP). */
  readonly liveJobs: ReadonlyMap<number, number>;
}

/** HiGHS's relative MIP gap (its default) for the MIP with integer machines. */
const MIP_GAP = 1e-4;
/** The exact bound's gap: it proves optimality within 0.1% in under a minute on the 1k-job scenarios (0.01% takes minutes). */
const EXACT_GAP = 1e-3;

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
 * `integerMachines`, x is integer (a MIP) and the bound is tighter. With `exactLive` as well,
 * every job count is integer and live room is taken machine by machine (liveByMachine) instead of
 * in pooled bins, which let a 2-GPU job use half of each of two machines with 3 GPUs free: on a
 * live fleet the pooled bound is loose by 1–2%. A MIP's bound is its incumbent less HiGHS's gap.
 */
export async function lowerBound(
  problem: CapacityProblem,
  options: { integerMachines?: boolean; exactLive?: boolean; timeLimitSec?: number } = {},
): Promise<Bound> {
  highs ??= await loadHighs();
  const solver = highs;
  const t0 = performance.now();
  const exactLive = options.exactLive === true;
  const pools = new Map(problem.pools.map((p, i) => [p.key, { ...p, i }]));
  const binsByPool = new Map<string, { bin: CapacityProblem['live'][number]; j: number }[]>();
  problem.live.forEach((bin, j) => {
    // The exact bound takes whole and shared room machine by machine (below); MIG room stays pooled.
    if (exactLive && bin.kind !== 'mig') return;
    binsByPool.set(bin.pool, [...(binsByPool.get(bin.pool) ?? []), { bin, j }]);
  });
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
  const live = exactLive ? liveByMachine(problem) : undefined;
  problem.classes.forEach((c, ci) => {
    const demand: string[] = [];
    for (const [key, factor] of c.eligible) {
      const p = pools.get(key);
      if (p && p.room > 0) {
        const v = `y${ci}_${p.i}`;
        demand.push(v);
        vars++;
        if (exactLive) generals.push(v);
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
    // Exact live room: the class's share of its group's placements on live machines.
    const g = live?.groupOf.get(ci);
    if (g !== undefined) {
      const v = `L${ci}`;
      demand.push(v);
      generals.push(v);
      vars++;
      live!.members.get(g)!.push(v);
    }
    if (demand.length > 0) rows.push(` d${ci}: ${demand.join(' + ')} = ${c.count}`);
  });
  for (const [i, terms] of capTerms) rows.push(` c${i}: ${terms.join(' + ')} - ${problem.pools[i]!.gpuCount * 1000} x${i} <= 0`);
  for (const [i, terms] of memTerms)
    rows.push(` m${i}: ${terms.join(' + ')} - ${problem.pools[i]!.gpuCount * problem.pools[i]!.gpuMemoryMiB} x${i} <= 0`);
  for (const [j, terms] of liveTerms) rows.push(` l${j}: ${terms.join(' + ')} <= ${problem.live[j]!.freeMilli}`);
  for (const [j, terms] of liveMemTerms) rows.push(` n${j}: ${terms.join(' + ')} <= ${problem.live[j]!.freeMemoryMiB}`);
  if (live) {
    rows.push(...live.rows);
    bounds.push(...live.bounds);
    generals.push(...live.generals);
    vars += live.generals.length;
    for (const [g, members] of live.members)
      if (members.length > 0) rows.push(` G${g}: ${members.join(' + ')} - ${live.placed.get(g)!.join(' - ')} = 0`);
  }
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
  const integer = generals.length > 0;
  const gap = exactLive ? EXACT_GAP : MIP_GAP;
  const result = solver.solve(lp, {
    output_flag: false,
    ...(integer ? { mip_rel_gap: gap } : {}),
    ...(options.timeLimitSec ? { time_limit: options.timeLimitSec } : {}),
  });
  if (result.Status !== 'Optimal') {
    if (exactLive) throw new Error(`the exact bound ended with status ${result.Status}`);
    if (options.integerMachines) return lowerBound(problem, { ...options, integerMachines: false });
    throw new Error(`lower bound LP ended with status ${result.Status}`);
  }
  const machines = new Map<string, number>();
  for (const p of pools.values()) {
    const x = (result.Columns[`x${p.i}`] as { Primal?: number } | undefined)?.Primal ?? 0;
    if (x > 1e-9) machines.set(p.key, x);
  }
  const primal = (name: string) => (result.Columns[name] as { Primal?: number } | undefined)?.Primal ?? 0;
  const liveJobs = new Map<number, number>();
  problem.classes.forEach((_, ci) => {
    let n = primal(`L${ci}`);
    for (const [j] of problem.live.entries()) n += primal(`z${ci}_${j}`);
    if (n > 1e-9) liveJobs.set(ci, n);
  });
  return {
    // HiGHS stops a MIP once (incumbent − proven bound) ≤ gap × incumbent: the proven bound is at least this.
    microUsdPerHour: integer ? result.ObjectiveValue * (1 - gap) : result.ObjectiveValue,
    kind: exactLive ? 'exact' : options.integerMachines ? 'mip' : 'lp',
    variables: vars,
    solveMs: performance.now() - t0,
    machines,
    liveJobs,
  };
}

/**
 * Live room machine by machine, for the exact bound. Classes that differ only in cost factors
 * (the same kind, size and pools) form one group; a group's placements on a machine are integer:
 *
 *   Σ_G w_G · a_{G,m} + u_m ≤ freeWhole_m                 whole jobs and GPUs opened for shares
 *   Σ_G milli_G · b_{G,m} ≤ 1000 · u_m,  Σ_G mem_G · b_{G,m} ≤ gpuMem_m · u_m
 *   Σ_G milli_G · s_{G,m,k} ≤ freeMilli_{m,k},  Σ_G mem_G · s_{G,m,k} ≤ freeMem_{m,k}   each partly shared GPU k
 *   Σ_{c∈G} L_c = Σ_m (a + b + Σ_k s)_{G,m}
 *
 * This is per-machine packing except that shares on the GPUs a machine opens are pooled per
 * machine (and, as everywhere in the bound, gangs are not held to one zone).
 */
function liveByMachine(problem: CapacityProblem) {
  const groupIds = new Map<string, number>();
  const groupOf = new Map<number, number>();
  const members = new Map<number, string[]>();
  const placed = new Map<number, string[]>();
  const rows: string[] = [];
  const bounds: string[] = [];
  const generals: string[] = [];
  const machinesByPool = new Map<string, number[]>();
  problem.machines.forEach((m, mi) => machinesByPool.set(m.pool, [...(machinesByPool.get(m.pool) ?? []), mi]));
  const wholeTerms = new Map<number, string[]>();
  const openTerms = new Map<number, { milli: string[]; mem: string[] }>();
  const sharedTerms = new Map<string, { milli: string[]; mem: string[] }>();
  const groups: { id: number; c: CapacityProblem['classes'][number] }[] = [];
  problem.classes.forEach((c, ci) => {
    if (c.kind === 'mig') return;
    const keys = [...c.eligible.keys()].filter((k) => machinesByPool.has(k));
    if (keys.length === 0) return;
    const signature = `${c.kind}|${c.wholeGpus}|${c.unitMilli}|${c.memoryMiB}|${keys.join(',')}`;
    let g = groupIds.get(signature);
    if (g === undefined) {
      g = groupIds.size;
      groupIds.set(signature, g);
      groups.push({ id: g, c });
      members.set(g, []);
      placed.set(g, []);
    }
    groupOf.set(ci, g);
  });
  for (const { id: g, c } of groups) {
    const out = placed.get(g)!;
    for (const key of c.eligible.keys()) {
      for (const mi of machinesByPool.get(key) ?? []) {
        const m = problem.machines[mi]!;
        if (c.kind === 'whole') {
          if (m.freeWhole < c.wholeGpus) continue;
          const v = `a${g}_${mi}`;
          out.push(v);
          generals.push(v);
          const l = wholeTerms.get(mi) ?? [];
          l.push(`${c.wholeGpus} ${v}`);
          wholeTerms.set(mi, l);
          continue;
        }
        if (m.freeWhole > 0 && c.memoryMiB <= m.gpuMemoryMiB) {
          const v = `b${g}_${mi}`;
          out.push(v);
          generals.push(v);
          const t = openTerms.get(mi) ?? { milli: [], mem: [] };
          t.milli.push(`${c.unitMilli} ${v}`);
          if (c.memoryMiB > 0) t.mem.push(`${c.memoryMiB} ${v}`);
          openTerms.set(mi, t);
        }
        m.shared.forEach((gpu, k) => {
          if (gpu.freeMilli < c.unitMilli || gpu.freeMemoryMiB < c.memoryMiB) return;
          const v = `s${g}_${mi}_${k}`;
          out.push(v);
          generals.push(v);
          const t = sharedTerms.get(`${mi}_${k}`) ?? { milli: [], mem: [] };
          t.milli.push(`${c.unitMilli} ${v}`);
          if (c.memoryMiB > 0) t.mem.push(`${c.memoryMiB} ${v}`);
          sharedTerms.set(`${mi}_${k}`, t);
        });
      }
    }
  }
  for (const [mi, t] of openTerms) {
    const m = problem.machines[mi]!;
    const u = `u${mi}`;
    generals.push(u);
    bounds.push(`0 <= ${u} <= ${m.freeWhole}`);
    rows.push(` o${mi}: ${t.milli.join(' + ')} - 1000 ${u} <= 0`);
    if (t.mem.length > 0) rows.push(` p${mi}: ${t.mem.join(' + ')} - ${m.gpuMemoryMiB} ${u} <= 0`);
    const l = wholeTerms.get(mi) ?? [];
    l.push(u);
    wholeTerms.set(mi, l);
  }
  for (const [mi, terms] of wholeTerms) rows.push(` w${mi}: ${terms.join(' + ')} <= ${problem.machines[mi]!.freeWhole}`);
  for (const [at, t] of sharedTerms) {
    const [mi, k] = at.split('_').map(Number) as [number, number];
    const gpu = problem.machines[mi]!.shared[k]!;
    rows.push(` q${at}: ${t.milli.join(' + ')} <= ${gpu.freeMilli}`);
    if (t.mem.length > 0) rows.push(` r${at}: ${t.mem.join(' + ')} <= ${gpu.freeMemoryMiB}`);
  }
  // A group with no room on any machine takes nothing live: its classes get no live variable.
  for (const [ci, g] of groupOf) if (placed.get(g)!.length === 0) groupOf.delete(ci);
  return { groupOf, members, placed, rows, bounds, generals };
}
