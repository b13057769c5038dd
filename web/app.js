// previewlab page: one WebSocket (/ws). Text frames are JSON with a "type"; binary frames are previews:
// 4-byte big-endian header length N, N bytes of UTF-8 JSON header, then the image bytes: one image, or a clip's
// frames one after another (header.sizes: each frame's bytes; header.fps: the rate that plays them).
"use strict";

const $ = (id) => document.getElementById(id);
const LIVE = ["decoder", "every", "preview_max", "decode_at", "encoder", "quality", "mode", "budget", "target",
              "batch_preview", "frames"];
const RUN_FIELDS = ["prompt", "steps", "width", "height", "seed", "guidance", "batch", "strength", "num_frames", "fps"];
const NUMERIC = new Set(["steps", "width", "height", "seed", "guidance", "every", "preview_max", "quality", "budget",
                         "batch", "strength", "num_frames", "fps"]);
const CLIP_COUNTS = [4, 8, 16];  // "N frames spread evenly" choices the page offers beside first, middle and all
const DEFAULT_FPS = 8;           // a clip whose rate is unknown plays at this
const PAGE = 50;         // runs per /runs request (the server's default page)
// The server's stages of a step, stacked. The browser's own decode and paint (render) come after the step,
// beside the next one: they never slow the generation, so they are drawn apart, as a line, not on the stack.
const STAGES = ["denoise_ms", "decode_ms", "sync_ms", "transfer_ms", "resize_ms", "encode_ms", "send_ms"];
const DRAW = STAGES.map((_, i) => STAGES.length - 1 - i);  // series order: the top of the stack first
const COLORS = ["#8da0cb", "#e78ac3", "#fc8d62", "#ffd92f", "#a6d854", "#66c2a5", "#b3b3b3"];
const RENDER_LABEL = "browser render (after the step, not in it)";
const STEP_INCRS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000];  // the chart's step ticks: whole steps only
// What decides a step's cost: a no-preview run with the same values is another run's reference
const COST_KEYS = ["model", "device", "dtype", "width", "height", "steps", "batch", "num_frames", "guidance", "task",
                   "strength"];

let ws = null;
let starts = true;       // false: a script owns the runs (serve(watch)); the page starts none
let errorField = null;   // the field the error banner names ("" for none): editing it to a valid value clears it
let init = null;         // img2img: the past run whose final image is the next start's input (null: text to image)
let run = null;          // the run this tab is watching: its settings, rows by step, figures
let chart = null;
let chartDirty = false;
let clip = null;         // the clip preview playing: its decoded frames, the frame shown and its timer
let lastSeq = -1;        // the newest preview this tab has received: a clip still decoding for an older one gives way
let drawnSeq = -1;       // the newest preview drawn: an older one whose decode finished later is never drawn over it
let shown = null;        // the preview on the canvas, for its caption: its header, KB and clip note
let offered = null;      // the server's hello: the decoders it offers and whether it has TAESD weights
let maxPrompt = 2000;    // the server's limit on a prompt, characters (its hello's max_prompt)
let examples = [];       // prompts the model knows (the demo model's vocabulary), for the example button
let nextExample = 0;
let finalShown = false;  // the view shows a final image in the previews' place (the flip button goes back)
const canvas = $("preview");
const ctx = canvas.getContext("2d");

function showError(text, field = null) {
  const e = $("error");
  e.textContent = text;
  e.hidden = !text;
  errorField = text ? field : null;
}

// A refused message names its field first ("width=100: ...", "budget: ..."); a field of this page's form, or ""
function namedField(text) {
  const m = /^([a-z_]+)[=:]/.exec(text || "");
  return m && $(m[1]) ? m[1] : "";
}

// The banner of a refused input goes once that input holds a value its own constraints accept (or, when the
// error named no field, once any input is edited)
function inputEdited(id) {
  if (errorField === null || (errorField && errorField !== id)) return;
  if ($(id).checkValidity()) showError("");
}

function value(id) {
  const el = $(id);
  if (id === "every" && el.value.trim() === "auto") return "auto";
  if (!NUMERIC.has(id)) return el.value;
  // Text that is not a finite number goes as typed, so the server's error names it: Number("abc") is NaN, which
  // JSON sends as null. A number input that cannot parse its text reads "" (validity.badInput): "" is sent.
  const n = Number(el.value);
  return Number.isFinite(n) && !el.validity.badInput ? n : el.value;
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
  ws.onopen = () => { $("conn").textContent = "connected"; $("conn").className = "pill ok"; delete $("conn").dataset.closed; };
  ws.onclose = (ev) => {
    // the server's own close is the news (1001 server shutting down); the reconnects refused while it is down
    // each read 1006, which says nothing new: the first code stays until a connection opens again
    const first = $("conn").dataset.closed;
    const said = first && ev.code === 1006 ? first : `${ev.code}${ev.reason ? " " + ev.reason : ""}`;
    $("conn").dataset.closed = said;
    $("conn").textContent = `disconnected (${said})`; $("conn").className = "pill";
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
      starts = msg.starts !== false;
      showStarts();
      $("model").textContent = `${msg.model} · ${msg.device} ${msg.dtype}`;
      // the model's label: synthetic (random weights) or its note (the demo model: what its pictures and costs are)
      const banner = $("banner");
      banner.dataset.synthetic ??= banner.textContent;  // the page's own text, for synthetic models
      banner.textContent = msg.note ? msg.note[0].toUpperCase() + msg.note.slice(1) + "." : banner.dataset.synthetic;
      $("banner").hidden = !(msg.synthetic || msg.note);
      // the choices come from the server's registries (decoders, encoders, modes, targets, where decoders stop)
      for (const [k, names] of Object.entries(msg.choices || {})) {
        const sel = $(k);
        const all = k === "frames" ? [...names, ...CLIP_COUNTS.filter((n) => n <= msg.max_preview_frames).map(String)] : names;
        if (!sel || sel.options.length === all.length) continue;
        sel.replaceChildren(...all.map((n) => Object.assign(document.createElement("option"), { textContent: n })));
      }
      for (const [k, v] of Object.entries(msg.defaults)) {
        if ($(k) && !$(k).dataset.touched && !LIVE.includes(k)) $(k).value = v;
      }
      $("width").max = $("height").max = msg.max_side;
      $("batch").max = msg.max_batch;
      $("clip-row").hidden = $("frames-label").hidden = !msg.video;  // a video model: the clip's length, rate, frames
      $("num_frames").max = msg.max_frames;
      $("model").title = msg.space;  // the latent space as the server read it from the VAE
      if (msg.max_prompt) maxPrompt = msg.max_prompt;
      checkPrompt();
      showWords(msg.vocabulary || null);
      $("mode-note").textContent = msg.mode_note || "";
      $("mode-note").hidden = !msg.mode_note;
      $("decoder-note").textContent = msg.decoder_note || "";
      $("decoder-note").hidden = !msg.decoder_note;
      offered = { decoders: (msg.choices || {}).decoder || null, taesd: msg.taesd !== false };
      if (msg.running) beginRun(msg.running);
      else if (!$("stop").disabled) {  // the run this tab watched ended while it was away (a server restart)
        $("f-status").textContent = `${run ? run.meta.run_id + " " : ""}ended while disconnected`;
        $("start").disabled = false;
        $("stop").disabled = true;
      }
      showLive(msg.defaults);  // the preview settings now: a running run's live ones, or a script's watch's
      showMeasure(msg.measure);
      firstPage.then(fetchNew);  // after a reconnect: only the runs that ended while this tab was away
      break;
    }
    case "run": beginRun(msg); break;
    case "measure": showMeasure(msg); break;
    case "step": onStep(msg); break;
    case "delivery": onDelivery(msg); break;
    case "done": endRun(msg); break;
    case "error": showError(msg.message, msg.run_id ? null : namedField(msg.message)); break;
  }
}

// A script's page (serve(watch)): no Start and no run settings, which the script decides; the live preview
// controls and Stop work as on the server's own page
function showStarts() {
  $("run-fields").hidden = !starts;
  $("start").hidden = !starts;
  $("script-note").hidden = starts;
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

// "1,995 / 2,000"
function count(n) {
  return n.toLocaleString("en-US");
}

// The prompt's length as the server counts it (code points), against its limit. Over it, the prompt is cut here,
// with a word why (the textarea's own maxlength cut a paste with none); the word goes once it is under again.
function checkPrompt() {
  const el = $("prompt");
  const chars = Array.from(el.value);
  if (chars.length > maxPrompt) {
    el.value = chars.slice(0, maxPrompt).join("");
    $("prompt-cut").textContent = `your prompt was cut to ${count(maxPrompt)} characters: the server's limit`;
    $("prompt-cut").hidden = false;
  } else if (chars.length < maxPrompt) {
    $("prompt-cut").hidden = true;
  }
  $("prompt-count").textContent = `${count(Math.min(chars.length, maxPrompt))} / ${count(maxPrompt)}`;
}

// The words a model knows (the demo model's: bench/demo/scenes.vocabulary), under the prompt; none: no hint
function showWords(v) {
  $("words").hidden = !v;
  examples = v ? v.examples : [];
  if (!v) return;
  $("words-text").textContent = `The demo model knows these words and no others. Colors: ${v.colors.join(", ")}. ` +
    `Shapes: ${v.shapes.join(", ")}. Places: ${v.places.join(", ")}. Backgrounds: ${v.backgrounds.join(", ")}. ` +
    v.notes.map((n) => n[0].toUpperCase() + n.slice(1) + ".").join(" ");
}

function fillExample() {
  if (!examples.length) return;
  $("prompt").value = examples[nextExample % examples.length];
  nextExample += 1;
  $("prompt").dataset.touched = "1";
  checkPrompt();
}

// The view: the previews' canvas, or a final image in its place; the flip button shows the other one when
// there is one (a run with decoder none has no preview to go back to)
function showView(final) {
  finalShown = final;
  canvas.hidden = $("caption").hidden = final;
  $("final-box").hidden = !final;
  const both = Number(canvas.dataset.painted || 0) > 0 && $("final").dataset.loaded === "1";
  $("flip").hidden = !both;
  $("flip").textContent = final ? "last preview" : "final image";
}

// Each run starts clean: nothing of the run before stays on the panel (a decoder `none` run draws no preview)
function resetPanel(meta) {
  stopClip();
  shown = null;
  ctx.clearRect(0, 0, canvas.width, canvas.height);
  for (const k of ["step", "decoder", "clipFrames", "clipFrame"]) delete canvas.dataset[k];
  canvas.dataset.painted = "0";
  canvas.dataset.run = meta.run_id;
  $("caption").textContent = meta.decoder === "none" ? "no previews: decoder none" : "no preview yet";
  $("f-settings").textContent = settingsText(meta);
  $("f-step").textContent = `0 / ${meta.steps || "?"}`;
  for (const [id, text] of [["f-frames", "0"], ["f-dropped", "0"], ["f-bps", "–"], ["f-pps", "–"],
                            ["f-overhead", "–"], ["f-onpath", "–"], ["f-mem", "–"], ["f-busy", "–"]]) {
    $(id).textContent = text;
  }
  $("final").removeAttribute("src");
  delete $("final").dataset.loaded;
  showView(false);
}

// A run's final image (the route checks the id as the CSV route does); shown once it has loaded, where the
// previews were, the last preview one click away
function showFinal(id) {
  const img = $("final");
  img.onload = () => {
    img.dataset.loaded = "1";
    $("final-caption").textContent = `final image of run ${id} · ${img.naturalWidth}x${img.naturalHeight}`;
    showView(true);
  };
  img.onerror = () => { delete img.dataset.loaded; showView(false); };
  img.dataset.run = id;
  $("final-caption").textContent = `final image of run ${id}`;  // its size once it has loaded
  img.src = `/runs/${encodeURIComponent(id)}/final.png`;
}

// has_final: the server's word (a script's run has an image once the script called watch.save()); a run that
// ended before the server said so: a finished run of the server's own
function hasFinal(m) {
  if (m.damaged) return false;
  if (typeof m.has_final === "boolean") return m.has_final;
  return (m.status === "done" || m.status === "stopped") && m.task !== "script";
}

function beginRun(meta) {
  run = { meta, rows: new Map(), started: performance.now(), frames: 0, bytes: 0, dropped: 0, lastSeq: null,
          lastStep: 0, live: null };
  resetPanel(meta);
  showError("");
  $("f-status").textContent = `running ${meta.run_id}`;
  $("start").disabled = true;
  $("stop").disabled = false;
  $("measure").disabled = true;
  showLive(meta);
  chartDirty = true;
}

// The live preview controls from a run's settings (every "auto" when it has a budget)
function showLive(settings) {
  for (const k of LIVE) if (settings[k] !== undefined && k !== "budget") $(k).value = settings[k];
  if (settings.budget > 0) {
    $("every").value = "auto";
    $("budget").value = settings.budget;
    $("budget").dataset.set = "1";  // a run's own budget: the advice's too
  }
}

function endRun(msg) {
  $("f-status").textContent = `${msg.status} ${msg.run_id}` + (msg.error ? ` (${msg.error})` : "");
  $("start").disabled = measuring;  // a measure series starts its next run at once
  $("stop").disabled = true;
  $("measure").disabled = measuring;
  const { type, analysis, ...meta } = msg;
  if (analysis) newerFindings(analysis);
  addRuns([meta]);  // the end of a run carries its whole record: no need to ask the server again
  if (msg.analysis) showAnalysis(meta.run_id, msg.analysis);
  if (run && run.meta.run_id === meta.run_id) {
    const f = meta.figures;
    if (f) {
      $("f-overhead").textContent = overheadText(f);
      $("f-onpath").textContent = `${f.on_path_share_pct.toFixed(1)} % (${f.preview_on_path.toFixed(0)} of ${meta.totals.denoise_ms.toFixed(0)} ms)`;
      $("f-mem").textContent = previewMemText(run.rows) +
        (f.peak_mem_mb !== null ? `; run peak ${f.peak_mem_mb.toFixed(0)} MiB (${meta.totals.mem_source})` : "");
      $("f-busy").textContent = f.busy_pct === null ? "not read" : `${f.busy_pct.toFixed(1)} % (${meta.totals.busy_source})`;
    }
    if (hasFinal(meta)) showFinal(meta.run_id);
  }
}

// Python's f"{x:+.1f}": a difference of two server figures in the comparison
function num(x) {
  return `${x >= 0 ? "+" : ""}${x.toFixed(1)}`;
}

// A run's overhead as the server judged it (server/figures.py, the analysis the bench and watch.summary() use):
// its configuration's figure over all its pairs, with its verdict and what is missing, then this run's own pair.
// The page adds no figure and no verdict of its own.
function overheadText(f) {
  if (!f) return "–";
  if (f.role === "baseline") return "a no-preview baseline: runs with previews of these settings are measured against it";
  if (!f.steady) return `no figure: ${f.why}`;
  const config = f.finding && f.finding.overhead ? `${f.config}: ${f.finding.said}` :
    `${f.config}: no baseline ran right before a run of it, so its overhead is unknown; Measure runs the pairs`;
  return f.pair ? `${config} (this run ${f.pair.said} vs baseline ${f.pair.baseline})` : config;
}

// The latest preview's memory rise over its step and the most so far (the rows' mem_mb, MiB)
function previewMemText(rows) {
  const mine = [...rows.values()].filter((r) => r.frames > 0 && r.mem_mb !== undefined).sort((a, b) => a.step - b.step);
  if (!mine.length) return "no preview yet";
  const most = Math.max(...mine.map((r) => r.mem_mb));
  return `${mine[mine.length - 1].mem_mb.toFixed(1)} MiB latest, ${most.toFixed(1)} MiB most so far`;
}

function row(step) {
  if (!run.rows.has(step)) run.rows.set(step, { step });
  return run.rows.get(step);
}

function onStep(msg) {
  if (!run || msg.run_id !== run.meta.run_id) return;
  Object.assign(row(msg.step), msg);
  run.lastStep = Math.max(run.lastStep, msg.step);
  $("f-step").textContent = `${msg.step} / ${run.meta.steps || "?"}`;
  if (shown && shown.header.run_id === msg.run_id && shown.header.step === msg.step) showCaption();  // its decode size
  if (msg.event) $("f-status").textContent = `running ${run.meta.run_id} · step ${msg.step}: ${msg.event}`;
  let denoise = 0, preview = 0, n = 0;
  for (const r of run.rows.values()) {
    if (r.denoise_ms === undefined) continue;
    denoise += r.denoise_ms;
    preview += onPath(r);
    n += 1;
  }
  $("f-onpath").textContent = denoise ? `${(100 * preview / denoise).toFixed(1)} % (${preview.toFixed(0)} of ${denoise.toFixed(0)} ms)` : "–";
  // the overhead is the whole run's wall time against the baseline right before it: the server says it at the end
  $("f-overhead").textContent = "at the run's end: its wall time against the no-preview run right before it";
  $("f-mem").textContent = previewMemText(run.rows);
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
    // older than the newest drawn, or of a run before the one shown (a late frame must not come back after the
    // panel was reset): acknowledged, never drawn
    if (header.seq < drawnSeq || (run && header.run_id !== run.meta.run_id)) {  // a newer preview is on the canvas already: acknowledge this one, draw nothing
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
    shown = { header, count, kb: (buf.byteLength / 1024).toFixed(1) };
    showCaption();
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

// The caption of the preview on the canvas. Its step's row (which may come after the frame) says the size the
// decoder ran at: named when it differs from the size sent (decode_at full, or a cut that still resizes), per image
// in a batch (a grid sends them side by side)
function showCaption() {
  const h = shown.header;
  const r = run && run.meta.run_id === h.run_id ? run.rows.get(h.step) : undefined;
  const sent = `${h.width}x${h.height}`;
  const decoded = r && r.decode_width > 0 ? `${r.decode_width}x${r.decode_height}` : sent;
  const size = decoded === sent ? sent : `decoded ${decoded}${r.batch > 1 ? " per image" : ""}, sent ${sent}`;
  $("caption").textContent = `step ${h.step} · ${h.decoder} · ${size}${shown.count} · ${h.format} · ${shown.kb} KB`;
}

function chartWidth() {
  return Math.max(240, Math.min(1100, $("chart-box").clientWidth));
}

function makeChart() {
  const series = [{ label: "step" }];
  // Stacked: each series is the cumulative sum up to its stage, drawn from the top stage down so each smaller
  // sum paints over the larger one and every band shows one stage's share of the step.
  DRAW.forEach((i) => series.push({ label: STAGES[i].replace("_ms", ""), stroke: COLORS[i], fill: COLORS[i], width: 1,
                                    value: (u, v, si, idx) => rawValue(STAGES[DRAW[si - 1]], idx) }));
  series.push({ label: RENDER_LABEL, stroke: "#7a5c00", width: 2, dash: [6, 4], points: { show: true },
                value: (u, v, si, idx) => rawValue("render_ms", idx) });
  chart = new uPlot({ width: chartWidth(), height: 260, series,
                      scales: { x: { time: false }, y: { range: (u, lo, hi) => [0, Math.max(1, hi)] } },
                      axes: [{ label: "step", incrs: STEP_INCRS, values: (u, splits) => splits.map(String) },
                             { label: "ms" }] },
                    [[], ...STAGES.map(() => []), []], $("chart"));
}

let rawRows = [];
function rawValue(key, idx) {
  const r = rawRows[idx];
  if (!r) return "–";
  const v = r[key];
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
    const render = rawRows.map((r) => (r.render_ms === undefined ? null : r.render_ms));
    chart.setData([xs, ...DRAW.map((i) => cols[i]), render]);
  }
  requestAnimationFrame(redraw);
}

// The preview time that ran on the denoising path: the figure the core computed (preview/records.py
// on_path_ms), carried by every step row and run total; the page never recomputes it.
function onPath(r) {
  return r.on_path_ms || 0;
}

// The advice, the NOISY line and the baselines of the latest run's settings, as the server's analysis says them
// (GET /analysis: the bench's rules, server-side); the budget the user typed goes with the request.
let analysis = null;  // { run_id, data }: the analysis shown
const DEFAULT_BUDGET_PCT = 5;  // the server's default, named in the hint before any run

function budgetPct() {
  const b = Number($("budget").value);
  return $("budget").dataset.set && b > 0 ? b : null;
}

async function fetchAnalysis(rid) {
  const b = budgetPct();
  const res = await fetch(`/analysis?run=${encodeURIComponent(rid)}` + (b ? `&budget=${b}` : ""));
  if (res.ok) showAnalysis(rid, await res.json(), true);
}

// A done message carries its settings' analysis at the default budget (or the run's own); a budget the user set
// asks the server again
function showAnalysis(rid, data, asked = false) {
  if (!asked && budgetPct() && data.advice.budget !== budgetPct()) { fetchAnalysis(rid); return; }
  analysis = { run_id: rid, data };
  newerFindings(data);
  renderRuns();
  showAdvice();
}

function showAdvice() {
  const noisy = $("noisy");
  if (!analysis) {
    $("advice").textContent = "no advice yet: no run in the list has ended";
    $("baselines").textContent = "";
    noisy.hidden = true;
    return;
  }
  const d = analysis.data;
  noisy.hidden = !(d.noise && d.noise.noisy);
  noisy.textContent = noisy.hidden ? "" : d.noise_line;
  $("baselines").textContent = `the settings of run ${analysis.run_id}: ${d.baselines} steady no-preview baseline` +
    `${d.baselines === 1 ? "" : "s"}` + (!d.noise ? "; fewer than two, so their noise is unknown: Measure runs more" :
                                         noisy.hidden ? `; ${d.noise_line}` : "");
  $("advice").textContent = d.advice.lines.length ? d.advice.lines.join("\n") :
    "no advice yet: no run with previews of these settings has a baseline right before it; Measure runs the pairs";
}

// The measure series' progress, from the server (measure messages; hello's for a tab that joins during one)
let measuring = false;
function showMeasure(m) {
  measuring = !!m && m.state === "running";
  $("measure-line").hidden = !m;
  $("measure-line").textContent = m ? m.line : "";
  const idle = $("stop").disabled;  // no run going: the series' end may come after its last run's
  $("measure").disabled = measuring || !idle;
  $("start").disabled = measuring || !idle;
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

const picked = [];
const runsById = new Map();  // every run this tab knows, by id; ids sort by time

function showCompare() {
  const box = $("compare");
  box.hidden = picked.length !== 2;
  if (box.hidden) return;
  const [a, b] = picked.map((id) => runsById.get(id));
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
    for (const [c, tip] of [[label, ""], [a[key] || "", title ? a[title] : ""], [b[key] || "", title ? b[title] : ""],
                            [(a[key] || "") === (b[key] || "") ? "same" : "differs"]]) {
      const td = document.createElement("td"); td.textContent = c; if (tip) td.title = tip; tr.appendChild(td);
    }
    t.appendChild(tr);
  }
  const shown = (v, kind, key, f) => (v === null || v === undefined || Number.isNaN(v) ? "–" :
    key === "overhead_pct" ? overheadText(f) : key === "previews" ? String(v) : kind === "points" ? num(v) :
    Number(v).toFixed(2));
  for (const [label, key, kind] of COMPARED) {
    const va = fa ? figureOf(fa, key) : null, vb = fb ? figureOf(fb, key) : null;
    const known = va !== null && vb !== null && va !== undefined && vb !== undefined;
    // two overheads: each with its own verdict above; their difference is no finding the page can judge
    const vs = !known ? "–" : key === "overhead_pct" ? "each with its verdict" :
               kind === "points" ? `${num(vb - va)} points` : va ? `×${(vb / va).toFixed(3)}` : "–";
    const tr = document.createElement("tr");
    tr.dataset.figure = key;
    for (const c of [label, shown(va, kind, key, fa), shown(vb, kind, key, fb), vs]) {
      const td = document.createElement("td"); td.textContent = c; tr.appendChild(td);
    }
    t.appendChild(tr);
  }
}

// A newer analysis of one group of settings: the listed runs of its configurations take its findings (the
// server's own, newer than the ones their `done` or the listing carried)
function newerFindings(a) {
  const byName = new Map(a.findings.map((f) => [f.name, f]));
  for (const m of runsById.values()) {
    const f = m.figures;
    if (f && f.group === a.group && f.finding && byName.has(f.config)) f.finding = byName.get(f.config);
  }
}

// A comparison row's figure from a run's server figures: the overhead is its own pair's (null without one)
function figureOf(f, key) {
  return key === "overhead_pct" ? (f.pair ? f.pair.overhead_pct : null) : f[key];
}

async function fetchRuns(query) {
  const res = await fetch(`/runs?${query}`);
  return res.ok ? res.json() : [];
}

function addRuns(list) {
  for (const m of list) runsById.set(m.run_id, m);
  renderRuns();
  // before any run ends in this tab: the advice of the newest ended run's settings
  const newest = [...runsById.values()].filter((m) => m.figures).sort((a, b) => (a.run_id < b.run_id ? 1 : -1))[0];
  if (!analysis && newest) fetchAnalysis(newest.run_id);
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
    const f = m.status === "damaged" ? null : (m.figures || null);
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
    const size = !m.width ? "" : `${m.width}x${m.height}`;
    const task = (m.task === "img2img" ? `img2img ${m.strength} from ${m.init}` : (m.task || "txt2img")) +
                 (m.batch > 1 ? ` ×${m.batch}` : "");
    const steps = m.steps || (m.totals ? m.totals.steps_run : "");
    const guidance = m.guidance === undefined || m.guidance === null ? (m.task === "script" ? "not seen" : "") : m.guidance;
    const role = !f ? "" : f.role + (m.purpose ? ` (${m.purpose === "baseline" ? "measure" : "measured"})` : "");
    const pair = f && f.pair ? f.pair.said : "";
    const config = !f || f.role !== "preview" ? "" : !f.steady ? `no figure: ${f.why}` :
      f.finding && f.finding.overhead ? f.finding.said : "no baseline right before a run of it: Measure runs the pairs";
    const cells = [m.run_id, m.model, status, role, m.decoder, every, m.mode, m.changes || "", task, steps, size,
                   guidance, f ? f.wall_s.toFixed(2) : "", pair, config, f ? f.previews : "",
                   f && f.peak_mem_mb !== null ? f.peak_mem_mb.toFixed(0) : ""];
    // what the list leaves out is in the cells' hover text and in the comparison (tick two runs)
    const titles = { 1: m.model_note || "", 13: f && f.pair ? `against baseline ${f.pair.baseline}` : "",
                     14: f && f.finding ? `${f.finding.runs} steady runs; pairs (run vs its baseline): ` +
                       f.finding.pairs.map((p) => p.join(" vs ")).join(", ") : "",
                     16: m.totals ? `${m.totals.mem_source}` + (f && f.mem_over_mb !== null ?
                       `; ${f.mem_over_mb >= 0 ? "+" : ""}${f.mem_over_mb.toFixed(0)} MiB over its baseline` : "") : "" };
    cells.forEach((c, i) => {
      const td = document.createElement("td");
      td.textContent = c === undefined || c === null ? "" : c;
      if (i === 14) td.className = "said";
      if (titles[i]) td.title = titles[i];
      tr.appendChild(td);
    });
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
    const image = document.createElement("td");
    if (hasFinal(m)) {  // opens here, beside the preview; a middle click opens the PNG itself
      const a = document.createElement("a");
      a.href = `/runs/${encodeURIComponent(m.run_id)}/final.png`;
      a.textContent = "image";
      a.className = "run-image";
      a.addEventListener("click", (ev) => { ev.preventDefault(); showFinal(m.run_id); });
      image.appendChild(a);
    }
    tr.appendChild(image);
    const use = document.createElement("td");
    if (starts && hasFinal(m)) {
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
// Measure: the current settings' no-preview baselines, paired with runs of the current preview settings, until
// the overhead holds at the 95 % level (server/measure.py); the controls keep what the user chose
$("measure").addEventListener("click", () => {
  const msg = { type: "measure", ...previewFields(LIVE) };
  for (const k of RUN_FIELDS) msg[k] = value(k);
  msg.init = init;
  send(msg);
});
$("clear-init").addEventListener("click", () => setInit(null));
$("prompt").addEventListener("input", checkPrompt);
$("example").addEventListener("click", fillExample);
$("flip").addEventListener("click", () => showView(!finalShown));
$("stop").addEventListener("click", () => send({ type: "stop" }));
for (const k of LIVE) {
  $(k).addEventListener("change", () => {
    if (run && $("stop").disabled === false) send({ type: "set", ...previewFields([k]) });
  });
}
for (const k of RUN_FIELDS) $(k).addEventListener("input", () => { $(k).dataset.touched = "1"; });
$("budget").addEventListener("input", () => {
  $("budget").dataset.set = "1";
  if (analysis && budgetPct()) fetchAnalysis(analysis.run_id);
});
for (const k of [...RUN_FIELDS, ...LIVE]) $(k).addEventListener("input", () => inputEdited(k));
$("older").addEventListener("click", loadOlder);
window.addEventListener("resize", () => { if (chart) chart.setSize({ width: chartWidth(), height: 260 }); });

makeChart();
checkPrompt();
const firstPage = loadOlder();
connect();
requestAnimationFrame(redraw);
