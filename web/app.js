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
      firstPage.then(fetchNew);  // after a reconnect: only the runs that ended while this tab was away
      break;
    }
    case "run": beginRun(msg); break;
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

function hasFinal(m) {
  return (m.status === "done" || m.status === "stopped") && !m.damaged && m.task !== "script";
}

function beginRun(meta) {
  run = { meta, rows: new Map(), started: performance.now(), frames: 0, bytes: 0, dropped: 0, lastSeq: null,
          lastStep: 0, live: null };
  resetPanel(meta);
  showError("");
  $("f-status").textContent = `running ${meta.run_id}`;
  $("start").disabled = true;
  $("stop").disabled = false;
  showLive(meta);
  showAdvice();
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
  $("start").disabled = false;
  $("stop").disabled = true;
  const { type, ...meta } = msg;
  addRuns([meta]);  // the end of a run carries its whole record: no need to ask the server again
  if (run && run.meta.run_id === meta.run_id) {
    const f = figuresOf(meta);
    if (f) {
      $("f-overhead").textContent = overheadText(f.overhead, f.references, "");
      $("f-onpath").textContent = `${f.on_path_share_pct.toFixed(1)} % (${f.preview_on_path.toFixed(0)} of ${meta.totals.denoise_ms.toFixed(0)} ms)`;
      $("f-mem").textContent = previewMemText(run.rows) +
        (f.peak_mem_mb > 0 ? `; run peak ${f.peak_mem_mb.toFixed(0)} MiB (${meta.totals.mem_source})` : "");
      $("f-busy").textContent = f.busy_pct === null ? "not read" : `${f.busy_pct.toFixed(1)} % (${meta.totals.busy_source})`;
    }
    if (hasFinal(meta)) showFinal(meta.run_id);
  }
}

// Python's f"{x:+.1f}", as bench/noise.py prints its figures
function num(x) {
  return `${x >= 0 ? "+" : ""}${x.toFixed(1)}`;
}

function signed(x) {
  return `${num(x)} %`;
}

// The interval of a median, ported from bench/noise.py (coverage_pct and estimate), which states the rule: the
// order statistics [x(k), x(n+1-k)] of the sorted values hold the true median with a probability that the
// binomial distribution alone gives, whatever the noise; k is the largest that keeps it at 95 % or more. Under
// six values no interval reaches 95 %: it is their whole range at its own level (2: 50 %, 3: 75 %). One value
// has no interval.
const LEVEL_PCT = 95;

// 1 - 2 P(Binomial(n, 1/2) < k), in percent; the terms summed from their logs, so 2**n never overflows
function coveragePct(n, k) {
  let sum = 0, logTerm = -n * Math.LN2;  // log of C(n, i) / 2**n, from i = 0
  for (let i = 0; i < k; i++) {
    sum += Math.exp(logTerm);
    logTerm += Math.log((n - i) / (i + 1));
  }
  return 100 * (1 - 2 * sum);
}

// The median of xs and its interval: { value, n, lo, hi, level } (lo and hi null under two values)
function estimate(xs) {
  const s = [...xs].sort((a, b) => a - b), n = s.length;
  if (n < 2) return { value: s[0], n: 1, lo: null, hi: null, level: 0 };
  let k = 1;
  while (k + 1 <= Math.floor(n / 2) && coveragePct(n, k + 1) >= LEVEL_PCT) k += 1;
  const mid = Math.floor(n / 2);
  const median = n % 2 ? s[mid] : (s[mid - 1] + s[mid]) / 2;
  return { value: median, n, lo: s[k - 1], hi: s[n - k], level: coveragePct(n, k) };
}

// "[+8.1, +16.0]", the level added under 95 % ("[+8.1, +16.0] (75 %)"), as noise.py's Estimate.signed
function intervalText(e) {
  if (e.lo === null) return "";
  return `[${num(e.lo)}, ${num(e.hi)}]` + (e.level >= LEVEL_PCT ? "" : ` (${e.level.toFixed(0)} %)`);
}

// The interval holds 0: the figure cannot be told apart from no overhead at all
function withinNoise(e) {
  return e.lo !== null && e.lo <= 0 && 0 <= e.hi;
}

// A run's overhead against its references (ids), in words; note: what the figure covers ("the steps so far")
function overheadText(e, refs, note) {
  if (!e) return "no reference: run these settings once with decoder none";
  const tail = note ? `; ${note}` : "";
  if (e.lo === null) return `${signed(e.value)} vs run ${refs[0]}: one baseline, noise unknown${tail}`;
  return `${signed(e.value)} ${intervalText(e)} vs ${refs.length} no-preview runs` +
         (withinNoise(e) ? ", within noise" : "") + tail;
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
  // so far: the steps' wall time on the denoising path against each reference's no-preview step, one overhead
  // per reference; their median is the overhead against the median reference step (exactly, for an odd count).
  // The whole run's figure (its wall time) replaces it at the end
  const refs = referencesFor(run.meta);
  const overheads = refs.map((r) => 100 * ((denoise + preview) / (n * (r.totals.denoise_ms + onPath(r.totals)) /
                                                                  r.totals.steps_run) - 1));
  run.live = n && refs.length ? { overhead: estimate(overheads), references: refs.map((r) => r.run_id) } : null;
  $("f-overhead").textContent = !refs.length ? overheadText(null, [], "") : !run.live ? "–" :
    overheadText(run.live.overhead, run.live.references, "the steps so far");
  $("f-mem").textContent = previewMemText(run.rows);
  showAdvice();
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

// A run's time outside its denoising loop, ms: the same for any preview setting, so not scaled by steps
function fixedMs(t) {
  return (t.text_encode_ms || 0) + (t.final_decode_ms || 0) + (t.final_encode_ms || 0) + (t.write_ms || 0);
}

// A no-preview run that can be another's reference: decoder none from start to end, whole, not the first run
// after the model loaded (its warm-up is no steady state)
function isReference(r) {
  const t = r.totals;
  return !!t && r.decoder === "none" && t.previews === 0 && (r.status === "done" || r.status === "stopped") &&
         !r.damaged && !t.first_run && t.steps_run > 0 && t.wall_s > 0;
}

function sameSettings(a, b) {
  return COST_KEYS.every((k) => (a[k] ?? null) === (b[k] ?? null));
}

// The references of run m: every no-preview run of the same settings in the list but m itself, oldest first.
// All of them, not the nearest one: one run on a loaded machine can be far off, and only several show how far.
function referencesFor(m) {
  return [...runsById.values()].filter((r) => r.run_id !== m.run_id && isReference(r) && sameSettings(r, m))
    .sort((a, b) => (a.run_id < b.run_id ? -1 : 1));
}

// One run's figures from its totals: what the page's table and comparison show. Per-step figures divide by
// the steps that ran (fewer for img2img, or a stopped run). The overhead has the bench's meaning: the run's
// wall time against a no-preview run's, the reference's loop scaled to the steps this run did; one per
// reference, their median and its interval (estimate) the figure. Memory over none: the run's peak minus the
// median peak of the references that read memory the same way.
function figuresOf(m) {
  const t = m.totals;
  if (!t) return null;
  const steps = Math.max(1, t.steps_run || m.steps);
  const onPathMs = onPath(t);
  const refs = referencesFor(m);
  const overheads = refs.map((r) => {
    const rt = r.totals;
    const expected = fixedMs(rt) + (rt.wall_s * 1e3 - fixedMs(rt)) / rt.steps_run * steps;  // no previews, ms
    return 100 * (t.wall_s * 1e3 / expected - 1);
  });
  const overhead = overheads.length ? estimate(overheads) : null;
  const peak = t.mem_source && t.peak_mem_mb > 0 ? t.peak_mem_mb : null;
  const refPeaks = refs.filter((r) => r.totals.mem_source === t.mem_source && r.totals.peak_mem_mb > 0)
    .map((r) => r.totals.peak_mem_mb);
  return { wall_s: t.wall_s, wall_per_step: t.wall_s * 1e3 / steps, denoise_per_step: t.denoise_ms / steps,
           preview_on_path: onPathMs, on_path_share_pct: t.denoise_ms ? 100 * onPathMs / t.denoise_ms : 0,
           overhead, overhead_pct: overhead ? overhead.value : null, references: refs.map((r) => r.run_id),
           previews: t.previews, kb_per_frame: t.previews ? t.bytes / t.previews / 1024 : 0, decode_ms: t.decode_ms,
           encode_ms: t.encode_ms, peak_mem_mb: peak,
           mem_over_mb: peak !== null && refPeaks.length ? peak - estimate(refPeaks).value : null,
           busy_pct: t.busy_pct ?? null };
}

// What to set, from the runs in the list (bench/advice.py's rules, in its words where they fit). The settings
// are the running run's, else the latest run's; among the runs of those settings (COST_KEYS) with previews, a
// configuration (decoder, every, preview_max, mode, decode_at) is measured by its latest steady run's figure,
// the one the run list shows (the running run's by its live one). A configuration fits when its overhead
// interval's top is at most the budget (one baseline: no interval, never fits); the best fitting is the most
// frequent preview, then the largest decoder, then the largest preview. Every number it names is on the page:
// the overhead figures (run list, This run), the budget (its input, else the default) and the interval it sets.
const DEFAULT_BUDGET_PCT = 5;  // bench/advice.py's default
const RANK = { vae: 3, taesd: 2, latent2rgb: 1 };              // how large a decoder is
const CHEAPER = { vae: "taesd", taesd: "latent2rgb" };          // preview/decoders.py's chain down

function budgetPct() {
  const b = Number($("budget").value);
  return $("budget").dataset.set && b > 0 ? b : DEFAULT_BUDGET_PCT;
}

// The next cheaper decoder this server offers (its hello: the decoders, and whether TAESD weights are there)
function cheaperDecoder(d) {
  let next = CHEAPER[d];
  while (next && offered && ((offered.decoders && !offered.decoders.includes(next)) ||
                             (next === "taesd" && !offered.taesd))) next = CHEAPER[next];
  return next || null;
}

function configKey(m) {
  return [m.decoder, m.budget > 0 ? `auto${m.budget}` : m.every, m.preview_max || 0, m.mode, m.decode_at || ""].join("|");
}

function configText(m) {
  return `${m.decoder} ` + (m.budget > 0 ? `auto ${m.budget} %` : `every ${m.every}`) +
         (m.preview_max > 0 ? ` max ${m.preview_max} px` : "") + ` ${m.mode}` +
         (m.decode_at && m.decode_at !== "preview" ? ` decode_at ${m.decode_at}` : "");
}

function fits(o, budget) {
  return o.overhead.hi !== null && o.overhead.hi <= budget;
}

// "+12.3 % [+8.1, +16.0]" with its level, as the overhead figures print it
function costText(e) {
  return e.lo === null ? signed(e.value) : `${signed(e.value)} ${intervalText(e)}`;
}

function adviceText() {
  const running = run && !$("stop").disabled ? run.meta : null;
  const latest = [...runsById.values()].filter((r) => r.totals && !r.damaged)
    .sort((a, b) => (a.run_id < b.run_id ? 1 : -1))[0];
  const cur = running || latest;
  if (!cur) return "no advice yet: no run in the list";
  if (!referencesFor(cur).length && !isReference(cur)) return "no advice yet: run these settings once with decoder none";
  const options = new Map();  // configuration -> its latest steady run's { meta, overhead, run_id }
  for (const r of [...runsById.values()].sort((a, b) => (a.run_id < b.run_id ? -1 : 1))) {
    if (r.decoder === "none" || !r.totals || !r.totals.previews || r.totals.first_run || r.damaged ||
        !(r.status === "done" || r.status === "stopped") || !sameSettings(r, cur)) continue;
    const f = figuresOf(r);
    if (f && f.overhead) options.set(configKey(r), { meta: r, overhead: f.overhead, run_id: r.run_id });
  }
  if (running && running.decoder !== "none" && run.live) {
    options.set(configKey(running), { meta: running, overhead: run.live.overhead, run_id: running.run_id, live: true });
  }
  // the configuration asked about: the running run's or the latest run's; after a no-preview run, the latest
  // configuration measured
  let c = cur.decoder !== "none" ? options.get(configKey(cur)) : null;
  if (!c && cur.decoder === "none" && options.size) {
    c = [...options.values()].sort((a, b) => (a.run_id < b.run_id ? 1 : -1))[0];
  }
  if (!c) return "no advice yet: no run with previews of these settings has finished";
  const budget = budgetPct();
  const e = c.overhead;
  let out = `${configText(c.meta)} (run ${c.run_id}${c.live ? ", the steps so far" : ""}): ` +
            `at this rate previews cost ${costText(e)}`;
  if (e.lo === null) out += ": one baseline, noise unknown";
  else if (withinNoise(e)) out += "; within noise: these runs cannot tell it from none";
  if (fits(c, budget)) return `${out}, under ${budget} %`;
  const fit = [...options.values()].filter((o) => o.meta.budget <= 0 && fits(o, budget));
  fit.sort((a, b) => a.meta.every - b.meta.every || (RANK[b.meta.decoder] || 0) - (RANK[a.meta.decoder] || 0) ||
                     (b.meta.preview_max || 0) - (a.meta.preview_max || 0));
  if (fit.length) {
    const best = fit[0];
    return `${out}; to stay under ${budget} %: ${configText(best.meta)} (run ${best.run_id}: ${costText(best.overhead)})`;
  }
  // nothing measured fits: what would, if the cost scales with the previews made
  const ideas = [];
  const every = c.meta.budget > 0 ? 0 : c.meta.every;
  const wider = e.value > 0 && every > 0 ? Math.ceil(every * e.value / budget - 1e-9) : 0;
  if (wider > every) ideas.push(`about every ${wider}`);
  const down = cheaperDecoder(c.meta.decoder);
  if (down) ideas.push(down);
  return `${out}; to stay under ${budget} %: ${ideas.length ? ideas.join(", or ") : "fewer previews"}`;
}

function showAdvice() {
  $("advice").textContent = adviceText();
}

// The comparison's rows, named in words: [label, figure, kind]; a percentage compares by its difference in
// points (a ratio of two percentages means nothing), a time or a count by B / A
const COMPARED = [
  ["wall time (s)", "wall_s", "ratio"],
  ["wall ms per step done", "wall_per_step", "ratio"],
  ["denoise ms per step done", "denoise_per_step", "ratio"],
  ["preview ms on the denoising path", "preview_on_path", "ratio"],
  ["on-path share (%)", "on_path_share_pct", "points"],
  ["overhead, wall time vs the no-preview runs (%)", "overhead_pct", "points"],
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
  const fa = figuresOf(a), fb = figuresOf(b);
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
    key === "overhead_pct" ? num(v) + (f.overhead.lo === null ? " (one baseline)" : ` ${intervalText(f.overhead)}`) :
    key === "previews" ? String(v) : kind === "points" ? num(v) : Number(v).toFixed(2));
  // two overheads differ within noise when either median lies inside the other's interval
  const inside = (e, x) => e.lo !== null && e.lo <= x && x <= e.hi;
  for (const [label, key, kind] of COMPARED) {
    const va = fa ? fa[key] : null, vb = fb ? fb[key] : null;
    const known = va !== null && vb !== null && va !== undefined && vb !== undefined;
    const noise = key === "overhead_pct" && known && (inside(fa.overhead, vb) || inside(fb.overhead, va));
    const vs = !known ? "–" : kind === "points" ? `${num(vb - va)} points${noise ? ", within noise" : ""}` :
               va ? `×${(vb / va).toFixed(3)}` : "–";
    const tr = document.createElement("tr");
    tr.dataset.figure = key;
    for (const c of [label, shown(va, kind, key, fa), shown(vb, kind, key, fb), vs]) {
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
  showAdvice();
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
    const size = !m.width ? "" : `${m.width}x${m.height}`;
    const task = (m.task === "img2img" ? `img2img ${m.strength} from ${m.init}` : (m.task || "txt2img")) +
                 (m.batch > 1 ? ` ×${m.batch}` : "");
    const steps = m.steps || (m.totals ? m.totals.steps_run : "");
    const guidance = m.guidance === undefined || m.guidance === null ? (m.task === "script" ? "not seen" : "") : m.guidance;
    const e = f ? f.overhead : null;
    const interval = !e ? "" : e.lo === null ? "one baseline, noise unknown" :
                     intervalText(e) + (withinNoise(e) ? ", within noise" : "");
    const refs = f ? f.references : [];
    const cells = [m.run_id, m.model, status, m.decoder, every, m.changes || "", m.mode, task, steps, size, guidance,
                   f ? f.wall_s.toFixed(2) : "", f ? f.denoise_per_step.toFixed(1) : "",
                   f ? f.preview_on_path.toFixed(0) : "", f ? f.on_path_share_pct.toFixed(1) : "",
                   e ? num(e.value) : "", interval,
                   refs.length === 1 ? refs[0] : refs.length ? `${refs.length} no-preview runs` : "",
                   f ? f.previews : "", f ? f.kb_per_frame.toFixed(1) : "",
                   f && f.peak_mem_mb !== null ? f.peak_mem_mb.toFixed(0) : "",
                   f && f.mem_over_mb !== null ? `${f.mem_over_mb >= 0 ? "+" : ""}${f.mem_over_mb.toFixed(0)}` : "",
                   f && f.busy_pct !== null ? f.busy_pct.toFixed(1) : ""];
    const titles = { 1: m.model_note || "", 17: refs.join(" "), 20: m.totals ? m.totals.mem_source : "",
                     22: m.totals ? m.totals.busy_source : "" };
    cells.forEach((c, i) => {
      const td = document.createElement("td");
      td.textContent = c === undefined || c === null ? "" : c;
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
$("budget").addEventListener("input", () => { $("budget").dataset.set = "1"; showAdvice(); });
for (const k of [...RUN_FIELDS, ...LIVE]) $(k).addEventListener("input", () => inputEdited(k));
$("older").addEventListener("click", loadOlder);
window.addEventListener("resize", () => { if (chart) chart.setSize({ width: chartWidth(), height: 260 }); });

makeChart();
checkPrompt();
const firstPage = loadOlder();
connect();
requestAnimationFrame(redraw);
