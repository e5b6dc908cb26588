#!/usr/bin/env bash
# The whole test suite on a fresh Debian 12 machine: installs what is missing,
# builds with -Werror, runs every CTest test, then fuzzes the parser for a
# bounded time under ASan+UBSan (FUZZ_SECONDS, default 60; 0 skips it).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
bash scripts/build.sh
build=${BUILD_DIR:-build}
(cd "$build" && ctest --output-on-failure -j "${JOBS:-$(nproc)}")
if [ "${FUZZ_SECONDS:-60}" != 0 ] && [ -f scripts/fuzz.sh ]; then
  bash scripts/fuzz.sh "${FUZZ_SECONDS:-60}"
fi
