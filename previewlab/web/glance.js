// At a glance: the measured configurations of the newest run's settings as one picture, drawn from the server's
// analysis (/analysis, a run's done): overhead with its interval (y, %) against fidelity (x, SSIM against the VAE's
// preview, with its interval), one point per configuration; the one in use is boxed, the one advised ringed.
// Configurations without a fidelity figure stand in a strip of their own, "fidelity not measured", at their
// overhead, so none is hidden. The page computes no statistic: every figure drawn is the server's.
import { $ } from "./state.js";

const NS = "http://www.w3.org/2000/svg";
const W = 420, H = 240;                       // the picture's size, px
const PAD = { left: 46, right: 12, top: 12, bottom: 34 };
const STRIP = 64;                             // the "fidelity not measured" strip's width, px
const X0 = PAD.left + STRIP + 10;             // where the SSIM axis starts

function el(name, attrs, text) {
  const e = document.createElementNS(NS, name);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  if (text !== undefined) e.textContent = text;
  return e;
}

// The overhead axis' range, percent: every interval's ends and 0, a little beyond
function yRange(points) {
  const ys = [0];
  for (const f of points) for (const k of ["value", "lo", "hi"]) if (f.overhead[k] !== null) ys.push(f.overhead[k]);
  let lo = Math.min(...ys), hi = Math.max(...ys);
  if (hi - lo < 1) hi = lo + 1;
  const pad = (hi - lo) * 0.08;
  return [lo - pad, hi + pad];
}

// The picture for an analysis (null: no run has ended); it replaces the last one
export function showGlance(analysis) {
  const box = $("glance");
  box.replaceChildren();
  const note = $("glance-note");
  if (!analysis) { note.textContent = "no configuration measured yet"; return; }
  const d = analysis.data, adv = d.advice;
  const advised = adv.pick || (adv.keep ? adv.current : null);
  const points = d.findings.filter((f) => f.overhead);
  const unmeasured = d.findings.filter((f) => !f.overhead).map((f) => f.name);
  const svg = el("svg", { viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: "img",
                          "aria-label": "overhead against fidelity, one point per configuration" });
  const [ylo, yhi] = yRange(points);
  const y = (v) => PAD.top + (yhi - v) / (yhi - ylo) * (H - PAD.top - PAD.bottom);
  const x = (s) => X0 + Math.max(0, Math.min(1, s)) * (W - PAD.right - X0);
  const bottom = H - PAD.bottom;
  // axes, 0 % and the fidelity threshold
  svg.append(el("line", { x1: PAD.left, y1: y(0), x2: W - PAD.right, y2: y(0), class: "zero" }));
  svg.append(el("line", { x1: PAD.left, y1: PAD.top, x2: PAD.left, y2: bottom, class: "axis" }));
  svg.append(el("line", { x1: X0, y1: bottom, x2: W - PAD.right, y2: bottom, class: "axis" }));
  for (const v of [ylo, 0, yhi]) {
    svg.append(el("text", { x: PAD.left - 4, y: y(v) + 4, "text-anchor": "end", class: "tick" }, `${v.toFixed(1)}`));
  }
  for (const s of [0, 0.5, 1]) {
    svg.append(el("text", { x: x(s), y: bottom + 13, "text-anchor": "middle", class: "tick" }, s.toFixed(1)));
  }
  svg.append(el("text", { x: (X0 + W - PAD.right) / 2, y: H - 4, "text-anchor": "middle", class: "label" },
                "fidelity: SSIM against the VAE's preview"));
  svg.append(el("text", { x: 12, y: (PAD.top + bottom) / 2, "text-anchor": "middle", class: "label",
                          transform: `rotate(-90 12 ${(PAD.top + bottom) / 2})` }, "overhead %"));
  svg.append(el("rect", { x: PAD.left + 2, y: PAD.top, width: STRIP, height: bottom - PAD.top, class: "strip" }));
  svg.append(el("text", { x: PAD.left + 2 + STRIP / 2, y: bottom - 4, "text-anchor": "middle", class: "tick" },
                "not measured"));
  const fid = d.fidelity;
  if (fid) {
    svg.append(el("line", { x1: x(fid.min_ssim), y1: PAD.top, x2: x(fid.min_ssim), y2: bottom, class: "threshold" }));
  }
  const inStrip = points.filter((f) => !f.fidelity);
  for (const f of points) {
    const o = f.overhead, s = f.fidelity ? f.fidelity.ssim : null;
    const cx = s ? x(s.value) : PAD.left + 2 + STRIP * (inStrip.indexOf(f) + 1) / (inStrip.length + 1);
    const cy = y(o.value);
    const cls = ["point", s ? "fid" : "no-fid"];
    if (f.name === advised) cls.push("advised");
    if (f.name === adv.current) cls.push("in-use");
    const g = el("g", { class: cls.join(" "), "data-name": f.name });
    if (o.lo !== null && o.hi !== null) g.append(el("line", { x1: cx, y1: y(o.lo), x2: cx, y2: y(o.hi), class: "bar" }));
    if (s && s.lo !== null && s.hi !== null) {
      g.append(el("line", { x1: x(s.lo), y1: cy, x2: x(s.hi), y2: cy, class: "bar" }));
    }
    g.append(el("circle", { cx, cy, r: 3.5, class: "dot" }));
    if (f.name === advised) g.append(el("circle", { cx, cy, r: 8, class: "ring" }));
    if (f.name === adv.current) g.append(el("rect", { x: cx - 6, y: cy - 6, width: 12, height: 12, class: "box" }));
    g.append(el("title", {}, `${f.name}: ${f.said}` + (f.fidelity ? `; ${f.fidelity.said}` : "; fidelity not measured")
      + (f.name === advised ? " (advised)" : "") + (f.name === adv.current ? " (in use)" : "")));
    svg.append(g);
  }
  box.append(svg);
  const parts = [`○ ringed: advised${advised ? ` (${advised})` : ": none yet"}`,
                 `□ boxed: in use${adv.current ? ` (${adv.current})` : ": none (the newest run has no previews)"}`];
  if (fid) parts.push(`dashed: the fidelity threshold, SSIM ${fid.min_ssim}` +
                      (fid.synthetic ? "; a SYNTHETIC model's fidelity: noise pictures, never advised on" : ""));
  else parts.push("fidelity not measured for these settings: Measure fidelity");
  if (unmeasured.length) parts.push(`no overhead yet: ${unmeasured.join(", ")}`);
  note.textContent = parts.join("; ");
}
