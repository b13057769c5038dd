"""Every family's synthetic preset through the engine, watch() and the bench, with every decoder and both
targets; x0 without changing the image; fp16-only folders; a TAE of the wrong family refused."""
from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from previewlab.bench.sweep import direct_call
from previewlab import watch as preview_watch
from previewlab.preview.names import DecoderName, Target
from previewlab.preview.call.engine import RunContext, generate
from previewlab.preview.record.kept_events import Gathered
from previewlab.preview.models import Model, ModelError, load
from previewlab.preview.models.presets import TINY
from previewlab.preview.settings import PreviewSettings, RunSettings

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).parent / "data"


FAMILIES = ("synthetic:tiny", "synthetic:tiny-xl", *TINY)  # sd15, sdxl, then sd3, flux1, flux2


@pytest.fixture(scope="module", params=FAMILIES)
def family_model(request) -> Model:
    return load(request.param, device="cpu")


def settings(decoder: DecoderName = "none", target: Target = "auto", steps: int = 2, **kw) -> RunSettings:
    return RunSettings(steps=steps, width=64, height=64, preview=PreviewSettings(decoder=decoder, target=target, **kw))


@pytest.mark.slow
@pytest.mark.parametrize("target", ["x0", "latents"])
@pytest.mark.parametrize("decoder", ["latent2rgb", "taesd", "vae"])
def test_every_decoder_and_target_previews_every_family(family_model, decoder, target):
    told = Gathered()
    run = generate(RunContext(family_model, settings(decoder, target, mode="sync"), "t"), told)
    frames = told.frames
    assert run.record.totals.previews == 2 and [r.target for r in run.rows] == [target, target]
    assert all(r.event == "" for r in run.rows)  # no preview failed and fell back
    side = 64 if decoder != "latent2rgb" else 64 // family_model.vae_scale_factor  # latent2rgb: latent resolution
    assert all(f.width == f.height == side and f.data[:2] == b"\xff\xd8" for f in frames)
    assert run.image is not None and run.image.shape == (64, 64, 3)


@pytest.mark.slow
def test_x0_leaves_the_image_as_a_plain_call_makes_it(family_model):
    plain = direct_call(family_model, settings(), "d", None)
    for target in ("x0", "latents"):
        none = generate(RunContext(family_model, settings("none", target), "n"))
        assert none.image is not None and plain.image is not None and np.array_equal(none.image, plain.image)
    shown = generate(RunContext(family_model, settings("latent2rgb", "x0", mode="overlap"), "o"))
    assert shown.image is not None and plain.image is not None and np.array_equal(shown.image, plain.image)
    assert [r.target for r in shown.rows] == ["x0", "x0"]


@pytest.mark.slow
def test_x0_differs_from_the_latents_early_on(family_model):
    """x0 is the clean-image prediction: at step 1 it is far from the noisy latents it came from."""
    seen: dict[Target, list[bytes]] = {"x0": [], "latents": []}
    for target in seen:
        told = Gathered()
        generate(RunContext(family_model, settings("latent2rgb", target, mode="sync"), target), told)
        seen[target] = [f.data for f in told.frames]
    assert seen["x0"][0] != seen["latents"][0]


PAIRS = [(d, t) for d in ("latent2rgb", "taesd", "vae") for t in ("x0", "latents")]


@pytest.mark.slow
def test_server_streams_every_family_with_every_decoder_and_target(family_model, make_app):
    """The real app over its WebSocket: one run per decoder and target; each frame is the family's picture."""
    import json

    from starlette.testclient import TestClient

    from tests.conftest import SAME_ORIGIN, acks_not_awaited

    srv, app = make_app(model=family_model, limits=acks_not_awaited())  # this client never acks
    with TestClient(app) as client, client.websocket_connect("/ws", headers=SAME_ORIGIN) as ws:
        hello = json.loads(ws.receive_text())
        assert hello["family"] == family_model.family and hello["choices"]["target"] == ["auto", "x0", "latents"]
        for decoder, target in PAIRS:
            ws.send_text(json.dumps({"type": "start", "steps": 2, "width": 64, "height": 64, "decoder": decoder,
                                     "target": target, "every": 1, "mode": "sync"}))
            frames, steps, done = 0, [], None
            while done is None:
                m = ws.receive()
                if m.get("bytes") is not None:
                    frames += 1
                    continue
                msg = json.loads(m["text"])
                assert msg["type"] != "error", msg
                if msg["type"] == "step":
                    steps.append(msg)
                elif msg["type"] == "done":
                    done = msg
            rows = srv.store.rows(done["run_id"])
            # each preview reached this client, or a newer one replaced it unsent (the slot keeps the newest: a
            # loaded machine's test thread may read late), and the run's rows say so
            dropped = sum(r.dropped for r in rows if r.preview)
            assert done["status"] == "done" and frames >= 1 and frames + dropped == 2, (decoder, target, dropped)
            assert [(r["decoder"], r["target"], r["event"]) for r in steps] == [(decoder, target, "")] * 2
            assert {r.target for r in rows} == {target}


def tae_file(m: Model, folder: Path) -> str:
    """The preset's TAE as a user passes one to watch(taesd=...): a diffusers folder or madebyollin's file."""
    from safetensors.torch import save_file

    assert m.taesd is not None
    if m.taesd_kind == "diffusers":
        m.taesd.save_pretrained(folder / "tae")  # type: ignore[operator]
        return str(folder / "tae")
    assert m.family is not None
    name = {"sd3": "taesd3", "flux1": "taef1", "flux2": "taef2"}[m.family]
    path = folder / f"{name}_decoder.safetensors"
    save_file({k: v.contiguous() for k, v in m.taesd.state_dict().items()}, str(path))
    return str(path)


@pytest.mark.slow
@pytest.mark.parametrize("name", FAMILIES)
def test_watch_runs_every_family_with_every_decoder_and_target(name, tmp_path):
    m = load(name, device="cpu")
    tae = tae_file(m, tmp_path)
    for decoder, target in PAIRS:
        w = preview_watch(m.pipe, decoder=decoder, mode="sync", target=target, taesd=tae)
        try:
            m.pipe(prompt="a cat", num_inference_steps=2, width=64, height=64, callback_on_step_end=w,
                   callback_on_step_end_tensor_inputs=w.tensor_inputs, output_type="latent")
            rows = w.rows
        finally:
            w.remove()
        assert [(r.preview, r.decoder, r.target, r.event) for r in rows] == [(1, decoder, target, "")] * 2, \
            (name, decoder, target)


@pytest.mark.slow
@pytest.mark.parametrize("name", FAMILIES)
def test_bench_sweeps_every_family_with_every_decoder_and_target(name, tmp_path):
    from previewlab.bench.cli import main as bench_main

    rc = bench_main(["--model", name, "--decoders", "latent2rgb,taesd,vae", "--every", "1", "--steps", "2",
                     "--repeats", "1", "--warmup", "0", "--target", "x0,latents", "--width", "64", "--height", "64",
                     "--out", str(tmp_path)])
    assert rc == 0
    with open(tmp_path / "steps.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["preview"] == "1"]
    assert {(r["decoder"], r["target"]) for r in rows} == set(PAIRS)
    assert all(r["event"] == "" for r in rows)


def test_watch_previews_a_flux_pipeline(tmp_path):
    m = load("synthetic:tiny-flux1", device="cpu")
    w = preview_watch(m.pipe, decoder="vae", mode="sync", target="x0")
    try:
        m.pipe(prompt="a cat", num_inference_steps=3, width=64, height=64, callback_on_step_end=w,
               callback_on_step_end_tensor_inputs=w.tensor_inputs, output_type="latent")
        rows = w.rows
        rec = w.record
    finally:
        w.remove()
    assert [r.preview for r in rows] == [1, 1, 1] and {r.target for r in rows} == {"x0"}
    assert all(r.preview_width == r.preview_height == 64 for r in rows)  # unpacked from FLUX's 2x2 patches
    assert rec is not None and rec.totals.status == "done"
    assert rec.meta.preview is not None and rec.meta.preview.target == "x0"
    assert "step" not in m.pipe.scheduler.__dict__  # the tap is gone: the user's scheduler as it was


def test_bench_takes_a_family_and_a_target(tmp_path):
    from tests.conftest import previewlab_here

    p = previewlab_here("bench", "--model", "synthetic:tiny-flux2", "--decoders", "latent2rgb", "--every", "1", "--steps",
                        "2", "--repeats", "1", "--warmup", "0", "--target", "x0", "--width", "64", "--height", "64",
                        "--out", str(tmp_path))
    assert p.returncode == 0, p.stderr[-2000:]
    with open(tmp_path / "steps.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["preview"] == "1"]
    assert rows and {r["target"] for r in rows} == {"x0"}


def test_a_folder_of_fp16_files_loads_without_being_told(tmp_path):
    m = load("synthetic:tiny", device="cpu")
    m.pipe.to(torch.float16).save_pretrained(tmp_path / "fp16", variant="fp16")
    m.pipe.to(torch.float32)
    assert not list((tmp_path / "fp16" / "unet").glob("diffusion_pytorch_model.safetensors"))
    loaded = load(str(tmp_path / "fp16"), device="cpu")
    assert loaded.family == "sd15" and not loaded.synthetic
    run = generate(RunContext(loaded, settings("latent2rgb"), "f"))
    assert run.record.totals.previews == 2
    # a folder whose weights are gone says which component has none, not "not in the local cache"
    for f in (tmp_path / "fp16" / "unet").glob("*.safetensors"):
        f.unlink()
    with pytest.raises(ModelError, match=r"cannot load variant fp16 .*no weights for unet \(no .safetensors, .bin, "
                                         r".ckpt, .pth file in unet/\): copy them in") as e:
        load(str(tmp_path / "fp16"), device="cpu")
    assert "local cache" not in str(e.value)


def test_a_tae_of_another_family_is_refused_naming_both():
    with pytest.raises(ModelError, match="a TAE for flux2, but the model is sd15"):
        load("synthetic:tiny", device="cpu", taesd=str(DATA / "taef2" / "taef2_decoder.pth"))
    flux2 = load("synthetic:tiny-flux2", device="cpu", taesd=str(DATA / "taef2" / "taef2_decoder.pth"))
    assert flux2.taesd is not None and flux2.taesd_kind == "madebyollin"


@pytest.mark.slow
def test_taesd_takes_a_repo_id_from_the_local_cache(tmp_path):
    """madebyollin/taesd and taesdxl as a user's Hugging Face cache holds them (no network: local_files_only)."""
    from diffusers import AutoencoderTiny

    hub = tmp_path / "hub"
    for repo in ("taesd", "taesdxl"):
        snap = hub / f"models--madebyollin--{repo}" / "snapshots" / "0123456789abcdef0123456789abcdef01234567"
        tae: Any = AutoencoderTiny()
        tae.save_pretrained(snap)
        (hub / f"models--madebyollin--{repo}" / "refs").mkdir()
        (hub / f"models--madebyollin--{repo}" / "refs" / "main").write_text("0123456789abcdef0123456789abcdef01234567")
    code = ("from previewlab.preview.models.loading import load_taesd, LoadError\n"
            "m, kind = load_taesd('madebyollin/taesd', 'sd15'); print('ok', kind)\n"
            "try:\n    load_taesd('madebyollin/taesdxl', 'sd15')\nexcept LoadError as e:\n    print('refused', e)\n"
            "try:\n    load_taesd('madebyollin/taef1', 'flux1')\nexcept LoadError as e:\n    print('missing', e)\n")
    env = {**__import__("os").environ, "HF_HUB_CACHE": str(hub), "HF_HUB_OFFLINE": "1"}
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "ok diffusers" in p.stdout
    assert "refused --taesd madebyollin/taesdxl: a TAE for sdxl, but the model is sd15" in p.stdout
    assert "missing --taesd madebyollin/taef1: not in the local Hugging Face cache" in p.stdout
