#!/usr/bin/env bash
# The path the GPU runbook names; the check and its scripts live in previewlab/bench/gpu/ (see gpu_check.sh there).
exec "$(dirname "$0")/../previewlab/bench/gpu/gpu_check.sh" "$@"
