// previewlab page: one WebSocket (/ws). Text frames are JSON with a "type"; binary frames are previews:
// 4-byte big-endian header length N, N bytes of UTF-8 JSON header, then the image bytes: one image, or a clip's
// frames one after another (header.sizes: each frame's bytes; header.fps: the rate that plays them).
"use strict";

const $ = (id) => document.getElementById(id);
const LIVE = ["decoder", "every", "preview_max", "encoder", "quality", "mode", "budget", "target", "batch_preview",
              "frames"];
const RUN_FIELDS = ["prompt", "steps", "width", "height", "seed", "guidance", "batch", "strength", "num_frames", "fps"];
const NUMERIC = new Set(["steps", "width", "height", "seed", "guidance", "every", "preview_max", "quality", "budget",
                         "batch", "strength", "num_frames", "fps"]);
const CLIP_COUNTS = [4, 8, 16];  // "N frames spread evenly" choices the page offers beside first, middle and all
const DEFAULT_FPS = 8;           // a clip whose rate is unknown plays at this
const PAGE = 50;         // runs per /runs request (the server's default page)
const STAGES = ["denoise_ms", "decode_ms", "sync_ms", "transfer_ms", "resize_ms", "encode_ms", "send_ms", "render_ms"];
const DRAW = STAGES.map((_, i) => STAGES.length - 1 - i);  // series order: the top of the stack first
const COLORS = ["#8da0cb", "#e78ac3", "#fc8d62", "#ffd92f", "#a6d854", "#66c2a5", "#b3b3b3", "#e5c494"];

let ws = null;
let init = null;         // img2img: the past run whose final image is the next start's input (null: text to image)
let run = null;          // the run this tab is watching: its settings, rows by step, figures
let chart = null;
let chartDirty = false;
let clip = null;         // the clip preview playing: its decoded frames, the frame shown and its timer
let lastSeq = -1;        // the newest preview this tab has received: a clip still decoding for an older one gives way
let drawnSeq = -1;       // the newest preview drawn: an older one whose decode finished later is never drawn over it
const canvas = $("preview");
const ctx = canvas.getContext("2d");

function showError(text) {
  const e = $("error");
  e.textContent = text;
  e.hidden = !text;
}

function value(id) {
  const el = $(id);
  if (id === "every" && el.value.trim() === "auto") return "auto";
  return NUMERIC.has(id) ? Number(el.value) : el.value;
}

// every and budget travel together: budget only means something when every is "auto"
function previewFields(changed) {
  const out = {};
  for (const k of changed) {
    if (k === "budget" || k === "every") {
      out.every = value("every");
      if (out.every === "auto") out.budget = value("budget");
    } else out[k] = value(k);
  }
  return out;
}

function send(msg) {
  if (ws && ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify(msg));
}

function connect() {
  ws = new WebSocket(`${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/ws${location.search}`);
  ws.binaryType = "arraybuffer";
  ws.onopen = () => { $("conn").textContent = "connected"; $("conn").className = "pill ok"; };
  ws.onclose = (ev) => {
    $("conn").textContent = `disconnected (${ev.code})`; $("conn").className = "pill";
    setTimeout(connect, 1000);
  };
  ws.onmessage = (ev) => {
    if (typeof ev.data === "string") onText(JSON.parse(ev.data));
    else onFrame(ev.data);
  };
}

function onText(msg) {
  switch (msg.type) {
    case "hello": {
      $("model").textContent = `${msg.model} · ${msg.device} ${msg.dtype}`;
      // the model's label: synthetic (random weights) or its note (the demo model: what its pictures and costs are)
      const banner = $("banner");
      banner.dataset.synthetic ??= banner.textContent;  // the page's own text, for synthetic models
      banner.textContent = msg.note ? msg.note[0].toUpperCase() + msg.note.slice(1) + "." : banner.dataset.synthetic;
      $("banner").hidden = !(msg.synthetic || msg.note);
      // the choices come from the server's registries (decoders, encoders, modes, targets)
      for (const [k, names] of Object.entries(msg.choices || {})) {
        const sel = $(k);
        const all = k === "frames" ? [...names, ...CLIP_COUNTS.filter((n) => n <= msg.max_preview_frames).map(String)] : names;
        if (!sel || sel.options.length === all.length) continue;
        sel.replaceChildren(...all.map((n) => Object.assign(document.createElement("option"), { textContent: n })));
      }
      for (const [k, v] of Object.entries(msg.defaults)) if ($(k) && !$(k).dataset.touched && k !== "budget") $(k).value = v;
      $("width").max = $("height").max = msg.max_side;
      $("batch").max = msg.max_batch;
      $("clip-row").hidden = $("frames-label").hidden = !msg.video;  // a video model: the clip's length, rate, frames
      $("num_frames").max = msg.max_frames;
      $("model").title = msg.space;  // the latent space as the server read it from the VAE
      if (msg.running) beginRun(msg.running);
      else if (!$("stop").disabled) {  // the run this tab watched ended while it was away (a server restart)
        $("f-status").textContent = `${run ? run.meta.run_id + " " : ""}ended while disconnected`;
        $("start").disabled = false;
        $("stop").disabled = true;
      }
      firstPage.then(fetchNew);  // after a reconnect: only the runs that ended while this tab was away
      break;
    }
    case "run": beginRun(msg); break;
    case "step": onStep(msg); break;
    case "delivery": onDelivery(msg); break;
    case "done": endRun(msg); break;
    case "error": showError(msg.message); break;
  }
}

function beginRun(meta) {
  run = { meta, rows: new Map(), started: performance.now(), frames: 0, bytes: 0, dropped: 0, lastSeq: null,
          lastStep: 0 };
  showError("");
  $("f-status").textContent = `running ${meta.run_id}`;
  $("start").disabled = true;
  $("stop").disabled = false;
  for (const k of LIVE) if (meta[k] !== undefined && k !== "budget") $(k).value = meta[k];
  if (meta.budget > 0) { $("every").value = "auto"; $("budget").value = meta.budget; }
  chartDirty = true;
}

function endRun(msg) {
  $("f-status").textContent = `${msg.status} ${msg.run_id}` + (msg.error ? ` (${msg.error})` : "");
  $("start").disabled = false;
  $("stop").disabled = true;
  const { type, ...meta } = msg;
  addRuns([meta]);  // the end of a run carries its whole record: no need to ask the server again
}

function row(step) {
  if (!run.rows.has(step)) run.rows.set(step, { step });
  return run.rows.get(step);
}

function onStep(msg) {
  if (!run || msg.run_id !== run.meta.run_id) return;
  Object.assign(row(msg.step), msg);
  run.lastStep = Math.max(run.lastStep, msg.step);
  $("f-step").textContent = `${msg.step} / ${run.meta.steps}`;
  if (msg.event) $("f-status").textContent = `running ${run.meta.run_id} · step ${msg.step}: ${msg.event}`;
  let denoise = 0, preview = 0;
  for (const r of run.rows.values()) {
    denoise += r.denoise_ms || 0;
    preview += onPath(r);
  }
  $("f-overhead").textContent = denoise ? `${(100 * preview / denoise).toFixed(1)} % (${preview.toFixed(0)} of ${denoise.toFixed(0)} ms)` : "–";
  chartDirty = true;
}

function onDelivery(msg) {
  if (!run || msg.run_id !== run.meta.run_id) return;
  Object.assign(row(msg.step), { send_ms: msg.send_ms, ack_rtt_ms: msg.ack_rtt_ms });
  chartDirty = true;
}

// A clip preview's frames, as blobs: header.sizes gives each one's bytes (one image: one size, or none from an
// older server)
function frameBlobs(buf, start, header) {
  const type = `image/${header.format}`;
  const sizes = header.sizes || [buf.byteLength - start];
  const blobs = [];
  for (const size of sizes) {
    blobs.push(new Blob([new Uint8Array(buf, start, size)], { type }));
    start += size;
  }
  return blobs;
}

function stopClip() {
  if (!clip) return;
  clearInterval(clip.timer);
  for (const b of clip.bitmaps) b.close();
  clip = null;
}

function drawBitmap(bitmap) {
  if (canvas.width !== bitmap.width || canvas.height !== bitmap.height) {
    canvas.width = bitmap.width;
    canvas.height = bitmap.height;
  }
  ctx.drawImage(bitmap, 0, 0);
}

// The rest of a clip, decoded after its first frame was drawn and acknowledged, then played in a loop until the
// next preview replaces it
async function playClip(first, rest, fps, seq) {
  const bitmaps = [first];
  let playing = false;
  try {
    for (const b of rest) {
      if (lastSeq !== seq) return;  // a newer preview came while these decoded: it replaces this clip
      bitmaps.push(await createImageBitmap(b));
    }
    if (lastSeq !== seq || drawnSeq !== seq) return;
    playing = true;
  } catch (e) {  // a frame that does not decode: the first stays on the canvas, the page says why
    showError(`clip preview ${seq}: a frame did not decode (${e})`);
    return;
  } finally {
    if (!playing) for (const b of bitmaps) b.close();  // given way, or a frame that would not decode
  }
  stopClip();
  clip = { seq, bitmaps, shown: 0, timer: 0 };
  const mine = clip;
  clip.timer = setInterval(() => {
    mine.shown = (mine.shown + 1) % mine.bitmaps.length;
    drawBitmap(mine.bitmaps[mine.shown]);
    canvas.dataset.clipFrame = String(mine.shown);
  }, 1000 / (fps > 0 ? fps : DEFAULT_FPS));
}

async function onFrame(buf) {
  const view = new DataView(buf);
  const n = view.getUint32(0, false);
  const header = JSON.parse(new TextDecoder().decode(new Uint8Array(buf, 4, n)));
  const blobs = frameBlobs(buf, 4 + n, header);
  lastSeq = header.seq;
  if (run && header.run_id === run.meta.run_id) {
    run.frames += 1;
    run.bytes += buf.byteLength;
    if (run.lastSeq !== null && header.seq > run.lastSeq + 1) run.dropped += header.seq - run.lastSeq - 1;
    run.lastSeq = header.seq;
  }
  const t0 = performance.now();
  const bitmap = await createImageBitmap(blobs[0]);
  const t1 = performance.now();
  requestAnimationFrame(() => {
    if (header.seq < drawnSeq) {  // a newer preview is on the canvas already: acknowledge this one, draw nothing
      bitmap.close();
      send({ type: "ack", seq: header.seq, client_decode_ms: +(t1 - t0).toFixed(3), client_paint_ms: 0 });
      return;
    }
    drawnSeq = header.seq;
    stopClip();
    drawBitmap(bitmap);
    const t2 = performance.now();
    const count = blobs.length > 1 ? ` · ${blobs.length} frames at ${(header.fps || DEFAULT_FPS).toFixed(1)} fps` : "";
    canvas.dataset.clipFrames = String(blobs.length);
    canvas.dataset.clipFrame = "0";
    $("caption").textContent = `step ${header.step} · ${header.decoder} · ${header.width}x${header.height}${count} · ${header.format} · ${(buf.byteLength / 1024).toFixed(1)} KB`;
    canvas.dataset.step = header.step;
    canvas.dataset.decoder = header.decoder;
    canvas.dataset.painted = String(Number(canvas.dataset.painted || 0) + 1);
    // one ack per message, once its first frame is on the canvas
    send({ type: "ack", seq: header.seq, client_decode_ms: +(t1 - t0).toFixed(3), client_paint_ms: +(t2 - t1).toFixed(3) });
    if (blobs.length > 1) playClip(bitmap, blobs.slice(1), header.fps, header.seq);
    else bitmap.close();
    if (run && header.run_id === run.meta.run_id) {
      const r = row(header.step);
      r.render_ms = (t1 - t0) + (t2 - t1);
      const secs = (performance.now() - run.started) / 1000;
      $("f-frames").textContent = run.frames;
      $("f-dropped").textContent = run.dropped;
      $("f-bps").textContent = `${(run.bytes / secs / 1024).toFixed(1)} KB/s`;
      $("f-pps").textContent = (run.frames / secs).toFixed(2);
      chartDirty = true;
    }
  });
}

function makeChart() {
  const series = [{ label: "step" }];
  // Stacked: each series is the cumulative sum up to its stage, drawn from the top stage down so each smaller
  // sum paints over the larger one and every band shows one stage's share of the step.
  DRAW.forEach((i) => series.push({ label: STAGES[i].replace("_ms", ""), stroke: COLORS[i], fill: COLORS[i], width: 1,
                                    value: (u, v, si, idx) => rawValue(DRAW[si - 1], idx) }));
  chart = new uPlot({ width: Math.min(1100, window.innerWidth - 40), height: 260, series,
                      scales: { x: { time: false }, y: { range: (u, lo, hi) => [0, Math.max(1, hi)] } }, axes: [{ label: "step" }, { label: "ms" }] },
                    [[], ...STAGES.map(() => [])], $("chart"));
}

let rawRows = [];
function rawValue(stage, idx) {
  const r = rawRows[idx];
  if (!r) return "–";
  const v = r[STAGES[stage]];
  return v === undefined ? "–" : Number(v).toFixed(2);
}

function redraw() {
  if (chartDirty && run && chart) {
    chartDirty = false;
    rawRows = [...run.rows.values()].filter((r) => r.denoise_ms !== undefined).sort((a, b) => a.step - b.step);
    const xs = rawRows.map((r) => r.step);
    const cols = [];
    let acc = rawRows.map(() => 0);
    for (const s of STAGES) {
      acc = acc.map((a, i) => a + (Number(rawRows[i][s]) || 0));
      cols.push(acc);
    }
    chart.setData([xs, ...DRAW.map((i) => cols[i])]);
  }
  requestAnimationFrame(redraw);
}

// The preview time that ran on the denoising path: the figure the core computed (preview/records.py
// on_path_ms), carried by every step row and run total; the page never recomputes it.
function onPath(r) {
  return r.on_path_ms || 0;
}

// One run's figures from its totals: what the page's table and comparison show.
function figuresOf(m) {
  const t = m.totals;
  if (!t) return null;
  const steps = Math.max(1, t.steps_run || t.steps);  // the steps that ran: fewer for img2img, or a stopped run
  const onPathMs = onPath(t);
  return { wall_s: t.wall_s, denoise_per_step: t.denoise_ms / steps, preview_on_path: onPathMs,
           overhead_pct: t.denoise_ms ? 100 * onPathMs / t.denoise_ms : 0, previews: t.previews,
           kb_per_frame: t.previews ? t.bytes / t.previews / 1024 : 0, decode_ms: t.decode_ms, encode_ms: t.encode_ms };
}

const picked = [];
const runsById = new Map();  // every run this tab knows, by id; ids sort by time

function showCompare() {
  const box = $("compare");
  box.hidden = picked.length !== 2;
  if (box.hidden) return;
  const [a, b] = picked.map((id) => runsById.get(id));
  const fa = figuresOf(a), fb = figuresOf(b);
  const t = $("compare-table");
  t.textContent = "";
  const head = document.createElement("tr");
  for (const h of ["", `A ${a.run_id} (${a.decoder}/${a.mode})`, `B ${b.run_id} (${b.decoder}/${b.mode})`, "B / A"]) {
    const th = document.createElement("th"); th.textContent = h; head.appendChild(th);
  }
  t.appendChild(head);
  for (const k of Object.keys(fa || {})) {
    const tr = document.createElement("tr");
    const va = fa[k], vb = fb ? fb[k] : NaN;
    for (const c of [k, va.toFixed(2), Number(vb).toFixed(2), va ? (vb / va).toFixed(3) : "–"]) {
      const td = document.createElement("td"); td.textContent = c; tr.appendChild(td);
    }
    t.appendChild(tr);
  }
}

async function fetchRuns(query) {
  const res = await fetch(`/runs?${query}`);
  return res.ok ? res.json() : [];
}

function addRuns(list) {
  for (const m of list) runsById.set(m.run_id, m);
  renderRuns();
}

// Pages of PAGE runs, newest first; "older runs" asks for the page before the oldest shown.
async function loadOlder() {
  const oldest = [...runsById.keys()].sort()[0];
  const list = await fetchRuns(`limit=${PAGE}` + (oldest ? `&before=${encodeURIComponent(oldest)}` : ""));
  addRuns(list);
  $("older").hidden = list.length < PAGE;
}

// After a reconnect: the runs that ended while this tab was away, not the whole list again.
async function fetchNew() {
  const newest = [...runsById.keys()].sort().pop();
  addRuns(await fetchRuns("limit=500" + (newest ? `&after=${encodeURIComponent(newest)}` : "")));
}

function renderRuns() {
  const body = $("runs").querySelector("tbody");
  body.textContent = "";
  for (const id of [...runsById.keys()].sort().reverse()) {
    const m = runsById.get(id);
    const tr = document.createElement("tr");
    const f = m.status === "damaged" ? null : figuresOf(m);
    const box = document.createElement("input");
    box.type = "checkbox";
    box.className = "pick";
    box.disabled = !f;
    box.checked = picked.includes(m.run_id);
    box.addEventListener("change", () => {
      if (box.checked) { picked.push(m.run_id); if (picked.length > 2) picked.shift(); }
      else picked.splice(picked.indexOf(m.run_id), 1);
      for (const other of body.querySelectorAll("input.pick")) other.checked = picked.includes(other.dataset.id);
      showCompare();
    });
    box.dataset.id = m.run_id;
    const tdBox = document.createElement("td");
    tdBox.appendChild(box);
    tr.appendChild(tdBox);
    const every = m.budget > 0 ? `auto ${m.budget}%` : m.every;
    const status = m.damaged && m.status !== "damaged" ? `${m.status} (damaged)` : m.status;
    const size = m.width === undefined ? "" : `${m.width}x${m.height}`;
    const task = (m.task === "img2img" ? `img2img ${m.strength} from ${m.init}` : (m.task || "txt2img")) +
                 (m.batch > 1 ? ` ×${m.batch}` : "");
    const cells = [m.run_id, status, m.decoder, every, m.mode, task, m.steps, size, m.guidance,
                   f ? f.wall_s.toFixed(2) : "", f ? f.denoise_per_step.toFixed(1) : "",
                   f ? f.preview_on_path.toFixed(0) : "", f ? f.overhead_pct.toFixed(1) : "",
                   f ? f.previews : "", f ? f.kb_per_frame.toFixed(1) : ""];
    for (const c of cells) {
      const td = document.createElement("td");
      td.textContent = c === undefined || c === null ? "" : c;
      tr.appendChild(td);
    }
    if (m.damaged) { tr.title = m.damaged; tr.className = "damaged"; }
    const td = document.createElement("td");
    if (m.status !== "damaged" && !m.damaged) {
      const a = document.createElement("a");
      a.href = `/runs/${encodeURIComponent(m.run_id)}.csv`;
      a.textContent = "CSV";
      a.download = `previewlab-${m.run_id}.csv`;
      a.className = "run-csv";
      td.appendChild(a);
    }
    tr.appendChild(td);
    const use = document.createElement("td");
    if ((m.status === "done" || m.status === "stopped") && !m.damaged) {
      const b = document.createElement("button");
      b.type = "button";
      b.textContent = "use as input";
      b.className = "use-input";
      b.addEventListener("click", () => setInit(m.run_id));
      use.appendChild(b);
    }
    tr.appendChild(use);
    body.appendChild(tr);
  }
}

// img2img: a past run's final image is the input; the server reads it by id (no upload, no path from here)
function setInit(id) {
  init = id;
  $("init-label").textContent = id ? `the final image of run ${id} (image to image)` : "none (text to image)";
  $("clear-init").hidden = !id;
}

$("start-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const msg = { type: "start", ...previewFields(LIVE) };
  for (const k of RUN_FIELDS) msg[k] = value(k);
  msg.init = init;
  send(msg);
});
$("clear-init").addEventListener("click", () => setInit(null));
$("stop").addEventListener("click", () => send({ type: "stop" }));
for (const k of LIVE) {
  $(k).addEventListener("change", () => {
    if (run && $("stop").disabled === false) send({ type: "set", ...previewFields([k]) });
  });
}
for (const k of RUN_FIELDS) $(k).addEventListener("input", () => { $(k).dataset.touched = "1"; });
$("older").addEventListener("click", loadOlder);

makeChart();
const firstPage = loadOlder();
connect();
requestAnimationFrame(redraw);
