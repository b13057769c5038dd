"""Takes the demo model's figures for the README: eight prompts and their final images (docs/demo-grid.png), and
one run's previews at steps 1, 5, 10 and 20 for each decoder, target x0 (docs/demo-previews.png).

    .venv/bin/python docs/make_demo_figures.py

Both go through previewlab's own engine (previewlab.preview.call.engine.generate) with the shipped model, 20 steps, seed 0.
"""
import io
import sys
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from previewlab.preview.call.engine import RunContext, generate  # noqa: E402
from previewlab.preview.record.kept_events import Gathered  # noqa: E402
from previewlab.preview.models import DEMO_GUIDANCE, load  # noqa: E402
from previewlab.preview.settings import PreviewSettings, RunSettings  # noqa: E402

PROMPTS = [
    "a red circle on the left, on a yellow background",
    "a blue square in the center, on a white background",
    "a green triangle on the right, on a purple background",
    "a yellow circle at the top, on a blue background",
    "a white square at the bottom, on a black background",
    "an orange triangle in the center, on a green background",
    "a red circle on the left and a blue square on the right, on a yellow background",
    "a purple triangle on the left and a white circle on the right, on an orange background",
]
SIDE, PAD, TEXT = 128, 6, 46


def caption_tile(image: np.ndarray, text: str, width: int = SIDE) -> Image.Image:
    tile = Image.new("RGB", (width, SIDE + TEXT), "white")
    tile.paste(Image.fromarray(image).resize((width, SIDE), Image.Resampling.NEAREST), (0, 0))
    pen = ImageDraw.Draw(tile)
    words, lines, line = text.split(), [], ""
    for w in words:  # wrap to the tile's width, up to four short lines
        if pen.textlength(f"{line} {w}".strip()) > width - 4:
            lines.append(line)
            line = w
        else:
            line = f"{line} {w}".strip()
    lines.append(line)
    for i, ln in enumerate(lines[:4]):
        pen.text((2, SIDE + 1 + 11 * i), ln, fill="black")
    return tile


def row(tiles: list[Image.Image]) -> Image.Image:
    out = Image.new("RGB", (sum(t.width for t in tiles) + PAD * (len(tiles) - 1), max(t.height for t in tiles)), "white")
    x = 0
    for t in tiles:
        out.paste(t, (x, 0))
        x += t.width + PAD
    return out


def stack(rows: list[Image.Image]) -> Image.Image:
    out = Image.new("RGB", (max(r.width for r in rows), sum(r.height for r in rows) + PAD * (len(rows) - 1)), "white")
    y = 0
    for r in rows:
        out.paste(r, (0, y))
        y += r.height + PAD
    return out


def main() -> None:
    model = load("demo", device="cpu")
    finals = []
    for p in PROMPTS:
        run = generate(RunContext(model, RunSettings(prompt=p, steps=20, width=SIDE, height=SIDE, seed=0,
                                                     guidance=DEMO_GUIDANCE, preview=PreviewSettings(decoder="none")),
                                  "grid"))
        assert run.image is not None
        finals.append(caption_tile(run.image, p))
    stack([row(finals[:4]), row(finals[4:])]).save(ROOT / "docs" / "demo-grid.png")

    prompt = PROMPTS[6]
    lines = []
    for decoder in ("latent2rgb", "taesd", "vae"):
        told = Gathered()
        settings = RunSettings(prompt=prompt, steps=20, width=SIDE, height=SIDE, seed=0, guidance=DEMO_GUIDANCE,
                               preview=PreviewSettings(decoder=decoder, target="x0", mode="sync", every=1))
        generate(RunContext(model, settings, decoder), told)
        by_step = {f.step: f for f in told.frames}
        tiles = []
        for step in (1, 5, 10, 20):
            f = by_step[step]
            img = np.asarray(Image.open(io.BytesIO(f.data)).convert("RGB"))
            tiles.append(caption_tile(img, f"{decoder}, x0, step {step} ({f.width}x{f.height})"))
        lines.append(row(tiles))
    stack(lines).save(ROOT / "docs" / "demo-previews.png")
    print("wrote docs/demo-grid.png and docs/demo-previews.png")


if __name__ == "__main__":
    main()
