#!/usr/bin/env bash
# Run on a networked machine: puts into .whl/ what the GPU machine lacks (see FACTS.md, "The GPU machine"), so it
# travels with the working tree (64 MiB limit; this is about 15 MB). The GPU machine has Python 3.12, torch,
# transformers, huggingface-hub, safetensors, pillow, numpy, tqdm, regex, requests, filelock, prometheus-client and
# matplotlib, and no network. Missing there, each named here on purpose (--no-deps: nothing else comes along):
#   diffusers 0.42.1            the version the project is developed against
#   importlib_metadata, zipp    diffusers' only requirements beyond the GPU machine's list
#   torchvision 0.26.0          the nvjpeg encoder (torchvision.io.encode_jpeg on CUDA); PyPI's build is +cu130,
#                               pinned to torch 2.11.0 like the GPU machine's, and carries its own libnvjpeg
#   PyTurboJPEG 1.8.3           sdist only on PyPI: built here into a pure-Python wheel (2.x needs libjpeg-turbo 3)
#   libturbojpeg.so.0           Debian 12's libturbojpeg0 (needs only libc6 >= 2.14), into .whl/lib/; without it
#                               the turbojpeg encoder falls back to Pillow and the GPU figures say so
# Not carried: scikit-image and the scipy it needs (over 45 MB, past the 64 MiB a working tree carries): the GPU check
# compares no pictures (a run's progress is left unread there: preview/judging/likeness.available).
# bench/gpu/gpu_check.sh installs the wheels into .whl-site/ and puts .whl/lib on LD_LIBRARY_PATH, where PyTurboJPEG
# 1.8 looks for libturbojpeg.so.0 when ctypes' find_library has nothing.
set -euo pipefail
cd "$(dirname "$0")/../../.."
PY="${PYTHON:-python3}"
DEST=.whl
mkdir -p "$DEST/lib"
rm -f "$DEST"/*.whl
# Wheels for the GPU machine's interpreter, whatever interpreter runs pip here.
"$PY" -m pip download -qq --no-deps --only-binary=:all: --python-version 3.12 --implementation cp --abi cp312 \
  --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 -d "$DEST" \
  diffusers==0.42.1 importlib_metadata==10.2.0 zipp==4.1.2 torchvision==0.26.0
"$PY" -m pip wheel -qq --no-deps --no-binary PyTurboJPEG -w "$DEST" PyTurboJPEG==1.8.3

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if (cd "$tmp" && apt-get download libturbojpeg0 >/dev/null 2>&1); then
  dpkg-deb -x "$tmp"/libturbojpeg0_*.deb "$tmp/x"
  # A plain file under the soname: links do not travel to the GPU machine.
  cp -L "$tmp"/x/usr/lib/x86_64-linux-gnu/libturbojpeg.so.0 "$DEST/lib/libturbojpeg.so.0"
  cp "$tmp"/x/usr/share/doc/libturbojpeg0/copyright "$DEST/lib/libturbojpeg0.copyright"
  dpkg-deb -f "$tmp"/libturbojpeg0_*.deb Version > "$DEST/lib/libturbojpeg0.version"
else
  echo "gpu_wheels: apt-get download libturbojpeg0 failed (not Debian, or no apt lists: apt-get update);" \
       "the GPU check will encode JPEG with Pillow" >&2
fi
echo "gpu_wheels: in $DEST:"
find "$DEST" -maxdepth 2 -type f \( -name '*.whl' -o -name '*.so*' \) -printf '%10s  %p\n' | sort -k2
du -sh --exclude=site "$DEST" | sed 's/^/gpu_wheels: total /'
