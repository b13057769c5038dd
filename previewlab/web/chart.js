// The cost of each step, stacked by stage (uPlot, loaded before the modules as a plain script): a bar per step, so
// a step without a preview stands as what it measured, never joined to the preview steps beside it by a slope
// (with every 3, lines drew triangles between previews). The browser's own decode and paint (render) come after
// the step, beside the next one: they never slow the generation, so they are drawn apart, as a dashed line over
// the previews it painted (a step without one leaves a gap), not on the stack.
import { $, state } from "./state.js";

const STAGES = ["denoise_ms", "decode_ms", "sync_ms", "transfer_ms", "resize_ms", "encode_ms", "send_ms"];
const DRAW = STAGES.map((_, i) => STAGES.length - 1 - i);  // series order: the top of the stack first
const COLORS = ["#8da0cb", "#e78ac3", "#fc8d62", "#ffd92f", "#a6d854", "#66c2a5", "#b3b3b3"];
const RENDER_LABEL = "browser render (after the step, not in it)";
const STEP_INCRS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000];  // the chart's step ticks: whole steps only
const BAR = { size: [0.7, 48], align: 0 };  // a step's bar: 70 % of a step wide (48 px at most), centred on it

export const drawn = { chart: null, rows: [] };  // the chart and the rows it shows (the test hook reads both)

function chartWidth() {
  return Math.max(240, Math.min(1100, $("chart-box").clientWidth));
}

// A stage's own value at a step, for the legend (the stack draws sums)
function rawValue(key, idx) {
  const r = drawn.rows[idx];
  if (!r) return "–";
  const v = r[key];
  return v === undefined ? "–" : Number(v).toFixed(2);
}

export function makeChart() {
  const series = [{ label: "step" }];
  // Stacked: each series is the cumulative sum up to its stage, drawn from the top stage down so each smaller
  // sum paints over the larger one and every band shows one stage's share of the step.
  const bars = uPlot.paths.bars(BAR);
  DRAW.forEach((i) => series.push({ label: STAGES[i].replace("_ms", ""), stroke: COLORS[i], fill: COLORS[i], width: 1,
                                    paths: bars, points: { show: false },
                                    value: (u, v, si, idx) => rawValue(STAGES[DRAW[si - 1]], idx) }));
  series.push({ label: RENDER_LABEL, stroke: "#7a5c00", width: 2, dash: [6, 4], points: { show: true },
                value: (u, v, si, idx) => rawValue("render_ms", idx) });
  drawn.chart = new uPlot({ width: chartWidth(), height: 260, series,
                            // half a step beyond the first and last steps: their bars are drawn whole
                            scales: { x: { time: false, range: (u, lo, hi) => (lo === null ? [0, 1] : [lo - 0.5, hi + 0.5]) },
                                      y: { range: (u, lo, hi) => [0, Math.max(1, hi)] } },
                            axes: [{ label: "step", incrs: STEP_INCRS, values: (u, splits) => splits.map(String) },
                                   { label: "ms" }] },
                          [[], ...STAGES.map(() => []), []], $("chart"));
  window.addEventListener("resize", () => drawn.chart.setSize({ width: chartWidth(), height: 260 }));
  requestAnimationFrame(redraw);
}

// At most once an animation frame, and only when the run's rows changed
function redraw() {
  const run = state.run;
  if (state.view.chartDirty && run) {
    state.view.chartDirty = false;
    const rows = [...run.rows.values()].filter((r) => r.denoise_ms !== undefined).sort((a, b) => a.step - b.step);
    drawn.rows = rows;
    const cols = [];
    let acc = rows.map(() => 0);
    for (const s of STAGES) {
      acc = acc.map((a, i) => a + (Number(rows[i][s]) || 0));
      cols.push(acc);
    }
    const render = rows.map((r) => (r.render_ms === undefined ? null : r.render_ms));
    drawn.chart.setData([rows.map((r) => r.step), ...DRAW.map((i) => cols[i]), render]);
  }
  requestAnimationFrame(redraw);
}
