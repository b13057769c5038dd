// The preview canvas and its clips, and the final image shown in its place. A binary message is a preview:
// 4-byte big-endian header length N, N bytes of UTF-8 JSON header, then the image bytes: one image, or a clip's
// frames one after another (header.sizes: each frame's bytes; header.fps: the rate that plays them).
import { $, state } from "./state.js";

const DEFAULT_FPS = 8;  // a clip whose rate is unknown plays at this
const canvas = $("preview");
const ctx = canvas.getContext("2d");
const view = state.view;

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
  if (!view.clip) return;
  clearInterval(view.clip.timer);
  for (const b of view.clip.bitmaps) b.close();
  view.clip = null;
}

function drawBitmap(bitmap) {
  if (canvas.width !== bitmap.width || canvas.height !== bitmap.height) {
    canvas.width = bitmap.width;
    canvas.height = bitmap.height;
  }
  ctx.drawImage(bitmap, 0, 0);
}

// The rest of a clip, decoded after its first frame was drawn and acknowledged, then played in a loop until the
// next preview replaces it. failed(text): a frame that would not decode
async function playClip(first, rest, fps, seq, failed) {
  const bitmaps = [first];
  let playing = false;
  try {
    for (const b of rest) {
      if (view.lastSeq !== seq) return;  // a newer preview came while these decoded: it replaces this clip
      bitmaps.push(await createImageBitmap(b));
    }
    if (view.lastSeq !== seq || view.drawnSeq !== seq) return;
    playing = true;
  } catch (e) {  // a frame that does not decode: the first stays on the canvas, the page says why
    failed(`clip preview ${seq}: a frame did not decode (${e})`);
    return;
  } finally {
    if (!playing) for (const b of bitmaps) b.close();  // given way, or a frame that would not decode
  }
  stopClip();
  const clip = { seq, bitmaps, shown: 0, timer: 0 };
  view.clip = clip;
  clip.timer = setInterval(() => {
    clip.shown = (clip.shown + 1) % clip.bitmaps.length;
    drawBitmap(clip.bitmaps[clip.shown]);
    canvas.dataset.clipFrame = String(clip.shown);
  }, 1000 / (fps > 0 ? fps : DEFAULT_FPS));
}

// One preview message: counted for the run it belongs to, drawn at the next animation frame unless a newer one
// is on the canvas already, and acknowledged either way. on: { ack(msg), painted(header, renderMs), failed(text) }
export async function onFrame(buf, on) {
  const n = new DataView(buf).getUint32(0, false);
  const header = JSON.parse(new TextDecoder().decode(new Uint8Array(buf, 4, n)));
  const blobs = frameBlobs(buf, 4 + n, header);
  view.lastSeq = header.seq;
  const run = state.run;
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
    const now = state.run;
    if (header.seq < view.drawnSeq || (now && header.run_id !== now.meta.run_id)) {
      bitmap.close();
      on.ack({ type: "ack", seq: header.seq, client_decode_ms: +(t1 - t0).toFixed(3), client_paint_ms: 0 });
      return;
    }
    view.drawnSeq = header.seq;
    stopClip();
    drawBitmap(bitmap);
    const t2 = performance.now();
    const count = blobs.length > 1 ? ` · ${blobs.length} frames at ${(header.fps || DEFAULT_FPS).toFixed(1)} fps` : "";
    canvas.dataset.clipFrames = String(blobs.length);
    canvas.dataset.clipFrame = "0";
    view.shown = { header, count, kb: (buf.byteLength / 1024).toFixed(1) };
    showCaption();
    canvas.dataset.step = header.step;
    canvas.dataset.decoder = header.decoder;
    canvas.dataset.painted = String(Number(canvas.dataset.painted || 0) + 1);
    // one ack per message, once its first frame is on the canvas
    on.ack({ type: "ack", seq: header.seq, client_decode_ms: +(t1 - t0).toFixed(3),
             client_paint_ms: +(t2 - t1).toFixed(3) });
    if (blobs.length > 1) playClip(bitmap, blobs.slice(1), header.fps, header.seq, on.failed);
    else bitmap.close();
    on.painted(header, (t1 - t0) + (t2 - t1));
  });
}

// The caption of the preview on the canvas. Its step's row (which may come after the frame) says the size the
// decoder ran at: named when it differs from the size sent (decode_at full, or a cut that still resizes), per
// image in a batch (a grid sends them side by side)
export function showCaption() {
  const h = view.shown.header;
  const r = state.run && state.run.meta.run_id === h.run_id ? state.run.rows.get(h.step) : undefined;
  const sent = `${h.width}x${h.height}`;
  const decoded = r && r.decode_width > 0 ? `${r.decode_width}x${r.decode_height}` : sent;
  const size = decoded === sent ? sent : `decoded ${decoded}${r.batch > 1 ? " per image" : ""}, sent ${sent}`;
  $("caption").textContent = `step ${h.step} · ${h.decoder} · ${size}${view.shown.count} · ${h.format} · ${view.shown.kb} KB`;
}

// A step's row arrived: the caption names its decode size if its preview is the one shown
export function stepArrived(runId, step) {
  if (view.shown && view.shown.header.run_id === runId && view.shown.header.step === step) showCaption();
}

// The view: the previews' canvas, or a final image in its place; the flip button shows the other one when
// there is one (a run with decoder none has no preview to go back to)
export function showView(final) {
  view.finalShown = final;
  canvas.hidden = $("caption").hidden = final;
  $("final-box").hidden = !final;
  const both = Number(canvas.dataset.painted || 0) > 0 && $("final").dataset.loaded === "1";
  $("flip").hidden = !both;
  $("flip").textContent = final ? "last preview" : "final image";
}

// Each run starts clean: nothing of the run before stays on the canvas (a decoder `none` run draws no preview)
export function resetView(meta) {
  stopClip();
  view.shown = null;
  ctx.clearRect(0, 0, canvas.width, canvas.height);
  for (const k of ["step", "decoder", "clipFrames", "clipFrame"]) delete canvas.dataset[k];
  canvas.dataset.painted = "0";
  canvas.dataset.run = meta.run_id;
  $("caption").textContent = meta.decoder === "none" ? "no previews: decoder none" : "no preview yet";
  $("final").removeAttribute("src");
  delete $("final").dataset.loaded;
  showView(false);
}

// A run's final image (the route checks the id as the CSV route does); shown once it has loaded, where the
// previews were, the last preview one click away
export function showFinal(id) {
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
export function hasFinal(m) {
  if (m.damaged) return false;
  if (typeof m.has_final === "boolean") return m.has_final;
  return (m.status === "done" || m.status === "stopped") && m.task !== "script";
}

export function wireView() {
  $("flip").addEventListener("click", () => showView(!view.finalShown));
}
