#!/usr/bin/env bash
# Fuzzes the model-language front end with libFuzzer (clang, ASan + UBSan).
#   scripts/fuzz.sh [SECONDS]      default 60
# Builds build-fuzz/ (instrumented, -DPD2BW_FUZZ=ON), then runs
# tests/frontend/fuzz_parser with models/ and tests/errors/ as read-only seeds;
# new interesting inputs go to build-fuzz/corpus, crashes to build-fuzz/crashes.
# Exits non-zero when the fuzzer found a crash, leak or timeout.
# The whole compiler (planner and code generation too) is fuzzed by
# tests/frontend/mutants.py, which the test suite runs (CTest fuzz_mutants).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
san="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
cmake -S . -B build-fuzz -G Ninja -DCMAKE_C_COMPILER=clang -DPD2BW_FUZZ=ON \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_FLAGS="-fsanitize=fuzzer-no-link $san" \
  -DCMAKE_EXE_LINKER_FLAGS="$san" >/dev/null
ninja -C build-fuzz fuzz_parser
mkdir -p build-fuzz/corpus build-fuzz/crashes
jobs=$(nproc 2>/dev/null || echo 1)
exec build-fuzz/tests/frontend/fuzz_parser build-fuzz/corpus models models/clusters tests/errors \
  -dict=tests/frontend/fuzz.dict -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 \
  -max_len=4096 -artifact_prefix=build-fuzz/crashes/ -print_final_stats=1
