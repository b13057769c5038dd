#!/usr/bin/env bash
# The GPU benchmark: synthetic:sd15 (the real SD1.5 architectures, random weights) at 512x512, float16,
# 25 steps; decoders none, latent2rgb, taesd, vae; every 1 and 5; sync and overlap; interleaved no-preview
# baselines and the bare diffusers call. Under 6 minutes on one GPU. Writes CSVs and summary.txt to $OUT
# (when set) or ./runs/gpu-check. Needs only torch, diffusers, transformers, pillow and numpy; wheels put
# in bench/wheels/ are installed first when diffusers is missing. JPEG falls back to Pillow without turbojpeg.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
DEST="${OUT:-runs/gpu-check}"
if ! "$PY" -c "import diffusers" 2>/dev/null; then
  if compgen -G "bench/wheels/*.whl" >/dev/null; then
    "$PY" -m pip install -q --no-index --no-deps bench/wheels/*.whl
  else
    echo "gpu_check: diffusers is not installed; pip install diffusers, or put its wheel in bench/wheels/" >&2
    exit 2
  fi
fi
"$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'gpu_check: torch sees no CUDA device')"
"$PY" -c "import torch; print('gpu:', torch.cuda.get_device_name(0), '| torch', torch.__version__)"
start=$(date +%s)
"$PY" -m bench --model synthetic:sd15 --device cuda --dtype float16 --width 512 --height 512 --steps 25 \
  --decoders none,latent2rgb,taesd,vae --every 1,5 --modes sync,overlap --repeats 3 --warmup 1 --direct \
  --out "$DEST" "$@"
echo "gpu_check: $(( $(date +%s) - start )) s; CSVs and summary.txt in $DEST"
