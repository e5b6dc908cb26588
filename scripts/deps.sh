#!/usr/bin/env bash
# Installs every Debian package pd2bw needs to build, test and run on the CPU.
# Idempotent: packages already present are skipped. The README and .ci/run both call
# this one script, so the dependency list lives in exactly one place.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config  # toolchain
  flex bison                                     # model-language front end
  clang libclang-rt-14-dev                       # libFuzzer + sanitizers for the parser fuzzer
  libcjson-dev                                   # plan.json reading/writing
  libutf8proc-dev                                # Unicode classes of the GPT-2 pre-tokenizer
  libblis-dev libopenblas-dev                    # BLAS (runtime picks the faster; see bench/)
  libblis-openmp-dev                             # BLIS's OpenMP variant: one thread pool with the stage code
  libopenmpi-dev openmpi-bin                     # the mpi transport
  fortunes                                       # English text corpus for the main job
  python3                                        # test scripts: token fixtures, trace/checkpoint checks
  chromium                                       # only tests/report (report_browser): plan/report.html in a headless browser
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
if [ ${#missing[@]} -eq 0 ]; then
  echo "deps: all ${#packages[@]} packages present"
else
  echo "deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# cuobjdump and nvdisasm: the CUDA 13 toolkit on these machines ships without them, and
# tests/cuda/test_cuda_sass.c needs `cuobjdump -sass` to prove the tensor-core kernels
# hold HMMA instructions. NVIDIA publishes both on PyPI; the wheels (zip files) are
# unpacked into $cuda_tools, where tests/cuda/CMakeLists.txt looks. Only with a CUDA
# toolkit that lacks them (nvcc on PATH, no cuobjdump beside it).
cuda_tools=/opt/pd2bw/cuda-tools
nvcc_path=$(command -v nvcc || true)
if [ -n "$nvcc_path" ] && [ ! -x "$(dirname "$nvcc_path")/cuobjdump" ] && [ ! -x "$cuda_tools/bin/cuobjdump" ]; then
  echo "deps: cuobjdump and nvdisasm from PyPI into $cuda_tools"
  wheels=$(mktemp -d)
  if python3 -m pip download -q --no-deps --only-binary=:all: -d "$wheels" \
    nvidia-cuda-cuobjdump==13.2.51 nvidia-cuda-nvdisasm==13.2.86; then
    $SUDO mkdir -p "$cuda_tools/bin"
    for w in "$wheels"/*.whl; do
      python3 -m zipfile -e "$w" "$wheels/x"
    done
    $SUDO cp "$wheels"/x/nvidia/cu13/bin/cuobjdump "$wheels"/x/nvidia/cu13/bin/nvdisasm "$cuda_tools/bin/"
    $SUDO chmod 755 "$cuda_tools/bin/cuobjdump" "$cuda_tools/bin/nvdisasm"
  else
    echo "deps: note: could not fetch cuobjdump from PyPI; the SASS tests will be skipped"
  fi
  rm -rf "$wheels"
fi
