#!/usr/bin/env bash
# tests/gpucheck/gpu_check_table.sh — scripts/gpu-check-lib.sh without a GPU: what the one
# device session's table is built from, fed recorded and synthetic outputs.
#  - the training summary (train-350M.out: the 2026-11-30 H200 run's lines) parses
#    into tok/s, ms/step, plan TFLOP/s and cuBLAS's rate; MFU = tok/s x (6N + 6LdT) /
#    989e12 against a figure worked by hand; gpu_attention_bench's lines parse;
#  - a summary without its numbers is refused (no row of blanks); a run that timeout
#    stopped is read from its --log-json (train-timeout.jsonl): steps 2.. only;
#  - ncu's raw CSV (ncu-raw.csv: quoted names with commas, the units row, ==PROF==
#    lines) becomes the table cuda_exec_kprof.c writes: the ten kernels with the most
#    time in descending order, launches of one kernel summed, one "(N other kernels)"
#    row, shares adding up to 100%;
#  - the microbatch search with the real pd2bwc: the b it picks fits and 2b does not
#    (pd2bwc refuses it), from 8 upward and from 64 downward; the same for the Llama
#    row's 1B-class plan (its parameters, its GQA on the tensor-core kernels);
#  - the report (gc_report): a RESULTS.md section whose item-6 table has the header
#    and one row per shape, 9 columns each, a skipped shape saying so.
#   gpu_check_table.sh PD2BWC     (run in the source tree)
set -u
PC=$1
. scripts/gpu-check-lib.sh
pass=0 fail=0
check() { # NAME STATUS DETAIL
  if [ "$2" -eq 0 ]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL $1: $3" >&2; fi
}
dir=tests/gpucheck
work=$(mktemp -d /tmp/pd2bw-test-gpucheck-XXXXXX)
trap 'rm -rf "$work"' EXIT

# ---- the training summary and the MFU ------------------------------------------------
gc_train_parse "$(cat $dir/train-350M.out)"
check "parse status" $? ""
got="$gc_tok|$gc_ms|$gc_plan_tflops|$gc_cublas|$gc_cublas_shape"
echo "350M summary: $got"
[ "$got" = "3829|2139.4|8.81|644.01|8192x4096x1024" ]
check "parse fields" $? "$got"
# 350M: N = 24 (12 d^2 + 13 d) + (50257 + 1024) d + 2d = 354,871,296 at d = 1024;
# 6N + 6 L d T = 2,129,227,776 + 150,994,944 = 2,280,222,720 FLOPs per token;
# x 3829 tok/s = 8.731 TFLOP/s = 0.883% of 989 TFLOP/s
mfu=$(gc_mfu 3829 354871296 24 1024 1024)
echo "MFU: $mfu%"
[ "$mfu" = 0.9 ]
check "mfu" $? "$mfu"
# 124M at 100k tok/s: (6 x 124,475,904 + 6 x 12 x 768 x 1024) x 1e5 = 8.03e13 = 8.1% of 989e12
mfu=$(gc_mfu 100000 124475904 12 768 1024)
[ "$mfu" = 8.1 ]
check "mfu 124M" $? "$mfu"
gc_train_parse "pd2bw-cuda-train: 8 steps, final loss 11.0328, ms/step, tok/s"
[ $? -ne 0 ]
check "a summary without numbers is refused" $? "parsed: $gc_tok $gc_ms"
# a run stopped by timeout: steps 2..3 of its log (65536 tokens a step, 4200 ms)
gc_log_parse $dir/train-timeout.jsonl
check "log status" $? ""
[ "$gc_tok|$gc_ms|$gc_plan_tflops|$gc_logged|$gc_cublas" = "31208|2100.0|19.00|3|" ]
check "log fields" $? "$gc_tok|$gc_ms|$gc_plan_tflops|$gc_logged|$gc_cublas"
head -1 $dir/train-timeout.jsonl >"$work/one.jsonl"
gc_log_parse "$work/one.jsonl"
[ $? -ne 0 ]
check "a log of one step is not a rate" $? "$gc_tok"
gc_attention_parse "$(cat $dir/attention.out)"
check "attention status" $? ""
[ "$gc_att_fwd|$gc_att_bwd" = "166.8 TFLOP/s (0.412 ms)|112.3 TFLOP/s (1.530 ms)" ]
check "attention fields" $? "$gc_att_fwd|$gc_att_bwd"
# the GPU table's alloc message (runtime/cuda/cuda_device.c d_alloc) is recognised; another error is not
gc_out_of_memory "pd2bw-cuda-train: error: cuda backend: cannot allocate the stage arena of 141733920768 bytes (132.00 GiB) on device 0 (NVIDIA H200, 139.80 GiB): CUDA_ERROR_OUT_OF_MEMORY"
check "out of memory seen" $? ""
gc_out_of_memory "pd2bw-cuda-train: error: stage0.launch.json: kernel pkc_x is not in the compiled stage program"
[ $? -ne 0 ]
check "another error is not out of memory" $? ""

# ---- ncu's CSV as the kernel-profile table ------------------------------------------
tab=$(gc_ncu_table $dir/ncu-raw.csv)
check "ncu table status" $? ""
echo "$tab"
rows=$(grep -c '^| ' <<<"$tab")
[ "$rows" -eq 12 ] # header + 10 kernels + others (the rule is |---)
check "ncu rows" $? "$rows"
sed -n 3p <<<"$tab" | grep -qx '| kernel | calls | ms | share |'
check "ncu header" $? "$tab"
sed -n 5p <<<"$tab" | grep -qx '| pkc_flash_attention_bwd_dkv_bf16 | 2 | 5.320 | 56.6% |'
check "ncu top row sums the launches" $? "$(sed -n 5p <<<"$tab")"
grep -q '^| void splitKreduce_kernel<32, 16, int, float, __nv_bfloat16>(cublasSplitKParams<float>, const float\*, __nv_bfloat16\*) | 1 | 0.090 | 1.0% |' <<<"$tab"
check "ncu quoted name with commas" $? ""
tail -1 <<<"$tab" | grep -qx '| (3 other kernels) | 3 | 0.092 | 1.0% |'
check "ncu others row" $? "$(tail -1 <<<"$tab")"
sum=$(awk -F'|' 'NR > 4 { gsub(/[ %]/, "", $5); s += $5 } END { printf "%.1f", s }' <<<"$tab")
awk -v s="$sum" 'BEGIN { exit !(s >= 99.5 && s <= 100.5) }'
check "ncu shares sum to 100%" $? "$sum"
sorted=$(awk -F'|' 'NR > 4 && $2 !~ /other kernels/ { print $4 + 0 }' <<<"$tab" | sort -gr | tr '\n' ' ')
[ "$sorted" = "$(awk -F'|' 'NR > 4 && $2 !~ /other kernels/ { print $4 + 0 }' <<<"$tab" | tr '\n' ' ')" ]
check "ncu rows in descending order" $? "$sorted"
printf '"ID","Kernel Name"\n"","x"\n' >"$work/bad.csv"
gc_ncu_table "$work/bad.csv" >/dev/null 2>&1
[ $? -ne 0 ]
check "ncu CSV without the metric refused" $? ""

# ---- the microbatch search (the real planner) ---------------------------------------
for start in 8 64; do
  b=$(gc_pick_b "$PC" "$work" 24 2048 32 "$start" 2>"$work/search.txt")
  cat "$work/search.txt"
  echo "GPT 1.3B from b=$start: b=$b"
  [ "$b" -ge 1 ] && [ -f "$work/gpt-24x2048-b$b/plan.json" ] && ! gc_plan "$PC" "$work" 24 2048 32 $((b * 2)) >/dev/null
  check "1.3B from $start: b fits, 2b does not" $? "b=$b"
done
n=$(gc_params "$work/gpt-24x2048-b$b")
[ "${n:-0}" -gt 1300000000 ] && [ "$n" -lt 1320000000 ]
check "plan parameters" $? "$n"

# ---- the Llama row's plan (the real planner): a b that fits (up to 16), 2b over memory
# or the cap; the 1B-class shape's parameters (1,498,482,688, head untied); attention
# on the tensor-core GQA kernels in its BF16 launch list ----------------------------
b=$(gc_llama_pick_b "$PC" "$work" 16 2>"$work/search.txt")
cat "$work/search.txt"
echo "Llama 1B-class: b=$b"
[ "$b" -ge 1 ] && [ -f "$work/llama-1b-b$b/plan.json" ] &&
  { [ "$b" -eq 16 ] || ! gc_llama_plan "$PC" "$work" $((b * 2)) >/dev/null; }
check "llama: b fits, 2b does not" $? "b=$b"
n=$(gc_params "$work/llama-1b-b$b")
[ "${n:-0}" -eq 1498482688 ]
check "llama plan parameters" $? "$n"
grep -q pkc_flash_attention_gqa_bwd_dkv_bf16 "$work/llama-1b-b$b/stage0.launch.json"
check "llama attention on tensor cores" $? "no pkc_flash_attention_gqa_bwd_dkv_bf16 in its launch list"

# ---- the report ----------------------------------------------------------------------
gc_train_parse "$(cat $dir/train-350M.out)"
D_b[124M]=64 D_n[124M]=124475904 D_status[124M]=ran D_tok[124M]=100000 D_ms[124M]=655.4 D_pt[124M]=95.1
D_cub[124M]=700.5 D_cubs[124M]=65536x3072x768 A_fwd[124M]="150.0 TFLOP/s (1.1 ms)" A_bwd[124M]="100.0 TFLOP/s (4.2 ms)"
D_b[350M]=32 D_n[350M]=354871296 D_status[350M]=ran D_tok[350M]=$gc_tok D_ms[350M]=$gc_ms D_pt[350M]=$gc_plan_tflops
D_cub[350M]=$gc_cublas D_cubs[350M]=$gc_cublas_shape
D_b[1.3B]=32 D_status[1.3B]="skipped (time budget)"
kprof_table=$tab kprof_how="ncu" rows=("| (a) every CUDA op vs the CPU op | within the bounds | PASS |") step_times=("| (d) x | 12 s |")
rep=$(gc_report "NVIDIA H200" abc1234 0 build-gpu 321)
echo "$rep"
t6=$(sed -n '/^### GPT training/,/^MFU = /p' <<<"$rep" | grep '^|')
[ "$(wc -l <<<"$t6")" -eq 5 ]
check "report: header, rule, 3 rows" $? "$t6"
cols=$(awk -F'|' '{ print NF - 2 }' <<<"$t6" | sort -u | tr '\n' ' ')
[ "$cols" = "9 " ]
check "report: 9 columns in every row" $? "$cols"
grep -qx '| GPT 124M (12 x 768, 12 heads) | 64 | 100000 | 655.4 | 8.1% | 95.1 | 700.5 TFLOP/s (65536x3072x768) | 150.0 TFLOP/s (1.1 ms) | 100.0 TFLOP/s (4.2 ms) |' <<<"$t6"
check "report: the 124M row" $? "$t6"
grep -qx '| GPT 350M (24 x 1024, 16 heads) | 32 | 3829 | 2139.4 | 0.9% | 8.81 | 644.01 TFLOP/s (8192x4096x1024) | - | - |' <<<"$t6"
check "report: the 350M row" $? "$t6"
grep -qx '| GPT 1.3B (24 x 2048, 32 heads) | 32 | skipped (time budget) | - | - | - | - | - | - |' <<<"$t6"
check "report: a skipped shape" $? "$t6"
grep -q '^## .*, one GPU (`nvidia-smi -L`: "NVIDIA H200"), scripts/gpu-check.sh$' <<<"$rep" &&
  grep -q '^### Per-kernel GPU time, GPT 350M at b=32 (ncu)$' <<<"$rep" && grep -q '^| (d) x | 12 s |$' <<<"$rep"
check "report: headings and the step times" $? ""

# ---- libnccl on the loader's path, under the script's pipefail ------------------------
# A stand-in ldconfig whose cache lists 20,000 libraries with libnccl.so.2 first: the
# lookup must say it found it on the loader's path. (It read `ldconfig -p | grep -q`,
# which under pipefail fails the pipeline when grep leaves before ldconfig is done.)
mkdir -p "$work/bin"
cat >"$work/bin/ldconfig" <<'SH'
#!/usr/bin/env bash
echo "20001 libs found in cache \`/etc/ld.so.cache'"
printf '\tlibnccl.so.2 (libc6,x86-64) => /opt/nccl/lib/libnccl.so.2\n'
for i in $(seq 20000); do printf '\tlibfake%d.so.1 (libc6,x86-64) => /usr/lib/libfake%d.so.1\n' "$i" "$i"; done
SH
chmod +x "$work/bin/ldconfig"
where=$(set -o pipefail; unset PD2BW_LIBNCCL; PATH="$work/bin:$PATH"; gc_find_nccl; echo "$?: $gc_nccl_where")
[ "$where" = "0: libnccl.so.2 on the loader's path" ]
check "libnccl found on the loader's path under pipefail" $? "$where"

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
