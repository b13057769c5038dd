#!/usr/bin/env bash
# The GPU check, on the GPU machine as it is (FACTS.md, "The GPU machine"): what it lacks comes from .whl/
# (made by bench/gpu/gpu_wheels.sh on a networked machine; the device tool must carry .whl). synthetic:sd15 (the
# real SD1.5 architectures, random weights), 512x512 float16, 20 steps: previewlab gpu-check prints one
# table of ratios, each measured within this run, then SDXL's decode_at row (synthetic:sdxl at 1024x1024), Wan 2.1
# 1.3B's clip rows (synthetic:wan21-1.3b, 33 frames at 256x256) and a profiler reference. Estimated 5-8 minutes
# on an H200 (not yet run there; building SDXL's 3.5 B random weights on the CPU is most of what its row adds); a
# repeat that would end past 200 s of image runs, 30 s of the SDXL row's or 90 s of clip runs is not started.
#   --dry-run   the same steps on the CPU with synthetic:tiny (under 2 minutes on a 2-core machine)
# PYTHON=/path/to/python picks the interpreter (default python3). Writes runs.csv, steps.csv and summary.txt to
# $OUT when set (the device tool collects it), else runs/gpu-check.
set -euo pipefail
cd "$(dirname "$0")/../../.."
PY="${PYTHON:-python3}"
DEST="${OUT:-runs/gpu-check}"
SITE="$PWD/.whl-site"  # beside .whl, not inside: carrying .whl must not carry an unpacked copy of it

# Only the wheels this interpreter can use: a dry run on another Python, or beside another torch, skips the
# binary ones (bench/gpu/wheelsite.py says which and why).
mapfile -t WHEELS < <("$PY" -m previewlab.bench.gpu.wheelsite .whl)
if [ "${#WHEELS[@]}" -gt 0 ]; then
  rm -rf "$SITE"
  # --target: nothing touches the interpreter's own site-packages (and PEP 668 does not refuse it)
  if ! PIP_ROOT_USER_ACTION=ignore "$PY" -m pip install -q --no-index --no-deps --disable-pip-version-check \
      --target "$SITE" "${WHEELS[@]}"; then
    # no pip there, or one that refuses: a wheel is a zip of what goes into site-packages
    echo "gpu_check: pip install --target failed; unpacking the wheels instead" >&2
    rm -rf "$SITE"
    for w in "${WHEELS[@]}"; do "$PY" -m zipfile -e "$w" "$SITE"; done
  fi
  export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
fi
# PyTurboJPEG 1.8 looks for libturbojpeg.so.0 in each LD_LIBRARY_PATH folder when find_library finds none
if [ -f .whl/lib/libturbojpeg.so.0 ]; then
  export LD_LIBRARY_PATH="$PWD/.whl/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi

# Every import the check needs, each failure with its own error, before any time goes into a model.
"$PY" - "$@" <<'EOF'
import importlib, sys
failed = False
for name in ("numpy", "PIL", "torch", "transformers", "diffusers", "previewlab.preview.call.engine", "previewlab.bench.gpu.check"):
    try:
        m = importlib.import_module(name)
        print(f"gpu_check: {name} {getattr(m, '__version__', '')} from {getattr(m, '__file__', '?')}", file=sys.stderr)
    except Exception as e:
        print(f"gpu_check: import {name} failed: {type(e).__name__}: {e}", file=sys.stderr)
        failed = True
if failed:
    sys.exit(3)
try:  # optional: without it previews are encoded by Pillow, and the table's encoder line says so
    from turbojpeg import TurboJPEG
    TurboJPEG()
    print("gpu_check: turbojpeg loads libturbojpeg", file=sys.stderr)
except Exception as e:
    print(f"gpu_check: WARNING turbojpeg unusable, JPEG falls back to Pillow: {type(e).__name__}: {e}", file=sys.stderr)
import torch
cuda = torch.cuda.is_available()
print(f"gpu_check: torch {torch.__version__}, CUDA {torch.version.cuda}, "
      f"{torch.cuda.get_device_name(0) if cuda else 'no CUDA device'}", file=sys.stderr)
if not cuda and "--dry-run" not in sys.argv[1:]:
    sys.exit("gpu_check: torch sees no CUDA device; --dry-run runs the same steps on the CPU")
EOF

start=$(date +%s)
"$PY" -m previewlab gpu-check --out "$DEST" "$@"
echo "gpu_check: $(( $(date +%s) - start )) s; runs.csv, steps.csv and summary.txt in $DEST" >&2
