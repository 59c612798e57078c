// The live view's charts: a sale's units over the last five minutes, one sample a second (uPlot,
// loaded by the page as the global `uPlot`), and the purchase rate from the same samples.
import { $ } from './admin-session.js';

export const UNITS = ['available', 'queued', 'pending', 'paid', 'expired', 'cancelled'];
const COLORS = {
  available: ['#067647', '#d1fadf'],
  queued: ['#b54708', '#fedf89'],
  pending: ['#1570ef', '#b2ddff'],
  paid: ['#6941c6', '#d9d6fe'],
  restoring: ['#475467', '#eaecf0'],
  expired: ['#d92d20', '#fecdca'],
  cancelled: ['#475467', '#d0d5dd'],
};
// Stacked, bottom first, so that no unit's line hides another's (many sit at 0 together): where the
// stock is, whose top is the sale's stock when the reconciliation holds; and the units closed so
// far, which counts every close ever (their stock is back in Available once restored).
const CHARTS = [
  { box: 'chart', units: ['paid', 'pending', 'queued', 'restoring', 'available'], height: 220 },
  { box: 'chart-closed', units: ['expired', 'cancelled'], height: 140 },
];
const WINDOW_S = 5 * 60;
// Purchases/s over the last few seconds: steadier than one poll's difference.
const RATE_SPAN_S = 5;
// Ticks at whole seconds or coarser, and at whole units: no 0.5 s, no 2.5 orders.
const X_INCRS = [1, 2, 5, 10, 15, 30, 60, 120, 300];
const Y_INCRS = [0, 1, 2, 3, 4, 5, 6, 7].flatMap((p) => [1, 2, 5].map((m) => m * 10 ** p));
const clock = (t) =>
  new Date(t * 1000).toLocaleTimeString(undefined, {
    hour: '2-digit',
    minute: '2-digit',
    second: '2-digit',
    hour12: false,
  });

const chart = { plots: [], t: [], units: {}, samples: [] };

/** Axis labels, and the ticks they were given kept on the chart's element (what the page test reads). */
const ticks = (box, axis, format) => (_u, splits) => {
  box.dataset[axis] = splits.join(' ');
  return splits.map(format);
};

function makePlot({ box: id, units, height }) {
  const box = $(id);
  const top = [...units].reverse(); // drawn first, each band then covered by those below it
  return {
    units,
    plot: new uPlot(
      {
        width: Math.max(320, box.clientWidth),
        height,
        scales: { x: { time: true }, y: { range: (_u, _min, max) => [0, Math.max(1, max)] } },
        // Units move in steps (a purchase, a close): drawn as steps, not as slopes between samples.
        series: [
          {},
          ...top.map((u) => ({
            label: u,
            stroke: COLORS[u][0],
            fill: COLORS[u][1],
            width: 1.5,
            points: { show: false },
            paths: uPlot.paths.stepped({ align: 1 }),
          })),
        ],
        axes: [
          { incrs: X_INCRS, space: 70, values: ticks(box, 'xTicks', clock) },
          { incrs: Y_INCRS, size: 60, values: ticks(box, 'yTicks', String) },
        ],
        legend: { live: false },
      },
      [[], ...top.map(() => [])],
      box,
    ),
  };
}

/** New, empty charts (a sale opened). */
export function makeChart() {
  for (const { plot } of chart.plots) plot.destroy();
  chart.t = [];
  chart.units = {};
  chart.samples = [];
  chart.plots = CHARTS.map(makePlot);
}

export const resizeChart = () =>
  chart.plots.forEach(
    ({ plot }, i) =>
      void plot.setSize({ width: Math.max(320, $(CHARTS[i].box).clientWidth), height: CHARTS[i].height }),
  );

function draw({ plot, units }) {
  let sum = chart.t.map(() => 0);
  const stacked = units.map((u) => (sum = sum.map((s, i) => s + chart.units[u][i])));
  plot.setData([chart.t, ...stacked.reverse()]);
}

/** Adds one GET .../live answer. */
export function addSample(n) {
  const t = Date.parse(n.at) / 1000;
  chart.samples.push({ t, purchases: n.purchases });
  chart.t.push(t);
  for (const { units } of CHARTS) for (const u of units) (chart.units[u] ??= []).push(n.reconciliation[u]);
  // Keep the window: drop what fell out of it from the front of every series.
  let old = 0;
  while (old < chart.t.length && chart.t[old] < t - WINDOW_S) old++;
  if (old > 0) for (const series of [chart.t, ...Object.values(chart.units)]) series.splice(0, old);
  while (chart.samples.length > 0 && chart.samples[0].t < t - WINDOW_S) chart.samples.shift();
  chart.plots.forEach(draw);
  $('chart').dataset.points = String(chart.t.length);
}

export function purchaseRate() {
  const { samples } = chart;
  const last = samples[samples.length - 1];
  const first = samples.find((s) => s.t >= last.t - RATE_SPAN_S) ?? last;
  if (last === first) return '–';
  return `${((last.purchases - first.purchases) / (last.t - first.t)).toFixed(1)}/s`;
}
