/**
 * Charts as inline SVG, for the self-contained HTML pages gpu-fleet writes (the simulation report,
 * the FinOps report): no scripts, no network, they open from disk.
 */
export type Series = { name: string; color: string; points: readonly (readonly [number, number])[] };

/** Width of one chart, in SVG units. */
export const CHART_WIDTH = 520;
const W = CHART_WIDTH;
const H = 260;
const PAD = { l: 48, r: 12, t: 10, b: 34 };

/**
 * Round tick values from 0 to at least `max`: steps of 1, 2 or 5 × a power of ten, about four of
 * them; with `whole`, never a step below 1 (days, machines).
 */
export function niceTicks(max: number, whole = false): number[] {
  if (!(max > 0)) return [0];
  const raw = max / 4;
  const power = 10 ** Math.floor(Math.log10(raw));
  let step = [1, 2, 5, 10].map((m) => m * power).find((st) => st >= raw)!;
  if (whole) step = Math.max(1, Math.ceil(step));
  const ticks: number[] = [];
  for (let v = 0; v < max + step * 1e-9; v += step) ticks.push(Number(v.toPrecision(12)));
  if (ticks[ticks.length - 1]! < max - step * 1e-9) ticks.push(Number((ticks[ticks.length - 1]! + step).toPrecision(12)));
  return ticks;
}

function frame(maxX: number, maxY: number, xLabel: string): { x: (v: number) => number; y: (v: number) => number; axes: string } {
  const yTicks = niceTicks(maxY);
  const xTicks = niceTicks(maxX, maxX >= 1);
  // The axes run to the last round tick, so the top line and the last label are round numbers.
  const topY = yTicks[yTicks.length - 1]! || 1;
  const topX = xTicks[xTicks.length - 1]! || 1;
  const x = (v: number) => PAD.l + (v / topX) * (W - PAD.l - PAD.r);
  const y = (v: number) => H - PAD.b - (v / topY) * (H - PAD.t - PAD.b);
  const ticks: string[] = [];
  for (const vy of yTicks)
    ticks.push(
      `<line x1="${PAD.l}" x2="${W - PAD.r}" y1="${y(vy).toFixed(1)}" y2="${y(vy).toFixed(1)}" stroke="#eef0f2"/><text x="${PAD.l - 6}" y="${(y(vy) + 4).toFixed(1)}" text-anchor="end">${short(vy)}</text>`,
    );
  for (const vx of xTicks) ticks.push(`<text x="${x(vx).toFixed(1)}" y="${H - PAD.b + 14}" text-anchor="middle">${short(vx)}</text>`);
  const axes = `${ticks.join('')}<line x1="${PAD.l}" x2="${W - PAD.r}" y1="${H - PAD.b}" y2="${H - PAD.b}" stroke="#9aa4ab"/><text x="${(W + PAD.l) / 2}" y="${H - 4}" text-anchor="middle">${esc(xLabel)}</text>`;
  return { x, y, axes };
}

export function lineChart(input: { id: string; title: string; xLabel: string; series: Series[] }): string {
  const maxX = Math.max(0, ...input.series.flatMap((s) => s.points.map((p) => p[0])));
  const maxY = Math.max(1, ...input.series.flatMap((s) => s.points.map((p) => p[1]))) * 1.05;
  const f = frame(maxX, maxY, input.xLabel);
  const paths = input.series
    .map((s) => {
      const d = s.points.map((p, i) => `${i === 0 ? 'M' : 'L'}${f.x(p[0]).toFixed(1)},${f.y(p[1]).toFixed(1)}`).join('');
      return `<g class="series" data-series="${esc(s.name)}" data-points="${s.points.length}"><title>${esc(s.name)}</title><path d="${d}" fill="none" stroke="${s.color}" stroke-width="1.8"/></g>`;
    })
    .join('');
  return figure(input.id, input.title, `${f.axes}${paths}`, input.series);
}

export function stackedChart(input: { id: string; title: string; xLabel: string; series: Series[] }): string {
  // One point (one day, one sample) would be a line no wider than a pixel: it is drawn one unit wide.
  if (input.series.every((s) => s.points.length === 1))
    input = { ...input, series: input.series.map((s) => ({ ...s, points: [s.points[0]!, [s.points[0]![0] + 1, s.points[0]![1]]] })) };
  const n = Math.max(0, ...input.series.map((s) => s.points.length));
  const totals = Array.from({ length: n }, (_, i) => input.series.reduce((sum, s) => sum + (s.points[i]?.[1] ?? 0), 0));
  const xs = input.series[0]?.points.map((p) => p[0]) ?? [];
  const maxX = Math.max(0, ...xs);
  const maxY = Math.max(1, ...totals) * 1.05;
  const f = frame(maxX, maxY, input.xLabel);
  const base = new Array<number>(n).fill(0);
  const layers: string[] = [];
  for (const s of input.series) {
    const top = base.map((b, i) => b + (s.points[i]?.[1] ?? 0));
    const upper = xs.map((x, i) => `${i === 0 ? 'M' : 'L'}${f.x(x).toFixed(1)},${f.y(top[i]!).toFixed(1)}`).join('');
    const lower = [...xs.keys()]
      .reverse()
      .map((i) => `L${f.x(xs[i]!).toFixed(1)},${f.y(base[i]!).toFixed(1)}`)
      .join('');
    layers.push(
      `<g class="series" data-series="${esc(s.name)}" data-points="${s.points.length}"><title>${esc(s.name)}</title><path d="${upper}${lower}Z" fill="${s.color}" fill-opacity="0.75" stroke="${s.color}"/></g>`,
    );
    top.forEach((v, i) => (base[i] = v));
  }
  return figure(input.id, input.title, `${f.axes}${layers.join('')}`, input.series);
}

function figure(id: string, title: string, body: string, series: Series[]): string {
  const legend = series.map((s) => `<span><i style="background:${s.color}"></i>${esc(s.name)}</span>`).join('');
  return `<figure class="chart" data-chart="${id}"><figcaption>${esc(title)}</figcaption><svg viewBox="0 0 ${W} ${H}" width="100%" role="img" aria-label="${esc(title)}">${body}</svg><div class="legend">${legend}</div></figure>`;
}

/** One colour per name, the same in every chart of a page: names sorted, then the palette in order. */
export function colorsByName(names: Iterable<string>, fixed: ReadonlyMap<string, string> = new Map()): Map<string, string> {
  const out = new Map(fixed);
  let i = 0;
  for (const n of [...new Set(names)].sort()) if (!out.has(n)) out.set(n, palette(i++));
  return out;
}

const PALETTE = ['#2a9d8f', '#e76f51', '#264653', '#e9c46a', '#8ab17d', '#6d597a', '#f4a261', '#457b9d', '#b56576', '#355070'];
export function palette(i: number): string {
  return PALETTE[i % PALETTE.length]!;
}

export function colorFor(group: string, i: number): string {
  if (/spot/.test(group)) return ['#2a9d8f', '#8ab17d', '#457b9d', '#355070'][i % 4]!;
  if (/od|on-demand/.test(group)) return ['#e76f51', '#f4a261', '#b56576', '#e9c46a'][i % 4]!;
  return palette(i);
}

export function short(v: number): string {
  if (v >= 1e6) return `${(v / 1e6).toFixed(1)}M`;
  if (v >= 1e3) return `${(v / 1e3).toFixed(1)}k`;
  return v >= 10 || Number.isInteger(v) ? v.toFixed(0) : v.toFixed(1);
}

export function esc(s: string): string {
  return s.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!);
}
