// A page loaded (or reloaded) while no run goes shows the newest ended run whole, as the tab that watched it did:
// This run's figures (from the run list's record), its chart (its step rows, from its CSV) and its final image.
// The advice beside it is that run's settings' (app.js asks for it): what the page shows agrees. A run that
// starts replaces it, as it replaces any run before it.
import { state } from "./state.js";

// RFC 4180 text (quoted cells may hold commas, quotes and line breaks): its rows of cells
export function csvRows(text) {
  const rows = [];
  let row = [], cell = "", quoted = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (quoted) {
      if (c === '"' && text[i + 1] === '"') { cell += '"'; i++; }
      else if (c === '"') quoted = false;
      else cell += c;
    } else if (c === '"') quoted = true;
    else if (c === ",") { row.push(cell); cell = ""; }
    else if (c === "\n" || c === "\r") {
      if (c === "\r" && text[i + 1] === "\n") i++;
      row.push(cell); rows.push(row); row = []; cell = "";
    } else cell += c;
  }
  if (cell !== "" || row.length) { row.push(cell); rows.push(row); }
  return rows;
}

// A step row as the page's rows hold them: numbers as numbers, an empty cell left out (not measured); the
// browser's render is its decode and paint, as the tab that painted it measured them
function stepRow(head, cells) {
  const r = {};
  head.forEach((k, i) => {
    const v = cells[i];
    if (v === undefined || v === "") return;
    const n = Number(v);
    r[k] = Number.isFinite(n) ? n : v;
  });
  if (r.client_decode_ms !== undefined && r.client_paint_ms !== undefined) {
    r.render_ms = r.client_decode_ms + r.client_paint_ms;
  }
  return r;
}

// A run's step rows from its CSV (/runs/ID.csv); none when the server cannot send it now (its export slots are
// taken: the chart stays empty, the figures are still shown)
export async function fetchRows(rid) {
  const res = await fetch(`/runs/${encodeURIComponent(rid)}.csv`);
  if (!res.ok) return [];
  const [head, ...body] = csvRows(await res.text());
  return head ? body.filter((c) => c.length === head.length).map((c) => stepRow(head, c)) : [];
}

// The ended run `meta` as This run, its rows given: null when a run began meanwhile (it is shown instead)
export function restoredRun(meta, rows) {
  if (state.run) return null;
  const run = { meta, rows: new Map(), started: performance.now(), frames: 0, bytes: 0, dropped: 0, lastSeq: null,
                restored: true };
  for (const r of rows) if (Number.isInteger(r.step)) run.rows.set(r.step, r);
  state.run = run;
  return run;
}
