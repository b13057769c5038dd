// previewlab's page: its main module. It holds the state (state.js) and wires the parts: the connection
// (connection.js), the form (controls.js), the canvas (canvas.js), the chart (chart.js), the figures
// (figures.js, glance.js) and the run list (runs.js). The protocol is server/ws/protocol.py's; every cost figure is the server's.
import { $, state } from "./state.js";
import { connect, send } from "./connection.js";
import { applyHello, checkPrompt, fidelityMessage, namedField, runMessage, showButtons, showError, showLive,
  showRunSettings, wire } from "./controls.js";
import { hasFinal, onFrame, resetView, showFinal, stepArrived, wireView } from "./canvas.js";
import { drawn, makeChart } from "./chart.js";
import { endFigures, frameFigures, showAdvice, showFidelity, showMeasure, startFigures, stepFigures } from "./figures.js";
import { fetchRows, restoredRun } from "./restore.js";
import { addRuns, fetchNew, loadOlder, newerFindings, newerPairs, newestEnded } from "./runs.js";

function row(step) {
  const rows = state.run.rows;
  if (!rows.has(step)) rows.set(step, { step });
  return rows.get(step);
}

function beginRun(meta) {
  state.run = { meta, rows: new Map(), started: performance.now(), frames: 0, bytes: 0, dropped: 0, lastSeq: null };
  state.running = true;
  resetView(meta);
  startFigures(meta);
  $("adapted").textContent = "";  // a new run starts from the preview as made: the server re-adapts it if its link asks
  showError("");
  showButtons();
  // a measure series' runs are its own (a baseline runs decoder none): the controls keep the user's choices
  if (!meta.purpose) showLive(meta);
  state.view.chartDirty = true;
}

function onStep(msg) {
  if (!state.run || msg.run_id !== state.run.meta.run_id) return;
  Object.assign(row(msg.step), msg);
  stepArrived(msg.run_id, msg.step);  // the caption names the step's decode size
  stepFigures(msg);
  state.view.chartDirty = true;
}

function onDelivery(msg) {
  // the server's words on this tab's link (the page computes none)
  $("link").textContent = msg.link_line || "";
  $("adapted").textContent = msg.adapted_line || "";
  if (!state.run || msg.run_id !== state.run.meta.run_id) return;
  Object.assign(row(msg.step), { send_ms: msg.send_ms, ack_rtt_ms: msg.ack_rtt_ms });
  state.view.chartDirty = true;
}

function endRun(msg) {
  const { type, analysis, ...meta } = msg;
  state.running = false;
  showButtons();
  endFigures(meta);
  addRuns([meta]);  // the end of a run carries its whole record: no need to ask the server again
  if (analysis) showAnalysis(meta.run_id, analysis);
  if (state.run && state.run.meta.run_id === meta.run_id && hasFinal(meta)) showFinal(meta.run_id);
}

// The Budget % the field shows: the advice's budget on every surface of the page (the server's default fills
// the field at hello); null while it holds no budget (empty, or not a number above 0): the server's default
function budgetPct() {
  const b = Number($("budget").value);
  return $("budget").value.trim() !== "" && b > 0 ? b : null;
}

async function fetchAnalysis(rid) {
  const b = budgetPct();
  const res = await fetch(`/analysis?run=${encodeURIComponent(rid)}` + (b ? `&budget=${b}` : ""));
  if (res.ok) showAnalysis(rid, await res.json(), true);
}

// A done message carries its settings' analysis at the server's default budget; another in the field asks again
function showAnalysis(rid, data, asked = false) {
  if (!asked && budgetPct() && data.advice.budget !== budgetPct()) { fetchAnalysis(rid); return; }
  state.analysis = { run_id: rid, data };
  newerFindings(data);
  newerPairs(data);
  showAdvice();
}

// The newest ended run shown as This run, once a page load found no run going (restore.js): its figures, chart and
// final image beside the advice of its settings
let restoring = false;

async function restore(meta) {
  restoring = true;
  const run = restoredRun(meta, await fetchRows(meta.run_id));
  if (!run) return;  // a run began while its rows came: that one is shown
  resetView(meta);
  startFigures(meta);
  endFigures(meta);
  state.view.chartDirty = true;
  if (hasFinal(meta)) showFinal(meta.run_id);
}

// Runs from a /runs page: before any run ends in this tab, the advice is that of the newest ended run's settings,
// and This run, the chart and the view show that run (a reload shows what the tab showed, not half of it)
function listed(list) {
  addRuns(list);
  const newest = newestEnded();
  if (!state.analysis && newest) fetchAnalysis(newest.run_id);
  if (!state.run && !restoring && newest) restore(newest);
}

// The fidelity pass's progress; once it is done, the analysis is asked again: its figures are in it now
function onFidelity(msg) {
  showFidelity(msg);
  showButtons();
  if (msg.state === "done" && state.analysis) fetchAnalysis(state.analysis.run_id);
}

function onHello(msg) {
  applyHello(msg);
  if (msg.running) {
    beginRun(msg.running);
    if (state.starts) showRunSettings(msg.running);  // a tab opened mid-run: the run's own settings, not defaults
  }
  else if (state.running) {  // the run this tab watched ended while it was away (a server restart)
    $("f-status").textContent = `${state.run ? state.run.meta.run_id + " " : ""}ended while disconnected`;
    state.running = false;
  }
  showMeasure(msg.measure);
  showFidelity(msg.fidelity);
  showButtons();
  firstPage.then(() => fetchNew()).then(listed);  // after a reconnect: the runs that ended while this tab was away
}

function onText(msg) {
  switch (msg.type) {
    case "hello": onHello(msg); break;
    case "run": beginRun(msg); break;
    case "measure": showMeasure(msg); showButtons(); break;
    case "fidelity": onFidelity(msg); break;
    case "step": onStep(msg); break;
    case "delivery": onDelivery(msg); break;
    case "done": endRun(msg); break;
    case "error": showError(msg.message, msg.run_id ? null : namedField(msg.message)); break;
  }
}

const painting = {
  ack: send,
  failed: (text) => showError(text),
  painted(header, renderMs) {
    if (!state.run || header.run_id !== state.run.meta.run_id) return;
    row(header.step).render_ms = renderMs;
    frameFigures();
    state.view.chartDirty = true;
  },
};

wire({
  start: () => send(runMessage("start")),
  // the current settings' baselines, paired with runs of the current preview settings, until the overhead holds
  // at the 95 % level (server/measure.py); the controls keep what the user chose
  measure: () => send(runMessage("measure")),
  // what each decoder shows against the full VAE, untimed, between runs (preview/call/fidelity_pass.py)
  fidelity: () => send(fidelityMessage()),
  stop: () => send({ type: "stop" }),
  set: (fields) => send({ type: "set", ...fields }),
  budget: () => { if (state.analysis && budgetPct()) fetchAnalysis(state.analysis.run_id); },
});
wireView();
$("older").addEventListener("click", () => loadOlder().then(listed));

// The browser tests' hook: the state and the chart, read through here and never through module internals
window.previewlab = { state, get chart() { return drawn.chart; }, get rows() { return drawn.rows; } };

makeChart();
checkPrompt();
showAdvice();
const firstPage = loadOlder().then(listed);
connect({ text: onText, frame: (buf) => onFrame(buf, painting) });
