"""Measure the previews of your own diffusers call with two added lines.

Runs offline on a synthetic pipeline (random weights: real costs, noise pictures). With a real model, build
`pipe` the way you always do, e.g. StableDiffusionPipeline.from_pretrained(folder, local_files_only=True).

    .venv/bin/python examples/own_script.py [--serve]
"""
import sys

import torch

from previewlab import serve, watch as preview_watch
from previewlab.preview.models import synthetic_pipeline

pipe = synthetic_pipeline("synthetic:small")  # stands in for your own pipeline

watch = preview_watch(pipe, decoder="latent2rgb", every=2)
page = None
if "--serve" in sys.argv:  # the live page: the server takes the watch
    page = serve(watch, port=8000)
image = pipe("a lighthouse on a cliff at dusk", num_inference_steps=10, height=256, width=256,
             generator=torch.Generator().manual_seed(0),
             callback_on_step_end=watch, callback_on_step_end_tensor_inputs=watch.tensor_inputs).images[0]
watch.save(image, "own_script.png")
watch.to_csv("own_script.csv")

rec = watch.record
assert rec is not None  # the call has finished: its record (meta: what it was; totals: what it cost) is closed
t = rec.totals
print(f"wall {t.wall_s:.2f} s = text {t.text_encode_ms:.0f} ms + denoise {t.denoise_ms:.0f} ms + previews "
      f"{t.preview_ms:.1f} ms ({t.previews} frames, {t.bytes} bytes) + final decode {t.final_decode_ms:.0f} ms "
      f"+ PNG {t.final_encode_ms:.0f} ms + write {t.write_ms:.1f} ms + other {t.other_ms:.0f} ms")
print("per-step rows in own_script.csv; image in own_script.png")
if page is not None:
    input(f"the page is at {page.url}; press Enter to quit ")
watch.remove()
