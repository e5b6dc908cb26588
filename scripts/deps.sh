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
if [ ${#missing[@]} -eq 0 ]; then
  echo "deps: all ${#packages[@]} packages present"
  exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
