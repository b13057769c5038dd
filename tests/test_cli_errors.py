"""Issue 23, item 10: every bad flag of `previewlab serve` and `previewlab bench` is one line and exit status 2,
never a traceback; a port another program holds is said before the model loads and before any URL is printed."""
from __future__ import annotations

import signal
import socket
import subprocess
import sys
from typing import Any

import pytest

from previewlab import cli
from tests.conftest import previewlab, previewlab_here, wait_until


def one_line(p, needle: str) -> None:
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert len(lines) == 1 and needle in lines[0], p.stderr
    assert "http://" not in p.stdout


@pytest.mark.parametrize("args,needle", [
    (("--port", "99999"), "99999: --port must be from 0 to 65535"),
    (("--port", "http"), "'http': --port must be a number from 0 to 65535"),
    (("--max-side", "12"), "12: --max-side must be from 64 to 2048"),
    (("--max-clients", "0"), "0: --max-clients must be from 1 to 10000"),
    (("--inflight", "0"), "0: --inflight must be from 1 to 64"),
    (("--send-timeout=-1",), "-1: --send-timeout must be from 0.1 to 3600"),
    (("--seed=-3",), "-3: --seed must be from 0 to 4294967295"),
    (("--noise-limit", "0"), "0: --noise-limit must be from 0.1 to 100"),
])
def test_bad_serve_flags_are_one_line(args, needle, capsys):
    """The parser in this process, as the console command calls it (one real process below says the same)."""
    try:
        code = cli.main(["serve", "--model", "synthetic:tiny", *args])
    except SystemExit as e:  # argparse's own exit, as the console command would end
        code = e.code if isinstance(e.code, int) else 2
    out = capsys.readouterr()
    one_line(subprocess.CompletedProcess(args, code, out.out, out.err), needle)


def test_a_bad_flag_is_one_line_from_the_console_command_too():
    one_line(previewlab("serve", "--model", "synthetic:tiny", "--port", "99999", timeout=120),
             "99999: --port must be from 0 to 65535")


def test_a_port_in_use_is_one_line_before_the_url():
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen(1)
        port = held.getsockname()[1]
        p = previewlab("serve", "--model", "synthetic:tiny", "--port", str(port), timeout=120)
    one_line(p, f"--host 127.0.0.1 --port {port}: address already in use; another server may hold it")


@pytest.mark.slow
def test_bench_out_that_cannot_be_made_is_one_line():
    one_line(previewlab("bench", "--model", "synthetic:tiny", "--out", "/proc/nope", timeout=120),
             "--out /proc/nope: No such file or directory")


@pytest.mark.slow
def test_ctrl_c_while_the_model_loads_is_a_stop_not_a_traceback(tmp_path):
    import time

    # a shell that starts the suite in the background ignores SIGINT, and its children inherit that; a person's
    # terminal delivers it: the server starts with SIGINT's default, as from a terminal. Its own data folder: a
    # server that outlived this test held the checkout's runs/, and `make serve` in the next test could not start
    p = subprocess.Popen([sys.executable, "-m", "previewlab", "serve", "--model", "synthetic:sd15", "--port", "0",
                          "--data-dir", str(tmp_path / "runs")],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    time.sleep(3)  # inside the load: building SD1.5's 1 B parameters takes longer
    p.send_signal(signal.SIGINT)
    try:
        out, err = p.communicate(timeout=60)
    finally:
        p.kill()
    # exit status 130, or killed by the SIGINT itself (a signal that lands as Python exits): a shell reports
    # both as 130, the status of a stop by Ctrl-C; either way one line, no traceback
    assert p.returncode in (130, -signal.SIGINT), (p.returncode, err)
    assert "Traceback" not in err and "previewlab serve: stopped" in err.splitlines(), err
    assert "http://" not in out


class Finalizer:
    """Ctrl-C while its __del__ runs, as the SIGINT in the test above once landed in a tokenizer's finalizer."""

    def __del__(self) -> None:
        signal.raise_signal(signal.SIGINT)


def test_a_ctrl_c_that_lands_in_a_finalizer_still_stops_the_load(monkeypatch):
    from previewlab.server.cli import ctrl_c_kept

    ignored: list[type[BaseException] | None] = []

    def record(u: Any) -> None:
        ignored.append(u.exc_type)

    monkeypatch.setattr(sys, "unraisablehook", record)
    # SIGINT as a terminal leaves it (a suite started in the background by a shell inherits it ignored)
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        f = Finalizer()
        del f  # without the guard Python reports the KeyboardInterrupt as ignored, and goes on
        assert ignored == [KeyboardInterrupt]
        with pytest.raises(KeyboardInterrupt):
            with ctrl_c_kept():
                f = Finalizer()
                del f
        assert ignored == [KeyboardInterrupt]  # the stop is raised at the block's end, not reported as ignored
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler and sys.unraisablehook is record
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a background job's SIGINT stays ignored inside the guard
        with ctrl_c_kept():
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            f = Finalizer()
            del f
        assert ignored == [KeyboardInterrupt]
    finally:
        signal.signal(signal.SIGINT, before)


# Issue 35 item 8: each --model mistake is one line that says what is wrong, asked in-process of the loader
def test_a_model_path_that_is_not_there_says_so(tmp_path):
    from previewlab.preview.models import ModelError, load

    for missing in (tmp_path / "nowhere", tmp_path / "model.safetensors", "./not/here"):
        with pytest.raises(ModelError) as e:
            load(str(missing), device="cpu")
        assert str(e.value).startswith(f"--model: no such file or folder: {missing}; give a local diffusers folder")
        assert "\n" not in str(e.value) and "model_index.json" not in str(e.value)


def test_a_file_that_is_not_a_checkpoint_says_what_one_is(tmp_path):
    from previewlab.preview.models import ModelError, load

    notes = tmp_path / "notes.txt"
    notes.write_text("not weights")
    with pytest.raises(ModelError) as e:
        load(str(notes), device="cpu")
    assert str(e.value) == f"--model: a checkpoint is a .safetensors or .ckpt file (or FLUX's .sft): {notes}"


@pytest.mark.parametrize("typed,meant", [("demoo", "demo"), ("synthetic:smal", "synthetic:small"),
                                         ("sythetic:tiny", "synthetic:tiny"), ("synthetic:tiny-flx1", "synthetic:tiny-flux1")])
def test_a_name_close_to_a_known_one_is_offered(typed, meant):
    from previewlab.preview.models import ModelError, load

    with pytest.raises(ModelError) as e:
        load(typed, device="cpu")
    assert f"did you mean {meant}?" in str(e.value) and "\n" not in str(e.value)


def test_an_unknown_preset_lists_the_names_and_says_where_the_bench_ones_are_described():
    from previewlab.preview.models import KNOWN, ModelError, load

    with pytest.raises(ModelError) as e:
        load("synthetic:zzzzzzzzzzzzzzzz", device="cpu")
    said = str(e.value)
    assert said.startswith("unknown synthetic model 'synthetic:zzzzzzzzzzzzzzzz' (allowed: demo, synthetic:tiny, ")
    assert "did you mean" not in said and all(name in said for name in KNOWN)
    assert said.endswith("for the bench's SDXL measurements at 1024 px also synthetic:sdxl and "
                         "synthetic:tiny-xl-real-taesd, described in docs/gpu-check.md)")


def test_a_folder_without_weights_says_what_is_missing_not_variant(tmp_path):
    """A folder with model_index.json but no weight files was told to pass --variant fp16; it is told which
    components have no weights now, and --variant only where another variant's files are really there."""
    import json

    import torch

    from previewlab.preview.models import ModelError, load, synthetic_pipeline

    folder = tmp_path / "sd"
    synthetic_pipeline("synthetic:tiny").save_pretrained(str(folder))
    for part in ("vae", "text_encoder"):  # the unet keeps its weights
        for f in (folder / part).iterdir():
            if f.name.endswith((".safetensors", ".bin")):
                f.unlink()
    assert json.loads((folder / "model_index.json").read_text())["vae"] == ["diffusers", "AutoencoderKL"]
    with pytest.raises(ModelError) as e:
        load(str(folder), device="cpu")
    said = str(e.value)
    assert "no weights for text_encoder, vae (no .safetensors, .bin, .ckpt, .pth file in text_encoder/, vae/)" in said
    assert "--variant" not in said and "\n" not in said, said
    torch.save({}, folder / "vae" / "diffusion_pytorch_model.fp16.bin")  # fp16 files there: --variant is offered
    with pytest.raises(ModelError) as e:
        load(str(folder), device="cpu")
    said = str(e.value)
    assert "no weights for text_encoder (" in said and "its fp16 files load with --variant fp16" in said, said


@pytest.mark.parametrize("args,said", [
    # each of these ran before: a traceback, a silent default (steps 0 ran 8), or a negative crowd accepted
    (("gpu-check", "--dry-run", "--steps", "0"),
     "previewlab gpu-check: argument --steps: 0: steps must be from 1 to 1000"),
    (("gpu-check", "--dry-run", "--repeats", "-1"),
     "previewlab gpu-check: argument --repeats: -1: repeats must be from 1 to 1000"),
    (("load", "--clients", "-1"), "previewlab load: argument --clients: -1: clients must be from 1 to 1000"),
    (("load", "--pairs", "0"), "previewlab load: argument --pairs: 0: pairs must be from 1 to 100"),
    (("load", "--decoder", "none"), "previewlab load: argument --decoder: invalid choice: 'none' (choose from "
                                    "'latent2rgb', 'taesd', 'vae')"),
    (("load", "--timeout", "nan"), "previewlab load: argument --timeout: 'nan' is not a finite number"),
    (("train-demo", "--threads", "0"), "previewlab train-demo: argument --threads: 0: threads must be from 1 to 1024"),
    (("train-demo", "--check", "x", "--guidance", "99"),
     "previewlab train-demo: argument --guidance: 99: guidance must be from 0 to 30"),
])
def test_the_tools_refuse_a_bad_flag_in_one_line(args, said):
    p = previewlab_here(*args)
    assert (p.returncode, p.stderr, p.stdout) == (2, said + "\n", "")


def test_the_preview_memory_bench_refuses_a_missing_latents_file(tmp_path, capsys):
    from previewlab.bench.preview_memory import main

    with pytest.raises(SystemExit) as e:
        main(["--what", "clip", "--latents", str(tmp_path / "none.pth")])
    assert e.value.code == 2 and capsys.readouterr().err == (
        f"python -m previewlab.bench.preview_memory: --latents {tmp_path / 'none.pth'}: no such file; give a clip's "
        "latents (B, C, T, h, w), or --what image\n")


@pytest.mark.slow
def test_port_0_prints_the_port_it_listens_on(tmp_path):
    """Issue 45, item 14: `--port 0` printed open http://127.0.0.1:0/, which no browser opens, and never the
    port the system picked. The URL printed now names the bound port, and the page answers there."""
    import re
    import urllib.request

    p = subprocess.Popen([sys.executable, "-m", "previewlab", "serve", "--model", "synthetic:tiny", "--port", "0",
                          "--data-dir", str(tmp_path / "runs")], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    try:
        assert p.stdout is not None
        line = p.stdout.readline()  # the model's line: it says where to open the page
        found = re.search(r"open (http://127\.0\.0\.1:(\d+)/);", line)
        assert found and int(found[2]) > 0, line

        def page() -> bytes:  # the URL is printed just before uvicorn starts listening on it
            try:
                with urllib.request.urlopen(found[1], timeout=5) as r:
                    return r.read()
            except OSError:
                return b""

        wait_until(lambda: b"previewlab" in page(), 60, f"the page at {found[1]}")
    finally:
        p.send_signal(signal.SIGINT)
        p.communicate(timeout=60)
