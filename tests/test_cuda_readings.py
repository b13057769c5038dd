"""What the CUDA paths read and compare, checked on the CPU: device constants, the hidden-syncs check's
attribution, and the profiler reference's like-with-like comparison."""
from __future__ import annotations

import warnings
from typing import Any

import torch
import torch.nn.functional as F

from previewlab.bench.gpu.reference import Span, compare
from previewlab.bench.gpu.syncs import caught_syncs
from previewlab.preview.models.unscaling import constant
from previewlab.preview.frames import to_uint8_hwc
from previewlab.preview.record.records import StepRow


class OnCuda0(torch.Tensor):
    """A buffer torch reports on cuda:0 (a FLUX.2 VAE's batch-norm statistics); records any move to the host."""
    moves: list[str] = []

    @property
    def device(self) -> torch.device:  # type: ignore[override]
        return torch.device("cuda", 0)

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name in ("cpu", "pin_memory") or (name == "to" and "cpu" in map(str, (*args[1:], *kwargs.values()))):
            cls.moves.append(name)
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **kwargs)


def test_a_device_buffer_is_cast_on_the_device_however_the_device_is_named():
    buf = torch.tensor([0.5, 2.0]).as_subclass(OnCuda0)
    OnCuda0.moves.clear()
    out = constant(buf, torch.device("cuda"), torch.float16)  # the pipeline's device often has no index
    assert OnCuda0.moves == []  # a copy through the host would block the step callback
    assert out.dtype == torch.float16 and torch.equal(out.float(), torch.tensor([0.5, 2.0]))


def test_a_sync_inside_torch_or_diffusers_code_is_still_previewlabs(monkeypatch):
    """torch reports a sync at the innermost Python frame; one inside F.interpolate, called by the frame
    conversion, is the frame conversion's."""
    real = F.interpolate

    def syncing(*a: Any, **k: Any) -> Any:
        warnings.warn("called a synchronizing CUDA operation", UserWarning)
        return real(*a, **k)

    monkeypatch.setattr(F, "interpolate", syncing)
    with caught_syncs() as found:
        to_uint8_hwc(torch.rand(3, 32, 32), preview_max=16)  # downscales: calls F.interpolate
        warnings.warn("called a synchronizing CUDA operation", UserWarning)  # from no previewlab code
    assert len(found) == 1 and found[0].startswith("frames.py:"), found


def test_the_reference_compares_event_times_with_the_gpu_span_and_has_no_sync_row():
    rows = [StepRow("r", 1, 0.0, preview=1, denoise_ms=10.0, decode_ms=4.0, sync_ms=0.0, encode_ms=1.0)]
    found = [Span("denoise", 0.0, 200.0, kernel_us=8000.0), Span("denoise", 0.0, 10000.0, gpu=True),
             Span("decode", 1.0, 100.0, kernel_us=3000.0), Span("decode", 1.0, 4000.0, gpu=True),
             Span("sync", 2.0, 9000.0), Span("encode", 3.0, 1000.0)]
    checks = {c.stage: c for c in compare(rows, found, cuda=True)}
    assert "sync" not in checks  # sync_ms is a wait's untimed part; the range holds the whole wait
    # the span the events bound, launch gaps included, not the kernels' sum (8 ms and 3 ms)
    assert (checks["denoise"].basis, checks["denoise"].profiler_ms) == ("gpu span", 10.0)
    assert (checks["decode"].basis, checks["decode"].profiler_ms) == ("gpu span", 4.0)
    assert (checks["encode"].basis, checks["encode"].profiler_ms) == ("cpu", 1.0)


def test_a_sync_inside_preview_models_code_is_previewlabs_too(monkeypatch):
    """The decoders under preview/models/ (TAEHV, TAESD, the latent spaces) run every step too: a sync there is
    per-step code's. Before, only files directly in preview/ were attributed, so these were never caught."""
    from previewlab.preview.models.taehv import TAEHV
    from previewlab.preview.models.taehv_files import Layout

    real = F.pixel_shuffle

    def syncing(*a: Any, **k: Any) -> Any:
        warnings.warn("called a synchronizing CUDA operation", UserWarning)
        return real(*a, **k)

    monkeypatch.setattr(F, "pixel_shuffle", syncing)
    tae = TAEHV(Layout(48, 2, (1, 2, 2))).eval()  # taew2_2's patch 2: the decode ends in a pixel shuffle
    with caught_syncs() as found, torch.inference_mode():
        tae(torch.randn(1, 1, 48, 2, 2))
    assert len(found) == 1 and found[0].startswith("taehv.py:"), found
