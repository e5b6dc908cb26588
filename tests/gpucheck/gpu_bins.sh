#!/usr/bin/env bash
# tests/gpucheck/gpu_bins.sh — every binary a device run executes (scripts/gpu-check-lib.sh
# GC_BINS, which gpu-check.sh with GPU_CHECK_PREBUILT=1 and gpu-carry.sh read) is where
# the list says in a CUDA build. A target moved to another folder once left gpu-check.sh
# looking for pd2bw-cuda-train where it no longer was: the lent device's first command
# would have stopped at "missing".
#   gpu_bins.sh BUILD_DIR     (run in the source tree)
set -u
. scripts/gpu-check-lib.sh
missing=$(gc_missing_bins "$1") ||
  { sed 's/^/FAIL: /; s/$/ is not built there (scripts\/gpu-check-lib.sh GC_BINS)/' <<<"$missing" >&2; exit 1; }
echo "all ${#GC_BINS[@]} binaries of GC_BINS are in $1"
