#!/usr/bin/env bash
# Proof that bench/gpu/gpu_check.sh runs with only what the GPU machine has (FACTS.md, "The GPU machine") plus .whl/:
# builds a bare virtual environment at VENV_DIR (default: a temporary folder, removed after) holding only the
# GPU machine's packages, makes .whl/ with bench/gpu/gpu_wheels.sh when it holds no wheel, runs the check's dry run
# with that interpreter and fails unless the table and its rows are printed.
# torch is pinned: 2.13.0 is the CPU build on disk here, an unpinned torch pulls a multi-GB CUDA build. The
# GPU machine's transformers and huggingface-hub versions are pinned too; the rest as they come.
# usage: bench/gpu/gpu_dryrun_bare.sh [VENV_DIR]     BASE_PYTHON: the interpreter to build it from (python3)
# UV: a uv binary to build the environment with (.ci/run sets it); pip otherwise
set -euo pipefail
cd "$(dirname "$0")/../../.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
VENV="${1:-$tmp/bare}"
t0=$(date +%s)
GPU_MACHINE=(torch==2.13.0 transformers==5.17.0 huggingface-hub==1.33.0 safetensors pillow numpy tqdm regex requests
             filelock prometheus-client matplotlib)
if [ -n "${UV:-}" ]; then  # .ci/run's uv: the same packages in seconds; --seed puts pip in, as the machine has it
  "$UV" venv -q --seed --clear --python "${BASE_PYTHON:-python3}" "$VENV"
  "$UV" pip install -q --python "$VENV/bin/python" "${GPU_MACHINE[@]}"
else
  "${BASE_PYTHON:-python3}" -m venv --clear "$VENV"
  "$VENV/bin/python" -m pip install -qq --disable-pip-version-check "${GPU_MACHINE[@]}"
fi
# bare means bare: what .whl/ brings must not be there already
for mod in diffusers torchvision turbojpeg importlib_metadata starlette uvicorn websockets; do
  if "$VENV/bin/python" -c "import $mod" 2>/dev/null; then
    echo "gpu_dryrun_bare: $mod is installed in $VENV; the GPU machine has no $mod" >&2
    exit 1
  fi
done
t1=$(date +%s)
compgen -G ".whl/*.whl" >/dev/null || previewlab/bench/gpu/gpu_wheels.sh
t2=$(date +%s)
# what this proves is the environment: 4 steps, one repeat (tests/test_gpu_check.py reads the rows' figures)
# bytecode written: the check imports torch, transformers and diffusers twice (its import check, then the run),
# which PYTHONDONTWRITEBYTECODE (set on this machine) would compile twice, 8 s of the dry run here
OUT="$tmp/out" PYTHON="$VENV/bin/python" env -u PYTHONDONTWRITEBYTECODE \
  previewlab/bench/gpu/gpu_check.sh --dry-run --steps 4 --repeats 1 | tee "$tmp/table.txt"
t3=$(date +%s)
for row in "engine, decoder none / bare diffusers call" "taesd every step, overlap / no previews" \
    "vae every step: overlap overhead / sync overhead" "latent2rgb every step, overlap / no previews" \
    "autopilot taesd, budget 10 % / no previews" "nvjpeg / turbojpeg, transfer+encode per preview" \
    "hidden syncs in the step callback" "wan21 5 frames: taesd whole clip every step" \
    "preview_max 32: taesd every step, sync, decode_at preview / full" \
    "reference: "; do
  if ! grep -qF "$row" "$tmp/table.txt"; then
    echo "gpu_dryrun_bare: FAILED, no row '$row' in the dry run's table" >&2
    exit 1
  fi
done
echo "gpu_dryrun_bare: ok in $(( t3 - t0 )) s (venv $(( t1 - t0 )) s, wheels $(( t2 - t1 )) s," \
     "dry run $(( t3 - t2 )) s)" >&2
