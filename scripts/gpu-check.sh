#!/usr/bin/env bash
# scripts/gpu-check.sh — the checks that need an NVIDIA GPU (DESIGN.md §6).
#
# Builds pd2bw with the CUDA toolkit, then on the machine's GPU:
#   (0) the CUDA unit tests (emulated kernels and executor, NVRTC for sm_90/sm_80, the
#       device backend, which on a GPU machine opens the device);
#   (a) tests/cuda/gpu_op_check: every CUDA op against the CPU op on random inputs,
#       with the error bounds stated in tests/cuda/op_check.c, after a self-test that
#       proves the comparison catches a deliberately wrong kernel (the checks include
#       the tensor-core helpers and attention kernels: tests/cuda/op_check_flash.c);
#   (b) a small GPT (tinygpt, 2 layers, dropout on) trained 20 steps by pd2bwrun on
#       the CPU and by pd2bw-cuda-train on the GPU from the same initial weights
#       (rt_init_param: by name and seed) and the same data: every step's loss must
#       agree within 1e-3 relative with FP32 GEMMs, 3e-2 with TF32, 5e-2 with a
#       --precision bf16 plan (BF16 GEMM operands, FP32 master weights) (reported);
#       the GPU runs replay each pass as a CUDA graph (the default); the FP32 run is
#       repeated with --cuda-graphs off and the two must give the same losses (within
#       1e-6 relative: embedding_bwd's atomicAdd order may differ between any two GPU
#       runs, graphs or not; identical lines are counted and reported); and a
#       checkpoint round trip: 10 FP32 steps + --save, resumed on the GPU for 10 more,
#       must match the 20 straight GPU steps, and the CPU resuming the GPU checkpoint
#       the 20 straight CPU steps (steps 11-20, the step's FP32 bound 1e-3); and the
#       same model made with pd2bwc --gemm-epilogues on (bias, GELU and bias gradients
#       as cuBLASLt epilogues: runtime/cuda/cuda_lt.c, never run on a GPU before),
#       20 FP32 steps against the CPU, the FP32 bound 1e-3;
#   (c) single-GPU pipeline mode (runtime/cuda/pipe/cuda_pipe.h): a 4-stage 2bw plan of tinygpt
#       (4 x 64, dropout on, clip 1, FP32 GEMMs) trained 10 steps with every stage on the
#       one GPU, then compared by --reference with the CPU sequential reference (the
#       one-stage trainer on PLAN/reference with 2bw's delayed rule): every microbatch
#       loss within 1e-3 relative (step (b)'s FP32 bound), every weight within 1e-2 of
#       its tensor's largest (pipeline_ref.c: 10x the loss bound);
#   (d) the issue-11 item-6 table (scripts/gpu-check-lib.sh defines every figure): GPT
#       124M (12 x 768), 350M (24 x 1024) and 1.3B (24 x 2048) at T=1024, BF16 plans
#       (pd2bwc --precision bf16: bf16 GEMM operands cast from the FP32 master weights),
#       each at the largest power-of-two microbatch whose plan pd2bwc fits in the H200's
#       memory (searched on the CPU, so no device time goes to runs that cannot fit):
#       tok/s, ms/step, MFU (6N + 6·L·d·T FLOPs per token over 989 TFLOP/s), the plan's
#       own TFLOP/s, cuBLAS's BF16 rate on the MLP GEMM from the same process; then the
#       tensor-core attention kernels' own rate, forward and backward, at each shape's
#       b and heads, hs 64, causal (bench/gpu/gpu_attention_bench); and the 350M
#       model made with --gemm-epilogues on (cuBLASLt epilogues) beside it: its tok/s
#       against the plain plan's, which decides pd2bwc's default (docs/gpu.md);
#   (d') the Llama row: models/llama.model at a 1B-class shape (16 x 2048, 32 heads over
#       8 key/value heads, SwiGLU 8192, vocabulary 128256, T=2048; scripts/gpu-check-lib.sh
#       GC_LLAMA_ARGS), a BF16 plan at the largest power-of-two microbatch (up to 16) that
#       pd2bwc fits on the H200: tok/s, ms/step, MFU as (d)'s, the plan's TFLOP/s, and that
#       its launch list runs grouped-query attention on the tensor-core kernels;
#   (f) the ten kernels with the most GPU time at one shape (GPU_CHECK_PROFILE_SHAPE,
#       default 350M): Nsight Compute when there is one, else pd2bw-cuda-train
#       --kernel-profile (runtime/cuda/exec/cuda_exec_kprof.c), the same table;
#   (g) the real libnccl on a one-rank communicator (bench/gpu/gpu_nccl_check), then
#       multi-GPU mode's driver, mpirun -np 1 pd2bwrun --backend cuda --transport nccl,
#       on a one-stage tinygpt vs pd2bw-cuda-train (each skipped, saying why, without
#       libnccl.so.2 / mpirun; one rank makes no NCCL communicator, hence the first);
#   (e) bench/gpu/gemm_sweep: cuBLAS FP32/TF32/BF16 GEMMs over M = 512..16384, N = K =
#       2048 and 8192 (TF32 and BF16 also at GPT 124M-1.3B's projection shapes), and the
#       planner's GEMM cost fitted to them (t = latency + FLOPs / rate; docs/language.md
#       "Compute"), written to $GPU_CHECK_OUT/gemm-sweep.json; with the device's copy rate
#       and launch cost, the calibration: the lent device's cluster file,
#       $GPU_CHECK_OUT/calibrated-gpu.cluster (docs/calibration.md), for the next GPU run.
# Order: build check, (0), the self-test, then the figures ((d), attention, (f), (g)),
# then (a)'s op checks, (b), (c), (e), all within GPU_CHECK_BUDGET_S (default 420 s;
# every run under `timeout`, a step with too little time left skipped and reported),
# so one device command of 8 minutes holds the whole script. Each step's elapsed time
# is printed and listed. The script ends with the result as a section of
# bench/gpu/RESULTS.md, also written (atomically) to $GPU_CHECK_OUT/last-gpu-check.md
# (default bench/gpu/).
#
# Usage: scripts/gpu-check.sh            (BUILD_DIR, default build-gpu; DEVICE, default 0;
#        GPU_CHECK_PREBUILT=1: use BUILD_DIR as built elsewhere, at the same path)
# Exit status:
#   0  every check ran and passed, OR there is no GPU/driver here: the script then
#      says "NO GPU" on its last line and skips (a)-(g) (set GPU_CHECK_REQUIRE_GPU=1 to
#      make that case exit 77 instead);
#   1  a check failed;
#   2  the build failed, or the CUDA toolkit was not found.
set -uo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build-gpu}
device=${DEVICE:-0}
jobs=${JOBS:-$(nproc)}

# Every step's elapsed time: printed when the next begins, and listed at the end.
step_name="" step_t0=$SECONDS step_times=()
step_done() {
  [ -z "$step_name" ] && return
  echo "(${step_name%%:*}: $((SECONDS - step_t0)) s)"
  step_times+=("| ${step_name%%:*} | $((SECONDS - step_t0)) s |")
}
step() { step_done; step_name="$*"; step_t0=$SECONDS; printf '\n== %s (at %d s)\n' "$*" "$SECONDS"; }
# the item-6 table's builders and parsers (tests/gpucheck tests them without a GPU)
# shellcheck source=scripts/gpu-check-lib.sh
. scripts/gpu-check-lib.sh

if [ "${GPU_CHECK_PREBUILT:-0}" = 1 ]; then
  # A build made on another machine (same paths, same architecture): a lent GPU machine
  # may lack flex, bison and the -dev packages; nothing is configured or rebuilt here.
  step "build ($build): prebuilt (GPU_CHECK_PREBUILT=1)"
  missing=$(gc_missing_bins "$build") ||
    { sed 's/^/gpu-check: GPU_CHECK_PREBUILT=1 but /; s/$/ is missing/' <<<"$missing"; exit 2; }
else
  step "build ($build)"
  mkdir -p "$build"
  if ! cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >"$build/gpu-check-cmake.log" 2>&1; then
    cat "$build/gpu-check-cmake.log"; echo "gpu-check: configure failed"; exit 2
  fi
  # (the list whole, then grep: under pipefail an early grep -q would fail the pipeline)
  if ! grep -q '^gpu_op_check:' <<<"$(ninja -C "$build" -t targets all 2>/dev/null)"; then
    echo "gpu-check: the CUDA toolkit was not found (CMake find_package(CUDAToolkit)); install it"
    echo "or put nvcc on PATH / set CUDAToolkit_ROOT, then rerun"
    exit 2
  fi
  if ! ninja -C "$build" -j "$jobs"; then echo "gpu-check: build failed"; exit 2; fi
fi

# A failing check is reported and the script goes on: a GPU run is rare, so it
# collects every figure it can before exiting 1.
failed=0
# Less the label nvrtc (every golden plan's stage programs through NVRTC: CPU only,
# minutes, and CI runs it on every change): device time is scarce.
step "(0) CUDA unit tests (ctest -R cuda -LE nvrtc)"
# (prebuilt: only the test that opens the device; CI ran the rest on the same build)
unit_tests=cuda
[ "${GPU_CHECK_PREBUILT:-0}" = 1 ] && unit_tests=test_cuda_device
if ! (cd "$build" && ctest -R "$unit_tests" -LE nvrtc --output-on-failure -j "$jobs"); then
  echo "gpu-check: FAILED: CUDA unit tests"; failed=1
fi

op_check="$build/tests/cuda/gpu_op_check"
step "(a) self-test: a perturbed kernel must be caught"
"$op_check" --device "$device" --self-test
rc=$?
if [ $rc -eq 77 ]; then
  echo
  echo "gpu-check: NO GPU on this machine (see the message above): built and unit-tested;"
  echo "gpu-check: NO GPU: the GPU checks (a)-(g) were skipped"
  [ "${GPU_CHECK_REQUIRE_GPU:-0}" = 1 ] && exit 77
  exit 0
fi
rows=()
if [ $rc -ne 0 ]; then
  echo "gpu-check: FAILED: the op checks did not catch a wrong kernel"; failed=1
  rows+=("| (a) op-check self-test | a perturbed kernel was not caught | FAIL |")
fi

work=$(mktemp -d /tmp/pd2bw-gpu-check-XXXXXX)
trap 'rm -rf "$work"' EXIT
pc="$build/tools/pd2bwc"
run_cpu="$build/tools/pd2bwrun"
run_gpu=${GPU_CHECK_TRAIN:-$build/tools/pd2bw-cuda-train} # (a stand-in, to test this script)
export PD2BW_CACHE=${PD2BW_CACHE:-$work/cache}
# uint16 token files: tokens(FILE, COUNT, VOCAB)
tokens() { perl -e 'srand(7); my ($n, $v) = @ARGV; print pack("v*", map { int(rand($v)) } 1..$n)' "$2" "$3" >"$1"; }
# the "loss" of every line of a pd2bwrun-format JSON log
losses() { sed -n 's/.*"loss": \([^,]*\),.*/\1/p' "$1"; }
# worst relative difference of two loss columns (prints "inf" when a file is short)
maxrel() { paste <(losses "$1") <(losses "$2") | awk 'NF != 2 { bad = 1 }
  { d = $1 - $2; if (d < 0) d = -d; m = ($1 < 0 ? -$1 : $1); if (m > 0 && d / m > w) w = d / m; n++ }
  END { if (bad || n == 0) print "inf"; else printf "%.2e\n", w }'; }
le() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a != "inf" && a + 0 <= b + 0) }'; }
# Every step after the self-test shares a time budget (GPU_CHECK_BUDGET_S, default 420 s:
# with the build check, (0) and the self-test the script fits one 8-minute device
# command): each run gets `timeout` with the smaller of its own cap and what is left,
# and a run with too little left is skipped (and reported so) rather than started.
deadline=$((SECONDS + ${GPU_CHECK_BUDGET_S:-420}))
limit() { local left=$((deadline - SECONDS)); [ "$left" -lt 1 ] && left=1; [ "$left" -lt "$1" ] && echo "$left" || echo "$1"; }  # never 0: timeout 0 is no limit


# (a) every CUDA op against the CPU op
check_ops() {
step "(a) every CUDA op against the CPU op"
if ! "$op_check" --device "$device" --verbose; then
  echo "gpu-check: FAILED: CUDA ops differ from the CPU ops beyond their bounds"; failed=1
  rows+=("| (a) every CUDA op vs the CPU op | some op beyond its bound | FAIL |")
else
  rows+=("| (a) every CUDA op vs the CPU op | within the bounds of tests/cuda/op_check.c | PASS |")
fi
}

# (b) a small GPT on both backends, graphs on/off, checkpoints
check_small_gpt() {
step "(b) a small GPT, 20 steps: cuda (FP32 and TF32 GEMMs) vs the cpu backend"
if "$pc" models/tinygpt.model -D layers=2 -D dim=64 -D heads=4 -D seq=64 -D pdrop=0.1 --stages 1 --replicas 1 \
     -o "$work/small" -q; then
  tokens "$work/small.bin" 200000 256
  timeout "$(limit 120)" "$run_cpu" "$work/small" --data "$work/small.bin" --steps 20 --log-json "$work/cpu.jsonl" -q
  echo "cpu: exit $?"
  for g in fp32 tf32; do
    timeout "$(limit 120)" "$run_gpu" "$work/small" --data "$work/small.bin" --steps 20 --gemm $g --device "$device" \
      --log-json "$work/gpu-$g.jsonl" -q
    echo "cuda ($g GEMMs): exit $?"
  done
  # the FP32 run again, every pass launch by launch: CUDA graphs must not change a loss
  timeout "$(limit 120)" "$run_gpu" "$work/small" --data "$work/small.bin" --steps 20 --gemm fp32 --device "$device" \
    --cuda-graphs off --log-json "$work/gpu-fp32-nograph.jsonl" -q
  echo "cuda (fp32 GEMMs, --cuda-graphs off): exit $?"
  # the same model as a BF16 plan (its stage0.c, hence the CPU run, is the same)
  "$pc" models/tinygpt.model -D layers=2 -D dim=64 -D heads=4 -D seq=64 -D pdrop=0.1 --stages 1 --replicas 1 \
    --precision bf16 -o "$work/small-bf16" -q &&
    timeout "$(limit 120)" "$run_gpu" "$work/small-bf16" --data "$work/small.bin" --steps 20 --device "$device" \
      --log-json "$work/gpu-bf16.jsonl" -q
  echo "cuda (bf16 plan): exit $?"
  paste <(losses "$work/cpu.jsonl") <(losses "$work/gpu-fp32.jsonl") <(losses "$work/gpu-tf32.jsonl") \
        <(losses "$work/gpu-bf16.jsonl") |
    awk 'BEGIN { print "step  cpu loss     cuda fp32    cuda tf32    cuda bf16" }
         { printf "%4d  %-11s  %-11s  %-11s  %s\n", NR, $1, $2, $3, $4 }'
  d32=$(maxrel "$work/cpu.jsonl" "$work/gpu-fp32.jsonl")
  dtf=$(maxrel "$work/cpu.jsonl" "$work/gpu-tf32.jsonl")
  dbf=$(maxrel "$work/cpu.jsonl" "$work/gpu-bf16.jsonl")
  if le "$d32" 1e-3; then r32=PASS; else r32=FAIL; failed=1; fi
  if le "$dtf" 3e-2; then rtf=PASS; else rtf=FAIL; failed=1; fi
  if le "$dbf" 5e-2; then rbf=PASS; else rbf=FAIL; failed=1; fi
  echo "worst relative loss difference: fp32 $d32 (bound 1e-3) $r32, tf32 $dtf (bound 3e-2) $rtf," \
       "bf16 $dbf (bound 5e-2) $rbf"
  rows+=("| (b) small GPT 20 steps, cuda FP32 GEMMs vs cpu | max rel. loss diff $d32 (bound 1e-3) | $r32 |")
  rows+=("| (b) small GPT 20 steps, cuda TF32 GEMMs vs cpu | max rel. loss diff $dtf (bound 3e-2) | $rtf |")
  rows+=("| (b) small GPT 20 steps, cuda BF16 plan vs cpu | max rel. loss diff $dbf (bound 5e-2) | $rbf |")
  dgr=$(maxrel "$work/gpu-fp32.jsonl" "$work/gpu-fp32-nograph.jsonl")
  same=$(paste -d' ' <(losses "$work/gpu-fp32.jsonl") <(losses "$work/gpu-fp32-nograph.jsonl") | awk '$1 == $2' | wc -l)
  if le "$dgr" 1e-6; then rgr=PASS; else rgr=FAIL; failed=1; fi
  echo "CUDA graphs on vs off (fp32): worst relative loss difference $dgr (bound 1e-6), $same of 20 losses identical: $rgr"
  rows+=("| (b) small GPT 20 steps, cuda FP32, CUDA graphs on vs off | max rel. loss diff $dgr (bound 1e-6), $same/20 identical | $rgr |")
  # checkpoint round trip: GPU 10 + --save, then GPU and CPU each resume to step 20
  timeout "$(limit 60)" "$run_gpu" "$work/small" --data "$work/small.bin" --steps 10 --gemm fp32 --device "$device" \
    --save "$work/gpu10.ckpt" --log-json "$work/gpu-first10.jsonl" -q
  echo "cuda (fp32 GEMMs, 10 steps, --save): exit $?"
  timeout "$(limit 60)" "$run_gpu" "$work/small" --data "$work/small.bin" --steps 20 --gemm fp32 --device "$device" \
    --resume "$work/gpu10.ckpt" --log-json "$work/gpu-resumed.jsonl" -q
  echo "cuda (fp32 GEMMs, --resume to step 20): exit $?"
  timeout "$(limit 60)" "$run_cpu" "$work/small" --data "$work/small.bin" --steps 20 --resume "$work/gpu10.ckpt" \
    --log-json "$work/cpu-resumed.jsonl" -q
  echo "cpu (--resume the cuda checkpoint to step 20): exit $?"
  tail -n 10 "$work/gpu-fp32.jsonl" >"$work/gpu-last10.jsonl"
  tail -n 10 "$work/cpu.jsonl" >"$work/cpu-last10.jsonl"
  head -n 10 "$work/gpu-fp32.jsonl" >"$work/gpu-head10.jsonl"
  d_first=$(maxrel "$work/gpu-head10.jsonl" "$work/gpu-first10.jsonl")
  d_gres=$(maxrel "$work/gpu-last10.jsonl" "$work/gpu-resumed.jsonl")
  d_cres=$(maxrel "$work/cpu-last10.jsonl" "$work/cpu-resumed.jsonl")
  if le "$d_first" 1e-3 && le "$d_gres" 1e-3 && le "$d_cres" 1e-3; then rck=PASS; else rck=FAIL; failed=1; fi
  echo "checkpoint round trip: cuda resumed vs 20 straight $d_gres, cpu resuming the cuda checkpoint vs cpu 20 straight" \
       "$d_cres (bound 1e-3; first segment ${d_first}): $rck"
  rows+=("| (b) small GPT, cuda 10 steps + --save, resumed to 20 on cuda / on cpu | vs 20 straight: cuda $d_gres, cpu $d_cres (bound 1e-3) | $rck |")
  # GEMM epilogues through cuBLASLt: the same model, the FP32 run against the CPU
  "$pc" models/tinygpt.model -D layers=2 -D dim=64 -D heads=4 -D seq=64 -D pdrop=0.1 --stages 1 --replicas 1 \
    --gemm-epilogues on -o "$work/small-epi" -q &&
    timeout "$(limit 120)" "$run_gpu" "$work/small-epi" --data "$work/small.bin" --steps 20 --gemm fp32 \
      --device "$device" --log-json "$work/gpu-epi.jsonl" -q
  echo "cuda (fp32 GEMMs, --gemm-epilogues on): exit $?"
  dep=$(maxrel "$work/cpu.jsonl" "$work/gpu-epi.jsonl")
  if le "$dep" 1e-3; then rep=PASS; else rep=FAIL; failed=1; fi
  echo "GEMM epilogues (cuBLASLt), fp32: worst relative loss difference vs cpu $dep (bound 1e-3): $rep"
  rows+=("| (b) small GPT 20 steps, cuda FP32, --gemm-epilogues on (cuBLASLt) vs cpu | max rel. loss diff $dep (bound 1e-3) | $rep |")
else
  echo "gpu-check: FAILED: pd2bwc could not compile the small GPT"; failed=1
  rows+=("| (b) small GPT | pd2bwc failed | FAIL |")
fi
}

# (c) single-GPU pipeline mode against the CPU sequential reference
check_pipeline() {
step "(c) single-GPU pipeline mode: a 4-stage 2bw plan on one GPU vs the CPU sequential reference"
# (the 8-GPU cluster file only lets the planner place 4 stages; they all run on one GPU)
if "$pc" models/tinygpt.model -D pdrop=0.1 --cluster models/clusters/h200x8.cluster --stages 4 --replicas 1 \
     --schedule 2bw --microbatches 4 --microbatch-size 4 --precision fp32 -o "$work/pipe4" -q; then
  [ -f "$work/small.bin" ] || tokens "$work/small.bin" 200000 256
  out=$(timeout "$(limit 180)" "$run_gpu" "$work/pipe4" --data "$work/small.bin" --steps 10 --device "$device" \
          --reference --reference-tol 1e-3 -q 2>&1)
  rc=$?
  echo "$out"
  verdict=$(grep '^reference: worst' <<<"$out")
  dloss=$(sed -n 's/.*loss rel\. diff \([^ ]*\) .*/\1/p' <<<"$verdict")
  dw=$(sed -n 's/.*weight rel\. diff \([^ ]*\) .*/\1/p' <<<"$verdict")
  if [ $rc -eq 0 ] && grep -q 'MATCH$' <<<"$verdict"; then rc_c=PASS; else rc_c=FAIL; failed=1; fi
  echo "single-GPU pipeline mode vs the CPU sequential reference: loss ${dloss:-?} (bound 1e-3), weights ${dw:-?} (bound 1e-2): $rc_c (exit $rc)"
  rows+=("| (c) 4-stage 2bw tinygpt 4x64, single-GPU pipeline mode, 10 steps vs CPU sequential reference | max rel. loss diff ${dloss:-?} (bound 1e-3), weights ${dw:-?} (bound 1e-2) | $rc_c |")
else
  echo "gpu-check: FAILED: pd2bwc could not compile the 4-stage plan"; failed=1
  rows+=("| (c) 4-stage 2bw plan, single-GPU pipeline mode | pd2bwc failed | FAIL |")
fi
}

# (d) the item-6 table (scripts/gpu-check-lib.sh says what each figure is): per GPT
# shape, the largest microbatch the planner fits on the H200 (no device time spent on
# runs that would not fit; one retry at half b if the device still runs out), then
# pd2bw-cuda-train's steady-state rate and cuBLAS's beside it, from the same process.
steps_d=${GPU_CHECK_STEPS:-5}
# one pd2bw-cuda-train run of shape NAME's plan, its log in $work/NAME.jsonl
train_run() {
  timeout "$(limit "$2")" "$run_gpu" "${D_plan[$1]}" --data "$work/gpt.bin" --steps "$steps_d" --device "$device" \
    --bench-gemm --log-json "$work/$1.jsonl" -q 2>&1
}
train_shape() { # NAME L D H CAP: one run at D_b[NAME] (D_plan[NAME]); sets D_*[NAME]
  local name=$1 L=$2 D=$3 H=$4 cap=$5 out rc
  out=$(train_run "$name" "$cap")
  rc=$?
  echo "$out"
  if [ $rc -ne 0 ] && gc_out_of_memory "$out" && [ "${D_b[$name]}" -gt 1 ] && [ "$(limit 999)" -ge 30 ]; then
    D_b[$name]=$((D_b[$name] / 2))
    echo "GPT $name: out of device memory: again at b=${D_b[$name]}"
    D_plan[$name]=$(gc_plan "$pc" "$work" "$L" "$D" "$H" "${D_b[$name]}") || { D_status[$name]="pd2bwc failed"; return 1; }
    out=$(train_run "$name" "$cap")
    rc=$?
    echo "$out"
  fi
  if [ $rc -eq 124 ] && gc_log_parse "$work/$name.jsonl"; then # the steps it finished, from its log
    echo "GPT $name: timed out after $gc_logged steps: the rate of steps 2..$gc_logged from its --log-json"
  elif [ $rc -ne 0 ] || ! gc_train_parse "$out"; then
    D_status[$name]="run failed (exit $rc$([ $rc -eq 124 ] && echo ': timeout'))"; return 1
  fi
  D_status[$name]=ran D_tok[$name]=$gc_tok D_ms[$name]=$gc_ms D_pt[$name]=$gc_plan_tflops
  D_cub[$name]=$gc_cublas D_cubs[$name]=$gc_cublas_shape
}
measure_shapes() {
  step "(d) GPT 124M, 350M and 1.3B at T=1024, each at the largest microbatch that fits, BF16 plans, CUDA graphs"
  tokens "$work/gpt.bin" 600000 50257 # > 256 windows of 1025: the largest b's batch
  local spec name L D H cap
  for spec in "${GC_SHAPES[@]}"; do
    IFS=: read -r name L D H <<<"$spec"
    case $name in 124M) cap=90 ;; 350M) cap=110 ;; *) cap=150 ;; esac
    if [ "$(limit 999)" -lt 30 ]; then
      echo "GPT $name: skipped: the time budget is spent"; D_status[$name]="skipped (time budget)"; continue
    fi
    echo "GPT $name ($L x $D, $H heads): the largest microbatch whose plan fits (pd2bwc, h200 cluster, --precision bf16)"
    D_b[$name]=$(gc_pick_b "$pc" "$work" "$L" "$D" "$H" 8 256)
    echo "GPT $name: b=${D_b[$name]} (chosen)"
    if [ "${D_b[$name]}" -eq 0 ]; then
      D_status[$name]="no microbatch fits (pd2bwc)"; failed=1; rows+=("| (d) GPT $name | no microbatch fits | FAIL |"); continue
    fi
    D_plan[$name]="$work/gpt-${L}x$D-b${D_b[$name]}"
    D_n[$name]=$(gc_params "${D_plan[$name]}")
    if ! train_shape "$name" "$L" "$D" "$H" "$cap"; then
      echo "gpu-check: FAILED: GPT $name training: ${D_status[$name]}"; failed=1
      rows+=("| (d) GPT $name, b=${D_b[$name]} | ${D_status[$name]} | FAIL |")
    fi
  done
}

# (d) the 350M model made with --gemm-epilogues on (bias, GELU and bias gradients as
# cuBLASLt epilogues) at the b chosen above, beside the plain plan's rate: the figure
# that decides pd2bwc's default (docs/gpu.md).
measure_epilogues() {
  step "(d) GPT 350M with --gemm-epilogues on (cuBLASLt epilogues) beside the plain plan"
  local b=${D_b[350M]:-0} plan out rc tok
  if [ "${D_status[350M]:-}" != ran ]; then echo "skipped: GPT 350M did not train above"; return; fi
  if [ "$(limit 999)" -lt 60 ]; then echo "skipped: the time budget is spent"; rows+=("| (d) GPT 350M, --gemm-epilogues on | skipped (time budget) | - |"); return; fi
  if ! plan=$(gc_plan "$pc" "$work" 24 1024 16 "$b" --gemm-epilogues on); then
    echo "gpu-check: FAILED: pd2bwc --gemm-epilogues on"; failed=1; rows+=("| (d) GPT 350M, --gemm-epilogues on | pd2bwc failed | FAIL |"); return
  fi
  out=$(timeout "$(limit 110)" "$run_gpu" "$plan" --data "$work/gpt.bin" --steps "$steps_d" --device "$device" -q 2>&1)
  rc=$?
  echo "$out"
  if [ $rc -eq 0 ] && gc_train_parse "$out"; then
    tok=$gc_tok
    echo "GPT 350M b=$b: --gemm-epilogues on $tok tok/s, off ${D_tok[350M]} tok/s"
    rows+=("| (d) GPT 350M b=$b T=1024, --gemm-epilogues on (cuBLASLt) vs off | $tok tok/s vs ${D_tok[350M]} tok/s ($(awk -v a="$tok" -v b="${D_tok[350M]}" 'BEGIN { printf "%.2fx", a / b }')) | ran |")
  else
    echo "gpu-check: FAILED: GPT 350M with --gemm-epilogues on (exit $rc)"; failed=1
    rows+=("| (d) GPT 350M, --gemm-epilogues on | run failed (exit $rc) | FAIL |")
  fi
}

# (d) the tensor-core attention kernels alone, at each shape's b and heads (hs 64).
measure_attention() {
  step "(d) attention kernels at each shape's b, T=1024, hs=64, causal (tensor cores, bf16 operands)"
  local spec name L D H att rc
  for spec in "${GC_SHAPES[@]}"; do
    IFS=: read -r name L D H <<<"$spec"
    [ "${D_b[$name]:-0}" -gt 0 ] || continue
    if [ "$(limit 999)" -lt 20 ]; then echo "attention at GPT $name: skipped (time budget)"; continue; fi
    att=$(timeout "$(limit 40)" "$build/bench/gpu/gpu_attention_bench" --device "$device" --B "${D_b[$name]}" \
            --T 1024 --NH "$H" --hs 64 --causal 1 2>&1)
    rc=$?
    echo "$att"
    if [ $rc -eq 0 ] && gc_attention_parse "$att"; then
      A_fwd[$name]=$gc_att_fwd A_bwd[$name]=$gc_att_bwd
    else
      echo "gpu-check: FAILED: gpu_attention_bench at GPT $name (exit $rc)"; failed=1
      rows+=("| (d) attention at GPT $name | run failed (exit $rc) | FAIL |")
    fi
  done
}

# (d') the Llama row (scripts/gpu-check-lib.sh GC_LLAMA_ARGS): the largest microbatch the
# planner fits, then pd2bw-cuda-train's steady-state rate, as (d)'s GPT shapes.
measure_llama() {
  step "(d') Llama 1B-class (16 x 2048, 32 heads / 8 kv heads, SwiGLU 8192, vocab 128256), T=2048, BF16 plan"
  local b plan out rc n mfu
  b=$(gc_llama_pick_b "$pc" "$work" 16)
  if [ "$b" -eq 0 ]; then
    echo "gpu-check: FAILED: no Llama microbatch fits (pd2bwc)"; failed=1
    rows+=("| (d') Llama 1B-class, T=2048 | no microbatch fits | FAIL |"); return
  fi
  plan="$work/llama-1b-b$b"
  if ! grep -q pkc_flash_attention_gqa_fwd_bf16 "$plan/stage0.launch.json"; then
    echo "gpu-check: FAILED: the Llama plan's attention is not on the tensor-core kernels"; failed=1
    rows+=("| (d') Llama 1B-class, b=$b | attention not on tensor cores | FAIL |"); return
  fi
  # > 16 windows of 2049; ids below 65536 (the data files hold uint16 tokens), all valid
  # in the vocabulary of 128256 (the embedding and head are still full size)
  tokens "$work/llama.bin" $((GC_LLAMA_T * 20)) 65536
  out=$(timeout "$(limit 150)" "$run_gpu" "$plan" --data "$work/llama.bin" --steps "$steps_d" --device "$device" \
          --bench-gemm --log-json "$work/llama.jsonl" -q 2>&1)
  rc=$?
  echo "$out"
  if [ $rc -ne 0 ] && gc_out_of_memory "$out" && [ "$b" -gt 1 ] && [ "$(limit 999)" -ge 40 ]; then
    b=$((b / 2)) plan="$work/llama-1b-b$((b))"
    echo "Llama: out of device memory: again at b=$b"
    out=$(timeout "$(limit 150)" "$run_gpu" "$plan" --data "$work/llama.bin" --steps "$steps_d" --device "$device" \
            --bench-gemm --log-json "$work/llama.jsonl" -q 2>&1)
    rc=$?
    echo "$out"
  fi
  if [ $rc -eq 124 ] && gc_log_parse "$work/llama.jsonl"; then
    echo "Llama: timed out after $gc_logged steps: the rate of steps 2..$gc_logged from its --log-json"
  elif [ $rc -ne 0 ] || ! gc_train_parse "$out"; then
    echo "gpu-check: FAILED: Llama training (exit $rc)"; failed=1
    rows+=("| (d') Llama 1B-class, b=$b | run failed (exit $rc) | FAIL |"); return
  fi
  n=$(gc_params "$plan")
  mfu=$(gc_mfu "$gc_tok" "${n:-0}" "$GC_LLAMA_L" "$GC_LLAMA_D" "$GC_LLAMA_T")
  rows+=("| (d') Llama 1B-class ($n params), b=$b T=2048, BF16 plan, GQA on tensor cores | $gc_tok tok/s, $gc_ms ms/step, MFU $mfu%, plan $gc_plan_tflops TFLOP/s | ran |")
}

# (f) the per-kernel GPU time at one shape (GPU_CHECK_PROFILE_SHAPE, default 350M, at its
# b): Nsight Compute when the machine has it, else pd2bw-cuda-train --kernel-profile
# (runtime/cuda/exec/cuda_exec_kprof.c); the same table either way.
kprof_table="" kprof_how=""
measure_kernel_profile() {
  local name=${GPU_CHECK_PROFILE_SHAPE:-350M} ncu out rc
  step "(f) per-kernel GPU time, GPT $name at b=${D_b[$name]:-?} (top 10 kernels, share of GPU time)"
  if [ "${D_status[$name]:-}" != ran ]; then echo "skipped: GPT $name did not train above"; return; fi
  if [ "$(limit 999)" -lt 40 ]; then echo "skipped: the time budget is spent"; rows+=("| (f) kernel profile | skipped (time budget) | - |"); return; fi
  ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  if [ -n "$ncu" ]; then
    echo "Nsight Compute: $ncu"
    out=$(timeout "$(limit 150)" "$ncu" --csv --page raw --print-units base --metrics gpu__time_duration.sum \
            --log-file "$work/ncu.csv" "$run_gpu" "${D_plan[$name]}" --data "$work/gpt.bin" --steps 2 \
            --device "$device" --cuda-graphs off -q 2>&1)
    rc=$?
    echo "$out" | tail -5
    if [ $rc -eq 0 ] && kprof_table=$(gc_ncu_table "$work/ncu.csv"); then
      kprof_how="ncu --metrics gpu__time_duration.sum, 2 steps, --cuda-graphs off"
    else
      echo "ncu failed (exit $rc): the built-in profile instead"; kprof_table=""
    fi
  else
    echo "no Nsight Compute (ncu) here: pd2bw-cuda-train --kernel-profile"
  fi
  if [ -z "$kprof_table" ]; then
    out=$(timeout "$(limit 120)" "$run_gpu" "${D_plan[$name]}" --data "$work/gpt.bin" --steps 2 --device "$device" \
            --kernel-profile "$work/kprof.md" -q 2>&1)
    rc=$?
    echo "$out"
    if [ $rc -eq 0 ] && [ -s "$work/kprof.md" ]; then
      kprof_table=$(cat "$work/kprof.md")
      kprof_how="pd2bw-cuda-train --kernel-profile (CUDA events around each launch and GEMM), 2 steps, graphs off"
    else
      echo "gpu-check: FAILED: the kernel profile (exit $rc)"; failed=1; rows+=("| (f) kernel profile | failed (exit $rc) | FAIL |"); return
    fi
  fi
  echo "$kprof_table"
  rows+=("| (f) per-kernel GPU time, GPT $name b=${D_b[$name]} | $kprof_how: table below | ran |")
}

# (g) the real libnccl. On one GPU, multi-GPU mode makes no communicator (it makes them
# for groups of two ranks or more, and NCCL refuses two ranks on one GPU), so first
# bench/gpu/gpu_nccl_check drives libnccl through the runtime's NCCL layer on a
# one-rank communicator (all-reduces, send/receive to itself); then multi-GPU mode's
# driver under mpirun -np 1 (MPI bootstrap, the rank's device, the pipeline
# interpreter) on a one-stage tinygpt, its losses against pd2bw-cuda-train's on the
# same plan within (b)'s FP32 bound. Each part is skipped, saying why, without
# libnccl.so.2 or mpirun.
check_nccl() {
  step "(g) the real libnccl (gpu_nccl_check) and multi-GPU mode's driver (mpirun -np 1 ... --transport nccl)"
  local where mpirun rc d out r
  if [ "$(limit 999)" -lt 30 ]; then echo "skipped: the time budget is spent"; rows+=("| (g) real libnccl, multi-GPU mode | skipped (time budget) | - |"); return; fi
  if ! gc_find_nccl; then
    echo "skipped: $gc_nccl_where"; rows+=("| (g) real libnccl | skipped: no libnccl.so.2 | - |")
  elif [ ! -x "$build/bench/gpu/gpu_nccl_check" ]; then
    rows+=("| (g) real libnccl | $build/bench/gpu/gpu_nccl_check not built | - |")
  else
    where=$gc_nccl_where
    echo "libnccl: $where"
    out=$(timeout "$(limit 60)" "$build/bench/gpu/gpu_nccl_check" --device "$device" 2>&1)
    rc=$?
    echo "$out"
    if [ $rc -eq 0 ]; then r=PASS; else r=FAIL; failed=1; fi
    rows+=("| (g) real libnccl ($where), one-rank communicator: all-reduce f32/bf16/f64, send/recv to itself | $(sed -n 's/^gpu_nccl_check: [A-Z]*: //p' <<<"$out" | head -1) (exit $rc) | $r |")
  fi
  mpirun=$(command -v mpirun)
  if [ -z "$mpirun" ]; then
    echo "skipped: no mpirun on this machine (Open MPI's launcher; carry it, or install openmpi-bin)"
    rows+=("| (g) multi-GPU mode's driver, 1 rank | skipped: no mpirun | - |"); return
  fi
  if [ "$(limit 999)" -lt 30 ]; then echo "skipped: the time budget is spent"; rows+=("| (g) multi-GPU mode's driver | skipped (time budget) | - |"); return; fi
  [ -f "$work/small.bin" ] || tokens "$work/small.bin" 200000 256
  if ! "$pc" models/tinygpt.model -D layers=2 -D dim=64 -D heads=4 -D seq=64 --stages 1 --replicas 1 --precision fp32 \
       -o "$work/nccl1" -q; then
    echo "gpu-check: FAILED: pd2bwc (the NCCL plan)"; failed=1; rows+=("| (g) multi-GPU mode | pd2bwc failed | FAIL |"); return
  fi
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout "$(limit 60)" "$mpirun" --allow-run-as-root -np 1 \
    ${PD2BW_LIBNCCL:+-x PD2BW_LIBNCCL} "$run_cpu" "$work/nccl1" --backend cuda --transport nccl --device "$device" \
    --data "$work/small.bin" --steps 10 --log-json "$work/nccl.jsonl" -q
  rc=$?
  echo "mpirun -np 1 pd2bwrun --backend cuda --transport nccl: exit $rc"
  timeout "$(limit 60)" "$run_gpu" "$work/nccl1" --data "$work/small.bin" --steps 10 --device "$device" \
    --log-json "$work/nccl-ref.jsonl" -q
  d=$(maxrel "$work/nccl-ref.jsonl" "$work/nccl.jsonl")
  if [ $rc -eq 0 ] && le "$d" 1e-3; then r=PASS; else r=FAIL; failed=1; fi
  echo "multi-GPU mode's driver (1 rank) vs pd2bw-cuda-train: worst relative loss difference $d (bound 1e-3): $r"
  rows+=("| (g) multi-GPU mode's driver, mpirun -np 1, tinygpt 10 steps vs pd2bw-cuda-train (one rank: no NCCL communicator) | max rel. loss diff $d (bound 1e-3), exit $rc | $r |")
}

# The order: the figures the device session is for first (the item-6 table, the
# attention kernels, the kernel profile, the real NCCL), then the checks of (a)-(c),
# then the GEMM sweep; each run bounded by `timeout` within the shared budget.
# A check that cannot finish in what is left is reported as skipped, not started (its
# runs under a `timeout` of a few seconds would only fail).
unless_spent() { # SECONDS ROW-NAME FUNCTION
  if [ "$(limit 999)" -ge "$1" ]; then "$3"; return; fi
  step "$2: skipped (time budget)"
  rows+=("| $2 | skipped (time budget) | - |")
}
measure_shapes
measure_epilogues
measure_attention
unless_spent 60 "(d') Llama 1B-class" measure_llama
measure_kernel_profile
check_nccl
unless_spent 30 "(a) every CUDA op vs the CPU op" check_ops
unless_spent 40 "(b) small GPT, cuda vs cpu" check_small_gpt
unless_spent 20 "(c) single-GPU pipeline mode" check_pipeline

step "(e) cuBLAS GEMM sweep for the planner's cost model (bench/gpu/gemm_sweep)"
outdir=${GPU_CHECK_OUT:-bench/gpu}
mkdir -p "$outdir"
if [ -x "$build/bench/gpu/gemm_sweep" ]; then
  peaks=()
  case "$(nvidia-smi -L 2>/dev/null | head -1)" in # dense peaks, as in models/clusters/h200*.cluster
    *H100*|*H200*) peaks=(--peak-fp32 67 --peak-tf32 494.5 --peak-bf16 989) ;;
  esac
  # the calibration (issue 26): the device's cluster file beside the sweep; the links are
  # the bundled h200x8.cluster's (NVLink 450 GB/s, 50 GB/s between nodes), not measured
  ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
  mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits -i "$device" 2>/dev/null | head -1)
  calib=(--cluster-out "$outdir/calibrated-gpu.cluster" --devices "${ngpu:-1}" --intra-gbs 450 --inter-gbs 50
         --memory-gib "$(awk -v m="${mib:-0}" 'BEGIN { printf "%.1f", m / 1024 }')")
  if [ "$(limit 999)" -lt 60 ]; then
    echo "skipped: the time budget is spent"; rows+=("| (e) cuBLAS GEMM sweep | skipped (time budget) | - |")
  elif sweep=$(timeout "$(limit 150)" "$build/bench/gpu/gemm_sweep" --device "$device" "${peaks[@]}" "${calib[@]}" \
      "$outdir/gemm-sweep.json"); then
    echo "$sweep"
    bf=$(grep '^bf16:' <<<"$sweep")
    rows+=("| (e) cuBLAS GEMM sweep ($outdir/gemm-sweep.json) | ${bf:-?} | ran |")
    rows+=("| (e) calibration: $outdir/calibrated-gpu.cluster | $(grep '^copy' <<<"$sweep") | ran |")
  else
    echo "gpu-check: FAILED: gemm_sweep"; failed=1; rows+=("| (e) cuBLAS GEMM sweep | failed | FAIL |")
  fi
else
  rows+=("| (e) cuBLAS GEMM sweep | $build/bench/gpu/gemm_sweep not built | - |")
fi

gpu=$(nvidia-smi -L 2>/dev/null | head -1)
commit=$(git rev-parse --short HEAD 2>/dev/null)
step_done
step_name=""
printf '\n== summary (at %d s)\n' "$SECONDS"
report=$(gc_report "${gpu:-unknown}" "${commit:-unknown}" "$(git status --porcelain 2>/dev/null | wc -l)" "$build" "$SECONDS")
echo "$report"
outdir=${GPU_CHECK_OUT:-bench/gpu}
mkdir -p "$outdir"
printf '%s\n' "$report" >"$outdir/.last-gpu-check.md.tmp" && mv "$outdir/.last-gpu-check.md.tmp" "$outdir/last-gpu-check.md"
echo "(written to $outdir/last-gpu-check.md)"

echo
if [ $failed -ne 0 ]; then echo "gpu-check: FAILED (see above)"; exit 1; fi
skipped=$(grep -c 'skipped' <<<"$report")
if [ "$skipped" -gt 0 ]; then echo "gpu-check: every check that ran passed; $skipped rows say skipped (see the table)"
else echo "gpu-check: all GPU checks passed"; fi
exit 0
