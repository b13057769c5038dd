"""python -m bench [flags]: a sweep. Subcommands: report DIR, compare A B, load."""
import sys

SUBCOMMANDS = {"load": "bench.load", "report": "bench.report", "compare": "bench.compare"}

if len(sys.argv) > 1 and sys.argv[1] in SUBCOMMANDS:
    import importlib

    raise SystemExit(importlib.import_module(SUBCOMMANDS[sys.argv[1]]).main(sys.argv[2:]))

from bench.cli import main  # noqa: E402

raise SystemExit(main())
