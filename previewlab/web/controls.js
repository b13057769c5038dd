// The form: run settings, the live preview controls, the buttons, the error banner and the prompt's hints.
import { $, state } from "./state.js";

export const LIVE = ["decoder", "every", "preview_max", "decode_at", "encoder", "quality", "mode", "budget", "target",
                     "batch_preview", "frames"];
export const RUN_FIELDS = ["prompt", "steps", "width", "height", "seed", "guidance", "batch", "strength", "num_frames",
                           "fps"];
const NUMERIC = new Set(["steps", "width", "height", "seed", "guidance", "every", "preview_max", "quality", "budget",
                         "batch", "strength", "num_frames", "fps"]);
const CLIP_COUNTS = [4, 8, 16];  // "N frames spread evenly" choices the page offers beside first, middle and all

export function showError(text, field = null) {
  const e = $("error");
  e.textContent = text;
  e.hidden = !text;
  state.errorField = text ? field : null;
}

// A refused message names its field first ("width=100: ...", "budget: ..."); a field of this page's form, or ""
export function namedField(text) {
  const m = /^([a-z_]+)[=:]/.exec(text || "");
  return m && $(m[1]) ? m[1] : "";
}

// The banner of a refused input goes once that input holds a value its own constraints accept (or, when the
// error named no field, once any input is edited)
function inputEdited(id) {
  if (state.errorField === null || (state.errorField && state.errorField !== id)) return;
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
export function previewFields(changed) {
  const out = {};
  for (const k of changed) {
    if (k === "budget" || k === "every") {
      out.every = value("every");
      if (out.every === "auto") out.budget = value("budget");
    } else out[k] = value(k);
  }
  return out;
}

// The fidelity pass's message: the run settings and the preview's (no img2img input: the pass runs text to
// image) and the seeds asked
export function fidelityMessage() {
  const msg = runMessage("fidelity");
  delete msg.init;
  msg.seeds = Number($("fidelity-seeds").value) || 3;
  return msg;
}

export const RANDOM_SEED = -1;  // the Seed field's "a new random seed for each run"
const SEED_SPAN = 2 ** 32;      // random seeds are drawn from 0 to 2**32 - 1, as other tools draw them

export function randomSeed() {
  return crypto.getRandomValues(new Uint32Array(1))[0] % SEED_SPAN;
}

// A start's or a measure series' message: the run settings, the live ones and the img2img input. Seed -1 goes as
// a seed drawn here: the run records the seed it used, and This run shows it
export function runMessage(type) {
  const msg = { type, ...previewFields(LIVE) };
  for (const k of RUN_FIELDS) msg[k] = value(k);
  if (msg.seed === RANDOM_SEED) msg.seed = randomSeed();
  msg.init = state.init;
  return msg;
}

// The buttons from the state: Start and Measure while nothing runs, Stop while a run or a measure series goes
// (between two of a series' runs too: Stop then ends the series, and the run it was starting)
export function showButtons() {
  const busy = state.running || state.measuring || state.judging;
  $("start").disabled = busy;
  $("measure").disabled = busy;
  $("fidelity").disabled = busy;  // the pass runs between runs, never beside one (the server refuses it too)
  $("stop").disabled = !busy;
}

// A script's page (serve(watch)): no Start and no run settings, which the script decides; the live preview
// controls and Stop work as on the server's own page
function showStarts() {
  $("run-fields").hidden = !state.starts;
  $("start").hidden = $("measure").hidden = !state.starts;
  $("fidelity-row").hidden = !state.starts;
  $("script-note").hidden = state.starts;
  for (const el of document.querySelectorAll(".server-only")) el.hidden = !state.starts;
}

// "1,995 / 2,000"
function count(n) {
  return n.toLocaleString("en-US");
}

// The prompt's length as the server counts it (code points), against its limit. Over it, the prompt is cut here,
// with a word why (the textarea's own maxlength cut a paste with none); the word goes once it is under again.
export function checkPrompt() {
  const el = $("prompt");
  const chars = Array.from(el.value);
  const most = state.maxPrompt;
  if (chars.length > most) {
    el.value = chars.slice(0, most).join("");
    $("prompt-cut").textContent = `your prompt was cut to ${count(most)} characters: the server's limit`;
    $("prompt-cut").hidden = false;
  } else if (chars.length < most) {
    $("prompt-cut").hidden = true;
  }
  $("prompt-count").textContent = `${count(Math.min(chars.length, most))} / ${count(most)}`;
  const unknown = state.words ? unknownWords(el.value).map((w) => `“${w}”`) : [];
  const them = unknown.length > 1 ? "them" : "it";
  $("words-ignored").textContent = unknown.length ? `The demo model does not know ${unknown.join(", ")} and ignores ${them}.` : "";
  $("words-ignored").hidden = !unknown.length;
}

// A prompt in the pieces the demo model's tokenizer reads (its tokenizer.json: NFC, spaces folded, lower case,
// then letters, one digit, or a run of other marks). A piece none of its captions held is one it never learnt:
// spelt out letter by letter, or (an emoji, a ".") read as its end-of-text token, so the picture ignores it.
const PIECES = /'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+/gu;

function unknownWords(prompt) {
  const pieces = prompt.normalize("NFC").replace(/\s+/g, " ").toLowerCase().match(PIECES) || [];
  return [...new Set(pieces)].filter((w) => !state.words.has(w));
}

// The words a model knows (the demo model's: bench/demo/scenes.vocabulary), under the prompt; none: no hint
function showWords(v) {
  $("words").hidden = !v;
  state.examples = v ? v.examples : [];
  state.words = v ? new Set(v.words) : null;
  if (!v) return;
  $("words-text").textContent = `The demo model knows these words and no others. Colors: ${v.colors.join(", ")}. ` +
    `Shapes: ${v.shapes.join(", ")}. Places: ${v.places.join(", ")}. Backgrounds: ${v.backgrounds.join(", ")}. ` +
    v.notes.map((n) => n[0].toUpperCase() + n.slice(1) + ".").join(" ");
}

function fillExample() {
  if (!state.examples.length) return;
  $("prompt").value = state.examples[state.nextExample % state.examples.length];
  state.nextExample += 1;
  $("prompt").dataset.touched = "1";
  checkPrompt();
}

// The live preview controls from a run's settings (every "auto" when it has a budget)
export function showLive(settings) {
  for (const k of LIVE) if (settings[k] !== undefined && k !== "budget") $(k).value = settings[k];
  if (settings.budget > 0) {
    $("every").value = "auto";
    $("budget").value = settings.budget;
    $("budget").dataset.set = "1";  // a run's own budget: the advice's too
  }
}

// The run settings of a run this tab did not start (a tab opened mid-run or mid-series): the form shows what is
// running, not the server's defaults; a field the user has edited keeps what they typed
export function showRunSettings(meta) {
  for (const k of RUN_FIELDS) {
    if (meta[k] !== undefined && meta[k] !== null && !$(k).dataset.touched) $(k).value = meta[k];
  }
}

// img2img: a past run's final image is the input; the server reads it by id (no upload, no path from here)
export function setInit(id) {
  state.init = id;
  $("init-label").textContent = id ? `the final image of run ${id} (image to image)` : "none (text to image)";
  $("clear-init").hidden = !id;
}

// What the server's hello offers: the model's label, the registries' choices, the run defaults and limits
export function applyHello(msg) {
  state.starts = msg.starts !== false;
  showStarts();
  $("model").textContent = `${msg.model} · ${msg.device} ${msg.dtype}`;
  $("model").title = msg.space;  // the latent space as the server read it from the VAE
  // the model's label: synthetic (random weights) or its note (the demo model: what its pictures and costs are)
  const banner = $("banner");
  banner.dataset.synthetic ??= banner.textContent;  // the page's own text, for synthetic models
  banner.textContent = msg.note ? msg.note[0].toUpperCase() + msg.note.slice(1) + "." : banner.dataset.synthetic;
  banner.hidden = !(msg.synthetic || msg.note);
  // the choices come from the server's registries (decoders, encoders, modes, targets, where decoders stop)
  for (const [k, names] of Object.entries(msg.choices || {})) {
    const sel = $(k);
    const all = k === "frames" ? [...names, ...CLIP_COUNTS.filter((n) => n <= msg.max_preview_frames).map(String)]
      : names;
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
  if (msg.max_prompt) state.maxPrompt = msg.max_prompt;
  showWords(msg.vocabulary || null);
  checkPrompt();
  for (const [id, text] of [["mode-note", msg.mode_note], ["decoder-note", msg.decoder_note]]) {
    $(id).textContent = text || "";
    $(id).hidden = !text;
  }
  state.offered = { decoders: (msg.choices || {}).decoder || null, taesd: msg.taesd !== false };
  state.cores = msg.cores || null;
  // the Budget field shows the budget the advice is judged at: the server's, until the user sets another
  if (msg.advice_budget && !$("budget").dataset.set) $("budget").value = msg.advice_budget;
  showLive(msg.defaults);  // the preview settings now: a running run's live ones, or a script's watch's
}

// The form's listeners. act: { start(), measure(), fidelity(), stop(), set(fields), budget() } from the page's main
// module
export function wire(act) {
  $("start-form").addEventListener("submit", (ev) => { ev.preventDefault(); act.start(); });
  // Ctrl+Enter (Cmd+Enter on a Mac) starts a run from anywhere on the page, the prompt included, as Start does
  document.addEventListener("keydown", (ev) => {
    if (ev.key !== "Enter" || !(ev.ctrlKey || ev.metaKey) || ev.repeat) return;
    ev.preventDefault();  // no newline in the prompt, and no second start from the form's own Enter
    if (state.starts && !$("start").disabled) act.start();
  });
  $("dice").addEventListener("click", () => {
    $("seed").value = randomSeed();
    $("seed").dataset.touched = "1";
    inputEdited("seed");
  });
  $("measure").addEventListener("click", act.measure);
  $("fidelity").addEventListener("click", act.fidelity);
  $("stop").addEventListener("click", act.stop);
  $("clear-init").addEventListener("click", () => setInit(null));
  $("prompt").addEventListener("input", checkPrompt);
  $("example").addEventListener("click", fillExample);
  for (const k of LIVE) $(k).addEventListener("change", () => { if (state.running) act.set(previewFields([k])); });
  for (const k of RUN_FIELDS) $(k).addEventListener("input", () => { $(k).dataset.touched = "1"; });
  $("budget").addEventListener("input", () => { $("budget").dataset.set = "1"; act.budget(); });
  for (const k of [...RUN_FIELDS, ...LIVE]) $(k).addEventListener("input", () => inputEdited(k));
}
