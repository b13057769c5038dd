// The run list: every run this tab knows, newest first, a row per run id, updated in place when that run's
// record or figures change (never rebuilt whole). Pages of runs come from GET /runs.
import { $, state } from "./state.js";
import { hasFinal, showFinal } from "./canvas.js";
import { setInit } from "./controls.js";
import { pairsHow, showCompare } from "./figures.js";

const PAGE = 50;            // runs per /runs request (the server's default page)
const rowOf = new Map();    // run id -> its row in the table

function element(tag, props = {}) {
  return Object.assign(document.createElement(tag), props);
}

function link(href, text, className) {
  return element("a", { href, textContent: text, className });
}

function pickBox(m, ok) {
  const box = element("input", { type: "checkbox", className: "pick", disabled: !ok,
                                 checked: state.picked.includes(m.run_id) });
  box.dataset.id = m.run_id;
  box.addEventListener("change", () => {
    const picked = state.picked;
    if (box.checked) { picked.push(m.run_id); if (picked.length > 2) picked.shift(); }
    else picked.splice(picked.indexOf(m.run_id), 1);
    for (const [id, tr] of rowOf) tr.querySelector("input.pick").checked = picked.includes(id);
    showCompare();
  });
  return box;
}

// One run's row: what it was, how it ended, and the server's figures (its pair, its configuration's verdict)
function runRow(m) {
  const tr = element("tr");
  tr.dataset.id = m.run_id;
  const f = m.status === "damaged" ? null : (m.figures || null);
  tr.appendChild(element("td")).appendChild(pickBox(m, !!f));
  const every = m.budget > 0 ? `auto ${m.budget}%` : m.every;
  const status = m.damaged && m.status !== "damaged" ? `${m.status} (damaged)` : m.status;
  const size = !m.width ? "" : `${m.width}x${m.height}`;
  const task = (m.task === "img2img" ? `img2img ${m.strength} from ${m.init}` : (m.task || "txt2img")) +
               (m.batch > 1 ? ` ×${m.batch}` : "");
  const steps = m.steps || (m.totals ? m.totals.steps_run : "");
  const guidance = m.guidance === undefined || m.guidance === null ? (m.task === "script" ? "not seen" : "") : m.guidance;
  const role = !f ? "" : f.role + (m.purpose ? ` (${m.purpose === "baseline" ? "measure" : "measured"})` : "");
  const pair = f && f.pair ? f.pair.said : "";
  const config = !f || f.role !== "preview" ? "" : !f.steady ? `no figure: ${f.why}` :
    f.finding && f.finding.overhead ? f.finding.said : `no baseline beside a run of it: ${pairsHow()}`;
  const cells = [["run", m.run_id], ["model", m.model], ["status", status], ["role", role], ["decoder", m.decoder],
                 ["every", every], ["mode", m.mode], ["changes", m.changes || ""], ["task", task], ["steps", steps],
                 ["size", size], ["guidance", guidance], ["wall", f ? f.wall_s.toFixed(2) : ""], ["pair", pair],
                 ["config", config], ["previews", f ? f.previews : ""],
                 ["peak", f && f.peak_mem_mb !== null ? f.peak_mem_mb.toFixed(0) : ""]];
  // what the list leaves out is in the cells' hover text and in the comparison (tick two runs)
  const titles = { model: m.model_note || "", pair: f && f.pair ? `against baseline ${f.pair.baseline}` : "",
                   config: f && f.finding ? `${f.finding.runs} steady runs; pairs (run vs its baseline): ` +
                     f.finding.pairs.map((p) => p.join(" vs ")).join(", ") : "",
                   peak: m.totals ? `${m.totals.mem_source}` + (f && f.mem_over_mb !== null ?
                     `; ${f.mem_over_mb >= 0 ? "+" : ""}${f.mem_over_mb.toFixed(0)} MiB over its baseline` : "") : "" };
  cells.forEach(([name, c]) => {
    const td = tr.appendChild(element("td", { textContent: c === undefined || c === null ? "" : c }));
    if (name === "config") td.className = "said";
    if (titles[name]) td.title = titles[name];
  });
  if (m.damaged) { tr.title = m.damaged; tr.className = "damaged"; }
  const csv = tr.appendChild(element("td"));
  if (m.status !== "damaged" && !m.damaged) {
    const a = csv.appendChild(link(`/runs/${encodeURIComponent(m.run_id)}.csv`, "CSV", "run-csv"));
    a.download = `previewlab-${m.run_id}.csv`;
  }
  const image = tr.appendChild(element("td"));
  if (hasFinal(m)) {  // opens here, beside the preview; a middle click opens the PNG itself
    const a = image.appendChild(link(`/runs/${encodeURIComponent(m.run_id)}/final.png`, "image", "run-image"));
    a.addEventListener("click", (ev) => { ev.preventDefault(); showFinal(m.run_id); });
  }
  const use = tr.appendChild(element("td"));
  if (state.starts && hasFinal(m)) {
    const b = use.appendChild(element("button", { type: "button", textContent: "use as input", className: "use-input" }));
    b.addEventListener("click", () => setInit(m.run_id));
  }
  return tr;
}

// One run's row drawn again, or put in its place (ids sort by time: newest first)
function renderRun(id) {
  const tr = runRow(state.runs.get(id));
  const old = rowOf.get(id);
  rowOf.set(id, tr);
  if (old) { old.replaceWith(tr); return; }
  const body = $("runs").querySelector("tbody");
  const after = [...body.children].find((r) => r.dataset.id < id);  // the first older row
  body.insertBefore(tr, after || null);
}

// Runs the server sent (a page, or a run's end): each one's row drawn where it belongs
export function addRuns(list) {
  for (const m of list) {
    state.runs.set(m.run_id, m);
    renderRun(m.run_id);
  }
}

// A newer analysis of one group of settings: the listed runs of its configurations take its findings (the
// server's own, newer than the ones their `done` or the listing carried), and only their rows are drawn again
export function newerFindings(a) {
  const byName = new Map(a.findings.map((f) => [f.name, f]));
  for (const m of state.runs.values()) {
    const f = m.figures;
    if (f && f.group === a.group && f.finding && byName.has(f.config) && f.finding !== byName.get(f.config)) {
      f.finding = byName.get(f.config);
      renderRun(m.run_id);
    }
  }
}

// Runs whose pair formed after their end: a run with previews first is paired with the baseline right after it,
// which ends later. Its row asks the server for its figures again (the runs from it up to that baseline, which
// the list already holds, are one page: the page never pairs runs itself).
export async function newerPairs(a) {
  for (const f of a.findings) {
    for (const [rid, base] of f.pairs) {
      const m = state.runs.get(rid);
      if (!m || !m.figures || (m.figures.pair && m.figures.pair.baseline === base)) continue;
      const between = [...state.runs.keys()].filter((id) => id >= rid && id < base).length;
      addRuns(await fetchRuns(`before=${encodeURIComponent(base)}&limit=${Math.min(PAGE * 10, Math.max(1, between))}`));
    }
  }
}

export function newestEnded() {
  return [...state.runs.values()].filter((m) => m.figures).sort((a, b) => (a.run_id < b.run_id ? 1 : -1))[0];
}

async function fetchRuns(query) {
  const res = await fetch(`/runs?${query}`);
  return res.ok ? res.json() : [];
}

// Pages of PAGE runs, newest first; "older runs" asks for the page before the oldest shown.
export async function loadOlder() {
  const oldest = [...state.runs.keys()].sort()[0];
  const list = await fetchRuns(`limit=${PAGE}` + (oldest ? `&before=${encodeURIComponent(oldest)}` : ""));
  $("older").hidden = list.length < PAGE;
  return list;
}

// After a reconnect: the runs that ended while this tab was away, not the whole list again.
export async function fetchNew() {
  const newest = [...state.runs.keys()].sort().pop();
  return fetchRuns("limit=500" + (newest ? `&after=${encodeURIComponent(newest)}` : ""));
}
