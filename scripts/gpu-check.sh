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
#   (d) GPT training time at the 350M (24 x 1024, 16 heads) and 1.3B (24 x 2048, 32
#       heads) shapes, seq 1024, microbatch 8, BF16 plans (pd2bwc --precision bf16:
#       bf16 GEMM operands cast from the FP32 master weights, FP32 accumulation):
#       tokens/s and achieved TFLOP/s (the plan's FLOPs / measured steady-state step
#       time) beside cuBLAS's BF16 rate on the model's MLP GEMM measured in the same
#       process; with CUDA graphs (the default), and for the 350M shape also with
#       --cuda-graphs off beside it while the time budget allows, and the same model
#       made with --gemm-epilogues on (cuBLASLt epilogues) beside it: its tok/s against
#       the plain plan's, which decides pd2bwc's default (docs/gpu.md); then the tensor-core
#       attention kernels' own rate, forward and backward, at B=8 T=1024 NH=16 hs=64
#       causal (bench/gpu/gpu_attention_bench);
#   (e) bench/gpu/gemm_sweep: cuBLAS FP32/TF32/BF16 GEMMs over M = 512..16384, N = K =
#       2048 and 8192, and the planner's GEMM cost fitted to them (t = latency +
#       FLOPs / rate; docs/language.md "Compute"), written to $GPU_CHECK_OUT/gemm-sweep.json
#       with the cluster-file lines (gemm_efficiency, gemm_latency_us) in the log.
# Steps (b)-(d) take about 2-4 minutes on an H200 (each run is bounded by `timeout`);
# the script ends with a table of the figures, also written (atomically) to
# $GPU_CHECK_OUT/last-gpu-check.md (default bench/gpu/).
#
# Usage: scripts/gpu-check.sh            (BUILD_DIR, default build-gpu; DEVICE, default 0;
#        GPU_CHECK_PREBUILT=1: use BUILD_DIR as built elsewhere, at the same path)
# Exit status:
#   0  every check ran and passed, OR there is no GPU/driver here: the script then
#      says "NO GPU" on its last line and skips (a)-(d) (set GPU_CHECK_REQUIRE_GPU=1 to
#      make that case exit 77 instead);
#   1  a check failed;
#   2  the build failed, or the CUDA toolkit was not found.
set -uo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build-gpu}
device=${DEVICE:-0}
jobs=${JOBS:-$(nproc)}

step() { printf '\n== %s\n' "$*"; }

if [ "${GPU_CHECK_PREBUILT:-0}" = 1 ]; then
  # A build made on another machine (same paths, same architecture): a lent GPU machine
  # may lack flex, bison and the -dev packages; nothing is configured or rebuilt here.
  step "build ($build): prebuilt (GPU_CHECK_PREBUILT=1)"
  for b in tests/cuda/gpu_op_check tools/pd2bwc tools/pd2bwrun runtime/pd2bw-cuda-train bench/gpu/gpu_attention_bench; do
    [ -x "$build/$b" ] || { echo "gpu-check: GPU_CHECK_PREBUILT=1 but $build/$b is missing"; exit 2; }
  done
else
  step "build ($build)"
  mkdir -p "$build"
  if ! cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >"$build/gpu-check-cmake.log" 2>&1; then
    cat "$build/gpu-check-cmake.log"; echo "gpu-check: configure failed"; exit 2
  fi
  if ! ninja -C "$build" -t targets all 2>/dev/null | grep -q '^gpu_op_check:'; then
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
  echo "gpu-check: NO GPU: the GPU checks (a)-(d) were skipped"
  [ "${GPU_CHECK_REQUIRE_GPU:-0}" = 1 ] && exit 77
  exit 0
fi
rows=()
if [ $rc -ne 0 ]; then
  echo "gpu-check: FAILED: the op checks did not catch a wrong kernel"; failed=1
  rows+=("| (a) op-check self-test | a perturbed kernel was not caught | FAIL |")
fi

step "(a) every CUDA op against the CPU op"
if ! "$op_check" --device "$device" --verbose; then
  echo "gpu-check: FAILED: CUDA ops differ from the CPU ops beyond their bounds"; failed=1
  rows+=("| (a) every CUDA op vs the CPU op | some op beyond its bound | FAIL |")
else
  rows+=("| (a) every CUDA op vs the CPU op | within the bounds of tests/cuda/op_check.c | PASS |")
fi
work=$(mktemp -d /tmp/pd2bw-gpu-check-XXXXXX)
trap 'rm -rf "$work"' EXIT
pc="$build/tools/pd2bwc"
run_cpu="$build/tools/pd2bwrun"
run_gpu=${GPU_CHECK_TRAIN:-$build/runtime/pd2bw-cuda-train} # (a stand-in, to test this script)
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
# Steps (b)-(d) share a time budget (GPU_CHECK_BUDGET_S, default 480 s): each run gets
# `timeout` with the smaller of its own cap and what is left, and a run with under 20 s
# left is skipped (and reported so) rather than started.
deadline=$((SECONDS + ${GPU_CHECK_BUDGET_S:-480}))
limit() { local left=$((deadline - SECONDS)); [ "$left" -lt 1 ] && left=1; [ "$left" -lt "$1" ] && echo "$left" || echo "$1"; }  # never 0: timeout 0 is no limit

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

step "(d) timing: GPT 350M and 1.3B shapes, seq 1024, microbatch 8, BF16 plans (FP32 master weights)"
# the model text with a global batch of one microbatch (its own 512 would make a step
# 64 microbatches long)
sed 's/^\(  *\)batch = 512;/\1batch = 8;/' models/gpt.model >"$work/gpt.model"
tokens "$work/gpt.bin" 120000 50257
for shape in "350M:-D layers=24 -D dim=1024 -D heads=16:8" "1.3B:-D layers=24 -D dim=2048 -D heads=32:6"; do
  IFS=: read -r name defs nsteps <<<"$shape"
  if [ "$(limit 999)" -lt 20 ]; then
    echo "skipped: the time budget is spent"; rows+=("| (d) GPT $name | skipped (time budget) | - |"); continue
  fi
  # shellcheck disable=SC2086
  if ! "$pc" "$work/gpt.model" $defs --cluster models/clusters/h200.cluster --stages 1 --replicas 1 \
       --microbatch-size 8 --microbatches 1 --precision bf16 -o "$work/gpt-$name" -q; then
    echo "gpu-check: FAILED: pd2bwc ($name)"; failed=1; rows+=("| (d) GPT $name | pd2bwc failed | FAIL |"); continue
  fi
  out=$(timeout "$(limit 200)" "$run_gpu" "$work/gpt-$name" --data "$work/gpt.bin" --steps "$nsteps" --device "$device" \
          --bench-gemm -q 2>&1)
  rc=$?
  echo "$out"
  graphs=$(sed -n 's/.*graphs: \([0-9]*\) captured, \([0-9]*\) launches.*/\1 captured, \2 launched/p' <<<"$out")
  # the same without graphs, beside it (350M only: the 1.3B run is the budget's largest)
  nograph=""
  if [ "$name" = 350M ] && [ "$(limit 999)" -ge 60 ]; then
    out2=$(timeout "$(limit 200)" "$run_gpu" "$work/gpt-$name" --data "$work/gpt.bin" --steps "$nsteps" \
             --device "$device" --cuda-graphs off -q 2>&1)
    echo "$out2"
    ms2=$(grep ' steps, final loss ' <<<"$out2" | sed -n 's/.*, \([0-9.]*\) ms\/step.*/\1/p')
    [ -n "$ms2" ] && nograph="; graphs off: $ms2 ms/step"
  fi
  # the same model with cuBLASLt epilogues, beside it (350M only, while the budget allows)
  epi=""
  if [ "$name" = 350M ] && [ "$(limit 999)" -ge 60 ]; then
    # shellcheck disable=SC2086
    if "$pc" "$work/gpt.model" $defs --cluster models/clusters/h200.cluster --stages 1 --replicas 1 \
         --microbatch-size 8 --microbatches 1 --precision bf16 --gemm-epilogues on -o "$work/gpt-$name-epi" -q; then
      out3=$(timeout "$(limit 200)" "$run_gpu" "$work/gpt-$name-epi" --data "$work/gpt.bin" --steps "$nsteps" \
               --device "$device" -q 2>&1)
      echo "$out3"
      tok3=$(grep ' steps, final loss ' <<<"$out3" | sed -n 's/.* \([0-9.]*\) tok\/s.*/\1/p')
      epi="; --gemm-epilogues on: ${tok3:-failed} tok/s"
    fi
  fi
  summary=$(grep ' steps, final loss ' <<<"$out")
  gemm=$(grep 'cuBLAS .* GEMM ' <<<"$out")
  if [ $rc -ne 0 ] || [ -z "$summary" ] || [ -z "$gemm" ]; then
    echo "gpu-check: FAILED: GPT $name training (exit $rc)"; failed=1
    rows+=("| (d) GPT $name | run failed (exit $rc) | FAIL |"); continue
  fi
  tok=$(sed -n 's/.* \([0-9.]*\) tok\/s.*/\1/p' <<<"$summary")
  ms=$(sed -n 's/.*, \([0-9.]*\) ms\/step.*/\1/p' <<<"$summary")
  ach=$(sed -n 's/.* \([0-9.]*\) TFLOP\/s achieved.*/\1/p' <<<"$summary")
  peak=$(sed -n 's/.*: \([0-9.]*\) TFLOP\/s measured.*/\1/p' <<<"$gemm")
  shapeg=$(sed -n 's/.*GEMM \([0-9x]*\):.*/\1/p' <<<"$gemm")
  pct=$(sed -n 's/.* = \([0-9]*\)% of it.*/\1/p' <<<"$gemm")
  rows+=("| (d) GPT $name, b=8 T=1024, $nsteps steps, CUDA graphs (${graphs:-?}) | $tok tok/s, $ms ms/step, $ach TFLOP/s = $pct% of cuBLAS BF16 $shapeg ($peak TFLOP/s)$nograph$epi | ran |")
done

step "(d) attention kernels: B=8 T=1024 NH=16 hs=64 causal (tensor cores, bf16 operands)"
if [ "$(limit 999)" -lt 20 ]; then
  echo "skipped: the time budget is spent"; rows+=("| (d) attention kernels | skipped (time budget) | - |")
else
  att=$(timeout "$(limit 60)" "$build/bench/gpu/gpu_attention_bench" --device "$device" 2>&1)
  rc=$?
  echo "$att"
  fwd=$(sed -n 's/^attention fwd .*: \([0-9.]*\) ms, \([0-9.]*\) TFLOP\/s$/\2 TFLOP\/s (\1 ms)/p' <<<"$att")
  bwd=$(sed -n 's/^attention bwd .*: \([0-9.]*\) ms, \([0-9.]*\) TFLOP\/s$/\2 TFLOP\/s (\1 ms)/p' <<<"$att")
  if [ $rc -ne 0 ] || [ -z "$fwd" ] || [ -z "$bwd" ]; then
    echo "gpu-check: FAILED: gpu_attention_bench (exit $rc)"; failed=1
    rows+=("| (d) attention kernels | run failed (exit $rc) | FAIL |")
  else
    rows+=("| (d) attention B=8 T=1024 NH=16 hs=64 causal | forward $fwd, backward $bwd (FLOPs 4·B·NH·T²·hs/2, backward 2.5x) | ran |")
  fi
fi

step "(e) cuBLAS GEMM sweep for the planner's cost model (bench/gpu/gemm_sweep)"
outdir=${GPU_CHECK_OUT:-bench/gpu}
mkdir -p "$outdir"
if [ -x "$build/bench/gpu/gemm_sweep" ]; then
  peaks=()
  case "$(nvidia-smi -L 2>/dev/null | head -1)" in # dense peaks, as in models/clusters/h200*.cluster
    *H100*|*H200*) peaks=(--peak-fp32 67 --peak-tf32 494.5 --peak-bf16 989) ;;
  esac
  if sweep=$(timeout 300 "$build/bench/gpu/gemm_sweep" --device "$device" "${peaks[@]}" "$outdir/gemm-sweep.json"); then
    echo "$sweep"
    bf=$(grep '^bf16:' <<<"$sweep")
    rows+=("| (e) cuBLAS GEMM sweep ($outdir/gemm-sweep.json) | ${bf:-?} | ran |")
  else
    echo "gpu-check: FAILED: gemm_sweep"; failed=1; rows+=("| (e) cuBLAS GEMM sweep | failed | FAIL |")
  fi
else
  rows+=("| (e) cuBLAS GEMM sweep | $build/bench/gpu/gemm_sweep not built | - |")
fi

gpu=$(nvidia-smi -L 2>/dev/null | head -1)
commit=$(git rev-parse --short HEAD 2>/dev/null)
table=$(printf '| check | figure | result |\n|---|---|---|\n'; printf '%s\n' "${rows[@]}")
step "summary"
echo "$table"
outdir=${GPU_CHECK_OUT:-bench/gpu}
mkdir -p "$outdir"
{
  echo "# scripts/gpu-check.sh, $(date -u '+%F %T UTC')"
  echo
  echo "GPU: ${gpu:-unknown}; commit ${commit:-unknown} (plus uncommitted changes: $(git status --porcelain 2>/dev/null | wc -l) files); build $build"
  echo
  echo "$table"
} >"$outdir/.last-gpu-check.md.tmp" && mv "$outdir/.last-gpu-check.md.tmp" "$outdir/last-gpu-check.md"
echo "(written to $outdir/last-gpu-check.md)"

echo
if [ $failed -ne 0 ]; then echo "gpu-check: FAILED (see above)"; exit 1; fi
echo "gpu-check: all GPU checks passed"
exit 0
