#!/usr/bin/env bash
# The CPU figures in the README, in one command (about 32 minutes on 2 cores). Run it on a quiet machine:
# anything else running shows up as noise in the overheads. Results land in runs/cpu-results/<name>/.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=.venv/bin/python
R=runs/cpu-results
rm -rf "$R"
# 1. the default sweep (what make bench runs)
$PY -m previewlab bench --model synthetic:small --out $R/default
# 2. the engine's own cost: decoder none against the bare diffusers call, 10 interleaved pairs
$PY -m previewlab bench --model synthetic:small --decoders none --direct --repeats 10 --out $R/engine-cost
# 3. sync against overlap
$PY -m previewlab bench --model synthetic:small --decoders latent2rgb,taesd,vae --every 1 --modes sync,overlap --out $R/modes
# 4. the budget autopilot: measured wall overhead against budgets of 5, 10 and 20 % (about 2.5 minutes each)
for b in 5 10 20; do
  $PY -m previewlab bench --model synthetic:small --steps 30 --decoders taesd,vae --every auto --budget $b --modes sync,overlap \
    --out $R/autopilot-b$b
done
# 5. the real SD1.5 architectures at 256x256, short
$PY -m previewlab bench --model synthetic:sd15 --width 256 --height 256 --steps 4 --every 1,2 --repeats 1 --out $R/sd15
# 5b. the default sweep on the demo model (real pictures), and synthetic:small at the same 128x128 beside it
$PY -m previewlab bench --model demo --out $R/demo
$PY -m previewlab bench --model synthetic:small --width 128 --height 128 --out $R/small-128
# 6. plots of the default sweep (the README shows one)
$PY -m previewlab report $R/default
# 7. the server under load: 50 watchers, a stuck reader, a reconnecting client
$PY -m previewlab load --out $R/load
# 8. what CSV exports cost a running model (docs/tables.md, Exports while a run goes)
$PY previewlab/bench/export_cost.py | tee $R/export-cost.txt
