"""Every video family's tiny preset, each decoder and each frames choice, through watch() (a user's own call)
and generate() (the server's and the bench's path): the frames each preview shows and the latent frames it
reads, every frame in the message, and the final clip unchanged by watching."""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from previewlab.preview import models
from previewlab.preview.call.callback import Watch
from previewlab.preview.call.engine import RunContext, generate
from previewlab.preview.record.kept_events import Gathered
from previewlab.preview.frames import Frame
from previewlab.preview.models.presets import TINY_VIDEO
from previewlab.preview.models.taehv_files import FAMILY_FILES
from previewlab.preview.names import DecoderName, FrameChoice
from previewlab.preview.record.records import StepRow
from previewlab.preview.settings import MAX_NUM_FRAMES, PreviewSettings, RunSettings

pytestmark = pytest.mark.slow

# step i's preview shows FRAMES[i]: switched live between steps, as the page's control does
FRAMES: tuple[FrameChoice, ...] = ("first", "middle", "all", 2)


# (latent frames, frames per latent frame, causal decoder) -> per FRAMES choice (frames shown, latent frames read),
# worked out by hand: 5 frames are 2 latent frames at 4x (Wan, HunyuanVideo), 9 are 3 (CogVideoX), 7 are 2 at 6x
# (Mochi), 9 are 2 at 8x (LTX-Video). The middle of 5 frames is frame 2, in latent frame 1; of 9, frame 4, in latent
# frame 1 (at 4x and at 8x); of 7, frame 3. CogVideoX's decoders take an odd number of latent frames, so its
# middle reads 3, not 2. latent2rgb shows latent frames: the middle of 2 is latent frame 1, of 3 latent frame 1.
EXPECTED: dict[tuple[int, int, bool], list[tuple[int, int]]] = {
    (2, 4, True): [(1, 1), (1, 2), (5, 2), (2, 2)],
    (3, 4, True): [(1, 1), (1, 3), (9, 3), (2, 3)],
    (2, 6, True): [(1, 1), (1, 2), (7, 2), (2, 2)],
    (2, 8, True): [(1, 1), (1, 2), (9, 2), (2, 2)],
    (2, 4, False): [(1, 1), (1, 1), (2, 2), (2, 2)],
    (3, 4, False): [(1, 1), (1, 1), (3, 3), (2, 2)],
    (2, 6, False): [(1, 1), (1, 1), (2, 2), (2, 2)],
    (2, 8, False): [(1, 1), (1, 1), (2, 2), (2, 2)],
}
# (frames, frames per latent frame) -> latent frames, by hand as above
LATENT_FRAMES: dict[tuple[int, int], int] = {(5, 4): 2, (9, 4): 3, (7, 6): 2, (9, 8): 2}
# latent2rgb's preview side at 64 px: one pixel per latent pixel, 8x for most families, Wan 2.2 16x, LTX-Video 32x
LATENT2RGB_SIDE: dict[str, int] = {"wan22": 4, "ltxv": 2}


class Collect:
    """The run's events, as a page would see them."""

    def __init__(self) -> None:
        self.frames: list[Frame] = []

    def started(self, meta: Any) -> None: ...
    def row(self, row: StepRow) -> None: ...
    def frame(self, frame: Frame) -> None: self.frames.append(frame)
    def error(self, run_id: str, message: str) -> None: raise AssertionError(message)
    def ended(self, end: Any) -> None: ...


@pytest.fixture(scope="module", params=TINY_VIDEO)
def video(request) -> models.Model:
    return models.load(request.param, device="cpu")


def call(model: models.Model, callback: Any = None, steps: int = 4) -> np.ndarray:
    size = model.default_size
    kw: dict[str, Any] = dict(prompt="a red fox", num_inference_steps=steps, height=size, width=size,
                              num_frames=model.num_frames, guidance_scale=1.0, output_type="np",
                              generator=torch.Generator("cpu").manual_seed(0))
    if callback is not None:
        kw.update(callback_on_step_end=callback, callback_on_step_end_tensor_inputs=["latents"])
    with torch.inference_mode():
        return np.asarray(model.pipe(**kw).frames)


def check_rows(model: models.Model, decoder: str, rows: list[StepRow], frames: list[Frame]) -> None:
    latent = LATENT_FRAMES[(model.num_frames, model.space.temporal)]
    causal = decoder == "vae" or decoder == "taesd"  # a 3-D VAE and TAEHV; latent2rgb decodes frame by frame
    side = LATENT2RGB_SIDE.get(str(model.family), 8) if decoder == "latent2rgb" else 64
    assert len(rows) == len(FRAMES) and len(frames) == len(FRAMES)
    for row, frame, choice, (shown, read) in zip(rows, frames, FRAMES, EXPECTED[(latent, model.space.temporal, causal)]):
        assert (row.preview, row.frames, row.latent_frames) == (1, shown, read), (decoder, choice)
        assert (row.preview_width, row.preview_height) == (side, side), (decoder, choice)
        assert frame.frames == shown and sum(frame.sizes) == len(frame.data) == row.bytes
        at = 0
        for size in frame.sizes:  # every frame of the message is a whole JPEG
            assert frame.data[at:at + 2] == b"\xff\xd8" and frame.data[at + size - 2:at + size] == b"\xff\xd9"
            at += size
        assert 0 < row.decode_ms_per_frame <= row.decode_ms
        assert (frame.fps > 0) == (shown > 1)


def decoders_of(model: models.Model) -> list[DecoderName]:
    names: list[DecoderName] = ["latent2rgb", "vae"]
    return names + (["taesd"] if model.taesd is not None else [])


def test_watch_previews_each_frames_choice_and_leaves_the_clip_unchanged(video, tmp_path):
    clean = call(video)
    assert clean.shape[1] == video.num_frames  # (B, frames, H, W, 3)
    w = Watch(video.pipe, decoder="none", mode="sync")
    assert np.array_equal(call(video, w), clean)  # decoder none: bit-identical
    w.remove()
    tae = None
    if video.taesd is not None:  # a user's watch loads the TAE from madebyollin's file, named as published
        assert video.family is not None
        tae = str(tmp_path / f"{FAMILY_FILES[video.family]}.pth")
        torch.save(video.taesd.state_dict(), tae)
    for decoder in decoders_of(video):
        events = Collect()
        w = Watch(video.pipe, decoder=decoder, mode="sync", frames=FRAMES[0], fps=video.fps,  # type: ignore[arg-type]
                  taesd=tae if decoder == "taesd" else None)
        w.attach(events)

        def switching(p: Any, i: int, t: Any, kw: dict[str, Any], w: Watch = w) -> dict[str, Any]:
            out = w(p, i, t, kw)
            if i + 1 < len(FRAMES):
                w.controls.set(frames=FRAMES[i + 1])
            return out

        assert np.array_equal(call(video, switching), clean), decoder  # previews never touch the clip
        check_rows(video, decoder, w.rows, events.frames)
        w.remove()


@pytest.mark.parametrize("mode", ["sync", "overlap"])
def test_generate_previews_each_frames_choice(video, mode):
    """generate() is what the server's worker and the bench run."""
    settings = RunSettings(steps=len(FRAMES), width=video.default_size, height=video.default_size, guidance=1.0,
                           num_frames=video.num_frames, fps=video.fps, max_frames=MAX_NUM_FRAMES)
    for decoder in decoders_of(video):
        run_settings = RunSettings(**{**settings.__dict__, "preview": PreviewSettings(decoder=decoder, mode=mode)})

        from previewlab.preview.controls import Controls

        controls = Controls(run_settings.preview)

        # the frames setting for step i + 1 is set as step i's row comes out (in sync mode, before step i + 1)
        class RowThenSwitch(Gathered):
            def row(self, row: StepRow) -> None:
                super().row(row)
                if row.step < len(FRAMES):
                    controls.set(frames=FRAMES[row.step])

        controls.set(frames=FRAMES[0], note=False)
        told = RowThenSwitch() if mode == "sync" else Gathered()
        run = generate(RunContext(video, run_settings, f"v-{decoder}-{mode}", controls=controls), told)
        rows, frames = told.rows, told.frames
        assert run.record.meta.num_frames == video.num_frames and run.record.totals.status == "done"
        assert run.record.totals.frames_sent == sum(r.frames for r in rows)
        assert run.image is not None and run.image.shape == (video.default_size, video.default_size, 3)
        if mode == "sync":
            check_rows(video, decoder, rows, frames)
        else:  # overlap: a preview is made at the frames setting as it stood, or skipped while the pipeline is full
            assert rows[0].preview == 1  # nothing is in flight at the first step
            for r in rows:
                made = (r.preview, r.frames, r.latent_frames) == (1, 1, 1) and not r.skipped
                assert made or (r.skipped, r.preview, r.frames) == (1, 0, 0), r


@pytest.fixture(scope="module")
def wan() -> models.Model:
    return models.load("synthetic:tiny-wan21", device="cpu")


def test_the_server_streams_clips_switches_frames_live_and_limits_work_by_frames(make_app, wan):
    import asyncio
    import json

    import websockets

    from previewlab.server.ws.options import RunOptions
    from previewlab.server.ws.binary import unpack_frame
    from tests.conftest import live_server

    async def session(url: str) -> tuple[dict, list[tuple[dict, bytes]], list[dict], dict, list[str]]:
        frames, steps, errors = [], [], []
        async with websockets.connect(url, max_size=None) as ws:
            hello = json.loads(await ws.recv())
            # 5 frames x 4 steps x 64 x 64 = 81,920 pixel-steps: over the limit below
            await ws.send(json.dumps({"type": "start", "steps": 4, "num_frames": 5}))
            errors.append(json.loads(await ws.recv())["message"])
            await ws.send(json.dumps({"type": "start", "steps": 3, "num_frames": 5, "decoder": "vae",
                                      "frames": "all", "mode": "sync"}))
            done = None
            while done is None:
                m = await asyncio.wait_for(ws.recv(), 60)
                if isinstance(m, bytes):
                    header, data = unpack_frame(m)
                    frames.append((header, data))
                    if len(frames) == 1:
                        await ws.send(json.dumps({"type": "set", "frames": "middle"}))
                    await ws.send(json.dumps({"type": "ack", "seq": header["seq"]}))
                else:
                    msg = json.loads(m)
                    steps += [msg] if msg["type"] == "step" else []
                    done = msg if msg["type"] == "done" else None
        return hello, frames, steps, done, errors

    srv, app = make_app(model=wan, runs=RunOptions(max_pixel_steps=3 * 5 * 64 * 64))
    with live_server(app) as addr:
        hello, frames, steps, done, errors = asyncio.run(session(f"ws://{addr}/ws"))
    assert hello["video"] is True and hello["defaults"]["num_frames"] == 5 and hello["defaults"]["fps"] == 16
    assert hello["family"] == "wan21" and hello["max_frames"] == MAX_NUM_FRAMES
    assert errors == ["steps x width x height x frames = 4 x 64 x 64 x 5 = 81,920 pixel-steps, over this server's "
                      "limit of 61,440 (--max-pixel-steps); at 64x64 x 5 frames at most 3 steps fit"]
    # the live set applies at the first step whose callback begins after it arrived: step 2, or step 3 when the
    # sender's round trip outlasted step 2's denoising (a loaded machine)
    switched = next(i for i, s in enumerate(steps) if s["frames"] == 1)
    assert switched in (1, 2) and "set frames=middle" in steps[switched]["event"]
    assert done["status"] == "done" and done["num_frames"] == 5
    assert done["totals"]["frames_sent"] == 5 * switched + (3 - switched)
    first, data = frames[0]
    assert first["frames"] == 5 and len(first["sizes"]) == 5 and sum(first["sizes"]) == len(data)
    assert first["fps"] == pytest.approx(16.0)  # all 5 frames over the clip's 5 / 16 s
    # the live set: the middle frame alone, from then on
    assert [h["frames"] for h, _ in frames] == [5] * switched + [1] * (3 - switched)
    assert [s["frames"] for s in steps] == [5] * switched + [1] * (3 - switched)
    assert [s["latent_frames"] for s in steps] == [2, 2, 2]


@pytest.mark.parametrize("choice,frames", [("all", [0, 1, 2, 3, 4]), ("middle", [2]), (2, [0, 4])])
def test_a_clip_preview_of_the_last_latents_is_the_pipelines_own_clip(wan, choice, frames):
    """Pixels, not only counts: at the last step the vae preview of the latents (PNG, lossless) shows the very
    frames the pipeline decodes (Wan's causal VAE: exact to a level of rounding), the middle one for `middle`."""
    import io

    from PIL import Image

    steps = 2
    events = Collect()
    w = Watch(wan.pipe, decoder="vae", frames=choice, target="latents", encoder="png", mode="sync", every=steps)
    w.attach(events)
    try:
        clip = call(wan, w, steps=steps)[0]  # (frames, H, W, 3) in [0, 1]
    finally:
        w.remove()
    (frame,) = events.frames
    at, shown = 0, []
    for size in frame.sizes:
        shown.append(np.asarray(Image.open(io.BytesIO(frame.data[at:at + size])).convert("RGB")).astype(int))
        at += size
    want = [np.round(clip[k] * 255).astype(int) for k in frames]
    assert len(shown) == len(want)
    for got, ref in zip(shown, want):
        assert np.abs(got - ref).max() <= 1
