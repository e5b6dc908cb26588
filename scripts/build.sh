#!/usr/bin/env bash
# Configures and builds pd2bw into build/ (or $BUILD_DIR). Extra arguments go to
# cmake's configure step, e.g. scripts/build.sh -DPD2BW_SANITIZE=ON.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
jobs=${JOBS:-$(nproc)}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPD2BW_WERROR=ON "$@" >/dev/null
ninja -C "$build" -j "$jobs"
