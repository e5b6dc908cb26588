#!/usr/bin/env bash
# Compiles every generated stageN.cu of every golden plan (tests/plans/cases.txt)
# with NVRTC for sm_90 and sm_80 and checks each cubin holds the kernels its launch
# list names. CI runs a sample (ctest -R test_cudagen_plans_nvrtc); this is the full
# set: about 250 distinct sources per architecture at 3-8 s of one core each.
#   scripts/nvrtc-all.sh [SHARDS]     (default 2 shards per architecture, run in parallel)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
shards=${1:-2}
bash scripts/build.sh >/dev/null
pids=()
for arch in 90 80; do
  for ((k = 0; k < shards; k++)); do
    "$build"/tests/cudagen/test_cudagen_plans "$build"/tools/pd2bwc "all$arch:$k:$shards" \
      >"$build/nvrtc-all-sm$arch-$k.log" 2>&1 &
    pids+=($!)
  done
done
fail=0
for p in "${pids[@]}"; do wait "$p" || fail=1; done
grep -h "distinct stage sources\|passed, " "$build"/nvrtc-all-sm*.log
exit $fail
