#!/usr/bin/env bash
# The whole test suite on a fresh Debian 12 machine: installs what is missing,
# builds with -Werror, runs every CTest test, then fuzzes the parser for a
# bounded time under ASan+UBSan (FUZZ_SECONDS, default 60; 0 skips it).
# SANITIZE=1 builds the tree with AddressSanitizer and UBSan (use another
# BUILD_DIR, e.g. BUILD_DIR=build-asan) and runs the same suite there, less the
# tests labelled nvrtc (NVRTC's own time; nothing of ours to sanitize).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
if [ "${SANITIZE:-0}" = 1 ]; then
  # -Werror stays with the optimised build: gcc at -O0 under the sanitizers
  # guesses differently (e.g. -Wformat-truncation), and the warning list is the same.
  bash scripts/build.sh -DPD2BW_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug -DPD2BW_WERROR=OFF
else
  bash scripts/build.sh
fi
build=${BUILD_DIR:-build}
(cd "$build" && ctest --output-on-failure -j "${JOBS:-$(nproc)}" $([ "${SANITIZE:-0}" = 1 ] && echo "-LE nvrtc"))
if [ "${FUZZ_SECONDS:-60}" != 0 ] && [ -f scripts/fuzz.sh ]; then
  bash scripts/fuzz.sh "${FUZZ_SECONDS:-60}"
fi
