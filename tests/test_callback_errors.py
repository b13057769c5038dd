"""Issue 56, hole 6: a script whose own step callback raises. The run ends failed with the rows it made, the user
gets their own error back unchanged, and the next call works from any thread (a worker pool's). The real pattern:
a diffusers pipeline of tiny components, the user's callback beside the watch in MultiPipelineCallbacks, calls
made on real worker threads, the real embedded server's run list."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import torch
from diffusers.callbacks import MultiPipelineCallbacks, PipelineCallback

from previewlab import serve, watch as preview_watch
from previewlab.preview.call.callback import Watch
from tests.test_script_runs import settled


@pytest.fixture()
def pipe() -> Any:
    from previewlab.preview.models import synthetic_pipeline

    return synthetic_pipeline("synthetic:tiny")  # a plain StableDiffusionPipeline of tiny components


class Raises(PipelineCallback):  # type: ignore[misc]
    """A user's own step callback that raises `exc` at step `at` (0-based), after the watch has seen that step."""
    tensor_inputs = ["latents"]

    def __init__(self, at: int, exc: BaseException) -> None:
        super().__init__()
        self.at, self.exc = at, exc

    def callback_fn(self, pipeline: Any, step_index: int, timestep: Any, kw: dict[str, Any]) -> dict[str, Any]:
        if step_index == self.at:
            raise self.exc
        return kw


def call(pipe: Any, cb: Any) -> Any:
    return pipe("a cat", num_inference_steps=4, height=64, width=64, callback_on_step_end=cb,
                generator=torch.Generator().manual_seed(3)).images[0]


def call_and_save(pipe: Any, w: Watch, path: Path) -> Path:
    return w.save(call(pipe, w), path)


def steps_written(data: Path, run_id: str) -> int:
    return len((data / run_id / "steps.csv").read_text().strip().splitlines()) - 1


def test_a_users_callback_that_raises_ends_the_run_failed_and_another_thread_calls_next(pipe, tmp_path):
    """The user's callback raises at step 3 of 4 on a worker thread: the error comes back to the user as raised,
    the run is failed at once with that error and its 3 rows, and a call from another worker thread runs whole
    (before the fix: the run stayed `running` and that call was refused as 'already running on another
    thread')."""
    mine = RuntimeError("my callback: out of budget")
    w = preview_watch(pipe, decoder="latent2rgb", mode="sync")
    page = serve(w, port=0, data_dir=tmp_path)
    try:
        with ThreadPoolExecutor(1) as first, ThreadPoolExecutor(1) as second:
            raised = first.submit(call, pipe, MultiPipelineCallbacks([w, Raises(2, mine)])).exception(60)
            assert raised is mine and str(raised) == "my callback: out of budget"  # unchanged, not wrapped
            assert w.state == "idle" and w.call_thread is None
            (failed,) = settled(page, 1)
            assert failed["status"] == "failed" and failed["error"] == "RuntimeError: my callback: out of budget"
            assert steps_written(tmp_path, failed["run_id"]) == 3  # the steps it ran, kept
            second.submit(call_and_save, pipe, w, tmp_path / "next.png").result(60)
        by_id = {r["run_id"]: r for r in settled(page, 2)}
        (done,) = [r for r in by_id.values() if r["run_id"] != failed["run_id"]]
        assert done["status"] == "done" and steps_written(tmp_path, done["run_id"]) == 4
        assert by_id[failed["run_id"]]["status"] == "failed"
    finally:
        w.remove()
    assert "progress_bar" not in vars(pipe)  # the user's pipeline as it was


class Abort(BaseException):
    """Not an Exception (as SystemExit and KeyboardInterrupt are not): no hook is handed it."""


def test_a_call_whose_thread_left_it_unseen_is_failed_when_another_thread_calls(pipe, tmp_path):
    """A BaseException from the user's callback passes every hook. The worker thread has left the pipeline call,
    so another thread's call ends that run as failed, saying so, and runs (before the fix: refused)."""
    w = preview_watch(pipe, decoder="none", mode="sync")
    page = serve(w, port=0, data_dir=tmp_path)
    try:
        with ThreadPoolExecutor(1) as first, ThreadPoolExecutor(1) as second:
            assert isinstance(first.submit(call, pipe, MultiPipelineCallbacks([w, Raises(1, Abort())])).exception(60),
                              Abort)
            second.submit(call_and_save, pipe, w, tmp_path / "next.png").result(60)
        listed = settled(page, 2)
        first_run = min(listed, key=lambda r: r["run_id"])
        assert first_run["status"] == "failed" and "left the pipeline call" in first_run["error"]
        assert steps_written(tmp_path, first_run["run_id"]) == 2
        assert [r["status"] for r in listed if r is not first_run] == ["done"]
    finally:
        w.remove()
