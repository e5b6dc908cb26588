#!/usr/bin/env bash
# scripts/gpu-carry.sh — makes what a lent GPU machine needs to run scripts/gpu-check.sh
# with GPU_CHECK_PREBUILT=1: a Release build with the CUDA toolkit in build-gpu/ and, in
# devlibs/, the shared libraries its GPU-check binaries link that are not glibc's (BLIS,
# cJSON, Open MPI's libmpi and its dependencies, libgomp, ...): such a machine may lack
# the -dev packages and flex/bison (bench/gpu/RESULTS.md, 2026-11-30). Not OpenBLAS
# (36 MB), which runtime/blas only prefers on AVX-512 CPUs: without it the CPU runs of
# step (b) use BLIS, and the carry stays well under its 64 MiB.
# The NVIDIA libraries (libcuda, NVRTC, cuBLAS, libnccl) are the machine's own: libnccl
# alone (about 220 MB) is over what a device call carries (64 MiB).
#
# Usage (on the CPU machine, in the repository):  scripts/gpu-carry.sh
# then, on the device machine, carrying build-gpu and devlibs (docs/gpu.md):
#   LD_LIBRARY_PATH=$PWD/devlibs GPU_CHECK_PREBUILT=1 GPU_CHECK_OUT=$OUT JOBS=16 bash scripts/gpu-check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build-gpu}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
# (the list whole, then grep: under pipefail, grep -q leaving early would end ninja with
# SIGPIPE, and the pipeline would fail on a build that has the target)
targets=$(ninja -C "$build" -t targets all)
grep -q '^gpu_op_check:' <<<"$targets" ||
  { echo "gpu-carry: the CUDA toolkit was not found: $build would have no GPU binaries" >&2; exit 2; }
# shellcheck source=scripts/gpu-check-lib.sh
. scripts/gpu-check-lib.sh # GC_BINS: what gpu-check.sh runs
ninja -C "$build" "${GC_BINS[@]##*/}"
missing=$(gc_missing_bins "$build") ||
  { sed 's/^/gpu-carry: /; s/$/ was not built there (scripts\/gpu-check-lib.sh GC_BINS)/' <<<"$missing" >&2; exit 2; }
bins=("${GC_BINS[@]/#/$build/}")
mkdir -p devlibs
# every library ldd resolves, less glibc's own (the machine's must match its loader)
libs=$(ldd "${bins[@]}" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// { print $3 }' | sort -u |
       grep -Ev '/(libc|libm|libpthread|libdl|librt|ld-linux[^/]*)\.so' || true)
for f in $libs; do cp -L "$f" devlibs/; done
du -sh "$build" devlibs
echo "gpu-carry: carry $build and devlibs (under 64 MiB together: see the sizes above)"
