"""previewlab COMMAND [flags]: one console command for the server, the bench and their tools.

Each command is a module with a `main(argv) -> int`; it is imported only when it runs, so `previewlab --help`
and a mistyped command load neither torch nor a model.
"""
from __future__ import annotations

import importlib
import sys
from typing import Sequence

COMMANDS: dict[str, tuple[str, str]] = {
    "serve": ("previewlab.server.cli", "the live preview page and its WebSocket (default 127.0.0.1:8000, demo model)"),
    "bench": ("previewlab.bench.cli", "sweep decoders and intervals against no-preview baselines; CSVs and a summary"),
    "report": ("previewlab.bench.report", "report.html and plots from a bench folder"),
    "compare": ("previewlab.bench.compare", "two bench folders side by side; exit 1 on a regression beyond the spread"),
    "load": ("previewlab.bench.load", "a server under watchers: what each one costs the run"),
    "gpu-check": ("previewlab.bench.gpu.check", "the GPU figures as ratios within one run (--dry-run: the CPU)"),
    "train-demo": ("previewlab.bench.demo.train", "train the demo model, or --check a trained one"),
}

BENCH_EXTRA = ("matplotlib", "tqdm")  # pyproject's `bench` extra: the server runs without them


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [f"  {name:<{width}}  {what}" for name, (_, what) in COMMANDS.items()]
    return "usage: previewlab COMMAND [flags]   (previewlab COMMAND --help for its flags)\n\ncommands:\n" + \
        "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        sys.stdout.write(usage())
        return 0 if args else 2
    name, rest = args[0], args[1:]
    if name not in COMMANDS:
        sys.stderr.write(f"previewlab: unknown command {name[:40]!r}; the commands are {', '.join(COMMANDS)}\n")
        return 2
    try:
        command = importlib.import_module(COMMANDS[name][0])
        result: int = command.main(rest)
    except ModuleNotFoundError as e:
        if e.name not in BENCH_EXTRA:
            raise
        sys.stderr.write(f"previewlab {name}: needs {e.name}, from the bench extra: pip install 'previewlab[bench]'\n")
        return 2
    except KeyboardInterrupt:  # Ctrl-C while a command imports torch or loads a model: the user's stop
        sys.stderr.write(f"previewlab {name}: stopped\n")
        return 130
    return result
