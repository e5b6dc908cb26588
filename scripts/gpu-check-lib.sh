# scripts/gpu-check-lib.sh — scripts/gpu-check.sh's measurement table (issue 11, item 6):
# choosing the microbatch, reading the runs' output, and building the rows. Sourced by
# gpu-check.sh, and by tests/gpucheck/gpu_check_table.sh, which feeds it recorded and
# synthetic outputs without a GPU: the parsing the one device session depends on is
# tested where the code is written.
#
# The figures, per GPT shape at T=1024 (BF16 plans, FP32 master weights, one microbatch
# per step, CUDA graphs on):
#   tok/s, ms/step      pd2bw-cuda-train's steady-state summary (steps after the first);
#   MFU                 tok/s x (6N + 6·L·d·T) / 989e12: the llm.c/Megatron convention,
#                       N the plan's parameter count (plan.json stages[0].parameters,
#                       embeddings included), L layers, d width, T the sequence; the
#                       attention term is not halved for the causal mask; 989 TFLOP/s
#                       the H100/H200 dense BF16 peak (models/clusters/h200.cluster);
#   plan TFLOP/s        what pd2bw-cuda-train prints as "achieved": the plan's own FLOPs
#                       (the planner's per-op count, plan.json stages[i] fwd+bwd, causal
#                       attention halved) over the step time; it differs from the MFU
#                       figure by the convention, not by the measurement;
#   cuBLAS              --bench-gemm: cuBLAS BF16 on the model's MLP GEMM (b·T x 4d x d),
#                       timed in the same process after training;
#   attention           bench/gpu/gpu_attention_bench at B=b, NH=heads, hs=64, T=1024,
#                       causal (FlashAttention's FLOP convention, its header).
# Every function prints to stdout only what its caller reads; progress goes to stderr.

# What a device run executes, relative to the build directory: the one list gpu-check.sh
# (GPU_CHECK_PREBUILT=1) and gpu-carry.sh use, and tests/gpucheck/gpu_bins.sh checks
# against a CUDA build (a target that moves must move here too).
GC_BINS=(tools/pd2bwc tools/pd2bwrun tools/pd2bw-cuda-train tests/cuda/gpu_op_check tests/cuda/test_cuda_device
         bench/gpu/gpu_attention_bench bench/gpu/gemm_sweep bench/gpu/gpu_nccl_check)
# gc_missing_bins BUILD: prints each BUILD/entry of GC_BINS that is not an executable there,
# one per line; status 1 when there is any.
gc_missing_bins() {
  local b st=0
  for b in "${GC_BINS[@]}"; do [ -x "$1/$b" ] || { echo "$1/$b"; st=1; }; done
  return $st
}

GC_PEAK_TFLOPS=989 # H100/H200 SXM dense BF16 (models/clusters/h200.cluster tflops_bf16)

# The three shapes: NAME:LAYERS:DIM:HEADS (head size 64 each).
GC_SHAPES=("124M:12:768:12" "350M:24:1024:16" "1.3B:24:2048:32")

# gc_model FILE B: models/gpt.model with a global batch of one microbatch of B (its own
# 512 would make a step 512/B microbatches long).
gc_model() { sed "s/^\(  *\)batch = 512;/\1batch = $2;/" models/gpt.model >"$1"; }

# gc_plan PD2BWC WORK L D H B [FLAG...]: a one-stage BF16 plan of the shape at
# microbatch B on the H200 cluster file into WORK/gpt-LxD-bB (printed; with extra
# pd2bwc flags, a variant: WORK/gpt-LxD-bB-v). pd2bwc exits 1 when the plan's exact
# arena is over the device's memory (the planner's check; --allow-over is not given),
# so a refused B costs no device time.
gc_plan() {
  local pc=$1 work=$2 L=$3 D=$4 H=$5 b=$6
  shift 6
  local dir="$work/gpt-${L}x$D-b$b${1:+-v}"
  gc_model "$work/gpt-b$b.model" "$b"
  "$pc" "$work/gpt-b$b.model" -D "layers=$L" -D "dim=$D" -D "heads=$H" --cluster models/clusters/h200.cluster \
    --stages 1 --replicas 1 --microbatch-size "$b" --microbatches 1 --precision bf16 "$@" -o "$dir" -q >/dev/null 2>&1 ||
    return 1
  echo "$dir"
}

# gc_pick_b PD2BWC WORK L D H [START [MAX]]: the largest power-of-two microbatch whose
# plan fits (doubling from START, default 8, up to MAX, default 64; halving down to 1
# when START does not fit); prints it (0: not even 1 fits). Its plan stays in
# WORK/gpt-LxD-bB. The steps of the search go to stderr.
gc_pick_b() {
  local pc=$1 work=$2 L=$3 D=$4 H=$5 b=${6:-8} max=${7:-64} best=0
  if gc_plan "$pc" "$work" "$L" "$D" "$H" "$b" >/dev/null; then
    best=$b
    echo "  b=$b fits" >&2
    while [ $((best * 2)) -le "$max" ]; do
      if gc_plan "$pc" "$work" "$L" "$D" "$H" $((best * 2)) >/dev/null; then
        best=$((best * 2)); echo "  b=$best fits" >&2
      else
        echo "  b=$((best * 2)) is over the device's memory (pd2bwc)" >&2; break
      fi
    done
  else
    echo "  b=$b is over the device's memory (pd2bwc)" >&2
    while [ "$b" -gt 1 ]; do
      b=$((b / 2))
      if gc_plan "$pc" "$work" "$L" "$D" "$H" "$b" >/dev/null; then best=$b; echo "  b=$b fits" >&2; break; fi
      echo "  b=$b is over the device's memory (pd2bwc)" >&2
    done
  fi
  echo "$best"
}

# The Llama row (issue 25, item 7): models/llama.model at a 1B-class shape (Llama 3.2
# 1B's 16 layers of width 2048, 32 query heads over 8 key/value heads, SwiGLU 8192 and
# vocabulary 128256, head untied) at T=2048, as a one-stage BF16 plan on the h200
# cluster: grouped-query attention on the tensor-core kernels
# (pkc_flash_attention_gqa_*_bf16), every GEMM bf16.
GC_LLAMA_ARGS=(-D layers=16 -D dim=2048 -D heads=32 -D kv_heads=8 -D ffn=8192 -D vocab=128256 -D seq=2048
               -D rope_theta=500000)
GC_LLAMA_L=16 GC_LLAMA_D=2048 GC_LLAMA_T=2048

# gc_llama_plan PD2BWC WORK b: that plan at microbatch b (one microbatch a step) into
# WORK/llama-1b-bB; prints the directory, status 1 when pd2bwc refuses it (over memory).
gc_llama_plan() {
  local pc=$1 work=$2 b=$3 dir="$2/llama-1b-b$3"
  "$pc" models/llama.model "${GC_LLAMA_ARGS[@]}" -D "train.batch=$b" -D "train.microbatch=$b" \
    --cluster models/clusters/h200.cluster --stages 1 --replicas 1 --microbatch-size "$b" --microbatches 1 \
    --precision bf16 -o "$dir" -q >/dev/null 2>&1 || return 1
  echo "$dir"
}

# gc_llama_pick_b PD2BWC WORK [MAX]: the largest power-of-two microbatch from 1 up to MAX
# (default 16) whose Llama plan fits; prints it (0: not even 1). Steps to stderr.
gc_llama_pick_b() {
  local pc=$1 work=$2 max=${3:-16} b=1 best=0
  while [ "$b" -le "$max" ]; do
    if gc_llama_plan "$pc" "$work" "$b" >/dev/null; then
      best=$b; echo "  llama b=$b fits" >&2
    else
      echo "  llama b=$b is over the device's memory (pd2bwc)" >&2; break
    fi
    b=$((b * 2))
  done
  echo "$best"
}

# gc_params PLAN_DIR: the plan's parameter count (plan.json stages[0].parameters).
gc_params() {
  sed -n 's/.*"parameters":[[:space:]]*\([0-9][0-9]*\).*/\1/p' "$1/plan.json" | head -1
}

# gc_train_parse OUT: reads pd2bw-cuda-train's summary and --bench-gemm lines into
# gc_tok, gc_ms, gc_plan_tflops, gc_cublas (TFLOP/s), gc_cublas_shape (MxNxK); status 1
# when the summary is missing (each empty then).
gc_train_parse() {
  local out=$1 summary gemm
  summary=$(grep ' steps, final loss ' <<<"$out" | tail -1)
  gemm=$(grep 'cuBLAS .* GEMM [0-9x]*: ' <<<"$out" | tail -1)
  gc_tok=$(sed -n 's/.* \([0-9.][0-9.]*\) tok\/s.*/\1/p' <<<"$summary")
  gc_ms=$(sed -n 's/.*, \([0-9.][0-9.]*\) ms\/step.*/\1/p' <<<"$summary")
  gc_plan_tflops=$(sed -n 's/.* \([0-9.][0-9.]*\) TFLOP\/s achieved.*/\1/p' <<<"$summary")
  gc_cublas=$(sed -n 's/.*: \([0-9.][0-9.]*\) TFLOP\/s measured.*/\1/p' <<<"$gemm")
  gc_cublas_shape=$(sed -n 's/.*GEMM \([0-9x][0-9x]*\):.*/\1/p' <<<"$gemm")
  [ -n "$gc_tok" ] && [ -n "$gc_ms" ] && [ -n "$gc_plan_tflops" ]
}

# gc_log_parse LOG: the same figures from a --log-json file, for a run that `timeout`
# stopped before its summary: steps 2.. of the log (the first pays for NVRTC and
# cuBLAS's first calls), tokens per step from its first line; no cuBLAS figure (that
# comes after training). Status 1 with fewer than 2 steps logged.
gc_log_parse() {
  local f
  f=$(awk -F'[:,}]' '
    { for (i = 1; i < NF; i++) { k = $i; gsub(/[ "{]/, "", k); v[k] = $(i + 1) + 0 } }
    NR == 1 { per_step = v["tokens_per_s"] * v["ms"] / 1000; next }
    { ms += v["ms"]; gf += v["gflops"]; n++ }
    END { if (n < 1 || ms <= 0) exit 1; printf "%.0f %.1f %.2f %d\n", per_step * n * 1000 / ms, ms / n, gf / n / 1000, n + 1 }' "$1" 2>/dev/null) ||
    return 1
  read -r gc_tok gc_ms gc_plan_tflops gc_logged <<<"$f"
  gc_cublas="" gc_cublas_shape=""
}

# gc_mfu TOK N L D T: MFU in percent, one decimal (6N + 6·L·d·T FLOPs per token over
# GC_PEAK_TFLOPS).
gc_mfu() {
  awk -v tok="$1" -v n="$2" -v l="$3" -v d="$4" -v t="$5" -v peak="$GC_PEAK_TFLOPS" \
    'BEGIN { printf "%.1f\n", 100 * tok * (6 * n + 6 * l * d * t) / (peak * 1e12) }'
}

# gc_out_of_memory OUT: whether a run failed for want of device memory (the planner's
# arena estimate was short): gpu-check then halves b once.
gc_out_of_memory() { grep -qiE 'out of memory|cannot allocate the stage arena|CUDA_ERROR_OUT_OF_MEMORY|ALLOC_FAILED' <<<"$1"; }

# gc_attention_parse OUT: gpu_attention_bench's two lines into gc_att_fwd and
# gc_att_bwd ("X TFLOP/s (Y ms)"); status 1 when either is missing.
gc_attention_parse() {
  gc_att_fwd=$(sed -n 's/^attention fwd .*: \([0-9.]*\) ms, \([0-9.]*\) TFLOP\/s$/\2 TFLOP\/s (\1 ms)/p' <<<"$1")
  gc_att_bwd=$(sed -n 's/^attention bwd .*: \([0-9.]*\) ms, \([0-9.]*\) TFLOP\/s$/\2 TFLOP\/s (\1 ms)/p' <<<"$1")
  [ -n "$gc_att_fwd" ] && [ -n "$gc_att_bwd" ]
}

# The item-6 table: its header, and one row per shape.
gc_table_header() {
  echo "| shape (T=1024, BF16 plan) | b (largest that fits) | tok/s | ms/step | MFU (6N+6·L·d·T, 989 TFLOP/s) | plan TFLOP/s | cuBLAS BF16 MLP GEMM | attention fwd | attention bwd |"
  echo "|---|---|---|---|---|---|---|---|---|"
}
# gc_table_row NAME L D H B N STATUS [ATT_FWD ATT_BWD]: after gc_train_parse (STATUS
# "ran"), or a row that says why there is no figure (STATUS: the reason).
gc_table_row() {
  local name=$1 L=$2 D=$3 H=$4 b=$5 n=$6 status=$7 fwd=${8:--} bwd=${9:--}
  if [ "$status" != ran ]; then
    echo "| GPT $name ($L x $D, $H heads) | ${b:--} | $status | - | - | - | - | $fwd | $bwd |"
    return
  fi
  local mfu
  mfu=$(gc_mfu "$gc_tok" "$n" "$L" "$D" 1024)
  local cub="-"
  [ -n "$gc_cublas" ] && cub="$gc_cublas TFLOP/s ($gc_cublas_shape)"
  echo "| GPT $name ($L x $D, $H heads) | $b | $gc_tok | $gc_ms | $mfu% | $gc_plan_tflops | $cub | $fwd | $bwd |"
}

# gc_ncu_table CSV: ncu's raw per-launch CSV (--csv --page raw --print-units base
# --metrics gpu__time_duration.sum: a header row, a units row, one row per kernel
# launch) as the table cuda_exec_kprof.c writes (runtime/cuda/exec/): the ten kernels
# with the most GPU time, one row for the rest, shares of the total to 0.1%.
gc_ncu_table() {
  awk '
    # the fields of one CSV line, quotes removed (kernel names hold commas: templates)
    function csv(line, f,    n, i, c, q, cur) {
      n = 0; q = 0; cur = ""
      for (i = 1; i <= length(line); i++) {
        c = substr(line, i, 1)
        if (c == "\"") { if (q && substr(line, i + 1, 1) == "\"") { cur = cur c; i++ } else q = !q }
        else if (c == "," && !q) { f[++n] = cur; cur = "" }
        else cur = cur c
      }
      f[++n] = cur
      return n
    }
    { sub(/\r$/, "") }
    /^==/ { next } # the ==PROF== lines of ncu when they share the stream
    !hdr { nf = csv($0, f); for (i = 1; i <= nf; i++) { if (f[i] == "Kernel Name") kc = i; if (f[i] == "gpu__time_duration.sum") tc = i }
           if (!kc || !tc) { print "gc_ncu_table: no Kernel Name / gpu__time_duration.sum column" > "/dev/stderr"; bad = 1; exit 1 }
           hdr = 1; units = 1; next }
    units { units = 0; next } # the units row (nsecond with --print-units base)
    { csv($0, f); k = f[kc]; t = f[tc] + 0; ms[k] += t / 1e6; calls[k]++; total += t / 1e6; n++ }
    END {
      if (bad) exit 1
      if (!n || total <= 0) { print "gc_ncu_table: no kernel rows" > "/dev/stderr"; exit 1 }
      m = 0; for (k in ms) names[++m] = k
      for (i = 2; i <= m; i++) { x = names[i]; j = i - 1
        while (j > 0 && (ms[names[j]] < ms[x] || (ms[names[j]] == ms[x] && names[j] > x))) { names[j + 1] = names[j]; j-- }
        names[j + 1] = x }
      printf "<!-- kernel profile (Nsight Compute, gpu__time_duration.sum): %d launches of %d kernels, %.3f ms of GPU time -->\n\n", n, m, total
      print "| kernel | calls | ms | share |"; print "|---|---|---|---|"
      for (i = 1; i <= m; i++) {
        if (i <= 10) printf "| %s | %d | %.3f | %.1f%% |\n", names[i], calls[names[i]], ms[names[i]], 100 * ms[names[i]] / total
        else { rc += calls[names[i]]; rm += ms[names[i]] } }
      if (m > 10) printf "| (%d other kernels) | %d | %.3f | %.1f%% |\n", m - 10, rc, rm, 100 * rm / total
    }' "$1"
}

# gc_find_nccl: whether libnccl.so.2 can be loaded (PD2BW_LIBNCCL, the loader's paths,
# the toolkit's lib folders, the nvidia-nccl-cu13 wheel's); exports PD2BW_LIBNCCL when
# it is found outside the loader's paths. Sets gc_nccl_where to where, or why not.
# (Not in a subshell: the export must reach the caller.)
gc_find_nccl() {
  if [ -n "${PD2BW_LIBNCCL:-}" ]; then
    gc_nccl_where="PD2BW_LIBNCCL=$PD2BW_LIBNCCL"
    [ -f "$PD2BW_LIBNCCL" ] && return 0
    gc_nccl_where="PD2BW_LIBNCCL=$PD2BW_LIBNCCL is not a file"; return 1
  fi
  gc_nccl_where="libnccl.so.2 on the loader's path"
  # (the cache's list whole, then grep: under the caller's pipefail an early grep -q
  # would end ldconfig with SIGPIPE and miss a library that is there)
  grep -q 'libnccl\.so\.2 ' <<<"$(ldconfig -p 2>/dev/null)" && return 0
  local f wheel
  wheel=$(python3 -c 'import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null)
  for f in /usr/local/cuda*/lib*/libnccl.so.2 /usr/lib/x86_64-linux-gnu/libnccl.so.2 ${wheel:+"$wheel/lib/libnccl.so.2"}; do
    if [ -f "$f" ]; then export PD2BW_LIBNCCL=$f; gc_nccl_where="PD2BW_LIBNCCL=$f"; return 0; fi
  done
  gc_nccl_where="no libnccl.so.2 (not on the loader's path, in /usr/local/cuda*/lib*, nor a nvidia-nccl-cu13 wheel)"
  return 1
}

# The per-shape results gpu-check.sh fills (by shape name) and the report reads.
declare -A D_b D_n D_plan D_tok D_ms D_pt D_cub D_cubs D_status A_fwd A_bwd

# gc_item6_table: the table, one row per GC_SHAPES entry, from D_* and A_*.
gc_item6_table() {
  local spec name L D H
  gc_table_header
  for spec in "${GC_SHAPES[@]}"; do
    IFS=: read -r name L D H <<<"$spec"
    gc_tok=${D_tok[$name]:-} gc_ms=${D_ms[$name]:-} gc_plan_tflops=${D_pt[$name]:-}
    gc_cublas=${D_cub[$name]:-} gc_cublas_shape=${D_cubs[$name]:-}
    gc_table_row "$name" "$L" "$D" "$H" "${D_b[$name]:-}" "${D_n[$name]:-}" "${D_status[$name]:-not run}" \
      "${A_fwd[$name]:--}" "${A_bwd[$name]:--}"
  done
}

# gc_report GPU COMMIT DIRTY BUILD SECONDS: the whole result as a section of
# bench/gpu/RESULTS.md (its format: a dated heading, what ran, the tables), from the
# item-6 arrays, kprof_table/kprof_how/GPU_CHECK_PROFILE_SHAPE, rows (the checks) and
# step_times. gpu-check.sh writes it to $GPU_CHECK_OUT/last-gpu-check.md.
gc_report() {
  local gpu=$1 commit=$2 dirty=$3 build=$4 secs=$5 pname=${GPU_CHECK_PROFILE_SHAPE:-350M}
  echo "## $(date -u '+%F'), one GPU (\`nvidia-smi -L\`: \"$gpu\"), scripts/gpu-check.sh"
  echo
  echo "Commit $commit (plus $dirty uncommitted files), build $build; $(date -u '+%T UTC'); the whole script took $secs s."
  echo
  echo "### GPT training at T=1024, each shape at the largest microbatch that fits (issue 11, item 6)"
  echo
  gc_item6_table
  echo
  echo "MFU = tok/s × (6N + 6·L·d·T) / $GC_PEAK_TFLOPS TFLOP/s (the llm.c/Megatron convention: N the plan's"
  echo "parameters, embeddings included; L layers, d width, T = 1024; the attention term not halved for"
  echo "the causal mask; $GC_PEAK_TFLOPS the dense BF16 peak). \"plan TFLOP/s\" is pd2bw-cuda-train's \"achieved\":"
  echo "the plan's own FLOPs (the planner's per-op count, causal attention halved) over the step time."
  echo "b: the largest power of two whose plan pd2bwc fits in the H200's memory. cuBLAS: --bench-gemm"
  echo "on the MLP GEMM (b·T × 4d × d), same process. Attention: bench/gpu/gpu_attention_bench at B=b,"
  echo "NH=heads, hs=64, causal, FLOPs 4·B·NH·T²·hs/2 (backward 2.5×)."
  echo
  echo "### Per-kernel GPU time, GPT $pname at b=${D_b[$pname]:-?}${kprof_how:+ ($kprof_how)}"
  echo
  echo "${kprof_table:-(not measured)}"
  echo
  echo "### Checks"
  echo
  printf '| check | figure | result |\n|---|---|---|\n'
  [ ${#rows[@]} -gt 0 ] && printf '%s\n' "${rows[@]}"
  echo
  echo "### Time per step"
  echo
  printf '| step | elapsed |\n|---|---|\n'
  [ ${#step_times[@]} -gt 0 ] && printf '%s\n' "${step_times[@]}"
  return 0
}
