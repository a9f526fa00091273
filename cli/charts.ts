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

function frame(maxX: number, maxY: number, xLabel: string): { x: (v: number) => number; y: (v: number) => number; axes: string } {
  const x = (v: number) => PAD.l + (v / Math.max(maxX, 1e-9)) * (W - PAD.l - PAD.r);
  const y = (v: number) => H - PAD.b - (v / Math.max(maxY, 1e-9)) * (H - PAD.t - PAD.b);
  const ticks: string[] = [];
  for (let i = 0; i <= 4; i++) {
    const vy = (maxY * i) / 4;
    ticks.push(
      `<line x1="${PAD.l}" x2="${W - PAD.r}" y1="${y(vy).toFixed(1)}" y2="${y(vy).toFixed(1)}" stroke="#eef0f2"/><text x="${PAD.l - 6}" y="${(y(vy) + 4).toFixed(1)}" text-anchor="end">${short(vy)}</text>`,
    );
    const vx = (maxX * i) / 4;
    ticks.push(`<text x="${x(vx).toFixed(1)}" y="${H - PAD.b + 14}" text-anchor="middle">${short(vx)}</text>`);
  }
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
  return v >= 10 || v === 0 ? v.toFixed(0) : v.toFixed(1);
}

export function esc(s: string): string {
  return s.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!);
}
