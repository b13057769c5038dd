// The figures beside the preview: This run, the advice with its NOISY line, the measure series' line, and the
// comparison of two runs. Every cost figure is the server's (server/figures.py, the analysis the bench and
// watch.summary() use): this module words and places what it is sent and judges nothing; the rate and ETA while
// a run goes are the step rows' own arithmetic (steps over their seconds), no statistic.
import { $, state } from "./state.js";
import { showGlance } from "./glance.js";

// Python's f"{x:+.1f}": a difference of two server figures in the comparison
function num(x) {
  return `${x >= 0 ? "+" : ""}${x.toFixed(1)}`;
}

// How this page's user gets pairs: the Measure button, or on a script's page (serve(watch), no button) the
// script's own calls with previews off and on
export function pairsHow(more = false) {
  return state.starts ? `Measure runs ${more ? "more" : "the pairs"}` :
    "alternate your script's calls with previews off and on (watch.controls.set(decoder=\"none\"), then back), " +
    "and watch.summary() measures them";
}

// A run's overhead as the server judged it: its configuration's figure over all its pairs, with its verdict and
// what is missing, then this run's own pair
export function overheadText(f) {
  if (!f) return "–";
  if (f.role === "baseline") return "a no-preview baseline: runs with previews of these settings are measured against it";
  if (!f.steady) return `no figure: ${f.why}`;
  const config = f.finding && f.finding.overhead ? `${f.config}: ${f.finding.said}` :
    `${f.config}: no baseline ran right before a run of it, so its overhead is unknown; ${pairsHow()}`;
  return f.pair ? `${config} (this run ${f.pair.said} vs baseline ${f.pair.baseline})` : config;
}

function settingsText(m) {
  const size = m.width ? `${m.width}x${m.height}` : "size not seen";
  const parts = [`${m.steps || "?"} steps`, size];
  if (m.batch > 1) parts.push(`batch ${m.batch}`);
  if (m.num_frames > 1) parts.push(`${m.num_frames} frames at ${m.fps} fps`);
  parts.push(m.guidance === undefined || m.guidance === null ? "guidance not seen" : `guidance ${m.guidance}`);
  if (m.seed >= 0) parts.push(`seed ${m.seed}`);
  parts.push(m.task === "img2img" ? `img2img ${m.strength} from ${m.init}` : m.task || "txt2img");
  return parts.join(" · ");
}

// The latest preview's memory rise over its step and the most so far (the rows' mem_mb, MiB)
function previewMemText(rows) {
  const mine = [...rows.values()].filter((r) => r.frames > 0 && r.mem_mb !== undefined).sort((a, b) => a.step - b.step);
  if (!mine.length) return "no preview yet";
  const most = Math.max(...mine.map((r) => r.mem_mb));
  return `${mine[mine.length - 1].mem_mb.toFixed(1)} MiB latest, ${most.toFixed(1)} MiB most so far`;
}

// This run, at a run's start: its settings, nothing of the run before
export function startFigures(meta) {
  $("f-status").textContent = `running ${meta.run_id}`;
  $("f-settings").textContent = settingsText(meta);
  $("f-step").textContent = `0 / ${meta.steps || "?"}`;
  for (const [id, text] of [["f-frames", "0"], ["f-dropped", "0"], ["f-bps", "–"], ["f-pps", "–"],
                            ["f-overhead", "–"], ["f-onpath", "–"], ["f-mem", "–"], ["f-busy", "–"],
                            ["settle", "where the picture settles: at the run's end"]]) {
    $(id).textContent = text;
  }
}

const RATE_STEPS = 8;  // the steps it/s and the ETA are read over: the newest ones, so a change of preview shows soon

// "1 min 5 s", "12 s"
function duration(s) {
  const r = Math.round(s);
  return r >= 60 ? `${Math.floor(r / 60)} min ${r % 60} s` : `${r} s`;
}

// The step, it/s and the ETA, from the rows the step messages brought: each row's denoising and the preview time
// on its path (its own figures, so a late or bunched message changes nothing); the ETA is the steps left at that
// rate, the denoising's (the final decode follows)
export function stepLine(run, step, ended = false) {
  const of = `${step} / ${run.meta.steps || "?"}`;
  const rows = [...run.rows.values()].filter((r) => r.denoise_ms !== undefined).sort((a, b) => a.step - b.step)
    .slice(-RATE_STEPS);
  const ms = rows.reduce((sum, r) => sum + Number(r.denoise_ms) + (Number(r.on_path_ms) || 0), 0) / rows.length;
  if (!rows.length || !(ms > 0)) return of;
  const left = ended ? 0 : Math.max(0, (run.meta.steps || 0) - step);
  return `${of} · ${(1000 / ms).toFixed(ms < 100 ? 1 : 2)} it/s` + (left ? ` · ETA ${duration(left * ms / 1000)}` : "");
}

// This run, after each step: its step, its event, the preview time on the path so far (the rows' on_path_ms,
// the core's own figure), its memory; the overhead is the whole run's, at its end
export function stepFigures(msg) {
  const run = state.run;
  $("f-step").textContent = stepLine(run, msg.step);
  if (msg.event) $("f-status").textContent = `running ${run.meta.run_id} · step ${msg.step}: ${msg.event}`;
  let denoise = 0, preview = 0;
  for (const r of run.rows.values()) {
    if (r.denoise_ms === undefined) continue;
    denoise += r.denoise_ms;
    preview += r.on_path_ms || 0;
  }
  // the share itself is the server's figure (stages.on_path_share_pct), given at the run's end
  $("f-onpath").textContent = denoise ? `${preview.toFixed(0)} ms of previews on the path so far; its share at the run's end` : "–";
  $("f-overhead").textContent = "at the run's end: its wall time against the no-preview run right before it";
  $("f-mem").textContent = previewMemText(run.rows);
}

// This run, after each preview drawn: frames, drops and rates as this tab received them
export function frameFigures() {
  const run = state.run;
  const secs = (performance.now() - run.started) / 1000;
  $("f-frames").textContent = run.frames;
  $("f-dropped").textContent = run.dropped;
  $("f-bps").textContent = `${(run.bytes / secs / 1024).toFixed(1)} KB/s`;
  $("f-pps").textContent = (run.frames / secs).toFixed(2);
}

// The device's busy share, of what: a CPU's reading is the process's CPU time over the cores it may use (the
// server's hello says how many), NVML's the share of time a kernel ran on the GPU
export function busyText(pct, source) {
  if (pct === null || pct === undefined) return "not read";
  const of = source === "cpu" && state.cores ? ` of ${state.cores} core${state.cores === 1 ? "" : "s"}` :
    source === "nvml" ? " of the GPU's time" : "";
  return `${pct.toFixed(1)} %${of} (${source})`;
}

// This run, at its end: the server's figures
export function endFigures(meta) {
  $("f-status").textContent = `${meta.status} ${meta.run_id}` + (meta.error ? ` (${meta.error})` : "");
  const run = state.run;
  if (run && run.meta.run_id === meta.run_id && run.rows.size) {  // its last step and rate; no ETA once it ended
    $("f-step").textContent = stepLine(run, Math.max(...run.rows.keys()), true);
  }
  const f = meta.figures;
  if (!f || !state.run || state.run.meta.run_id !== meta.run_id) return;
  const t = meta.totals;
  $("f-overhead").textContent = overheadText(f);
  $("f-onpath").textContent = `${f.on_path_share_pct.toFixed(1)} % (${f.preview_on_path.toFixed(0)} of ${f.denoising_path_ms.toFixed(0)} ms)`;
  $("f-mem").textContent = previewMemText(state.run.rows) +
    (f.peak_mem_mb !== null ? `; run peak ${f.peak_mem_mb.toFixed(0)} MiB (${t.mem_source})` : "");
  $("f-busy").textContent = busyText(f.busy_pct, t.busy_source);
  // the server's line (judging/progress.py): where the picture settles, or why nothing does
  $("settle").textContent = f.settle_line || "the picture's progress was not read";
}

// The advice, the NOISY line and the baselines of the newest run's settings, as the server's analysis says them
export function showAdvice() {
  const noisy = $("noisy");
  const a = state.analysis;
  showGlance(a);
  if (!a) {
    $("advice-head").textContent = "no advice yet: no run in the list has ended";
    $("advice").textContent = "no advice yet: no run in the list has ended";
    $("baselines").textContent = "";
    noisy.hidden = true;
    return;
  }
  const d = a.data;
  noisy.hidden = !(d.noise && d.noise.noisy);
  noisy.textContent = noisy.hidden ? "" : d.noise_line;
  $("baselines").textContent = `the settings of run ${a.run_id}: ${d.baselines} steady no-preview baseline` +
    `${d.baselines === 1 ? "" : "s"}` + (!d.noise ? `; fewer than two, so their noise is unknown: ${pairsHow(true)}` :
                                         noisy.hidden ? `; ${d.noise_line}` : "");
  // the NOISY line is shown once, above: the advice's own copy of it is left out here
  const lines = d.advice.lines.filter((ln) => noisy.hidden || ln.trim() !== d.noise_line);
  $("advice").textContent = lines.length ? lines.join("\n") :
    `no advice yet: no run with previews of these settings has a baseline beside it; ${pairsHow()}`;
  // its one line leads: the rule's pick and why (advice.headline), else the advice's last line, its conclusion
  $("advice-head").textContent = d.advice.headline ||
    (lines.length ? lines[lines.length - 1].trim() : $("advice").textContent);
}

// The fidelity pass's line, from the server's `fidelity` messages (hello's for a tab that joins during one)
export function showFidelity(m) {
  state.judging = !!m && m.state === "running";
  $("fidelity-line").hidden = !m;
  $("fidelity-line").textContent = m ? m.line : "";
}

// The measure series' line, from the server's `measure` messages (hello's for a tab that joins during one)
export function showMeasure(m) {
  state.measuring = !!m && m.state === "running";
  $("measure-line").hidden = !m;
  $("measure-line").textContent = m ? m.line : "";
}

// The comparison's rows, named in words: [label, figure, kind]; a percentage compares by its difference in
// points (a ratio of two percentages means nothing), a time or a count by B / A
const COMPARED = [
  ["wall time (s)", "wall_s", "ratio"],
  ["wall ms per step done", "wall_per_step", "ratio"],
  ["denoise ms per step done", "denoise_per_step", "ratio"],
  ["preview ms on the denoising path", "preview_on_path", "ratio"],
  ["on-path share (%)", "on_path_share_pct", "points"],
  ["overhead: its configuration's over all its pairs, then this run's against its baseline (%)", "overhead_pct", "points"],
  ["previews", "previews", "ratio"],
  ["KB per frame", "kb_per_frame", "ratio"],
  ["preview decode ms (all previews)", "decode_ms", "ratio"],
  ["preview encode ms (all previews)", "encode_ms", "ratio"],
  ["peak memory (MiB)", "peak_mem_mb", "ratio"],
  ["device busy while denoising (%)", "busy_pct", "points"],
];

// A comparison row's figure from a run's server figures: the overhead is its own pair's (null without one)
function figureOf(f, key) {
  return key === "overhead_pct" ? (f.pair ? f.pair.overhead_pct : null) : f[key];
}

function cells(tr, texts) {
  for (const [c, tip] of texts) {
    const td = document.createElement("td");
    td.textContent = c;
    if (tip) td.title = tip;
    tr.appendChild(td);
  }
}

export function showCompare() {
  const box = $("compare");
  box.hidden = state.picked.length !== 2;
  if (box.hidden) return;
  const [a, b] = state.picked.map((id) => state.runs.get(id));
  const fa = a.figures || null, fb = b.figures || null;
  const t = $("compare-table");
  t.textContent = "";
  const head = document.createElement("tr");
  for (const h of ["", `A ${a.run_id} (${a.decoder}/${a.mode})`, `B ${b.run_id} (${b.decoder}/${b.mode})`, "B vs A"]) {
    const th = document.createElement("th"); th.textContent = h; head.appendChild(th);
  }
  t.appendChild(head);
  // what ran: the model (its note on hover) and the live changes, in words; the figures follow
  for (const [label, key, title] of [["model", "model", "model_note"], ["live changes", "changes", null]]) {
    const tr = document.createElement("tr");
    tr.dataset.figure = key;
    cells(tr, [[label, ""], [a[key] || "", title ? a[title] : ""], [b[key] || "", title ? b[title] : ""],
               [(a[key] || "") === (b[key] || "") ? "same" : "differs", ""]]);
    t.appendChild(tr);
  }
  const shown = (v, kind, key, f) => (v === null || v === undefined || Number.isNaN(v) ? "–" :
    key === "overhead_pct" ? overheadText(f) : key === "previews" ? String(v) : kind === "points" ? num(v) :
    Number(v).toFixed(2));
  for (const [label, key, kind] of COMPARED) {
    const va = fa ? figureOf(fa, key) : null, vb = fb ? figureOf(fb, key) : null;
    const known = va !== null && vb !== null && va !== undefined && vb !== undefined;
    // two overheads: each with its own verdict; their difference is no finding the page can judge
    const vs = !known ? "–" : key === "overhead_pct" ? "each with its verdict" :
               kind === "points" ? `${num(vb - va)} points` : va ? `×${(vb / va).toFixed(3)}` : "–";
    const tr = document.createElement("tr");
    tr.dataset.figure = key;
    cells(tr, [[label, ""], [shown(va, kind, key, fa), ""], [shown(vb, kind, key, fb), ""], [vs, ""]]);
    t.appendChild(tr);
  }
}
