// A small hand-drawn SVG line chart: client req/s against upstream req/s over the last
// couple of minutes. The gap between the two lines is what Weir saved GitHub.

import { s, h } from './dom.js';
import { WINDOW_MS } from './rates.js';

const W = 300;
const H = 80;

/** Rounds up to 1, 2 or 5 × 10^n so the scale label stays readable. */
function niceMax(v) {
  if (!(v > 0)) return 1;
  const p = 10 ** Math.floor(Math.log10(v));
  for (const m of [1, 2, 5, 10]) if (v <= m * p) return m * p;
  return 10 * p;
}

/** Builds the chart's DOM once; `update` then only moves the lines. */
export function createChart(label) {
  const grid = s('g', { class: 'chart-grid' },
    s('line', { x1: 0, x2: W, y1: H / 2, y2: H / 2, 'vector-effect': 'non-scaling-stroke' }),
    s('line', { x1: 0, x2: W, y1: H - 0.5, y2: H - 0.5, 'vector-effect': 'non-scaling-stroke' }));
  const clientLine = s('polyline', { class: 'line-client', fill: 'none', 'vector-effect': 'non-scaling-stroke', points: '' });
  const upstreamLine = s('polyline', { class: 'line-upstream', fill: 'none', 'vector-effect': 'non-scaling-stroke', points: '' });
  const svg = s('svg', {
    class: 'chart-svg',
    viewBox: `0 0 ${W} ${H}`,
    preserveAspectRatio: 'none',
    role: 'img',
    'aria-label': label,
  }, grid, clientLine, upstreamLine);
  const maxLabel = h('span', { class: 'chart-max' });
  const root = h('figure', { class: 'chart' },
    h('div', { class: 'chart-plot' }, maxLabel, svg),
    h('figcaption', { class: 'chart-legend small' },
      h('span', { class: 'key key-client' }, 'client'),
      h('span', { class: 'key key-upstream' }, 'to GitHub'),
      h('span', { class: 'chart-axis muted' }, '−2 min … now')));

  function update(samples, now, summary) {
    const peak = samples.reduce((m, x) => Math.max(m, x.client, x.upstream), 0);
    const max = niceMax(peak);
    const start = now - WINDOW_MS;
    const xOf = (t) => Math.max(0, ((t - start) / WINDOW_MS) * W).toFixed(1);
    // Each sample is the rate over its own interval, so it is drawn as a flat step across it.
    const pts = (key) => samples
      .map((x) => {
        const py = (H - (Math.min(x[key], max) / max) * (H - 2) - 1).toFixed(1);
        return `${xOf(x.at - (x.dt ?? 1) * 1000)},${py} ${xOf(x.at)},${py}`;
      })
      .join(' ');
    clientLine.setAttribute('points', pts('client'));
    upstreamLine.setAttribute('points', pts('upstream'));
    maxLabel.textContent = `${max}/s`;
    svg.setAttribute('aria-label', `${label}. ${summary}`);
  }

  return { root, update };
}
