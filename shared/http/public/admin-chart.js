// The live view's chart: a sale's units over the last five minutes, one sample a second (uPlot,
// loaded by the page as the global `uPlot`), and the purchase rate from the same samples.
import { $ } from './admin-session.js';

export const UNITS = ['available', 'queued', 'pending', 'paid', 'expired', 'cancelled'];
const COLORS = { available: '#067647', queued: '#b54708', pending: '#1570ef', paid: '#6941c6', expired: '#d92d20', cancelled: '#667085' };
const WINDOW_S = 5 * 60;
// Purchases/s over the last few seconds: steadier than one poll's difference.
const RATE_SPAN_S = 5;

const chart = { plot: null, data: null, samples: [] };

/** A new, empty chart (a sale opened). */
export function makeChart() {
  const box = $('chart');
  chart.plot?.destroy();
  chart.data = [[], ...UNITS.map(() => [])];
  chart.samples = [];
  chart.plot = new uPlot({
    width: Math.max(320, box.clientWidth), height: 260,
    scales: { x: { time: true }, y: { range: (_u, _min, max) => [0, Math.max(1, max)] } },
    // Units move in steps (a purchase, a close): drawn as steps, not as slopes between samples.
    series: [{}, ...UNITS.map((u) => ({ label: u, stroke: COLORS[u], width: 2, points: { show: false }, paths: uPlot.paths.stepped({ align: 1 }) }))],
    axes: [{}, { size: 60 }],
    legend: { live: false },
  }, chart.data, box);
}

export const resizeChart = () => chart.plot?.setSize({ width: Math.max(320, $('chart').clientWidth), height: 260 });

/** Adds one GET .../live answer. */
export function addSample(n) {
  const t = Date.parse(n.at) / 1000;
  chart.samples.push({ t, purchases: n.purchases });
  chart.data[0].push(t);
  UNITS.forEach((u, i) => chart.data[i + 1].push(n.reconciliation[u]));
  // Keep the window: drop what fell out of it from the front of every series.
  let old = 0;
  while (old < chart.data[0].length && chart.data[0][old] < t - WINDOW_S) old++;
  if (old > 0) chart.data.forEach((series) => series.splice(0, old));
  while (chart.samples.length > 0 && chart.samples[0].t < t - WINDOW_S) chart.samples.shift();
  chart.plot.setData(chart.data);
  $('chart').dataset.points = String(chart.data[0].length);
}

export function purchaseRate() {
  const { samples } = chart;
  const last = samples[samples.length - 1];
  const first = samples.find((s) => s.t >= last.t - RATE_SPAN_S) ?? last;
  if (last === first) return '–';
  return `${((last.purchases - first.purchases) / (last.t - first.t)).toFixed(1)}/s`;
}
