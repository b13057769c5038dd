"""previewlab serve: the live preview page and its WebSocket on 127.0.0.1:8000."""
from __future__ import annotations

import argparse
import contextlib
import logging
import signal
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator, NoReturn, Sequence

from previewlab.preview.judging.estimates import NOISE_LIMIT_PCT
from previewlab.preview.settings import MAX_SIDE, MIN_SIDE

from previewlab.server.core.limits import DEFAULT_KEEP_RUNS, DEFAULT_MAX_PIXEL_STEPS

if TYPE_CHECKING:
    from previewlab.server.http.guard import Access
    from previewlab.server.server import Server


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"previewlab serve: {message}\n")


def ranged(flag: str, lo: float, hi: float, kind: type = int) -> Callable[[str], float]:
    """A number flag from lo to hi: anything else is one line naming the flag and its range, never a traceback
    later (a port past 65535 overflowed in the socket layer; a --max-side under 64 failed as a width)."""
    span = f"from {kind(lo)} to {kind(hi)}"

    def parse(text: str) -> float:
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: {flag} must be a number {span}") from None
        if not lo <= v <= hi:
            raise argparse.ArgumentTypeError(f"{text}: {flag} must be {span}")
        return v
    parse.__name__ = flag
    return parse


def device_value(text: str) -> str:
    """--device: auto and cpu at once; an accelerator only where torch sees it (the model stack loads to ask)."""
    if text in ("auto", "cpu"):
        return text
    from previewlab.preview.models import device_arg

    return device_arg(text)


def parser() -> Parser:
    p = Parser(prog="previewlab serve", description=__doc__, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--model", default="demo",
                   help="demo (the shipped demo model: real pictures, a small model's costs), a synthetic preset (synthetic:small, synthetic:sd15, synthetic:tiny-flux1, ...), a local "
                        "diffusers folder, a repo id in the local Hugging Face cache, or a single-file checkpoint "
                        "(.safetensors, .ckpt)")
    p.add_argument("--variant", default=None, help="weights variant of a local folder (fp16); found by itself "
                   "when a folder holds only variant files")
    p.add_argument("--config", default=None, help="for a single-file checkpoint: a local diffusers folder (or cached "
                   "repo id) of its family whose configs and tokenizers to use; SD 1.x/2.x/XL have shipped ones")
    p.add_argument("--taesd", default=None, help="TAESD weights: AutoencoderTiny folder or taesd_decoder.pth/.safetensors")
    p.add_argument("--device", type=device_value, default="auto",
                   help="auto (CUDA when torch sees one, else cpu), cpu, or cuda, mps, xpu where torch sees them")
    p.add_argument("--dtype", choices=("float32", "float16", "bfloat16"), default="float32")
    p.add_argument("--offload", choices=("none", "model", "sequential"), default="none",
                   help="diffusers CPU offload (CUDA only)")
    p.add_argument("--compile", choices=("none", "decoder"), default="none", help="torch.compile the preview decoder")
    p.add_argument("--channels-last", action="store_true", help="channels-last memory format for the models")
    p.add_argument("--inflight", type=ranged("--inflight", 1, 64), default=2,
                   help="overlap mode: most previews in flight at once")
    p.add_argument("--seed", type=ranged("--seed", 0, 2**32 - 1), default=0, help="seed of synthetic weights")
    p.add_argument("--host", default="127.0.0.1", help="address to bind; beyond loopback needs --allow-remote")
    p.add_argument("--allow-remote", action="store_true",
                   help="allow binding beyond loopback; then a token is required on the page and the WebSocket")
    p.add_argument("--token", default=None, help="a token the page and WebSocket must carry: with --allow-remote generated and printed unless given; "
                        "on loopback only when given (behind a local reverse proxy)")
    p.add_argument("--allow-host", action="append", default=[],
                   help="an extra Host name the server answers to (repeatable); loopback names always work")
    p.add_argument("--forwarded-allow-ips", default=None, metavar="ADDRESSES",
                   help="reverse proxies whose X-Forwarded-For names the client, comma-separated addresses or "
                        "networks (127.0.0.1,10.0.0.0/8; '' for none): the per-address limits then count each "
                        "client, and a token is required. Default: $FORWARDED_ALLOW_IPS, else none (the header "
                        "is ignored from everyone)")
    p.add_argument("--max-clients", type=ranged("--max-clients", 1, 10_000), default=32,
                   help="most WebSocket watchers at once")
    p.add_argument("--port", type=ranged("--port", 0, 65535), default=8000, help="0: a free port")
    p.add_argument("--data-dir", type=Path, default=Path("runs"), help="where runs and their CSVs are kept")
    p.add_argument("--max-side", type=ranged("--max-side", MIN_SIDE, MAX_SIDE), default=1024,
                   help="largest width or height a client may ask for")
    p.add_argument("--send-timeout", type=ranged("--send-timeout", 0.1, 3600, float), default=10.0,
                   help="seconds before a client that stopped reading is closed")
    p.add_argument("--max-pixel-steps", type=int, default=DEFAULT_MAX_PIXEL_STEPS,
                   help="most steps x width x height one start may ask for (0: no limit); the default is 64 steps "
                        "at 1024x1024, 256 at 512x512, 1000 at 256x256")
    p.add_argument("--shutdown-grace", type=ranged("--shutdown-grace", 0, 3600, float), default=10.0,
                   help="seconds SIGTERM waits for the run's current step and final image; after that the run is "
                        "recorded interrupted with its rows and the process exits")
    p.add_argument("--keep-runs", type=int, default=DEFAULT_KEEP_RUNS,
                   help="run folders kept in --data-dir (0: keep all); past it, runs that took under 1 s go first, "
                        "oldest first, then the oldest; the newest and any with a file named pinned are kept")
    p.add_argument("--noise-limit", type=ranged("--noise-limit", 0.1, 100, float), default=NOISE_LIMIT_PCT,
                   help="percent: no-preview baselines whose IQR over median is above it mark the machine NOISY, "
                        "and no advice is derived from its figures (as the bench's --noise-limit)")
    return p


def listener(host: str, port: int) -> socket.socket:
    """The server's socket, bound before the model loads: a port in use is said at once and before any URL is
    printed, the port is held while the model loads, and port 0's real port is known for the URL. uvicorn
    listens on it. Raises OSError."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds: a closed socket's TIME_WAIT is no owner
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


@contextlib.contextmanager
def ctrl_c_kept() -> Iterator[None]:
    """A Ctrl-C inside the block stops it, even one that lands in a finalizer: Python prints an exception raised
    in a __del__ as "Exception ignored" and goes on, so a KeyboardInterrupt there was lost and the server started
    anyway (a tokenizer's regex finalizer, seen while SD1.5 built). The handler also remembers it, and the
    block's end raises it again. A SIGINT that is ignored (a shell's background job) stays ignored."""
    caught = False

    def interrupt(signum: int, frame: object) -> None:
        nonlocal caught
        caught = True
        raise KeyboardInterrupt

    def unraisable(u: sys.UnraisableHookArgs) -> None:  # the lost stop is raised again: no traceback for it
        if u.exc_type is not KeyboardInterrupt:
            hook(u)

    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield
        return
    hook = sys.unraisablehook
    signal.signal(signal.SIGINT, interrupt)
    sys.unraisablehook = unraisable
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        sys.unraisablehook = hook
    if caught:
        raise KeyboardInterrupt


BENCH_FILES = ("runs.csv", "steps.csv")  # a bench's --out: every run in these two, where a data folder has a folder a run


def bench_folder(data_dir: Path) -> str:
    """Why `data_dir` cannot be served ("" when it can): a bench's --out keeps its runs in one runs.csv and one
    steps.csv, with their roles and pairs, where the server keeps a folder per run. The page would list none of
    them, and the server's lock and run folders would be written into the bench's. `previewlab report` reads it."""
    if not (data_dir / BENCH_FILES[0]).is_file():
        return ""
    return (f"--data-dir {data_dir}: a bench folder (its runs are in {data_dir / BENCH_FILES[0]}, not a folder per "
            f"run as the server keeps them); see its runs and analysis with previewlab report {data_dir}, and give "
            f"serve a data folder of its own")


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return serve(parser().parse_args(argv))
    except KeyboardInterrupt:  # Ctrl-C while the model loads: the user's stop, not a failure to show
        print("previewlab serve: stopped", file=sys.stderr)
        return 130


def serve(args: argparse.Namespace) -> int:
    if args.max_pixel_steps < 0 or args.keep_runs < 0:
        print("previewlab serve: --max-pixel-steps and --keep-runs take 0 (no limit) or a positive number", file=sys.stderr)
        return 2
    bench = bench_folder(args.data_dir)
    if bench:  # before the socket and the model: nothing is written into the bench's folder
        print(f"previewlab serve: {bench}", file=sys.stderr)
        return 2
    from previewlab.server.http.exposure import ExposureError, access_for

    try:  # a token, once given, is always required, on loopback too (a local reverse proxy forwards anyone)
        access = access_for(args.host, allow_remote=args.allow_remote, token=args.token, allow_hosts=args.allow_host,
                            forwarded_allow_ips=args.forwarded_allow_ips)
    except ExposureError as e:
        print(f"previewlab serve: {e}", file=sys.stderr)
        return 2
    try:
        sock = listener(args.host, args.port)
    except OSError as e:
        print(f"previewlab serve: --host {args.host} --port {args.port}: {(e.strerror or str(e)).lower()}; another "
              "server may hold it: pick another with --port (0: a free one)", file=sys.stderr)
        return 2
    with sock:  # uvicorn listens on it; every way out closes it
        return serve_on(sock, args, access)


def serve_on(sock: socket.socket, args: argparse.Namespace, access: Access) -> int:
    """The model loaded, the Server built and uvicorn run on the bound socket `sock`; 2 when one cannot be."""
    from previewlab.server.data.owner import in_use

    owned = in_use(args.data_dir)
    if owned:  # asked before the model loads; the Server takes the lock itself
        print(f"previewlab serve: --data-dir {args.data_dir}: {owned}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    server = served(args, access)
    if server is None:
        return 2
    from previewlab.server.app import build_app
    from previewlab.server.http.http11 import uvicorn_config
    from previewlab.server.shutdown import Graceful

    app = build_app(server)
    announce(server, args, sock.getsockname()[1])  # --port 0: the one bound
    # after a signal uvicorn raises it again once it has shut down, so an abandoned model thread (graceful) is not
    # waited for at exit
    config = uvicorn_config(app, args.host, sock.getsockname()[1], args.max_clients, access.proxies)
    Graceful(config, server).run(sockets=[sock])
    return 0


def served(args: argparse.Namespace, access: Access) -> Server | None:
    """The model loaded (a Ctrl-C meanwhile stops it) and the Server built on it; None when either cannot be,
    said in one line."""
    from previewlab.preview.models import ModelError, load
    from previewlab.server.data.owner import InUse
    from previewlab.server.server import Server
    from previewlab.server.ws.options import RunOptions
    from previewlab.server.core.limits import SessionLimits

    try:
        with ctrl_c_kept():
            model = load(args.model, taesd=args.taesd, device=args.device, dtype=args.dtype, seed=args.seed,
                         offload=args.offload, channels_last=args.channels_last, variant=args.variant,
                         config=args.config)
    except ModelError as e:
        print(f"previewlab serve: {e}", file=sys.stderr)
        return None
    try:
        return Server(model, args.data_dir, access=access,
                      limits=SessionLimits(max_clients=args.max_clients, send_timeout_s=args.send_timeout),
                      runs=RunOptions(max_side=args.max_side, max_pixel_steps=args.max_pixel_steps,
                                      inflight=args.inflight, compile_decoder=args.compile == "decoder",
                                      shutdown_grace_s=args.shutdown_grace),
                      keep_runs=args.keep_runs, noise_limit=args.noise_limit)
    except (OSError, InUse) as e:  # the folder cannot be made or listed, or has an owner; never a damaged run
        print(f"previewlab serve: --data-dir {args.data_dir}: {e}", file=sys.stderr)
        return None


def announce(server: Server, args: argparse.Namespace, port: int) -> None:
    """The lines `previewlab serve` prints once it is ready: the model, the page's URL, and what may reach it."""
    from previewlab.server.http.exposure import page_url
    from previewlab.server.http.guard import is_loopback

    model, access = server.model, server.access
    label = (" (SYNTHETIC model: random weights, real costs, noise pictures)" if model.synthetic
             else f" ({model.note})" if model.note else "")
    url, note = page_url(args.host, port, access.token, args.allow_host)
    if access.token and not is_loopback(args.host):
        print(f"WARNING: listening on {args.host}, beyond loopback; the page needs the token in its URL", flush=True)
    print(f"previewlab: {model.name}{label} on {model.device}; open {url}; latent space {model.space.describe()}",
          flush=True)
    if note:
        print(note, flush=True)
    if access.proxies:
        print(f"previewlab: a client's address is the one X-Forwarded-For names when the peer is "
              f"{access.proxies.describe()} ({access.proxies.named_by}); from any other peer the header is ignored",
              flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
