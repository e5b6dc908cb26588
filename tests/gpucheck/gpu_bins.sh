#!/usr/bin/env bash
# tests/gpucheck/gpu_bins.sh — every binary a device run executes (scripts/gpu-check-lib.sh
# GC_BINS, which gpu-check.sh with GPU_CHECK_PREBUILT=1 and gpu-carry.sh read) is where
# the list says in a CUDA build. A target moved to another folder once left gpu-check.sh
# looking for pd2bw-cuda-train where it no longer was: the lent device's first command
# would have stopped at "missing".
#   gpu_bins.sh BUILD_DIR     (run in the source tree)
set -u
. scripts/gpu-check-lib.sh
missing=0
for b in "${GC_BINS[@]}"; do
  if [ ! -x "$1/$b" ]; then echo "FAIL: $1/$b is not built there (scripts/gpu-check-lib.sh GC_BINS)" >&2; missing=1; fi
done
[ $missing -eq 0 ] && echo "all ${#GC_BINS[@]} binaries of GC_BINS are in $1"
exit $missing
