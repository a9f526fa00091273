import type { Job } from '../job.ts';

/** Higher priority first, then the longest waiting, then by id for determinism. */
export function jobOrder(a: Job, b: Job): number {
  return b.spec.priority - a.spec.priority || a.queuedAtMs - b.queuedAtMs || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0);
}

/**
 * Orders pending work: priority first; within one priority, teams take turns by weighted fair
 * share of GPUs: the team holding the least (GPUs held ÷ weight) goes next, with its oldest job,
 * and what it is given counts towards its share. Deterministic (ties by team name).
 */
export function fairShareOrder<E extends { readonly job: Job; readonly team: string }>(
  entries: readonly E[],
  usedMilliByTeam: ReadonlyMap<string, number>,
  weightOf: (team: string) => number,
  milliOf: (entry: E) => number,
): E[] {
  const byPriority = new Map<number, E[]>();
  for (const e of entries) {
    const list = byPriority.get(e.job.spec.priority) ?? [];
    list.push(e);
    byPriority.set(e.job.spec.priority, list);
  }
  const virtual = new Map(usedMilliByTeam);
  const out: E[] = [];
  for (const priority of [...byPriority.keys()].sort((a, b) => b - a)) {
    const queues = new Map<string, E[]>();
    // jobOrder within one priority (longest waiting, then id), on keys read once per job.
    const keyed = byPriority.get(priority)!.map((e) => ({ e, queuedAtMs: e.job.queuedAtMs, id: e.job.id }));
    keyed.sort((a, b) => a.queuedAtMs - b.queuedAtMs || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
    for (const { e } of keyed) {
      const q = queues.get(e.team) ?? [];
      q.push(e);
      queues.set(e.team, q);
    }
    const heads = new Map<string, number>([...queues.keys()].map((t) => [t, 0]));
    const heap = new TeamHeap((t) => (virtual.get(t) ?? 0) / Math.max(1, weightOf(t)));
    for (const t of queues.keys()) heap.push(t);
    while (heap.size > 0) {
      const team = heap.pop()!;
      const q = queues.get(team)!;
      const i = heads.get(team)!;
      const e = q[i]!;
      out.push(e);
      virtual.set(team, (virtual.get(team) ?? 0) + milliOf(e));
      heads.set(team, i + 1);
      if (i + 1 < q.length) heap.push(team);
    }
  }
  return out;
}

/** A small binary min-heap of team names keyed by a share function read at push time. */
class TeamHeap {
  private readonly items: { team: string; key: number }[] = [];
  constructor(private readonly keyOf: (team: string) => number) {}
  get size(): number {
    return this.items.length;
  }
  push(team: string): void {
    const item = { team, key: this.keyOf(team) };
    const a = this.items;
    a.push(item);
    let i = a.length - 1;
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (!less(a[i]!, a[p]!)) break;
      [a[i], a[p]] = [a[p]!, a[i]!];
      i = p;
    }
  }
  pop(): string | undefined {
    const a = this.items;
    if (a.length === 0) return undefined;
    const top = a[0]!;
    const last = a.pop()!;
    if (a.length > 0) {
      a[0] = last;
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        const r = l + 1;
        let m = i;
        if (l < a.length && less(a[l]!, a[m]!)) m = l;
        if (r < a.length && less(a[r]!, a[m]!)) m = r;
        if (m === i) break;
        [a[i], a[m]] = [a[m]!, a[i]!];
        i = m;
      }
    }
    return top.team;
  }
}

function less(a: { team: string; key: number }, b: { team: string; key: number }): boolean {
  return a.key < b.key || (a.key === b.key && a.team < b.team);
}
