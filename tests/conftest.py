from __future__ import annotations

import base64
import contextlib
import csv
import io
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

import pytest

from previewlab.preview.models import Model, load
from previewlab.preview.record.records import STEP_COLUMNS

if TYPE_CHECKING:
    from previewlab.server.core.limits import SessionLimits

pytest_plugins = ["tests.browser_fixtures"]  # chromium and tabs: the browser tests' one setup


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist (make test runs -n auto) each worker takes its share of the cores, and so do the
    processes it starts: torch's default, a thread per core in every worker, stalls them against each other
    (2 workers on 2 cores: 1,222 s instead of 523 s serial, measured 2026-12-03)."""
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if workers:
        import torch

        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        share = max(1, cores // int(workers))  # the cores this process may use, as -n auto counts them
        os.environ["OMP_NUM_THREADS"] = str(share)
        torch.set_num_threads(share)


@pytest.fixture(scope="session")
def tiny() -> Model:
    return load("synthetic:tiny", device="cpu")


@pytest.fixture(scope="session")
def tiny_xl() -> Model:
    return load("synthetic:tiny-xl", device="cpu")


@pytest.fixture(scope="session")
def modular_folder(tmp_path_factory: Any) -> Path:
    """A real Modular pipeline folder (modular_model_index.json): tiny-xl's SDXL components in
    StableDiffusionXLAutoBlocks, written by ModularPipeline.save_pretrained."""
    from diffusers.modular_pipelines import StableDiffusionXLAutoBlocks

    xl = load("synthetic:tiny-xl", device="cpu")
    blocks: Any = StableDiffusionXLAutoBlocks()
    pipe = blocks.init_pipeline()
    pipe.update_components(**{k: v for k, v in xl.pipe.components.items() if v is not None})
    folder = tmp_path_factory.mktemp("modular") / "tiny-xl-modular"
    pipe.save_pretrained(str(folder))
    return folder


ROOT = Path(__file__).resolve().parents[1]


def previewlab(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """The console command as a user runs it, in a subprocess from the repository root."""
    return subprocess.run([sys.executable, "-m", "previewlab", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def previewlab_here(*args: str) -> subprocess.CompletedProcess[str]:
    """The same command run in this process (previewlab.cli.main): its parser, its output, its exit code, without
    the 3.5 s a new interpreter spends importing torch. For what a command does; what a process does (a signal,
    a kill, the console script) keeps previewlab(). torch's thread count comes back as it was (--threads)."""
    import torch

    from previewlab.cli import main

    out, err, threads = io.StringIO(), io.StringIO(), torch.get_num_threads()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as e:  # argparse's refusals
            code = e.code if isinstance(e.code, int) else 0 if e.code is None else 1
        finally:
            torch.set_num_threads(threads)
    return subprocess.CompletedProcess(["previewlab", *args], code, out.getvalue(), err.getvalue())


def wait_until(ready: Callable[[], bool], timeout_s: float = 30.0, what: str = "the condition") -> None:
    """Poll `ready` until it holds: a test waits for the state it needs instead of sleeping a guessed time."""
    deadline = time.monotonic() + timeout_s
    while not ready():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.01)


@contextlib.contextmanager
def live_server(app, host: str = "127.0.0.1", sndbuf: int | None = None, port: int = 0, **config) -> Iterator[str]:
    """A real uvicorn on a free loopback port, in a thread; yields "host:port".

    sndbuf: the kernel send buffer of accepted sockets (they inherit the listener's), so a peer that stops
    reading blocks the server's writes after kilobytes instead of the megabytes Linux allows by default.
    port: 0 for a free one; a given one lets a test restart a server where a page reconnects to it.
    config: more uvicorn.Config keywords (server.http11.connection_limits(), for one)."""
    import uvicorn

    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if sndbuf:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
    sock.bind((host, port))
    port = sock.getsockname()[1]
    # uvicorn's own keepalive pings would also drop a stuck peer (after 40 s); tests look at previewlab's timeout
    config = {"ws_ping_interval": 600, **config}
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning", ws_max_size=64 * 1024,
                                           **config))
    t = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    t.start()
    wait_until(lambda: server.started or not t.is_alive(), 30, "uvicorn to start")
    if not server.started:
        raise RuntimeError("uvicorn did not start")
    try:
        yield f"{host}:{port}"
    finally:
        server.should_exit = True
        t.join(30)
        sock.close()


@pytest.fixture
def make_app(tiny, tmp_path):
    from previewlab.server.app import build_app
    from previewlab.server.server import Server
    from previewlab.server.http.guard import Access

    def make(data_dir: Path | None = None, model=None, *, access: Access = Access(hosts=("testserver",)), **kw):
        """access: Starlette's TestClient sends Host: testserver; kw: the Server's other typed parts."""
        srv = Server(model or tiny, data_dir or tmp_path / "runs", access=access, **kw)
        return srv, build_app(srv)

    return make


def acks_not_awaited() -> SessionLimits:
    """Limits for a test client that never acks its frames (the page acks each in milliseconds): a run's end
    waits for no ack, where the default waits SessionLimits.ack_wait_s (1 s) for one that never comes."""
    from previewlab.server.core.limits import SessionLimits

    return SessionLimits(ack_wait_s=0.0)


# Starlette's TestClient connects from "testclient", not loopback: it must send a same-origin Origin
SAME_ORIGIN = {"origin": "http://testserver"}


def raw_ws(addr: str, rcvbuf: int | None = None, sndbuf: int | None = None) -> socket.socket:
    """A WebSocket handshake by hand; the socket is left just past the 101's head."""
    host, port = addr.rsplit(":", 1)
    s = socket.socket()
    for opt, size in ((socket.SO_RCVBUF, rcvbuf), (socket.SO_SNDBUF, sndbuf)):
        if size:
            s.setsockopt(socket.SOL_SOCKET, opt, size)  # before connect: the window follows it
    s.connect((host, int(port)))
    key = base64.b64encode(os.urandom(16)).decode()
    s.sendall(f"GET /ws HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
              f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        head += s.recv(1)
    assert head.startswith(b"HTTP/1.1 101"), head
    return s


GOOD = "20261130-120000-001"  # a run id as the store names folders


def make_run(root: Path, rid: str, meta: object = "auto", steps: str | bytes | None = "auto",
             guidance: float = 7.5) -> Path:
    d = root / rid
    d.mkdir(parents=True)
    if meta == "auto":
        meta = {"run_id": rid, "status": "done", "steps": 2, "guidance": guidance}
    if isinstance(meta, bytes):
        (d / "meta.json").write_bytes(meta)
    elif meta is not None:
        (d / "meta.json").write_text(json.dumps(meta))
    if steps == "auto":
        buf = io.StringIO()
        w = csv.writer(buf)
        w.writerow(STEP_COLUMNS)
        for step in (1, 2):
            w.writerow([rid if c == "run_id" else step if c == "step" else "" for c in STEP_COLUMNS])
        steps = buf.getvalue()
    if isinstance(steps, bytes):
        (d / "steps.csv").write_bytes(steps)
    elif steps is not None:
        (d / "steps.csv").write_text(steps)
    return d


def recv_until(ws, kind: str, limit: int = 10_000) -> dict:
    for _ in range(limit):
        m = ws.receive()
        if m.get("text") is not None:
            msg = json.loads(m["text"])
            if msg["type"] == kind:
                return msg
    raise AssertionError(f"no {kind} message")
