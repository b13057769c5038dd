"""A measured generation on synthetic:tiny: rows, reconciliation, live controls, faults, model loading."""
from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch

from fake_device import FakeClock
from previewlab.preview import models
from previewlab.preview.models import sd_presets
from previewlab.preview.decoding.encoders import Encoder, get
from previewlab.preview.controls import Controls
from previewlab.preview.decoding.previewer import Previewer
from previewlab.preview.call.engine import RunContext, generate
from previewlab.preview.record.kept_events import Gathered
from previewlab.preview.record.records import StepRow
from previewlab.preview.settings import PreviewSettings, RunSettings


def run(model, decoder="latent2rgb", every=1, steps=4, events=None, **kw):
    s = RunSettings(steps=steps, width=64, height=64, preview=PreviewSettings(decoder=decoder, every=every))
    return generate(RunContext(model, s, "t", **kw), events)


def test_rows_follow_schedule_and_frames_match(tiny, tmp_path):
    told = Gathered()
    r = run(tiny, "taesd", every=2, steps=5, events=told, image_path=tmp_path / "final.png")
    frames = told.frames
    assert [x.step for x in r.rows] == [1, 2, 3, 4, 5]
    assert [x.preview for x in r.rows] == [0, 1, 0, 1, 0]
    assert [f.step for f in frames] == [2, 4]
    assert all(f.width == f.height == 64 and f.format == "jpeg" and f.data[:2] == b"\xff\xd8" for f in frames)
    assert [x.bytes for x in r.rows if x.preview] == [len(f.data) for f in frames]
    assert r.record.totals.previews == 2 and r.record.totals.bytes == sum(len(f.data) for f in frames)
    assert (tmp_path / "final.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert r.image is not None and r.image.shape == (64, 64, 3)
    # timesteps are the scheduler's, decreasing
    ts = [x.timestep for x in r.rows]
    assert ts == sorted(ts, reverse=True) and len(set(ts)) == 5


# Known preview costs on a fake host clock (it jumps, nothing sleeps): the figures are checked against these,
# bounded above by the real time the run took, never against the accounting's own formula. A minute per decode
# and ten per encode: far more than the real work takes, even on a loaded machine, so the bounds tell them apart.
DECODE_MS, ENCODE_MS, STEPS = 60_000.0, 600_000.0, 4


@pytest.mark.parametrize("mode", ["sync", "overlap"])
def test_stage_sums_reconcile_with_wall_time(tiny, mode):
    """A TAESD preview every step; each decode costs 60 s of host time and each encode 600 s. sync: both are
    on the denoising path (4 x 660 s); overlap on the CPU: only the decode (4 x 60 s), the encode runs on its
    own thread, whose clock does not move the denoising thread's."""
    clock = FakeClock()
    hook = tiny.taesd.decoder.register_forward_hook(lambda *_: clock.block_until(clock() + DECODE_MS / 1e3))
    jpeg = get("turbojpeg")

    def slow_jpeg(hwc, quality):
        clock.block_until(clock() + ENCODE_MS / 1e3)
        return jpeg.encode(hwc, quality)

    prev = Previewer(tiny)
    prev._enc["turbojpeg"] = Encoder("slow", "jpeg", slow_jpeg)
    s = RunSettings(steps=STEPS, width=64, height=64, preview=PreviewSettings(decoder="taesd", mode=mode))
    try:
        t0, real0 = clock(), time.perf_counter()
        res = generate(RunContext(tiny, s, "t", clock=clock, previewer=prev))
        outer_ms = (clock() - t0) * 1e3  # the same clock, read outside the engine
        real_ms = (time.perf_counter() - real0) * 1e3
    finally:
        hook.remove()
    r, made = res.record, [x for x in res.rows if x.preview]
    assert r.totals.previews == STEPS and len(made) == STEPS and r.totals.wall_s * 1e3 <= outer_ms
    assert all(x.decode_ms >= DECODE_MS and x.encode_ms >= ENCODE_MS for x in made)  # reported in both modes
    per_preview = DECODE_MS + ENCODE_MS if mode == "sync" else DECODE_MS  # 660 s or 60 s
    assert all(per_preview <= x.on_path_ms <= per_preview + real_ms for x in made), [x.on_path_ms for x in made]
    assert STEPS * per_preview <= r.totals.on_path_ms <= STEPS * per_preview + real_ms
    if mode == "overlap":
        assert r.totals.wall_s * 1e3 <= STEPS * DECODE_MS + real_ms  # not one encode held the denoising path
    else:
        assert r.totals.wall_s * 1e3 >= STEPS * (DECODE_MS + ENCODE_MS)
    # nothing is counted twice: what is left over is the host's own glue, which took real time
    t = r.totals
    phases = t.text_encode_ms + t.denoise_ms + t.final_decode_ms + t.final_encode_ms + t.write_ms + t.drain_ms
    assert phases + r.totals.on_path_ms <= r.totals.wall_s * 1e3 and 0 <= r.totals.other_ms <= real_ms
    assert r.totals.denoise_ms > 0 and r.totals.text_encode_ms > 0 and r.totals.final_decode_ms > 0
    assert r.meta.synthetic is True and r.totals.status == "done"
    assert r.meta.preview is not None and r.meta.preview.mode == mode


def test_decoder_none_touches_nothing(tiny):
    a = run(tiny, "none")
    b = run(tiny, "none")
    assert a.record.totals.previews == 0 and all(x.preview_ms == 0 and x.bytes == 0 for x in a.rows)
    assert (a.image == b.image).all()  # deterministic for a seed


def test_previews_do_not_change_the_final_image(tiny):
    assert (run(tiny, "none").image == run(tiny, "vae").image).all()


def test_live_control_takes_effect_at_next_step_and_is_recorded(tiny):
    # sync mode: a row reaches events.row inside its own step's callback, so the set below lands before step 3
    controls = Controls(PreviewSettings(decoder="latent2rgb", mode="sync"))

    class Switch(Gathered):
        def row(self, row: StepRow) -> None:
            super().row(row)
            if row.step == 2:
                controls.set(decoder="taesd", every=1)

    told = Switch()
    r = run(tiny, steps=4, controls=controls, events=told)
    seen = told.rows
    assert [x.decoder for x in r.rows] == ["latent2rgb", "latent2rgb", "taesd", "taesd"]
    assert r.rows[2].event == "set decoder=taesd" and r.rows[1].event == ""
    assert r.rows[2].preview_width == 64 and r.rows[1].preview_width == 32  # taesd upsamples, latent2rgb does not
    assert seen == r.rows


def test_preview_failure_falls_back_and_run_goes_on(tiny):
    class Broken(torch.nn.Module):
        def decode(self, x, return_dict=False):
            raise RuntimeError("CUDA out of memory (simulated)")

    broken = models.Model(**{**tiny.__dict__, "taesd": Broken()})
    told = Gathered()
    r = run(broken, "taesd", steps=3, events=told)
    errors = [message for run_id, message in told.errors if run_id == "t"]
    assert r.record.totals.status == "done" and len(r.rows) == 3
    assert "taesd failed at step 1" in r.rows[0].event and "latent2rgb" in r.rows[0].event
    assert r.rows[0].preview == 0 and [x.decoder for x in r.rows[1:]] == ["latent2rgb", "latent2rgb"]
    assert r.rows[1].preview == 1 and len(errors) == 1


def test_stop_keeps_completed_rows(tiny):
    r = run(tiny, steps=6, should_stop=lambda: True)
    assert r.record.totals.status == "stopped" and len(r.rows) == 1


def test_sdxl_family_runs_with_every_decoder(tiny_xl):
    for d in ("latent2rgb", "taesd", "vae"):
        r = run(tiny_xl, d, steps=2)
        assert r.record.totals.previews == 2 and r.record.meta.model == "synthetic:tiny-xl"


@pytest.mark.slow
def test_local_folder_and_taesd_file_load(tiny, tmp_path):
    tiny.pipe.save_pretrained(tmp_path / "sd")
    from previewlab.preview.models.taesd import Decoder

    torch.save(Decoder().state_dict(), tmp_path / "taesd_decoder.pth")
    m = models.load(str(tmp_path / "sd"), taesd=str(tmp_path / "taesd_decoder.pth"), device="cpu")
    assert m.synthetic is False and m.family == "sd15" and m.taesd_kind == "madebyollin"
    s = RunSettings(steps=2, width=64, height=64, preview=PreviewSettings(decoder="taesd"))
    r = generate(RunContext(m, s, "l"))
    # madebyollin's decoder always upsamples 8x: a 32x32 latent gives 256x256
    assert r.rows[0].preview_width == 256 and r.record.meta.synthetic == 0
    # the same pipeline loaded from its folder gives the same picture
    assert (r.image == run(tiny, "none", steps=2).image).all()


def test_missing_model_and_weights_are_one_line_errors(tmp_path):
    with pytest.raises(models.ModelError) as e:
        models.load(str(tmp_path / "nothing"))
    assert f"no such file or folder: {tmp_path / 'nothing'}" in str(e.value) and "\n" not in str(e.value)
    (tmp_path / "empty").mkdir()  # a folder that is there, but not a diffusers one
    with pytest.raises(models.ModelError, match="model_index.json not found"):
        models.load(str(tmp_path / "empty"))
    with pytest.raises(models.ModelError, match="taesd_decoder.pth"):
        models.load_taesd(str(tmp_path / "missing.pth"))
    (tmp_path / "bad.pth").write_bytes(b"not a checkpoint")
    with pytest.raises(models.ModelError, match="not a readable checkpoint"):
        models.load_taesd(str(tmp_path / "bad.pth"))


def test_taesd_needs_weights_for_a_real_model(tiny, tmp_path):
    tiny.pipe.save_pretrained(tmp_path / "sd")
    m = models.load(str(tmp_path / "sd"), device="cpu")
    from previewlab.preview.decoding.contract import DecoderError
    from previewlab.preview.decoding.decoders import build

    with pytest.raises(DecoderError, match="--taesd PATH"):
        build("taesd", m)


def test_synthetic_sd15_has_the_real_parameter_counts():
    # built on the meta device: the counts of the real architecture without allocating 1 B weights
    with torch.device("meta"):
        unet = sd_presets._unet((320, 640, 1280, 1280), 768, attention_head_dim=8)
        vae = sd_presets._vae((128, 256, 512, 512))
        taesd = sd_presets._taesd(4)
        from transformers import CLIPTextModel

        te = CLIPTextModel(sd_presets._clip(768, 12, 12, 3072, vocab=49408, hidden_act="quick_gelu"))
    count = lambda m: sum(p.numel() for p in m.parameters())
    assert count(unet) == 859_520_964
    assert count(vae) == 83_653_863
    assert count(taesd) == 2_445_063
    assert count(te) == 123_060_480


@pytest.mark.slow
def test_compiled_decoder_reports_compile_time_apart_and_gives_the_same_picture(tiny):
    import io

    import numpy as np
    from PIL import Image

    def frames(compile_decoder: bool):
        told = Gathered()
        s = RunSettings(steps=3, width=64, height=64, preview=PreviewSettings(decoder="latent2rgb", mode="sync"))
        r = generate(RunContext(tiny, s, "c", compile_decoder=compile_decoder), told)
        return told.frames, r.record.totals

    plain, rp = frames(False)
    compiled, rc = frames(True)
    assert rp.compile == 0 and rp.compile_ms == 0
    assert rc.compile == 1 and rc.compile_ms > 0  # compiled before the run's clock started: not in wall_s
    for a, b in zip(plain, compiled):
        pa = np.asarray(Image.open(io.BytesIO(a.data)), dtype=np.int16)
        pb = np.asarray(Image.open(io.BytesIO(b.data)), dtype=np.int16)
        assert np.abs(pa - pb).mean() < 1.0  # fused kernels round differently, by less than a level
