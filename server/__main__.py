"""python -m server: the live preview page and its WebSocket on 127.0.0.1:8000."""
from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import NoReturn, Sequence


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"server: {message}\n")


def parser() -> Parser:
    p = Parser(prog="python -m server", description=__doc__, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--model", default="synthetic:small",
                   help="synthetic:tiny | synthetic:tiny-xl | synthetic:small | synthetic:sd15 | a local diffusers folder")
    p.add_argument("--taesd", default=None, help="TAESD weights: AutoencoderTiny folder or taesd_decoder.pth/.safetensors")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--dtype", choices=("float32", "float16", "bfloat16"), default="float32")
    p.add_argument("--offload", choices=("none", "model", "sequential"), default="none",
                   help="diffusers CPU offload (CUDA only)")
    p.add_argument("--compile", choices=("none", "decoder"), default="none", help="torch.compile the preview decoder")
    p.add_argument("--channels-last", action="store_true", help="channels-last memory format for the models")
    p.add_argument("--inflight", type=int, default=2, help="overlap mode: most previews in flight at once")
    p.add_argument("--seed", type=int, default=0, help="seed of synthetic weights")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--data-dir", type=Path, default=Path("runs"), help="where runs and their CSVs are kept")
    p.add_argument("--max-side", type=int, default=1024, help="largest width or height a client may ask for")
    p.add_argument("--send-timeout", type=float, default=10.0, help="seconds before a client that stopped reading is closed")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    from preview.models import ModelError, load

    try:
        model = load(args.model, taesd=args.taesd, device=args.device, dtype=args.dtype, seed=args.seed,
                     offload=args.offload, channels_last=args.channels_last)
    except ModelError as e:
        print(f"server: {e}", file=sys.stderr)
        return 2
    import uvicorn

    from .app import Server, build_app

    server = Server(model, args.data_dir, max_side=args.max_side, send_timeout_s=args.send_timeout,
                    inflight=args.inflight, compile_decoder=args.compile == "decoder")
    app = build_app(server)
    label = " (SYNTHETIC model: random weights, real costs, noise pictures)" if model.synthetic else ""
    print(f"previewlab: {model.name}{label} on {model.device}; open http://{args.host}:{args.port}/", flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", ws_max_size=protocol_max())
    return 0


def protocol_max() -> int:
    from .protocol import MAX_MESSAGE_BYTES

    return MAX_MESSAGE_BYTES


if __name__ == "__main__":
    raise SystemExit(main())
