"""python -m previewlab COMMAND: the console command, from a checkout without installing."""
from previewlab.cli import main

raise SystemExit(main())
