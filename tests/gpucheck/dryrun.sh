#!/usr/bin/env bash
# tests/gpucheck/dryrun.sh — scripts/gpu-check.sh from end to end with GPU_CHECK_PREBUILT=1
# on a stand-in device (tests/gpucheck/fake/): the real pd2bwc and pd2bwrun, and in place
# of every GPU binary a script that answers as it would (pd2bw-cuda-train's command
# lines checked by the real one, small plans trained on the CPU, the recorded H200
# lines for the large ones), nvidia-smi and mpirun on PATH. What the one lent device
# session depends on and CI can reach: every step runs, its pd2bwc command lines still
# compile plans that fit, its pd2bwrun and pd2bw-cuda-train flags still parse, its
# outputs parse, and the report has every row, no FAIL and nothing skipped.
#   dryrun.sh PD2BWC PD2BWRUN PD2BW-CUDA-TRAIN     (run in the source tree)
set -u
fake=tests/gpucheck/fake
work=$(mktemp -d /tmp/pd2bw-test-gpudry-XXXXXX)
trap 'rm -rf "$work"' EXIT
b=$work/build
mkdir -p "$b/tools" "$b/tests/cuda" "$b/bench/gpu" "$work/bin" "$work/out"
ln -s "$(realpath "$1")" "$b/tools/pd2bwc"
ln -s "$(realpath "$2")" "$b/tools/pd2bwrun"
cp "$fake/pd2bw-cuda-train" "$b/tools/"
cp "$fake/gpu_op_check" "$fake/test_cuda_device" "$b/tests/cuda/"
cp "$fake/gpu_attention_bench" "$fake/gemm_sweep" "$fake/gpu_nccl_check" "$b/bench/gpu/"
cp "$fake/nvidia-smi" "$fake/mpirun" "$work/bin/"
export FAKE_REAL_TRAIN FAKE_PD2BWRUN FAKE_DATA
FAKE_REAL_TRAIN=$(realpath "$3") FAKE_PD2BWRUN=$(realpath "$2") FAKE_DATA=$(realpath tests/gpucheck)
out=$(PATH="$work/bin:$PATH" BUILD_DIR=$b GPU_CHECK_PREBUILT=1 GPU_CHECK_OUT=$work/out GPU_CHECK_BUDGET_S=900 \
      PD2BW_CACHE=$work/cache JOBS=2 bash scripts/gpu-check.sh 2>&1)
rc=$?
fail=0
bad() { echo "FAIL: $*"; fail=1; }
[ $rc -eq 0 ] || bad "gpu-check.sh exited $rc"
grep -q '^gpu-check: all GPU checks passed$' <<<"$out" || bad "its last line is not 'all GPU checks passed'"
rep=$(cat "$work/out/last-gpu-check.md" 2>/dev/null) || bad "no last-gpu-check.md"
for row in '(a) every CUDA op' '(b) small GPT 20 steps, cuda FP32 GEMMs' '(b) small GPT 20 steps, cuda TF32' \
           '(b) small GPT 20 steps, cuda BF16' '(b) small GPT 20 steps, cuda FP32, CUDA graphs on vs off' '(b) small GPT, cuda 10 steps + --save' \
           '(b) small GPT 20 steps, cuda FP32, --gemm-epilogues on (cuBLASLt) vs cpu' '(c) 4-stage 2bw' "(d') Llama 1B-class" '(d) GPT 350M b=' \
           '(f) per-kernel GPU time' '(g) real libnccl' "(g) multi-GPU mode's driver" '(e) cuBLAS GEMM sweep' \
           '(e) calibration'; do
  grep -qF -- "| $row" <<<"$rep" || bad "no row '$row' in the report"
done
for shape in 'GPT 124M' 'GPT 350M' 'GPT 1.3B'; do
  grep -qE "^\| $shape \([^|]*\| [0-9]+ \| 3829 \|" <<<"$rep" || bad "the table has no measured row for $shape"
done
grep -E '\| (FAIL|-) \|$|skipped' <<<"$rep" && bad "a row failed or was skipped (above)"
if [ $fail -ne 0 ]; then echo "--- gpu-check.sh's output:"; echo "$out"; echo "--- the report:"; echo "$rep"; exit 1; fi
echo "gpu-check.sh ran every step on the stand-in device: $(grep -c '^| (' <<<"$rep") check rows, no FAIL, nothing skipped"
