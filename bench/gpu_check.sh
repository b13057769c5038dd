#!/usr/bin/env bash
# The path the GPU runbook names: the check and its scripts live in bench/gpu/ (see bench/gpu/gpu_check.sh).
exec "$(dirname "$0")/gpu/gpu_check.sh" "$@"
